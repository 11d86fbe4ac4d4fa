"""Attack class 2: walking around the static rules to reach os/sys, torch or the harness.

Each kernel below would, if it ran, reach a capability the rules deny (NumPy submodules
carry `os` and `sys`, `np.ctypeslib` reaches libc, `sys.modules` patches the harness).
The allow-list refuses each before anything runs, with the rule that catches it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verify.attacks.static_helpers import HEADER, assert_refused, kernel

RELU = """
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.relu(nl.load(x)))
    return out
"""

ATTACKS = {
    "f2py-sys-modules": ("@nki.jit\ndef relu_kernel(x):\n"
                         "    harness = np.f2py.sys.modules['nkibot.verify.harness']\n"
                         "    harness.judge = None\n" + RELU, "static:numpy-name np.f2py"),
    "getattr-literal": ("@nki.jit\ndef relu_kernel(x):\n"
                        "    os = getattr(getattr(np, 'f2py'), 'os')\n" + RELU,
                        "static:dynamic-access getattr"),
    "rebind-numpy": ("q = np\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                     "    return q.load('/tmp/expected.npy')\n", "static:module-as-value np"),
    "numpy-as-argument": ("def load(m):\n    return m.load('/tmp/expected.npy')\n\n\n"
                          "@nki.jit\ndef relu_kernel(x):\n    return load(np)\n",
                          "static:module-as-value np"),
    "numpy-param-shadow": ("@nki.jit\ndef relu_kernel(x, np=np):\n"
                           "    return np.load('/tmp/expected.npy')\n",
                           "static:module-rebound np"),
    "alias-import": ("import numpy as xp\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                     "    return xp.load('/tmp/expected.npy')\n", "static:numpy-name xp.load"),
    "ctypeslib-libc": ("@nki.jit\ndef relu_kernel(x):\n"
                       "    libc = np.ctypeslib.load_library('libc.so.6', '/lib')\n"
                       + RELU, "static:numpy-name np.ctypeslib"),
    "import-torch": ("import torch\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                     "    return torch.relu(x)\n", "static:import-not-allowed torch"),
    "from-torch": ("from torch.nn.functional import relu\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                   "    return relu(x)\n", "static:import-not-allowed torch.nn.functional"),
    "dunder-import-torch": ("@nki.jit\ndef relu_kernel(x):\n"
                            "    return __import__('torch').relu(x)\n",
                            "static:dynamic-access __import__"),
    "importlib-torch": ("import importlib\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                        "    return importlib.import_module('torch').relu(x)\n",
                        "static:dynamic-access import importlib"),
    "sys-modules-patch": ("import sys\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                          "    sys.modules['nkibot.verify.judge'] = None\n" + RELU,
                          "static:process-access import sys"),
    "simulator-helper-module": ("@nki.jit\ndef relu_kernel(x):\n"
                                "    os = nl.math.np.f2py.os\n" + RELU, "static:nki-name nl.math"),
    "isa-submodule": ("@nki.jit\ndef relu_kernel(x):\n"
                      "    sys = nisa.compute.np.f2py.sys\n" + RELU,
                      "static:nki-name nisa.compute"),
    "vars-lookup": ("@nki.jit\ndef relu_kernel(x):\n    f2py = vars(np)['f2py']\n" + RELU,
                    "static:dynamic-access vars"),
    "dunder-dict": ("@nki.jit\ndef relu_kernel(x):\n    f2py = np.__dict__['f2py']\n" + RELU,
                    "static:dunder-access __dict__"),
    "frame-walk": ("def frames():\n    yield gen.gi_frame.f_back.f_globals\n\n\n"
                   "@nki.jit\ndef relu_kernel(x):\n    gen = frames()\n" + RELU,
                   "static:introspection .gi_frame"),
    "format-string-attribute": ("@nki.jit\ndef relu_kernel(x):\n"
                                "    leak = '{0.__globals__}'.format(relu_kernel)\n" + RELU,
                                "static:dynamic-access .format"),
    "type-mro": ("@nki.jit\ndef relu_kernel(x):\n    base = type(x).mro()[-1]\n" + RELU,
                 "static:dynamic-access type"),
    "star-import": ("from nki.language import *\n\n\n@nki.jit\ndef relu_kernel(x):\n" + RELU,
                    "static:import-star"),
    "exec-string": ("@nki.jit\ndef relu_kernel(x):\n    exec('import os')\n" + RELU,
                    "static:exec exec"),
    "open-expected": ("@nki.jit\ndef relu_kernel(x):\n"
                      "    data = open('/tmp/expected.npy', 'rb').read()\n" + RELU,
                      "static:file-access open"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_walkaround_is_refused(name: str, tmp_path: Path) -> None:
    """Each way around the rules is refused statically and by `nkibot verify`."""
    body, reason = ATTACKS[name]
    assert_refused(kernel(body, HEADER), reason, tmp_path)
