"""Device side of the neuron backend: runs inside the sandboxed child on a Trn1 host.

`python -I -m nkibot.backends.neuron.device` reads one JSON request on stdin
(`{"op": "compile"|"profile", "src", "task", "artifacts", "warmup", "iters"}`) and
prints one JSON reply on stdout. The parent sets, before this process starts,
`NEURON_RT_VISIBLE_CORES=<core>` (the worker's NeuronCore, seen here as core 0),
`NEURON_PLATFORM_TARGET_OVERRIDE=trn1` and `NKI_ARTIFACTS_DIR=<artifacts>` (the NKI
front end reads it at import, and keeps `kernel.neff` there).

A `@nki.jit` kernel called with NumPy arrays is compiled to a NEFF and executed
standalone on the NeuronCore; `run_on_device` is that call, shared with the
verification harness so on-device trials use the same guards as the simulator's.
Only this module imports the SDK (`nki`, `nrtpy`, `torch_neuronx`), lazily.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.task import InputSpec, Task

KERNEL_FILE = "kernel.py"
REFERENCE_FILE = "reference.py"
Clock = Callable[[], int]


def run_on_device(kernel_fn: Callable[..., Any], arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Call a `@nki.jit` kernel with NumPy arrays (compile + run on the visible NeuronCore)."""
    out = kernel_fn(*arrays)
    items = out if isinstance(out, tuple | list) else (out,)
    return [np.asarray(item) for item in items]


def find_kernel_name(src: str) -> str:
    """The top-level function decorated with `nki.jit` (or `jit`); else the last function."""
    tree = ast.parse(src)
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    for fn in functions:
        for deco in fn.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = ast.unparse(target)
            if name in ("nki.jit", "jit"):
                return fn.name
    if not functions:
        raise ValueError("the kernel source defines no function")
    return functions[-1].name


def kernel_arg_names(src: str, name: str) -> list[str]:
    """Positional parameter names of the kernel: the NEFF's input tensor names."""
    for node in ast.parse(src).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return [arg.arg for arg in (*node.args.posonlyargs, *node.args.args)]
    raise ValueError(f"no function {name!r} in the kernel source")


def load_source(src: str, path: Path, attribute: str) -> Any:
    """Write `src` to `path` and import it (the NKI front end needs a real file to trace)."""
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attribute)


def time_calls(fn: Callable[[], object], warmup: int, iters: int,
               clock: Clock = time.perf_counter_ns) -> list[float]:
    """Microseconds per timed call after `warmup` untimed calls (host wall clock)."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    for _ in range(iters):
        start = clock()
        fn()
        samples.append((clock() - start) / 1000.0)
    return samples


def to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor as a NumPy array; bf16 goes through ml_dtypes (NumPy has no bf16)."""
    import torch

    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return np.asarray(tensor.float().numpy().astype(ml_dtypes.bfloat16))
    return np.asarray(tensor.detach().cpu().numpy())


