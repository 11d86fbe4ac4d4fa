"""Tolerant intake: raw webhook bytes become an `Incoming`, whatever GitHub leaves out or adds."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from nkibot.handlers import Facts, Needs, Policy, decide, read_event, screen
from nkibot.handlers.decision import Decision
from nkibot.handlers.intake import NEEDED
from tests.fakes.github_fixtures import TEST_APP_ID, WEBHOOK_FIXTURES, load_webhook

POLICY = Policy(app_id=TEST_APP_ID)
#: The fixtures of actions nkibot acts on: each must reach `decide`.
ACTED = ["issue_comment_created_issue", "issue_comment_created_pr", "issues_labeled",
         "pull_request_labeled", "check_run_rerequested", "check_run_requested_action",
         "check_suite_rerequested", "issues_edited"]
GHES = sorted(p.name for p in WEBHOOK_FIXTURES.iterdir() if p.name.startswith("ghes_"))
#: Subscribed events, actions nkibot does not act on: ignored by name, never "missing".
NOT_ACTED = ["issue_comment_edited", "issue_comment_deleted", "issues_opened", "issues_closed",
             "issues_unlabeled", "pull_request_opened", "pull_request_closed",
             "pull_request_reopened", "pull_request_synchronize", "pull_request_unlabeled",
             "check_run_created", "check_run_completed", "check_suite_completed",
             "check_suite_requested", "installation", "installation_repositories"]


def fixture(scenario: str) -> tuple[str, dict[str, Any]]:
    headers, body = load_webhook(scenario)
    return headers["x-github-event"], json.loads(body)


def read(event: str, payload: Any) -> Any:
    return read_event(event, "d1", json.dumps(payload).encode())


def paths(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of a JSON object, parents before children."""
    if not isinstance(value, dict):
        return []
    out: list[tuple[str, ...]] = []
    for key, inner in value.items():
        out.append((*prefix, key))
        out.extend(paths(inner, (*prefix, key)))
    return out


