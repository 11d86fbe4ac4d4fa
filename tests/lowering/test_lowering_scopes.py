"""Each stage's code in a function of its own (scopes.py): parameters and returns."""

from __future__ import annotations

from nkibot.lowering.emit.builder import Names
from nkibot.lowering.scopes import StageCode, wrap_stages


class TestWrapStages:
    def test_kernel_names_become_parameters_and_locals_stay_inside(self) -> None:
        """The stage reads kernel-level names (in order of use) and keeps its tiles local;
        helpers and the nki modules are not parameters."""
        body = ["    y = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.hbm)", ""]
        code = StageCode(1, ("    t = nl.load(x_v[0:4, 0:4])", "    tile_fn(t, y, x_v)"), 1)
        helpers = [["def tile_fn(t, y, x_v):", "    pass"]]
        out = wrap_stages(body, [code], helpers, Names(), ["y"])
        assert out == [body[0], "    stage1(x_v, y)", ""]
        assert helpers[-1][0] == "def stage1(x_v, y):"
        assert not any(line.strip().startswith("return") for line in helpers[-1])

    def test_a_name_a_later_stage_reads_is_returned(self) -> None:
        """A value bound in stage 1 and read by stage 2 comes back from stage 1's function."""
        first = StageCode(1, ("    scale = nl.load(w_v[0:4, 0:1])", "    t = scale"), 0)
        second = StageCode(2, ("    f(scale, out)",), 0)
        helpers = [["def f(scale, out):", "    pass"]]
        out = wrap_stages([], [first, second], helpers, Names({"stage1"}), ["out"])
        assert out == ["    scale = stage1_2(w_v)", "    stage2(scale, out)"]
        assert helpers[1][0] == "def stage1_2(w_v):" and helpers[1][-1] == "    return scale"

    def test_a_kernel_name_that_is_a_builtins_is_a_parameter(self) -> None:
        """torchvision's SqueezeExcitation names its forward's argument `input`: the stage
        reading it takes it as a parameter (the static rules refuse the builtin `input`)."""
        code = StageCode(1, ("    x_v = input.reshape((1, 64, 196))",
                             "    f(x_v, len, nl.float32)"), 0)
        helpers = [["def f(x_v, n):", "    pass"]]
        out = wrap_stages([], [code], helpers, Names({"input", "nki", "nl", "nisa"}), [])
        assert out == ["    stage1(input)"]
        assert helpers[-1][0] == "def stage1(input):"  # `len` stays the builtin
