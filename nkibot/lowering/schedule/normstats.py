"""How a normalisation gets its statistics: two passes, or one (`bn_stats`/`bn_aggr`).

A normalised tile of `width` elements a partition needs each group's mean and variance.

- `two_pass`: the sum (a Vector Engine reduction, or a Scalar Engine `activation` whose
  `reduce_res` carries it), then the centred squares' sum on the Scalar Engine (`square`
  with `bias=-mean`): no E[x^2] - mean^2 cancellation.
- `one_pass`: `bn_stats` per 512-element chunk and one `bn_aggr` (one Vector Engine pass),
  each partition's (mean, variance) combined across the group's partitions by Chan's
  parallel variance (emit/rowstats.emit_group_moments); the affine weights, when they are
  one value a partition, fold into the output's scale and shift.

The choice is the cost model's: each form is listed as the instructions it issues for one
tile (engine, free size, tensor inputs), timed with `quick.vector_ns`, and the form whose
busiest engine is the least busy wins (ties: the fewer engine-ns in all). DMA is the same
for both, and the [p, 1] column steps cost the access overhead each.
"""

from __future__ import annotations

from dataclasses import dataclass

from nkibot.sim.cost import quick

BN_STATS_FMAX = 512  # nl.tile_size.bn_stats_fmax: elements a partition per bn_stats


@dataclass(frozen=True)
class Step:
    """One instruction of a tile: its engine, free size a partition and tensor inputs."""

    engine: str
    free: int
    inputs: int = 1


def column_steps(engine: str, count: int) -> list[Step]:
    """`count` instructions over [p, 1] columns."""
    return [Step(engine, 1)] * count


def one_pass_stats(width: int) -> list[Step]:
    """bn_stats per chunk, bn_aggr, and Chan's combination on the columns."""
    chunks = -(-width // BN_STATS_FMAX)
    steps = [Step("vector", min(BN_STATS_FMAX, width - j * BN_STATS_FMAX))
             for j in range(chunks)]
    return [*steps, Step("vector", 6 * chunks), *column_steps("vector", 3)]


def busy(steps: list[Step], target: str = "trn1") -> dict[str, float]:
    """Modelled ns per engine of one tile's steps."""
    out: dict[str, float] = {}
    for s in steps:
        ns = quick.vector_ns(s.free, s.inputs, 4, target, engine=s.engine)
        out[s.engine] = out.get(s.engine, 0.0) + ns
    return out


def choose(forms: dict[str, list[Step]], target: str = "trn1") -> str:
    """The form whose busiest engine is least busy (ties: least engine time in all)."""
    def key(name: str) -> tuple[float, float]:
        per = busy(forms[name], target)
        return (max(per.values(), default=0.0), sum(per.values()))
    return min(sorted(forms), key=key)


def blocks_ns(blocks: int, steps: list[Step], target: str = "trn1") -> float:
    """Modelled ns of `blocks` normalised blocks, one at a time on the busiest engine."""
    return blocks * max(busy(steps, target).values(), default=0.0)


def rows_ns(rows: int, length: int, affine: int, target: str = "trn1") -> float:
    """Modelled ns of the written-out normalisation over `rows` rows of `length` (rows on
    the partitions, 128 a tile): bn_stats/bn_aggr, the normalising activation, and the
    affine weights as one Vector Engine pass each (a stage of their own)."""
    tiles = -(-rows // 128)
    steps = [*one_pass_stats(length), Step("scalar", length), *column_steps("vector", 2)]
    steps += [Step("vector", length, 2)] * affine
    return tiles * max(busy(steps, target).values(), default=0.0)
