"""Harness child op `run_kernel`: run a candidate kernel under the NKI simulator.

Torch-free on purpose (fast start, and nothing a kernel could reach for). The kernel
gets copies of its inputs, so that writes into them can be detected against the
originals; trial 0 runs twice so that nondeterminism shows. Expected outputs are never
passed to this process: the parent compares.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from nkibot.verify.harness import error_dict
from nkibot.verify.protocol import (
    load_array,
    random_array,
    save_array,
    to_kernel_dtype,
)


def _import_kernel(path: Path, function: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"nkibot_kernel_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import kernel file {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    kernel = getattr(module, function, None)
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
        arrays.append(item)
    return arrays


def _call(run: Any, originals: list[np.ndarray[Any, Any]], names: list[str]
          ) -> tuple[list[np.ndarray[Any, Any]], list[str]]:
    """Call the kernel on copies; return outputs and the names of inputs it modified."""
    copies = [a.copy() for a in originals]
    outputs = _outputs(run(*copies))
    modified = [names[i] if i < len(names) else f"arg{i}"
                for i, (a, b) in enumerate(zip(originals, copies, strict=True))
                if a.tobytes() != b.tobytes()]
    return outputs, modified


def _trial_arrays(request: dict[str, Any]) -> list[list[np.ndarray[Any, Any]]]:
    state = [load_array(d) for d in request.get("state", [])]
    if "random" in request:
        rng = np.random.default_rng(int(request["random"].get("seed", 0)))
        specs = request["random"]["specs"]
        trials = [[random_array(list(s["shape"]), str(s["dtype"]), rng) for s in specs]]
    else:
        trials = [[load_array(d) for d in trial["inputs"]] + state
                  for trial in request["trials"]]
    return [[to_kernel_dtype(a) for a in arrays] for arrays in trials]


def _same(a: list[np.ndarray[Any, Any]], b: list[np.ndarray[Any, Any]]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True))


def run_kernel(request: dict[str, Any]) -> dict[str, Any]:
    """Run the candidate on every trial: on the simulator, or on the NeuronCore (`device`)."""
    names = list(request.get("arg_names", []))
    reply: dict[str, Any] = {"ok": False, "simulator": None, "device": None, "trials": [],
                             "deterministic": None, "error": None, "stats": {}}
    if request.get("device") == "neuron":
        _run_on_neuron(request, names, reply)
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
        _load_and_run(request, names, reply, lambda kernel: nki.simulate(kernel))
    reply["stats"] = _stats()
    reply["ok"] = reply["error"] is None
    return reply


def _run_on_neuron(request: dict[str, Any], names: list[str], reply: dict[str, Any]) -> None:
    # The real nki package compiles and runs the kernel on the NeuronCore that the
    # parent pinned with NEURON_RT_VISIBLE_CORES; the trials and guards are unchanged.
    from nkibot.backends.neuron.device import run_on_device

    reply["device"] = "neuron"
    _load_and_run(request, names, reply,
                  lambda kernel: lambda *arrays: tuple(run_on_device(kernel, arrays)))


def _load_and_run(request: dict[str, Any], names: list[str], reply: dict[str, Any],
                  wrap: Any) -> None:
    kernel_path = str(Path(request["kernel_path"]).resolve())
    try:
        kernel = _import_kernel(Path(kernel_path), str(request["function"]))
        run = wrap(kernel)
        trials = _trial_arrays(request)
    except BaseException as exc:  # import-time errors are the kernel's, not ours
        reply["error"] = {**error_dict(exc, kernel_path), "trial": None}
        return
    _run_trials(run, trials, names, Path(request["out_dir"]),
                bool(request.get("determinism")), reply, kernel_path)


def _run_trials(run: Any, trials: list[list[np.ndarray[Any, Any]]], names: list[str],
                out_dir: Path, determinism: bool, reply: dict[str, Any],
                kernel_path: str) -> None:
    for t, arrays in enumerate(trials):
        started = time.monotonic()
        try:
            outputs, modified = _call(run, arrays, names)
            if determinism and t == 0:
                again, _ = _call(run, arrays, names)
                reply["deterministic"] = _same(outputs, again)
        except BaseException as exc:  # a kernel's failure is a result, whatever it raised
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply["error"] = {**error_dict(exc, kernel_path), "trial": t}
            return
        saved = [save_array(out_dir / f"trial{t}_out{k}.npy", o) for k, o in enumerate(outputs)]
        reply["trials"].append({"outputs": saved, "inputs_modified": modified,
                                "seconds": time.monotonic() - started})


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
