"""Eager F.cross_entropy is one kernel a row (mini/tensor/nn_kernels.cpp, cuda/nn.cu): the row's
log-sum-exp and the target's pick in one read, and a backward of one more. Its loss and gradient
against a float64 numpy reference (log-sum-exp by hand), on the CPU and on CUDA, for every
floating dtype, ignore_index, targets out of range, a 1-D input, autocast; and against the ops
mini.compile records for the same function.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_cross_entropy.py
"""
import numpy as np
import pytest

import mini
import mini.nn.functional as F
from conftest import CUDA_SKIP_REASON, HAS_CUDA, to_np

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA,
                                                                                     reason=CUDA_SKIP_REASON)])]
TOL = {mini.float64: 1e-10, mini.float32: 1e-5, mini.bfloat16: 2e-2}


def reference(x, t, ignore_index, reduction, g=1.0):
    """nll and d(loss)/dx in float64 (numpy)."""
    m = x.max(1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(1, keepdims=True)))[:, 0]
    valid = (t >= 0) & (t < x.shape[1])
    counted = t != ignore_index
    nll = np.where(counted, np.where(valid, lse - x[np.arange(len(t)), np.clip(t, 0, x.shape[1] - 1)], np.nan), 0)
    scale = np.full(len(t), g, dtype=np.float64)
    if reduction == "mean":
        scale = scale / counted.sum()
    dx = np.exp(x - lse[:, None])
    dx[np.arange(len(t))[valid], t[valid]] -= 1
    dx = dx * np.where(counted & valid, scale, 0)[:, None]
    loss = {"none": nll, "sum": nll.sum(), "mean": nll.sum() / counted.sum()}[reduction]
    return loss, dx


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [mini.float32, mini.float64, mini.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("cols", [5, 1000, 50304 // 16])  # a warp's worth, a block's, a GPT-like row
def test_loss_and_gradient_match_float64(device, dtype, reduction, cols):
    rng = np.random.default_rng(cols)
    x_np = rng.standard_normal((37, cols)) * 4
    t_np = rng.integers(0, cols, 37)
    t_np[[3, 20]] = -1  # ignored rows: no loss, no gradient
    x = mini.tensor(x_np, dtype=dtype, device=device).requires_grad_()
    loss = F.cross_entropy(x, mini.tensor(t_np.tolist(), device=device), ignore_index=-1, reduction=reduction)
    assert loss.dtype == dtype
    x_used = to_np(x.detach().double()) if dtype == mini.bfloat16 else x_np
    want, want_dx = reference(x_used, t_np, -1, reduction)
    tol = TOL[dtype]
    np.testing.assert_allclose(to_np(loss.double()), want, rtol=tol, atol=tol)
    (loss if reduction != "none" else loss.sum()).backward()
    assert x.grad.dtype == dtype
    np.testing.assert_allclose(to_np(x.grad.double()), want_dx, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_a_target_out_of_range_gives_nan_and_no_gradient(device):
    x = mini.tensor(np.arange(12.0).reshape(3, 4).tolist(), device=device).requires_grad_()
    nll = F.cross_entropy(x, mini.tensor([4, -2, 1], device=device), reduction="none")
    got = to_np(nll)
    assert np.isnan(got[0]) and np.isnan(got[1]) and np.isfinite(got[2])
    nll[2].backward()
    g = to_np(x.grad)
    assert (g[:2] == 0).all() and abs(g[2].sum()) < 1e-6 and g[2, 1] < 0


def test_one_dim_input_and_autocast_dtype():
    x = mini.randn(6)
    assert F.cross_entropy(x, mini.tensor(2)).dim() == 0
    np.testing.assert_allclose(F.cross_entropy(x, mini.tensor(2)).item(),
                               F.cross_entropy(x.unsqueeze(0), mini.tensor([2])).item(), rtol=1e-6)
    xb = mini.randn(4, 9).to(mini.bfloat16)
    t = mini.tensor([0, 8, 3, 3])
    with mini.autocast(device_type="cpu", dtype=mini.bfloat16):
        assert F.cross_entropy(xb, t).dtype == mini.float32  # log_softmax's: float32 under autocast
    assert F.cross_entropy(xb, t).dtype == mini.bfloat16


def test_eager_and_compiled_agree_and_eager_is_two_kernels():
    rng = np.random.default_rng(5)
    x_np = rng.standard_normal((64, 300))
    t = mini.tensor(np.where(np.arange(64) % 7 == 0, -100, rng.integers(0, 300, 64)).tolist())
    xe = mini.tensor(x_np).requires_grad_()
    xc = mini.tensor(x_np).requires_grad_()
    mini.metrics.reset()
    loss_e = F.cross_entropy(xe, t)
    loss_e.backward()
    launches = mini.metrics.kernel_launches
    loss_c = mini.compile(lambda x, t: F.cross_entropy(x, t), backend="aot_eager")(xc, t)
    loss_c.backward()
    np.testing.assert_allclose(loss_e.item(), loss_c.item(), rtol=1e-6)
    np.testing.assert_allclose(to_np(xe.grad), to_np(xc.grad), rtol=1e-5, atol=1e-8)
    # the loss's row kernel and its backward, plus the [N]-sized mean and its backward: far
    # fewer than log_softmax, the [N, C] mask, select and sum and their backwards
    assert launches <= 12, launches


def test_wrong_arguments_name_the_fix():
    with pytest.raises(TypeError, match=r"int64 class indices.*target.long\(\)"):
        F.cross_entropy(mini.randn(3, 4), mini.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(RuntimeError, match=r"expected logits \[N, C\] and target \[N\]"):
        mini._C.cross_entropy_nll(mini.randn(3, 4), mini.tensor([0, 1]), -100)
    with pytest.raises(RuntimeError, match="floating point"):
        mini._C.cross_entropy_nll(mini.tensor([[1, 2]]), mini.tensor([0]), -100)
