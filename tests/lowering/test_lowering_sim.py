"""Every emitter on the simulator against PyTorch: aligned and ragged shapes, fp32 and bf16."""

from __future__ import annotations

import pytest

from tests.lowering.lowering_support import check_on_sim, make_task, module_source

ALIGNED, RAGGED = (256, 64), (200, 72)

# name -> (forward expression, forward args, input domain, __init__ lines)
POINTWISE = {
    "add_mul_scalar": ("x * 2.5 + y - 1", "x, y", "normal", ""),
    "div_pow_neg": ("-(x / (y.abs() + 1)) ** 2 + x ** 3", "x, y", "normal", ""),
    "abs_clamp": ("torch.clamp(x.abs(), min=0.2, max=1.5)", "x", "normal", ""),
    "where": ("torch.where(x > y, x, y * 0.5)", "x, y", "normal", ""),
    "exp_log": ("torch.log(x) + torch.exp(-x)", "x", "positive", ""),
    "sqrt_rsqrt_recip": ("torch.sqrt(x) + torch.rsqrt(x) - torch.reciprocal(x)", "x",
                         "positive", ""),
    "relu": ("torch.relu(x)", "x", "normal", ""),
    "leaky_relu": ("F.leaky_relu(x, 0.05)", "x", "normal", ""),
    "sigmoid_tanh": ("torch.sigmoid(x) * torch.tanh(x)", "x", "normal", ""),
    "gelu_erf": ("F.gelu(x)", "x", "normal", ""),
    "gelu_tanh": ("F.gelu(x, approximate='tanh')", "x", "normal", ""),
    "silu_swish": ("F.silu(x) + x * torch.sigmoid(x)", "x", "normal", ""),
    "mish": ("F.mish(x)", "x", "normal", ""),
    "softplus": ("F.softplus(x)", "x", "normal", ""),
    "softsign": ("F.softsign(x)", "x", "normal", ""),
    "elu_selu": ("F.elu(x, alpha=0.8) + torch.selu(x)", "x", "normal", ""),
    "hardsigmoid_hardswish": ("F.hardsigmoid(x) + F.hardswish(x)", "x", "normal", ""),
    "hardtanh": ("F.hardtanh(x, -0.5, 0.75)", "x", "normal", ""),
    "bias_broadcast": ("x * self.scale + self.shift", "x", "normal",
                       "        self.scale = nn.Parameter(torch.randn(DIM))\n"
                       "        self.shift = nn.Parameter(torch.randn(DIM))"),
}
ROWWISE = {
    "sum_mean": ("x.sum(dim=-1) + x.mean(dim=-1)", "x", "normal", ""),
    "max_min_prod": ("torch.amax(x, dim=-1) - torch.min(x, dim=-1)[0] + "
                     "torch.prod(x * 0.1 + 1, dim=-1)", "x", "normal", ""),
    "var_std": ("torch.var(x, dim=-1, keepdim=True) + x.std(dim=-1, keepdim=True)", "x",
                "normal", ""),
    "softmax": ("torch.softmax(x, dim=-1)", "x", "normal", ""),
    "log_softmax": ("F.log_softmax(x, dim=1)", "x", "normal", ""),
    "logsumexp": ("torch.logsumexp(x, dim=-1)", "x", "normal", ""),
    "rmsnorm": ("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w", "x",
                "normal", "        self.w = nn.Parameter(torch.randn(DIM))"),
    "layernorm": ("self.ln(x)", "x", "normal",
                  "        self.ln = nn.LayerNorm(DIM)\n"
                  "        nn.init.normal_(self.ln.weight)\n        nn.init.normal_(self.ln.bias)"),
    "layernorm_plain": ("F.layer_norm(x, (x.shape[-1],))", "x", "normal", ""),
    "l1_l2_norm": ("F.normalize(x, p=2, dim=1) + x / x.abs().sum(dim=1, keepdim=True)", "x",
                   "normal", ""),
    "frobenius": ("x / torch.norm(x, p='fro')", "x", "normal", ""),
    "mse": ("F.mse_loss(x, y)", "x, y", "normal", ""),
    "huber": ("F.smooth_l1_loss(x, y) + F.huber_loss(x, y, delta=0.5)", "x, y", "normal", ""),
    "hinge": ("torch.mean(torch.clamp(1 - x * y, min=0))", "x, y", "normal", ""),
    "kl_div": ("F.kl_div(torch.log(x), y, reduction='batchmean')", "x, y", "probability", ""),
    # fused forms: affine chains under activations, row sums riding on them (fused.py)
    "fused_affine_activation": ("torch.exp(2 - x * 0.5).sum(-1, keepdim=True) + torch.tanh("
                                "(x - x.mean(-1, keepdim=True)) * 0.3 + 1)", "x", "normal", ""),
    "fused_row_scale_bias": ("torch.sigmoid(x * x.amax(-1, keepdim=True) - 0.5) + (1 - x) / "
                             "x.abs().sum(-1, keepdim=True)", "x", "normal", ""),
    "fused_scalar_tensor_tensor": ("torch.clamp(x * 0.5 - 1, min=-0.7) * y + (2 - y) - "
                                   "torch.maximum(x, y * 3)", "x, y", "normal", ""),
}
MATMUL = {
    "mm": ("torch.matmul(x, y)", [(200, 300), (300, 600)], ""),
    "mm_aligned": ("x @ y", [(256, 128), (128, 512)], ""),
    "bmm": ("torch.bmm(x, y)", [(3, 130, 70), (3, 70, 90)], ""),
    "transposed_a": ("torch.matmul(x.T, y)", [(300, 200), (300, 100)], ""),
    "transposed_b": ("torch.matmul(x, y.transpose(0, 1))", [(200, 300), (150, 300)], ""),
    "transposed_ab": ("x.t() @ y.t()", [(130, 140), (150, 130)], ""),
    "matrix_vector": ("torch.matmul(x, y)", [(200, 64), (64, 1)], ""),
}
LINEAR_INIT = "        self.fc = nn.Linear(DIM, 160)"
LINEARS = {
    "linear_bias": ("self.fc(x)", LINEAR_INIT),
    "linear_relu_scale": ("torch.relu(self.fc(x)) * 0.5 - 1", LINEAR_INIT),
    "linear_gelu_3d": ("F.gelu(self.fc(x))", LINEAR_INIT),
}


