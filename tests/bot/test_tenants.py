"""Replays and tenants: a signed body is acted on once, and an event touches only its own
installation's jobs in its own repository (two installations on one GitHub double)."""

from __future__ import annotations

from typing import Any

from nkibot.handlers import Decision, read_event
from nkibot.handlers.dashboard import Board, Row, new_issue_body
from nkibot.jobs.model import Job, Trigger
from nkibot.jobs.sqlite import SqliteQueue
from tests.bot.conftest import REPO, Bot
from tests.fakes.github_fixtures import load_webhook

VICTIM = "victim/app"
VICTIM_TARGET = "src/secret.py::Model"
NORM = "src/models/norm.py::RMSNorm"


def victim_job(bot: Bot) -> Job:
    """A queued job of another installation's repository."""
    bot.double.add_repo(VICTIM, {"src/secret.py": "x = 1\n"}, installation_id=8)
    sha = bot.double.repo(VICTIM).refs["heads/main"]
    job = Job(id="feedfacefeedfacefeedface", repo=VICTIM, installation_id=8,
              target=VICTIM_TARGET, sha=sha,
              trigger=Trigger(kind="dashboard", delivery_id="v", sender="victor",
                              issue_number=1))
    bot.state.record(job)
    assert bot.state.status(job.id) == "queued"
    return job


def set_text(text: str) -> Any:
    def mutate(payload: dict[str, Any]) -> None:
        payload["comment"]["body"] = text
    return mutate


def planted_dashboard(job_id: str) -> str:
    """An attacker's own dashboard whose hidden state claims `job_id` as a queued row."""
    row = Row(NORM, "nn.Module", status="queued", job_id=job_id)
    return new_issue_body(Board("main", "a" * 40, (row,)))


def edit_event(number: int, before: str, after: str) -> Any:
    def mutate(payload: dict[str, Any]) -> None:
        payload["issue"].update(number=number, body=after)
        payload["changes"] = {"body": {"from": before}}
        payload["sender"]["login"] = "alice"
    return mutate


class TestCrossTenantCancel:
    async def test_unticking_another_tenants_job_cancels_nothing(self, bot: Bot) -> None:
        """A repository's writer plants another installation's job id in their dashboard's
        hidden state and unticks it: the other job stays live, and the row says refused."""
        theirs = victim_job(bot)
        before = planted_dashboard(theirs.id)
        bot.double.add_issue(REPO, 3, "NKI conversion dashboard", before, user="alice")
        after = before.replace("- [x]", "- [ ]")
        bot.double.repo(REPO).issues[3]["body"] = after
        bot.deliver("issues_edited", edit_event(3, before, after))
        assert await bot.drain() == 1
        assert not bot.state.is_cancelled(theirs.id)
        assert bot.state.status(theirs.id) == "queued"
        body = bot.double.repo(REPO).issues[3]["body"]
        assert "**refused**" in body and "not one of this dashboard" in body

    async def test_dispatcher_refuses_a_forged_cancel(self, bot: Bot) -> None:
        """The edge checks again: even a decision naming another tenant's job (or a job of
        the same repository under another installation id) marks nothing cancelled."""
        theirs = victim_job(bot)
        same_repo_other_inst = theirs.model_copy(update={"id": "0123456789abcdef01234567",
                                                         "repo": REPO})
        bot.state.record(same_repo_other_inst)
        _headers, raw = load_webhook("issue_comment_created_issue")
        inc = read_event("issue_comment", "d", raw)
        forged = Decision("cancel", cancel=(theirs.id, same_repo_other_inst.id, "nope"))
        await bot.dispatcher.execute(bot.dispatcher.gateway(7), inc, forged)
        assert not bot.state.is_cancelled(theirs.id)
        assert not bot.state.is_cancelled(same_repo_other_inst.id)

    async def test_cancel_command_still_cancels_own_job(self, bot: Bot) -> None:
        """The scoping leaves the owner's own `/nki cancel` working."""
        bot.deliver("issue_comment_created_issue")
        await bot.drain()
        (job,) = bot.queued_jobs()
        theirs = victim_job(bot)

        def cancel(payload: dict[str, Any]) -> None:
            payload["comment"]["body"] = "/nki cancel"
            payload["comment"]["id"] += 1
        bot.deliver("issue_comment_created_issue", cancel, delivery="d-cancel")
        await bot.drain()
        assert bot.state.is_cancelled(job.id) and not bot.state.is_cancelled(theirs.id)


class TestReplay:
    async def test_same_signed_body_under_a_fresh_delivery_id(self, bot: Bot) -> None:
        """POSTing one signed `/nki convert` body again with a new X-GitHub-Delivery (a
        header the signature does not cover) makes no second job, check run or reply."""
        bot.deliver("issue_comment_created_issue", delivery="first")
        bot.deliver("issue_comment_created_issue", delivery="fresh-id")
        bot.deliver("issue_comment_created_issue", set_text("/nki help"), delivery="h1")
        bot.deliver("issue_comment_created_issue", set_text("/nki help"), delivery="h2")
        assert await bot.drain() == 4
        assert len(bot.queued_jobs()) == 1 and len(bot.double.check_runs_of(REPO)) == 1
        assert len(bot.double.comments_on(REPO, 1)) == 1

    async def test_replay_after_the_job_ran_makes_no_second_job(self, bot: Bot) -> None:
        """Even once the jobs queue no longer remembers the job (purged after a week, or an
        SQS queue's five-minute window), the replay names the same job id, from the
        comment's id and command, and that job has already run: nothing is enqueued."""
        bot.deliver("issue_comment_created_issue", delivery="first")
        await bot.drain()
        lease = bot.jobs.lease(60)
        assert lease is not None
        job = Job.model_validate_json(lease.body)
        bot.jobs.ack(lease)  # the runner ran it ...
        bot.state.set_status(job.id, "done")
        assert isinstance(bot.jobs, SqliteQueue) and bot.jobs.purge_done(-1.0) == 1
        bot.deliver("issue_comment_created_issue", delivery="a-week-later")
        await bot.drain()
        assert bot.queued_jobs() == [] and len(bot.double.check_runs_of(REPO)) == 1
        assert bot.state.status(job.id) == "done"

    async def test_a_new_comment_is_a_new_request(self, bot: Bot) -> None:
        """The dedupe is on the comment's identity: a second comment with the same text runs."""
        bot.deliver("issue_comment_created_issue")

        def second(payload: dict[str, Any]) -> None:
            payload["comment"]["id"] += 1
        bot.deliver("issue_comment_created_issue", second, delivery="other")
        await bot.drain()
        assert len({j.id for j in bot.queued_jobs()}) == 2
