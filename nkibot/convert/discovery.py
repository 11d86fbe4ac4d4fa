"""Find convertible things in a Python file and resolve `path::Name` (libcst, no imports).

Pure on source text: the user's code is parsed, never executed here. Finds `nn.Module`
subclasses with a `forward` (also subclasses of other such classes in the same file),
`@triton.jit` functions, KernelBench-style `get_inputs`/`get_init_inputs`, and kernels in
the legacy `neuronxcc.nki` dialect (reported, never run).
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

with warnings.catch_warnings():
    # libcst's metadata package imports mypy_extensions.TypedDict, which warns on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    from libcst.metadata import PositionProvider

from nkibot.config.targets import ShapeOverride

Kind = Literal["module", "triton", "legacy", "function", "class"]
_MODULE_BASES = frozenset({"nn.Module", "torch.nn.Module", "torch.nn.modules.module.Module"})


class TargetError(Exception):
    """A target that cannot be worked on; `message` and `hint` are shown to the user."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: Kind
    line: int


@dataclass
class Discovery:
    """What one file offers, in source order."""

    candidates: list[Candidate] = field(default_factory=list)
    has_get_inputs: bool = False
    has_get_init_inputs: bool = False
    legacy_dialect: bool = False

    def of_kind(self, *kinds: Kind) -> list[Candidate]:
        return [c for c in self.candidates if c.kind in kinds]

    @property
    def convertible(self) -> list[Candidate]:
        return self.of_kind("module", "triton")


def dotted(node: cst.BaseExpression) -> str:
    """`torch.nn.Module` -> "torch.nn.Module"; calls and other expressions -> ""."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    if isinstance(node, cst.Call):
        return dotted(node.func)
    return ""


def _imports(module: cst.Module) -> tuple[set[str], set[str], set[str]]:
    """Local names bound to triton.jit, to legacy neuronxcc.nki, and to torch's Module."""
    triton_jit, legacy, bases = {"triton.jit"}, set(), set(_MODULE_BASES)
    for node in _findall(module, lambda n: isinstance(n, cst.Import | cst.ImportFrom)):
        if isinstance(node, cst.Import):
            for alias in node.names:
                name = dotted(alias.name)
                local = dotted(alias.asname.name) if alias.asname else name
                if name.startswith("neuronxcc.nki"):
                    legacy.add(local)
                if name == "triton" and alias.asname:
                    triton_jit.add(f"{local}.jit")
                if name == "torch.nn" and alias.asname:
                    bases.add(f"{local}.Module")
        elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            source = dotted(node.module) if node.module else ""
            for alias in node.names:
                local = dotted(alias.asname.name) if alias.asname else dotted(alias.name)
                full = f"{source}.{dotted(alias.name)}"
                if full.startswith("neuronxcc.nki"):
                    legacy.add(local)
                if full == "triton.jit":
                    triton_jit.add(local)
                if full == "torch.nn":
                    bases.add(f"{local}.Module")
                if full == "torch.nn.Module":
                    bases.add(local)
    return triton_jit, legacy, bases


def _line(wrapper: cst.MetadataWrapper, node: cst.CSTNode) -> int:
    pos = wrapper.resolve(PositionProvider)[node]
    return int(pos.start.line)


def _defines_forward(cls: cst.ClassDef) -> bool:
    return any(isinstance(s, cst.FunctionDef) and s.name.value == "forward"
               for s in cls.body.body)


def _module_classes(classes: list[cst.ClassDef], module_bases: set[str]
                    ) -> list[cst.ClassDef]:
    """nn.Module subclasses with a forward (own or inherited from one in this file)."""
    modules: dict[str, bool] = {}  # name -> has forward
    changed = True
    while changed:  # fixed point: a subclass may come before its base in the file
        changed = False
        for cls in classes:
            if cls.name.value in modules:
                continue
            bases = [dotted(b.value) for b in cls.bases]
            local = [modules[b] for b in bases if b in modules]
            if any(b in module_bases for b in bases) or local:
                modules[cls.name.value] = _defines_forward(cls) or any(local)
                changed = True
    return [c for c in classes if modules.get(c.name.value)]


