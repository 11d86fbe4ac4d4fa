"""A phase-by-phase conv's evictions take the head of its tail (emit/conv/phaseprefix.py):
literal and per-channel adds folded into the bias column, then one clamp bound."""

from __future__ import annotations

import pytest

from tests.lowering.lowering_support import check_on_sim, lower_ok, make_task, module_source
from tests.lowering.test_lowering_conv import CONVS

PARAM = "        self.b = nn.Parameter(torch.randn({c}, 1{more}))"


def _task(name: str, expr: str, param: int = 0, dtype: str = "float32"):  # type: ignore[no-untyped-def]
    ctor, shape = CONVS[name]
    more = ", 1" * (len(shape) - 3)  # one value a channel, broadcast over the positions
    init = f"        self.conv = {ctor}"
    if param:
        init += "\n" + PARAM.format(c=param, more=more)
    return make_task(module_source(expr, init=init), [shape], dtype)


def _tile(source: str) -> str:
    return source.split("def conv_phase_tile(")[1].split("\ndef ")[0]


EMPTY_PHASE = ("nn.ConvTranspose1d(16, 8, 3, stride=2, dilation=2)", (2, 16, 60))


@pytest.mark.parametrize(("name", "expr", "param", "evict"), [
    # level 2 93: add 0.5, min 0 on each Vector eviction; GELU and the scale stay the tail
    ("tconv2d_phase_dilated", "F.gelu(torch.min(self.conv(x) + 0.5, torch.tensor(0.0))) * 2.0",
     0, "op0=nl.add, operand0=b_t, op1=nl.minimum, operand1=0.0"),
    # level 2 2: a bias parameter, then a clamp (simplify.py: one to [0, 0.5]); the ReLU
    # half on the evictions (either engine), the other bound the tail
    ("tconv2d_phase_blocks", "torch.clamp(torch.clamp(self.conv(x) + self.b, 0.0, 1.0) * 2.0,"
     " 0.0, 1.0) / 2.0", 8, "op=nl.relu, data=acc, bias=b_t"),
    # a subtract; no conv bias: the column starts at zero; the whole tail taken
    ("no_bias", "torch.clamp_max(self.conv(x) - 1.5, 0.25)", 0,
     "op0=nl.add, operand0=b_t, op1=nl.minimum, operand1=0.25"),
    # a phase no tap reaches (dilation 2 = stride 2): zero plus the column, then the bound
    ("empty_phase", "torch.relu(self.conv(x) + self.b) * 3.0", 8, "nl.maximum, operand1=0.0"),
])
def test_the_evictions_take_the_head_of_the_tail(name: str, expr: str, param: int,
                                                 evict: str) -> None:
    if name == "no_bias":
        ctor = CONVS["tconv2d_phase_blocks_flat"][0].replace("padding=2)", "padding=2, bias=False)")
        task = make_task(module_source(expr, init=f"        self.conv = {ctor}"),
                         [CONVS["tconv2d_phase_blocks_flat"][1]])
    elif name == "empty_phase":
        init = f"        self.conv = {EMPTY_PHASE[0]}\n" + PARAM.format(c=param, more="")
        task = make_task(module_source(expr, init=init), [EMPTY_PHASE[1]])
    else:
        task = _task(name, expr, param)
    source = lower_ok(task).source
    assert evict in _tile(source), _tile(source)
    if param or "+ 0.5" in expr or "- 1.5" in expr:
        assert "the adds folded into the bias column" in source
    if name == "no_bias":
        assert "def conv_tail(" not in source and "nisa.memset(dst=b_sb, value=0.0)" in source
    if name == "empty_phase":
        assert "no tap reaches this phase" in _tile(source)
    check_on_sim(task)


def test_bf16_activations_and_output() -> None:
    task = _task("tconv2d_phase_dilated", "torch.relu(self.conv(x.float()) - 0.25).to(x.dtype)",
                 0, "bfloat16")
    tile = _tile(lower_ok(task).source)
    assert "operand0=b_t, op1=nl.maximum, operand1=0.0" in tile or (
        "op=nl.relu, data=acc, bias=b_t" in tile), tile
    check_on_sim(task)


def test_a_value_the_tail_reads_again_is_not_taken() -> None:
    """The product reads the conv's own output beside the min's: the evictions keep to
    the bias, and the tail computes both from the evicted tile."""
    task = _task("tconv2d_phase_dilated",
                 "(lambda y: torch.minimum(y + 0.5, torch.tensor(0.0)) * y)(self.conv(x))")
    source = lower_ok(task).source
    assert "op1=nl.minimum" not in _tile(source)
    check_on_sim(task)


def test_the_banded_form_keeps_its_bias_only_eviction() -> None:
    task = _task("tconv2d_phase_band", "torch.relu(self.conv(x) + 0.5) * 2.0")
    source = lower_ok(task).source
    assert "def conv_phase_band_tile(" in source and "folded into the bias column" not in source
    check_on_sim(task)
