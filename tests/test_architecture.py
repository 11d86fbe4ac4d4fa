"""docs/architecture.md matches the code: every package's documented imports cover its real
ones (every import counted, as in test_layout), and every package is described."""

from __future__ import annotations

import re

from tests.test_layout import ALL_ARROWS, PKG, existing_module

DOC = PKG.parent / "docs" / "architecture.md"
#: The section that describes the top-level helper modules together.
HELPERS = ("results", "task", "redact", "logging", "doctor")


def documented() -> dict[str, set[str]]:
    """{package: what its **May import** line allows}, from the headings of the page."""
    allowed: dict[str, set[str]] = {}
    names: tuple[str, ...] = ()
    continuing = False
    for line in DOC.read_text("utf-8").splitlines():
        heading = re.match(r"### `nkibot/(\w+)(?:/|\.py)`", line)
        if heading or line.startswith("#"):
            names = (heading[1],) if heading else (
                HELPERS if line.startswith("### Leaves and helpers") else ())
        if line.startswith("**May import:**") or (continuing and line.strip()):
            for name in names:
                allowed.setdefault(name, set()).update(re.findall(r"`(\w+)`", line))
            continuing = True
        if not line.strip():
            continuing = False
    return allowed


def actual() -> dict[str, set[str]]:
    """{package or top-level module: the nkibot packages it imports}."""
    graph: dict[str, set[str]] = {}
    for a in ALL_ARROWS:
        source = a.source.split(".")[1] if "." in a.source else ""
        target = existing_module(a.target).split(".")
        if not source or len(target) < 2 or target[1] == source:
            continue
        graph.setdefault(source, set()).add(target[1])
    return graph


def test_every_package_is_described() -> None:
    """Each package and top-level module under nkibot/ has a section with its imports."""
    ours = {p.stem if p.is_file() else p.name for p in PKG.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert ours - set(documented()) == set(), "describe it in docs/architecture.md"


def test_documented_imports_cover_the_code() -> None:
    """No package imports something its section does not list."""
    doc = documented()
    extra = {name: sorted(found - doc.get(name, set())) for name, found in actual().items()
             if found - doc.get(name, set())}
    assert extra == {}, ("a package imports what docs/architecture.md does not list: add it "
                         "to that package's **May import** line (or drop the import)")


def test_the_check_reads_the_page() -> None:
    """The parser finds the sections (an empty parse would pass vacuously)."""
    doc = documented()
    assert doc["sim"] == set() and "verify" in doc["backends"] and len(doc) >= 15
