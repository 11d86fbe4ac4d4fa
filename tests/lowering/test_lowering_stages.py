"""Composite modules lowered as stages of one kernel (stages.py), on the simulator against
PyTorch: two matmuls, a convolution, pooling, a block norm and attention each followed by
other ops, a matmul followed by a row reduction. Each of these was declined by the
single-anchor templates ("2 matmuls in one graph", "a convolution with other ops", ...)."""

from __future__ import annotations

import pytest

from nkibot.lowering import Declined, lower_task
from tests.lowering.lowering_support import (
    check_on_sim,
    lower_ok,
    make_task,
    module_source,
)

# name -> (forward expression, forward args, __init__ lines, input shapes)
COMPOSED = {
    "mlp_two_matmuls": ("self.l2(torch.relu(self.l1(x)))", "x",
                        "        self.l1 = nn.Linear(64, 160)\n"
                        "        self.l2 = nn.Linear(160, 48)", [(96, 64)]),
    "matmul_then_softmax": ("torch.softmax(self.l1(x) * 0.5, dim=-1)", "x",
                            "        self.l1 = nn.Linear(64, 200)", [(130, 64)]),
    "matmul_then_logsumexp": ("torch.logsumexp(self.l1(x), dim=1, keepdim=True)", "x",
                              "        self.l1 = nn.Linear(32, 96)", [(40, 32)]),
    "conv_bias_relu_scale": ("torch.relu(self.c(x)) * 2 + self.b", "x",
                             "        self.c = nn.Conv2d(3, 8, 3)\n"
                             "        self.b = nn.Parameter(torch.randn(8, 1, 1))",
                             [(2, 3, 12, 12)]),
    "conv_then_channel_softmax": ("torch.softmax(self.c(x), dim=1)", "x",
                                  "        self.c = nn.Conv2d(4, 6, 3, padding=1)",
                                  [(2, 4, 9, 9)]),
    "pool_then_ops": ("torch.sigmoid(F.max_pool2d(x, 2)) - 0.5", "x", "", [(2, 4, 16, 16)]),
    "groupnorm_then_ops": ("torch.relu(self.g(x)) * 3", "x",
                           "        self.g = nn.GroupNorm(2, 8)", [(2, 8, 6, 6)]),
    "matmul_then_groupnorm": ("self.g(self.l1(x))", "x",
                              "        self.l1 = nn.Linear(24, 32)\n"
                              "        self.g = nn.GroupNorm(4, 32)", [(16, 24)]),
    "attention_epilogue": ("F.scaled_dot_product_attention(q, k, v) * 2 + q", "q, k, v", "",
                           [(2, 3, 40, 16)] * 3),
    # three matmuls whose panel-form helpers call their K-step helper before defining it:
    # shared helpers must be renamed at every use (a NameError before)
    "swiglu_three_matmuls": ("self.down(F.silu(self.gate(x)) * self.up(x))", "x",
                             "        self.gate = nn.Linear(128, 344, bias=False)\n"
                             "        self.up = nn.Linear(128, 344, bias=False)\n"
                             "        self.down = nn.Linear(344, 128, bias=False)",
                             [(128, 128)]),
    # an output that is the input itself (reshaped): one HBM to HBM copy, not garbage
    "mlp_and_its_input": ("(self.l2(torch.relu(self.l1(x))), x.view(48, 128))", "x",
                          "        self.l1 = nn.Linear(64, 128)\n"
                          "        self.l2 = nn.Linear(128, 32)", [(96, 64)]),
    # the pool reads a reshape of the matmul's scratch: a leaf of its own (it wants its
    # input whole; "pooling of a view of an input" before)
    "matmul_then_pool_of_a_view": ("F.avg_pool1d(self.l(x).unsqueeze(1), 4) * 2", "x",
                                   "        self.l = nn.Linear(32, 64)", [(16, 32)]),
    "two_branches": ("self.a(x).sum(-1, keepdim=True) + self.b(x)", "x",
                     "        self.a = nn.Linear(32, 64)\n"
                     "        self.b = nn.Linear(32, 1)", [(50, 32)]),
}


