"""The `/nki` grammar: commands on their own line, outside quotes and code, fuzzed."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkibot.handlers.commands import Command, CommandError, command_lines, parse_comment


class TestCommandLines:
    def test_quotes_and_fences_are_ignored(self) -> None:
        """Quoted lines and fenced code never count; a later plain line does."""
        body = ("> /nki convert a.py::A\n```\n/nki convert b.py::B\n```\n~~~\n/nki help\n~~~\n"
                "text /nki convert inline.py::X\n  /nki convert c.py::C\n")
        assert command_lines(body) == ["/nki convert c.py::C"]

    def test_prefix_must_be_a_word(self) -> None:
        """`/nkix` or `/nki-convert` are not commands."""
        assert command_lines("/nkix convert\n/nki-convert a.py::A") == []


class TestParseComment:
    def test_convert_with_every_option(self) -> None:
        """All options parse, including several shapes after one --shape and `--opt=value`."""
        cmd = parse_comment("/nki convert src/m.py::Net k/t.py::add_kernel --turns 3 "
                            "--model=claude --backend sim --atol 1e-3 --rtol 0.01 "
                            "--shape x=4x128xbf16 y=8 --shape=z=2x2xfp16")
        assert isinstance(cmd, Command) and cmd.verb == "convert"
        assert cmd.targets == ("src/m.py::Net", "k/t.py::add_kernel")
        o = cmd.options
        assert (o.turns, o.model, o.backend, o.atol, o.rtol) == (3, "claude", "sim", 1e-3, 0.01)
        assert [(s.name, s.shape, s.dtype) for s in o.shapes] == [
            ("x", (4, 128), "bfloat16"), ("y", (8,), "float32"), ("z", (2, 2), "float16")]

    @pytest.mark.parametrize(("text", "verb"), [
        ("/nki", "help"), ("/nki help", "help"), ("/nki retry", "retry"),
        ("/nki cancel", "cancel"), ("/nki convert", "convert")])
    def test_verbs(self, text: str, verb: str) -> None:
        """Bare `/nki` is help; each verb parses on its own."""
        cmd = parse_comment(text)
        assert isinstance(cmd, Command) and cmd.verb == verb

    @pytest.mark.parametrize(("text", "why"), [
        ("/nki convert ../secrets.py::X", ".."),
        ("/nki convert /etc/passwd.py::X", "relative"),
        ("/nki convert src/m.txt::X", ".py"),
        ("/nki convert src/m.py::1bad", "identifier"),
        ("/nki convert src/m.py", "path/to/file.py::Name"),
        ("/nki convert a.py::A --turns 0", "--turns"),
        ("/nki convert a.py::A --turns", "needs a value"),
        ("/nki convert a.py::A --model gpt", "--model"),
        ("/nki convert a.py::A --atol nan", "--atol"),
        ("/nki convert a.py::A --shape", "--shape"),
        ("/nki convert a.py::A --shape x=0x4", "positive"),
        ("/nki convert a.py::A --shape x=4xcomplex", "dtype"),
        ("/nki convert a.py::A --colour red", "unknown option"),
        ("/nki frobnicate", "unknown command"),
        ("/nki retry now", "retry"),
        ("/nki cancel --turns 3", "not allowed"),
    ])
    def test_malformed_commands_say_why(self, text: str, why: str) -> None:
        """Each malformed command yields a CommandError with a one-line reason."""
        err = parse_comment(text)
        assert isinstance(err, CommandError)
        assert why in err.reason and "\n" not in err.reason

    def test_huge_comment_is_fast_and_bounded(self) -> None:
        """A 5 MB comment parses in well under a second; an over-long command line is refused."""
        body = ("lorem ipsum " * 80 + "\n") * 5000 + "/nki convert a.py::A " + "x" * 5000
        start = time.monotonic()
        result = parse_comment(body)
        assert time.monotonic() - start < 1.0
        assert isinstance(result, CommandError) and "longer" in result.reason

    def test_no_command(self) -> None:
        """Plain text has no command."""
        assert parse_comment("looks good to me") is None


class TestParserFuzz:
    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=400))
    def test_any_text_parses_or_refuses(self, body: str) -> None:
        """Arbitrary text never raises: it is None, a Command or a CommandError."""
        result = parse_comment(body)
        assert result is None or isinstance(result, Command | CommandError)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from([
        "convert", "help", "retry", "cancel", "a.py::A", "../x.py::Y", "--turns", "3", "-1",
        "--model", "claude", "--shape", "x=4x4", "x=", "--atol", "1e9", "inf", "--backend",
        "neuron", "=", "::", "--rtol=0", "--shape=y=2xbf16"]), max_size=10))
    def test_token_soup(self, tokens: list[str]) -> None:
        """Any sequence of grammar-like tokens parses to a valid Command or a CommandError."""
        result = parse_comment("/nki " + " ".join(tokens))
        assert isinstance(result, Command | CommandError)
        if isinstance(result, Command):
            assert all(".." not in t and t.endswith(tuple("_ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "abcdefghijklmnopqrstuvwxyz0123456789"))
                       for t in result.targets)
            assert result.options.turns is None or 1 <= result.options.turns <= 50


class TestRenderedLikeGitHub:
    """Issue 26, class 4: a command counts only where GitHub renders it as text."""

    @pytest.mark.parametrize("body", [
        "````\n```\n/nki convert a.py::A\n````\n",
        "~~~~~\n/nki convert a.py::A\n~~~~~\n",
        "text\n\n    /nki convert a.py::A\n",
        "<!--\n/nki convert a.py::A\n-->\n",
        "<!-- /nki convert a.py::A -->\n",
        "<pre>\n/nki convert a.py::A\n</pre>\n",
        "<details>\n/nki convert a.py::A\n</details>\n",
        "> quoted\n/nki convert a.py::A\n",
        ">> /nki convert a.py::A\n",
        "- /nki convert a.py::A\n",
        "# /nki convert a.py::A\n",
    ], ids=["four-backticks", "tildes", "indented", "comment", "inline-comment", "pre",
            "html-block", "lazy-quote", "nested-quote", "list", "heading"])
    def test_not_rendered_as_a_paragraph_is_not_a_command(self, body: str) -> None:
        assert command_lines(body) == [] and parse_comment(body) is None

    def test_command_after_a_closed_block_counts(self) -> None:
        body = "````\n```\n/nki help\n```\n````\n\n<!-- note -->\n\n/nki convert b.py::B\n"
        assert command_lines(body) == ["/nki convert b.py::B"]
