"""Sandboxed child: a Task as JSON on stdin -> {source, function, ops, variants} or
{declined, reason}."""

from __future__ import annotations

import json
import sys

from nkibot.lowering.lower import lower_task
from nkibot.lowering.plan import Lowered
from nkibot.task import Task

#: The parent keeps the last 4 MiB of the child's stdout (verify.sandbox.STDOUT_CAP): an
#: answer longer than this drops tiling variants, last first, until it fits.
MAX_ANSWER = 3 * 1024 * 1024


def main() -> int:
    try:
        task = Task.model_validate_json(sys.stdin.buffer.read())
        result = lower_task(task)
    except Exception as exc:  # the parent turns this into a decline, never a crash
        print(json.dumps({"declined": [], "reason": f"lowering failed: {exc!r}",
                          "module_error": True}))
        return 0
    if isinstance(result, Lowered):
        payload: dict[str, object] = {
            "source": result.source, "function": result.function, "ops": result.ops,
            "variants": [{"name": v.name, "source": v.source} for v in result.variants],
            "plan": result.plan}
    else:
        payload = {"declined": result.unsupported, "reason": result.reason,
                   "module_error": result.module_error}
    print(fitted(payload))
    return 0


def fitted(payload: dict[str, object]) -> str:
    """The answer as one JSON line, variants left out while it is over MAX_ANSWER (a
    deep network's kernel and its variants ran to 5.8 MB, cut by the parent's cap)."""
    text = json.dumps(payload)
    variants = payload.get("variants")
    while len(text) > MAX_ANSWER and isinstance(variants, list) and variants:
        variants.pop()
        text = json.dumps(payload)
    return text


if __name__ == "__main__":
    sys.exit(main())
