"""Launching kernels: `nki.jit`, `nki.simulate`, LNC2 grids, `activate()`, `stats()`."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nkibot.sim import dtypes, hostio, isa, language, targets
from nkibot.sim import typing as sim_typing
from nkibot.sim.alloc import wrap
from nkibot.sim.errors import KernelError, SimError, fail
from nkibot.sim.lnc import Cores
from nkibot.sim.state import LAST, LOCAL, RunState
from nkibot.sim.storage import MemoryRegion, handle, values
from nkibot.sim.tensor import NkiTensor

#: The generation `activate(target=...)` fixed, or None: read the environment per launch.
_TARGET: list[str | None] = [None]


def launch_target() -> str:
    """The generation a launch runs for: `activate(target=)`, else the official variable.

    As the official simulator (nki/guides/nki_simulator.rst:103-118), the simulator reads
    NEURON_PLATFORM_TARGET_OVERRIDE (trn1|inf2|gen2, trn2|gen3, trn3|gen4) and defaults
    to trn3; it is the one environment variable the simulator reads, because kernels and
    scripts written for the official simulator select their generation with it.
    """
    fixed = _TARGET[0]
    if fixed is not None:
        return fixed
    try:
        return targets.resolve(os.environ.get(targets.ENV_VAR))
    except ValueError as exc:
        raise fail("target-unknown", str(exc)) from None


#: Programs one launch grid may have (each runs on a thread of its own, one at a time).
MAX_PROGRAMS = 64


class Kernel:
    """A `@nki.jit` kernel; calling it with NumPy arrays runs it on the simulator."""

    def __init__(self, fn: Callable[..., Any], lnc: int = 1,
                 schedule: tuple[tuple[str, tuple[str, ...]], ...] = (),
                 grid: tuple[int, ...] | None = None) -> None:
        self.fn = fn
        self.lnc = lnc
        #: The SPMD launch grid (`kernel[4, 2]`); () when launched without one.
        self.grid = grid if grid is not None else ((lnc,) if lnc > 1 else ())
        #: Extra dependency edges (instruction, instructions it waits for); see with_schedule.
        self.schedule = schedule
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid: Any) -> Kernel:
        dims = (grid,) if isinstance(grid, int) else tuple(grid)
        if not dims or not all(isinstance(d, int) and d >= 1 for d in dims):
            raise fail("unsupported", f"launch grid {grid!r}: dimensions must be positive ints")
        n = int(np.prod(dims))
        if n > MAX_PROGRAMS:
            raise fail("unsupported", f"launch grid {grid!r}: {n} programs; the simulator "
                                      f"runs at most {MAX_PROGRAMS}")
        # Each SPMD program (nl.program_id(axis) per grid axis, nki/api/nki/language/
        # __init__.py:2595-2614) runs as a logical core does under LNC=2: its own SBUF,
        # PSUM and registers, one shared HBM; a grid of 2 is the LNC=2 launch.
        return Kernel(self.fn, n, self.schedule, dims)

    def with_schedule(self, edges: Any) -> Kernel:
        """This kernel with extra dependency edges: pairs (name, name or [names]).

        The simulator issues instructions in program order, which honours any edge set
        that agrees with the data flow, so the edges are checked and kept, not enforced.
        """
        parsed: list[tuple[str, tuple[str, ...]]] = []
        for edge in edges:
            if not isinstance(edge, tuple | list) or len(edge) != 2 or not isinstance(
                    edge[0], str):
                raise fail("unsupported", f"with_schedule: edge {edge!r} must be a pair "
                                          "(name, name or list of names)")
            deps = (edge[1],) if isinstance(edge[1], str) else tuple(edge[1])
            if not all(isinstance(d, str) for d in deps):
                raise fail("unsupported", f"with_schedule: edge {edge!r} names a non-string")
            parsed.append((edge[0], deps))
        return Kernel(self.fn, self.lnc, self.schedule + tuple(parsed), self.grid)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if LOCAL.depth:
            return self.fn(*args, **kwargs)  # a jit kernel called from inside a kernel
        return run(self.fn, args, kwargs, self.lnc, grid=self.grid)


def jit(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """`@nki.jit` or `@nki.jit(...)`: options (mode, platform_target, ...) are accepted."""
    if fn is None:
        return lambda f: Kernel(f)
    return Kernel(fn)


def simulate(kernel: Any) -> Callable[..., Any]:
    """`nki.simulate(kernel)(*arrays)`: run on NumPy arrays, return NumPy arrays."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)

    def runner(*args: Any, **kwargs: Any) -> Any:
        return run(k.fn, args, kwargs, k.lnc, grid=k.grid)

    return runner


