"""Layout ops (transpose, permute, contiguous, flip, slicing, select, expand, unbind, chunk)
alone and inside compositions, run on the simulator against PyTorch."""

from __future__ import annotations

import pytest

from nkibot.lowering import Declined, Lowered, lower_task
from nkibot.lowering.frontend.strided import Strided, apply, source
from nkibot.task import InputSpec
from tests.lowering.lowering_support import check_on_sim, make_task, module_source

ALONE = [
    ("x.transpose(1, 2)", (2, 16, 32)),
    ("x.permute(0, 2, 1)", (2, 16, 32)),
    ("x.transpose(1, 2).contiguous()", (2, 16, 32)),
    ("x.t()", (200, 300)),  # ragged 128-blocks, turned on the PE
    ("x.permute(2, 0, 1)", (2, 16, 32)),
    ("x.transpose(0, 1)", (4, 4, 4)),  # a square swap that is not the last two dims
    ("x.movedim(0, -1)", (2, 3, 4)),
    ("x.flip(1)", (4, 8, 16)),
    ("x.flip((0, 2))", (4, 8, 16)),
    ("x[:, 1:5, ::2]", (4, 8, 16)),
    ("x[..., None, 3]", (4, 8, 16)),
    ("x.select(1, -1)", (4, 8, 16)),
]

COMPOSED = [
    ("torch.relu(x.transpose(1, 2)) + 1", (2, 16, 32)),
    ("torch.softmax(x.transpose(1, 2), dim=-1)", (2, 16, 32)),
    ("x.permute(0, 2, 1).reshape(2, -1) * 2", (2, 16, 32)),  # a reshape across a permute
    ("x.permute(0, 2, 1) @ x", (2, 16, 32)),
    ("x.mT.sum(-1)", (2, 16, 32)),
    ("x.flip(-1) * x", (4, 8, 16)),
    ("x[0] + 1", (4, 8, 16)),
    ("x.unbind(1)[2] * 3", (4, 8, 16)),
    ("x.chunk(2, dim=1)[1].exp()", (4, 8, 16)),
    ("x[:, :1].expand(4, 8, 16) + x", (4, 8, 16)),
    ("torch.cat((x, x.flip(1)), dim=1)", (4, 8, 16)),
    ("torch.cat([x.transpose(1, 2), x.transpose(1, 2) * 2], dim=-1).exp()", (2, 8, 16)),
    ("torch.stack([r * 2 for r in x], dim=0)", (3, 8, 16)),
    ("torch.stack((x, -x), dim=-1).sum(-1)", (4, 8, 16)),
    ("torch.cat((-x[..., 8:], x[..., :8]), dim=-1) * x", (4, 8, 16)),  # rotate-half (RoPE)
]


class TestLayoutOps:
    """Each lowers to a kernel whose simulated result equals PyTorch's exactly or nearly."""

    @pytest.mark.parametrize(("expr", "shape"), ALONE)
    def test_alone(self, expr: str, shape: tuple[int, ...]) -> None:
        """A lone layout op is a DMA copy through an access pattern: bit-exact."""
        assert check_on_sim(make_task(module_source(expr), [shape])) == 0.0

    @pytest.mark.parametrize(("expr", "shape"), COMPOSED)
    def test_composed(self, expr: str, shape: tuple[int, ...]) -> None:
        """Inside a graph the layout is copied to HBM scratch (or read in place by a matmul)."""
        check_on_sim(make_task(module_source(expr), [shape]))

    def test_bf16_transpose_keeps_dtype(self) -> None:
        """A bf16 transpose through the PE (fp32 inside) returns bf16, bit-exact."""
        task = make_task(module_source("x.transpose(1, 2)"), [(2, 64, 48)], dtype="bfloat16")
        assert check_on_sim(task) == 0.0

    def test_big_transpose_uses_the_pe(self) -> None:
        """Moving the contiguous dim goes through SBUF blocks and nc_transpose, not a DMA of
        4-byte runs."""
        result = lower_task(make_task(module_source("x.transpose(1, 2)"), [(2, 256, 384)]))
        assert isinstance(result, Lowered)
        assert "nisa.nc_transpose" in result.source

    @pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
    def test_batched_block_transpose_stays_on_partitions(self, dtype: str) -> None:
        """Transposing the [32, 32] block of every row (AWS's transpose2d example) keeps the
        rows on partitions: one load, one Vector Engine reorder, one store, no PE pass;
        bit-exact on the simulator."""
        expr = "x.reshape(128, 32, 32).transpose(1, 2).reshape(128, 1024)"
        task = make_task(module_source(expr), [(128, 1024)], dtype=dtype)
        result = lower_task(task)
        assert isinstance(result, Lowered)
        assert "nc_transpose" not in result.source and "nisa.tensor_copy" in result.source
        assert check_on_sim(task) == 0.0

    def test_partition_permute_in_chunks(self) -> None:
        """Rows past 128 and a dim-1 too large for one tile: ragged partition and dim-1
        tiles, bit-exact."""
        task = make_task(module_source("x.permute(0, 2, 1, 3).transpose(2, 3)"),
                         [(130, 3, 2600, 2)])
        assert check_on_sim(task) == 0.0

    def test_contiguous_copy_is_one_dma(self) -> None:
        """A permute that keeps the innermost dim is one HBM -> HBM dma_copy."""
        result = lower_task(make_task(module_source("x.permute(1, 0, 2)"), [(4, 8, 64)]))
        assert isinstance(result, Lowered)
        assert result.source.count("nisa.dma_copy") == 1 and "nc_transpose" not in result.source

    def test_tensor_index_declined_by_name(self) -> None:
        """Indexing with a tensor is declined, naming the op and why; nothing raises."""
        source = module_source("x[i]", args="x, i")
        task = make_task(source, [(4, 8), (3,)])
        task = task.model_copy(update={"inputs": [
            task.inputs[0], InputSpec(name="in1", shape=(3,), dtype="int64")]})
        result = lower_task(task)
        assert isinstance(result, Declined)
        assert "aten.index.Tensor (indexing with a tensor)" in result.reason


class TestStrided:
    """The access-pattern algebra of views on a contiguous tensor."""

    def test_permute_then_slice(self) -> None:
        view = apply(source((2, 3, 4)), "permute", (4, 2, 3), perm=(2, 0, 1))
        assert view == Strided((4, 2, 3), (1, 12, 4), 0)
        window = apply(view, "narrow", (2, 2, 3), dim=0, start=1)
        assert window is not None and window.offset == 1

    def test_flip_has_negative_stride_and_end_offset(self) -> None:
        view = apply(source((3, 5)), "flip", (3, 5), dims=(1,))
        assert view == Strided((3, 5), (5, -1), 4)

    def test_reshape_across_permute_is_not_a_pattern(self) -> None:
        view = apply(source((2, 3, 4)), "permute", (2, 4, 3), perm=(0, 2, 1))
        assert view is not None
        assert apply(view, "view", (2, 12)) is None
