"""Target and shape syntax: validated purely, rejecting anything outside the repository."""

from __future__ import annotations

import pytest

from nkibot.config.targets import TargetError, parse_shape, validate_target


class TestValidateTarget:
    @pytest.mark.parametrize("good", ["a.py::A", "src/models/norm.py::RMSNorm",
                                      "k/add-kernels_v2.py::add_kernel", " x.py::_y "])
    def test_accepts(self, good: str) -> None:
        """Relative `.py` paths with an identifier are accepted (trimmed)."""
        assert validate_target(good) == good.strip()

    @pytest.mark.parametrize("bad", [
        "../a.py::A", "src/../../a.py::A", "/abs/a.py::A", "C:/a.py::A", "a.txt::A",
        "a.py::", "a.py::1A", "a.py::A.B", "a.py", "src//a.py::A", "./a.py::A",
        "a b.py::A", "a.py::A::B", "\\\\server\\a.py::A"])
    def test_rejects(self, bad: str) -> None:
        """Absolute paths, `..`, non-.py files and non-identifiers are refused with a reason."""
        with pytest.raises(TargetError):
            validate_target(bad)


class TestParseShape:
    def test_forms(self) -> None:
        """DIMS with an optional dtype alias; float32 by default."""
        assert parse_shape("x=4x128xbf16").model_dump() == {
            "name": "x", "shape": (4, 128), "dtype": "bfloat16"}
        assert parse_shape("w=7").dtype == "float32"

    @pytest.mark.parametrize("bad", ["x", "=4", "x=", "x=4xbogus", "x=0", "x=" + "2x" * 9 + "2",
                                     "1x=4", "x=-4"])
    def test_rejects(self, bad: str) -> None:
        """Malformed shapes raise TargetError."""
        with pytest.raises(TargetError):
            parse_shape(bad)
