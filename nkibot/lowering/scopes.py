"""Each stage of a staged kernel runs in a function of its own, so its SBUF tiles die with it.

The simulator (like CPython) frees a tile when its last reference goes. A tile an emitter
allocates in the kernel body (a convolution's resident input plane and weights, a block
norm's per-row columns, an attention's resident keys) is still referenced by its variable
after its loops end, so it would stay live through every later stage and take SBUF that
those stages' budgets count as theirs (KernelBench level 2 72 and 79: a 64 or 128 KiB conv
plane under a pool or an instance norm's row tiles, sbuf-capacity). Inside a function the
variables, and so the tiles, end when it returns: every stage has the whole SBUF budget and
no emitter needs to know what came before it.

The function's parameters are the kernel-level names its code reads (inputs, outputs, HBM
scratch, views); names it binds and a later stage reads (none today) are returned.
"""

from __future__ import annotations

import builtins
import re
import symtable
from collections.abc import Sequence
from dataclasses import dataclass

from nkibot.lowering.emit.builder import Names

#: Module-level names every generated kernel has: never parameters.
MODULE_NAMES = frozenset({"nki", "nl", "nisa"})
#: Builtins: not parameters either, unless the kernel binds the name itself (a forward's
#: `input` argument, which the static rules would refuse as the builtin).
BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass(frozen=True)
class StageCode:
    """One stage's code as the emitter wrote it into the kernel body (depth 1)."""

    number: int
    lines: tuple[str, ...]
    at: int  # where in the kernel body its call goes


def _globals(table: symtable.SymbolTable) -> set[str]:
    names = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for child in table.get_children():  # comprehensions
        names |= _globals(child)
    return names


def _symbols(lines: Sequence[str]) -> tuple[list[str], set[str]]:
    """(names read but not bound, in order of first use; names bound) of a function body."""
    table = symtable.symtable("\n".join(["def _stage():", *lines, "    pass"]), "<stage>",
                              "exec").get_children()[0]
    free = _globals(table)
    bound = {s.get_name() for s in table.get_symbols() if s.is_local()}
    return [w for w in _words(lines) if w in free], bound


def _words(lines: Sequence[str]) -> dict[str, None]:
    """The identifiers of `lines`, in order of first use (comments left out)."""
    return dict.fromkeys(w for line in lines
                         for w in re.findall(r"\b[A-Za-z_]\w*\b", line.split("#")[0]))


def _def_name(helper: Sequence[str]) -> str:
    match = re.match(r"def (\w+)\(", helper[0]) if helper else None
    return match.group(1) if match else ""


def wrap_stages(body: Sequence[str], stages: Sequence[StageCode], helpers: list[list[str]],
                names: Names, outputs: Sequence[str]) -> list[str]:
    """`body` (the kernel's lines without the stages' code) with a call to a new helper per
    stage at its place (`StageCode.at`); the helpers are appended to `helpers`."""
    module = {_def_name(h) for h in helpers} | MODULE_NAMES | (BUILTIN_NAMES - names.taken)
    later = set(outputs)  # names read after the stage being wrapped (stages done backwards)
    calls: list[tuple[int, str]] = []
    made: list[list[str]] = []
    for stage in reversed(stages):
        later |= set(_words(body[stage.at:]))
        free, bound = _symbols(stage.lines)
        params = ", ".join(n for n in free if n not in module)
        returned = ", ".join(sorted(bound & later))
        fn = names.fresh(f"stage{stage.number}")
        made.append([f"def {fn}({params}):",
                     f'    """Stage {stage.number} of {len(stages)} (see the kernel body): its '
                     'SBUF tiles die when it returns."""',
                     *stage.lines,
                     *([f"    return {returned}"] if returned else [])])
        calls.append((stage.at, f"    {returned} = {fn}({params})" if returned
                      else f"    {fn}({params})"))
        later |= set(free)
    helpers += reversed(made)
    return _merged(body, list(reversed(calls)))


def _merged(body: Sequence[str], calls: Sequence[tuple[int, str]]) -> list[str]:
    """`body` with each call inserted before line `at` (after the last line at its end)."""
    out: list[str] = []
    done = 0
    for at, call in calls:
        out += [*body[done:at], call]
        done = at
    return out + list(body[done:])
