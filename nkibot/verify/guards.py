"""Static rules on kernel source (libcst): what a kernel may import, name and touch.

A kernel may import only `nki`, `nki.*`, `numpy` and `math`. It may not reach files,
processes or the network, run code from strings, look things up dynamically, touch
dunder attributes, or rebind module state with `global` (module-level caches are how a
kernel would replay outputs between calls; the per-seed trials catch the rest).
Each finding is a reason string `static:<rule> <detail>` plus the line it is on.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

with warnings.catch_warnings():
    # libcst's metadata package imports mypy_extensions.TypedDict, which warns on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

# `nki` and its submodules; numpy and math themselves only (numpy.lib & co. reach files).
_ALLOWED_EXACT = frozenset({"numpy", "math", "__future__"})
_NAME_RULES: dict[str, str] = {
    **dict.fromkeys(("open", "io", "pathlib", "shutil", "pickle", "tempfile", "glob",
                     "fileinput", "marshal"), "file-access"),
    **dict.fromkeys(("os", "sys", "subprocess", "ctypes", "signal", "multiprocessing",
                     "threading", "exit", "quit"), "process-access"),
    **dict.fromkeys(("socket", "urllib", "http", "requests", "ssl"), "network-access"),
    **dict.fromkeys(("exec", "eval", "compile"), "exec"),
    **dict.fromkeys(("__import__", "importlib", "globals", "locals", "vars", "setattr",
                     "delattr", "breakpoint"), "dynamic-access"),
}
_NUMPY_IO = frozenset({"load", "save", "savez", "savez_compressed", "savetxt", "loadtxt",
                       "fromfile", "genfromtxt", "memmap", "fromregex", "DataSource",
                       "ctypeslib", "open_memmap"})
_ANY_IO_ATTRS = frozenset({"tofile", "ctypes", "dump", "dumps"})
_ALLOWED_DUNDER_NAMES = frozenset({"__name__"})


@dataclass(frozen=True)
class Finding:
    rule: str
    detail: str
    line: int | None

    @property
    def reason(self) -> str:
        return f"static:{self.rule} {self.detail}".rstrip()


def _dotted(node: cst.BaseExpression | cst.Name | cst.Attribute) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return "?"


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class _Checker(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.findings: list[Finding] = []
        self.numpy_aliases: set[str] = set()
        self._skip: set[int] = set()

    def _add(self, node: cst.CSTNode, rule: str, detail: str) -> None:
        line = self.get_metadata(PositionProvider, node).start.line
        self.findings.append(Finding(rule, detail, line))

    def _check_module(self, node: cst.CSTNode, name: str) -> bool:
        if name.split(".")[0] != "nki" and name not in _ALLOWED_EXACT:
            self._add(node, "import-not-allowed", name)
            return False
        return True

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            name = _dotted(alias.name)
            self._check_module(node, name)
            if name == "numpy":
                asname = alias.asname.name if alias.asname else None
                self.numpy_aliases.add(asname.value if isinstance(asname, cst.Name) else name)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None:
            self._add(node, "import-not-allowed", "relative import")
            return False
        module = _dotted(node.module)
        if self._check_module(node, module) and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                name = _dotted(alias.name)
                if name in _NAME_RULES or name in _NUMPY_IO or _dunder(name) or (
                        module == "numpy" and name in ("lib", "testing", "ctypeslib")):
                    self._add(node, "import-not-allowed", f"{module}.{name}")
        return False

    def visit_Global(self, node: cst.Global) -> None:
        self._add(node, "global-statement", ", ".join(n.name.value for n in node.names))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._skip.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip.add(id(node.name))

    def visit_Param(self, node: cst.Param) -> None:
        self._skip.add(id(node.name))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        attr = node.attr.value
        if _dunder(attr):
            self._add(node, "dunder-access", attr)
        elif attr in _ANY_IO_ATTRS:
            self._add(node, "file-access", f".{attr}")
        elif attr in _NUMPY_IO and _dotted(node.value).split(".")[0] in self.numpy_aliases:
            self._add(node, "file-access", f"{_dotted(node.value)}.{attr}")

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) in self._skip:
            return
        rule = _NAME_RULES.get(node.value)
        if rule is not None:
            self._add(node, rule, node.value)
        elif _dunder(node.value) and node.value not in _ALLOWED_DUNDER_NAMES:
            self._add(node, "dunder-access", node.value)

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Name) and node.func.value in ("getattr", "hasattr")):
            return
        target = node.args[1].value if len(node.args) > 1 else None
        if isinstance(target, cst.SimpleString):
            text = target.evaluated_value
            if isinstance(text, str) and _dunder(text):
                self._add(node, "dunder-access", f"{node.func.value}({text!r})")
        else:
            self._add(node, "dynamic-access", f"{node.func.value} with a computed name")


def static_findings(src: str) -> list[Finding]:
    """Every rule the source breaks, in source order (a syntax error is one finding)."""
    try:
        module = cst.parse_module(src)
    except cst.ParserSyntaxError as exc:
        return [Finding("syntax-error", f"line {exc.raw_line}: {exc.message}", exc.raw_line)]
    checker = _Checker()
    MetadataWrapper(module).visit(checker)
    return checker.findings


def static_check(src: str) -> list[str]:
    """Reason strings (deduplicated, in order) for every static rule the source breaks."""
    return list(dict.fromkeys(f.reason for f in static_findings(src)))


def jit_functions(src: str) -> list[str]:
    """Names of the top-level functions decorated with `@nki.jit` (or `@jit`, `@nki.jit(...)`)."""
    try:
        module = cst.parse_module(src)
    except cst.ParserSyntaxError:
        return []
    names = []
    for stmt in module.body:
        if not isinstance(stmt, cst.FunctionDef):
            continue
        for deco in stmt.decorators:
            target = deco.decorator.func if isinstance(deco.decorator, cst.Call) else (
                deco.decorator)
            if _dotted(target) in ("nki.jit", "jit"):
                names.append(stmt.name.value)
                break
    return names
