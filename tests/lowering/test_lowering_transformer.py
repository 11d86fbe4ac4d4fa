"""nn.MultiheadAttention, nn.TransformerEncoderLayer / TransformerEncoder and Tensor.unfold
on the simulator against PyTorch: lowered as the ops they are made of, alone and inside
a composition; what stays unsupported is declined with the argument named."""

from __future__ import annotations

import pytest

from nkibot.lowering import Declined, lower_task
from tests.lowering.lowering_support import check_on_sim, make_task, module_source

E, HEADS = 32, 4


def _mha(call: str, init: str = "nn.MultiheadAttention(32, 4)", args: str = "x") -> str:
    return module_source(call, args=args, init=f"        self.attn = {init}")


def _declined(source: str, shapes: list[tuple[int, ...]]) -> str:
    result = lower_task(make_task(source, shapes))
    assert isinstance(result, Declined), "lowered"
    return result.reason


class TestMultiheadAttention:
    @pytest.mark.parametrize("batch_first", [False, True])
    def test_self_attention_matches_torch(self, batch_first: bool) -> None:
        """Packed in-projection, heads by view and permute, attention, out_proj: both
        layouts (seq-first and batch_first)."""
        source = _mha("self.attn(x, x, x)[0]",
                      f"nn.MultiheadAttention(32, 4, batch_first={batch_first})")
        assert check_on_sim(make_task(source, [(10, 3, E)])) < 1e-4

    def test_separate_kdim_vdim_and_no_bias(self) -> None:
        """kdim/vdim other than embed_dim: q/k/v_proj_weight, no biases; cross-attention
        with more keys than queries."""
        source = _mha("self.attn(q, k, v, need_weights=False)[0]",
                      "nn.MultiheadAttention(32, 4, kdim=16, vdim=24, bias=False, "
                      "batch_first=True)", args="q, k, v")
        assert check_on_sim(make_task(source, [(2, 7, E), (2, 12, 16), (2, 12, 24)])) < 1e-4

    def test_unbatched_input(self) -> None:
        """A (L, E) input is one sequence of batch 1."""
        assert check_on_sim(make_task(_mha("self.attn(x, x, x)[0]"), [(9, E)])) < 1e-4

    def test_causal_mask(self) -> None:
        """attn_mask with is_causal=True: the causal attention primitive."""
        source = _mha("self.attn(x, x, x, attn_mask=m, is_causal=True, "
                      "need_weights=False)[0]", args="x, m")
        assert check_on_sim(make_task(source, [(8, 2, E), (8, 8)])) < 1e-4

    def test_in_a_block_like_kernelbench_31(self) -> None:
        """(B, C, H, W) -> sequence, attention, residual and LayerNorm, back to an image;
        the discarded weights output is not a decline."""
        init = ("        self.attn = nn.MultiheadAttention(32, 4)\n"
                "        self.norm = nn.LayerNorm(32)")
        source = module_source(
            "self.norm(a + s).permute(1, 2, 0).reshape(x.shape)", init=init).replace(
            "        return", "        s = x.flatten(2).permute(2, 0, 1)\n"
            "        a, _ = self.attn(s, s, s)\n        return")
        assert check_on_sim(make_task(source, [(2, E, 4, 5)])) < 1e-4

    def test_used_weights_are_declined(self) -> None:
        """The averaged weights, when read, are declined naming need_weights."""
        reason = _declined(_mha("self.attn(x, x, x)[1] * 2"), [(6, 2, E)])
        assert "need_weights" in reason and "multihead_attention" in reason

    @pytest.mark.parametrize(("call", "shapes", "named"), [
        ("self.attn(x, x, x, key_padding_mask=m)[0]", [(6, 2, E), (2, 6)],
         "key_padding_mask"),
        ("self.attn(x, x, x, attn_mask=m)[0]", [(6, 2, E), (6, 6)], "attn_mask"),
    ])
    def test_masks_are_declined_by_name(self, call: str, shapes: list[tuple[int, ...]],
                                        named: str) -> None:
        """Padding masks and non-causal attention masks: declined, the argument named."""
        assert named in _declined(_mha(call, args="x, m"), shapes)

    def test_bias_kv_is_declined(self) -> None:
        reason = _declined(_mha("self.attn(x, x, x)[0]",
                                "nn.MultiheadAttention(32, 4, add_bias_kv=True)"), [(6, 2, E)])
        assert "add_bias_kv" in reason


class TestTransformerEncoder:
    @pytest.mark.parametrize(("norm_first", "activation", "batch_first"), [
        (False, "'relu'", True), (True, "'gelu'", False), (False, "nn.GELU('tanh')", False)])
    def test_layer_matches_torch(self, norm_first: bool, activation: str,
                                 batch_first: bool) -> None:
        """Self-attention, residuals, LayerNorms and the feed-forward, post- and pre-norm,
        relu and both gelus, both layouts."""
        init = (f"        self.layer = nn.TransformerEncoderLayer(32, 4, 64, 0.1, {activation}, "
                f"batch_first={batch_first}, norm_first={norm_first})")
        source = module_source("self.layer(x)", init=init)
        assert check_on_sim(make_task(source, [(3, 5, E)])) < 1e-4

    def test_encoder_stack_with_final_norm_in_a_model(self) -> None:
        """TransformerEncoder (two layers, a final LayerNorm) between linears, as ViTs use it."""
        init = ("        self.inp = nn.Linear(8, 32)\n"
                "        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 48, "
                "0.0), 2, norm=nn.LayerNorm(32), enable_nested_tensor=False)\n"
                "        self.out = nn.Linear(32, 3)")
        source = module_source("self.out(self.enc(self.inp(x))[0])", init=init)
        assert check_on_sim(make_task(source, [(6, 2, 8)])) < 1e-4

    def test_other_activation_is_declined(self) -> None:
        init = "        self.layer = nn.TransformerEncoderLayer(32, 4, 64, 0.0, nn.SiLU())"
        assert "activation SiLU" in _declined(module_source("self.layer(x)", init=init),
                                              [(3, 5, E)])


class TestUnfold:
    def test_patches_like_kernelbench_28(self) -> None:
        """unfold(2, p, p).unfold(3, p, p) (non-overlapping patches) then reshape: a view and
        a permute, matching torch."""
        source = module_source("x.unfold(2, 4, 4).unfold(3, 4, 4).reshape(x.shape[0], -1, 48)"
                               " @ w", args="x, w")
        assert check_on_sim(make_task(source, [(2, 3, 8, 12), (48, 5)])) < 1e-4

    def test_remainder_is_dropped(self) -> None:
        """A size that does not divide the dim: the trailing elements are left out."""
        source = module_source("x.unfold(-1, 3, 3) * 2")
        assert check_on_sim(make_task(source, [(4, 11)])) < 1e-4

    def test_overlapping_windows_are_declined(self) -> None:
        reason = _declined(module_source("x.unfold(1, 4, 2)"), [(3, 16)])
        assert "aten.unfold.default" in reason and "step < size" in reason
