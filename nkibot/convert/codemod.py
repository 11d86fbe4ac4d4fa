"""`integrate: dispatch`: route a module's `forward` to its NKI kernel on a Neuron device.

A libcst codemod of the user's module. The original `forward` is kept, renamed
`_nkibot_forward_torch`, and stays the path everywhere but a Neuron (XLA) device. A new
`forward` with the same parameters checks where its tensor inputs live and calls the
kernel there, with the module's state_dict tensors appended (the calling convention).
The kernel is imported lazily by file path, so hosts without the Neuron SDK never touch it.
"""

from __future__ import annotations

import warnings
from pathlib import PurePosixPath

with warnings.catch_warnings():
    # libcst's metadata package imports mypy_extensions.TypedDict, which warns on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst

TORCH_FORWARD = "_nkibot_forward_torch"

_HELPERS = '''

def _nkibot_on_neuron(tensors):
    """True when every tensor input lives on a Neuron (XLA) device (added by nkibot)."""
    return bool(tensors) and all(
        getattr(getattr(t, "device", None), "type", None) in ("xla", "neuron") for t in tensors
    )


def _nkibot_call_kernel(module, tensors):
    """Run the verified NKI kernel: inputs, then state_dict tensors (added by nkibot)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent / {kernel_rel!r}
    spec = importlib.util.spec_from_file_location("_nkibot_kernel_{slug}", path)
    kernel_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel_module)
    state = module.state_dict()
    keys = {keys!r}
    return getattr(kernel_module, {function!r})(*tensors, *(state[k] for k in keys))
'''


class CodemodError(ValueError):
    """The module cannot be integrated automatically; the message says why."""


def _forward_of(cls: cst.ClassDef) -> cst.FunctionDef | None:
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "forward":
            return stmt
    return None


def _dispatcher(forward: cst.FunctionDef, n_inputs: int) -> cst.FunctionDef:
    """A new `forward` with the original parameters that picks the kernel or PyTorch."""
    params = forward.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)][1:]
    if len(positional) < n_inputs:
        raise CodemodError(f"forward takes {len(positional)} positional inputs, the kernel "
                           f"expects {n_inputs}")
    call = [*positional]
    if isinstance(params.star_arg, cst.Param):
        call.append(f"*{params.star_arg.name.value}")
    call += [f"{p.name.value}={p.name.value}" for p in params.kwonly_params]
    if params.star_kwarg is not None:
        call.append(f"**{params.star_kwarg.name.value}")
    tensors = ", ".join(positional[:n_inputs]) + ("," if n_inputs == 1 else "")
    template = (
        "def forward(self):\n"
        "    # nkibot: the verified NKI kernel on a Neuron device, PyTorch elsewhere.\n"
        f"    if _nkibot_on_neuron(({tensors})):\n"
        f"        return _nkibot_call_kernel(self, ({tensors}))\n"
        f"    return self.{TORCH_FORWARD}({', '.join(call)})\n"
    )
    made = cst.parse_statement(template)
    assert isinstance(made, cst.FunctionDef)
    return made.with_changes(params=params, returns=forward.returns,
                             decorators=forward.decorators)


class _Integrate(cst.CSTTransformer):
    def __init__(self, class_name: str, n_inputs: int) -> None:
        self.class_name, self.n_inputs = class_name, n_inputs
        self.done = False

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        if updated.name.value != self.class_name:
            return updated
        forward = _forward_of(updated)
        if forward is None:
            raise CodemodError(f"`{self.class_name}` defines no forward of its own")
        body: list[cst.BaseStatement | cst.BaseSmallStatement] = []
        for stmt in updated.body.body:
            if stmt is forward:
                body.append(_dispatcher(forward, self.n_inputs).with_changes(
                    leading_lines=forward.leading_lines))
                body.append(forward.with_changes(name=cst.Name(TORCH_FORWARD),
                                                 leading_lines=[cst.EmptyLine()]))
            else:
                body.append(stmt)
        self.done = True
        return updated.with_changes(body=updated.body.with_changes(body=body))


def already_integrated(source: str) -> bool:
    return TORCH_FORWARD in source and "_nkibot_call_kernel" in source


def integrate_dispatch(source: str, *, class_name: str, module_path: str, kernel_path: str,
                       function: str, n_inputs: int, state_keys: list[str]) -> str:
    """The module source with `class_name.forward` dispatching to the kernel (see above)."""
    if already_integrated(source):
        return source
    module = cst.parse_module(source)
    transform = _Integrate(class_name, n_inputs)
    changed = module.visit(transform)
    if not transform.done:
        raise CodemodError(f"no top-level class `{class_name}` in `{module_path}`")
    module_dir = PurePosixPath(module_path).parent
    depth = len(module_dir.parts)
    kernel_rel = str(PurePosixPath(*([".."] * depth), kernel_path)) if depth else kernel_path
    slug = "".join(ch if ch.isalnum() else "_" for ch in function)
    helpers = _HELPERS.format(kernel_rel=kernel_rel, keys=list(state_keys), function=function,
                              slug=slug)
    return changed.code.rstrip("\n") + "\n" + helpers
