"""F.linear eagerly on CUDA: one cuBLASLt GEMM that adds the bias in its epilogue (no broadcast
add kernel after it), with a backward node of its own. Checked against float64 numpy, forward and
gradients, float32 and bfloat16 autocast; the operands it does not take (a bias at an odd offset,
a strided input) go the matmul-then-add way and give the same values."""
import numpy as np
import pytest

import mini
import mini.nn.functional as F
from conftest import requires_cuda

pytestmark = requires_cuda
DEVICE = "cuda"


@pytest.fixture(autouse=True)
def exact_float32():
    """float32 GEMMs without TF32 (its 10-bit mantissa would need bfloat16's tolerances)."""
    before = mini.backends.cuda.matmul.allow_tf32
    yield
    mini.backends.cuda.matmul.allow_tf32 = before


def leaf(a):
    return mini.tensor(a.astype(np.float32), device=DEVICE, requires_grad=True)


def host(t):
    return t.detach().float().cpu().numpy()


def reference(x, w, b, g):
    """out and the three gradients of x @ w.T + b for the output's gradient g, in float64."""
    x, w, g = x.astype(np.float64), w.astype(np.float64), g.astype(np.float64)
    out = x @ w.T + (0 if b is None else b.astype(np.float64))
    x2, g2 = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    return out, (g2 @ w).reshape(x.shape), g2.T @ x2, g2.sum(0)


@pytest.fixture
def operands():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((3, 5, 24)), rng.standard_normal((40, 24)) / 5, rng.standard_normal(40),
            rng.standard_normal((3, 5, 40)))


def run(x_np, w_np, b_np, g_np, autocast=False):
    x, w = leaf(x_np), leaf(w_np)
    b = None if b_np is None else leaf(b_np)
    if autocast:
        with mini.autocast(DEVICE):
            out = F.linear(x, w, b)
    else:
        out = F.linear(x, w, b)
    out.backward(mini.tensor(g_np.astype(np.float32), device=DEVICE).to(out.dtype))
    return out, x, w, b


def test_float32_forward_and_gradients_match_float64(operands):
    out, x, w, b = run(*operands)
    want, dx, dw, db = reference(*operands)
    np.testing.assert_allclose(host(out), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(host(x.grad), dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(host(w.grad), dw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(host(b.grad), db, rtol=1e-4, atol=1e-4)
    assert w.grad.is_contiguous()  # a [m, k] product, not a transposed view


def test_bfloat16_autocast_adds_the_bias_in_the_gemm_and_its_gradients_reach_float32_leaves(operands):
    out, x, w, b = run(*operands, autocast=True)
    assert out.dtype == mini.bfloat16
    want, dx, dw, db = reference(*operands)
    # bfloat16 operands and result: 8 bits of mantissa, sums of 24 to 15 terms
    np.testing.assert_allclose(host(out), want, rtol=3e-2, atol=6e-2)
    for t, ref in ((x, dx), (w, dw), (b, db)):
        assert t.grad.dtype == mini.float32
        np.testing.assert_allclose(host(t.grad), ref, rtol=3e-2, atol=1e-1)


def test_the_bias_costs_no_kernel_of_its_own(operands, metrics):
    x, w, b = (leaf(a) for a in operands[:3])
    with mini.no_grad():
        before = metrics.kernel_launches
        with_bias = F.linear(x, w, b)
        assert metrics.kernel_launches - before == 1
        before = metrics.kernel_launches
        by_ops = x @ w.t() + b  # the GEMM, then a broadcast add
        assert metrics.kernel_launches - before == 2
    np.testing.assert_allclose(host(with_bias), host(by_ops), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["bias at an odd offset", "transposed input", "no bias", "2-D input",
                                  "column-major weight"])
def test_operands_it_does_not_take_as_they_are_give_the_same_values(operands, case):
    x_np, w_np, b_np, g_np = operands
    x, w = leaf(x_np), leaf(w_np)
    b = leaf(b_np)
    xin, win, bin_ = x, w, b
    if case == "bias at an odd offset":  # 4 bytes past a 16-byte boundary: cuBLASLt's vector loads refuse it
        big = leaf(np.concatenate([[0.0], b_np]))
        bin_, b = big[1:], big
    elif case == "transposed input":
        xt = leaf(np.ascontiguousarray(x_np.transpose(0, 2, 1)))
        xin, x = xt.transpose(1, 2), xt
    elif case == "no bias":
        bin_, b_np = None, None
    elif case == "2-D input":
        x_np, g_np = x_np[0], g_np[0]
        x = leaf(x_np)
        xin = x
    elif case == "column-major weight":
        wt = leaf(np.ascontiguousarray(w_np.T))
        win, w = wt.t(), wt
    out = F.linear(xin, win, bin_)
    out.backward(mini.tensor(g_np.astype(np.float32), device=DEVICE))
    want, dx, dw, db = reference(x_np, w_np, b_np, g_np)
    np.testing.assert_allclose(host(out), want, rtol=1e-4, atol=1e-4)
    got_dx = host(x.grad)
    got_dw = host(w.grad)
    if case == "transposed input":
        got_dx = got_dx.transpose(0, 2, 1)
    if case == "column-major weight":
        got_dw = got_dw.T
    np.testing.assert_allclose(got_dx, dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_dw, dw, rtol=1e-4, atol=1e-4)
    if b_np is not None:
        got_db = host(b.grad)
        np.testing.assert_allclose(got_db[1:] if case == "bias at an odd offset" else got_db, db, rtol=1e-4,
                                   atol=1e-4)


def test_a_backward_after_the_input_was_written_in_place_raises(operands):
    x_np, w_np, b_np, _ = operands
    x, w, b = leaf(x_np), leaf(w_np), leaf(b_np)
    h = x * 1.0
    out = F.linear(h, w, b)
    with mini.no_grad():
        h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