def _task(entry: tuple[str, str, str, str], shape: tuple[int, int], dtype: str) -> tuple:
    expr, args, domain, init = entry
    source = module_source(expr, args=args, init=init.replace("DIM", str(shape[-1])))
    count = len(args.split(","))
    return make_task(source, [shape] * count, dtype), domain


class TestPointwiseOnSim:
    """Elementwise chains and activations match PyTorch."""

    @pytest.mark.parametrize("name", sorted(POINTWISE))
    @pytest.mark.parametrize("shape", [ALIGNED, RAGGED], ids=["aligned", "ragged"])
    def test_fp32(self, name: str, shape: tuple[int, int]) -> None:
        """The fp32 kernel matches PyTorch within 1e-3 at aligned and ragged shapes."""
        task, domain = _task(POINTWISE[name], shape, "float32")
        check_on_sim(task, domain)

    @pytest.mark.parametrize("name", sorted(POINTWISE))
    def test_bf16(self, name: str) -> None:
        """bf16 inputs are computed in fp32 and stored as PyTorch's output dtype."""
        task, domain = _task(POINTWISE[name], RAGGED, "bfloat16")
        check_on_sim(task, domain)


class TestRowwiseOnSim:
    """Row reductions, softmax family, norms and losses match PyTorch."""

    @pytest.mark.parametrize("name", sorted(ROWWISE))
    @pytest.mark.parametrize("shape", [ALIGNED, RAGGED], ids=["aligned", "ragged"])
    def test_fp32(self, name: str, shape: tuple[int, int]) -> None:
        """The fp32 kernel matches PyTorch within 1e-3 at aligned and ragged shapes."""
        task, domain = _task(ROWWISE[name], shape, "float32")
        check_on_sim(task, domain)

    @pytest.mark.parametrize("name", sorted(ROWWISE))
    def test_bf16(self, name: str) -> None:
        """bf16 inputs reduce in fp32 and match the fp32 reference within 2e-2."""
        task, domain = _task(ROWWISE[name], RAGGED, "bfloat16")
        check_on_sim(task, domain)


