"""Our NKI knowledge base: `nkibot/convert/knowledge/*.md`, split into retrievable sections.

Each file holds `## ` sections; a section's first line may be `keywords: a, b, c`. The
keywords name the reference ops (`matmul`, `softmax`), error words (`partition`, `psum`)
and topics (`tiling`) that should pull the section into a prompt. `always` marks sections
every system prompt carries. Retrieval is plain keyword overlap: the base is small and
hand-written, so a ranking model would add cost without changing what is retrieved.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

KNOWLEDGE_DIR = Path(__file__).resolve().parent.parent / "knowledge"
_WORD = re.compile(r"[a-z0-9_]+")


@dataclass(frozen=True)
class Section:
    """One `## ` section of a knowledge file."""

    key: str  # "<file stem>/<slug>", stable across runs: used to avoid repeating a section
    title: str
    keywords: frozenset[str]
    body: str

    def render(self) -> str:
        return f"### {self.title}\n{self.body.strip()}\n"


def _slug(text: str) -> str:
    return "-".join(_WORD.findall(text.lower()))


def parse_sections(stem: str, text: str) -> list[Section]:
    """Split one knowledge file into sections (pure; the file's `# ` title is skipped)."""
    sections: list[Section] = []
    for chunk in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        title, _, rest = chunk.partition("\n")
        lines = rest.strip("\n").splitlines()
        keywords: set[str] = set()
        if lines and lines[0].lower().startswith("keywords:"):
            keywords |= {w.strip().lower() for w in lines[0][9:].split(",") if w.strip()}
            lines = lines[1:]
        sections.append(
            Section(f"{stem}/{_slug(title)}", title.strip(), frozenset(keywords), "\n".join(lines))
        )
    return sections


@functools.cache
def load_sections(directory: Path = KNOWLEDGE_DIR) -> tuple[Section, ...]:
    found: list[Section] = []
    for path in sorted(directory.glob("*.md")):
        found.extend(parse_sections(path.stem, path.read_text(encoding="utf-8")))
    return tuple(found)


def always_sections(sections: tuple[Section, ...] | None = None) -> list[Section]:
    return [s for s in (sections or load_sections()) if "always" in s.keywords]


def sections_for_ops(
    ops: set[str], sections: tuple[Section, ...] | None = None
) -> list[Section]:
    """Sections whose keywords name one of the reference's ops (`always` ones excluded)."""
    wanted = {op.lower() for op in ops}
    return [
        s for s in (sections or load_sections())
        if "always" not in s.keywords and s.keywords & wanted
    ]


def _score(section: Section, words: set[str]) -> int:
    title_words = set(_WORD.findall(section.title.lower()))
    return 2 * len(section.keywords & words) + len(title_words & words)


def lookup(topic: str, *, limit: int = 2, sections: tuple[Section, ...] | None = None) -> str:
    """The answer to the model's `lookup_nki` tool: the best-matching sections, or a menu."""
    pool = sections or load_sections()
    words = set(_WORD.findall(topic.lower()))
    ranked = sorted(pool, key=lambda s: -_score(s, words))
    hits = [s for s in ranked[:limit] if _score(s, words) > 0]
    if not hits:
        menu = ", ".join(sorted({s.title for s in pool}))
        return f"No NKI guide section matches {topic!r}. Available topics: {menu}."
    return "\n".join(s.render() for s in hits)


def sections_for_error(
    text: str, *, exclude: set[str], limit: int = 1, sections: tuple[Section, ...] | None = None
) -> list[Section]:
    """Sections about an error's words (rule names, buffers), skipping ones already sent.

    Only sections tagged `error` qualify: general guides already sit in the system prompt.
    """
    words = set(_WORD.findall(text.lower()))
    pool = [
        s for s in (sections or load_sections())
        if "error" in s.keywords and s.key not in exclude
    ]
    ranked = sorted(pool, key=lambda s: -len((s.keywords - {"error"}) & words))
    return [s for s in ranked[:limit] if (s.keywords - {"error"}) & words]
