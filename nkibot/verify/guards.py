"""Static rules on kernel source (libcst): an allow-list of what a kernel may name and do.

A kernel may import `nki`, `nki.language`, `nki.isa`, `nki.typing`, `numpy` and `math`,
and use from them only the members `nkibot.verify.allowlist` lists; of the builtins,
only the pure ones listed there. It may not look names up dynamically (`getattr` & co.),
touch any underscore attribute, use a module as a value or re-bind one, define classes
other than `nl.NKIObject` dataclasses, keep state between calls (mutable defaults,
module-level non-constant values, attributes assigned on modules, functions or classes,
decorators other than `nki.jit`), or reach frames and code objects. These block
capabilities, not spellings: the rules follow every alias. docs/security.md ("Kernel
rules") explains each. Each finding names its rule, its line and what to use instead;
its reason string is `static:<rule> <detail>`.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

with warnings.catch_warnings():
    # libcst's metadata package imports mypy_extensions.TypedDict, which warns on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    from libcst.metadata import MetadataWrapper

from nkibot.verify.guard_imports import dotted
from nkibot.verify.guard_rules import Checker


@dataclass(frozen=True)
class Finding:
    rule: str
    detail: str
    line: int | None
    fix: str = ""

    @property
    def reason(self) -> str:
        return f"static:{self.rule} {self.detail}".rstrip()


def static_findings(src: str) -> list[Finding]:
    """Every rule the source breaks, in source order (a syntax error is one finding)."""
    return list(_findings(src))


@functools.lru_cache(maxsize=16)
def _findings(src: str) -> tuple[Finding, ...]:
    """`static_findings`, once per source: a conversion checks one kernel at compile,
    verification, costing and profiling (about a second of libcst each at 300 lines)."""
    try:
        module = cst.parse_module(src)
    except cst.ParserSyntaxError as exc:
        return (Finding("syntax-error", f"line {exc.raw_line}: {exc.message}", exc.raw_line,
                        "fix the Python syntax; send the complete file"),)
    checker = Checker()
    MetadataWrapper(module).visit(checker)
    found = [Finding(rule, detail, line, fix) for rule, detail, line, fix in checker.found]
    return tuple(sorted(dict.fromkeys(found), key=lambda f: f.line or 0))


def static_check(src: str) -> list[str]:
    """Reason strings (deduplicated, in order) for every static rule the source breaks."""
    return list(dict.fromkeys(f.reason for f in static_findings(src)))


def jit_functions(src: str) -> list[str]:
    """Names of the top-level functions decorated with `@nki.jit` (or `@jit`, `@nki.jit(...)`)."""
    try:
        module = cst.parse_module(src)
    except cst.ParserSyntaxError:
        return []
    names = []
    for stmt in module.body:
        if not isinstance(stmt, cst.FunctionDef):
            continue
        for deco in stmt.decorators:
            target = deco.decorator.func if isinstance(deco.decorator, cst.Call) else (
                deco.decorator)
            if dotted(target) in ("nki.jit", "jit"):
                names.append(stmt.name.value)
                break
    return names
