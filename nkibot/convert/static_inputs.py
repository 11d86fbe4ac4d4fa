"""Input shapes read from a KernelBench-style `get_inputs()` without running it.

`return [torch.randn(B, D), torch.rand(4, 128, dtype=torch.bfloat16)]` with literal
dims or module-level integer constants is read as shapes; anything else (computed
sizes, helper calls) is left to the sandboxed harness, which runs `get_inputs()`.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import libcst as cst
    import libcst.matchers as m

from nkibot.convert.discovery import dotted

_MAKERS = frozenset({"randn", "rand", "ones", "zeros", "empty", "full", "randint"})
_DTYPES = {"float": "float32", "float32": "float32", "half": "float16", "float16": "float16",
           "bfloat16": "bfloat16", "int32": "int32", "int64": "int64", "int": "int32",
           "long": "int64", "bool": "bool", "int8": "int8", "uint8": "uint8"}


def int_constants(module: cst.Module) -> dict[str, int]:
    """Module-level `NAME = <int>` assignments (KernelBench puts sizes there)."""
    found: dict[str, int] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if (isinstance(small, cst.Assign) and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and isinstance(small.value, cst.Integer)):
                found[small.targets[0].target.value] = int(small.value.evaluated_value)
    return found


def _dim(node: cst.BaseExpression, consts: dict[str, int]) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.Name):
        return consts.get(node.value)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        left, right = _dim(node.left, consts), _dim(node.right, consts)
        return left * right if left is not None and right is not None else None
    return None


def _tensor_spec(node: cst.BaseExpression, consts: dict[str, int]
                 ) -> tuple[tuple[int, ...], str] | None:
    if not isinstance(node, cst.Call) or dotted(node.func).rsplit(".", 1)[-1] not in _MAKERS:
        return None
    positional = [a.value for a in node.args if a.keyword is None]
    maker = dotted(node.func).rsplit(".", 1)[-1]
    if maker == "randint":  # randint(low, high, size)
        positional = positional[-1:]
    if maker == "full":
        positional = positional[:1]
    if len(positional) == 1 and isinstance(positional[0], cst.Tuple | cst.List):
        positional = [el.value for el in positional[0].elements]
    dims = [_dim(p, consts) for p in positional]
    if not dims or any(d is None or d <= 0 for d in dims):
        return None
    dtype = "int64" if maker == "randint" else "float32"
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == "dtype":
            dtype = _DTYPES.get(dotted(arg.value).rsplit(".", 1)[-1], "")
    if not dtype:
        return None
    return tuple(d for d in dims if d is not None), dtype


def static_inputs(module: cst.Module, names: list[str]) -> tuple[str, ...] | None:
    """`NAME=DIMSxDTYPE` per input of `get_inputs()`, or None when it is not a plain list."""
    fn = next((s for s in module.body if isinstance(s, cst.FunctionDef)
               and s.name.value == "get_inputs"), None)
    if fn is None:
        return None
    returns = [r for r in m.findall(fn, m.Return()) if isinstance(r, cst.Return)]
    if len(returns) != 1 or not isinstance(returns[0].value, cst.List | cst.Tuple):
        return None
    consts = int_constants(module)
    specs = [_tensor_spec(el.value, consts) for el in returns[0].value.elements]
    if not specs or any(s is None for s in specs):
        return None
    labels = names + [f"x{i}" for i in range(len(names), len(specs))]
    return tuple(f"{labels[i]}={'x'.join(map(str, s[0]))}x{s[1]}"
                 for i, s in enumerate(specs) if s is not None)


def forward_params(cls: cst.ClassDef) -> list[str]:
    """The forward's parameter names after `self` (the kernel's input names)."""
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "forward":
            return [p.name.value for p in stmt.params.params][1:]
    return []
