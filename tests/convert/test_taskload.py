"""Loading tasks from reference files (nkibot.convert.taskload)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nkibot.config.targets import parse_shape
from nkibot.convert.taskload import TaskLoadError, load_task
from nkibot.task import Task, Tolerance, describe_kernel_args

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"


class TestParseShape:
    def test_with_dtype(self) -> None:
        """NAME=DIMSxDTYPE gives the name, the dims and the dtype."""
        o = parse_shape("x=128x256xbfloat16")
        assert (o.name, o.shape, o.dtype) == ("x", (128, 256), "bfloat16")

    def test_dtype_defaults_to_float32(self) -> None:
        """Without a dtype the input is float32."""
        assert parse_shape("hidden=4096").model_dump() == {
            "name": "hidden", "shape": (4096,), "dtype": "float32"}

    @pytest.mark.parametrize("bad", ["x", "x=", "x=0x4", "x=4xfloat128", "=4x4", "x=4xx4"])
    def test_rejects(self, bad: str) -> None:
        """Malformed overrides raise ValueError with the expected syntax."""
        with pytest.raises(ValueError, match="x"):
            parse_shape(bad)


class TestLoadTask:
    def test_kernelbench_file(self) -> None:
        """A KernelBench file yields inputs from get_inputs() and empty init args."""
        task = load_task(KERNELS / "relu_ref.py", "Model", turns=3, display_path="relu_ref.py")
        assert task.inputs[0].model_dump() == {"name": "x", "shape": (256, 64),
                                               "dtype": "float32"}
        assert task.has_get_inputs and task.kind == "module" and task.init_args == []
        assert task.max_turns == 3 and task.source_path == "relu_ref.py"
        assert task.reference_file == str((KERNELS / "relu_ref.py").resolve())
        assert "torch.relu" in task.reference_source

    def test_explicit_shapes_and_state_dict(self) -> None:
        """Without get_inputs, --shape gives each input; the state_dict comes in order."""
        task = load_task(KERNELS / "scale_ref.py", "ScaleShift",
                         shapes=[parse_shape("x=128x64"), parse_shape("y=128x64xbfloat16")],
                         tolerance=Tolerance(atol=0.1, rtol=0.0))
        assert [(s.name, s.shape, s.dtype) for s in task.inputs] == [
            ("x", (128, 64), "float32"), ("y", (128, 64), "bfloat16")]
        assert [(s.name, s.shape) for s in task.state_dict] == [("weight", (64,)),
                                                                 ("shift", (64,))]
        assert not task.has_get_inputs
        assert task.tolerance_for("bfloat16") == Tolerance(atol=0.1, rtol=0.0)
        args = describe_kernel_args(task)
        assert [(a.name, a.source, a.index, a.key) for a in args] == [
            ("x", "input", 0, None), ("y", "input", 1, None),
            ("weight", "state_dict", None, "weight"), ("shift", "state_dict", None, "shift")]

    def test_plain_function(self) -> None:
        """A plain function is an entry point too: kind function, no state."""
        task = load_task(KERNELS / "scale_ref.py", "not_a_model", shapes=[parse_shape("x=4x4")])
        assert task.kind == "function" and task.state_dict == []
        assert [s.name for s in task.inputs] == ["x"]

    def test_missing_shapes(self) -> None:
        """A module without get_inputs and without --shape names what to pass."""
        with pytest.raises(TaskLoadError, match=r"no shape for x, y.*--shape"):
            load_task(KERNELS / "scale_ref.py", "ScaleShift")

    def test_unknown_shape_name(self) -> None:
        """A --shape for a name the forward does not take lists the real inputs."""
        with pytest.raises(TaskLoadError, match=r"z are not inputs.*forward inputs: x"):
            load_task(KERNELS / "relu_ref.py", "Model", shapes=[parse_shape("z=4x4")])

    def test_missing_entry_point_lists_candidates(self) -> None:
        """A wrong name fails fast (no child) with the classes and functions found."""
        with pytest.raises(TaskLoadError) as info:
            load_task(KERNELS / "scale_ref.py", "Scale")
        assert "ScaleShift" in info.value.hint and "not_a_model" in info.value.hint

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is a TaskLoadError, not a traceback."""
        with pytest.raises(TaskLoadError, match="does not exist"):
            load_task(tmp_path / "nope.py", "Model")

    def test_import_error_in_reference(self, tmp_path: Path) -> None:
        """A reference that fails to import reports the child's error."""
        bad = tmp_path / "bad.py"
        bad.write_text("import no_such_module_here\nclass Model:\n    pass\n")
        with pytest.raises(TaskLoadError, match="no_such_module_here"):
            load_task(bad, "Model")


