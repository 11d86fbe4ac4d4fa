"""verify: everything between a candidate kernel and its verdict.

The front door is `nkibot.verify.check`: `check(src, task, reference, child)` is the
verdict, and `check_kernel(...)` adds compiling and the reference for the CLI, MCP and
the Re-profile action. They are exported here lazily: every sandboxed child imports this
package, and must not pay for the parent's imports (libcst, pydantic results). The
function `check` shares its name with its module, so it is imported from the module:
`from nkibot.verify.check import check`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nkibot.verify.check import Checker, KernelChild, RunChild, check_kernel

__all__ = ["Checker", "KernelChild", "RunChild", "check_kernel"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from nkibot.verify import check as front_door

        return getattr(front_door, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
