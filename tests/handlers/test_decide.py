"""Pure decisions: event + facts -> Decision, including every refusal path."""

from __future__ import annotations

import dataclasses

import pytest

from nkibot.config.repo import ConfigError, RepoConfig, parse_repo_config
from nkibot.handlers.decide import Needs, decide, screen
from nkibot.handlers.decision import Decision, Facts, Policy
from nkibot.handlers.events import Incoming
from nkibot.handlers.intake import read_event
from nkibot.jobs.model import Job, JobOptions, Trigger
from tests.fakes.github_fixtures import TEST_APP_ID, load_webhook

POLICY = Policy(app_id=TEST_APP_ID)
SHA = "a" * 40


def comment(body: str, **kw: object) -> Incoming:
    base = Incoming(event="issue_comment", action="created", delivery_id="d1", kind="comment",
                    repo="acme/models", installation_id=7, sender_login="alice",
                    issue_number=1, comment_id=55, comment_body=body,
                    issue_body="- src/a.py::FromIssue\n")
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def facts(**kw: object) -> Facts:
    return dataclasses.replace(Facts(permission="write", sha=SHA), **kw)  # type: ignore[arg-type]


def from_fixture(scenario: str) -> Incoming:
    headers, body = load_webhook(scenario)
    event = headers["x-github-event"]
    return read_event(event, headers["x-github-delivery"], body)


def old_job(job_id: str = "j1", target: str = "src/a.py::A", generation: int = 0,
            turns: int | None = 4) -> Job:
    return Job(id=job_id, repo="acme/models", installation_id=7, target=target, sha="b" * 40,
               trigger=Trigger(kind="comment", delivery_id="d0", sender="alice", issue_number=1,
                               comment_id=9),
               options=JobOptions(turns=turns), generation=generation)


class TestScreen:
    @pytest.mark.parametrize(("inc", "why"), [
        (comment("/nki help", sender_type="Bot"), "Bot"),
        (comment("/nki help", sender_login="nkibot[bot]"), "[bot]"),
        (comment("/nki help", sender_login="dependabot[bot]"), "[bot]"),
        (comment("/nki help", action="edited"), "only new comments"),
        (comment("/nki help", action="deleted"), "only new comments"),
        (comment("nice work"), "no /nki command"),
        (comment("> /nki convert a.py::A"), "no /nki command"),
        (comment("/nki help", installation_id=None), "installation"),
    ])
    def test_ignored_with_reason(self, inc: Incoming, why: str) -> None:
        """Bots, edits, comments without a command and stray payloads are ignored with a reason."""
        result = screen(inc, POLICY)
        assert isinstance(result, Decision) and result.kind == "ignore" and why in result.reason

    def test_owner_allow_list(self) -> None:
        """Owners outside NKIBOT_ALLOWED_OWNERS are ignored; listed ones (any case) pass."""
        assert isinstance(screen(comment("/nki help"), Policy(allowed_owners=("other",))),
                          Decision)
        assert isinstance(screen(comment("/nki help"), Policy(allowed_owners=("ACME",))), Needs)

    def test_fixtures_route(self) -> None:
        """Each saved event is screened the documented way."""
        assert screen(from_fixture("issue_comment_created_issue"), POLICY) == Needs(
            sha=True, config=True)
        assert isinstance(screen(from_fixture("issue_comment_edited"), POLICY), Decision)
        assert screen(from_fixture("issues_labeled"), POLICY) == Needs(sha=True, config=True)
        assert screen(from_fixture("pull_request_labeled"), POLICY) == Needs(sha=True, config=True)
        assert screen(from_fixture("check_run_rerequested"), POLICY) == Needs(
            sha=True, config=True, check_run_job=True)
        for other in ("installation", "installation_repositories"):
            result = screen(from_fixture(other), POLICY)
            assert isinstance(result, Decision) and result.kind == "ignore"

    def test_labels_and_check_runs(self) -> None:
        """Other labels, other apps' check runs and unknown actions are ignored."""
        label = from_fixture("issues_labeled")
        assert isinstance(screen(dataclasses.replace(label, label="bug"), POLICY), Decision)
        assert isinstance(screen(dataclasses.replace(label, action="unlabeled"), POLICY), Decision)
        run = from_fixture("check_run_requested_action")
        assert isinstance(screen(run, Policy(app_id=1)), Decision)
        assert isinstance(screen(dataclasses.replace(run, requested_action="rm -rf"), POLICY),
                          Decision)
        assert isinstance(screen(dataclasses.replace(run, action="completed"), POLICY), Decision)


