"""Sandboxed child: a Task as JSON on stdin -> {source, function, ops, variants} or
{declined, reason}."""

from __future__ import annotations

import json
import sys

from nkibot.lowering.lower import lower_task
from nkibot.lowering.plan import Lowered
from nkibot.task import Task


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
    print(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
