"""Pointwise chains by literals folded to their normal form (schedule/simplify.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nkibot.lowering.frontend.ir import Arg, Graph, Leaf, Op, Ref
from nkibot.lowering.schedule.simplify import Form, bounds, fold_chains
from tests.lowering.lowering_support import check_on_sim, lower_ok, make_task, module_source

SHAPE = (4, 64)


def _graph(steps: list[tuple[str, object]], base: str = "") -> Graph:
    """x, an optional unary `base` op, then `steps` ((op, literal), the literal first when
    given as ("r", c) for a reversed sub), the last an output."""
    ops: list[Op] = []
    prev = "x"
    if base:
        ops.append(Op("b", base, (Ref("x"),), SHAPE, "float32"))
        prev = "b"
    for i, (kind, c) in enumerate(steps):
        args: tuple[Arg, ...]
        if kind == "relu":
            args = (Ref(prev),)
        elif isinstance(c, tuple):  # reversed: c op value
            args = (float(c[1]), Ref(prev))
        else:
            assert isinstance(c, float)
            args = (Ref(prev), c)
        ops.append(Op(f"v{i}", kind, args, SHAPE, "float32"))
        prev = f"v{i}"
    return Graph([Leaf("x", SHAPE, "float32", "input", "x")], ops, [Ref(prev)])


UNARY = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "relu":
         lambda v: np.maximum(v, 0.0), "exp": np.exp}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum}


def _run(graph: Graph, x: np.ndarray) -> np.ndarray:
    values: dict[str, np.ndarray] = {"x": x}
    for op in graph.ops:
        args = [values[a.name] if isinstance(a, Ref) else np.float64(a) for a in op.args]
        if op.op == "copy":
            values[op.name] = args[0]
        elif op.op in UNARY:
            values[op.name] = UNARY[op.op](args[0])
        else:
            values[op.name] = BINARY[op.op](*args)
    return values[graph.outputs[0].name]


def _same(graph: Graph, folded: Graph) -> None:
    x = np.random.default_rng(0).normal(0, 3, SHAPE)
    np.testing.assert_allclose(_run(folded, x), _run(graph, x), rtol=1e-12, atol=1e-12)


def test_level_2_2s_chain_is_one_clamp() -> None:
    """Clamp to [0, 1], times 2, clamp to [0, 1], divided by 2: clamp(v, 0, 0.5)."""
    graph = _graph([("maximum", 0.0), ("minimum", 1.0), ("mul", 2.0), ("maximum", 0.0),
                    ("minimum", 1.0), ("div", 2.0)])
    folded = fold_chains(graph)
    assert [(op.op, op.args[1:]) for op in folded.ops] == [("maximum", (0.0,)),
                                                           ("minimum", (0.5,))]
    assert folded.ops[-1].name == graph.outputs[0].name
    _same(graph, folded)


@pytest.mark.parametrize(("steps", "base", "left"), [
    # shifts and scales compose: one affine pair
    ([("sub", 0.5), ("sub", 0.2), ("mul", 3.0), ("div", 4.0)], "", ["mul", "add"]),
    # a negative scale swaps the bounds
    ([("maximum", -1.0), ("minimum", 2.0), ("mul", -2.0), ("add", 1.0), ("maximum", 0.0)],
     "", ["mul", "add", "maximum", "minimum"]),
    # a bound the range already implies goes: a ReLU of a sigmoid, a min by 1 of it
    ([("relu", None), ("minimum", 1.0)], "sigmoid", []),
    ([("add", 1.0), ("relu", None), ("mul", 0.5)], "tanh", ["mul", "add"]),
    # a reversed subtract (c - v)
    ([("sub", ("r", 1.0)), ("sub", ("r", 1.0))], "", []),
    ([("minimum", 4.0), ("sub", ("r", 1.0)), ("relu", None), ("mul", 2.0)], "exp",
     ["mul", "add", "maximum"]),
])
def test_chains_fold_to_their_normal_form(steps: list[tuple[str, object]], base: str,
                                          left: list[str]) -> None:
    graph = _graph(steps, base)
    folded = fold_chains(graph)
    kinds = [op.op for op in folded.ops if op.name != "b"]
    assert kinds == (left or ["copy"]), kinds  # the identity, an output: a copy of the base
    _same(graph, folded)


def test_random_chains_keep_their_values() -> None:
    """Any chain by literals, folded or not, computes what it did."""
    rng = random.Random(7)
    kinds = ["add", "sub", "mul", "div", "maximum", "minimum", "relu"]
    shorter = 0
    for _ in range(300):
        steps: list[tuple[str, object]] = []
        for _ in range(rng.randint(1, 7)):
            kind = rng.choice(kinds)
            c = rng.choice([-2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0])
            if kind == "div" and c == 0.0:
                c = 2.0
            steps.append((kind, ("r", c) if kind == "sub" and rng.random() < 0.3 else c))
        graph = _graph(steps, rng.choice(["", "sigmoid", "tanh", "exp"]))
        folded = fold_chains(graph)
        assert len(folded.ops) <= len(graph.ops)
        shorter += len(folded.ops) < len(graph.ops)
        _same(graph, folded)
    assert shorter > 100, shorter  # most chains of three or more fold


def test_a_chain_stops_at_a_value_read_twice() -> None:
    """v0 is read by v1 and by the output's add: only v1..v2 are a chain (and stay)."""
    x = Leaf("x", SHAPE, "float32", "input", "x")
    ops = [Op("v0", "mul", (Ref("x"), 2.0), SHAPE, "float32"),
           Op("v1", "maximum", (Ref("v0"), 0.0), SHAPE, "float32"),
           Op("v2", "minimum", (Ref("v1"), 1.0), SHAPE, "float32"),
           Op("out", "add", (Ref("v2"), Ref("v0")), SHAPE, "float32")]
    graph = Graph([x], ops, [Ref("out")])
    assert fold_chains(graph).ops == ops


def test_bounds_follow_the_steps() -> None:
    graph = _graph([("mul", -2.0), ("add", 1.0)], "sigmoid")
    assert bounds(graph)["v1"] == (-1.0, 1.0)
    above = Form().then("maximum", 2.0)
    assert above is not None and above.then("minimum", 1.0) is None  # bounds that cross


def test_level_2_2_on_the_simulator() -> None:
    """Six elementwise passes become one clamp to [0, 0.5]; the bias add and its lower
    bound then ride on the phase evictions (phaseprefix.py), the tail its upper bound."""
    init = ("        self.conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, "
            "output_padding=1)\n        self.b = nn.Parameter(torch.randn(6, 1, 1))")
    expr = "torch.clamp(torch.clamp(self.conv(x) + self.b, 0.0, 1.0) * 2.0, 0.0, 1.0) / 2.0"
    task = make_task(module_source(expr, init=init), [(2, 4, 9, 11)])
    source = lower_ok(task).source
    tail = source.split("def conv_tail(")[1].split("\ndef ")[0]
    assert "op0=nl.minimum, operand0=0.5" in tail and tail.count("nisa.") == 1, tail
    check_on_sim(task)
