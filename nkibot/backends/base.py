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
    #: True when figures come from a Trn1 device.
    is_hardware: bool

    def compile(self, src: str, task: Task) -> CompileResult: ...

    def verify(self, src: str, task: Task, reference: ReferenceSet) -> VerifyResult: ...

    def profile(self, src: str, task: Task) -> ProfileResult: ...
