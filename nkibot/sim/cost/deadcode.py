"""Dead-code elimination of the recorded instruction stream (`Knobs.dead_code`).

The Neuron graph compiler (neuronx-cc) removes instructions whose results have no reader:
its release notes fix its "dead code elimination incorrectly removing writes to input
tensors with no user" and its "handling of must-alias tensors with no reader"
(release-notes/components/compiler.rst:259-262). Legacy (NKI 1) kernels went through that
compiler: they "integrated NKI kernels earlier in the compile process", where today's NKI
compiler inserts them late, preserving the developer's choices (nki/deep-dives/
nki-compiler.rst:16, 81-85). So for legacy kernels an instruction that writes only
on-chip tiles that nothing reads afterwards is not costed.

Conservative by construction: a write counts as read when any later kept instruction
reads the same allocation within the bounding box of its reads (partitions x bytes), and
a write that is overwritten before being read is still kept. Instructions that write HBM,
write nothing the hook saw, or keep state beyond their tiles (accumulation registers: a
`reduce_cmd`, RNG and register instructions; issue.py) are always kept.
"""

from __future__ import annotations

from typing import Any

#: (engine, op, accesses per member, costs, never dead): what `Recorder._queue` holds.
Item = tuple[str, str, list[list[Any]], tuple[Any, ...], bool]


def live(queue: list[Item]) -> list[Item]:
    """The items of `queue` (program order) whose results something later reads."""
    #: id(tile entries) -> [p0, p1, b0, b1]: the bounding box of later kept reads
    read: dict[int, list[int]] = {}
    kept: list[Item] = []
    for item in reversed(queue):
        accesses = [a for member in item[2] for a in member]
        writes = [a for a in accesses if a[2]]
        if (not item[4] and writes and all(a[3] for a in writes)
                and not any(_read(read, a) for a in writes)):
            continue  # on-chip results nobody reads
        for entries, (p0, p1, b0, b1, _lat), is_write, _ in accesses:
            if is_write:
                continue
            box = read.get(id(entries))
            if box is None:
                read[id(entries)] = [p0, p1, b0, b1]
            else:
                box[0], box[1] = min(box[0], p0), max(box[1], p1)
                box[2], box[3] = min(box[2], b0), max(box[3], b1)
        kept.append(item)
    kept.reverse()
    return kept


def _read(read: dict[int, list[int]], access: Any) -> bool:
    box = read.get(id(access[0]))
    if box is None:
        return False
    p0, p1, b0, b1, _lat = access[1]
    return bool(box[0] < p1 and p0 < box[1] and box[2] < b1 and b0 < box[3])
