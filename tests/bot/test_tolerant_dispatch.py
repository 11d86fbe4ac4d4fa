"""The dispatcher reads payloads leniently: real drift is decided, a missing need is counted."""

from __future__ import annotations

from typing import Any

from tests.bot.conftest import REPO, Bot


def strip_newer_fields(payload: dict[str, Any]) -> None:
    """What replayed recorded payloads looked like: no `archived_at`, `user_view_type`..."""
    payload["label"].pop("archived_at", None)
    payload["label"]["color"] = 0xFF0000  # documented as a string; we never read it
    payload["sender"].pop("user_view_type", None)
    payload["issue"].pop("performed_via_github_app", None)


class TestTolerantIntake:
    async def test_label_without_newer_fields_enqueues(self, bot: Bot) -> None:
        """The trigger label still converts when the payload lacks fields the schema demanded."""
        bot.deliver("issues_labeled", strip_newer_fields)
        assert await bot.drain() == 1
        assert sorted(j.target for j in bot.queued_jobs()) == [
            "src/models/mlp.py::SwiGLU", "src/models/norm.py::RMSNorm"]

    async def test_missing_needed_field_is_dropped_and_counted(self, bot: Bot) -> None:
        """A payload without the label name is dropped with a metric naming the field."""
        bot.deliver("issues_labeled", lambda p: p["label"].pop("name"))
        assert await bot.drain() == 1
        assert bot.queued_jobs() == []
        sample = bot.dispatcher.metrics.registry.get_sample_value(
            "nkibot_payloads_dropped_total", {"event": "issues", "field": "label.name"})
        assert sample == 1.0
        assert bot.double.calls == []  # dropped before any API call


class TestRerunAll:
    async def test_check_suite_rerequested_retries_our_jobs(self, bot: Bot) -> None:
        """Re-run all checks on a suite: every target converted on its SHA runs again."""
        bot.deliver("issue_comment_created_issue", lambda p: p["comment"].update(
            body="/nki convert src/models/norm.py::RMSNorm src/models/mlp.py::SwiGLU"))
        assert await bot.drain() == 1
        first = bot.queued_jobs()
        sha = first[0].sha

        def on_sha(payload: dict[str, Any]) -> None:
            payload["check_suite"]["head_sha"] = sha

        bot.deliver("check_suite_rerequested", on_sha)
        assert await bot.drain() == 1
        again = bot.queued_jobs()
        assert sorted(j.target for j in again) == sorted(j.target for j in first)
        assert {j.generation for j in again} == {1}
        assert {j.trigger.issue_number for j in again} == {1}  # replies go to the thread
        assert len(bot.double.check_runs_of(REPO)) == 4

    async def test_other_apps_suites_are_ignored(self, bot: Bot) -> None:
        """A suite owned by another App is not ours to re-run."""
        bot.deliver("check_suite_rerequested",
                    lambda p: p["check_suite"]["app"].update(id=99))
        assert await bot.drain() == 1
        assert bot.queued_jobs() == [] and bot.double.calls == []
