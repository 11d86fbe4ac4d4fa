"""Attack class 6: state kept across calls (a counter, a cache of earlier answers).

A kernel correct for its first few calls, or one that replays its first answer on the
determinism re-run, needs somewhere to keep state between calls: a mutable default, a
module-level container, an attribute on a function, class or module, a `global`, or a
decorator's closure. Each is refused before anything runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.verify.attacks.static_helpers import assert_refused, kernel

RELU = """
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.relu(nl.load(x)))
    return out
"""
WRONG = """
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.negative(nl.load(x)))
    return out
"""

ATTACKS = {
    "mutable-default-counter": ("@nki.jit\ndef relu_kernel(x, calls=[0]):\n"
                                "    calls[0] += 1\n    if calls[0] > 7:\n" +
                                WRONG.replace("\n    ", "\n        ") + RELU,
                                "static:mutable-default calls=..."),
    "dict-default-cache": ("@nki.jit\ndef relu_kernel(x, cache={}):\n"
                           "    if 'out' in cache:\n        return cache['out']\n" + RELU,
                           "static:mutable-default cache=..."),
    "module-dict-replay": ("_CACHE = {}\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                           "    if 'out' in _CACHE:\n        return _CACHE['out']\n"
                           "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
                           "    nl.store(out, value=nl.relu(nl.load(x)))\n"
                           "    _CACHE['out'] = out\n    return out\n",
                           "static:module-state module-level value"),
    "module-list-counter": ("SEEN = []\n\n\n@nki.jit\ndef relu_kernel(x):\n"
                            "    SEEN.append(1)\n" + RELU, "static:module-state"),
    "module-level-tensor": ("STATE = nl.ndarray((128, 64), dtype=nl.float32, "
                            "buffer=nl.shared_hbm)\n\n\n@nki.jit\ndef relu_kernel(x):\n" + RELU,
                            "static:module-state"),
    "function-attribute": ("@nki.jit\ndef relu_kernel(x):\n"
                           "    relu_kernel.calls = 1\n" + RELU,
                           "static:attribute-assignment relu_kernel.…"),
    "class-attribute": ("class Box(nl.NKIObject):\n    hits = 0\n\n\n@nki.jit\n"
                        "def relu_kernel(x):\n    Box.hits += 1\n" + RELU,
                        "static:attribute-assignment Box.…"),
    "module-attribute": ("@nki.jit\ndef relu_kernel(x):\n    nl.seen = True\n" + RELU,
                         "static:attribute-assignment nl.…"),
    "global-counter": ("CALLS = 0\n\n\n@nki.jit\ndef relu_kernel(x):\n    global CALLS\n"
                       "    CALLS += 1\n" + RELU, "static:global-statement CALLS"),
    "closure-decorator": ("def counted(f):\n    n = [0]\n\n    def wrapper(x):\n"
                          "        n[0] += 1\n        return f(x)\n    return wrapper\n\n\n"
                          "@nki.jit\n@counted\ndef relu_kernel(x):\n" + RELU,
                          "static:decorator-not-allowed @counted"),
    "plain-class": ("class Memo:\n    last = None\n\n\n@nki.jit\ndef relu_kernel(x):\n" + RELU,
                    "static:class-not-allowed class Memo"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_state_across_calls_is_refused(name: str, tmp_path: Path) -> None:
    """Each place to keep state between calls is refused statically and by `nkibot verify`."""
    body, reason = ATTACKS[name]
    assert_refused(kernel(body), reason, tmp_path)
