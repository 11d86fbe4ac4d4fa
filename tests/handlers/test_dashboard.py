"""The dashboard body: rendering, parsing back, tick diffs, splicing, ordering, decisions."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

from nkibot.config.repo import RepoConfig, TargetSpec
from nkibot.handlers.commands import Command, CommandError, parse_comment
from nkibot.handlers.dashboard import (
    END,
    START,
    Board,
    Row,
    RowUpdate,
    apply_updates,
    checked_targets,
    merge_scan,
    new_issue_body,
    order_key,
    parse_board,
    render_section,
    splice,
    tick_diff,
)
from nkibot.handlers.decision import Facts, Policy
from nkibot.handlers.events import Incoming
from nkibot.handlers.scan import decide_edit, decide_scan, missing_references, screen_edit
from nkibot.jobs.model import JobOptions

NORM = Row("src/norm.py::RMSNorm", "nn.Module", ("x=4x128xfloat32",), "get_inputs()",
           lowering=True, calls=2, op_count=7)
CONV = Row("src/conv.py::Conv", "nn.Module", op_count=1)
CUDA = Row("k/rms.cu::rms_norm_kernel", "CUDA", reference=None)
BOARD = Board("main", "a" * 40, (CONV, NORM, CUDA))
POLICY = Policy()


def edit(old: str, new: str) -> Incoming:
    return Incoming(event="issues", action="edited", delivery_id="d1", kind="issue_edit",
                    repo="acme/models", installation_id=7, sender_login="alice",
                    issue_number=5, issue_body=new, body_from=old)


def ticked(body: str, target: str) -> str:
    line = next(x for x in body.splitlines() if f"`{target}`" in x)
    return body.replace(line, line.replace("[ ]", "[x]", 1))


class TestBody:
    def test_round_trip(self) -> None:
        """The section parses back to the same rows, ordered, with no box ticked."""
        body = new_issue_body(BOARD)
        board = parse_board(body)
        assert board is not None and board.sha == "a" * 40
        assert [r.target for r in board.rows] == [NORM.target, CONV.target, CUDA.target]
        assert board.row(NORM.target) == NORM and checked_targets(body) == set()
        assert "**needs shapes**" in body and "0 tokens (lowering)" in body

    def test_html_comment_cannot_be_closed_by_row_data(self) -> None:
        """A `-->` in a row's text does not end the hidden state block early."""
        evil = replace(NORM, detail="oops --> <!-- x")
        body = render_section(Board("main", "b" * 40, (evil,)))
        assert body.count("-->") == body.count("<!--")
        assert parse_board(body).row(NORM.target).detail == "oops --> <!-- x"  # type: ignore[union-attr]

    def test_splice_keeps_human_text(self) -> None:
        """Only the text between the markers is replaced."""
        body = "notes before\n\n" + render_section(BOARD) + "\n\nnotes after"
        new = splice(body, render_section(replace(BOARD, sha="c" * 40)))
        assert new.startswith("notes before") and new.endswith("notes after")
        assert new.count(START) == 1 and new.count(END) == 1 and "`cccccccccccc`" in new

    def test_tick_diff(self) -> None:
        """Ticks and unticks are found by comparing the two bodies, for known rows only."""
        body = new_issue_body(BOARD)
        new = ticked(body, NORM.target) + "\n- [x] `not/ours.py::X`"
        assert tick_diff(body, new) == ([NORM.target], [])
        assert tick_diff(new, body) == ([], [NORM.target])

    def test_updates_and_rescan_keep_state(self) -> None:
        """Row updates re-render the section; a rescan keeps each surviving row's status."""
        body = apply_updates(new_issue_body(BOARD), (RowUpdate(NORM.target, status="queued",
                                                               job_id="j1"),))
        assert checked_targets(body) == {NORM.target}
        merged = merge_scan(parse_board(body), Board("main", "d" * 40, (NORM, CONV)))
        assert merged.row(NORM.target).job_id == "j1"  # type: ignore[union-attr]
        assert merged.row(CUDA.target) is None

    def test_order(self) -> None:
        """Covered first, then hot, then known time, then op count; unexpressible last."""
        timed = replace(CONV, time_us=50.0)
        blocked = replace(NORM, target="z.py::Z", no_backend=("nonzero",))
        rows = sorted([CONV, blocked, timed, NORM], key=order_key)
        assert rows == [NORM, timed, CONV, blocked]