def _to_tensor(arg: Any, buffer: MemoryRegion, index: int) -> Any:
    if isinstance(arg, NkiTensor) or not (isinstance(arg, np.ndarray) or hasattr(arg, "detach")):
        return arg
    arr = hostio.torch_to_numpy(arg) if hasattr(arg, "detach") else arg
    if arr.dtype == np.float64:
        raise fail("float64-input", f"kernel argument {index} is a float64 array of shape "
                                    f"{list(arr.shape)}; NKI has no float64")
    dtypes.normalize(arr.dtype, f"kernel argument {index}")
    if not arr.flags.writeable:
        arr = arr.copy()
    return wrap(arr, buffer, f"arg{index}")


def _to_numpy(result: Any, state: RunState, where: str = "result",
              written: tuple[Any, ...] = ()) -> Any:
    """The kernel's results as NumPy arrays: each a tensor this launch allocated.

    The official simulator converts every returned NkiTensor back to a NumPy array
    (nki/guides/nki_simulator.rst:198-204), so a result in nl.hbm / private_hbm or on
    chip (the scheduling guide, the kernel-optimization tutorial, the topk and
    nonzero_with_count docstrings return such tensors) is copied out as there. The
    compiler rejects non-shared_hbm outputs (nki/migration/index.rst:608-612), so each
    such result adds a note to `stats()["notes"]` instead of failing. Refused
    (`result-illegal`): host values, and tensors this launch did not allocate (an
    untouched input or a leftover from an earlier launch), which no kernel computes.
    """
    if isinstance(result, tuple | list):
        return tuple(_to_numpy(r, state, f"{where}[{i}]", written)
                     for i, r in enumerate(result))
    if result is None:
        return None
    if not isinstance(result, NkiTensor):
        raise fail("result-illegal", f"kernel {where} is a {type(result).__name__}; a kernel "
                                     "returns the shared_hbm tensors it allocated")
    if any(handle(result).alloc is handle(t).alloc for t in written):
        # An output argument the kernel wrote into (nisa.dma_copy's own scatter example
        # returns its `output` parameter): the caller's array, updated in place.
        return np.array(values(result))
    if handle(result).alloc.launch != state.launch.serial:
        raise fail("result-illegal", f"kernel {where} {result.describe()} was not allocated "
                                     "by this launch (an input or a leftover tensor)")
    if result.buffer is not MemoryRegion.shared_hbm:
        state.counters.notes.append(
            f"kernel {where} is {result.describe()}: the simulator copies it out as the "
            "official one does, but the compiler accepts only nl.shared_hbm outputs "
            "(nki/migration/index.rst:608-612)")
    # The launch's own storage, handed over without a copy: nothing writes it once the
    # launch is over (a copy of a 66M-element output took 0.8 s a trial).
    out = values(result)
    return out if out.flags.c_contiguous else np.array(out)  # 0-d stays 0-d


