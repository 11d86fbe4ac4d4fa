"""A reference's failure says what to do: which sandbox limit, which function, which option."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.convert.taskload import load_task
from nkibot.verify.hints import arity_hint, explain, limit_hint
from nkibot.verify.reference import ReferenceRunError, compute_reference

ARITY = '''import torch
class M(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)]
'''
GREEDY = '''import torch
class M(torch.nn.Module):
    def forward(self, x):
        return torch.empty(1 << 36) [:1] + x.sum()
def get_inputs():
    return [torch.randn(4, 8)]
'''


class TestHints:
    def test_file_size_limit_is_named(self) -> None:
        """numpy's short write under RLIMIT_FSIZE reads as the file-size limit, with --shape."""
        hint = limit_hint("OSError: 1073741824 requested and 536870880 written", 8192, 2048)
        assert hint is not None and "file-size limit was hit (2048 MiB per file" in hint
        assert "--shape" in hint

    def test_memory_limit_is_named(self) -> None:
        hint = limit_hint("RuntimeError: DefaultCPUAllocator: can't allocate memory: you "
                          "tried to allocate 68719476736 bytes", 8192, 2048)
        assert hint is not None and "memory limit was hit (8192 MiB" in hint

    def test_unrelated_errors_get_no_hint(self) -> None:
        assert explain("ValueError: bad shape", 8192, 2048) == "ValueError: bad shape"

    def test_init_arity(self) -> None:
        hint = arity_hint("TypeError: M.__init__() takes 1 positional argument but 2 were given")
        assert hint is not None and "get_init_inputs()" in hint


def _task(tmp_path: Path, source: str) -> object:
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    return load_task(path, "M", display_path="m.py").model_copy(update={"seeds": [0]})


class TestReference:
    def test_wrong_get_inputs_arity_points_at_get_inputs_and_shape(self,
                                                                    tmp_path: Path) -> None:
        """forward(x) fed three inputs: the error names get_inputs(), both counts, --shape."""
        with pytest.raises(ReferenceRunError) as caught:
            compute_reference(_task(tmp_path, ARITY), timeout_s=120.0)  # type: ignore[arg-type]
        text = str(caught.value)
        assert "forward() takes 2 positional arguments but 4 were given" in text
        assert "get_inputs() gives 3 input(s) but forward() takes 1" in text
        assert "--shape NAME=DIMSxDTYPE" in text

    def test_memory_limit_names_the_limit(self, tmp_path: Path) -> None:
        """A reference allocating 512 GiB under the sandbox's address-space limit."""
        with pytest.raises(ReferenceRunError) as caught:
            compute_reference(_task(tmp_path, GREEDY), timeout_s=120.0,  # type: ignore[arg-type]
                              memory_mb=2048)
        assert "the sandbox's memory limit was hit (2048 MiB" in str(caught.value)
