"""The dispatcher against the GitHub double: effects, idempotency, refusals, retries."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nkibot.bot.delivery import Delivery
from nkibot.handlers import read_event
from nkibot.jobs.model import Job, JobOptions, Trigger
from tests.bot.conftest import REPO, Bot
from tests.fakes.github_fixtures import load_webhook


def set_comment(body: str, login: str = "alice", kind: str = "User") -> Any:
    def mutate(payload: dict[str, Any]) -> None:
        payload["comment"]["body"] = body
        payload["sender"]["login"] = login
        payload["sender"]["type"] = kind
    return mutate


class TestConvert:
    async def test_issue_comment_effects(self, bot: Bot) -> None:
        """A /nki convert on an issue: eyes, a queued check run on the default head, one job."""
        delivery = bot.deliver("issue_comment_created_issue")
        assert await bot.drain() == 1
        head = bot.double.repo(REPO).refs["heads/main"]
        assert [k[2] for k in bot.double.reactions] == ["eyes"]
        runs = bot.double.check_runs_of(REPO)
        assert len(runs) == 1
        run = runs[0]
        assert (run["status"], run["head_sha"], run["name"]) == (
            "queued", head, "nkibot: src/models/norm.py::RMSNorm")
        jobs = bot.queued_jobs()
        assert len(jobs) == 1
        job = jobs[0]
        assert (job.target, job.sha, job.installation_id, job.check_run_id) == (
            "src/models/norm.py::RMSNorm", head, 7, run["id"])
        assert run["external_id"] == job.id and job.trigger.delivery_id == delivery
        assert job.options.turns == 4 and job.options.shapes[0].shape == (2, 128)
        assert bot.state.get(job.id) is not None and bot.inbox.depth() == 0
        registry = bot.dispatcher.metrics.registry
        assert registry.get_sample_value("nkibot_jobs_enqueued_total") == 1.0
        assert registry.get_sample_value("nkibot_decisions_total", {"kind": "enqueue"}) == 1.0

    async def test_pr_comment_uses_config_targets_and_pr_head(self, bot: Bot) -> None:
        """`/nki convert` on a PR runs the config's targets on the PR head SHA."""
        bot.deliver("issue_comment_created_pr")
        await bot.drain()
        pr_head = bot.double.repo(REPO).refs["heads/swiglu"]
        jobs = bot.queued_jobs()
        assert [(j.target, j.sha) for j in jobs] == [("src/models/mlp.py::SwiGLU", pr_head)]
        assert jobs[0].trigger.head_ref == "swiglu" and jobs[0].trigger.is_pull_request
        assert jobs[0].options.turns == 5

    async def test_label_on_issue_and_pr(self, bot: Bot) -> None:
        """The trigger label converts the issue's listed targets, and the PR config's."""
        bot.deliver("issues_labeled")
        pr_head = bot.double.repo(REPO).refs["heads/swiglu"]

        def on_seeded_head(payload: dict[str, Any]) -> None:
            payload["pull_request"]["head"]["sha"] = pr_head

        bot.deliver("pull_request_labeled", on_seeded_head)
        assert await bot.drain() == 2
        got = sorted((j.target, j.trigger.kind, j.sha == pr_head) for j in bot.queued_jobs())
        assert got == [("src/models/mlp.py::SwiGLU", "label", False),
                       ("src/models/mlp.py::SwiGLU", "label", True),
                       ("src/models/norm.py::RMSNorm", "label", False)]
        assert not bot.double.reactions

    async def test_repeat_after_crash_changes_nothing(self, bot: Bot) -> None:
        """Processing the same inbox item twice (a crash before ack) repeats no visible effect."""
        bot.deliver("issue_comment_created_issue")
        lease = bot.inbox.lease(60)
        assert lease is not None
        await bot.dispatcher.process(lease)
        await bot.dispatcher.process(lease)
        assert len(bot.double.check_runs_of(REPO)) == 1
        assert len(bot.double.calls_to("POST", "/check-runs$")) == 1
        assert len(bot.double.reactions) == 1
        assert len(bot.queued_jobs()) == 1

    async def test_help_reply_is_not_repeated(self, bot: Bot) -> None:
        """Replies carry a hidden marker, so a repeated delivery does not comment twice."""
        bot.deliver("issue_comment_created_issue", set_comment("/nki help"))
        lease = bot.inbox.lease(60)
        assert lease is not None
        await bot.dispatcher.process(lease)
        await bot.dispatcher.process(lease)
        comments = bot.double.comments_on(REPO, 1)
        assert len(comments) == 1 and "/nki convert" in comments[0]["body"]
        inc = read_event("issue_comment", "any", Delivery.decode(lease.body).body)
        assert f"<!-- nkibot:delivery:{inc.identity}:help -->" in comments[0]["body"]


