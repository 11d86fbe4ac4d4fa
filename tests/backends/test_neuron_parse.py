"""Compiler and runtime output parsed into located diagnostics with rule ids and fixes."""

from __future__ import annotations

from pathlib import Path

from nkibot.backends.neuron.parse import classify, parse_compiler_log, timeout_diagnostic

FIXTURES = Path(__file__).parent / "fixtures"


def _log(name: str) -> str:
    return (FIXTURES / name).read_text()


class TestNeuronxCcLog:
    def test_codes_become_diagnostics(self) -> None:
        """NCC codes in neuronx-cc log lines become diagnostics with severity from the level."""
        diags = parse_compiler_log(_log("neuronx_cc_error.log"), "kernel.py")
        by_rule = {d.rule: d for d in diags}
        assert by_rule["out-of-memory"].severity == "error"
        assert "high-bandwidth memory" in by_rule["out-of-memory"].message
        assert by_rule["out-of-memory"].fix
        assert by_rule["neuronx-cc:NCC_WTEN002"].severity == "warning"

    def test_driver_failure_and_no_noise(self) -> None:
        """[F134] is reported; INFO lines, star banners and internal frames are not."""
        diags = parse_compiler_log(_log("neuronx_cc_error.log"), "kernel.py")
        messages = [d.message for d in diags]
        assert any(m.startswith("neuronx-cc terminated abnormally") for m in messages)
        assert not any("Compiling kernel" in m or "*****" in m or "File " in m for m in messages)
        assert len(diags) == 3


class TestTraceback:
    def test_points_at_the_kernel_line(self) -> None:
        """A front-end exception is located at the innermost frame in the kernel file."""
        [diag] = parse_compiler_log(_log("nki_trace_error.log"), "kernel.py")
        assert diag.rule == "partition-dim"
        assert diag.line == 14
        assert diag.file == "kernel.py"
        assert "exceeds the maximum of 128" in diag.message
        assert diag.fix and "128" in diag.fix

    def test_without_kernel_file_there_is_no_location(self) -> None:
        """When the kernel file is unknown, the message is kept but not located."""
        [diag] = parse_compiler_log(_log("nki_trace_error.log"), None)
        assert diag.line is None and diag.rule == "partition-dim"


class TestLocatedMessages:
    def test_file_line_col_messages(self) -> None:
        """`kernel.py:21:8: error: ...` gives file, line, severity and the buffer rule."""
        err, warn = parse_compiler_log(_log("nki_located_error.log"), "/tmp/w/kernel.py")
        assert (err.rule, err.line, err.severity) == ("buffer-illegal", 21, "error")
        assert err.file == "/tmp/w/kernel.py"
        assert (warn.line, warn.severity) == (30, "warning")


class TestRuntimeErrors:
    def test_nrt_oob_is_out_of_bounds(self) -> None:
        """NRT_EXEC_OOB maps to the out-of-bounds rule, with the runtime's code kept."""
        diags = parse_compiler_log(_log("nrt_runtime_error.log"), "kernel.py")
        oob = [d for d in diags if "NRT_EXEC_OOB(1006)" in d.message]
        assert oob and oob[0].rule == "out-of-bounds"

    def test_other_nrt_errors_keep_their_name(self) -> None:
        """An unclassified runtime error's rule names the NRT status."""
        [diag] = parse_compiler_log("NRT Error NRT_TIMEOUT(5): execution timed out", None)
        assert diag.rule == "runtime:NRT_TIMEOUT"


class TestClassify:
    def test_families(self) -> None:
        """Each documented error family maps to the simulator's rule id."""
        cases = {
            "Partition dimension mismatch between operands": "partition-mismatch",
            "moving free size 1024 exceeds 512": "matmul-moving-free",
            "PSUM bank overflow: 4096 bytes per partition": "psum-bank",
            "Index 130 is out of bounds for axis 0": "out-of-bounds",
            "Cannot update immutable parameter 'a'": "read-only",
            "module 'neuronxcc.nki' is not supported": "legacy-dialect",
        }
        for text, rule in cases.items():
            assert classify(text) == rule, text

    def test_unknown_text_without_code_is_generic(self) -> None:
        """An unrecognised message without a code is a generic compile error."""
        assert classify("something odd happened") == "compile-error"

    def test_timeout_diagnostic(self) -> None:
        """A compile timeout says how long it ran and how to fix it."""
        diag = timeout_diagnostic(120)
        assert diag.rule == "compile-timeout" and "120 s" in diag.message and diag.fix
