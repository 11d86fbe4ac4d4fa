"""Launching kernels: `nki.jit`, `nki.simulate`, LNC2 grids, `activate()`, `stats()`."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nkibot.sim import dtypes, isa, language
from nkibot.sim.alloc import wrap
from nkibot.sim.errors import KernelError, SimError, fail
from nkibot.sim.state import LAST, LOCAL, RunState
from nkibot.sim.storage import MemoryRegion, values
from nkibot.sim.tensor import NkiTensor

_TARGET = ["trn1"]


class Kernel:
    """A `@nki.jit` kernel; calling it with NumPy arrays runs it on the simulator."""

    def __init__(self, fn: Callable[..., Any], lnc: int = 1) -> None:
        self.fn = fn
        self.lnc = lnc
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: Any) -> Kernel:
        n = grid if isinstance(grid, int) else int(np.prod(grid))
        if n not in (1, 2):
            raise fail("unsupported", f"launch grid {grid!r}: only LNC 1 or 2 is simulated")
        return Kernel(self.fn, n)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if LOCAL.depth:
            return self.fn(*args, **kwargs)  # a jit kernel called from inside a kernel
        return run(self.fn, args, kwargs, self.lnc)


def jit(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """`@nki.jit` or `@nki.jit(...)`: options (mode, platform_target, ...) are accepted."""
    if fn is None:
        return lambda f: Kernel(f)
    return Kernel(fn)


def simulate(kernel: Any) -> Callable[..., Any]:
    """`nki.simulate(kernel)(*arrays)`: run on NumPy arrays, return NumPy arrays."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)

    def runner(*args: Any, **kwargs: Any) -> Any:
        return run(k.fn, args, kwargs, k.lnc)

    return runner


def _to_tensor(arg: Any, buffer: MemoryRegion, index: int) -> Any:
    if isinstance(arg, NkiTensor) or not (isinstance(arg, np.ndarray) or hasattr(arg, "detach")):
        return arg
    arr = arg.detach().cpu().numpy() if hasattr(arg, "detach") else arg
    if arr.dtype == np.float64:
        raise fail("float64-input", f"kernel argument {index} is a float64 array of shape "
                                    f"{list(arr.shape)}; NKI has no float64")
    dtypes.normalize(arr.dtype, f"kernel argument {index}")
    if not arr.flags.writeable:
        arr = arr.copy()
    return wrap(arr, buffer, f"arg{index}")


def _to_numpy(result: Any) -> Any:
    if isinstance(result, NkiTensor):
        return np.array(values(result))
    if isinstance(result, tuple | list):
        return tuple(_to_numpy(r) for r in result)
    return result


def run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        lnc: int = 1, cost: Any = None, numerics: bool = True) -> Any:
    """Run every logical core of one launch serially; errors point at the kernel line.

    `cost`: a cost-model recorder fed at every instruction (see `nkibot.sim.cost`);
    `numerics=False` skips the matmul arithmetic (the cost model's cost-only mode).
    """
    state = RunState(lnc, _TARGET[0])
    state.cost, state.numerics = cost, numerics
    buffer = MemoryRegion.shared_hbm if lnc > 1 else MemoryRegion.private_hbm
    tensors = tuple(_to_tensor(a, buffer, i) for i, a in enumerate(args))
    targs = {k: _to_tensor(v, buffer, -1) for k, v in kwargs.items()}
    LOCAL.state, LAST[0] = state, state.counters
    results = []
    LOCAL.depth += 1
    try:
        with np.errstate(all="ignore"):
            for pid in range(lnc):
                state.program, state.shared_cursor = pid, 0
                if cost is not None and pid:
                    cost.next_core()  # each logical core has its own engines and queues
                results.append(fn(*tensors, **targs))
    except SimError:
        raise
    except Exception as exc:
        err = KernelError("kernel-exception", f"{type(exc).__name__}: {exc}")
        err.locate_from_traceback(exc.__traceback__)
        raise err from exc
    finally:
        LOCAL.depth -= 1
        LOCAL.state = RunState(1, _TARGET[0])
    return _to_numpy(results[0])


def stats() -> dict[str, Any]:
    """The last launch's counters (see the package docstring for the keys)."""
    return LAST[0].as_dict()


def _module() -> types.ModuleType:
    mod = types.ModuleType("nki", "nkibot's NKI CPU simulator standing in for `nki`.")
    mod.__path__ = []
    mod.__dict__.update(jit=jit, simulate=simulate, language=language, isa=isa,
                        __nkibot_sim__=True, __version__="0.4.0+nkibot.sim")
    return mod


NKI = _module()


def _real_nki_installed() -> bool:
    present = sys.modules.get("nki")
    if present is not None:
        return not getattr(present, "__nkibot_sim__", False)
    try:
        return importlib.util.find_spec("nki") is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def activate(force: bool = False, target: str = "trn1") -> Iterator[types.ModuleType | None]:
    """Install our `nki`, `nki.language`, `nki.isa` in sys.modules; restore them on exit.

    Yields our `nki` module, or None when a real `nki` is installed and `force` is False
    (then nothing is touched and kernels import the real package).
    """
    if not force and _real_nki_installed():
        yield None
        return
    saved = {k: v for k, v in sys.modules.items() if k == "nki" or k.startswith("nki.")}
    saved_target = _TARGET[0]
    for k in saved:
        del sys.modules[k]
    sys.modules.update({"nki": NKI, "nki.language": language, "nki.isa": isa})
    _TARGET[0] = target
    LOCAL.state = RunState(1, target)
    try:
        yield NKI
    finally:
        for k in [k for k in sys.modules if k == "nki" or k.startswith("nki.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        _TARGET[0] = saved_target
