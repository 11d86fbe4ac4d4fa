"""The package layout: arrows point down, and no import circles.

Walks every module of `nkibot/` with `ast` and fails on any arrow the layout forbids and
on any circle. Every import counts: one inside a function (a lazy import is still an
arrow) and one under `if TYPE_CHECKING:` (the layout is about knowledge, not load order).
The only circles allowed are named in `ALLOWED_CYCLES`, and that list must shrink to
empty.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "nkibot"

#: Modules that do I/O or drive it; pure decisions may not import them.
IO_PACKAGES = (
    "nkibot.bot", "nkibot.runner", "nkibot.github", "nkibot.jobs.sqlite", "nkibot.jobs.sqs",
    "nkibot.jobs.state", "nkibot.jobs.factory", "nkibot.verify", "nkibot.convert",
    "nkibot.backends", "nkibot.sim", "nkibot.mcp", "nkibot.logging", "nkibot.doctor",
)


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    lineno: int
    top_level: bool

    def __str__(self) -> str:
        return f"{self.source}:{self.lineno} -> {self.target}"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, source: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def arrows_of(path: Path) -> list[Arrow]:
    source = module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    # Imports under `if TYPE_CHECKING:` at module level are typing-only, not arrows at run time,
    # but they still count for the layout: the layout is about knowledge, not load order.
    found: list[Arrow] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(node, source, path.name == "__init__.py")
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            if t == "nkibot" or t.startswith("nkibot."):
                found.append(Arrow(source, t, node.lineno, id(node) in top))
    return found


def existing_module(name: str) -> str:
    """`nkibot.a.b.C` -> the longest prefix that is a module or package of ours."""
    parts = name.split(".")
    while parts:
        rel = Path(*parts)
        base = PKG.parent / rel
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            return ".".join(parts)
        parts.pop()
    return name


ALL_ARROWS = [a for p in sorted(PKG.rglob("*.py")) for a in arrows_of(p)]

#: Circles still allowed, each a set of modules; a circle found must lie inside one entry.
#: Empty: the lowering's last circles (the convolution family, body <-> fused) are gone,
#: and `test_no_circle_is_allowed` keeps it so.
ALLOWED_CYCLES: dict[str, frozenset[str]] = {}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def forbidden(arrow: Arrow) -> str | None:
    s, t = arrow.source, existing_module(arrow.target)
    if within(s, "nkibot.sim") and not within(t, "nkibot.sim"):
        return "sim imports nothing else from nkibot"
    if within(s, "nkibot.handlers") and any(within(t, p) for p in IO_PACKAGES):
        return "handlers are pure decisions: no I/O modules"
    if within(s, "nkibot.verify") and within(t, "nkibot.convert"):
        return "verify never depends on convert"
    if within(s, "nkibot.github") and (within(t, "nkibot.runner") or within(t, "nkibot.bot")):
        return "the GitHub edge serves bot and runner, never imports them"
    for top in ("nkibot.bot", "nkibot.runner"):
        if within(t, top) and not within(s, top) and s != "nkibot.cli":
            return f"only nkibot.cli imports {top}"
    if s == "nkibot.results" and t != "nkibot.results":
        return "results.py is a leaf"
    if within(s, "nkibot.lowering") and not any(within(t, p) for p in LOWERING_MAY_IMPORT):
        return "the lowering imports only sim, task and results (never convert)"
    return None


class TestLayout:
    def test_every_module_parses_and_has_arrows(self) -> None:
        """The walk sees the package (a test that finds nothing would pass vacuously)."""
        assert len({a.source for a in ALL_ARROWS}) > 80

    @pytest.mark.parametrize("package", ["sim", "handlers", "verify", "github", "bot", "runner",
                                         "convert", "backends", "config", "jobs", "mcp",
                                         "lowering"])
    def test_no_forbidden_arrow(self, package: str) -> None:
        """No arrow from the 'never' list leaves this package."""
        bad = [f"{a}  ({why})" for a in ALL_ARROWS
               if within(a.source, f"nkibot.{package}") and (why := forbidden(a))]
        assert not bad, "\n".join(bad)

    def test_results_is_a_leaf(self) -> None:
        """The result vocabulary imports nothing above it."""
        assert not [a for a in ALL_ARROWS if a.source == "nkibot.results"
                    and existing_module(a.target) != "nkibot.results"]

    def test_no_cycles(self) -> None:
        """No circle of modules, counting every import (lazy and TYPE_CHECKING ones too),
        except inside an allowed entry."""
        cycles = [c for c in _cycles(module_graph(ALL_ARROWS)) if not allowed(c)]
        assert not cycles, "\n".join(" -> ".join(c) for c in cycles)

    def test_no_package_cycles(self) -> None:
        """No circle between the packages under nkibot/ (e.g. config <-> jobs), every
        import counted: a package's arrows all point one way."""
        graph: dict[str, set[str]] = {}
        for a in ALL_ARROWS:
            s, t = package_of(a.source), package_of(existing_module(a.target))
            if s != t:
                graph.setdefault(s, set()).add(t)
        cycles = _cycles(graph)
        assert not cycles, "\n".join(" -> ".join(c) for c in cycles)

    def test_no_circle_is_allowed(self) -> None:
        """The escape hatch is shut: no circle of modules is allowed anywhere."""
        assert ALLOWED_CYCLES == {}

    def test_lazy_and_typing_imports_count(self) -> None:
        """A circle closed only by a lazy or a TYPE_CHECKING import is still found."""
        arrows = [Arrow("nkibot.convert.agent.loop", "nkibot.convert.agent.optimize", 1, True),
                  Arrow("nkibot.convert.agent.optimize", "nkibot.convert.agent.loop", 9, False)]
        assert _cycles(module_graph(arrows)) == [
            ["nkibot.convert.agent.loop", "nkibot.convert.agent.optimize"]]
        assert not allowed(["nkibot.convert.agent.loop", "nkibot.convert.agent.optimize"])

    def test_runner_arrows_point_down(self) -> None:
        """Inside runner/, a module imports only modules on a lower layer: the worker runs a
        job, a job runs intake, a conversion or a re-profile, and integration; intake uses
        target resolution; resolution uses the workspace."""
        bad = [str(a) for a in ALL_ARROWS if within(a.source, "nkibot.runner")
               and within(t := existing_module(a.target), "nkibot.runner")
               and t != "nkibot.runner" and RUNNER_LAYERS[t] <= RUNNER_LAYERS[a.source]]
        assert not bad, "\n".join(bad)
        assert set(RUNNER_LAYERS) == {module_name(p) for p in (PKG / "runner").rglob("*.py")}

    def test_lowering_arrows_point_down(self) -> None:
        """Inside lowering/, a module imports only from its own layer or lower ones: the
        driver (lower, plan, ladder, stages) > emit/ > schedule/ > frontend/."""
        bad = [str(a) for a in ALL_ARROWS if within(a.source, "nkibot.lowering")
               and within(t := existing_module(a.target), "nkibot.lowering")
               and lowering_layer(t) > lowering_layer(a.source)]
        assert not bad, "\n".join(bad)

    def test_lowering_folders_hold_at_most_20_modules(self) -> None:
        """No folder of the lowering holds more than 20 modules (split it by what it owns)."""
        folders = {p.parent for p in (PKG / "lowering").rglob("*.py")}
        crowded = {str(f): n for f in folders if (n := len(list(f.glob("*.py")))) > 20}
        assert crowded == {}
        assert len(folders) >= 4

    def test_rule_catches_a_planted_arrow(self) -> None:
        """The checker itself fires: a sim -> runner arrow is reported."""
        assert forbidden(Arrow("nkibot.sim.tensor", "nkibot.runner.worker", 1, True))
        assert forbidden(Arrow("nkibot.verify.judge", "nkibot.convert.pipeline", 1, True))
        assert forbidden(Arrow("nkibot.github.publish", "nkibot.bot.app", 1, True))
        assert forbidden(Arrow("nkibot.handlers.decide", "nkibot.jobs.sqlite", 1, True))
        assert forbidden(Arrow("nkibot.convert.pipeline", "nkibot.runner.jobrun", 1, False))
        assert forbidden(Arrow("nkibot.cli", "nkibot.runner.cli", 1, True)) is None
        assert forbidden(Arrow("nkibot.lowering.lower", "nkibot.convert.pipeline", 1, False))
        assert lowering_layer("nkibot.lowering.frontend.ir") < lowering_layer(
            "nkibot.lowering.schedule.layout") < lowering_layer(
            "nkibot.lowering.emit.conv.conv") < lowering_layer("nkibot.lowering.plan")


