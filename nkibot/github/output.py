"""The check-run `output` object and GitHub's size limits on it (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field

#: GitHub's limit on a check run's summary and text (characters).
GITHUB_TEXT_LIMIT = 65_535
#: GitHub accepts at most 50 annotations per check-run create/update request.
ANNOTATIONS_PER_REQUEST = 50


@dataclass(frozen=True)
class CheckRunOutput:
    """The `output` object of a check run; annotations go out in batches of 50."""

    title: str
    summary: str
    text: str = ""
    annotations: list[dict[str, object]] = field(default_factory=list)

    def batches(self) -> list[list[dict[str, object]]]:
        return annotation_batches(self.annotations)

    def payload(self, annotations: list[dict[str, object]] | None = None) -> dict[str, object]:
        """The JSON `output` for one request, with one batch (default: the first)."""
        body: dict[str, object] = {"title": self.title, "summary": self.summary}
        if self.text:
            body["text"] = self.text
        batch = annotations if annotations is not None else (self.batches() or [[]])[0]
        if batch:
            body["annotations"] = batch
        return body


def annotation_batches(annotations: list[dict[str, object]],
                       size: int = ANNOTATIONS_PER_REQUEST) -> list[list[dict[str, object]]]:
    return [annotations[i:i + size] for i in range(0, len(annotations), size)]


def cut(text: str, limit: int = GITHUB_TEXT_LIMIT, *, what: str = "text") -> str:
    """`text` itself when it fits, else its head and a note saying how much was cut."""
    if len(text) <= limit:
        return text
    note_tpl = ("\n\n> **Note:** {n} characters of the {what} were cut to fit GitHub's "
                "65,535-character limit; `nkibot convert --json` and report.md keep all of it.\n")
    note = note_tpl.format(n=len(text), what=what)
    keep = limit - len(note)
    return text[:keep] + note_tpl.format(n=len(text) - keep, what=what)
