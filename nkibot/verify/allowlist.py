"""The names a kernel may use: modules, their members, and builtins (pure data, no logic).

An allow-list, not a deny-list: a name is usable only if it is listed here. The `nki`
lists are the public API of the official `nki` package (its API stubs under
`aws-neuron/aws-neuron-sdk` `nki/api/nki/`), not whatever our simulator happens to
expose, because the simulator's modules carry helpers and submodules (`nl.math`,
`nisa.compute`, ...) that lead to NumPy's own submodules and from there to `os` and `sys`.
The `numpy` list holds values only: dtypes, constants and ufuncs that NKI instructions
take as `op=` or that work on Python scalars; nothing that makes or reads arrays, files
or submodules. docs/security.md ("Kernel rules") gives the rationale.
"""

from __future__ import annotations

#: Modules a kernel may import (and the `from X import name` names each offers).
NKI_MODULES = ("nki", "nki.language", "nki.isa", "nki.typing")

_NL_DTYPES = (
    "bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32",
    "bfloat16", "tfloat32", "float8_e4m3", "float8_e5m2", "float8_e4m3fn",
    "float8_e8m0fnu", "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")
_NL_API = (
    "NKIObject", "NkiTensor", "MemoryRegion", "sbuf", "psum", "hbm", "private_hbm",
    "shared_hbm", "tile_size", "is_hbm", "is_on_chip", "is_psum", "is_sbuf",
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "abs_max", "abs_min",
    "abs", "square", "power", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift",
    "right_shift", "logical_and", "logical_or", "logical_xor", "logical_not", "exp", "log",
    "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_sigmoid",
    "gelu_apprx_tanh", "gelu_dx", "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "softplus",
    "mish", "erf", "erf_dx", "reciprocal", "copy", "sin", "cos", "tan", "arctan", "ceil",
    "floor", "trunc", "negative", "sign", "fmod", "mod", "sum", "max", "min", "mean",
    "prod", "var", "all", "softmax", "rms_norm", "where", "dropout", "ones", "full",
    "zeros", "zeros_like", "empty_like", "random_seed", "rand", "expand_dims",
    "broadcast_to", "transpose", "matmul", "no_reorder", "load_transpose2d",
    "gather_flattened", "ds", "affine_range", "sequential_range", "static_range",
    "dynamic_range", "fori_loop", "while_loop", "ndarray", "load", "store", "program_id",
    "num_programs", "program_ndim", "shared_constant", "shared_identity_matrix",
    "device_print", "prelu", "bypass", "average", "par_dim")
_NISA_API = (
    "engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version",
    "dma_engine", "NkiInstruction", "NkiValidationError", "VirtualRegister",
    "get_nc_sub_version", "get_nc_version", "dma_copy", "tensor_copy", "memset",
    "tensor_copy_predicated", "nc_matmul", "nc_matmul_mx", "nc_transpose", "dma_transpose",
    "tensor_tensor", "tensor_scalar", "tensor_reduce", "tensor_partition_reduce",
    "tensor_scalar_cumulative", "activation", "activation_reduce", "activate2", "iota",
    "affine_select", "local_gather", "nc_n_gather", "bn_stats", "bn_aggr",
    "tensor_tensor_scan", "nc_stream_shuffle", "rng", "dropout", "set_rng_seed",
    "rand_set_state", "rand_get_state", "rand2", "exponential", "reciprocal", "max8",
    "sequence_bounds", "scalar_tensor_tensor", "tensor_scalar_reduce", "core_barrier",
    "dma_compute", "quantize_mx", "range_select", "select_reduce", "sendrecv",
    "register_alloc", "register_move", "register_load", "register_store",
    "nc_find_index8", "nc_match_replace8", "nonzero_with_count", "topk")

#: numpy values: dtypes, constants, ufuncs (NKI's `op=` values) and scalar/dtype helpers.
_NUMPY_DTYPES = (
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "half", "single", "double", "dtype", "finfo", "iinfo")
_NUMPY_CONSTANTS = ("pi", "e", "inf", "nan", "newaxis", "euler_gamma")
_NUMPY_UFUNCS = (
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "power", "mod",
    "remainder", "fmod", "maximum", "minimum", "fmax", "fmin", "abs", "absolute", "fabs",
    "negative", "positive", "sign", "square", "sqrt", "cbrt", "reciprocal", "exp", "exp2",
    "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "arcsin", "arccos",
    "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor",
    "ceil", "trunc", "rint", "hypot", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "invert", "left_shift",
    "right_shift", "isnan", "isinf", "isfinite", "prod")

