"""The libcst visitor behind `nkibot.verify.guards`: every static rule, with its fix.

Module names are tracked through every alias (`import numpy as q` makes `q` numpy), and
an alias may never be re-bound or used as a value, so an attribute chain rooted at an
alias always names a module member, which is checked against `allowlist.MEMBERS`.
Builtins are resolved with libcst's scope analysis, so a parameter called `input` is
the parameter, while an unbound `open` is the builtin.
"""

from __future__ import annotations

import re
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    from libcst.metadata import (
        BuiltinAssignment,
        GlobalScope,
        ParentNodeProvider,
        PositionProvider,
        Scope,
        ScopeProvider,
    )

from nkibot.verify.allowlist import (
    BUILTINS,
    DUNDER_METHODS,
    DUNDER_NAMES,
    FORBIDDEN_ATTRS,
    FORBIDDEN_NAMES,
    IMPORT_RULES,
    IMPORTABLE,
    MEMBERS,
)
from nkibot.verify.guard_imports import Imports, chain, dotted, is_dunder
from nkibot.verify.module_rules import FIXES, class_problems, constant, module_problems

_MEMBER_RULE = {"numpy": "numpy-name", "math": "math-name"}
_DUNDER_TEXT = re.compile(r"__\w+__")
_NP_PURE = frozenset({"finfo", "iinfo", "dtype"})
_PURE_CALLS = frozenset({"int", "float", "bool", "str", "abs", "min", "max", "round", "len",
                         "frozenset", "tuple", "complex", "pow", "divmod", "range"})