def run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        lnc: int = 1, cost: Any = None, numerics: bool = True,
        grid: tuple[int, ...] | None = None) -> Any:
    """Run one launch (each logical core on a thread of its own under LNC=2, see
    `nkibot.sim.lnc`); errors point at the kernel line.

    `cost`: a cost-model recorder fed at every instruction (see `nkibot.sim.cost`);
    `numerics=False` skips the matmul arithmetic (the cost model's cost-only mode).
    """
    target = launch_target()
    state = RunState(lnc, target)
    state.cost, state.numerics = cost, numerics
    state.grid = grid if grid is not None else ((lnc,) if lnc > 1 else ())
    if cost is not None and not cost.knobs.check_capacity:
        # what-if for kernels a compiler spilled (the cost model does not model spills)
        state.memory.sbuf_limit = state.memory.psum_limit = 1 << 62
    buffer = MemoryRegion.shared_hbm if lnc > 1 else MemoryRegion.private_hbm
    tensors = tuple(_to_tensor(a, buffer, i) for i, a in enumerate(args))
    targs = {k: _to_tensor(v, buffer, -1) for k, v in kwargs.items()}
    LAST[0] = state.counters
    LOCAL.depth += 1
    try:
        with np.errstate(all="ignore"):
            if lnc == 1:
                LOCAL.state = state
                result = fn(*tensors, **targs)
            else:
                result = _run_cores(fn, tensors, targs, state)[0]
    except SimError:
        raise
    except Exception as exc:
        err = KernelError("kernel-exception", f"{type(exc).__name__}: {exc}")
        err.locate_from_traceback(exc.__traceback__)
        raise err from exc
    finally:
        LOCAL.depth -= 1
        LOCAL.state = RunState(1, target)
    written = tuple(t for t in (*tensors, *targs.values())
                    if isinstance(t, NkiTensor) and handle(t).alloc.written)
    out = _to_numpy(result, state, written=written)
    if any(hostio.is_torch(a) for a in (*args, *kwargs.values())):
        return hostio.numpy_to_torch(out)  # torch in, torch out, as the official simulator
    return out


def _run_cores(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               state: RunState) -> list[Any]:
    """The logical cores of an LNC=2 launch, one thread each (`nkibot.sim.lnc`); their results.

    Each core has its own SBUF, PSUM and engine registers and sees its own
    `nl.program_id()`; HBM, the counters and the cost recorder are the launch's.
    """
    cores = Cores(state.lnc, None if state.cost is None else state.cost.switch_core)
    states = [state.for_core(pid, cores) for pid in range(state.lnc)]

    def body(pid: int) -> Any:
        LOCAL.state, LOCAL.depth = states[pid], 1
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return cores.run(body)


def stats() -> dict[str, Any]:
    """The last launch's counters (see the package docstring for the keys)."""
    return LAST[0].as_dict()


def _module() -> types.ModuleType:
    mod = types.ModuleType("nki", "nkibot's NKI CPU simulator standing in for `nki`.")
    mod.__path__ = []
    mod.__dict__.update(jit=jit, simulate=simulate, language=language, isa=isa,
                        typing=sim_typing, __nkibot_sim__=True, __version__="0.4.0+nkibot.sim")
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
def activate(force: bool = False,
             target: str | None = None) -> Iterator[types.ModuleType | None]:
    """Install our `nki`, `nki.language`, `nki.isa` in sys.modules; restore them on exit.

    `target` (trn1|trn2|trn3, or an official alias such as gen2) fixes the generation
    for launches inside; None leaves it to NEURON_PLATFORM_TARGET_OVERRIDE (default
    trn3), as the official simulator does. Yields our `nki` module, or None when a real
    `nki` is installed and `force` is False (then nothing is touched and kernels import
    the real package).
    """
    chosen = None if target is None else _checked(target)
    if not force and _real_nki_installed():
        yield None
        return
    saved = {k: v for k, v in sys.modules.items() if k == "nki" or k.startswith("nki.")}
    saved_target = _TARGET[0]
    for k in saved:
        del sys.modules[k]
    sys.modules.update({"nki": NKI, "nki.language": language, "nki.isa": isa,
                        "nki.typing": sim_typing})
    _TARGET[0] = chosen
    LOCAL.state = RunState(1, chosen or _default_or_trn1())
    try:
        yield NKI
    finally:
        for k in [k for k in sys.modules if k == "nki" or k.startswith("nki.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        _TARGET[0] = saved_target


def _checked(target: str) -> str:
    try:
        return targets.resolve(target)
    except ValueError:
        raise fail("target-unknown", f"activate(target={target!r}): use trn1, trn2 or trn3 "
                                     "(or an official alias: inf2, gen2, gen3, gen4)") from None


def _default_or_trn1() -> str:
    # Instructions called outside a launch (tests poking at nl directly) use this state.
    try:
        return launch_target()
    except SimError:
        return "trn1"
