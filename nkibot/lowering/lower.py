"""In-process entry: Task -> Lowered | Declined (the sandboxed child and tests call this)."""

from __future__ import annotations

from nkibot.lowering.plan import Declined, Lowered, lower_graph
from nkibot.task import Task


def lower_task(task: Task) -> Lowered | Declined:
    """Trace the task's module at its shapes and emit a kernel, or decline with reasons.

    Executes the user's module code (to build and trace it): call this inside the sandbox.
    """
    if task.kind != "module":
        return Declined([], f"the lowering converts nn.Module targets, not {task.kind}s")
    from nkibot.lowering.frontend.trace import TraceError, trace_graph

    sites: dict[str, str] = {}
    try:
        graph, unsupported = trace_graph(task, sites)
    except TraceError as exc:
        return Declined([], str(exc), module_error=True)
    if unsupported:
        from nkibot.lowering.frontend.catalogue import hint

        # each op as aten names it, then the PyTorch call and line in the user's file
        named = [f"{op} ({sites[op]})" if op in sites else op for op in unsupported]
        return Declined(unsupported, "unsupported ops: " + ", ".join(named) + "; " + hint())
    return lower_graph(graph, task.entry_point)
