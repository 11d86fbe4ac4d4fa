"""What each static rule tells the model to do instead, and what counts as a constant.

A constant is what may sit at module level, in a class body or as a default argument:
numbers, strings, None/True/False, names and attribute chains (their own rules check
them), arithmetic and tuples of constants, and calls of pure scalar functions (`math.*`,
`int`, `float`, ...) on constants. Lists, dicts, sets, comprehensions and every other
call are state: evaluated once, shared by every later call of the kernel.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst

_IMPORTS = ("import only nki, nki.language (as nl), nki.isa (as nisa), nki.typing, numpy "
            "(as np) and math; torch and every other module are unavailable to kernels")
_IO = ("take data only from the kernel's arguments and return results in nl.shared_hbm "
       "tensors it allocates")

#: rule -> what to use instead (the model reads these as feedback).
FIXES: dict[str, str] = {
    "import-not-allowed": _IMPORTS,
    "import-star": "import the module and name its members, e.g. `import nki.language as nl`"
                   " then nl.exp",
    "file-access": f"kernels cannot read or write files: {_IO}",
    "process-access": f"kernels cannot touch processes or the OS: {_IO}",
    "network-access": f"kernels cannot use the network: {_IO}",
    "exec": "write the code directly; exec, eval and compile are refused",
    "dynamic-access": "name attributes directly (nl.exp, x.shape); getattr, setattr, "
                      "hasattr, vars, type, dir and str.format are refused",
    "dunder-access": "dunder names are refused (only __name__ in the main guard and a "
                     "class's __init__/__post_init__)",
    "underscore-attribute": "attributes starting with _ are private: use the public nki API "
                            "(x.shape, x.dtype, nl.load); a tensor's values are reached only "
                            "through nl/nisa operations",
    "introspection": "frames, code objects and generator internals are refused",
    "module-as-value": "use a module's members directly (np.float32, nl.exp); never assign, "
                       "pass, return or compare a module itself",
    "module-rebound": "keep each imported module's name for that module alone: do not assign"
                      " to it, take it as a parameter or import something else under it",
    "numpy-name": "numpy supplies only dtypes, constants and ufuncs as values (np.float32, "
                  "np.add, np.pi); compute on tiles with nl/nisa operations (nl.exp, "
                  "nisa.tensor_reduce), never with NumPy arrays, np.random or submodules",
    "math-name": "math supplies pure scalar functions and constants (math.sqrt, math.pi)",
    "nki-name": "that name is not in the public nki API: lookup_nki the operation you need",
    "builtin-not-allowed": "only pure builtins are available (range, len, min, max, int, "
                           "float, tuple, list, dict, enumerate, zip, print, ...)",
    "class-not-allowed": "a class must inherit from nl.NKIObject alone (optionally "
                         "@dataclass) and hold only constants and methods",
    "decorator-not-allowed": "only @nki.jit (on functions) and @dataclass (on nl.NKIObject "
                             "classes) are allowed",
    "mutable-default": "defaults must be constants (numbers, strings, None, tuples, "
                       "nl.float32): build lists, dicts and tiles inside the function so "
                       "nothing survives between calls",
    "module-state": "module level holds only imports, functions, nl.NKIObject classes and "
                    "constants: create everything else inside the kernel, every call",
    "attribute-assignment": "do not assign attributes or items on modules, functions, "
                            "classes or module-level values: keep state in local variables",
    "global-statement": "do not rebind module-level names: pass values in and return them",
}


def main_guard(stmt: cst.If) -> bool:
    """Whether `stmt` is `if __name__ == "__main__":` (a script's test driver)."""
    test = stmt.test
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    right = test.comparisons[0].comparator
    return (isinstance(test.left, cst.Name) and test.left.value == "__name__"
            and isinstance(test.comparisons[0].operator, cst.Equal)
            and isinstance(right, cst.SimpleString) and right.evaluated_value == "__main__")


def constant(node: cst.BaseExpression, pure_call: Callable[[cst.Call], bool]) -> bool:
    """Whether `node` evaluates to an immutable value with no effects (module docstring)."""
    def c(n: cst.BaseExpression) -> bool:
        return constant(n, pure_call)

    if isinstance(node, cst.Integer | cst.Float | cst.Imaginary | cst.SimpleString
                  | cst.ConcatenatedString | cst.Ellipsis | cst.Name | cst.Lambda):
        return True
    if isinstance(node, cst.Attribute):
        return c(node.value)
    if isinstance(node, cst.UnaryOperation):
        return c(node.expression)
    if isinstance(node, cst.BinaryOperation | cst.BooleanOperation):
        return c(node.left) and c(node.right)
    if isinstance(node, cst.Comparison):
        return c(node.left) and all(c(t.comparator) for t in node.comparisons)
    if isinstance(node, cst.IfExp):
        return c(node.test) and c(node.body) and c(node.orelse)
    if isinstance(node, cst.Tuple):
        return all(c(e.value) for e in node.elements)
    if isinstance(node, cst.FormattedString):
        return all(c(p.expression) for p in node.parts
                   if isinstance(p, cst.FormattedStringExpression))
    if isinstance(node, cst.Subscript):
        return c(node.value) and all(
            c(s.slice.value) for s in node.slice if isinstance(s.slice, cst.Index))
    if isinstance(node, cst.Call):
        return pure_call(node) and all(c(a.value) for a in node.args)
    return False


Problem = tuple[cst.CSTNode, str, str]
_DOCS = (cst.SimpleString, cst.ConcatenatedString)


def module_problems(stmt: cst.BaseStatement,
                    is_constant: Callable[[cst.BaseExpression], bool]) -> list[Problem]:
    """What is wrong with one top-level statement: anything but imports, definitions,
    constants and the main guard is state created at import and shared by every call."""
    if isinstance(stmt, cst.FunctionDef | cst.ClassDef):
        return []
    if isinstance(stmt, cst.If) and main_guard(stmt):
        return []  # runs only as a script, never under the verifier; other rules apply
    if not isinstance(stmt, cst.SimpleStatementLine):
        return [(stmt, "module-state", f"module-level {type(stmt).__name__.lower()}")]
    problems: list[Problem] = []
    for small in stmt.body:
        if isinstance(small, cst.Import | cst.ImportFrom | cst.Pass) or (
                isinstance(small, cst.Expr) and isinstance(small.value, (*_DOCS, cst.Ellipsis))):
            continue
        assigns = isinstance(small, cst.Assign | cst.AnnAssign | cst.AugAssign)
        value = getattr(small, "value", None)
        if assigns and (value is None or is_constant(value)):
            continue
        if isinstance(small, cst.Assert) and is_constant(small.test):
            continue
        what = "value" if assigns else "code"
        problems.append((small, "module-state", f"module-level {what} that is not a constant"))
    return problems


def class_problems(node: cst.ClassDef,
                   is_constant: Callable[[cst.BaseExpression], bool]) -> list[Problem]:
    """A class body may hold only a docstring, constants and methods (no shared state)."""
    problems: list[Problem] = []
    for stmt in node.body.body:
        if isinstance(stmt, cst.FunctionDef):
            continue
        ok = isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, cst.Pass) or (isinstance(s, cst.Expr) and isinstance(s.value, _DOCS))
            or (isinstance(s, cst.Assign | cst.AnnAssign) and (
                s.value is None or is_constant(s.value))) for s in stmt.body)
        if not ok:
            problems.append((stmt, "class-not-allowed",
                             "class body holds only constants and methods"))
    return problems
