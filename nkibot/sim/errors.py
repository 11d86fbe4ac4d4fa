"""Simulator errors: a broken hardware rule, or any other failure inside a kernel.

Both carry a short stable `rule` id, the kernel `file` and `line` (the innermost stack
frame outside this package), and a `fix` hint that the agent loop feeds back to the model.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

_PKG_DIR = str(Path(__file__).resolve().parent)
_STDLIB = sysconfig.get_paths()["stdlib"]

#: The usual fix for each rule, shown to whoever wrote the kernel.
FIXES: dict[str, str] = {
    "partition-dim": "tile the partition (first) dimension to at most nl.tile_size.pmax = 128",
    "partition-mismatch": "give every operand the same partition (first) dimension size",
    "shape-mismatch": "make the operand shapes (elements per partition) agree",
    "buffer-illegal": (
        "move the operand to a legal buffer: dma_copy/nl.load/nl.store move HBM<->SBUF, "
        "nc_matmul reads SBUF and writes PSUM, compute engines read/write SBUF or PSUM only"
    ),
    "out-of-bounds": "keep every index and slice inside the tensor's shape (check loop bounds)",
    "matmul-contraction": (
        "put the contraction dim on partitions of both stationary and moving, at most 128, "
        "equal for both"
    ),
    "matmul-stationary-free": "tile the stationary free size to <= 128 (gemm_stationary_fmax)",
    "matmul-moving-free": "tile the moving free size to <= 512 (gemm_moving_fmax)",
    "psum-bank": "keep a matmul result within one 2 KiB PSUM bank: <= 512 fp32 per partition",
    "psum-accumulate": (
        "start each PSUM accumulation group with a matmul that overwrites "
        "(accumulate=False or None); do not memset PSUM before accumulating"
    ),
    "psum-capacity": "free PSUM tiles (allocate them inside the loop) or use fewer/smaller ones",
    "sbuf-capacity": "use smaller tiles or allocate tiles inside the loop body so they recycle",
    "dtype-illegal": "use a dtype combination the engine accepts (see the rule's message)",
    "float64-input": "pass float32 (or bf16/fp16) arrays: NKI has no float64",
    "reduce-axis0": "reduce free axes only; transpose first or use nc_matmul with a ones vector",
    "reduce-axis": "reduce the last contiguous free axes, e.g. axis=1 or axis=(1, 2)",
    "broadcast": (
        "operands must have the same shape (or be a scalar): use .broadcast_to(shape) / "
        "nl.broadcast_to, or nisa.tensor_scalar with a [P,1] operand"
    ),
    "read-only": "write into a tensor you allocated, not into a broadcast view",
    "view-illegal": "keep the partition dim first and reshape only contiguous views",
    "op-illegal": "pass an nl function (nl.add, nl.exp, ...) or a numpy ufunc as op",
    "arch-unsupported": (
        "use what the target generation supports (see nkibot/sim/targets.py), or select a "
        "newer generation with activate(target=...) / NEURON_PLATFORM_TARGET_OVERRIDE"
    ),
    "target-unknown": "use trn1, trn2 or trn3 (aliases: inf2/gen2, gen3, gen4)",
    "unsupported": "this construct is not supported by the simulator; rewrite it",
    "kernel-exception": "fix the Python error raised inside the kernel",
    "host-compute": (
        "compute on device with nl/nisa instructions; NumPy may only supply dtypes, constants "
        "and ops passed as op="
    ),
    "data-dependent-control": (
        "keep Python control flow on shapes and Python ints; select per element on device"
    ),
    "lnc-race": (
        "put a nisa.core_barrier(data=<the shared tensor>, cores=(0, 1)) between one "
        "core's write to shared HBM and the other core's read (or write) of it"
    ),
    "loop-illegal": "put the nl.no_reorder() block inside the dynamic loop's body",
    "lnc-sync": (
        "make every logical core reach the same core_barrier calls, and pair each sendrecv "
        "with one on the partner core (send_to_rank / recv_from_rank swapped, same pipe_id)"
    ),
    "result-illegal": (
        "allocate each result with nl.ndarray(shape, dtype, buffer=nl.shared_hbm) in the "
        "kernel, store into it, and return it"
    ),
}


class SimError(Exception):
    """Base of simulator errors: a rule id, a message, the kernel location and a fix hint."""

    def __init__(self, rule: str, detail: str, fix: str | None = None) -> None:
        super().__init__(detail)
        self.rule = rule
        self.detail = detail
        self.fix = fix if fix is not None else FIXES.get(rule, "")
        self.file: str | None = None
        self.line: int | None = None
        self.locate_from_stack(sys._getframe(1))

    def locate_from_stack(self, frame: FrameType | None) -> None:
        """Point at the innermost frame outside the simulator (the kernel's call site)."""
        found = _first_user_frame(frame)
        if found is not None:
            self.file, self.line = found

    def locate_from_traceback(self, tb: TracebackType | None) -> None:
        """Point at the innermost user frame of a traceback (for wrapped exceptions)."""
        last: tuple[str, int] | None = None
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if _is_user_file(name):
                last = (name, tb.tb_lineno)
            tb = tb.tb_next
        if last is not None:
            self.file, self.line = last

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable across the sandbox's process boundary, location included.
        return (_rebuild, (type(self), self.rule, self.detail, self.fix, self.file, self.line))

    @property
    def where(self) -> str:
        if self.file is None:
            return "<unknown>"
        return f"{Path(self.file).name}:{self.line}"

    def __str__(self) -> str:
        text = f"[{self.rule}] {self.detail} (at {self.where})"
        if self.fix:
            text += f"; fix: {self.fix}"
        return text


class ConstraintError(SimError):
    """A hardware rule was broken (partition size, buffer, bounds, matmul limits, ...)."""


class KernelError(SimError):
    """Anything else raised inside the kernel, with the kernel's file and line."""


def _is_user_file(name: str) -> bool:
    """Kernel code: not this package, not NumPy/ml_dtypes/site-packages, not the stdlib."""
    if name.startswith((_PKG_DIR, "<frozen", _STDLIB + "/")):
        return False
    return not ("site-packages" in name or "/numpy/" in name or "/ml_dtypes/" in name)


def _first_user_frame(frame: FrameType | None) -> tuple[str, int] | None:
    while frame is not None:
        name = frame.f_code.co_filename
        if _is_user_file(name):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


def user_site(frame: FrameType | None = None) -> str:
    """`file.py:LINE` of the innermost kernel frame (the caller's stack by default)."""
    found = _first_user_frame(frame if frame is not None else sys._getframe(1))
    return "<unknown>" if found is None else f"{Path(found[0]).name}:{found[1]}"


def _rebuild(cls: type[SimError], rule: str, detail: str, fix: str, file: str | None,
             line: int | None) -> SimError:
    err = cls(rule, detail, fix)
    err.file, err.line = file, line
    return err


def fail(rule: str, detail: str) -> ConstraintError:
    """Build a ConstraintError located at the kernel's call site (raise the result)."""
    err = ConstraintError(rule, detail)
    err.locate_from_stack(sys._getframe(1))
    return err
