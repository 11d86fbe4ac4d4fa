"""Masks, logical ops, constants, dropout, max/min with indices, adaptive pooling and
instance norm: each alone and inside a composition, on the simulator against PyTorch."""

from __future__ import annotations

import pytest

from nkibot.lowering import Declined, lower_task
from tests.lowering.lowering_support import check_on_sim, make_task, module_source

TWO = [(4, 64), (4, 64)]
CASES = [
    # masked_fill / where / comparisons / logical ops
    ("x.masked_fill(x > 0.5, -1.0)", "x", [(4, 64)]),
    ("torch.softmax(x.masked_fill(y < 0, -1e9), dim=-1)", "x, y", TWO),
    ("torch.where(x > 0, x, 0.1 * x)", "x", [(4, 64)]),
    ("torch.where(x > y, x - y, torch.zeros_like(x))", "x, y", TWO),
    ("(x > y).float()", "x, y", TWO),
    ("torch.logical_and(x > 0, y < 0).float() * x", "x, y", TWO),
    ("(((x > 0) & (y < 0)) | ~(x > 1)).float() + x", "x, y", TWO),
    ("torch.logical_xor(x > 0, torch.logical_not(y > 0)).float()", "x, y", TWO),
    # constants
    ("torch.min(x, torch.tensor(0.5))", "x", [(4, 64)]),
    ("torch.max(x, torch.tensor(-0.25, device=x.device)) * 2", "x", [(4, 64)]),
    ("x + torch.ones_like(x)", "x", [(4, 64)]),
    ("x * torch.full((x.shape[-1],), 2.0)", "x", [(4, 64)]),
    ("torch.zeros(4, 64) + x", "x", [(4, 64)]),
    ("x * torch.arange(x.shape[-1])", "x", [(4, 64)]),
    ("x + torch.arange(1, 129, 2)", "x", [(4, 64)]),
    # dropout in eval, max/min with indices
    ("F.dropout(x, 0.3, training=self.training) * 2", "x", [(4, 64)]),
    ("x - torch.max(x, dim=1, keepdim=True).values", "x", [(4, 64)]),
    ("torch.min(x, -1).indices", "x", [(4, 64)]),
    ("torch.max(x, 1)[1]", "x", [(4, 64)]),
    # topk: k rounds of max, first index and knock-out; values and int64 indices
    ("torch.topk(x, 3, dim=-1).values * 2", "x", [(4, 64)]),
    ("torch.topk(x, 2, dim=1, largest=False)", "x", [(130, 24)]),
    ("torch.topk(torch.softmax(x, dim=-1), 2)", "x", [(4, 8)]),
    # adaptive pooling
    ("F.adaptive_avg_pool2d(x, 1)", "x", [(2, 4, 8, 8)]),
    ("F.adaptive_max_pool2d(x, (1, 1)).flatten(1) * 3", "x", [(2, 4, 8, 8)]),
    ("F.adaptive_avg_pool2d(x, (2, 4))", "x", [(2, 4, 8, 8)]),
]


class TestSelectOps:
    @pytest.mark.parametrize(("expr", "args", "shapes"), CASES)
    def test_matches_pytorch(self, expr: str, args: str, shapes: list[tuple[int, ...]]) -> None:
        check_on_sim(make_task(module_source(expr, args=args), shapes))

    def test_adaptive_pool_module(self) -> None:
        """nn.AdaptiveAvgPool2d maps to the functional form with its output size."""
        init = "        self.pool = nn.AdaptiveAvgPool2d(1)"
        source = module_source("self.pool(x) * 2", init=init)
        check_on_sim(make_task(source, [(2, 4, 8, 8)]))

    def test_instance_norm_module_and_composition(self) -> None:
        """InstanceNorm2d alone, then inside a residual block."""
        init = "        self.norm = nn.InstanceNorm2d(4, affine=True)"
        check_on_sim(make_task(module_source("self.norm(x)", init=init), [(2, 4, 8, 16)]))
        check_on_sim(make_task(module_source("F.relu(self.norm(x)) + x", init=init),
                               [(2, 4, 8, 16)]))

    def test_topk_router_composition(self) -> None:
        """Mixtral's router: gate logits, softmax, top-2, renormalised. The rounds and the
        [N, k] assembly are stages of their own layouts, and the column iotas are rebuilt in
        each stage that reads them (a lone iota was no stage: "class indices must run along
        the free dim")."""
        init = "        self.gate = nn.Linear(32, 8, bias=False)"
        expr = ("(lambda w: (w[0] / w[0].sum(dim=-1, keepdim=True), w[1]))("
                "torch.topk(F.softmax(self.gate(x), dim=1, dtype=torch.float), 2, dim=-1))")
        check_on_sim(make_task(module_source(expr, init=init), [(96, 32)]))

    def test_training_dropout_declined(self) -> None:
        """F.dropout with its default training=True is random: declined with the fix."""
        result = lower_task(make_task(module_source("F.dropout(x, 0.3)"), [(4, 64)]))
        assert isinstance(result, Declined) and "training=self.training" in result.reason

    def test_big_tensor_constant_declined(self) -> None:
        """A constant of several elements is named in the decline, not a crash."""
        result = lower_task(make_task(module_source("x + torch.tensor([1.0, 5.0, 2.0])"), [(4, 3)]))
        assert isinstance(result, Declined) and "tensor constant" in result.reason


