"""The three tools offered to the model, and their execution against a KernelBackend.

Backend calls are synchronous and slow (they run sandboxed subprocesses), so they run
in a worker thread. Results are cached by kernel source: a model (or the deterministic
lowering) that resends the same code gets the same answer without re-running it.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from nkibot.backends.base import KernelBackend
from nkibot.convert.agent import feedback, knowledge
from nkibot.convert.agent.costfirst import Gate, Skipped, breakdown
from nkibot.results import CompileResult, ToolCallRecord, VerifyResult
from nkibot.task import Task
from nkibot.verify.check import check
from nkibot.verify.guards import jit_functions
from nkibot.verify.reference import ReferenceSet

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The last fenced Python block that looks like a kernel (mentions nki), if any."""
    blocks = [b for b in _FENCE.findall(text) if "nki" in b]
    return blocks[-1].strip() + "\n" if blocks else None


@dataclass
class ToolOutcome:
    """What one tool call produced: the text sent back, and the results behind it."""

    name: str
    content: str
    is_error: bool = False
    code: str | None = None
    compile: CompileResult | None = None
    verify: VerifyResult | None = None
    #: The call's arguments, as the transcript records them.
    arguments: dict[str, object] = field(default_factory=dict)
    #: Set when the candidate was not verified because the cost model ranks it slower.
    skipped: Skipped | None = None

    @property
    def compiled(self) -> bool | None:
        return None if self.compile is None else self.compile.ok

    @property
    def verified(self) -> bool | None:
        if self.verify is not None:
            return self.verify.passed
        return False if self.compile is not None and not self.compile.ok else None

    @property
    def max_abs_error(self) -> float | None:
        if self.verify is None or not self.verify.trials:
            return None
        return max(t.max_abs_error for t in self.verify.trials)

    def record(self, arguments: dict[str, object] | None = None) -> ToolCallRecord:
        ok = not self.is_error and self.verified is not False and self.compiled is not False
        line = feedback.result_summary(self.compile, self.verify) or feedback.summary(
            self.content)
        args = self.arguments if arguments is None else arguments
        return ToolCallRecord(name=self.name, arguments=args, result_summary=line, ok=ok)


@dataclass
class ToolRunner:
    """Executes tool calls for one task against one kernel backend."""

    backend: KernelBackend
    task: Task
    reference: ReferenceSet
    _compiled: dict[str, CompileResult] = field(default_factory=dict)
    _verified: dict[str, VerifyResult] = field(default_factory=dict)
    #: The optimize phase's cost-first gate: asked before a candidate is compiled or verified.
    gate: Gate | None = None

    async def run(self, name: str, arguments: dict[str, object]) -> ToolOutcome:
        if name == "lookup_nki":
            topic = str(arguments.get("topic", ""))
            return ToolOutcome(name, knowledge.lookup(topic))
        code = arguments.get("code")
        if name not in ("compile_kernel", "verify_kernel"):
            return ToolOutcome(name, f"unknown tool {name!r}: use compile_kernel, "
                                     "verify_kernel or lookup_nki", is_error=True)
        if not isinstance(code, str) or not code.strip():
            return ToolOutcome(name, f"{name} needs the complete kernel file as `code`",
                               is_error=True)
        if name == "compile_kernel":
            return await self.compile(code)
        return await self.verify(code)

    async def compile(self, code: str) -> ToolOutcome:
        result = self._compiled.get(code)
        if result is None:
            result = await asyncio.to_thread(self.backend.compile, code, self.task)
            self._compiled[code] = result
        text = feedback.compile_feedback(result, code)
        return ToolOutcome("compile_kernel", text, is_error=not result.ok, code=code,
                           compile=result)

    async def verify(self, code: str) -> ToolOutcome:
        skipped = None if self.gate is None or code in self._verified else await self.gate(code)
        if skipped is not None:
            label = skipped.profile.model.get("label", "model estimate")
            text = (f"{skipped.reason}, {label}; the previous kernel stays. "
                    f"Its profile: {breakdown(skipped.profile)}")
            return ToolOutcome("verify_kernel", text.strip(), is_error=True, code=code,
                               skipped=skipped)
        compiled = await self.compile(code)
        if compiled.compile is not None and not compiled.compile.ok:
            compiled.name = "verify_kernel"
            return compiled
        result = self._verified.get(code)
        if result is None:
            result = await asyncio.to_thread(check, code, self.task, self.reference,
                                             self.backend.child(code, self.task))
            self._verified[code] = result
        text = feedback.verify_feedback(result, code)
        return ToolOutcome("verify_kernel", text, is_error=not result.passed, code=code,
                           compile=compiled.compile, verify=result)


def kernel_function(src: str) -> str | None:
    """The name of the `@nki.jit` function in a kernel file (the first one), if any."""
    found = jit_functions(src)
    return found[0] if found else None