class TestRefusals:
    async def test_non_collaborator_gets_a_polite_comment(self, bot: Bot) -> None:
        """A sender without write permission gets a comment and nothing runs."""
        bot.deliver("issue_comment_created_issue", set_comment("/nki convert a.py::A", "mallory"))
        await bot.drain()
        comments = bot.double.comments_on(REPO, 1)
        assert len(comments) == 1 and "@mallory" in comments[0]["body"]
        assert not bot.double.check_runs_of(REPO) and not bot.queued_jobs()

    async def test_bot_sender_makes_no_api_call(self, bot: Bot) -> None:
        """Comments from bots (nkibot included) are ignored before any GitHub call."""
        bot.deliver("issue_comment_created_issue",
                    set_comment("/nki convert a.py::A", "nkibot[bot]", "Bot"))
        await bot.drain()
        assert bot.double.calls == [] and bot.inbox.depth() == 0

    async def test_malformed_command_and_dotdot(self, bot: Bot) -> None:
        """A malformed command or a `..` path gets a usage comment, no job."""
        bot.deliver("issue_comment_created_issue", set_comment("/nki convert ../x.py::Y"))
        await bot.drain()
        body = bot.double.comments_on(REPO, 1)[0]["body"]
        assert "Usage" in body and ".." in body and not bot.queued_jobs()

    async def test_invalid_repo_config_names_the_field(self, bot: Bot) -> None:
        """A bad .github/nki-bot.yml becomes a comment naming the field and the form."""
        bot.double.commit(REPO, {".github/nki-bot.yml": "turns: lots\n"})
        bot.deliver("issue_comment_created_issue")
        await bot.drain()
        body = bot.double.comments_on(REPO, 1)[0]["body"]
        assert "`turns`" in body and "nki-bot.yml" in body and not bot.queued_jobs()

    async def test_edited_comment_is_ignored(self, bot: Bot) -> None:
        """Edits never trigger, even with a command in the new body."""
        bot.deliver("issue_comment_edited")
        await bot.drain()
        assert bot.double.calls == [] and not bot.queued_jobs()


class TestJobsLifecycle:
    def _record(self, bot: Bot, external_id: str) -> Job:
        head = bot.double.repo(REPO).refs["heads/swiglu"]
        job = Job(id=external_id, repo=REPO, installation_id=7,
                  target="src/models/norm.py::RMSNorm", sha=head,
                  trigger=Trigger(kind="comment", delivery_id="old", sender="alice",
                                  issue_number=2, is_pull_request=True),
                  options=JobOptions(turns=4))
        bot.state.record(job)
        return job

    async def test_check_run_action_retries_with_more_turns(self, bot: Bot) -> None:
        """The `retry_more_turns` button enqueues generation 1 with five more turns."""
        head = bot.double.repo(REPO).refs["heads/swiglu"]

        def ours(payload: dict[str, Any]) -> None:
            payload["check_run"]["head_sha"] = head

        old = self._record(bot, "5d41402abc4b2a76b9719d91")
        bot.deliver("check_run_requested_action", ours)
        await bot.drain()
        (job,) = bot.queued_jobs()
        assert (job.generation, job.options.turns, job.sha) == (1, 9, head)
        assert job.id != old.id and job.trigger.issue_number == 2
        assert len(bot.double.check_runs_of(REPO)) == 1

    async def test_cancel_marks_job_and_closes_check_run(self, bot: Bot) -> None:
        """`/nki cancel` marks the thread's jobs cancelled and completes queued check runs."""
        bot.deliver("issue_comment_created_issue")
        await bot.drain()
        (job,) = bot.queued_jobs()
        bot.deliver("issue_comment_created_issue", set_comment("/nki cancel"), delivery="d-cancel")
        await bot.drain()
        assert bot.state.is_cancelled(job.id)
        run = bot.double.check_runs[job.check_run_id or 0]
        assert (run["status"], run["conclusion"]) == ("completed", "cancelled")
        assert "Cancelled" in bot.double.comments_on(REPO, 1)[-1]["body"]

    async def test_retry_command(self, bot: Bot) -> None:
        """`/nki retry` re-enqueues the thread's job as the next generation."""
        bot.deliver("issue_comment_created_issue")
        await bot.drain()
        (first,) = bot.queued_jobs()
        bot.deliver("issue_comment_created_issue", set_comment("/nki retry"), delivery="d-retry")
        await bot.drain()
        (second,) = bot.queued_jobs()
        assert second.generation == 1 and second.target == first.target and second.id != first.id
        assert len(bot.double.check_runs_of(REPO)) == 2