def _gather_check(expr: str, init: str, ids_shape: tuple[int, ...], vocab: int,
                  extra: list[tuple[int, ...]] | None = None) -> str:
    """Lower `expr` over int64 ids (and float inputs), run it on the simulator, compare."""
    import numpy as np
    import torch

    from nkibot.task import InputSpec
    from tests.lowering.lowering_support import (
        build_module,
        lower_ok,
        simulate,
        to_numpy,
    )

    args = "ids" + "".join(f", x{i}" for i in range(len(extra or [])))
    task = make_task(module_source(expr, args=args, init=init), [ids_shape, *(extra or [])])
    task = task.model_copy(update={"inputs": [
        InputSpec(name="ids", shape=ids_shape, dtype="int64"), *task.inputs[1:]]})
    lowered = lower_ok(task)
    module = build_module(task)
    gen = torch.Generator().manual_seed(3)
    inputs = [torch.randint(0, vocab, ids_shape, generator=gen),
              *(torch.randn(s, generator=gen) for s in extra or [])]
    with torch.no_grad():
        expected = module(*inputs)
    arrays = [to_numpy(t) for t in inputs] + [to_numpy(v) for v in module.state_dict().values()]
    (got,) = simulate(lowered.source, lowered.function, arrays)
    np.testing.assert_allclose(np.asarray(got, np.float32), expected.numpy(), atol=1e-5,
                               rtol=1e-5)
    return lowered.source


class TestGather:
    EMB = "        self.emb = nn.Embedding(50, 96)"

    def test_embedding_is_an_indirect_dma(self) -> None:
        """nn.Embedding over [2, 70] ids (two partition tiles): one gather DMA a tile."""
        source = _gather_check("self.emb(ids)", self.EMB, (2, 70), 50)
        assert "vector_offset=" in source

    def test_embedding_in_a_composition(self) -> None:
        """Token embedding, scaled, plus a position input, then LayerNorm: stages."""
        init = self.EMB + "\n        self.norm = nn.LayerNorm(96)"
        _gather_check("self.norm(self.emb(ids) * 2.0 + x0)", init, (2, 16), 50, [(2, 16, 96)])

    def test_positions_by_arange(self) -> None:
        """GPT-2's input embedding: the positions are arange(seq) (from 2 too), so the
        position table is read as a window of rows, no gather ("torch.arange does not lower
        even as its own stage" before)."""
        init = self.EMB + "\n        self.pos = nn.Embedding(40, 96)"
        source = _gather_check("self.emb(ids) + self.pos(torch.arange(ids.shape[-1], "
                               "dtype=torch.long, device=ids.device).unsqueeze(0))",
                               init, (3, 24), 50)
        assert source.count("vector_offset=") == 1
        _gather_check("self.emb(ids) + self.pos(torch.arange(2, ids.shape[-1] + 2))", init,
                      (3, 24), 50)

    def test_index_select_rows(self) -> None:
        """index_select(table, 0, ids) of a parameter table is the same gather."""
        init = "        self.table = nn.Parameter(torch.randn(40, 32))"
        _gather_check("torch.index_select(self.table, 0, ids)", init, (10,), 40)