class TestDecisions:
    def test_scan_command_parses(self) -> None:
        """`/nki scan` takes paths or globs; `..` is refused."""
        assert parse_comment("/nki scan src/ 'kernels/*.cu'") == Command(
            "scan", ("src/", "'kernels/*.cu'"))
        assert isinstance(parse_comment("/nki scan ../etc"), CommandError)

    def test_reference_option(self) -> None:
        """`--reference` must name a Python module."""
        cmd = parse_comment("/nki convert k/r.cu::rms --reference m/n.py::RMSNorm")
        assert isinstance(cmd, Command) and cmd.options.reference == "m/n.py::RMSNorm"
        assert isinstance(parse_comment("/nki convert k/r.cu::a --reference k/r.cu::b"),
                          CommandError)

    def test_scan_disabled_by_config(self) -> None:
        """`dashboard: false` answers instead of scanning."""
        inc = edit("", "")
        facts = Facts(permission="write", config=RepoConfig(dashboard=False), sha="e" * 40)
        assert decide_scan(inc, facts, (), react=True).scan is None

    def test_missing_reference(self) -> None:
        """A CUDA target without a reference is refused with the hint."""
        specs = [TargetSpec(target=CUDA.target)]
        refused = missing_references(specs, RepoConfig(), JobOptions())
        assert refused is not None and "--reference" in (refused.reply or "")
        assert missing_references(specs, RepoConfig(), JobOptions(reference="m.py::R")) is None

    def test_tick_and_untick(self) -> None:
        """A tick builds a dashboard job and a queued row; an untick cancels that job."""
        body = new_issue_body(BOARD)
        facts = Facts(permission="write", sha="f" * 40)
        d = decide_edit(edit(body, ticked(body, NORM.target)), facts, POLICY, allowed=True)
        (job,) = d.jobs
        assert job.trigger.kind == "dashboard" and job.trigger.issue_number == 5
        assert d.dashboard is not None and d.dashboard.updates[0].status == "queued"
        queued = apply_updates(body, d.dashboard.updates)
        off = queued.replace("- [x]", "- [ ]")
        recorded = dataclasses.replace(facts, jobs=(job,))
        d2 = decide_edit(edit(queued, off), recorded, POLICY, allowed=True)
        assert d2.cancel == (job.id,) and not d2.jobs

    def test_untick_cancels_only_this_dashboards_job(self) -> None:
        """A row's job id is hidden state anyone who edits the issue can write: an untick
        cancels it only when it names a job recorded for this installation, repository,
        issue and target. Another tenant's job, or an unrecorded id, is refused."""
        body = new_issue_body(BOARD)
        facts = Facts(permission="write", sha="f" * 40)
        (job,) = decide_edit(edit(body, ticked(body, NORM.target)), facts, POLICY, True).jobs
        theirs = job.model_copy(update={"repo": "victim/app", "installation_id": 8})
        other_inst = job.model_copy(update={"installation_id": 8})
        other_issue = job.model_copy(update={"trigger": job.trigger.model_copy(
            update={"issue_number": 6})})
        planted = apply_updates(body, (RowUpdate(NORM.target, status="queued", job_id=job.id),))
        off = planted.replace("- [x]", "- [ ]")
        for known in ((), (theirs,), (other_inst,), (other_issue,)):
            d = decide_edit(edit(planted, off), dataclasses.replace(facts, jobs=known),
                            POLICY, allowed=True)
            assert d.cancel == (), known
            assert d.dashboard is not None and d.dashboard.updates[0].status == "refused"

    def test_replayed_tick_changes_nothing(self) -> None:
        """The same signed edit again (a fresh delivery id) names the same job, recorded
        for this issue: no second job, and the row keeps the state its job reached."""
        body = new_issue_body(BOARD)
        facts = Facts(permission="write", sha="f" * 40)
        inc = dataclasses.replace(edit(body, ticked(body, NORM.target)), event_key="issues:d")
        (job,) = decide_edit(inc, facts, POLICY, True).jobs
        replay = decide_edit(dataclasses.replace(inc, delivery_id="fresh"),
                             dataclasses.replace(facts, jobs=(job,)), POLICY, True)
        assert not replay.jobs and replay.dashboard is not None
        assert replay.dashboard.updates == ()

    def test_dotdot_target_or_reference_in_hidden_state_is_refused(self) -> None:
        """A `..` target or reference planted in the hidden state is validated at the edge:
        the row is marked refused with the reason, nothing is enqueued, nothing raises."""
        evil_target = Row("../../etc/passwd.py::X", "nn.Module")
        evil_ref = Row("k/rms.cu::rms_norm_kernel", "CUDA", reference="../up.py::Ref")
        for row in (evil_target, evil_ref):
            body = new_issue_body(Board("main", "a" * 40, (row,)))
            d = decide_edit(edit(body, ticked(body, row.target)),
                            Facts(permission="write", sha="f" * 40), POLICY, allowed=True)
            assert not d.jobs and d.dashboard is not None
            (update,) = d.dashboard.updates
            assert update.status == "refused" and ".." in (update.detail or "")

    def test_hidden_state_of_the_wrong_types_reads_as_defaults(self) -> None:
        """Row values of the wrong type are dropped when parsed, so ordering and rendering
        never meet a string where a number goes."""
        body = new_issue_body(BOARD).replace('"calls":2', '"calls":"many"').replace(
            '"op_count":7', '"op_count":[1]')
        board = parse_board(body)
        assert board is not None and board.row(NORM.target).calls == 0  # type: ignore[union-attr]
        assert "candidates" in render_section(board)

    def test_refused_tick_restores(self) -> None:
        """A tick by someone without permission enqueues nothing and restores the boxes."""
        body = new_issue_body(BOARD)
        d = decide_edit(edit(body, ticked(body, NORM.target)), Facts(), POLICY, allowed=False)
        assert not d.jobs and d.dashboard is not None and d.dashboard.updates == ()
        assert d.reply is None

    def test_cuda_tick_without_reference(self) -> None:
        """Ticking a CUDA row with no reference marks it instead of queueing a failing job."""
        body = new_issue_body(BOARD)
        d = decide_edit(edit(body, ticked(body, CUDA.target)), Facts(sha="1" * 40), POLICY,
                        allowed=True)
        assert not d.jobs and d.dashboard.updates[0].status == "needs a reference"  # type: ignore[union-attr]

    def test_screen_edit(self) -> None:
        """Only edits of a dashboard that change its body are worth facts."""
        body = new_issue_body(BOARD)
        assert screen_edit(edit(body, ticked(body, NORM.target)))
        assert not screen_edit(edit("plain", "plain issue"))
        assert not screen_edit(edit(body, body))