class TestMatmulOnSim:
    """The matmul family, tiled over K, M and N with PSUM accumulation, matches PyTorch."""

    @pytest.mark.parametrize("name", sorted(MATMUL))
    @pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
    def test_matmul(self, name: str, dtype: str) -> None:
        """Plain, batched and transposed products match torch.matmul."""
        expr, shapes, _ = MATMUL[name]
        task = make_task(module_source(expr, args="x, y"), shapes, dtype)
        check_on_sim(task, tol=2e-2 if dtype == "bfloat16" else 2e-3)

    @pytest.mark.parametrize("name", sorted(LINEARS))
    @pytest.mark.parametrize("shape", [(256, 128), (2, 70, 200)], ids=["aligned", "ragged3d"])
    def test_linear(self, name: str, shape: tuple[int, ...]) -> None:
        """nn.Linear with bias and a fused epilogue matches PyTorch."""
        expr, init = LINEARS[name]
        task = make_task(module_source(expr, init=init.replace("DIM", str(shape[-1]))), [shape])
        check_on_sim(task, tol=2e-3)

# name -> (forward expression, input shape, __init__ lines)
MIDDLE_AND_NCHW = {
    "sum_dim1": ("x.sum(dim=1)", (3, 200, 72), ""),
    "max_dim1": ("torch.max(x, dim=1)[0]", (3, 130, 40), ""),
    "softmax_dim1": ("torch.softmax(x, dim=1)", (2, 200, 24), ""),
    "mean_dim0": ("x.mean(dim=0)", (300, 72), ""),
    # kept dims over 128 and reduced dims over one 128-block: ragged PE-transposed tiles
    "min_dim1_wide": ("torch.min(x, dim=1)[0]", (2, 150, 260), ""),
    "softmax_dim1_wide": ("torch.softmax(x, dim=1)", (2, 131, 140), ""),
    "rmsnorm_channels": ("x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)",
                         (2, 64, 6, 6), ""),
    "batchnorm_eval": ("self.bn(x)", (2, 16, 10, 10),
                       "        self.bn = nn.BatchNorm2d(16)\n"
                       "        self.bn.running_mean.normal_()\n"
                       "        self.bn.running_var.uniform_(0.5, 2.0)\n"
                       "        nn.init.normal_(self.bn.weight)"),
    # 48 channels: 96-row tiles of whole batch elements, 5 of them ragged; no affine
    "batchnorm_ragged_rows": ("self.bn(x)", (5, 48, 7, 3),
                              "        self.bn = nn.BatchNorm2d(48, affine=False)\n"
                              "        self.bn.running_mean.normal_()\n"
                              "        self.bn.running_var.uniform_(0.5, 2.0)"),
    "batchnorm1d_3d": ("self.bn(x)", (3, 20, 30),
                       "        self.bn = nn.BatchNorm1d(20)\n"
                       "        self.bn.running_mean.normal_()\n"
                       "        nn.init.normal_(self.bn.bias)"),
    # a whole-tensor total over short innermost rows: the frame takes >= 512-column rows
    "frobenius_short_rows": ("x / torch.norm(x, p='fro')", (3, 4, 20, 8), ""),
    # one middle dim reduced, kept rows on the partitions (middle.py): ragged rows,
    # several k chunks, columns split in two
    "sum_dim1_rows": ("torch.sum(x, dim=1, keepdim=True)", (130, 12, 160), ""),
    "mean_dim1_chunks": ("torch.mean(x, dim=1) * 2 + 1", (70, 64, 200), ""),
    "max_dim1_split_cols": ("torch.max(x, dim=1)[0]", (64, 2, 4100), ""),
    "min_dim2_4d": ("torch.amin(x, dim=2)", (8, 9, 20, 256), ""),
    # x * f(sum over channels of g(x)), channels <= 128 (channelnorm.py): ragged groups,
    # ragged 512-column slices
    "rmsnorm_channel_groups": ("x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)",
                               (3, 32, 8, 64), ""),
    "rsqrt_channel_sums": ("x * torch.rsqrt(x.pow(2).sum(1, keepdim=True) * 0.5 + 1)",
                           (5, 16, 600), ""),
    "instancenorm": ("self.norm(x)", (2, 16, 10, 10), "        self.norm = nn.InstanceNorm2d(16)"),
    "groupnorm_plain": ("self.norm(x)", (2, 16, 10, 10),
                        "        self.norm = nn.GroupNorm(4, 16, affine=False)"),
}


