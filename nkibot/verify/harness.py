"""The sandboxed harness child: `python -m nkibot.verify.harness`, one JSON request on stdin.

Ops:
- `describe`: import the reference, report its forward inputs, init args and state_dict;
- `reference`: build each trial's inputs, run the reference (fp32, and natively for
  low-precision inputs), save inputs, state and outputs as `.npy` files;
- `run_kernel`: run a candidate kernel (its source comes in the request) under the
  simulator on the given inputs, in the given order, and save its raw outputs to fixed
  names. This op never imports torch and never sees expected outputs.

The reply is one JSON object on the real stdout. Anything the user's code prints goes to
stderr, because stdout is re-pointed there before any user code runs. The parent side is
`nkibot.verify.client`; the shapes of requests and replies are in `protocol`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from nkibot.verify.protocol import error_dict, problem


def _dispatch(request: dict[str, Any]) -> Any:
    op = request.get("op")
    if op in ("describe", "reference"):
        from nkibot.verify.children import torch_side

        return torch_side.describe(request) if op == "describe" else (
            torch_side.reference(request))
    if op == "run_kernel":
        from nkibot.verify.children import kernel_side

        return kernel_side.run_kernel(request)
    return {"ok": False, "error": problem("BadRequest", f"unknown op {op!r}")}


def main() -> int:
    return serve(_dispatch)


def serve(handle: Callable[[dict[str, Any]], Any]) -> int:
    """Answer one JSON request from stdin with `handle`'s reply on the real stdout.

    Shared by every child the parent names: this harness, and a backend's own kernel
    child (`nkibot.backends.neuron.trials`)."""
    # `python -I` ignores PYTHONDONTWRITEBYTECODE; never leave __pycache__ in user trees.
    sys.dont_write_bytecode = True
    # Keep the real stdout for the reply; user code printing must not corrupt it.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        response = handle(json.loads(sys.stdin.read()))
    except Exception as exc:  # the reply must describe any failure, whatever raised it
        response = {"ok": False, "error": error_dict(exc)}
    reply.write(json.dumps(response, default=str) + "\n")
    reply.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
