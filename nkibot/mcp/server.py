"""`nkibot mcp`: nkibot's tools for IDE agents, on the official MCP SDK.

Each tool is a thin async wrapper over `Tools`: the slow work runs in a worker thread that
MCP cancellation abandons at once (its sandboxed child still ends at its own timeout), and
`convert` stops at the next turn boundary. Anticipated failures become `ToolError`, which
the SDK returns as an `is_error` result with our message; nothing crashes the server.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resources import TextResource
from pydantic import Field

from nkibot.mcp.tools import Tools, checked_generation
from nkibot.mcp.workspace import ToolInputError

T = TypeVar("T")

INSTRUCTIONS = (
    "nkibot converts PyTorch modules and Triton kernels into verified AWS Trainium NKI "
    "kernels. Typical flow: discover(path) -> convert(target) -> verify(code, target) -> "
    "profile(code, target) -> emit(result, out_dir). Targets are FILE::Name inside the "
    "workspace. Off Trainium hardware, kernels run on nkibot's NKI CPU simulator and every "
    "figure says so."
)

Target = Annotated[str, Field(description="the PyTorch reference, FILE::Name, e.g. "
                              "examples/rmsnorm.py::RMSNorm")]
Code = Annotated[str, Field(description="the complete kernel file: imports and the "
                            "@nki.jit function")]
Shapes = Annotated[list[str] | None, Field(description="input shape overrides, "
                                           "NAME=DIMSxDTYPE, e.g. x=128x256xfloat32")]


async def _in_thread(fn: Callable[[], T]) -> T:
    try:
        return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
    except ToolInputError as exc:
        raise ToolError(str(exc)) from exc


def build_server(tools: Tools) -> MCPServer:
    server: MCPServer = MCPServer("nkibot", instructions=INSTRUCTIONS)
    _register_analysis(server, tools)
    _register_kernel_tools(server, tools)
    _register_convert(server, tools)
    _register_knowledge(server)
    return server


def _register_analysis(server: MCPServer, tools: Tools) -> None:
    @server.tool()
    async def discover(path: Annotated[str, Field(description="a file or folder in the "
                                                  "workspace")] = ".") -> dict[str, Any]:
        """List convertible things (nn.Modules, @triton.jit kernels) with their shapes."""
        return await _in_thread(functools.partial(tools.discover, path))

    @server.tool()
    async def lookup(topic: Annotated[str, Field(description="what to look up, e.g. "
                                                 "'matmul psum'")]) -> str:
        """Look up the NKI knowledge base (the sections the conversion loop's model reads)."""
        return await _in_thread(functools.partial(tools.lookup, topic))


def _register_kernel_tools(server: MCPServer, tools: Tools) -> None:
    @server.tool()
    async def compile(code: Code, target: Target, shapes: Shapes = None) -> dict[str, Any]:
        """Compile a kernel (trace it on the target's shapes); errors name rule, line, fix."""
        return await _in_thread(functools.partial(tools.compile, code, target, shapes))

    @server.tool()
    async def verify(code: Code, target: Target,
                     trials: Annotated[int, Field(ge=1, le=50)] = 5,
                     shapes: Shapes = None) -> dict[str, Any]:
        """Verify a kernel against its PyTorch reference: seeded trials, statistics, guards."""
        return await _in_thread(functools.partial(tools.verify, code, target, trials, shapes))

    @server.tool()
    async def simulate(code: Code,
                       inputs: Annotated[list[str] | None, Field(
                           description=".npy files in the workspace, in argument order")] = None,
                       shapes: Shapes = None, seed: int = 0,
                       out_dir: Annotated[str | None, Field(
                           description="folder to write output<i>.npy into")] = None,
                       ) -> dict[str, Any]:
        """Run a kernel on the simulator on .npy inputs or seeded random ones; output stats."""
        return await _in_thread(functools.partial(tools.simulate, code, inputs, shapes, seed,
                                                  out_dir))

    @server.tool()
    async def profile(code: Code, target: Target, shapes: Shapes = None) -> dict[str, Any]:
        """Profile a kernel: measured on a Trainium device, else the simulator's estimate."""
        return await _in_thread(functools.partial(tools.profile, code, target, shapes))

    @server.tool()
    async def emit(result: Annotated[dict[str, Any], Field(
                       description="a result from convert or verify")],
                   out_dir: Annotated[str, Field(description="a folder in the workspace")],
                   ) -> dict[str, Any]:
        """Write the result's kernel, its pytest file and report.md under out_dir."""
        return await _in_thread(functools.partial(tools.emit, result, out_dir))


def _register_convert(server: MCPServer, tools: Tools) -> None:
    @server.tool()
    async def convert(target: Target, ctx: Context, shapes: Shapes = None,
                      model: Annotated[str, Field(
                          pattern="^(auto|lowering|claude|bedrock)$")] = "auto",
                      turns: Annotated[int | None, Field(ge=1, le=50)] = None,
                      target_generation: Annotated[str | None, Field(
                          description="trn1, trn2 or trn3")] = None,
                      ) -> dict[str, Any]:
        """Run the whole conversion pipeline; progress is reported per turn."""
        try:
            platform = checked_generation(target_generation, tools.settings.target)
        except ToolInputError as exc:
            raise ToolError(str(exc)) from exc
        from nkibot.verify import zygote

        # As `nkibot convert` does: the torch children fork from one warm sandbox.
        with zygote.session(_folders(tools, target), enabled=tools.settings.warm_sandbox):
            task = await _in_thread(functools.partial(tools.task, target, shapes, turns))
            return await _convert(tools, ctx, task, target, model, turns, platform)


def _folders(tools: Tools, target: str) -> tuple[Path, ...]:
    """The target's folder for the warm sandbox's view (none for a bad target: loading
    the task then says what is wrong with it)."""
    from nkibot.verify.reference import reference_folders

    try:
        file, _ = tools.workspace.target(target)
    except ToolInputError:
        return ()
    return reference_folders(file)


async def _convert(tools: Tools, ctx: Context, task: Any, target: str, model: str,
                   turns: int | None, platform: str) -> dict[str, Any]:
    from nkibot.convert.pipeline import ConvertOptions
    from nkibot.convert.pipeline import convert as run_pipeline
    from nkibot.results import TurnRecord

    stop = False
    pending: list[asyncio.Task[None]] = []
    total = float(turns or task.max_turns)

    def on_turn(record: TurnRecord) -> None:
        verdict = "verified" if record.verified else "not verified"
        pending.append(asyncio.get_running_loop().create_task(ctx.report_progress(
            float(record.turn), total, f"turn {record.turn} [{record.model}]: {verdict}")))

    try:
        result = await run_pipeline(task, settings=tools.settings, options=ConvertOptions(
            model=model, turns=turns, on_turn=on_turn, should_stop=lambda: stop, target=target,
            platform=platform))
    except asyncio.CancelledError:
        stop = True  # the loop's worker threads see it at their next turn boundary
        raise
    await asyncio.gather(*pending, return_exceptions=True)
    return result.model_dump(mode="json")


def _register_knowledge(server: MCPServer) -> None:
    from nkibot.convert.agent.knowledge import load_sections

    for section in load_sections():
        server.add_resource(TextResource(
            uri=f"nki://knowledge/{section.key}", name=section.key, title=section.title,
            description=f"NKI knowledge base: {section.title}", mime_type="text/markdown",
            text=section.render()))
