"""Import bookkeeping for the static rules: which local names are modules or members."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst

from nkibot.verify.allowlist import IMPORTABLE, MEMBERS


def dotted(node: cst.BaseExpression | cst.Name | cst.Attribute) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{dotted(node.value)}.{node.attr.value}"
    return "?"


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def chain(node: cst.Attribute) -> tuple[cst.Name | None, list[cst.Attribute]]:
    """The root Name of an attribute chain and its Attribute nodes, innermost first."""
    attrs: list[cst.Attribute] = []
    cur: cst.BaseExpression = node
    while isinstance(cur, cst.Attribute):
        attrs.append(cur)
        cur = cur.value
    return (cur if isinstance(cur, cst.Name) else None), attrs[::-1]


class Imports(cst.CSTVisitor):
    """Pre-pass: which local names are modules, which are members, bound by imports."""

    def __init__(self) -> None:
        super().__init__()
        self.modules: dict[str, str] = {}
        self.members: dict[str, tuple[str, str]] = {}
        self.clashes: set[str] = set()
        #: Names bound by refused imports: reported once, at the import.
        self.refused: set[str] = set()

    def _bind(self, name: str, module: str | None, member: tuple[str, str] | None) -> None:
        if (name in self.modules and self.modules[name] != module) or (
                name in self.members and self.members[name] != member):
            self.clashes.add(name)
        if module is not None:
            self.modules.setdefault(name, module)
        elif member is not None:
            self.members.setdefault(name, member)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local, module = alias.asname.name.value, full
            else:
                local, module = full.split(".")[0], full.split(".")[0]
            if full in IMPORTABLE:
                self._bind(local, module, None)
            else:
                self.refused.add(local)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is None or node.relative or isinstance(node.names, cst.ImportStar):
            return
        module = dotted(node.module)
        for alias in node.names:
            name = dotted(alias.name)
            local = (alias.asname.name.value if alias.asname is not None and isinstance(
                alias.asname.name, cst.Name) else name)
            sub = f"{module}.{name}"
            if module not in MEMBERS or name not in MEMBERS[module]:
                self.refused.add(local)
            elif sub in IMPORTABLE:
                self._bind(local, sub, None)
            else:
                self._bind(local, None, (module, name))
