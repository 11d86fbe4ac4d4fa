"""nkibot's kernels beside AWS's hand-written NKI examples, on the cost model.

Run: `python bench/handkernels.py --sdk PATH [--target trn1] [--only NAME ...] [--json]`,
PATH a local checkout of aws-neuron/aws-neuron-sdk (never committed: its kernels are
third-party code, read from PATH at run time). For each row the SDK's current-dialect
example kernel (`nki/examples/...`) and nkibot's lowering of the equivalent PyTorch
module are timed by the cost model (`nkibot.sim.cost.estimate`, cost-only mode, zero
inputs) at the same shapes and dtypes; the table prints both modelled times, their ratio
(nkibot / AWS: below 1 means nkibot's kernel is modelled faster) and the geometric mean of
the ratios of the rows where both ran. A row whose kernel is not in this checkout, or whose
module the lowering declines, is printed with the reason and kept out of the mean.
Every figure is a model estimate for the target, not a measurement.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# This checkout's nkibot, not the editable install's (a script's folder comes first on
# sys.path, not the working directory), and bench/shrink.py (bench/ is not a package).
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from shrink import meta_task  # noqa: E402

KERNELS = "nki/examples"
_TORCH_DTYPE = {"float32": "torch.float32", "bfloat16": "torch.bfloat16"}


@dataclass(frozen=True)
class Row:
    """One operator at one shape: AWS's kernel and the module nkibot converts."""

    name: str
    kernel_file: str  # under the SDK checkout
    function: str
    inputs: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype) of each kernel input
    forward: str  # body of Model.forward(self, *xs), same inputs as the kernel
    kwargs: dict[str, Any] = field(default_factory=dict)
    init: str = ""  # Model.__init__ body lines (modules), after super().__init__()
    # The module's input shapes where they differ from the kernel's by unit dims only
    # (same bytes, same order): nn.AvgPool2d wants [N, C, H, W], AWS's kernel [C, H, W].
    module_shapes: tuple[tuple[int, ...], ...] = ()

    def module_inputs(self) -> tuple[tuple[tuple[int, ...], str], ...]:
        if not self.module_shapes:
            return self.inputs
        return tuple((s, dt) for s, (_, dt) in zip(self.module_shapes, self.inputs, strict=True))


def _add(n: int, dtype: str) -> Row:
    return Row(f"add {dtype} {n}x{n}", "tensor_addition/tensor_addition_nki_kernels.py",
               "nki_tensor_add", (((n, n), dtype), ((n, n), dtype)), "return a + b")


def _pool(c: int, h: int, dtype: str) -> Row:
    return Row(f"avgpool 2x2 {dtype} {c}x{h}x{h}", "average_pool2d/average_pool2d_nki_kernels.py",
               "tensor_avgpool_kernel", (((c, h, h), dtype),), "return self.pool(a)",
               {"pool_size": 2}, "self.pool = nn.AvgPool2d(2)", ((1, c, h, h),))


def _transpose(p: int, f1: int, f2: int, dtype: str) -> Row:
    return Row(f"transpose2d {dtype} {p}x({f1}x{f2})", "transpose2d/transpose2d_nki_kernels.py",
               "tensor_transpose2D_kernel_", (((p, f1 * f2), dtype),),
               f"return a.reshape({p}, {f1}, {f2}).transpose(1, 2).reshape({p}, {f1 * f2})",
               {"shape2D": (f1, f2)})


def _gemm(k: int, m: int, n: int, dtype: str) -> Row:
    # The tutorial's kernel takes the left operand transposed ([K, M]); the module gets the
    # same tensors and multiplies lhsT.T by rhs.
    return Row(f"gemm {dtype} K{k} M{m} N{n}",
               "matrix_multiplication/matrix_multiplication_nki_kernels.py",
               "nki_matmul_fully_optimized_", (((k, m), dtype), ((k, n), dtype)),
               "return torch.matmul(a.T, b)")


ROWS: tuple[Row, ...] = (
    _add(2048, "float32"), _add(2048, "bfloat16"),
    _pool(128, 64, "float32"), _pool(128, 128, "float32"),
    _transpose(128, 32, 32, "float32"),
    _gemm(1024, 2048, 1024, "bfloat16"), _gemm(2048, 2048, 2048, "bfloat16"),
    _gemm(1024, 2048, 1024, "float32"), _gemm(2048, 2048, 2048, "float32"),
)


