"""NkiTensor views: slicing, nl.ds, integer indexing, reshape, permute, ap, broadcast_to."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from nkibot.sim import ConstraintError
from nkibot.sim.storage import values as peek  # white-box: the tests read storage


def filled(nl: ModuleType, shape: tuple[int, ...], buffer: object) -> object:
    t = nl.ndarray(shape, dtype=nl.float32, buffer=buffer)
    peek(t)[...] = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    return t


class TestIndexing:
    def test_slices_and_ds_view_the_same_storage(self, nl: ModuleType) -> None:
        """t[a:b] and t[nl.ds(a, n)] address the same elements, without copying."""
        t = filled(nl, (128, 64), nl.sbuf)
        a, b = t[2:10, 8:24], t[nl.ds(2, 8), nl.ds(8, 16)]
        assert a.shape == b.shape == (8, 16)
        np.testing.assert_array_equal(peek(a), peek(b))
        assert np.shares_memory(peek(a), peek(t))

    def test_integer_index_keeps_partition_dim_on_chip(self, nl: ModuleType) -> None:
        """On-chip t[3] keeps a size-1 partition dim; HBM t[3] drops the dim."""
        assert filled(nl, (128, 8), nl.sbuf)[3].shape == (1, 8)
        assert filled(nl, (4, 128, 8), nl.shared_hbm)[3].shape == (128, 8)

    def test_negative_index_and_ellipsis(self, nl: ModuleType) -> None:
        """Negative indices count from the end; Ellipsis fills the remaining dims."""
        t = filled(nl, (4, 6, 8), nl.shared_hbm)
        np.testing.assert_array_equal(peek(t[-1, ..., -2:]), peek(t)[3, :, 6:8])

    @pytest.mark.parametrize("key", [np.s_[0:129, :], np.s_[:, 60:70], np.s_[128], np.s_[5:5]])
    def test_out_of_range_access_is_refused(self, nl: ModuleType, key: object) -> None:
        """Slices NumPy would truncate, or empty ones, raise out-of-bounds."""
        t = filled(nl, (128, 64), nl.sbuf)
        with pytest.raises(ConstraintError) as info:
            t[key]
        assert info.value.rule == "out-of-bounds"

    def test_too_many_indices_is_refused(self, nl: ModuleType) -> None:
        """Indexing more dims than the tensor has is out-of-bounds."""
        with pytest.raises(ConstraintError, match="out-of-bounds"):
            filled(nl, (4, 4), nl.shared_hbm)[1, 2, 3]


class TestViews:
    def test_reshape_and_permute_share_storage(self, nl: ModuleType) -> None:
        """reshape and permute are views: writes through them land in the original."""
        t = filled(nl, (128, 24), nl.sbuf)
        v = t.reshape((128, 4, 6)).permute((0, 2, 1))
        assert v.shape == (128, 6, 4)
        peek(v)[0, 0, 1] = -1
        assert peek(t)[0, 6] == -1

    def test_reshape_changing_partitions_is_refused(self, nl: ModuleType) -> None:
        """On-chip reshape must keep the partition dim."""
        with pytest.raises(ConstraintError, match="view-illegal"):
            filled(nl, (128, 24), nl.sbuf).reshape((64, 48))

    def test_ap_addresses_storage_with_strides(self, nl: ModuleType) -> None:
        """.ap([[stride, count], ...]) reads the pattern relative to the view's start."""
        t = filled(nl, (4, 8), nl.shared_hbm)
        v = t[1:, :].ap([[8, 2], [2, 3]], offset=1)
        np.testing.assert_array_equal(peek(v), [[9, 11, 13], [17, 19, 21]])

    def test_ap_outside_allocation_is_refused(self, nl: ModuleType) -> None:
        """An access pattern reaching past the allocation is out-of-bounds."""
        with pytest.raises(ConstraintError, match="out-of-bounds"):
            filled(nl, (4, 8), nl.shared_hbm).ap([[8, 5], [1, 8]])

    def test_broadcast_to_repeats_and_is_read_only(self, nl: ModuleType) -> None:
        """broadcast_to repeats size-1 dims as a view that cannot be written."""
        t = filled(nl, (1, 4), nl.sbuf)
        b = t.broadcast_to((128, 4))
        assert b.shape == (128, 4)
        np.testing.assert_array_equal(peek(b)[77], [0, 1, 2, 3])
        with pytest.raises(ConstraintError, match="read-only"):
            b[0:2, :] = 1.0

    def test_setitem_copies_with_rounding(self, nl: ModuleType) -> None:
        """tile[...] = value writes on chip, rounding to the tile's dtype."""
        t = nl.ndarray((2, 2), dtype=nl.bfloat16, buffer=nl.sbuf)
        t[...] = 1.00390625  # halfway between two bf16 values: ties to even (1.0)
        assert (peek(t).astype(np.float32) == 1.0).all()
