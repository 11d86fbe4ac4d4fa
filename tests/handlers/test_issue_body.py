"""Targets read from an issue body: plain lines or a yaml block with shapes."""

from __future__ import annotations

from nkibot.handlers.issue_body import targets_from_issue_body


class TestTargetsFromIssueBody:
    def test_lines_and_bullets(self) -> None:
        """`path::Name` lines, bulleted or in backticks, are targets; prose is not."""
        body = "Please convert these:\n\n- src/a.py::Foo\n* `b/c.py::bar_kernel`\nThanks::Bye\n"
        found = targets_from_issue_body(body)
        assert not isinstance(found, str)
        assert [t.target for t in found] == ["src/a.py::Foo", "b/c.py::bar_kernel"]

    def test_yaml_block_with_shapes(self) -> None:
        """A fenced yaml block wins and may give shapes per target."""
        body = ("text src/ignored.py::X\n```yaml\ntargets:\n  - target: src/a.py::Foo\n"
                "    shapes: [x=2x64xbf16]\n  - src/b.py::Bar\n```\n")
        found = targets_from_issue_body(body)
        assert not isinstance(found, str)
        assert [t.target for t in found] == ["src/a.py::Foo", "src/b.py::Bar"]
        assert found[0].shapes[0].shape == (2, 64)

    def test_bad_targets_are_reasons(self) -> None:
        """A `..` path or a broken yaml block gives a one-line reason, not an exception."""
        assert isinstance(targets_from_issue_body("- ../x.py::X"), str)
        assert isinstance(targets_from_issue_body("```yaml\ntargets: [\n```"), str)
        assert isinstance(targets_from_issue_body("```yaml\ntargets: [../a.py::B]\n```"), str)

    def test_nothing(self) -> None:
        """A body without targets gives an empty list."""
        assert targets_from_issue_body("no targets here") == []
