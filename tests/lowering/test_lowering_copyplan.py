"""The layout-copy chooser: which mechanism the cost model's figures pick for a view."""

from __future__ import annotations

from nkibot.lowering.schedule.copyplan import elem_bytes, plan


class TestCopyPlan:
    """Each case is the mechanism whose modelled time is lowest for that view."""

    def test_innermost_contiguous_is_one_dma(self) -> None:
        """A permute that keeps the innermost dim has long runs: one HBM -> HBM DMA."""
        assert plan([(8, 64), (4, 512), (64, 1)], 4, True).how == "dma"

    def test_rows_of_small_blocks_stay_on_partitions(self) -> None:
        """[128, 32 x 32] blocks transposed: rows on partitions, reordered in SBUF."""
        chosen = plan([(128, 1024), (32, 1), (32, 32)], 4, True)
        assert chosen.how == "sbuf" and chosen.chunk == 32

    def test_matrix_transpose_crosses_partitions_on_the_pe(self) -> None:
        """x.T of a 2048 x 2048 matrix: each partition's source elements are a column
        (4-byte runs), so the PE's 128 x 128 blocks win."""
        chosen = plan([(2048, 1), (2048, 2048)], 4, True)
        assert chosen.how == "pe" and chosen.inner == 0

    def test_integers_never_take_the_pe(self) -> None:
        """The PE transposes floats only; an int64 transpose is a DMA or an SBUF reorder."""
        assert plan([(2048, 1), (2048, 2048)], 8, False).how != "pe"

    def test_a_huge_free_block_does_not_fit_sbuf(self) -> None:
        """No SBUF tile holds dims[2:] of 1M elements: the SBUF form is not offered."""
        assert plan([(4, 1 << 21), (2, 1), (1 << 20, 2)], 4, True).how != "sbuf"

    def test_elem_bytes(self) -> None:
        """torch dtype names map to their element sizes."""
        assert [elem_bytes(d) for d in ("float32", "bfloat16", "int64", "bool", "int8")] == [
            4, 2, 8, 1, 1]