@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_composed_module_on_sim(name: str) -> None:
    expr, args, init, shapes = COMPOSED[name]
    task = make_task(module_source(expr, args=args, init=init), shapes)
    check_on_sim(task)


def test_bf16_mlp_on_sim() -> None:
    expr, args, init, shapes = COMPOSED["mlp_two_matmuls"]
    check_on_sim(make_task(module_source(expr.replace("(x)", "(x.float())", 1), args=args,
                                         init=init), shapes, "bfloat16"))


class TestScheduleIsReadable:
    def test_stages_named_after_their_source_ops(self) -> None:
        """The header lists the plan; each stage is a comment naming its ops and scratch."""
        expr, args, init, shapes = COMPOSED["mlp_two_matmuls"]
        lowered = lower_ok(make_task(module_source(expr, args=args, init=init), shapes))
        assert len(lowered.plan) == 2
        assert "self.l1" in lowered.plan[0] and "torch.relu" in lowered.plan[0]
        assert "self.l2" in lowered.plan[1] and "reads relu_hbm" in lowered.plan[1]
        assert "# stage 1 of 2: matmul group" in lowered.source
        assert "relu_hbm = nl.ndarray((96, 160), dtype=nl.float32, buffer=nl.hbm)" in (
            lowered.source)
        assert "Schedule: 2 stages" in lowered.source

    def test_identical_stage_helpers_written_once(self) -> None:
        """Two stages of the same form call one tile helper, not two copies of it."""
        expr = "self.l2(self.l1(x))"
        init = "        self.l1 = nn.Linear(64, 64)\n        self.l2 = nn.Linear(64, 64)"
        lowered = lower_ok(make_task(module_source(expr, init=init), [(32, 64)]))
        assert lowered.source.count("def gemm_load_rows(") == 1
        assert lowered.source.count("def gemm_load_pair(") == 1
        # each stage's GEMM runs in its own helper (its tiles die with it), called from its
        # stage's function, and both helpers call the one shared loader
        calls = [line for line in lowered.source.splitlines()
                 if "gemm_whole_a" in line and not line.startswith("def ")]
        assert len(calls) == 2
        assert lowered.source.count("gemm_load_pair(a_sb, a_v") == 2

    def test_single_group_has_no_schedule(self) -> None:
        lowered = lower_ok(make_task(module_source("torch.relu(x) * 2"), [(64, 64)]))
        assert lowered.plan == [] and "Schedule:" not in lowered.source


def test_op_that_does_not_lower_alone_is_named() -> None:
    """Padded max pooling over planes too wide for SBUF declines even as its own stage (padded
    pools band dim 0 only), and the reason names the op and why."""
    result = lower_task(make_task(
        module_source("torch.relu(F.max_pool2d(x, 3, stride=1, padding=1))"),
        [(1, 1, 8, 65536)]))
    assert isinstance(result, Declined), result
    assert result.reason.startswith("layout:") and "as stages: F.max_pool2d does not lower" in (
        result.reason) and "bytes per row in SBUF" in result.reason


def test_reductions_over_different_dims_become_stages() -> None:
    """A sum over dim 1 and a max over dim 2 have no common row layout: one stage each,
    then the add reads both (their reshapes are pulled in as access patterns)."""
    task = make_task(module_source("x.sum(dim=1) + x.amax(dim=2)"), [(2, 8, 8)])
    assert len(lower_ok(task).plan) == 3
    check_on_sim(task)


