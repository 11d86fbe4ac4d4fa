"""The roofline over the operator's FLOPs (nkibot.sim.cost.quick.operator_roofline)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nkibot.sim.cost.constants import target
from nkibot.sim.cost.quick import operator_roofline


def _model(time_us: float, hbm_bytes: int, executed: float) -> dict[str, object]:
    return {"label": "model estimate (trn1), not a measurement", "target": "trn1",
            "time_us": time_us, "hbm_bytes": hbm_bytes, "flops": executed,
            "roofline_us": 0.0, "roofline_bound": "compute", "roofline_fraction": 0.9}


class TestOperatorRoofline:
    def test_wasted_matmul_work_no_longer_raises_the_fraction(self) -> None:
        """A kernel that executes 128x the operator's FLOPs (a diagonal matrix standing in
        for an elementwise product) is judged by the operator's FLOPs and its I/O bytes."""
        t = target("trn1")
        hbm = 4 * 1024 * 1024
        mem_us = hbm / (t.dma_queue_bw * t.dma_queues) / 1000.0
        out = operator_roofline(_model(4 * mem_us, hbm, 1e12), 1e6, low_precision=False)
        assert out["roofline_bound"] == "memory" and out["executed_flops"] == 1e12
        assert np.isclose(float(out["roofline_fraction"]), 0.25, rtol=1e-3)
        assert "operator" in str(out["roofline_basis"])

    def test_compute_bound_uses_the_dtype_peak(self) -> None:
        """fp32 operators are bounded by the fp32 peak, bf16 ones by the bf16 peak."""
        t = target("trn1")
        flops = 2.0 * 4096 ** 3
        fp32_us = flops / (t.fp32_tflops * 1e3) / 1000.0
        fp32 = operator_roofline(_model(2 * fp32_us, 1024, flops), flops, low_precision=False)
        bf16 = operator_roofline(_model(2 * fp32_us, 1024, flops), flops, low_precision=True)
        assert fp32["roofline_bound"] == "compute"
        assert np.isclose(float(fp32["roofline_fraction"]), 0.5, rtol=1e-3)
        assert float(bf16["roofline_fraction"]) < float(fp32["roofline_fraction"]) / 3

    def test_foreign_dicts_pass_through(self) -> None:
        """A dict that is not one of our reports (an error entry) is returned unchanged."""
        err = {"error": "ConstraintError: x"}
        assert operator_roofline(err, 1e9, low_precision=False) is err


class TestReferenceCountsFlops:
    def test_reference_set_carries_the_forward_flops(self, tmp_path: Path) -> None:
        """The sandboxed reference counts its forward's FLOPs once: 2*M*K*N for a matmul."""
        from nkibot.task import InputSpec, Task
        from nkibot.verify.reference import compute_reference

        source = ("import torch\nclass Model(torch.nn.Module):\n"
                  "    def forward(self, a, b):\n        return a @ b\n")
        task = Task(reference_source=source, entry_point="Model", source_path="mm.py",
                    inputs=[InputSpec(name="a", shape=(16, 32)),
                            InputSpec(name="b", shape=(32, 8))])
        with compute_reference(task) as reference:
            assert reference.flops == 2 * 16 * 32 * 8