#: What the lowering (a compiler of its own) may import from the rest of nkibot.
LOWERING_MAY_IMPORT = ("nkibot.lowering", "nkibot.sim", "nkibot.task", "nkibot.results")
#: lowering/'s layers, bottom first; a module not in one of these folders is the driver.
LOWERING_LAYERS = ("frontend", "schedule", "emit")


def lowering_layer(module: str) -> int:
    """`nkibot.lowering.emit.conv.conv` -> 2 (emit); the driver modules rank above all."""
    parts = module.split(".")
    sub = parts[2] if len(parts) > 2 else ""
    return LOWERING_LAYERS.index(sub) if sub in LOWERING_LAYERS else len(LOWERING_LAYERS)


#: runner/'s layers, top first: a module may import only from later layers
#: (`sim` is the deprecated re-export of nkibot.sim).
RUNNER_LAYERS = {f"nkibot.runner.{m}": layer for layer, names in enumerate((
    ("__init__", "cli"), ("worker",), ("jobrun",), ("reprofile", "integrate"), ("intake",),
    ("targets", "progress", "timings"), ("workspace", "sim"))) for m in names}
RUNNER_LAYERS["nkibot.runner"] = RUNNER_LAYERS.pop("nkibot.runner.__init__")


def module_graph(arrows: list[Arrow]) -> dict[str, set[str]]:
    """Who imports whom, every import counted (a package's own submodules excluded)."""
    graph: dict[str, set[str]] = {}
    for a in arrows:
        t = existing_module(a.target)
        if t != a.source and not within(a.source, t):
            graph.setdefault(a.source, set()).add(t)
    return graph


def package_of(module: str) -> str:
    """`nkibot.verify.check` -> `nkibot.verify` (top-level modules are their own)."""
    return ".".join(module.split(".")[:2])


def allowed(cycle: list[str]) -> bool:
    return any(set(cycle) <= entry for entry in ALLOWED_CYCLES.values())


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out