class TestDecide:
    def test_non_collaborator_gets_a_polite_refusal(self) -> None:
        """Below the minimum permission the sender is told who may trigger; nothing runs."""
        for permission in (None, "none", "read", "triage"):
            d = decide(comment("/nki convert a.py::A"), facts(permission=permission), POLICY)
            assert d.kind == "denied" and not d.jobs
            assert d.reply is not None and "write" in d.reply and "@alice" in d.reply

    def test_repo_config_can_only_raise_the_bar(self) -> None:
        """min_permission in the repo config raises the operator's minimum, never lowers it."""
        cfg = RepoConfig(min_permission="admin")
        assert decide(comment("/nki convert a.py::A"),
                      facts(permission="maintain", config=cfg), POLICY).kind == "denied"
        low = RepoConfig(min_permission="read")
        assert decide(comment("/nki convert a.py::A"),
                      facts(permission="triage", config=low), POLICY).kind == "denied"

    def test_convert_builds_deterministic_jobs(self) -> None:
        """Jobs carry repo, installation, target, SHA, trigger, merged options; ids are stable."""
        cfg = RepoConfig(turns=7, model="claude", tolerances={"atol": 0.5})  # type: ignore[arg-type]
        inc = comment("/nki convert src/m.py::Net x/y.py::K --atol 0.1")
        d = decide(inc, facts(config=cfg), POLICY)
        assert d.kind == "enqueue" and d.react
        assert [j.target for j in d.jobs] == ["src/m.py::Net", "x/y.py::K"]
        job = d.jobs[0]
        assert (job.repo, job.installation_id, job.sha) == ("acme/models", 7, SHA)
        assert (job.options.turns, job.options.model, job.options.atol) == (7, "claude", 0.1)
        assert job.trigger.comment_id == 55 and job.trigger.issue_number == 1
        again = decide(inc, facts(config=cfg), POLICY)
        assert [j.id for j in again.jobs] == [j.id for j in d.jobs]
        other = decide(dataclasses.replace(inc, delivery_id="d2"), facts(config=cfg), POLICY)
        assert other.jobs[0].id != job.id
        assert len({j.id for j in d.jobs}) == 2

    def test_default_turns_apply(self) -> None:
        """Without turns in the command or config, the operator default is used."""
        d = decide(comment("/nki convert a.py::A"), facts(), Policy(default_turns=3))
        assert d.jobs[0].options.turns == 3

    def test_targets_from_issue_then_config(self) -> None:
        """No target: an issue uses its body; a PR uses the repo config's targets."""
        issue = decide(comment("/nki convert"), facts(), POLICY)
        assert [j.target for j in issue.jobs] == ["src/a.py::FromIssue"]
        cfg = parse_repo_config("targets: [lib/n.py::Norm]")
        assert isinstance(cfg, RepoConfig)
        pr = decide(comment("/nki convert", is_pull_request=True), facts(config=cfg), POLICY)
        assert [j.target for j in pr.jobs] == ["lib/n.py::Norm"]
        none = decide(comment("/nki convert", is_pull_request=True), facts(), POLICY)
        assert none.kind == "no_targets" and none.reply and "path/to/file.py::Name" in none.reply

    def test_usage_and_help(self) -> None:
        """A malformed command gets usage; help gets help; both react with eyes."""
        bad = decide(comment("/nki convert ../x.py::Y"), facts(), POLICY)
        assert bad.kind == "usage" and bad.reply and "Usage" in bad.reply and ".." in bad.reply
        helped = decide(comment("/nki help"), facts(), POLICY)
        assert helped.kind == "help" and helped.react and "/nki convert" in (helped.reply or "")

    def test_config_error_is_a_comment(self) -> None:
        """An invalid repo config becomes a comment naming the field, never a crash."""
        err = ConfigError("turns", "an integer from 1 to 50")
        d = decide(comment("/nki convert a.py::A"), facts(config=err), POLICY)
        assert d.kind == "config_error" and not d.jobs
        assert d.reply and "`turns`" in d.reply and "an integer" in d.reply

    def test_retry_bumps_generation(self) -> None:
        """/nki retry re-enqueues the latest job per target with generation + 1 on the new head."""
        jobs = (old_job("j1", "a.py::A", 0), old_job("j2", "a.py::A", 1), old_job("j3", "b.py::B"))
        d = decide(comment("/nki retry"), facts(jobs=jobs), POLICY)
        assert d.kind == "retry"
        got = {j.target: j for j in d.jobs}
        assert got["a.py::A"].generation == 2 and got["b.py::B"].generation == 1
        assert got["a.py::A"].sha == SHA and got["a.py::A"].id not in {"j1", "j2"}
        assert decide(comment("/nki retry"), facts(), POLICY).kind == "no_targets"

    def test_cancel(self) -> None:
        """/nki cancel names the jobs of this thread (optionally only some targets)."""
        jobs = (old_job("j1", "a.py::A"), old_job("j2", "b.py::B"))
        d = decide(comment("/nki cancel"), facts(jobs=jobs), POLICY)
        assert d.kind == "cancel" and set(d.cancel) == {"j1", "j2"}
        one = decide(comment("/nki cancel b.py::B"), facts(jobs=jobs), POLICY)
        assert one.cancel == ("j2",)
        assert decide(comment("/nki cancel"), facts(), POLICY).cancel == ()

    @pytest.mark.parametrize(("action", "turns", "reprofile"), [
        ("retry", 4, False), ("retry_more_turns", 9, False), ("reprofile", 4, True)])
    def test_check_run_actions(self, action: str, turns: int, reprofile: bool) -> None:
        """Check-run buttons retry the recorded job: same, with more turns, or reprofile only."""
        run = from_fixture("check_run_requested_action")
        run = dataclasses.replace(run, requested_action=action)
        job = old_job(run.external_id or "")
        d = decide(run, facts(jobs=(job,), sha=run.head_sha), POLICY)
        assert d.kind == "retry" and len(d.jobs) == 1
        new = d.jobs[0]
        assert (new.options.turns, new.options.reprofile_only) == (turns, reprofile)
        assert new.generation == 1 and new.trigger.kind == "check_run"
        assert new.trigger.issue_number == 1  # the runner still replies on the original thread

    def test_rerequested_unknown_job_is_ignored(self) -> None:
        """A re-run of a check run without a recorded job is ignored with a reason."""
        d = decide(from_fixture("check_run_rerequested"), facts(), POLICY)
        assert d.kind == "ignore" and "no recorded job" in d.reason

    def test_labels_use_the_issue_body(self) -> None:
        """The trigger label on an issue converts the targets listed in its body."""
        d = decide(from_fixture("issues_labeled"), facts(), POLICY)
        assert [j.target for j in d.jobs] == ["src/models/norm.py::RMSNorm",
                                              "src/models/mlp.py::SwiGLU"]
        assert not d.react and d.jobs[0].trigger.kind == "label"
