"""The legacy compiler's loop vectorization, as the cost model sees it.

The legacy `nl.affine_range` docstring (SDK v2.26.0, general/nki/api/nki/language/
__init__.py:238-241) says an affine loop "allows Neuron compiler to perform additional
loop-level optimizations, such as loop vectorization". Eagerly, the simulator issues every
iteration's instructions; with `Knobs.loop_vectorize` the recorder buffers an innermost
affine loop and, when every iteration issued the same small Vector/Scalar/GpSimd
instructions, costs each position of the body once over the iterations' combined free
size (one instruction's overhead instead of one per iteration). Anything else (a DMA, a
matmul, an inner loop, iterations that differ, a body too large) is issued as it came,
in program order, so the model is unchanged for it.

The extent the compiler vectorises to is not documented: `constants.VECTORIZE_MAX_FREE`
states the assumption and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nkibot.sim.cost import model as M
from nkibot.sim.tensor import NkiTensor

Tiles = list[NkiTensor]
Member = tuple[Tiles, Tiles]
#: (iteration, engine, op, reads, writes)
Item = tuple[int, str, str, Tiles, Tiles]
COMPUTE = frozenset({"vector", "scalar", "gpsimd"})


@dataclass
class _Frame:
    trip: int
    buffering: bool
    iteration: int = -1
    items: list[Item] = field(default_factory=list)


def _free(tiles: Tiles) -> int:
    return max((M.free_elems(t) for t in tiles if t.buffer in M.ON_CHIP), default=1)


def _signature(item: Item) -> tuple[object, ...]:
    _, engine, op, reads, writes = item
    return (engine, op, tuple(t.shape for t in reads), tuple(t.shape for t in writes))


class Vectorizer:
    """Buffers innermost affine loops; `issue(engine, op, members)` places instructions.

    `members` is the list of (reads, writes) one placed instruction covers: one for an
    ordinary instruction, one per iteration for a vectorised one.
    """

    def __init__(self, issue: Callable[[str, str, list[Member]], None], max_free: int,
                 enabled: bool) -> None:
        self.issue, self.max_free, self.enabled = issue, max_free, enabled
        self.frames: list[_Frame] = []

    def enter(self, trip: int) -> None:
        if self.frames:
            self._stop(self.frames[-1])  # it holds a loop: not innermost
        self.frames.append(_Frame(trip, self.enabled and 2 <= trip <= self.max_free))

    def next(self) -> None:
        if self.frames:
            self.frames[-1].iteration += 1

    def offer(self, engine: str, op: str, reads: Tiles, writes: Tiles, pure: bool = True
              ) -> bool:
        """Buffer the instruction (True) or leave it to be issued now (False).

        `pure`: False for an instruction with state beyond its tiles (accumulation
        registers): its loop is not vectorised.
        """
        f = self.frames[-1]
        if not f.buffering:
            return False
        if (not pure or engine not in COMPUTE
                or _free(reads + writes) * f.trip > self.max_free):
            self._stop(f)
            return False
        f.items.append((f.iteration, engine, op, reads, writes))
        return True

    def exit(self) -> None:
        if not self.frames:
            return
        f = self.frames.pop()
        if not f.buffering:
            return
        body = self._body(f)
        if body is None:
            self._stop(f)
            return
        for j, (engine, op) in enumerate(body):
            members = [(f.items[i * len(body) + j][3], f.items[i * len(body) + j][4])
                       for i in range(f.trip)]
            self.issue(engine, op, members)

    def _body(self, f: _Frame) -> list[tuple[str, str]] | None:
        """The (engine, op) of each body position when every iteration issued the same."""
        if not f.items or len(f.items) % f.trip or f.iteration != f.trip - 1:
            return None
        n = len(f.items) // f.trip
        first = [_signature(it) for it in f.items[:n]]
        for i, it in enumerate(f.items):
            if it[0] != i // n or _signature(it) != first[i % n]:
                return None
        return [(it[1], it[2]) for it in f.items[:n]]

    def _stop(self, f: _Frame) -> None:
        """Issue what `f` buffered, in program order, and buffer no more."""
        items, f.items, f.buffering = f.items, [], False
        for _, engine, op, reads, writes in items:
            self.issue(engine, op, [(reads, writes)])