def without(payload: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out = copy.deepcopy(payload)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return out


def needed(event: str, action: str) -> tuple[str, ...]:
    return ("repository.full_name", "installation.id", "sender.login", *NEEDED[(event, action)])


class TestSubscribedEvents:
    def test_every_subscribed_event_has_fixtures(self) -> None:
        """Each event in app.yml has at least one payload written from GitHub's documentation."""
        manifest = yaml.safe_load((Path(__file__).parents[2] / "app.yml").read_text())
        events = {fixture(s)[0] for s in ACTED + NOT_ACTED}
        assert set(manifest["default_events"]) <= events

    @pytest.mark.parametrize("scenario", ACTED + GHES)
    def test_acted_on_payloads_reach_decide(self, scenario: str) -> None:
        """Every action nkibot acts on, from github.com and GHES 3.x, passes screen to decide."""
        event, payload = fixture(scenario)
        inc = read(event, payload)
        assert inc.missing is None
        assert isinstance(screen(inc, POLICY), Needs), screen(inc, POLICY)
        assert isinstance(decide(inc, Facts(permission="write", sha="a" * 40), POLICY), Decision)

    @pytest.mark.parametrize("scenario", NOT_ACTED)
    def test_other_actions_ignored_by_name(self, scenario: str) -> None:
        """Actions nkibot does not act on are ignored with their name, never counted as drops."""
        event, payload = fixture(scenario)
        inc = read(event, payload)
        result = screen(inc, POLICY)
        assert inc.missing is None
        assert isinstance(result, Decision) and result.kind == "ignore"
        assert payload["action"] in result.reason

    @pytest.mark.parametrize("scenario", GHES)
    def test_ghes_shapes_read_like_github_com(self, scenario: str) -> None:
        """An older GHES 3.x shape yields the same Incoming as its github.com counterpart."""
        event, payload = fixture(scenario)
        twin = scenario.split("_", 3)[3]
        twin = {"issue_comment_created": "issue_comment_created_issue"}.get(twin, twin)
        # The event key digests the signed body, which differs between the two shapes.
        assert (dataclasses.replace(read(event, payload), event_key="")
                == dataclasses.replace(read(*fixture(twin)), event_key=""))

    def test_event_key_comes_from_the_signed_body(self) -> None:
        """The event's identity is what the signature covers: a comment's id and command,
        or the whole body; the unsigned delivery id plays no part."""
        event, payload = fixture("issue_comment_created_issue")
        raw = json.dumps(payload).encode()
        first, replay = read_event(event, "d1", raw), read_event(event, "d-fresh", raw)
        assert first.event_key == replay.event_key and first.identity == replay.identity
        assert first.event_key.startswith(f"comment:{payload['comment']['id']}:")
        payload["comment"]["id"] += 1
        assert read(event, payload).event_key != first.event_key
        event, labeled = fixture("issues_labeled")
        raw = json.dumps(labeled).encode()
        assert read_event(event, "a", raw).event_key == read_event(event, "b", raw).event_key
        labeled["issue"]["updated_at"] = "2030-01-01T00:00:00Z"
        assert read(event, labeled).event_key != read_event(event, "a", raw).event_key

    def test_check_suite_fields(self) -> None:
        """check_suite.rerequested carries the suite id, its App and its head SHA."""
        event, payload = fixture("check_suite_rerequested")
        inc = read(event, payload)
        suite = payload["check_suite"]
        assert (inc.kind, inc.check_suite_id, inc.check_run_app_id, inc.head_sha) == (
            "check_suite", suite["id"], TEST_APP_ID, suite["head_sha"])


#: Fields whose absence is a normal delivery that asks for nothing: an `issues.edited`
#: without `changes.body` edited the title or labels, so no dashboard box changed.
NOTHING_TO_DO: dict[tuple[str, str], tuple[str, ...]] = {("issues", "edited"): ("changes",)}


def quiet(event: str, action: str, dotted: str) -> bool:
    return any(dotted == q or dotted.startswith(q + ".")
               for q in NOTHING_TO_DO.get((event, action), ()))


class TestMissingFields:
    @pytest.mark.parametrize("scenario", ACTED)
    def test_fields_removed_one_at_a_time(self, scenario: str) -> None:
        """A payload without a needed field is dropped naming it; other removals change nothing."""
        event, payload = fixture(scenario)
        want = needed(event, payload["action"])
        for path in paths(payload):
            dotted = ".".join(path)
            inc = read(event, without(payload, path))
            lost = [f for f in want if f == dotted or f.startswith(dotted + ".")]
            if path == ("action",):
                assert inc.missing is None and isinstance(screen(inc, POLICY), Decision)
            elif quiet(event, payload["action"], dotted):
                result = screen(inc, POLICY)
                assert inc.missing is None and isinstance(result, Decision), dotted
                assert result.kind == "ignore", dotted
            elif lost:
                assert inc.missing == lost[0], dotted
                result = screen(inc, POLICY)
                assert isinstance(result, Decision) and lost[0] in result.reason
            else:
                assert inc.missing is None, dotted
                assert isinstance(screen(inc, POLICY), Needs), dotted

    @pytest.mark.parametrize("scenario", ACTED)
    def test_wrong_types_on_unused_fields(self, scenario: str) -> None:
        """A field nkibot does not read holds any type; a needed one of a wrong type is absent."""
        event, payload = fixture(scenario)
        want = needed(event, payload["action"])
        for path in paths(payload):
            dotted = ".".join(path)
            if any(f.startswith(dotted) for f in want) or path == ("action",):
                continue
            if quiet(event, payload["action"], dotted):
                continue  # read, and a wrong type reads as absent: covered above
            mangled = copy.deepcopy(payload)
            parent = mangled
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = {"surprise": [1, "two", None]}
            assert isinstance(screen(read(event, mangled), POLICY), Needs), dotted
        for field in want:
            mangled = copy.deepcopy(payload)
            *parents, leaf = field.split(".")
            node = mangled
            for key in parents:
                node = node[key]
            node[leaf] = ["not", "a", "scalar"]
            assert read(event, mangled).missing == field

    @pytest.mark.parametrize("scenario", ACTED)
    def test_unknown_extra_fields(self, scenario: str) -> None:
        """Fields GitHub may add tomorrow, at every level, leave the reading unchanged."""
        event, payload = fixture(scenario)
        grown = copy.deepcopy(payload)
        for path in paths(payload):
            node = grown
            for key in path:
                node = node[key]
            if isinstance(node, dict):
                node["added_in_2030"] = {"nested": [1, {"deep": True}]}
        grown["brand_new_top_level"] = "x"
        # Only the event key (a digest of the signed body) may differ.
        assert (dataclasses.replace(read(event, grown), event_key="")
                == dataclasses.replace(read(event, payload), event_key=""))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=5),
    max_leaves=30)
EVENTS = st.sampled_from(["issue_comment", "issues", "pull_request", "check_run", "check_suite",
                          "installation", "push", ""])


class TestFuzz:
    @settings(max_examples=300, deadline=None)
    @given(event=EVENTS, body=st.binary(max_size=200) | json_values.map(
        lambda v: json.dumps(v).encode()))
    def test_nothing_raises(self, event: str, body: bytes) -> None:
        """Any bytes under any event name read into an Incoming that screen can judge."""
        inc = read_event(event, "d1", body)
        screen(inc, POLICY)

    @settings(max_examples=150, deadline=None)
    @given(scenario=st.sampled_from(ACTED), data=st.data())
    def test_needed_fields_reach_decide(self, scenario: str, data: st.DataObject) -> None:
        """Delete or replace anything but the needed fields: the payload still reaches decide."""
        event, payload = fixture(scenario)
        want = needed(event, payload["action"])
        free = [p for p in paths(payload) if p != ("action",)
                and not any(f.startswith(".".join(p)) for f in want)
                and not quiet(event, payload["action"], ".".join(p))]
        for path in data.draw(st.lists(st.sampled_from(free), max_size=6, unique=True)):
            parent: Any = payload
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if not isinstance(parent, dict) or path[-1] not in parent:
                continue
            if data.draw(st.booleans()):
                del parent[path[-1]]
            else:
                parent[path[-1]] = data.draw(json_values)
        inc = read(event, payload)
        assert inc.missing is None
        assert isinstance(screen(inc, POLICY), Needs)
        facts = dataclasses.replace(Facts(permission="write", sha="a" * 40))
        assert isinstance(decide(inc, facts, POLICY), Decision)
