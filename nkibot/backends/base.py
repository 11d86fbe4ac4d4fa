"""The KernelBackend interface: compile and profile one candidate kernel, and say how its
kernel child runs so that `verify.check` can verify it."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nkibot.results import CompileResult, ProfileResult
from nkibot.task import Task
from nkibot.verify.check import KernelChild


@runtime_checkable
class KernelBackend(Protocol):
    #: "sim" or "neuron".
    name: str
    #: True when figures come from a Trainium device.
    is_hardware: bool
    #: The Trainium generation (trn1/trn2/trn3) kernels are checked for: the simulator's
    #: rules, or on hardware the device's own.
    platform: str

    def compile(self, src: str, task: Task) -> CompileResult: ...

    def child(self, src: str, task: Task) -> KernelChild:
        """How this backend runs `src`'s kernel child for `task`; `verify.check` does the
        rest (trials, guards, verdict) the same way for every backend."""
        ...

    def profile(self, src: str, task: Task) -> ProfileResult: ...

    def estimate(self, src: str, task: Task) -> ProfileResult:
        """The cost model's figures alone (`model`), cheaply: nothing verified or measured.
        The optimize phase ranks candidates by it before spending a verification."""
        ...
