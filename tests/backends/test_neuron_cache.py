"""The NEFF cache: keys from source, input specs and SDK versions; atomic entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.backends.neuron.neff_cache import NeffCache, cache_key
from nkibot.results import CompileResult
from nkibot.task import InputSpec

SRC = "import nki\n@nki.jit\ndef k(a):\n    return a\n"
SPECS = [InputSpec(name="a", shape=(128, 512), dtype="float32")]
SDK = {"nki": "0.4.0", "neuronx-cc": "2.22.1"}


class TestCacheKey:
    def test_deterministic_hex(self) -> None:
        """The same inputs give the same 64-hex-digit key."""
        key = cache_key(SRC, SPECS, SDK)
        assert key == cache_key(SRC, SPECS, dict(reversed(list(SDK.items()))))
        assert len(key) == 64 and int(key, 16) >= 0

    def test_each_part_changes_the_key(self) -> None:
        """Source, shapes, dtype, SDK version and target each change the key."""
        base = cache_key(SRC, SPECS, SDK)
        others = {
            cache_key(SRC + "\n", SPECS, SDK),
            cache_key(SRC, [InputSpec(name="a", shape=(128, 256))], SDK),
            cache_key(SRC, [InputSpec(name="a", shape=(128, 512), dtype="bfloat16")], SDK),
            cache_key(SRC, SPECS, {**SDK, "neuronx-cc": "2.23.0"}),
            cache_key(SRC, SPECS, SDK, target="trn2"),
        }
        assert base not in others and len(others) == 5


class TestNeffCache:
    def test_miss_then_hit_with_neff(self, tmp_path: Path) -> None:
        """A stored compile comes back with its result and a copy of the NEFF."""
        cache = NeffCache(tmp_path / "cache")
        key = cache_key(SRC, SPECS, SDK)
        assert cache.get(key) is None
        neff = tmp_path / "kernel.neff"
        neff.write_bytes(b"NEFF\x00binary")
        result = CompileResult(ok=True, log="compiled", backend="neuron", compiler="neuronx-cc x")
        entry = cache.put(key, result, neff)
        assert entry.parent.name == key[:2]
        got = cache.get(key)
        assert got is not None
        stored, stored_neff = got
        assert stored == result
        assert stored_neff is not None and stored_neff.read_bytes() == b"NEFF\x00binary"

    def test_hit_without_neff(self, tmp_path: Path) -> None:
        """A compile that kept no NEFF is still cached, with no NEFF path."""
        cache = NeffCache(tmp_path)
        key = cache_key(SRC, SPECS, SDK)
        cache.put(key, CompileResult(ok=True))
        got = cache.get(key)
        assert got is not None and got[1] is None

    def test_second_put_of_same_key_is_fine(self, tmp_path: Path) -> None:
        """Two workers storing the same key both succeed; no temporary directory is left."""
        cache = NeffCache(tmp_path)
        key = cache_key(SRC, SPECS, SDK)
        cache.put(key, CompileResult(ok=True, log="one"))
        cache.put(key, CompileResult(ok=True, log="two"))
        got = cache.get(key)
        assert got is not None and got[0].log in ("one", "two")
        assert [p.name for p in (tmp_path / key[:2]).iterdir()] == [key]

    def test_failed_compiles_are_not_cached(self, tmp_path: Path) -> None:
        """Only successful compiles are stored: a failure must be retried."""
        with pytest.raises(ValueError):
            NeffCache(tmp_path).put(cache_key(SRC, SPECS, SDK), CompileResult(ok=False))

    def test_rejects_path_like_keys(self, tmp_path: Path) -> None:
        """A key that is not hex cannot escape the cache directory."""
        with pytest.raises(ValueError):
            NeffCache(tmp_path).entry_dir("../../etc/passwd")

    def test_corrupt_entry_is_a_miss(self, tmp_path: Path) -> None:
        """An unreadable result file counts as a miss, not a crash."""
        cache = NeffCache(tmp_path)
        key = cache_key(SRC, SPECS, SDK)
        cache.entry_dir(key).mkdir(parents=True)
        (cache.entry_dir(key) / "result.json").write_text("{not json")
        assert cache.get(key) is None
