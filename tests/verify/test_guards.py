"""Static rules on kernel source (nkibot.verify.guards): an allow-list that follows aliases."""

from __future__ import annotations

import pytest

from nkibot.verify.guards import jit_functions, static_check, static_findings

CLEAN = '''
"""An official-style kernel file: every construct here must stay allowed."""
from __future__ import annotations

import math
from dataclasses import dataclass

import nki as nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
from nki.language import NKIObject, par_dim

TILE = 128
SHAPE = (TILE, 4 * 128)
EPS = math.sqrt(2.0) * 1e-6
DT = nl.float32
NEG_INF = -float("inf")


@dataclass
class Config(NKIObject):
    """A kernel configuration object."""
    scale: float = 1.0
    name: str = "cfg"

    def __post_init__(self):
        self.ratio = self.scale / 2


def helper(dst, src, op=np.add, scale=1.0, shape=(128, 1), dtype=nl.bfloat16):
    nisa.tensor_scalar(dst=dst, data=src, op0=op, operand0=scale)
    return [s for s in shape if s > 0]


@nki.jit
def kernel(input, weight, type_=None):
    out = nl.ndarray(input.shape, dtype=input.dtype, buffer=nl.shared_hbm)
    rows, cols = input.shape
    assert rows % nl.tile_size.pmax == 0, f"rows {rows} must divide by {TILE}"
    cfg = Config(scale=0.5)
    acc = {"n": 0}
    tiles = []
    for i in nl.affine_range(math.ceil(rows / 128)):
        t = nl.ndarray((128, cols), dtype=np.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=input[i * 128:(i + 1) * 128, 0:cols])
        scaled = nl.multiply(t, cfg.scale * np.pi)
        tiles.append(scaled)
        acc["n"] += 1
        fn = lambda a: nl.exp(a)
        nl.store(out[i * 128:(i + 1) * 128, 0:cols], value=fn(scaled))
    print(len(tiles), min(rows, 128), nisa.engine.vector)
    return out


if __name__ == "__main__":
    print("kernel module")
'''


class TestAllowed:
    def test_official_style_kernel_is_clean(self) -> None:
        """Aliases, NKIObject dataclasses, constants, np dtypes/ufuncs, math, main guard."""
        assert static_findings(CLEAN) == []

    @pytest.mark.parametrize("snippet", [
        "import numpy as xp\nDT = xp.float32",
        "from nki import language as nl\nX = nl.sbuf",
        "import nki.language\ndef f(x):\n    return nki.language.exp(x)",
        "from numpy import float32, add\nOPS = (add, float32)",
        "import numpy as np\nLIM = np.finfo(np.float32).max",
        "def f(x):\n    out = [0] * 4\n    out[0] = x\n    return out",
        "import nki.language as nl\ndef f(x):\n    with nl.no_reorder():\n        pass",
    ])
    def test_allowed(self, snippet: str) -> None:
        """Common honest constructs pass."""
        assert static_check(snippet) == []

    def test_nl_load_is_not_numpy_io(self) -> None:
        """`nl.load` is an NKI instruction; only numpy's own load is refused."""
        assert static_check("import nki.language as nl\nt = nl.load") == []