class TestWiring:
    def test_issues_edited_payload_is_read(self) -> None:
        """The payload's `changes.body.from` becomes `body_from` on an `issue_edit`."""
        from nkibot.handlers import read_event
        from tests.fakes.github_fixtures import load_webhook

        headers, raw = load_webhook("issues_edited")
        inc = read_event("issues", headers["x-github-delivery"], raw)
        assert inc.kind == "issue_edit" and inc.body_from is not None
        assert tick_diff(inc.body_from, inc.issue_body) == (["src/models/norm.py::RMSNorm"], [])

    def test_scan_comment_and_label_without_targets(self) -> None:
        """`/nki scan` and the label on an issue naming nothing both decide a scan."""
        from nkibot.handlers.decide import Needs, decide, screen

        comment = Incoming(event="issue_comment", action="created", delivery_id="d2",
                           kind="comment", repo="acme/models", installation_id=7,
                           sender_login="alice", issue_number=1, comment_id=3,
                           comment_body="/nki scan src/")
        assert screen(comment, POLICY) == Needs(sha=True, config=True)
        facts = Facts(permission="write", sha="9" * 40, default_branch="trunk")
        d = decide(comment, facts, POLICY)
        assert d.kind == "scan" and d.scan is not None and d.react
        assert (d.scan.ref, d.scan.globs, d.scan.reply_to) == ("trunk", ("src/",), 1)
        label = replace(comment, event="issues", action="labeled", kind="label",
                        label="nki-candidate", comment_body="", issue_body="No targets here.")
        assert decide(label, facts, POLICY).kind == "scan"
        named = replace(label, issue_body="src/norm.py::RMSNorm")
        assert decide(named, facts, POLICY).kind == "enqueue"

    def test_scan_on_a_pull_request_reads_its_head(self) -> None:
        """On a PR the scan runs at the PR's head branch and commit."""
        pr = replace(edit("", ""), kind="comment", is_pull_request=True)
        facts = Facts(permission="write", sha="7" * 40, head_ref="feature", default_branch="main")
        d = decide_scan(pr, facts, (), react=True)
        assert d.scan is not None and (d.scan.ref, d.scan.sha) == ("feature", "7" * 40)