TRITON = Path(__file__).resolve().parents[1] / "fixtures" / "triton"


class TestLoadTritonTask:
    @pytest.fixture(autouse=True)
    def _triton(self) -> None:
        pytest.importorskip("triton", reason="Triton targets need `triton` (the test extra)")

    def test_kernel_runs_through_its_launcher(self) -> None:
        """A @triton.jit name becomes a triton Task whose entry point is its launcher."""
        task = load_task(TRITON / "add.py", "add_kernel", display_path="add.py")
        assert task.kind == "triton" and task.entry_point == "add"
        assert [(s.name, s.shape) for s in task.inputs] == [("x", (256, 64)), ("y", (256, 64))]
        assert task.has_get_inputs and task.state_dict == []

    def test_shape_override_applies_to_launcher_inputs(self) -> None:
        """--shape names the launcher's parameters, as for a function entry point."""
        task = load_task(TRITON / "add.py", "add_kernel",
                         shapes=[parse_shape("x=128x32"), parse_shape("y=128x32")])
        assert [s.shape for s in task.inputs] == [(128, 32), (128, 32)]

    def test_kernel_without_launcher_says_what_to_add(self) -> None:
        """A kernel nothing in the file launches is refused with the two ways to fix it."""
        with pytest.raises(TaskLoadError) as info:
            load_task(TRITON / "add.py", "orphan_kernel")
        assert "no function in that file launches it" in info.value.message
        assert "add a plain function" in info.value.hint and "references:" in info.value.hint


class TestDescribeKernelArgs:
    def test_state_keys_become_identifiers(self) -> None:
        """Dotted state_dict keys become unique Python identifiers; the key is kept."""
        task = Task.model_validate({
            "reference_source": "", "entry_point": "M",
            "inputs": [{"name": "x", "shape": [4]}],
            "state_dict": [{"name": "layer.0.weight", "shape": [4]},
                           {"name": "layer_0.weight", "shape": [4]},
                           {"name": "x", "shape": [1]}]})
        args = describe_kernel_args(task)
        assert [a.name for a in args] == ["x", "layer_0_weight", "layer_0_weight_", "x_"]
        assert [a.key for a in args[1:]] == ["layer.0.weight", "layer_0.weight", "x"]


class TestModuleInTempRoot:
    def test_module_directly_in_the_temp_root_loads_and_runs(self) -> None:
        """A module saved straight into /tmp loads and its reference runs: the child gets a
        copy, since binding /tmp read-only would hide the run's own writable folders."""
        import tempfile

        from nkibot.verify.reference import compute_reference, shareable_folder

        source = (KERNELS / "relu_ref.py").read_text()
        with tempfile.NamedTemporaryFile("w", suffix=".py", dir=tempfile.gettempdir(),
                                         delete=False) as handle:
            handle.write(source)
        path = Path(handle.name)
        try:
            assert not shareable_folder(path.parent) and shareable_folder(KERNELS)
            task = load_task(path, "Model", turns=1, display_path=path.name)
            with compute_reference(task) as reference:
                assert len(reference.trials) >= 1
        finally:
            path.unlink()
