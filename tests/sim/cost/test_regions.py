"""What the recorder sees of a view: its partitions, its byte box within a partition, and
its stride pattern (schedule._Tile.region), and the dependencies those give."""

from __future__ import annotations

import numpy as np

from nkibot.sim.cost.schedule import Recorder, _disjoint, _Tile

ROW = 2048 * 4  # a [128, 2048] fp32 tile: one partition's bytes


def _tile() -> tuple[np.ndarray, _Tile]:
    base = np.zeros((128, 2048), np.float32)
    return base, _Tile(base, on_chip=True)


def test_a_slice_is_its_partitions_and_its_bytes() -> None:
    base, tile = _tile()
    assert tile.region(base[0:128, 512:1024]) == (0, 128, 2048, 4096, ((((4, 512),), 4), 2048))
    assert tile.region(base[32:64, :])[:4] == (32, 64, 0, ROW)


def test_a_strided_view_spans_its_first_to_its_last_element() -> None:
    base, tile = _tile()
    p0, p1, b0, b1, lat = tile.region(base[0:64, 0:2048:2])
    assert (p0, p1, b0, b1) == (0, 64, 0, 1023 * 8 + 4)
    odd = tile.region(base[0:64, 1:2048:2])[4]
    assert _disjoint(lat, odd)  # the even and the odd elements share no byte


def test_a_reversed_view_covers_the_bytes_it_reads() -> None:
    """A reversed view's data pointer is its last byte: its box must still start at its
    lowest byte, or a read of it misses the write of the same elements."""
    base, tile = _tile()
    forward, backward = tile.region(base[:, 0:1024]), tile.region(base[:, 1023::-1])
    assert backward[:4] == forward[:4] == (0, 128, 0, 4096)
    assert not _disjoint(forward[4], backward[4])
    later = tile.region(base[:, 2047:1023:-1])
    assert later[:4] == (0, 128, 4096, ROW) and _disjoint(forward[4], later[4])


def test_reading_a_reversed_view_waits_for_the_write_of_its_elements() -> None:
    base, tile = _tile()
    write = tile.region(base[:, 0:256])  # the first quarter of what the read takes
    entries = [[*write[:4], True, 5.0, 0, write]]
    read = tile.region(base[:, 1023::-1])
    assert Recorder._ready([(entries, read, False, True)]) == (5.0, 0)
    other = tile.region(base[:, 2047:1023:-1])
    assert Recorder._ready([(entries, other, False, True)]) == (0.0, -1)


def test_hbm_views_are_one_partition_of_bytes() -> None:
    base = np.zeros((64, 256), np.float32)
    tile = _Tile(base, on_chip=False)
    assert tile.region(base[8:16, :])[:4] == (0, 1, 8 * 1024, 16 * 1024)
    assert tile.region(base[15:7:-1, :])[:4] == (0, 1, 8 * 1024, 16 * 1024)