def module_source(row: Row) -> str:
    """A KernelBench-format task for the row's PyTorch module at the row's shapes."""
    names = "abcdefgh"[:len(row.inputs)]
    init = "".join(f"        {line}\n" for line in row.init.splitlines())
    inputs = ", ".join(f"torch.randn({shape}, dtype={_TORCH_DTYPE[dt]})"
                       for shape, dt in row.module_inputs())
    return ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n" + init +
            f"\n    def forward(self, {', '.join(names)}):\n        {row.forward}\n\n\n"
            f"def get_inputs():\n    return [{inputs}]\n\n\n"
            "def get_init_inputs():\n    return []\n")


def aws_time(sdk: Path, row: Row, target: str) -> tuple[float | None, str]:
    """AWS's kernel's modelled µs, or None and why it did not run."""
    from nkibot.sim import activate
    from nkibot.sim.cost import estimate

    path = sdk / KERNELS / row.kernel_file
    if not path.is_file():
        return None, f"{KERNELS}/{row.kernel_file} not in this checkout"
    spec = importlib.util.spec_from_file_location(f"aws_{path.stem}", path)
    if spec is None or spec.loader is None:
        return None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    try:
        with activate(force=True, target=target):
            spec.loader.exec_module(module)
        fn = getattr(module, row.function, None)
        if fn is None:
            return None, f"{row.function} not in {row.kernel_file}"
        return estimate(fn, *row.inputs, target=target, **row.kwargs).makespan_us, ""
    except Exception as exc:  # reported, never guessed
        return None, f"AWS kernel: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def nkibot_time(row: Row, target: str) -> tuple[float | None, str]:
    """nkibot's lowering of the row's module, its modelled µs (or None and why)."""
    from nkibot.lowering import Declined, lower_task
    from nkibot.sim import activate
    from nkibot.sim.cost import estimate

    try:
        result = lower_task(meta_task(module_source(row), f"<{row.name}>"))
        if isinstance(result, Declined):
            return None, f"declined: {result.reason}"[:140]
        module = types.ModuleType("lowered_kernel")
        with activate(force=True, target=target):
            exec(compile(result.source, "lowered_kernel.py", "exec"), module.__dict__)
        report = estimate(module.__dict__[result.function], *row.module_inputs(),
                          target=target)
        return report.makespan_us, ""
    except Exception as exc:  # reported, never guessed
        return None, f"nkibot: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def geomean(ratios: list[float]) -> float | None:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None


def evaluate(sdk: Path, rows: tuple[Row, ...], target: str) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        aws, why_aws = aws_time(sdk, row, target)
        ours, why_ours = nkibot_time(row, target)
        ratio = ours / aws if aws and ours else None
        out.append({"row": row.name, "aws_us": aws, "nkibot_us": ours, "ratio": ratio,
                    "note": "; ".join(w for w in (why_aws, why_ours) if w) or None})
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdk", type=Path, required=True,
                    help="a local checkout of aws-neuron/aws-neuron-sdk")
    ap.add_argument("--target", default="trn1")
    ap.add_argument("--only", nargs="*", default=[], help="rows whose name contains one of these")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not (args.sdk / KERNELS).is_dir():
        print(f"{args.sdk}: no {KERNELS} folder; pass a checkout of aws-neuron/aws-neuron-sdk",
              file=sys.stderr)
        return 2
    rows = tuple(r for r in ROWS if not args.only or any(o in r.name for o in args.only))
    results = evaluate(args.sdk, rows, args.target)
    mean = geomean([r["ratio"] for r in results if r["ratio"] is not None])
    label = f"model estimate ({args.target}, cost model, cost-only), not a measurement"
    if args.json:
        for r in results:
            print(json.dumps(r))
        print(json.dumps({"geomean_ratio": mean, "label": label}))
        return 0
    print(f"{'row':34} {'AWS us':>10} {'nkibot us':>10} {'ratio':>6}")
    for r in results:
        note = f"  ({r['note']})" if r["note"] else ""
        print(f"{r['row']:34} {_fmt(r['aws_us'], '10.1f')} {_fmt(r['nkibot_us'], '10.1f')} "
              f"{_fmt(r['ratio'], '6.2f')}{note}")
    ran = sum(1 for r in results if r["ratio"] is not None)
    print(f"geometric mean nkibot/AWS over {ran} rows: {_fmt(mean, '.3f')}")
    print(label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
