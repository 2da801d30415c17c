"""Eager layer_norm's backward on CUDA is fused (mini/tensor/cuda/nn.cu): one kernel over the rows
gives dx (a warp a row, mean and rstd recomputed), one over column chunks and a last pass give
dweight and dbias, in chunk order (deterministic). Against the CPU's float64 gradients
(derivatives.h's rule as eager ops) for the shapes and affine forms a model uses, and one launch
count against the op-by-op rule.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_layer_norm_backward.py
"""
import numpy as np
import pytest

import mini
from conftest import CUDA_SKIP_REASON, HAS_CUDA, to_np

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)]

CASES = {  # x shape, normalized dims, weight, bias
    "gpt": ((4, 33, 768), 1, True, True),
    "odd_cols": ((70, 45), 1, True, True),
    "weight_only": ((5, 130), 1, True, False),
    "plain": ((9, 64), 1, False, False),
    "two_dims": ((6, 3, 40), 2, True, True),
    "many_rows": ((5000, 96), 1, True, True),
}


def grads(device, dtype, shape, dims, has_w, has_b, seed=0):
    rng = np.random.default_rng(seed)
    x_np = rng.standard_normal(shape) * 3 + 1
    w_np = rng.standard_normal(shape[-dims:])
    b_np = rng.standard_normal(shape[-dims:])
    g_np = rng.standard_normal(shape)
    x = mini.tensor(x_np, dtype=dtype, device=device).requires_grad_()
    w = mini.tensor(w_np, dtype=dtype, device=device).requires_grad_() if has_w else None
    b = mini.tensor(b_np, dtype=dtype, device=device).requires_grad_() if has_b else None
    y = mini.layer_norm(x, shape[-dims:], w, b, 1e-5)
    y.backward(mini.tensor(g_np, dtype=dtype, device=device))
    return [to_np(t.grad).astype(np.float64) for t in (x, w, b) if t is not None]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", CASES)
def test_fused_backward_matches_float64(case, dtype):
    shape, dims, has_w, has_b = CASES[case]
    want = grads("cpu", mini.float64, shape, dims, has_w, has_b)
    got = grads("cuda", getattr(mini, dtype), shape, dims, has_w, has_b)
    tol = 2e-2 if dtype == "bfloat16" else 1e-4
    for name, a, b in zip(["dx", "dw", "db"], got, want):
        err = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)
        assert err < tol, f"{case} {dtype} {name}: relative error {err:.2e}"


def test_the_backward_is_three_launches_not_the_rules_dozen(metrics):
    x = mini.randn(64, 256, device="cuda", requires_grad=True)
    w = mini.randn(256, device="cuda", requires_grad=True)
    b = mini.randn(256, device="cuda", requires_grad=True)
    y = mini.layer_norm(x, (256,), w, b)
    g = mini.randn(64, 256, device="cuda")
    before = metrics.kernel_launches
    y.backward(g)
    # rows, column partials, columns; then the three leaves' .grad (accumulation copies nothing
    # new: the first gradient is kept as it is)
    assert metrics.kernel_launches - before <= 4, metrics.kernel_launches - before
