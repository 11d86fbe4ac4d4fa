"""Discovery: what a file offers, target resolution with candidates, input-spec precedence."""

from __future__ import annotations

import textwrap

import pytest

from nkibot.config.targets import ShapeOverride
from nkibot.convert.discovery import (
    TargetError,
    choose_shapes,
    discover,
    resolve,
    suggest_paths,
    triton_launcher,
    triton_launchers,
    triton_reference,
)

MODELS = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from torch import nn as tnn


    class Child(Norm):          # a subclass defined before its base
        pass


    class Norm(nn.Module):
        def forward(self, x):
            return x


    class Full(torch.nn.Module):
        def forward(self, x):
            return x


    class Alias(tnn.Module):
        def forward(self, x):
            return x


    class NoForward(nn.Module):
        def helper(self):
            return 1


    class Plain:
        def forward(self, x):
            return x


    def helper(x):
        return x


    def get_inputs():
        return [torch.randn(4, 4)]


    def get_init_inputs():
        return []
''')

TRITON = textwrap.dedent('''
    import triton
    import triton.language as tl
    from triton import jit


    @triton.jit
    def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        pass


    @jit
    def mul_kernel(x_ptr):
        pass


    def launcher(x):
        return x
''')

LEGACY = textwrap.dedent('''
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def old_kernel(a):
        return a
''')


class TestDiscover:
    def test_finds_modules_with_forward(self) -> None:
        """Direct nn.Module / torch.nn.Module bases and same-file subclasses are modules."""
        found = discover(MODELS)
        assert [c.name for c in found.of_kind("module")] == ["Child", "Norm", "Full", "Alias"]
        assert {c.name for c in found.of_kind("class")} == {"NoForward", "Plain"}
        assert found.has_get_inputs and found.has_get_init_inputs
        assert not found.legacy_dialect

    def test_finds_triton_kernels(self) -> None:
        """@triton.jit and `from triton import jit` decorated functions are Triton targets."""
        found = discover(TRITON)
        assert [c.name for c in found.of_kind("triton")] == ["add_kernel", "mul_kernel"]
        assert [c.name for c in found.of_kind("function")] == ["launcher"]

    def test_reports_legacy_dialect(self) -> None:
        """neuronxcc.nki kernels are recognised, and resolving one says it is legacy."""
        found = discover(LEGACY)
        assert found.legacy_dialect and found.of_kind("legacy")[0].name == "old_kernel"
        with pytest.raises(TargetError, match=r"legacy `neuronxcc\.nki` dialect"):
            resolve(found, "k.py", "old_kernel")

    def test_syntax_errors_are_target_errors(self) -> None:
        """A file that does not parse gives a TargetError naming the line."""
        with pytest.raises(TargetError, match="does not parse as Python"):
            discover("class A(:\n")


class TestResolve:
    def test_resolves_a_module(self) -> None:
        """An existing module resolves to its candidate with its line."""
        cand = resolve(discover(MODELS), "m.py", "Norm")
        assert cand.kind == "module" and cand.line > 1

    def test_missing_target_suggests_close_names(self) -> None:
        """A misspelt name gets a "did you mean" with the closest candidates first."""
        with pytest.raises(TargetError) as info:
            resolve(discover(MODELS), "m.py", "Nrom")
        assert info.value.message == "`m.py` has no `Nrom`"
        assert info.value.hint.startswith("did you mean `Norm`")

    def test_plain_function_and_non_module_class_are_refused(self) -> None:
        """A plain function or a non-Module class is explained, with the real candidates."""
        with pytest.raises(TargetError, match="a plain function") as info:
            resolve(discover(MODELS), "m.py", "helper")
        assert "Norm" in info.value.hint
        with pytest.raises(TargetError, match=r"not an nn\.Module"):
            resolve(discover(MODELS), "m.py", "Plain")

    def test_ambiguous_target_is_refused(self) -> None:
        """A name defined twice is ambiguous and the lines are listed."""
        src = "import torch.nn as nn\nclass A(nn.Module):\n    def forward(self, x): return x\n" * 2
        with pytest.raises(TargetError, match=r"more than once .*lines 2, 5"):
            resolve(discover(src), "m.py", "A")

    def test_missing_file_suggests_paths(self) -> None:
        """A wrong path is matched against the repository's Python files."""
        assert "`src/models/norm.py`" in suggest_paths("src/model/norm.py",
                                                       ["src/models/norm.py", "setup.py"])


class TestInputsAndReferences:
    def test_shape_precedence(self) -> None:
        """--shape beats the issue's yaml, which beats the repo config, then get_inputs()."""
        cmd, issue, conf = ([ShapeOverride(name=n, shape=(1,))] for n in ("c", "i", "r"))
        assert choose_shapes(cmd, issue, conf) == (cmd, "--shape")
        assert choose_shapes([], issue, conf) == (issue, "issue")
        assert choose_shapes([], [], conf) == (conf, "repo config")
        assert choose_shapes([], [], []) == ([], "get_inputs()")

    def test_triton_reference_from_config(self) -> None:
        """A Triton target uses the PyTorch reference named in the repo config."""
        refs = {"k.py::add_kernel": "ref.py::Add"}
        assert triton_reference("k.py::add_kernel", refs, triton_installed=False) == "ref.py::Add"
        assert triton_reference("k.py::other", refs, triton_installed=True) is None

    def test_triton_without_reference_or_triton_says_what_is_needed(self) -> None:
        """Without triton and without a configured reference, the hint shows the yaml to add."""
        with pytest.raises(TargetError) as info:
            triton_reference("k.py::add_kernel", {}, triton_installed=False)
        assert "no `triton`" in info.value.message
        assert "references:\n  k.py::add_kernel: path/to/reference.py::Module" in info.value.hint


LAUNCHERS = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pass


    def helper(x):
        return x.numel()


    def run_twice(x, out):
        relu_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
        relu_kernel[(1,)](out, out, x.numel(), BLOCK=1024)
        return out


    def triton_relu(x):
        out = x.new_empty(x.shape)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out


    def get_inputs():
        out = None
        relu_kernel[(1,)](None, out, 0, BLOCK=1)
        return []
''')


class TestTritonLauncher:
    def test_finds_functions_that_launch_the_kernel(self) -> None:
        """Only top-level plain functions calling `kernel[grid](...)` are launchers."""
        assert set(triton_launchers(LAUNCHERS, "relu_kernel")) == {"run_twice", "triton_relu"}

    def test_prefers_a_kernelbench_style_name(self) -> None:
        """`triton_relu` for `relu_kernel` beats an earlier launcher with another name."""
        assert triton_launchers(LAUNCHERS, "relu_kernel") == ["triton_relu", "run_twice"]
        assert triton_launcher(LAUNCHERS, "relu_kernel", "k.py") == "triton_relu"

    def test_falls_back_to_source_order(self) -> None:
        """Without a KernelBench-style name, the first launcher in the file is chosen."""
        source = LAUNCHERS.replace("def triton_relu", "def zz_last")
        assert triton_launcher(source, "relu_kernel", "k.py") == "run_twice"

    def test_no_launcher_says_what_to_add(self) -> None:
        """A kernel nothing launches is refused with both ways to fix it."""
        with pytest.raises(TargetError) as info:
            triton_launcher(TRITON, "add_kernel", "k.py")
        assert "no function in that file launches it" in info.value.message
        assert "add a plain function" in info.value.hint
        assert "references:\n  k.py::add_kernel: path/to/reference.py::Module" in info.value.hint