_MATH = (
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "comb",
    "copysign", "cos", "cosh", "degrees", "dist", "e", "erf", "erfc", "exp", "exp2",
    "expm1", "fabs", "factorial", "floor", "fmod", "frexp", "fsum", "gamma", "gcd",
    "hypot", "inf", "isclose", "isfinite", "isinf", "isnan", "isqrt", "lcm", "ldexp",
    "lgamma", "log", "log10", "log1p", "log2", "modf", "nan", "nextafter", "perm", "pi",
    "pow", "prod", "radians", "remainder", "sin", "sinh", "sqrt", "tan", "tanh", "tau",
    "trunc", "ulp")

#: module -> the member names a kernel may use from it (`mod.name` or `from mod import name`).
MEMBERS: dict[str, frozenset[str]] = {
    "nki": frozenset({"jit", "simulate", "language", "isa", "typing"}),
    "nki.language": frozenset(_NL_API + _NL_DTYPES),
    "nki.isa": frozenset(_NISA_API),
    "nki.typing": frozenset({"tensor", "mutable_tensor", "scalar"}),
    "numpy": frozenset(_NUMPY_DTYPES + _NUMPY_CONSTANTS + _NUMPY_UFUNCS),
    "math": frozenset(_MATH),
    # Official NKI classes are dataclasses of nl.NKIObject; nothing else from here.
    "dataclasses": frozenset({"dataclass"}),
    "__future__": frozenset({"annotations"}),
}

#: Members that are themselves modules (attribute chains continue into them).
SUBMODULES: dict[str, str] = {"nki.language": "nki.language", "nki.isa": "nki.isa",
                              "nki.typing": "nki.typing"}

#: Modules `import X` may name; `dataclasses`/`__future__` only via `from X import name`.
IMPORTABLE = frozenset((*NKI_MODULES, "numpy", "math"))

#: Builtins a kernel may call or name: pure functions, containers, exceptions.
BUILTINS = frozenset({
    "True", "False", "None", "Ellipsis", "NotImplemented",
    "abs", "all", "any", "bool", "callable", "chr", "complex", "dict", "divmod",
    "enumerate", "filter", "float", "frozenset", "int", "isinstance", "iter", "len",
    "list", "map", "max", "min", "next", "ord", "pow", "print", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip",
    "ArithmeticError", "AssertionError", "Exception", "IndexError", "KeyError",
    "NotImplementedError", "OverflowError", "RuntimeError", "StopIteration", "TypeError",
    "ValueError", "ZeroDivisionError"})

#: Refused wherever they appear (also as a binding), with the rule each breaks.
FORBIDDEN_NAMES: dict[str, str] = {
    **dict.fromkeys(("getattr", "setattr", "hasattr", "delattr", "vars", "globals",
                     "locals", "dir", "__import__", "breakpoint", "type", "object", "super",
                     "id", "memoryview", "help", "classmethod", "staticmethod", "property",
                     "format"), "dynamic-access"),
    **dict.fromkeys(("exec", "eval", "compile"), "exec"),
    **dict.fromkeys(("open",), "file-access"),
    **dict.fromkeys(("exit", "quit"), "process-access"),
}

#: Refused as attribute names on anything: frames, code objects, string formatting (which
#: reads attributes named in a string) and NumPy's file writers on scalars.
FORBIDDEN_ATTRS: dict[str, str] = {
    **dict.fromkeys(("gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code",
                     "cr_await", "ag_frame", "ag_code", "ag_await", "f_back", "f_globals",
                     "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
                     "co_code", "co_consts", "co_names", "func_globals", "func_code",
                     "mro"), "introspection"),
    **dict.fromkeys(("format", "format_map"), "dynamic-access"),
    **dict.fromkeys(("tofile", "dump", "dumps", "ctypes"), "file-access"),
}

#: Well-known modules named in `import` that get a sharper rule than import-not-allowed.
IMPORT_RULES: dict[str, str] = {
    **dict.fromkeys(("io", "pathlib", "shutil", "pickle", "tempfile", "glob", "fileinput",
                     "marshal"), "file-access"),
    **dict.fromkeys(("os", "sys", "subprocess", "ctypes", "signal", "multiprocessing",
                     "threading"), "process-access"),
    **dict.fromkeys(("socket", "urllib", "http", "requests", "ssl"), "network-access"),
    **dict.fromkeys(("importlib", "builtins", "inspect", "gc"), "dynamic-access"),
}

#: Dunder names a kernel may use: `__name__` for the main guard, the dataclass hooks.
DUNDER_NAMES = frozenset({"__name__"})
DUNDER_METHODS = frozenset({"__init__", "__post_init__"})