class TestRefused:
    @pytest.mark.parametrize(("snippet", "reason"), [
        # imports
        ("import torch", "static:import-not-allowed torch"),
        ("import torch.nn as nn", "static:import-not-allowed torch.nn"),
        ("from torch import relu", "static:import-not-allowed torch"),
        ("import time", "static:import-not-allowed time"),
        ("import os", "static:process-access import os"),
        ("import numpy.ctypeslib", "static:import-not-allowed numpy.ctypeslib"),
        ("import numpy.lib.format as f", "static:import-not-allowed numpy.lib.format"),
        ("from numpy import lib", "static:numpy-name numpy.lib"),
        ("from numpy import load", "static:numpy-name numpy.load"),
        ("from nki.language import *", "static:import-star from nki.language import *"),
        ("from . import helpers", "static:import-not-allowed relative import"),
        ("from dataclasses import field", "static:import-not-allowed dataclasses.field"),
        # numpy members: values only, no submodules, no arrays, no I/O
        ("import numpy as np\nx = np.f2py.sys.modules", "static:numpy-name np.f2py"),
        ("import numpy as np\nx = np.ctypeslib", "static:numpy-name np.ctypeslib"),
        ("import numpy as np\nm = np.lib.format.open_memmap", "static:numpy-name np.lib"),
        ("import numpy as np\ndef f():\n    return np.load('expected.npy')",
         "static:numpy-name np.load"),
        ("import numpy as q\ndef f():\n    return q.zeros(3)", "static:numpy-name q.zeros"),
        ("import numpy as np\ndef f():\n    return np.random.rand()",
         "static:numpy-name np.random"),
        ("import numpy as np\ndef f(a):\n    return np.add.reduce(a)",
         "static:numpy-name np.add.reduce"),
        ("import nki.language as nl\nx = nl.math", "static:nki-name nl.math"),
        ("import nki.isa as nisa\nx = nisa.compute.np", "static:nki-name nisa.compute"),
        ("import math\nx = math.sys", "static:math-name math.sys"),
        # modules as values, re-bound
        ("import numpy as np\nnp2 = np", "static:module-as-value np"),
        ("import numpy as np\ndef f(g):\n    return g(np)", "static:module-as-value np"),
        ("import nki.language\nL = nki.language", "static:module-as-value nki.language"),
        ("import numpy as np\nnp = 1", "static:module-rebound np"),
        ("import numpy as np\ndef f(np):\n    return np.load", "static:module-rebound np"),
        ("import numpy as np\nimport nki.language as np", "static:module-rebound np"),
        # builtins
        ("def f():\n    return open('/etc/passwd')", "static:file-access open"),
        ("exec('x = 1')", "static:exec exec"),
        ("eval('1')", "static:exec eval"),
        ("compile('1', 'f', 'eval')", "static:exec compile"),
        ("__import__('os')", "static:dynamic-access __import__"),
        ("def f():\n    return globals()", "static:dynamic-access globals"),
        ("def f(a):\n    return getattr(a, 'shape')", "static:dynamic-access getattr"),
        ("def f(a):\n    setattr(a, 'b', 1)", "static:dynamic-access setattr"),
        ("def f(a):\n    return hasattr(a, 'x')", "static:dynamic-access hasattr"),
        ("def f(a, g=getattr):\n    return g(a, 'x')", "static:dynamic-access getattr"),
        ("def f(a):\n    return type(a)", "static:dynamic-access type"),
        ("def f(a):\n    return '{0._arr}'.format(a)", "static:dynamic-access .format"),
        ("def f(a):\n    return hash(a)", "static:builtin-not-allowed hash"),
        ("def f(a):\n    return input()", "static:builtin-not-allowed input"),
        # underscore and dunder attributes, introspection
        ("def f(a):\n    return a._arr", "static:underscore-attribute ._arr"),
        ("def f(a):\n    return a.__class__", "static:dunder-access __class__"),
        ("x = __builtins__", "static:dunder-access __builtins__"),
        ("def f(d):\n    return d['__builtins__']",
         "static:dunder-access '__builtins__' in a string"),
        ("def g():\n    yield g.gi_frame.f_back", "static:introspection .gi_frame"),
        ("def f(a):\n    a.tofile('x')", "static:file-access .tofile"),
        # classes and decorators
        ("class A:\n    pass", "static:class-not-allowed class A"),
        ("import nki.language as nl\nclass A(nl.NKIObject):\n    hits = []",
         "static:class-not-allowed class body holds only constants and methods"),
        ("import nki.language as nl\nclass A(nl.NKIObject):\n    def __getattr__(self, n):\n"
         "        pass", "static:dunder-access def __getattr__"),
        ("def deco(f):\n    return f\n@deco\ndef g():\n    pass",
         "static:decorator-not-allowed @deco"),
        # state across calls
        ("def f(x, cache={}):\n    return cache", "static:mutable-default cache=..."),
        ("def f(x, calls=[0]):\n    calls[0] += 1", "static:mutable-default calls=..."),
        ("import nki.language as nl\ndef f(x, t=nl.ndarray((1,), nl.float32)):\n    pass",
         "static:mutable-default t=..."),
        ("CACHE = {}", "static:module-state module-level value that is not a constant"),
        ("SEEN = [s for s in range(3)]",
         "static:module-state module-level value that is not a constant"),
        ("print('import time')", "static:module-state module-level code that is not a constant"),
        ("for i in range(3):\n    pass", "static:module-state module-level for"),
        ("def f():\n    pass\nf.calls = 0", "static:attribute-assignment f.…"),
        ("import nki.language as nl\ndef f():\n    nl.tile_size.pmax = 64",
         "static:attribute-assignment nl.…"),
        ("import numpy as np\ndef f():\n    np.add = np.subtract",
         "static:attribute-assignment np.…"),
        ("_n = 0\ndef f():\n    global _n\n    _n += 1", "static:global-statement _n"),
        ("__name__ = '__main__'", "static:dunder-access __name__ assigned"),
    ])
    def test_refused(self, snippet: str, reason: str) -> None:
        """Each construct outside the allow-list is refused with its own reason string."""
        assert reason in static_check(snippet), static_check(snippet)

    def test_syntax_error(self) -> None:
        """Unparseable source is one syntax-error finding."""
        assert static_check("def f(:")[0].startswith("static:syntax-error")


class TestFindings:
    def test_findings_carry_line_and_fix(self) -> None:
        """Findings name the line and what to use instead, for the model's feedback."""
        findings = static_findings("import nki\n\nimport torch\n")
        assert [(f.rule, f.line) for f in findings] == [("import-not-allowed", 3)]
        assert "nki.language" in findings[0].fix

    def test_findings_in_source_order(self) -> None:
        """Several findings come back sorted by line."""
        src = "import nki\ndef f(a, c={}):\n    return a._x\nimport os\n"
        assert [f.line for f in static_findings(src)] == [2, 3, 4]

    def test_duplicates_collapse(self) -> None:
        """The same reason on several lines is reported once."""
        assert static_check("def f():\n    open('a')\n    open('b')\n") == [
            "static:file-access open"]

    def test_every_rule_has_a_fix(self) -> None:
        """No finding is emitted without its advice."""
        src = CLEAN + "\nimport os\nCACHE = {}\ndef g(a, b=[]):\n    return a._x, getattr(a, 'y')\n"
        findings = static_findings(src)
        assert len(findings) >= 4 and all(f.fix for f in findings)


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
        assert static_check(src) == []

    def test_syntax_error(self) -> None:
        """Unparseable source has no kernels rather than raising."""
        assert jit_functions("def (") == []
