"""Kernels of calibration points that live in the Neuron SDK documentation, not in the folder.

We must not commit third-party kernel code, so a point may name its kernel inside an SDK
checkout given on the command line (`perf_calibration.py DIR --sdk PATH`) with
`"kernel_root": "sdk"`: `kernel_file` is then a path under PATH. A `.py` file is loaded as
it is; from a `.rst` tutorial, the `code_block` field picks the Python code block: the
`ordinal`-th block (1-based) that defines `def <function>(`, which must also contain
`contains` (a check that the block is still the one the published figure belongs to).
The extracted block is written to a temporary file and loaded from there.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

_DIRECTIVE = re.compile(r"^(\s*)\.\. code-block::\s*python\s*$")


class SourceError(ValueError):
    """The point's kernel cannot be found where it says."""


def python_blocks(rst: str) -> list[str]:
    """Every `.. code-block:: python` body of an reStructuredText file, dedented."""
    lines = rst.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        i += 1
        if not m:
            continue
        indent = len(m.group(1))
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip()
                                  or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        blocks.append(textwrap.dedent("\n".join(body)).strip("\n") + "\n")
    return blocks


def extract(rst: str, function: str, ordinal: int, contains: str = "") -> str:
    """The `ordinal`-th Python block of `rst` that defines `function` (and holds `contains`)."""
    found = [b for b in python_blocks(rst) if re.search(rf"^\s*def {function}\(", b, re.M)]
    if not 1 <= ordinal <= len(found):
        raise SourceError(f"{len(found)} code blocks define {function}(); "
                          f"block {ordinal} was asked for")
    block = found[ordinal - 1]
    if contains and contains not in block:
        raise SourceError(f"code block {ordinal} defining {function}() no longer contains "
                          f"{contains!r}: the tutorial changed, re-read the point")
    return block


def kernel_path(folder: Path, point: dict[str, Any], sdk: Path | None, work: Path) -> Path:
    """Where to load the point's kernel from (an extracted block is written under `work`)."""
    if point.get("kernel_root") != "sdk":
        return folder / point["kernel_file"]
    if sdk is None:
        raise SourceError("its kernel is in the Neuron SDK documentation: pass --sdk PATH "
                          "(a checkout of aws-neuron/aws-neuron-sdk)")
    path = sdk / point["kernel_file"]
    if not path.is_file():
        raise SourceError(f"{path} not found in the SDK checkout")
    if path.suffix != ".rst":
        return path
    pick = point.get("code_block") or {}
    code = extract(path.read_text(), point["function"], int(pick.get("ordinal", 1)),
                   str(pick.get("contains", "")))
    out = work / f"{point['id'].replace('-', '_')}.py"
    out.write_text(f"# extracted from {point['kernel_file']} (code block {pick})\n" + code)
    return out