class TestRowReductionOnTheMatmul:
    """A row reduction after a matmul runs on the output tile out of PSUM while one tile
    holds the whole row (N <= 512); wider rows fall back to a matmul stage and a row stage."""

    @pytest.mark.parametrize(("expr", "n"), [
        ("torch.softmax(self.l1(x) * 0.5, dim=-1)", 200),  # transposed B over 128: panel
        ("torch.logsumexp(self.l1(x), dim=1, keepdim=True)", 96),  # one value per row out
    ])
    def test_fused_in_one_group(self, expr: str, n: int) -> None:
        task = make_task(module_source(expr, init=f"        self.l1 = nn.Linear(64, {n})"),
                         [(130, 64)])
        lowered = lower_ok(task)
        assert lowered.plan == [] and "buffer=nl.hbm" not in lowered.source
        check_on_sim(task)

    def test_rows_wider_than_a_tile_are_staged(self) -> None:
        task = make_task(module_source("torch.softmax(self.l1(x), dim=-1)",
                                       init="        self.l1 = nn.Linear(32, 600)"), [(40, 32)])
        assert [line.split()[0] for line in lower_ok(task).plan] == ["matmul", "rowwise"]
        check_on_sim(task)


@pytest.mark.parametrize(("expr", "shape"), [
    ("torch.sigmoid(x).sum(dim=1, keepdim=True)", (16, 40000)),  # KernelBench 56's tail
    # a global average pool: 90,000 fp32 a row (352 KiB, over a partition's 192 KiB); a row of
    # 40,000 fits whole since its sum is a Vector Engine read, with no [p, q] scratch tile
    ("x.mean(dim=(2, 3))", (2, 3, 300, 300)),
])
def test_long_row_reduction_split_in_two(expr: str, shape: tuple[int, ...]) -> None:
    """Rows too long for SBUF whole are reduced in chunks, then the partials (rewrite.py)."""
    task = make_task(module_source(expr), [shape])
    lowered = lower_ok(task)
    assert any("_part_hbm" in line for line in lowered.plan)
    check_on_sim(task, tol=1e-3)


@pytest.mark.parametrize(("groups", "channels", "shape"), [
    # 256 channels in a group: over 128 partitions (blocks of 2 x 16900, over the block
    # emitter's budget, were written out too until their rows were read in chunks:
    # test_lowering_rowstats.py::TestGroupNormLongRows)
    (1, 256, (2, 256, 4, 4)),
])
def test_groupnorm_too_big_for_its_emitter_is_expanded(groups: int, channels: int,
                                                        shape: tuple[int, ...]) -> None:
    """The norm becomes row reductions and elementwise stages (rewrite.expand_norms)."""
    init = (f"        self.g = nn.GroupNorm({groups}, {channels})\n"
            "        nn.init.normal_(self.g.weight)\n        nn.init.normal_(self.g.bias)")
    task = make_task(module_source("torch.relu(self.g(x))", init=init), [shape])
    assert any("g_rstd" in line or "g_scaled" in line for line in lower_ok(task).plan)
    check_on_sim(task, tol=1e-3)


def test_slice_of_a_parameter_is_read_in_place() -> None:
    """Rotary's `cos_cached[:T]` is an access pattern pulled into the stage that reads it,
    not a value copied to scratch (stages wrote each window or half as getitem_hbm before,
    and the next stage read that copy)."""
    init = ("        self.register_buffer('c', torch.randn(64, 32))\n"
            "        self.register_buffer('s', torch.randn(64, 32))")
    expr = ("x * self.c[:x.shape[-2]] + torch.cat((-x[..., 16:], x[..., :16]), dim=-1) "
            "* self.s[:x.shape[-2]]")
    task = make_task(module_source(expr, init=init), [(2, 3, 40, 32)])
    plan = lower_ok(task).plan
    assert plan and not any("getitem" in line.split("writes")[1] for line in plan), plan
    check_on_sim(task)


