"""Static rules on kernel source (nkibot.verify.guards)."""

from __future__ import annotations

import pytest

from nkibot.verify.guards import jit_functions, static_check, static_findings

CLEAN = """
from __future__ import annotations

import math

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
from nki.language import par_dim


@nki.jit
def kernel(input, weight):
    out = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm)
    tile = nl.load(input[0:128, :])
    nl.store(out[0:128, :], value=nl.multiply(tile, math.sqrt(2.0)))
    scale = getattr(nl, "float32")
    return out


if __name__ == "__main__":
    pass
"""


class TestStaticCheck:
    def test_clean_kernel(self) -> None:
        """A kernel using only nki, numpy and math, with a param named `input`, is clean."""
        assert static_check(CLEAN) == []

    @pytest.mark.parametrize(
        ("snippet", "reason"),
        [
            ("import torch", "static:import-not-allowed torch"),
            ("import torch.nn as nn", "static:import-not-allowed torch.nn"),
            ("from torch import relu", "static:import-not-allowed torch"),
            ("import time", "static:import-not-allowed time"),
            ("import numpy.ctypeslib", "static:import-not-allowed numpy.ctypeslib"),
            ("import numpy.lib.format as f", "static:import-not-allowed numpy.lib.format"),
            ("from numpy import lib", "static:import-not-allowed numpy.lib"),
            ("from numpy import load", "static:import-not-allowed numpy.load"),
            ("import numpy as np\nm = np.lib.format.open_memmap('f')",
             "static:file-access np.lib.format.open_memmap"),
            ("from . import helpers", "static:import-not-allowed relative import"),
            ("x = open('/etc/passwd')", "static:file-access open"),
            ("import numpy as np\nx = np.load('expected.npy')", "static:file-access np.load"),
            ("def f(a):\n    a.tofile('x')", "static:file-access .tofile"),
            ("exec('x = 1')", "static:exec exec"),
            ("eval('1')", "static:exec eval"),
            ("compile('1', 'f', 'eval')", "static:exec compile"),
            ("__import__('os')", "static:dynamic-access __import__"),
            ("g = globals()", "static:dynamic-access globals"),
            ("setattr(a, 'b', 1)", "static:dynamic-access setattr"),
            ("def f(a):\n    return a.__class__", "static:dunder-access __class__"),
            ("x = __builtins__", "static:dunder-access __builtins__"),
            ("getattr(a, '__dict__')", "static:dunder-access getattr('__dict__')"),
            ("getattr(a, name)", "static:dynamic-access getattr with a computed name"),
            ("_n = 0\ndef f():\n    global _n\n    _n += 1", "static:global-statement _n"),
            ("def f(:", None),
        ],
    )
    def test_forbidden(self, snippet: str, reason: str | None) -> None:
        """Each forbidden construct is named by its own reason string."""
        reasons = static_check(snippet)
        if reason is None:
            assert reasons and reasons[0].startswith("static:syntax-error")
        else:
            assert reason in reasons

    def test_nl_load_is_not_numpy_io(self) -> None:
        """`nl.load` is an NKI instruction; only numpy's own load is file access."""
        assert static_check("import nki.language as nl\nt = nl.load(x)") == []

    def test_findings_carry_lines(self) -> None:
        """Findings name the line they are on, for the diagnostics."""
        findings = static_findings("import nki\n\nimport torch\n")
        assert [(f.rule, f.line) for f in findings] == [("import-not-allowed", 3)]

    def test_duplicates_collapse(self) -> None:
        """The same reason on several lines is reported once."""
        assert static_check("open('a')\nopen('b')\n") == ["static:file-access open"]


class TestJitFunctions:
    def test_decorator_forms(self) -> None:
        """`@nki.jit`, `@nki.jit(...)` and `@jit` count; undecorated helpers do not."""
        src = (
            "import nki\nfrom nki import jit\n"
            "def helper(x):\n    return x\n"
            "@nki.jit\ndef a(x):\n    return x\n"
            "@nki.jit(mode='simulate')\ndef b(x):\n    return x\n"
            "@jit\ndef c(x):\n    return x\n"
        )
        assert jit_functions(src) == ["a", "b", "c"]

    def test_syntax_error(self) -> None:
        """Unparseable source has no kernels rather than raising."""
        assert jit_functions("def (") == []