class Checker(cst.CSTVisitor):
    """Collects `(rule, detail, line, fix)` for every rule the module breaks."""

    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider, ParentNodeProvider)

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, int | None, str]] = []
        self.imports = Imports()
        self._handled: set[int] = set()
        self._builtin: set[int] = set()
        self._global: set[int] = set()
        self._class_depth = 0

    # -- helpers ----------------------------------------------------------------------
    def add(self, node: cst.CSTNode, rule: str, detail: str) -> None:
        line = self.get_metadata(PositionProvider, node).start.line
        self.found.append((rule, detail, line, FIXES.get(rule, "")))

    def _module_of(self, node: cst.BaseExpression) -> str | None:
        return self.imports.modules.get(node.value) if isinstance(node, cst.Name) else None

    def resolves_to(self, node: cst.BaseExpression, module: str, member: str) -> bool:
        """Whether `node` names `module.member` (through an alias or a from-import)."""
        if isinstance(node, cst.Name):
            return self.imports.members.get(node.value) == (module, member)
        if isinstance(node, cst.Attribute):
            return node.attr.value == member and self._module_of(node.value) == module
        return False

    def pure_call(self, node: cst.Call) -> bool:
        func = node.func
        if isinstance(func, cst.Name) and func.value in _PURE_CALLS:
            return id(func) in self._builtin
        if isinstance(func, cst.Attribute):
            module = self._module_of(func.value)
            return module == "math" or (module == "numpy" and func.attr.value in _NP_PURE)
        member = self.imports.members.get(func.value) if isinstance(func, cst.Name) else None
        return member is not None and (member[0] == "math" or (
            member[0] == "numpy" and member[1] in _NP_PURE))

    def _is_constant(self, node: cst.BaseExpression) -> bool:
        return constant(node, self.pure_call)

    # -- whole-module passes ----------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        node.visit(self.imports)
        scopes = {s for s in self.metadata[ScopeProvider].values() if isinstance(s, Scope)}
        for scope in scopes:
            for access in scope.accesses:
                if any(isinstance(r, BuiltinAssignment) for r in access.referents):
                    self._builtin.add(id(access.node))
                if any(isinstance(r.scope, GlobalScope | type(None)) or isinstance(
                        r, BuiltinAssignment) for r in access.referents):
                    self._global.add(id(access.node))
            for assignment in scope.assignments:
                self._check_binding(assignment)
        for name in sorted(self.imports.clashes):
            self.found.append(("module-rebound", name, None, FIXES["module-rebound"]))
        for stmt in node.body:
            for where, rule, detail in module_problems(stmt, self._is_constant):
                self.add(where, rule, detail)

    def _check_binding(self, assignment: object) -> None:
        name = getattr(assignment, "name", "")
        target = getattr(assignment, "node", None)
        if not isinstance(target, cst.CSTNode) or isinstance(
                target, cst.Import | cst.ImportFrom):
            return
        if name in self.imports.modules:
            self.add(target, "module-rebound", name)
        elif is_dunder(name) and not (isinstance(target, cst.FunctionDef)
                                    and name in DUNDER_METHODS):
            self.add(target, "dunder-access", f"{name} assigned")

    # -- imports ----------------------------------------------------------------------
    def _refuse_module(self, node: cst.CSTNode, name: str) -> None:
        rule = IMPORT_RULES.get(name.split(".")[0], "import-not-allowed")
        self.add(node, rule, name if rule == "import-not-allowed" else f"import {name}")

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            name = dotted(alias.name)
            if name not in IMPORTABLE:
                self._refuse_module(node, name)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if node.relative or node.module is None:
            self.add(node, "import-not-allowed", "relative import")
            return False
        module = dotted(node.module)
        if module not in MEMBERS:
            self._refuse_module(node, module)
        elif isinstance(node.names, cst.ImportStar):
            self.add(node, "import-star", f"from {module} import *")
        else:
            for alias in node.names:
                name = dotted(alias.name)
                if name not in MEMBERS[module]:
                    self.add(node, _MEMBER_RULE.get(module, "import-not-allowed" if module in
                             ("dataclasses", "__future__") else "nki-name"),
                             f"{module}.{name}")
        return False

    # -- names and attributes ---------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._handled.add(id(node.attr))
        attr = node.attr.value
        if is_dunder(attr):
            self.add(node, "dunder-access", attr)
        elif attr.startswith("_"):
            self.add(node, "underscore-attribute", f".{attr}")
        elif attr in FORBIDDEN_ATTRS:
            self.add(node, FORBIDDEN_ATTRS[attr], f".{attr}")
        if id(node) not in self._handled:
            self._module_chain(node)

    def _module_chain(self, node: cst.Attribute) -> None:
        root, attrs = chain(node)
        module = self._module_of(root) if root is not None else None
        if root is not None and module is None and root.value in self.imports.refused:
            self._handled.update({id(root), *(id(a) for a in attrs)})
        if root is None or module is None:
            return
        self._handled.update({id(root), *(id(a) for a in attrs)})
        for i, attr in enumerate(attrs):
            name = attr.attr.value
            if name.startswith("_"):
                return  # reported as an underscore attribute
            if name not in MEMBERS.get(module, frozenset()):
                self.add(attr, _MEMBER_RULE.get(module, "nki-name"), dotted(attr))
                return
            if f"{module}.{name}" in IMPORTABLE:
                module = f"{module}.{name}"
                continue
            if module == "numpy" and i + 1 < len(attrs):
                self.add(attrs[i + 1], "numpy-name", dotted(attrs[i + 1]))
            return
        self.add(node, "module-as-value", dotted(node))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) in self._handled:
            return
        name = node.value
        if name in self.imports.refused and name not in self.imports.modules:
            return  # reported at its import
        if name in FORBIDDEN_NAMES:
            self.add(node, FORBIDDEN_NAMES[name], name)
        elif name in self.imports.modules:
            self.add(node, "module-as-value", name)
        elif is_dunder(name) and name not in DUNDER_NAMES:
            self.add(node, "dunder-access", name)
        elif id(node) in self._builtin and name not in BUILTINS | DUNDER_NAMES:
            self.add(node, "builtin-not-allowed", name)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._handled.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self._handled.add(id(node.name))
        if node.name.value in self.imports.modules:
            return  # reported as module-rebound
        if node.name.value in FORBIDDEN_NAMES:
            self.add(node, FORBIDDEN_NAMES[node.name.value], node.name.value)
        if node.default is not None and not self._is_constant(node.default):
            self.add(node, "mutable-default", f"{node.name.value}=...")

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        parent = self.get_metadata(ParentNodeProvider, node)
        if isinstance(parent, cst.Expr):
            return  # a docstring
        text = node.evaluated_value
        hits = _DUNDER_TEXT.findall(text) if isinstance(text, str) else []
        hits = [h for h in hits if h != "__main__"]
        if hits:
            self.add(node, "dunder-access", f"{hits[0]!r} in a string")

    def visit_Global(self, node: cst.Global) -> None:
        self.add(node, "global-statement", ", ".join(n.name.value for n in node.names))

    # -- definitions ------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._handled.add(id(node.name))
        name = node.name.value
        if is_dunder(name) and not (self._class_depth and name in DUNDER_METHODS):
            self.add(node, "dunder-access", f"def {name}")
        if name in FORBIDDEN_NAMES:
            self.add(node, FORBIDDEN_NAMES[name], f"def {name}")
        for deco in node.decorators:
            target = deco.decorator.func if isinstance(deco.decorator, cst.Call) else (
                deco.decorator)
            if not self.resolves_to(target, "nki", "jit"):
                self.add(deco, "decorator-not-allowed", f"@{dotted(target)}")

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._handled.add(id(node.name))
        self._class_depth += 1
        bases = [a.value for a in node.bases]
        if node.keywords or len(bases) != 1 or not self.resolves_to(
                bases[0], "nki.language", "NKIObject"):
            self.add(node, "class-not-allowed", f"class {node.name.value}")
        for deco in node.decorators:
            if not self.resolves_to(deco.decorator, "dataclasses", "dataclass"):
                self.add(deco, "decorator-not-allowed", f"@{dotted(deco.decorator)}")
        for where, rule, detail in class_problems(node, self._is_constant):
            self.add(where, rule, detail)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._class_depth -= 1

    # -- state through assignment -----------------------------------------------------
    def _targets(self, node: cst.BaseExpression) -> list[cst.BaseExpression]:
        if isinstance(node, cst.Tuple | cst.List):
            return [t for e in node.elements for t in self._targets(e.value)]
        return [node]

    def _check_target(self, node: cst.BaseExpression) -> None:
        for target in self._targets(node):
            if not isinstance(target, cst.Attribute | cst.Subscript):
                continue
            root: cst.BaseExpression = target
            while isinstance(root, cst.Attribute | cst.Subscript):
                root = root.value
            if isinstance(root, cst.Name) and (
                    root.value in self.imports.modules or id(root) in self._global):
                self.add(target, "attribute-assignment",
                         f"{root.value}{'.' if isinstance(target, cst.Attribute) else '['}…")

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._check_target(t.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._check_target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._check_target(node.target)

    def visit_Del(self, node: cst.Del) -> None:
        self._check_target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._check_target(node.target)
