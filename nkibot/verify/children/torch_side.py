"""Harness child ops that need torch: describe the reference, compute reference outputs.

Runs only inside the sandboxed child (`nkibot.verify.harness`). Seeds: the module is
built under `torch.manual_seed(0)` so its parameters are the same for every trial;
each trial's inputs come from `get_inputs()` under `torch.manual_seed(seed)` when the
file has one (and its shapes match the task's specs), else from a standard normal.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nkibot.verify.children.flops import FlopCount
from nkibot.verify.children.stress import transform
from nkibot.verify.protocol import LOW_PRECISION, NUMPY_DTYPES, save_array

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "float16": torch.float16, "float8_e4m3": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool,
}
_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


class ReferenceProblem(Exception):
    """A user-facing problem with the reference file (missing entry point, bad inputs)."""


def torch_dtype_name(dtype: torch.dtype) -> str:
    return _NAMES.get(dtype, str(dtype).removeprefix("torch."))


def to_numpy(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    t = tensor.detach().cpu().contiguous()
    name = torch_dtype_name(t.dtype)
    if name == "bfloat16":
        return t.view(torch.int16).numpy().view(NUMPY_DTYPES[name])
    if name.startswith("float8"):
        return t.view(torch.uint8).numpy().view(NUMPY_DTYPES[name])
    return t.numpy()


def load_reference(request: dict[str, Any]) -> tuple[Any, Any]:
    """Import the reference file; return (module object, entry point object)."""
    path = Path(request["reference_path"])
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("nkibot_reference", path)
    if spec is None or spec.loader is None:
        raise ReferenceProblem(f"cannot import {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["nkibot_reference"] = module
    spec.loader.exec_module(module)
    name = request["entry_point"]
    entry = getattr(module, name, None)
    if entry is None:
        found = [n for n, v in vars(module).items()
                 if ((inspect.isclass(v) and issubclass(v, torch.nn.Module))
                     or inspect.isfunction(v)) and getattr(v, "__module__", "") == module.__name__]
        raise ReferenceProblem(f"{name!r} is not defined; found: {', '.join(found) or 'nothing'}")
    return module, entry


def _build(entry: Any, init_args: list[Any], init_kwargs: dict[str, Any]) -> Any:
    """The callable to run: an instantiated eval-mode module, or the function itself."""
    if inspect.isclass(entry):
        if not issubclass(entry, torch.nn.Module):
            raise ReferenceProblem(f"{entry.__name__} is a class but not a torch.nn.Module")
        torch.manual_seed(0)
        return entry(*init_args, **init_kwargs).eval()
    if callable(entry):
        return entry
    raise ReferenceProblem(f"{entry!r} is neither an nn.Module class nor a function")


def _jsonable(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_jsonable(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def _param_names(model: Any) -> list[str]:
    target = model.forward if isinstance(model, torch.nn.Module) else model
    params = inspect.signature(target).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _spec(name: str, tensor: torch.Tensor) -> dict[str, Any]:
    dtype = torch_dtype_name(tensor.dtype)
    # NKI has no float64: such tensors are handed to kernels as float32.
    return {"name": name, "shape": list(tensor.shape),
            "dtype": "float32" if dtype == "float64" else dtype}


def describe(request: dict[str, Any]) -> dict[str, Any]:
    try:
        module, entry = load_reference(request)
        get_init = getattr(module, "get_init_inputs", None)
        init_args = list(get_init()) if callable(get_init) else list(request.get("init_args", []))
        if not all(_jsonable(a) for a in init_args):
            raise ReferenceProblem("get_init_inputs() must return plain values (numbers, "
                                   "strings, lists), not tensors or objects")
        model = _build(entry, init_args, request.get("init_kwargs") or {})
    except ReferenceProblem as exc:
        return {"ok": False, "error": {"type": "ReferenceProblem", "message": str(exc)}}
    names = _param_names(model)
    get_inputs = getattr(module, "get_inputs", None)
    inputs: list[dict[str, Any]] | None = None
    if callable(get_inputs):
        torch.manual_seed(0)
        values = list(get_inputs())
        inputs = []
        for i, value in enumerate(values):
            name = names[i] if i < len(names) else f"input{i}"
            if isinstance(value, bool | int | float) and not isinstance(value, torch.Tensor):
                # a Python scalar: a compile-time constant of the kernel, not an argument
                dtype = "float32" if isinstance(value, float) else "int32"
                inputs.append({"name": name, "shape": [], "dtype": dtype, "value": value})
                continue
            if not isinstance(value, torch.Tensor):
                return {"ok": False, "error": {"type": "ReferenceProblem", "message": (
                    f"get_inputs() item {i} ({name}) is a {type(value).__name__}, not a tensor "
                    "or a Python number; only those forward inputs are supported")}}
            inputs.append(_spec(name, value))
    state = model.state_dict() if isinstance(model, torch.nn.Module) else {}
    return {
        "ok": True,
        "kind": "module" if isinstance(model, torch.nn.Module) else "function",
        "param_names": names,
        "inputs": inputs,
        "init_args": init_args,
        "has_get_inputs": callable(get_inputs),
        "state_dict": [_spec(k, v) for k, v in state.items()],
    }


def _trial_inputs(get_inputs: Any, specs: list[dict[str, Any]], seed: int) -> list[Any]:
    values: list[Any] = []
    if get_inputs is not None:
        torch.manual_seed(seed)
        values = list(get_inputs())
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, spec in enumerate(specs):
        if spec.get("value") is not None:
            out.append(spec["value"])  # the kernel's compile-time constant, every trial
            continue
        dtype = TORCH_DTYPES[spec["dtype"]]
        value = values[i] if i < len(values) else None
        if isinstance(value, torch.Tensor) and list(value.shape) == list(spec["shape"]):
            out.append(value.to(dtype))
        elif dtype.is_floating_point:
            out.append(torch.randn(spec["shape"], generator=gen).to(dtype))
        elif dtype == torch.bool:
            out.append(torch.rand(spec["shape"], generator=gen) < 0.5)
        else:
            out.append(torch.randint(0, 16, spec["shape"], generator=gen).to(dtype))
    return out


def _flatten(result: Any) -> list[torch.Tensor]:
    items = list(result) if isinstance(result, tuple | list) else [result]
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise ReferenceProblem(f"output {i} is a {type(item).__name__}, not a tensor")
    return items


def _run(model: Any, inputs: list[Any], fp32: bool) -> list[torch.Tensor]:
    if fp32:
        inputs = [t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                  for t in inputs]
    with torch.no_grad():
        return _flatten(model(*inputs))


def reference(request: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(max(1, min(int(request.get("threads", 1)), 256)))
    try:
        module, entry = load_reference(request)
        model = _build(entry, request.get("init_args", []), request.get("init_kwargs") or {})
    except ReferenceProblem as exc:
        return {"ok": False, "error": {"type": "ReferenceProblem", "message": str(exc)}}
    specs = request["inputs"]
    native_model = model
    low = any(s["dtype"] in LOW_PRECISION for s in specs)
    if low and isinstance(model, torch.nn.Module):
        model = copy.deepcopy(model).float()
    get_inputs = getattr(module, "get_inputs", None) if request.get("has_get_inputs") else None
    state_dir = Path(request["state_dir"])
    state_items = native_model.state_dict().items() if isinstance(
        native_model, torch.nn.Module) else []
    state = [save_array(state_dir / f"state{i}.npy", _state_array(v))
             for i, (_, v) in enumerate(state_items)]
    trials = []
    for t, step in enumerate(request["plan"]):
        seed, label = int(step["seed"]), str(step["label"])
        inputs = transform(_trial_inputs(get_inputs, specs, seed), seed, step.get("kind"),
                           float(step.get("value", 0.0)))
        try:
            trials.append(_one_trial(request, t, seed, label, inputs, model, native_model, low))
        except ReferenceProblem as exc:
            return {"ok": False, "error": {"type": "ReferenceProblem", "message": str(exc)}}
        except Exception:
            if step.get("kind") != "special":
                raise
            # A reference that refuses special values (a check on its inputs) has said
            # where its domain ends: the trial is dropped. It is the plan's last, so no
            # other trial's files are renumbered.
            break
    return {"ok": True, "state": state, "trials": trials}


def _state_array(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    if tensor.dtype == torch.float64:
        tensor = tensor.float()
    return to_numpy(tensor)


def _one_trial(request: dict[str, Any], t: int, seed: int, label: str,
               inputs: list[Any], model: Any, native_model: Any,
               low: bool) -> dict[str, Any]:
    inputs_dir, expected_dir = Path(request["inputs_dir"]), Path(request["expected_dir"])
    saved = [save_array(inputs_dir / f"trial{t}_in{i}.npy", to_numpy(x))
             for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    started = time.process_time()
    flops = None
    if t == 0:  # the operator's FLOPs, for the cost model's roofline (one count suffices)
        with FlopCount() as counter:  # torch's own formulas, without importing Dynamo
            outputs = _run(model, inputs, fp32=True)
        flops = counter.total
    else:
        outputs = _run(model, inputs, fp32=True)
    fp32_s = time.process_time() - started
    expected = [save_array(expected_dir / f"trial{t}_out{k}.npy", to_numpy(o.float()
                if o.dtype == torch.float64 else o)) for k, o in enumerate(outputs)]
    native = [torch_dtype_name(o.dtype) for o in outputs]
    native_error = None
    if low:
        try:
            native = [torch_dtype_name(o.dtype) for o in _run(native_model, inputs, fp32=False)]
        except Exception as exc:  # some ops have no low-precision CPU kernel
            native_error = f"{type(exc).__name__}: {exc}"[:300]
            low_dtypes = [x.dtype for x in inputs if isinstance(x, torch.Tensor)
                          and x.dtype in (torch.bfloat16, torch.float16)]
            native = [torch_dtype_name(low_dtypes[0]) if n == "float32" and low_dtypes else n
                      for n in native]
    return {"seed": seed, "label": label, "inputs": saved, "expected": expected,
            "native_dtypes": native, "native_error": native_error, "flops": flops,
            "ref_errors": _timed_errors(model, inputs, outputs) if (
                label != "normal" and fp32_s <= FP64_TRIAL_S
                and _fp64_spent[0] <= FP64_TOTAL_S) else []}


def _timed_errors(model: Any, inputs: list[Any], outputs: list[torch.Tensor]) -> list[float]:
    started = time.process_time()
    try:
        return _reference_errors(model, inputs, outputs)
    finally:
        _fp64_spent[0] += time.process_time() - started


#: The float64 run (for the reference's own error) is made on stress trials only, when the
#: fp32 run took at most FP64_TRIAL_S, and while the float64 runs so far took at most
#: FP64_TOTAL_S: float64 convolutions on CPU measured 2.5-7x slower than fp32, and the
#: reference has a time limit (120 s by default). Both count this process's CPU time, not
#: wall time, so a busy host (other children, other jobs) does not change which trials get
#: the slack. 20 s: KernelBench level 1 11 (a 4-D einsum, 50M outputs) makes six float64
#: runs of 1.3-1.5 s CPU each on an idle host, more with a loaded host's page faults, and
#: at 10 s its overflow-scale trial, the fifth, went without slack and failed.
FP64_TRIAL_S = 1.0
FP64_TOTAL_S = 20.0
_fp64_spent = [0.0]


def _max_finite_diff(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest |out - ref| over the elements where it is finite, 0.0 when none is.

    Computed in chunks of DIFF_CHUNK elements, in place: selecting the finite elements of
    a 50M-element difference in one piece copies it (4.6 s for KernelBench level 1 11, a
    4-D einsum, longer than its float64 run), and the page faults of whole-output float64
    temporaries are CPU time charged to the float64 budget."""
    worst = 0.0
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    for start in range(0, flat_ref.numel(), DIFF_CHUNK):
        diff = flat_ref[start:start + DIFF_CHUNK].sub(
            flat_out[start:start + DIFF_CHUNK].double()).abs_()
        diff.masked_fill_(~torch.isfinite(diff), -1.0)
        worst = max(worst, float(diff.max()))
    return worst


#: Elements per piece of the reference-error difference (32 MiB of float64).
DIFF_CHUNK = 1 << 22


def _reference_errors(model: Any, inputs: list[Any], outputs: list[torch.Tensor]) -> list[float]:
    """How far each fp32 reference output is from the same model run in float64: the
    reference's own rounding error (a long fp32 accumulation over offset inputs is off by
    several ulps). A kernel as accurate as the reference may differ from it by twice this.
    0.0 for integer outputs, and for every output when the float64 run is not possible."""
    try:
        exact = copy.deepcopy(model).double() if isinstance(model, torch.nn.Module) else model
        wide = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                for t in inputs]
        with torch.no_grad():
            results = _flatten(exact(*wide))
    except Exception:  # an op without a float64 kernel: no slack, the plain tolerance
        return [0.0] * len(outputs)
    errors = []
    for out, ref in zip(outputs, results, strict=False):
        if not (out.is_floating_point() and ref.is_floating_point()) or out.shape != ref.shape:
            errors.append(0.0)
            continue
        errors.append(_max_finite_diff(out, ref))
    return errors + [0.0] * (len(outputs) - len(errors))