class TestSchedulerScales:
    """A network of hundreds of ops (KernelBench level 3 MobileNetV2: 232 s to lower on a
    loaded host, past the sandbox's 60 s) is scheduled in seconds: the scheduler's
    by-name lookups and the helper sharing do not grow with the square of the graph."""

    def test_lookup_by_name_is_indexed(self) -> None:
        import time

        from nkibot.lowering.frontend.ir import Graph, Op, Ref

        ops = [Op(f"v{i}", "neg", (Ref(f"v{i - 1}"),), (4,), "float32") for i in range(30000)]
        graph = Graph([], ops[:-1], [Ref("v29998")])
        graph.ops.append(ops[-1])  # built by appending: the index follows
        started = time.process_time()
        assert all(graph.op(f"v{i}") is ops[i] for i in range(30000))
        assert graph.op("nothing") is None and graph.leaf("v3") is None
        assert time.process_time() - started < 1.0  # a scan per lookup: ~6 s of CPU

    def test_sharing_helpers_is_linear(self) -> None:
        import time

        from nkibot.lowering.emit.rowwise import Kernel
        from nkibot.lowering.stages import share_helpers

        def helper(name: str, i: int) -> list[str]:
            return [f"def {name}(x, p):", f"    y = nl.ndarray((p, {i}), dtype=nl.float32)",
                    *[f"    nisa.activation(dst=y, op=nl.exp, data=x, scale={i}.0)"] * 8]

        kernel = Kernel()
        kernel.helpers = [helper(f"tile_{i}", i) for i in range(400)]
        kernel.helpers += [helper(f"twin_{i}", i) for i in range(400)]
        kernel.body.line("twin_7(a, 128)")
        started = time.process_time()
        share_helpers(kernel)
        assert len(kernel.helpers) == 400 and kernel.body.lines[-1].strip() == "tile_7(a, 128)"
        assert time.process_time() - started < 1.0  # pairwise renaming: ~11 s of CPU


def test_composite_activation_joins_the_matmul_epilogue() -> None:
    """GPT-2's tanh GELU written out (8 pointwise ops) after c_fc: the group grows over the
    whole run of pointwise ops into c_fc's epilogue, so the MLP is 2 stages. With a
    look-ahead of 3 ops the group closed after the matmul ("a matmul graph with several
    outputs" until the GELU's last op joins): 3 stages, the GELU one HBM round trip."""
    gelu = ("0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * "
            "torch.pow(h, 3.0))))")
    expr = f"self.l2((lambda h: {gelu})(self.l1(x)))"
    init = "        self.l1 = nn.Linear(48, 192)\n        self.l2 = nn.Linear(192, 48)"
    task = make_task(module_source(expr, init=init), [(2, 24, 48)])
    plan = lower_ok(task).plan
    assert len(plan) == 2 and "torch.tanh" in plan[0], plan
    check_on_sim(task)


class TestStageTilesDieWithTheirStage:
    """A convolution keeps its input plane and weights resident in SBUF; each stage runs in a
    function of its own, so a later stage finds the whole SBUF free (KernelBench level 2 72
    and 79 at batch 1: sbuf-capacity while the conv's plane was still live)."""

    def test_instance_norm_rows_after_a_conv3d(self) -> None:
        """Level 2 79: a 64 KiB conv plane, then three whole [16, 12600] instance-norm rows."""
        task = make_task(module_source(
            "torch.amax(torch.clamp(self.n(self.c(x) * self.m), -1.0, 1.0) * self.m, dim=1)",
            init="        self.c = nn.Conv3d(3, 16, 3)\n"
                 "        self.m = nn.Parameter(torch.randn(16, 1, 1, 1))\n"
                 "        self.n = nn.InstanceNorm3d(16)"), [(1, 3, 16, 32, 32)])
        check_on_sim(task)

    def test_pool_after_a_transposed_conv3d(self) -> None:
        """Level 2 72: a 128 KiB transposed-conv plane, then a pool's 63 x 63 row planes."""
        task = make_task(module_source(
            "F.avg_pool3d(self.c(x), 2)",
            init="        self.c = nn.ConvTranspose3d(3, 16, 3, stride=2, padding=1)"),
            [(1, 3, 32, 32, 32)])
        check_on_sim(task)
