"""Shrink a KernelBench-format task's inputs to at most N elements each, in memory.

With `COUNT_WEIGHTS` the model's weights, all together, must fit N elements too (else
`OUTPUT_SHARE` times N); the forward's outputs, all together, must fit `OUTPUT_SHARE` times N,
and so must its largest intermediate tensor (a transposed conv reduced by pools to a small
output still makes the simulator write and read its whole output through HBM scratch).

KernelBench level-1 inputs reach billions of elements; the CPU simulator runs a few
million. `shrink_source` halves the file's top-level integer constants (`batch_size = 16`,
`input_shape = (4096,)`, `M = 1024 * 2`), the largest one that makes an input smaller
first, until every tensor `get_inputs()` returns has at most `max_elements` elements. The
task file on disk is never edited: the bench converts a shrunk copy in a scratch folder.

Sizes are measured by running `get_inputs()` and the forward under `torch.device("meta")`,
so nothing is allocated. This executes the task file in the bench's own process: point it only at
benchmark folders you trust (KernelBench, bench/tasks).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any

Const = int | tuple[int, ...] | list[int]


@dataclass
class Shrunk:
    """The shrunk source, what changed (name -> (old, new)), and whether it now fits."""

    source: str
    changed: dict[str, tuple[Const, Const]] = field(default_factory=dict)
    fits: bool = True
    largest: int = 0  # elements of the largest input (or weights, or outputs / OUTPUT_SHARE)


def _derived(value: ast.expr) -> bool:
    """Whether a constant's expression names another constant (`input_shape = (n,)`).

    A derived constant is re-evaluated from what it names, never halved itself: halving
    `input_shape` alone would shrink the logits' class dim and leave `num_classes` (the
    targets' range) as it was, so the shrunk task would index past its classes.
    """
    return any(isinstance(node, ast.Name) for node in ast.walk(value))


def _constants(tree: ast.Module, namespace: dict[str, Any]) -> dict[str, Const]:
    found: dict[str, Const] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name) and not _derived(stmt.value):
            value = namespace.get(stmt.targets[0].id)
            if isinstance(value, int) and not isinstance(value, bool):
                found[stmt.targets[0].id] = value
            elif isinstance(value, tuple | list) and value and all(
                    isinstance(v, int) and not isinstance(v, bool) for v in value):
                # a list stays a list (level 3's `layer_sizes = [400, 800]` is concatenated)
                found[stmt.targets[0].id] = tuple(value) if isinstance(value, tuple) else list(
                    value)
    return found


def _render(tree: ast.Module, values: dict[str, Const]) -> str:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], ast.Name) and stmt.targets[0].id in values:
            stmt.value = ast.parse(repr(values[stmt.targets[0].id]), mode="eval").body
    return ast.unparse(tree) + "\n"


#: Also count the model's parameters and buffers, all together, as one more "input" (set
#: by `convert_suite.py --count-weights`): KernelBench level 3 networks' weights, not their
#: inputs, are what fill the simulator.
COUNT_WEIGHTS = False
ENTRY = "Model"
#: The forward's outputs count too, all together, divided by this: with inputs of at most
#: 4M elements, the outputs may take 64M (256 MiB in fp32, half the simulator's 512 MiB
#: budget). A transposed conv's output is many times its input (KernelBench level 2 100:
#: 4M input elements become 434M output elements, 1.6 GiB), and inputs alone left it too
#: big to simulate. A forward that fails on the meta device counts no outputs. Without
#: COUNT_WEIGHTS the weights, all together, get the same share (level 2 55's 32768 x 32768
#: Linear, 4 GiB, is over the sandbox's file-size limit).
OUTPUT_SHARE = 16


def _sizes(source: str) -> tuple[list[int], dict[str, Any]]:
    import torch

    namespace: dict[str, Any] = {"__name__": "nkibot_shrink"}
    with torch.device("meta"):
        exec(compile(source, "<shrink>", "exec"), namespace)
        get_inputs = namespace.get("get_inputs")
        values = list(get_inputs()) if callable(get_inputs) else []
        sizes = [math.prod(v.shape) for v in values if isinstance(v, torch.Tensor)]
        if sizes and callable(namespace.get(ENTRY)):
            get_init = namespace.get("get_init_inputs")
            model = _build(namespace[ENTRY], list(get_init() if callable(get_init) else []))
            if isinstance(model, torch.nn.Module):
                weights = sum(math.prod(t.shape) for t in model.state_dict().values())
                sizes.append(weights if COUNT_WEIGHTS else -(-weights // OUTPUT_SHARE))
            sizes.append(-(-_output_elements(model, values) // OUTPUT_SHARE))
    return sizes, namespace


def _output_elements(model: Any, values: list[Any]) -> int:
    """Elements of every tensor the forward returns, or of the largest tensor any operator
    inside it makes if that is more; run on the meta device (0 when the forward cannot run
    there)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    largest = [0]

    class Largest(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            for t in result if isinstance(result, tuple | list) else [result]:
                if isinstance(t, torch.Tensor):
                    largest[0] = max(largest[0], t.numel())
            return result

    try:
        with torch.no_grad(), Largest():  # type: ignore[no-untyped-call]
            out = model(*values)
    except Exception:
        return 0
    outs = list(out) if isinstance(out, tuple | list) else [out]
    return max(largest[0], sum(math.prod(t.shape) for t in outs if isinstance(t, torch.Tensor)))


def _halve(value: Const, index: int) -> Const:
    if isinstance(value, int):
        return max(1, (value + 1) // 2)
    items = list(value)
    items[index] = max(1, (items[index] + 1) // 2)
    return items if isinstance(value, list) else tuple(items)


def _slots(values: dict[str, Const]) -> list[tuple[int, str, int]]:
    """(current size, name, tuple index) for every shrinkable integer, largest first."""
    slots = []
    for name, value in values.items():
        items = [value] if isinstance(value, int) else list(value)
        slots += [(v, name, i) for i, v in enumerate(items) if v > 1]
    return sorted(slots, reverse=True)


def shrink_source(source: str, max_elements: int, max_steps: int = 64) -> Shrunk:
    """Halve constants until every input has at most `max_elements` elements, and the outputs
    at most `max_elements * OUTPUT_SHARE` (see module doc)."""
    sizes, namespace = _sizes(source)
    if not sizes or max(sizes) <= max_elements:
        return Shrunk(source, largest=max(sizes, default=0))
    tree = ast.parse(source)
    original = _constants(tree, namespace)
    values = dict(original)
    current = max(sizes)
    for _ in range(max_steps):
        if current <= max_elements:
            break
        for _size, name, index in _slots(values):
            trial = {**values, name: _halve(values[name], index)}
            try:
                trial_sizes, _ = _sizes(_render(ast.parse(source), trial))
            except Exception:
                continue
            if trial_sizes and max(trial_sizes) < current:
                values, current = trial, max(trial_sizes)
                break
        else:
            break
    changed = {k: (original[k], v) for k, v in values.items() if v != original[k]}
    return Shrunk(_render(ast.parse(source), values), changed, current <= max_elements, current)


def _meta_model(source: str, entry: str) -> tuple[Any, list[Any], list[Any]]:
    """(module, forward inputs, init args) built from `source` on the meta device."""
    import torch

    _, namespace = _sizes(source)
    with torch.device("meta"):
        get_init = namespace.get("get_init_inputs")
        init = list(get_init()) if callable(get_init) else []
        return _build(namespace[entry], init), list(namespace["get_inputs"]()), init


def _build(cls: Any, init: list[Any]) -> Any:
    """`cls(*init)` on the meta device; a constructor that reads a tensor's value (Swin's
    `[x.item() for x in torch.linspace(...)]`) is built on the CPU, then moved to meta."""
    import torch

    try:
        with torch.device("meta"):
            return cls(*init)
    except RuntimeError as exc:
        if "meta tensors" not in str(exc):
            raise
    with torch.device("cpu"):
        model = cls(*init)
    return model.to("meta") if isinstance(model, torch.nn.Module) else model


def minimum_bytes(source: str, entry: str = "Model") -> int:
    """Bytes any kernel must move: every input, parameter and output once (meta run)."""
    import torch

    model, values, _ = _meta_model(source, entry)
    out = model(*values)
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    tensors += list(model.state_dict().values()) if isinstance(model, torch.nn.Module) else []
    tensors += list(out) if isinstance(out, tuple | list) else [out]
    return sum(math.prod(t.shape) * min(t.element_size(), 4) for t in tensors
               if isinstance(t, torch.Tensor))


def operator_flops(source: str, entry: str = "Model") -> float:
    """The forward's FLOPs by PyTorch's FlopCounterMode, on the meta device (nothing runs
    at size): what the cost model's roofline counts for the operator."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model, values, _ = _meta_model(source, entry)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(*values)
    return float(counter.get_total_flops())


def meta_task(source: str, path: str, entry: str = "Model") -> Any:
    """A Task for `source` built in this process from get_inputs() under the meta device.

    Mirrors what `load_task` learns in the sandbox (inputs, Python scalars as constants,
    init args, state_dict), without running anything at full size: for `--lower-only`.
    """
    import torch

    from nkibot.task import InputSpec, Task

    model, values, init = _meta_model(source, entry)
    names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
             torch.int64: "int64", torch.int32: "int32", torch.bool: "bool",
             torch.float64: "float32"}
    specs = [InputSpec(name=f"in{i}", shape=(), dtype="float32", value=v)
             if not isinstance(v, torch.Tensor) else
             InputSpec(name=f"in{i}", shape=tuple(v.shape), dtype=names.get(v.dtype, "float32"))
             for i, v in enumerate(values)]
    state = [InputSpec(name=k, shape=tuple(v.shape), dtype=names.get(v.dtype, "float32"))
             for k, v in model.state_dict().items()]
    return Task(reference_source=source, entry_point=entry, source_path=path, init_args=init,
                inputs=specs, has_get_inputs=True, state_dict=state)