class TestGitHubFaults:
    async def test_5xx_and_secondary_rate_limit_are_retried_by_githubkit(self, bot: Bot) -> None:
        """A 502 and a secondary rate limit on the way are absorbed by githubkit's retries."""
        bot.deliver("issue_comment_created_issue")
        bot.double.fail_next(1, status=502)
        bot.double.rate_limit_next(1, retry_after=1)
        await bot.drain()
        statuses = [c.status for c in bot.double.calls]
        assert statuses[:2] == [502, 403]
        assert len(bot.double.check_runs_of(REPO)) == 1 and len(bot.queued_jobs()) == 1

    async def test_permanent_failure_leaves_item_for_retry(self, bot: Bot) -> None:
        """When GitHub keeps refusing, the item is nacked (not acked) for a later attempt."""
        bot.deliver("issue_comment_created_issue")
        del bot.double.repos[REPO]  # every repository call is now a 404
        assert await bot.drain() == 1
        assert bot.inbox.depth() == 1 and bot.inbox.lease(60) is None  # delayed, not lost


SCENARIOS = ["issue_comment_created_issue", "issue_comment_created_pr", "issues_labeled",
             "issues_edited",
             "check_run_rerequested", "installation"]
KINDS = ("ignore", "help", "usage", "denied", "config_error", "no_targets", "enqueue", "retry",
         "cancel", "scan", "dashboard")
junk = st.none() | st.integers() | st.text(max_size=30) | st.lists(st.integers(), max_size=2)


def _paths(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if not isinstance(value, dict):
        return [prefix] if prefix else []
    out = [prefix] if prefix else []
    for key, inner in value.items():
        out.extend(_paths(inner, (*prefix, key)))
    return out


class TestPayloadFuzz:
    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(scenario=st.sampled_from(SCENARIOS), data=st.data())
    async def test_mangled_payloads_never_crash(self, bot: Bot, scenario: str,
                                                data: st.DataObject) -> None:
        """Payloads with fields removed or replaced are decided or ignored, never a crash."""
        headers, body = load_webhook(scenario)
        payload = json.loads(body)
        for path in data.draw(st.lists(st.sampled_from(_paths(payload)), max_size=3)):
            parent = payload
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if isinstance(parent, dict) and path[-1] in parent:
                if data.draw(st.booleans()):
                    del parent[path[-1]]
                else:
                    parent[path[-1]] = data.draw(junk)
        raw = json.dumps(payload).encode()
        item = Delivery(headers["x-github-event"], f"fuzz-{len(bot.double.calls)}", raw).encode()
        bot.inbox.put(item, f"fuzz-{id(payload)}-{len(raw)}")
        before = sum(bot.dispatcher.metrics.registry.get_sample_value(
            "nkibot_decisions_total", {"kind": k}) or 0 for k in KINDS)
        # step() acks after a decision, or nacks when GitHub refused (say, a mangled
        # installation id); either way nothing escapes and the item is no longer visible.
        assert await bot.dispatcher.step() is True
        after = sum(bot.dispatcher.metrics.registry.get_sample_value(
            "nkibot_decisions_total", {"kind": k}) or 0 for k in KINDS)
        assert after - before <= 1
        assert bot.inbox.lease(60) is None
