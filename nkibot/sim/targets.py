"""Trainium generations: one rule table, each fact with the documentation line it comes from.

trn1 is NeuronCore-v2 (Trn1/Inf2), trn2 NeuronCore-v3, trn3 NeuronCore-v4. The table is
pure data (it imports nothing); the engines read it for the current launch's target, and
other readers (the cost model, new instructions) read the same facts from here.

Sources are paths in aws-neuron/aws-neuron-sdk with the line of the sentence quoted in
`says` (ISA = nki/api/nki/isa/__init__.py, LANG = nki/api/nki/language/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ISA = "nki/api/nki/isa/__init__.py"
LANG = "nki/api/nki/language/__init__.py"
ARCH_V2 = "nki/guides/architecture/trainium_inferentia2_arch.rst"
ARCH_V3 = "nki/guides/architecture/trainium2_arch.rst"
ARCH_V4 = "nki/guides/architecture/trainium3_arch.rst"
SIM_GUIDE = "nki/guides/nki_simulator.rst"

TARGETS = ("trn1", "trn2", "trn3")
#: NeuronCore version of each target (nisa.nc_version gen2/gen3/gen4).
VERSION = {"trn1": 2, "trn2": 3, "trn3": 4}
CORE = {"trn1": "NeuronCore-v2", "trn2": "NeuronCore-v3", "trn3": "NeuronCore-v4"}

#: NEURON_PLATFORM_TARGET_OVERRIDE values the official simulator accepts.
ENV_VAR = "NEURON_PLATFORM_TARGET_OVERRIDE"
ALIASES = {"trn1": "trn1", "inf2": "trn1", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
           "trn3": "trn3", "gen4": "trn3"}
#: The official simulator's default when the variable is unset (it auto-detects a local
#: chip first; this simulator never runs on one, so the default is what applies).
DEFAULT = "trn3"
DEFAULT_SOURCE = f"{SIM_GUIDE}:118"


@dataclass(frozen=True)
class Rule:
    """One per-generation fact: its value on trn1, trn2, trn3, and where the docs say so."""

    trn1: Any
    trn2: Any
    trn3: Any
    source: str
    says: str

    def on(self, target: str) -> Any:
        return {"trn1": self.trn1, "trn2": self.trn2, "trn3": self.trn3}[target]


KIB = 1024
RULES: dict[str, Rule] = {
    "sbuf_partition_bytes": Rule(
        192 * KIB, 224 * KIB, 256 * KIB, f"{ARCH_V2}:78; {ARCH_V3}:39; {ARCH_V4}:36",
        "SBUF 24 MiB = 128 x 192 KiB (v2); 28 MiB = 128 x 224 KiB (v3); 32 MiB (v4)"),
    "psum_partition_bytes": Rule(
        16 * KIB, 16 * KIB, 16 * KIB, f"{ARCH_V2}:78; {ARCH_V3}:39; {ARCH_V4}:36",
        "one PSUM partition has 16KiB; PSUM capacity remains the same at 2MiB"),
    "matmul_moving_fmax_fp32": Rule(
        512, 512, 4096, f"{ISA}:612",
        "On NeuronCore-v2 and -v3, the free dimension size of moving must not exceed 512; "
        "starting NeuronCore-v4 up to 4096 for float32 dst or 8192 for bfloat16 dst"),
    "matmul_moving_fmax_bf16": Rule(
        512, 512, 8192, f"{ISA}:612", "as matmul_moving_fmax_fp32 (8192 for a bfloat16 dst)"),
    "matmul_dst_dtypes": Rule(
        ("float32",), ("float32",), ("float32", "bfloat16"), f"{ISA}:588",
        "dst must be float32 in NeuronCore-v2 and -v3; starting NeuronCore-v4, float32 or "
        "bfloat16"),
    "matmul_operand_dtypes": Rule(
        ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32"),
        ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32"),
        ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32",
         "float8_e4m3fn"), f"{ISA}:578",
        "float8_e4m3/float8_e5m2/bfloat16/float16/tfloat32/float32; starting NeuronCore-v4 "
        "float8_e4m3fn (OCP FP8), not mixed with float8_e4m3 in one matmul"),
    "matmul_perf_mode": Rule(
        False, True, True, f"{ISA}:506",
        "On NeuronCore-v2, performance mode is not supported"),
    "matmul_accumulate_onto_initialised": Rule(
        False, False, True, f"{ISA}:553",
        "On NeuronCore-v2 and -v3, matmul accumulating into a PSUM location value-initialized "
        "by a non-matmul instruction is not supported"),
    "activation_scalar_bias": Rule(
        False, True, True, f"{ISA}:1406",
        "In NeuronCore-v2 the bias must be a [N, 1] vector; starting NeuronCore-v3 a "
        "compile-time scalar or a [N, 1] vector"),
    "activation_reduce_ops": Rule(
        ("add",), None, None, f"{ISA}:1476",
        "On NeuronCore-v2, the reduce_op must be nl.add (None: no restriction)"),
    "dma_hwdge": Rule(
        False, True, True, f"{ISA}:372",
        "Hardware based DGE is only supported for NeuronCore-v3 or newer"),
    "dma_priority": Rule(
        False, False, True, f"{ISA}:371",
        "DMA quality-of-service priority (NeuronCore-v4+ only)"),
    "mx_dtypes": Rule(
        False, False, True, f"{LANG}:51",
        "float8_e5m2_x4 / float8_e4m3fn_x4 / float4_e2m1fn_x4 / float8_e8m0fnu: data types "
        "for nki.isa.nc_matmul_mx on NeuronCore-v4"),
}

#: Instructions that not every generation has: name -> (first NeuronCore version, source).
INSTRUCTIONS: dict[str, tuple[int, str]] = {
    "nc_matmul_mx": (4, f"{ISA}:719"),
    "quantize_mx": (4, f"{ISA}:2746"),
    "activate2": (4, f"{ISA}:1548"),
    "exponential": (4, f"{ISA}:2287"),
    "rand2": (4, f"{ISA}:2247"),
    "rand_set_state": (3, f"{ISA}:2201"),
    "rand_get_state": (3, f"{ISA}:2233"),
    "core_barrier": (3, f"{ISA}:2605"),
    "sendrecv": (3, f"{ISA}:2976"),
    "range_select": (3, f"{ISA}:2824"),
    "nonzero_with_count": (3, f"{ISA}:3226"),
    "abs_max": (4, f"{LANG}:846"),
    "abs_min": (4, f"{LANG}:890"),
}

MX_DTYPE_NAMES = ("float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4", "float8_e8m0fnu")


def resolve(value: str | None) -> str:
    """The target a NEURON_PLATFORM_TARGET_OVERRIDE value selects (unset/empty: trn3)."""
    if value is None or not value.strip():
        return DEFAULT
    key = value.strip().lower()
    if key not in ALIASES:
        raise ValueError(f"{ENV_VAR}={value!r} is not a target; use one of "
                         f"{', '.join(sorted(ALIASES))}")
    return ALIASES[key]


def rule(key: str, target: str) -> Any:
    """The value of one rule on one target."""
    return RULES[key].on(target)


def has_instruction(name: str, target: str) -> bool:
    first = INSTRUCTIONS.get(name)
    return first is None or VERSION[target] >= first[0]


def cite(key: str) -> str:
    """`source: says` for a rule or an instruction (for error messages and docs)."""
    if key in RULES:
        return f"{RULES[key].source}: {RULES[key].says}"
    version, source = INSTRUCTIONS[key]
    return f"{source}: available only on NeuronCore-v{version} and newer"
