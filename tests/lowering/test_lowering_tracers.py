"""Ordinary model code that torch.fx's symbolic tracing refuses traces at the input shapes
and lowers; each case is checked on the simulator against PyTorch."""

from __future__ import annotations

import pytest

from nkibot.lowering.frontend.trace import trace_graph
from tests.lowering.lowering_support import HEADER, check_on_sim, make_task

#: (forward body, input shape): each fails `torch.fx.symbolic_trace`.
SHAPE_CODE = [
    ("return x[:, :1].expand(*x.shape) + x", (2, 3, 64)),
    ("out = x[:, 0]\n        for i in range(1, x.shape[1]):\n            out = out + x[:, i]\n"
     "        return out", (2, 4, 64)),
    ("return x * len(x)", (4, 64)),
    ("if x.size(-1) > 32:\n            return x * 2\n        return x", (4, 64)),
    ("n = 1\n        for d in x.shape:\n            n = n * d\n        return x.reshape(n) * 2",
     (4, 64)),
    ("return sum(r * 2 for r in x)", (3, 64)),
]


def _source(body: str) -> str:
    return (f"{HEADER}class Model(nn.Module):\n    def forward(self, x):\n"
            f"        {body}\n")


class TestShapeTracing:
    @pytest.mark.parametrize(("body", "shape"), SHAPE_CODE)
    def test_traces_and_verifies(self, body: str, shape: tuple[int, ...]) -> None:
        """The forward fails symbolic tracing; at the input shapes it traces, lowers and
        matches PyTorch on the simulator."""
        import torch.fx as fx

        task = make_task(_source(body), [shape])
        namespace: dict[str, object] = {}
        exec(compile(task.reference_source, "<m>", "exec"), namespace)
        with pytest.raises(Exception):  # noqa: B017 - any tracing error
            fx.symbolic_trace(namespace["Model"]())  # type: ignore[operator]
        check_on_sim(task)

    def test_sizes_are_constants(self) -> None:
        """Sizes read in the forward are literals of the traced graph."""
        graph, unsupported = trace_graph(make_task(_source(
            "return x * x.size(0) + len(x)"), [(6, 64)]))
        assert unsupported == []
        assert [(op.op, op.args[1]) for op in graph.ops] == [("mul", 6), ("add", 6)]


CAUSAL = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(32, 96)
        self.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(32, dim=2)
        k = k.view(B, T, 2, C // 2).transpose(1, 2)
        q = q.view(B, T, 2, C // 2).transpose(1, 2)
        v = v.view(B, T, 2, C // 2).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(B, T, C)
'''


class TestModelCode:
    def test_min_gpt_attention(self) -> None:
        """minGPT's causal attention: sizes unpacked from x.size(), a linear's output split
        into q, k, v (the submodule's sizes need its weights on meta too), heads by view and
        transpose, the causal mask a sliced buffer (read as state, not baked in as a
        constant), masked_fill with -inf, softmax. It failed symbolic tracing."""
        check_on_sim(make_task("import math\n" + CAUSAL, [(2, 8, 32)]))


class TestRecurrentDeclines:
    """An nn.LSTM/GRU (nothing lowers them yet) is declined by name without being run over
    its sequence on meta tensors, which PyTorch decomposes step by step (KernelBench level 3
    36-42 took 30-90 s to decline)."""

    @pytest.mark.parametrize(("rnn", "pick"), [
        ("nn.LSTM(32, 64, num_layers=4, batch_first=True)", "self.rnn(x)[0][:, -1, :]"),
        ("nn.GRU(32, 64, num_layers=4, batch_first=True, bidirectional=True)",
         "self.rnn(x)[1][-1]"),
    ])
    def test_declined_quickly_and_by_name(self, rnn: str, pick: str) -> None:
        import time

        from nkibot.lowering import Declined, lower_task

        source = (f"{HEADER}class Model(nn.Module):\n    def __init__(self):\n"
                  f"        super().__init__()\n        self.rnn = {rnn}\n"
                  f"        self.fc = nn.Linear(64, 10)\n\n    def forward(self, x):\n"
                  f"        return self.fc({pick})\n")
        task = make_task(source, [(4, 2048, 32)])
        started = time.process_time()
        result = lower_task(task)
        assert isinstance(result, Declined)
        name = "lstm" if "LSTM" in rnn else "gru"
        assert f"aten.{name}.default (self.rnn at" in result.reason
        assert time.process_time() - started < 5.0  # ~20 s of CPU run step by step


#: KernelBench level 3 33's pattern: hidden state in a plain tensor attribute, overwritten
#: by an input with copy_ and reassigned by the forward.
ATTRIBUTE_STATE = (
    f"{HEADER}class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.hidden = torch.randn((4, 16))\n        self.i2h = nn.Linear(24, 16)\n"
    "        self.h2o = nn.Linear(16, 8)\n\n"
    "    def forward(self, x, initial_hidden=None):\n"
    "        if initial_hidden is not None:\n            self.hidden.copy_(initial_hidden)\n"
    "        self.hidden = self.hidden.to(x.device)\n"
    "        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))\n"
    "        return self.h2o(self.hidden)\n")


class TestAttributeState:
    def test_copy_into_an_attribute_reads_the_input(self) -> None:
        """The attribute the forward reassigns is not left a proxy (the forward returned
        "no tensor"), and copy_ into it makes later reads the copied input: it lowers and
        matches PyTorch."""
        task = make_task(ATTRIBUTE_STATE, [(4, 8), (4, 16)])
        graph, unsupported = trace_graph(task)
        assert unsupported == [] and len(graph.outputs) == 1
        assert check_on_sim(task) < 1e-4

    def test_an_attribute_read_without_copy_stays_a_constant(self) -> None:
        """Without the copy the random attribute is a constant the lowering declines."""
        task = make_task(ATTRIBUTE_STATE.replace("            self.hidden.copy_(initial_hidden)",
                                                 "            pass"), [(4, 8), (4, 16)])
        _, unsupported = trace_graph(task)
        assert any("tensor constant of 64 elements" in op for op in unsupported)
