"""Tracing to the lowering IR: decomposition, constant folding, leaves, declines."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from nkibot.lowering import Declined, lower_task
from nkibot.lowering.frontend.trace import trace_graph
from tests.lowering.lowering_support import (
    UNSUPPORTED_CHAIN,
    UNSUPPORTED_OPS,
    make_task,
    module_source,
)


class TestTrace:
    """trace_graph turns a module into primitives with shapes and named leaves."""

    def test_rmsnorm_decomposes_to_primitives(self) -> None:
        """An RMSNorm becomes square, row sum, scale, add eps, rsqrt and two multiplies."""
        source = module_source("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w",
                               init="        self.w = nn.Parameter(torch.ones(64))")
        graph, unsupported = trace_graph(make_task(source, [(8, 64)]))
        assert unsupported == []
        assert [op.op for op in graph.ops] == ["square", "rsum", "mul", "add", "rsqrt", "mul",
                                               "mul"]
        assert graph.ops[1].shape == (8, 1) and graph.ops[1].dims == (1,)
        assert graph.ops[2].args[1] == 1 / 64

    def test_leaves_follow_calling_convention(self) -> None:
        """Inputs come first, then state_dict tensors in state_dict() order, names sanitised."""
        init = ("        self.norm = nn.LayerNorm(32)\n"
                "        self.register_buffer('scale', torch.ones(32))")
        source = module_source("self.norm(x) * self.scale + y", args="x, y", init=init)
        graph, _ = trace_graph(make_task(source, [(4, 32), (4, 32)]))
        assert [(leaf.name, leaf.source) for leaf in graph.leaves] == [
            ("x", "input"), ("y", "input"), ("scale", "state"), ("norm_weight", "state"),
            ("norm_bias", "state")]

    def test_sizes_and_attributes_fold_to_constants(self) -> None:
        """x.size(-1) and dims computed from x.dim() become literals in the graph."""
        source = module_source("torch.softmax(x, dim=x.dim() - 1) * x.size(-1)")
        graph, _ = trace_graph(make_task(source, [(4, 48)]))
        assert graph.ops[-1].op == "mul" and graph.ops[-1].args[1] == 48
        assert graph.ops[0].op == "rmax" and graph.ops[0].dims == (1,)

    def test_origins_name_source_ops(self) -> None:
        """Each primitive remembers the torch call it came from, for kernel comments."""
        source = module_source("F.gelu(self.fc(x))", init="        self.fc = nn.Linear(16, 8)")
        graph, _ = trace_graph(make_task(source, [(4, 16)]))
        assert {op.origin for op in graph.ops} == {"self.fc", "F.gelu"}


class TestDeclines:
    """Unsupported graphs are declined quickly with every unsupported op listed."""

    def test_every_unsupported_op_listed(self) -> None:
        """erfinv, lgamma and digamma all appear in the decline, in graph order."""
        result = lower_task(make_task(UNSUPPORTED_CHAIN, [(2, 3, 16, 16)]))
        assert isinstance(result, Declined)
        assert result.unsupported == UNSUPPORTED_OPS
        assert result.reason.startswith("unsupported ops: aten.erfinv.default")

    def test_each_unsupported_op_names_its_call_and_line(self) -> None:
        """A decline says which PyTorch call, on which line of the user's file, in its words."""
        task = make_task(UNSUPPORTED_CHAIN, [(2, 3, 16, 16)])
        result = lower_task(task)
        assert isinstance(result, Declined)
        code = "`return torch.digamma(torch.lgamma(torch.erfinv(x)))`"
        for op, call in (("erfinv", "torch.erfinv"), ("lgamma", "torch.lgamma"),
                         ("digamma", "torch.digamma")):
            assert f"aten.{op}.default ({call} at {task.source_path}:7: {code})" in result.reason

    def test_a_module_traced_at_its_shapes_names_the_line_too(self) -> None:
        """A forward that loops over `x.shape` fails torch.fx's symbolic trace; the trace
        at the input shapes still records each node's line in the user's file."""
        source = (UNSUPPORTED_CHAIN.split("class Model")[0] + "class Model(nn.Module):\n"
                  "    def forward(self, x):\n"
                  "        for _ in range(x.shape[0]):\n"
                  "            x = x + 1\n"
                  "        return torch.erfinv(x)\n")
        task = make_task(source, [(2, 8)])
        result = lower_task(task)
        assert isinstance(result, Declined)
        line = source.splitlines().index("        return torch.erfinv(x)") + 1
        assert (f"aten.erfinv.default (torch.erfinv at {task.source_path}:{line}: "
                "`return torch.erfinv(x)`)") in result.reason

    def test_the_child_answer_fits_the_parents_stdout_cap(self) -> None:
        """An answer over MAX_ANSWER drops tiling variants, last first, until it fits;
        the kernel itself is kept."""
        from nkibot.lowering.__main__ import MAX_ANSWER, fitted

        big = "x" * (MAX_ANSWER // 3)
        payload: dict[str, object] = {"source": big, "variants": [
            {"name": f"v{i}", "source": big} for i in range(4)]}
        answer = json.loads(fitted(payload))
        assert len(json.dumps(answer)) <= MAX_ANSWER and answer["source"] == big
        assert [v["name"] for v in answer["variants"]] == ["v0"]

    def test_the_lowering_child_loads_only_what_it_uses(self) -> None:
        """The lowering child (`python -m nkibot.lowering`, a Task on stdin) lowers an
        RMSNorm without the parent's modules (verify, convert, backends, libcst), without
        ml_dtypes, and without what torch.fx's own stack recording imports to filter
        frames (torch.export, inductor's sizevars): `user_stack` reads frames only."""
        task = make_task(module_source("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)"),
                         [(8, 64)])
        code = ("import json, runpy, sys\n"
                "try:\n    runpy.run_module('nkibot.lowering', run_name='__main__')\n"
                "except SystemExit:\n    pass\n"
                "print('MODULES ' + json.dumps(sorted(sys.modules)))\n")
        root = Path(__file__).resolve().parents[2]
        proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                              text=True, timeout=300, check=False, input=task.model_dump_json(),
                              env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        reply, modules = proc.stdout.strip().splitlines()[-2:]
        assert "source" in json.loads(reply)  # it lowered
        loaded = json.loads(modules.removeprefix("MODULES "))
        assert [m for m in loaded if m.startswith((
            "torch.export._trace", "torch._inductor.sizevars", "nkibot.verify",
            "nkibot.convert", "nkibot.backends", "libcst", "ml_dtypes"))] == []

    def test_normalisation_is_named_as_the_user_wrote_it(self) -> None:
        """BatchNorm, not 'a block normalisation'."""
        from nkibot.lowering.emit.norm import norm_name
        from nkibot.lowering.frontend.ir import Op

        bn = Op(name="bn", op="blocknorm", args=(), shape=(2, 8), dtype="float32",
                origin="self.bn", attrs=(("kind", "batch"),))
        assert norm_name([bn]) == "BatchNorm (self.bn)"

    def test_decline_is_fast(self) -> None:
        """Declining needs no kernel work: well under two seconds in-process."""
        started = time.monotonic()
        lower_task(make_task(UNSUPPORTED_CHAIN, [(8, 3, 64, 64)]))
        assert time.monotonic() - started < 2.0

    def test_module_traced_in_eval_mode(self) -> None:
        """As the harness runs references in eval mode, dropout lowers to a plain copy."""
        source = module_source("self.drop(x) * 2", init="        self.drop = nn.Dropout(0.5)")
        graph, unsupported = trace_graph(make_task(source, [(4, 8)]))
        assert unsupported == [] and [op.op for op in graph.ops] == ["copy", "mul"]

    def test_tracer_limits_do_not_read_as_user_bugs(self) -> None:
        """A module that runs as written but that no tracer can follow (numpy on a traced
        tensor): the decline says it is the tracer's limit and what can still convert it."""
        source = "import numpy as np\n" + module_source("torch.from_numpy(np.asarray(x)) + x")
        result = lower_task(make_task(source, [(4, 8)]))
        assert isinstance(result, Declined) and "could not trace Model" in result.reason
        assert "a limit of the lowering's tracer, not an error in the module" in result.reason
        assert "--model claude or bedrock" in result.reason

    def test_untraceable_module_declined(self) -> None:
        """Data-dependent control flow fails every tracer and becomes a decline that names
        the construct and the line of the user's file, with what to do instead."""
        source = module_source("x if x.sum() > 0 else -x")
        task = make_task(source, [(4, 8)]).model_copy(update={"source_path": "model.py"})
        result = lower_task(task)
        assert isinstance(result, Declined) and "could not trace Model" in result.reason
        assert "control flow" in result.reason and "torch.where" in result.reason
        line = source.splitlines().index("        return x if x.sum() > 0 else -x") + 1
        assert f"at model.py:{line}: `return x if x.sum() > 0 else -x`" in result.reason

    def test_layout_misfit_declined(self) -> None:
        """Pooling whose rows no emitter can hold in SBUF is declined (even staged)."""
        result = lower_task(make_task(
            module_source("F.max_pool2d(x, 3, stride=1, padding=1) + 1"), [(1, 1, 8, 65536)]))
        assert isinstance(result, Declined) and result.reason.startswith("layout:")
        # and says what the user can do about it
        assert result.reason.endswith("what you can do: other input shapes with --shape "
                                      "NAME=DIMSxDTYPE (the limits above are per tile), a "
                                      "smaller module (convert its parts one by one), or a "
                                      "model (--model claude or bedrock, with a key)")

    def test_function_tasks_declined(self) -> None:
        """Only nn.Module targets are lowered."""
        task = make_task(module_source("x"), [(2, 2)]).model_copy(update={"kind": "function"})
        result = lower_task(task)
        assert isinstance(result, Declined) and "nn.Module" in result.reason