class TestLayoutsOnSim:
    """Middle-dim reductions (permuted views) and channel norms on NCHW inputs."""

    @pytest.mark.parametrize("name", sorted(MIDDLE_AND_NCHW))
    @pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
    def test_layout(self, name: str, dtype: str) -> None:
        """The kernel matches PyTorch in fp32 and bf16."""
        expr, shape, init = MIDDLE_AND_NCHW[name]
        check_on_sim(make_task(module_source(expr, init=init), [shape], dtype))


class TestCrossEntropyOnSim:
    """Cross-entropy picks the target logit with a column-index one-hot (nisa.iota)."""

    @pytest.mark.parametrize(("rows", "smoothing"), [(256, 0.0), (200, 0.0), (64, 0.1)])
    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    def test_matches_torch(self, rows: int, reduction: str, smoothing: float) -> None:
        """Loss per row, summed or averaged, matches F.cross_entropy (targets as int32);
        with label_smoothing too (declined before)."""
        import numpy as np
        import torch

        from nkibot.task import InputSpec, Task
        from tests.lowering.lowering_support import lower_ok, simulate

        source = module_source(f"F.cross_entropy(x, t, reduction='{reduction}', "
                               f"label_smoothing={smoothing})", args="x, t")
        task = Task(reference_source=source, entry_point="Model", inputs=[
            InputSpec(name="x", shape=(rows, 37)), InputSpec(name="t", shape=(rows,),
                                                             dtype="int64")])
        lowered = lower_ok(task)
        gen = torch.Generator().manual_seed(3)
        x, t = torch.randn(rows, 37, generator=gen), torch.randint(0, 37, (rows,), generator=gen)
        expected = torch.nn.functional.cross_entropy(x, t, reduction=reduction,
                                                     label_smoothing=smoothing).numpy()
        # NKI has no int64: class indices travel as int32
        (out,) = simulate(lowered.source, lowered.function, [x.numpy(), t.numpy().astype(np.int32)])
        assert np.asarray(out).shape == expected.shape
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-4, atol=1e-4)


EXAMPLES = {"rmsnorm.py": ("RMSNorm", [512], (4, 100, 512)),
            "swiglu.py": ("SwiGLU", [], (2, 100, 512)),
            "softmax.py": ("Softmax", [2.0], (300, 1000))}


class TestExamplesOnSim:
    """The README's examples lower and match PyTorch (the demo converts rmsnorm.py)."""

    @pytest.mark.parametrize("name", sorted(EXAMPLES))
    @pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
    def test_example(self, name: str, dtype: str) -> None:
        """Each example verifies at its get_inputs() shape."""
        from pathlib import Path

        entry, init, shape = EXAMPLES[name]
        source = (Path(__file__).resolve().parents[2] / "examples" / name).read_text()
        check_on_sim(make_task(source, [shape], dtype, entry=entry, init_args=init))
