"""Harness child op `run_kernel`: run a candidate kernel under the NKI simulator.

Torch-free on purpose: torch is not even in this child's view of the Python install.
The kernel's source arrives in the request (stdin) and is compiled from memory; its
inputs are read-only files the parent made. Each trial's outputs, and the inputs as the
kernel left them, are written raw to fixed names in the parent's output directory
(`protocol.output_name`). This process decides nothing: determinism, input mutation and
correctness are all judged by the parent on its own copies.
"""

from __future__ import annotations

import linecache
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.verify.protocol import (
    KernelReply,
    dtype_name,
    error_dict,
    load_array,
    output_name,
    random_array,
    save_array,
    to_kernel_dtype,
)


def _import_kernel(src: str, function: str, filename: str) -> Any:
    # Registered in linecache so tracebacks and inspect.getsource see the source.
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    module = types.ModuleType("nkibot_kernel")
    module.__file__ = filename
    sys.modules[module.__name__] = module
    exec(compile(src, filename, "exec"), module.__dict__)  # noqa: S102
    kernel = module.__dict__.get(function)
    if kernel is None:
        raise LookupError(f"the kernel file defines no function {function!r}")
    return kernel


def _simulator_name(nki: Any) -> str:
    return "nkibot-sim" if getattr(nki, "__nkibot_sim__", False) else "nki.simulate"


def _outputs(result: Any) -> list[np.ndarray[Any, Any]]:
    items = list(result) if isinstance(result, tuple | list) else [result]
    arrays = []
    for i, item in enumerate(items):
        if not isinstance(item, np.ndarray):
            raise TypeError(f"kernel output {i} is a {type(item).__name__}, not an array: "
                            "allocate it with nl.ndarray(..., buffer=nl.shared_hbm) and return it")
        # No copy: each output is written to its file before anything else runs (the
        # simulator already copied it out of the launch). At 57M elements a copy cost ~2 s.
        arrays.append(np.asarray(item))
    return arrays


def _trial_arrays(request: dict[str, Any]) -> dict[int, list[np.ndarray[Any, Any]]]:
    state = [load_array(d) for d in request.get("state", [])]
    if "random" in request:
        rng = np.random.default_rng(int(request["random"].get("seed", 0)))
        specs = request["random"]["specs"]
        trials = {0: [random_array(list(s["shape"]), str(s["dtype"]), rng) for s in specs]}
    else:
        trials = {int(t["index"]): [load_array(d) for d in t["inputs"]] + state
                  for t in request["trials"]}
    return {t: [to_kernel_dtype(a) for a in arrays] for t, arrays in trials.items()}


def run_kernel(request: dict[str, Any]) -> KernelReply:
    """Run the candidate on every trial under the simulator.

    A device backend has its own child (`nkibot.backends.neuron.trials`) that runs the
    same trials through `load_and_run`; the parent names which child runs."""
    reply: KernelReply = {"ok": False, "simulator": None, "device": None, "error": None,
                          "stats": {}}
    if request.get("cost_only"):
        # Ranking a candidate before any verification: the cost model alone (cost-only
        # mode, no matmul arithmetic), on the inputs a profile uses, so the figures agree.
        reply["model"] = _model(request, str(request.get("cost_model") or "trn1"))
        reply["error"] = reply["model"].get("error")
        reply["ok"] = reply["error"] is None
        return reply
    try:
        from nkibot.sim import activate
    except ImportError as exc:
        reply["error"] = error_dict(exc)
        return reply
    # The generation the parent asked for; nkibot's reference runner (trn1) otherwise.
    with activate(target=str(request.get("target") or "trn1")):
        import nki

        reply["simulator"] = _simulator_name(nki)
        load_and_run(request, reply, lambda kernel: nki.simulate(kernel))
    reply["stats"] = _stats()
    if request.get("cost_model") and reply["error"] is None:
        reply["model"] = _model(request, str(request["cost_model"]))
    reply["ok"] = reply["error"] is None
    return reply


def _model(request: dict[str, Any], target: str) -> dict[str, Any]:
    """The cost model's estimate on the first trial's inputs (labelled as a model figure)."""
    filename = Path(str(request.get("filename") or "kernel.py")).name
    try:
        from nkibot.sim import activate
        from nkibot.sim.cost import estimate

        with activate(force=True, target=target):
            kernel = _import_kernel(str(request["source"]), str(request["function"]), filename)
        arrays = next(iter(_trial_arrays(request).values()))
        return estimate(kernel, *arrays, target=target).as_dict()
    except Exception as exc:  # the estimate is informational; say why it is missing
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def load_and_run(request: dict[str, Any], reply: KernelReply, wrap: Any) -> None:
    """Import the kernel, run it on every trial in the request's order through
    `wrap(kernel)`, and save outputs and inputs as left to fixed names (errors: `reply`)."""
    filename = Path(str(request.get("filename") or "kernel.py")).name
    try:
        kernel = _import_kernel(str(request["source"]), str(request["function"]), filename)
        run = wrap(kernel)
        trials = _trial_arrays(request)
    except BaseException as exc:  # import-time errors are the kernel's, not ours
        reply["error"] = {**error_dict(exc, filename), "trial": None}
        return
    order = [int(t) for t in request.get("order", sorted(trials))]
    _run_trials(run, trials, order, Path(request["out_dir"]), reply, filename)


def _run_trials(run: Any, trials: dict[int, list[np.ndarray[Any, Any]]], order: list[int],
                out_dir: Path, reply: KernelReply, filename: str) -> None:
    for t in order:
        arrays = [a.copy() for a in trials[t]]
        try:
            outputs = _outputs(run(*arrays))
        except BaseException as exc:  # a kernel's failure is a result, whatever it raised
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply["error"] = {**error_dict(exc, filename), "trial": t}
            return
        for k, out in enumerate(outputs):
            save_array(out_dir / output_name(t, k, dtype_name(out.dtype)), out)
        # The inputs as the kernel left them; the parent compares them with its own.
        for i, arg in enumerate(arrays):
            save_array(out_dir / f"t{t}_a{i}.{dtype_name(arg.dtype)}.npy", np.asarray(arg))
        # Let go of this trial's arrays before the next one allocates its own: held, each
        # trial's outputs were faulted into fresh pages while the last ones were still
        # alive (level 1 75: 0.5 s a trial of a 200 MB output).
        del outputs, arrays


def _stats() -> dict[str, Any]:
    try:
        from nkibot.sim import stats
    except ImportError:
        return {}
    try:
        result = stats()
    except Exception:  # stats are informational; a simulator without them is fine
        return {}
    return dict(result) if isinstance(result, dict) else {}
