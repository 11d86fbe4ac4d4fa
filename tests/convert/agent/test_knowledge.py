"""The knowledge base parses into keyword-tagged sections and is retrieved by ops and errors."""

from __future__ import annotations

from nkibot.convert.agent import knowledge

SAMPLE = """# Title

## First topic
keywords: always, tiling
Body one.

## Second topic
keywords: matmul, error, psum
Body two.
"""


class TestKnowledge:
    def test_parse_sections(self) -> None:
        """`## ` headings split sections; the keywords line is consumed, not rendered."""
        sections = knowledge.parse_sections("f", SAMPLE)
        assert [s.key for s in sections] == ["f/first-topic", "f/second-topic"]
        assert sections[1].keywords == frozenset({"matmul", "error", "psum"})
        assert "keywords" not in sections[1].render() and "Body two." in sections[1].render()

    def test_shipped_guides_cover_the_required_topics(self) -> None:
        """Tiling, matmul/PSUM, reductions, activations, dtypes and errors all exist."""
        stems = {s.key.split("/")[0] for s in knowledge.load_sections()}
        assert {"tiling", "matmul", "reductions", "activations", "dtypes", "errors"} <= stems
        assert knowledge.always_sections()

    def test_lookup_ranks_by_keywords(self) -> None:
        """lookup_nki('matmul psum') returns the matmul guide first."""
        assert knowledge.lookup("matmul psum").startswith("### Matmul with PSUM accumulation")

    def test_lookup_without_match_lists_topics(self) -> None:
        """An unknown topic gets the list of available topics instead of nothing."""
        text = knowledge.lookup("zzzz")
        assert "No NKI guide section matches" in text and "Softmax pattern" in text

    def test_error_retrieval_skips_sections_already_sent(self) -> None:
        """An error pulls its guide once; excluded sections are not repeated."""
        msg = "error [partition-dim]: partition dimension 256 exceeds 128"
        first = knowledge.sections_for_error(msg, exclude=set())
        assert [s.key for s in first] == ["errors/partition-dimension-over-128"]
        again = knowledge.sections_for_error(msg, exclude={first[0].key})
        assert first[0].key not in [s.key for s in again]