def make_inputs(specs: Sequence[InputSpec], seed: int) -> list[Any]:
    """Seeded torch inputs: standard normal floats, small random integers, random bools."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in specs:
        dtype = getattr(torch, spec.dtype if spec.dtype != "bool" else "bool")
        if spec.dtype.startswith("float"):
            t = torch.randn(spec.shape, generator=gen).to(dtype)
        elif spec.dtype == "bool":
            t = torch.randint(0, 2, spec.shape, generator=gen).bool()
        else:
            t = torch.randint(-8, 8, spec.shape, generator=gen).to(dtype)
        tensors.append(t)
    return tensors


def build_reference(task: Task, workdir: Path) -> Any:
    """The user's module (instantiated, eval mode) or function, as a torch.nn.Module."""
    import torch

    obj = load_source(task.reference_source, workdir / REFERENCE_FILE, task.entry_point)
    if task.kind == "module":
        torch.manual_seed(0)
        module = obj(*task.init_args, **task.init_kwargs)
        return module.eval()

    class _Function(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return obj(*args)

    return _Function().eval()


def kernel_arrays(task: Task, reference: Any, seed: int) -> tuple[list[Any], list[np.ndarray]]:
    """Forward inputs (torch) and the kernel's arrays: inputs then state_dict, per convention."""
    forward = make_inputs(task.inputs, seed)
    state = [value.detach() for value in reference.state_dict().values()]
    return forward, [to_numpy(t) for t in (*forward, *state)]


def cpu_baseline(reference: Any, forward: Sequence[Any], warmup: int, iters: int) -> list[float]:
    import torch

    with torch.no_grad():
        return time_calls(lambda: reference(*forward), warmup, iters)


def device_baseline(reference: Any, forward: Sequence[Any], warmup: int,
                    iters: int) -> list[float]:
    """The same module compiled by torch-neuronx for the visible NeuronCore, timed per call."""
    import torch
    import torch_neuronx

    traced = torch_neuronx.trace(reference, tuple(forward))
    with torch.no_grad():
        return time_calls(lambda: traced(*forward), warmup, iters)


def find_neff(artifacts: Path) -> Path | None:
    direct = artifacts / "kernel.neff"
    if direct.exists():
        return direct
    found = sorted(artifacts.rglob("*.neff"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def device_time(neff: Path | None, arrays: list[np.ndarray], names: list[str],
                warmup: int, iters: int) -> list[float] | None:
    """NeuronCore execution time alone (nrtpy device tracing), where nrtpy is installed."""
    if neff is None or importlib.util.find_spec("nrtpy") is None:
        return None
    from nrtpy import NrtpyModel, NrtpyTensor

    model = NrtpyModel.load_from_neff(str(neff), core_id=0)
    inputs = {n: NrtpyTensor.from_numpy(a, name=n) for n, a in zip(names, arrays, strict=True)}
    stats = model.benchmark(inputs=inputs, warmup_iter=warmup, benchmark_iter=iters,
                            mode="device")
    return [float(ms) * 1000.0 for ms in stats.durations_ms]


def profile_reply(kernel_fn: Callable[..., Any], src: str, name: str, neff: Path | None,
                  reference: Any, forward: list[Any], arrays: list[np.ndarray],
                  warmup: int, iters: int) -> dict[str, Any]:
    """Timings in µs. The kernel and both baselines are timed the same way (host wall clock
    per call, inputs on the host), so the speedups compare like with like."""
    reply: dict[str, Any] = {
        "kernel_us": time_calls(lambda: kernel_fn(*arrays), warmup, iters),
    }
    timers: dict[str, Callable[[], list[float] | None]] = {
        "kernel_device": lambda: device_time(
            neff, arrays, kernel_arg_names(src, name), warmup, iters),
        "torch_cpu": lambda: cpu_baseline(reference, forward, warmup, iters),
        "torch_device": lambda: device_baseline(reference, forward, warmup, iters),
    }
    for key, timer in timers.items():
        try:
            reply[f"{key}_us"] = timer()
        except Exception:
            reply[f"{key}_us"] = None
            reply[f"{key}_error"] = traceback.format_exc(limit=3)
    return reply


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """Serve one request; every failure becomes a reply with the traceback in `error`."""
    task = Task.model_validate(request["task"])
    src = str(request["src"])
    artifacts = Path(request["artifacts"])
    workdir = artifacts.parent
    name = find_kernel_name(src)
    reply: dict[str, Any] = {"op": request["op"], "kernel": name}
    try:
        reference = build_reference(task, workdir)
        forward, arrays = kernel_arrays(task, reference, seed=task.seeds[0] if task.seeds else 0)
    except Exception:
        reply.update(ok=False, stage="reference", error=traceback.format_exc())
        return reply
    try:
        kernel_fn = load_source(src, workdir / KERNEL_FILE, name)
        outputs = run_on_device(kernel_fn, arrays)
    except Exception:
        neff = find_neff(artifacts)
        reply.update(ok=False, neff=str(neff) if neff else None, error=traceback.format_exc(),
                     stage="runtime" if neff else "compile")
        return reply
    neff = find_neff(artifacts)
    reply.update(ok=True, neff=str(neff) if neff else None,
                 output_shapes=[list(o.shape) for o in outputs])
    if request["op"] == "profile":
        reply.update(profile_reply(kernel_fn, src, name, neff, reference, forward, arrays,
                                   int(request["warmup"]), int(request["iters"])))
    return reply


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        reply = handle(request)
    except Exception:
        reply = {"op": request.get("op"), "ok": False, "stage": "setup",
                 "error": traceback.format_exc()}
    sys.stderr.write(reply.get("error") or "")
    sys.stdout.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