def discover(source: str) -> Discovery:
    """Parse `source`; raise TargetError when it is not valid Python."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise TargetError(f"the file does not parse as Python (line {exc.raw_line}): "
                          f"{exc.message}") from exc
    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    triton_jit, legacy, module_bases = _imports(module)
    found = Discovery(legacy_dialect=bool(legacy))
    top = module.body
    classes = [s for s in top if isinstance(s, cst.ClassDef)]
    modules = {c.name.value for c in _module_classes(classes, module_bases)}
    for stmt in top:
        if isinstance(stmt, cst.ClassDef):
            kind: Kind = "module" if stmt.name.value in modules else "class"
            found.candidates.append(Candidate(stmt.name.value, kind, _line(wrapper, stmt)))
        elif isinstance(stmt, cst.FunctionDef):
            name = stmt.name.value
            found.has_get_inputs |= name == "get_inputs"
            found.has_get_init_inputs |= name == "get_init_inputs"
            decorators = {dotted(d.decorator) for d in stmt.decorators}
            if decorators & triton_jit:
                kind = "triton"
            elif any(d.split(".")[0] in legacy for d in decorators):
                kind = "legacy"
            else:
                kind = "function"
            found.candidates.append(Candidate(name, kind, _line(wrapper, stmt)))
    return found


def _suggest(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    others = [n for n in names if n not in close]
    shown = close + others[: max(0, 5 - len(close))]
    return ("did you mean " + ", ".join(f"`{n}`" for n in shown) + "?") if shown else ""


def resolve(found: Discovery, path: str, name: str) -> Candidate:
    """The convertible candidate `name` in `path`, or TargetError with candidates."""
    matches = [c for c in found.candidates if c.name == name]
    options = [c.name for c in found.convertible]
    if len(matches) > 1:
        lines = ", ".join(str(c.line) for c in matches)
        raise TargetError(f"`{name}` is defined more than once in `{path}` (lines {lines})",
                          "rename one of them so the target is unambiguous")
    if not matches:
        hint = _suggest(name, options) or (
            f"`{path}` has no nn.Module with a forward and no @triton.jit function")
        raise TargetError(f"`{path}` has no `{name}`", hint)
    cand = matches[0]
    if cand.kind == "legacy":
        raise TargetError(
            f"`{name}` is a kernel in the legacy `neuronxcc.nki` dialect, which ended with "
            "Neuron 2.27; nkibot reports it but does not run it",
            "point nkibot at the PyTorch module it implements to get a kernel in the "
            "current `nki` dialect")
    if cand.kind in ("function", "class"):
        what = "a plain function" if cand.kind == "function" else "a class that is not an " \
            "nn.Module with a forward"
        raise TargetError(f"`{name}` in `{path}` is {what}",
                          "nkibot converts nn.Module classes and @triton.jit kernels; "
                          + (_suggest(name, options) or "this file has neither"))
    return cand


def suggest_paths(path: str, known: list[str]) -> str:
    """A "did you mean" line for a file that does not exist."""
    close = difflib.get_close_matches(path, known, n=3, cutoff=0.4)
    return ("did you mean " + ", ".join(f"`{p}`" for p in close) + "?") if close else ""


def choose_shapes(command: list[ShapeOverride], issue: list[ShapeOverride],
                  config: list[ShapeOverride]) -> tuple[list[ShapeOverride], str]:
    """Input specs by precedence: --shape > issue yaml > repo config > get_inputs()."""
    for shapes, origin in ((command, "--shape"), (issue, "issue"), (config, "repo config")):
        if shapes:
            return list(shapes), origin
    return [], "get_inputs()"


def _launches(node: cst.CSTNode, kernel_name: str) -> bool:
    """True when `node` contains `kernel_name[grid](...)`."""
    return bool(_findall(node, lambda n: isinstance(n, cst.Call)
                         and isinstance(n.func, cst.Subscript)
                         and isinstance(n.func.value, cst.Name)
                         and n.func.value.value == kernel_name))


class _Find(cst.CSTVisitor):
    def __init__(self, want: Callable[[cst.CSTNode], bool]) -> None:
        super().__init__()
        self.want, self.found = want, []  # type: Callable[[cst.CSTNode], bool], list[Any]

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.want(node):
            self.found.append(node)
        return True


def _findall(tree: cst.CSTNode, want: Callable[[cst.CSTNode], bool]) -> list[Any]:
    """Every node under `tree` (itself included) that `want` accepts, in source order:
    `libcst.matchers.findall` without importing the matchers (0.17 s of a convert's
    start-up, most of libcst's import)."""
    finder = _Find(want)
    tree.visit(finder)
    return finder.found


def _launcher_rank(name: str, kernel_name: str) -> int:
    """0 for a KernelBench-style name of the kernel's operation (`add`, `triton_add`), else 1."""
    op = kernel_name.removesuffix("_kernel").removeprefix("_").removeprefix("triton_")
    styled = {op, f"triton_{op}", f"{op}_triton", f"{op}_fwd", f"{op}_forward"}
    return 0 if name.lstrip("_") in styled else 1


def triton_launchers(source: str, kernel_name: str) -> list[str]:
    """Top-level plain functions that launch `kernel_name[grid](...)`, preferred first.

    A KernelBench-style name (the kernel's name without `_kernel`, optionally prefixed
    `triton_`) comes first; otherwise source order.
    """
    module = cst.parse_module(source)
    triton_jit = _imports(module)[0]
    found = [stmt.name.value for stmt in module.body
             if isinstance(stmt, cst.FunctionDef)
             and not {dotted(d.decorator) for d in stmt.decorators} & triton_jit
             and stmt.name.value not in ("get_inputs", "get_init_inputs")
             and _launches(stmt, kernel_name)]
    return sorted(found, key=lambda name: _launcher_rank(name, kernel_name))


def triton_launcher(source: str, kernel_name: str, path: str) -> str:
    """The launcher to run as the Triton kernel's reference, or TargetError saying what to add."""
    found = triton_launchers(source, kernel_name)
    if found:
        return found[0]
    raise TargetError(
        f"`{kernel_name}` in `{path}` is a @triton.jit kernel, and no function in that file "
        f"launches it (`{kernel_name}[grid](...)`)",
        "add a plain function that takes the input tensors, launches the kernel and returns "
        "its output, or " + _reference_yaml(f"{path}::{kernel_name}"))


def triton_reference(target: str, references: dict[str, str], *,
                     triton_installed: bool) -> str | None:
    """The PyTorch reference for a Triton target, None for Triton's interpreter, or raise."""
    if target in references:
        return references[target]
    if triton_installed:
        return None
    raise TargetError(
        f"`{target}` is a @triton.jit kernel, and this runner has no `triton` to run it on "
        "Triton's CPU interpreter",
        _reference_yaml(target))


def _reference_yaml(target: str) -> str:
    return ("name a PyTorch reference for it in `.github/nki-bot.yml`:\n\n```yaml\n"
            f"references:\n  {target}: path/to/reference.py::Module\n```")
