"""The KernelBackend interface: compile, verify and profile one candidate kernel."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from nkibot.results import CompileResult, ProfileResult, VerifyResult
from nkibot.task import Task
from nkibot.verify.reference import ReferenceSet


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

    def verify(self, src: str, task: Task, reference: ReferenceSet) -> VerifyResult: ...

    def profile(self, src: str, task: Task) -> ProfileResult: ...

    def estimate(self, src: str, task: Task) -> ProfileResult:
        """The cost model's figures alone (`model`), cheaply: nothing verified or measured.
        The optimize phase ranks candidates by it before spending a verification."""
        ...
