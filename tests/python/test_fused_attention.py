"""Eager F.scaled_dot_product_attention runs one fused kernel (mini/tensor/attention.cpp, and
cuda/attention.cu), and inside mini.compile the same call is captured as its matmuls and
softmax (mini.compiler.is_compiling). The kernel against a float64 numpy reference and against
the decomposed ops, forward and gradients, on each device and dtype; one launch; the fallbacks.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_fused_attention.py
"""
import numpy as np
import pytest

import mini
import mini.nn.functional as F
from conftest import to_np


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def reference(q, k, v, causal, scale):
    """softmax(q k^T * scale, j > i masked) v in float64, and its three gradients for the
    incoming gradient g (the backward written out: dS = P * (dP - rowsum(dP * P)))."""
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = p @ v

    def grads(g):
        dv = np.swapaxes(p, -1, -2) @ g
        dp = g @ np.swapaxes(v, -1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        return ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv
    return out, grads


def decomposed(q, k, v, causal, scale):
    """The ops F.scaled_dot_product_attention is captured as, run eagerly."""
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s = s.masked_fill(mini.ones(q.size(-2), k.size(-2), dtype=mini.bool, device=q.device).triu(1),
                          float("-inf"))
    return s.softmax(-1) @ v


DTYPES = {"float64": (mini.float64, 1e-10), "float32": (mini.float32, 2e-5), "bfloat16": (mini.bfloat16, 3e-2)}
SHAPES = {  # (batch dims, L, S, E, Ev): one chunk of keys, several (S > 32 on CUDA), a partial lane row
    "small": ((2, 3), 5, 5, 8, 8),
    "long": ((1, 2), 70, 70, 16, 40),
    "L_ne_S": ((3,), 6, 45, 12, 80),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_fused_kernel_matches_float64_forward_and_gradients(device, dtype, causal, shape):
    dt, tol = DTYPES[dtype]
    batch, L, S, E, Ev = SHAPES[shape]
    arrays = [data(*batch, L, E, seed=1), data(*batch, S, E, seed=2), data(*batch, S, Ev, seed=3)]
    g = data(*batch, L, Ev, seed=4)
    scale = 0.7 / np.sqrt(E)
    qkv = [mini.tensor(a, dtype=dt, device=device).requires_grad_() for a in arrays]
    # the reference sees the inputs as the kernel does (rounded to bfloat16 there)
    exact = [to_np(t.detach()).astype(np.float64) for t in qkv]
    want, want_grads = reference(*exact, causal, scale)
    out = F.scaled_dot_product_attention(*qkv, is_causal=causal, scale=scale)
    assert out.dtype == dt and tuple(out.shape) == (*batch, L, Ev)
    assert out.grad_fn is not None and "ScaledDotProductAttention" in type(out.grad_fn).__name__ + str(out.grad_fn)
    np.testing.assert_allclose(to_np(out.detach()).astype(np.float64), want, rtol=tol, atol=tol)
    out.backward(mini.tensor(g, dtype=dt, device=device))
    for t, w in zip(qkv, want_grads(to_np(mini.tensor(g, dtype=dt)).astype(np.float64))):
        assert t.grad.dtype == dt
        np.testing.assert_allclose(to_np(t.grad).astype(np.float64), w, rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_kernel_writes_each_rows_log_sum_exp(device, causal):
    """_C.fused_attention_lse returns the output and the lse the backward rebuilds the softmax
    from: log sum_j exp(scale q_i . k_j) over the keys row i sees (float64 here)."""
    q, k, v = (data(3, 7, 12, seed=s) for s in (8, 9, 10))
    k, v = k[:, :5], v[:, :5]  # S = 5 < L = 7: causal rows past S see every key
    scale = 0.6
    out, lse = mini._C.fused_attention_lse(*(mini.tensor(a, dtype=mini.float64, device=device) for a in (q, k, v)),
                                            causal, scale)
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    want = np.log(np.exp(s).sum(-1))
    assert lse.dtype == mini.float64 and tuple(lse.shape) == (3, 7)
    np.testing.assert_allclose(to_np(lse), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(to_np(out), reference(q, k, v, causal, scale)[0], rtol=1e-10, atol=1e-10)


def test_eager_attention_is_one_kernel_and_the_decomposition_is_several(device, metrics):
    q, k, v = (mini.tensor(data(2, 4, 16, 8, seed=s), dtype=mini.float32, device=device) for s in (5, 6, 7))
    before = metrics.kernel_launches
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert metrics.kernel_launches - before == 1
    before = metrics.kernel_launches
    ops = decomposed(q, k, v, True, 8 ** -0.5)
    assert metrics.kernel_launches - before >= 4  # matmul, scale, mask, softmax, matmul (and the mask's own)
    np.testing.assert_allclose(to_np(fused), to_np(ops), rtol=1e-5, atol=1e-6)


def test_inside_compile_the_call_is_captured_as_its_ops_with_the_same_gradients(device):
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).pow(2).sum()

    def run(fn):
        qkv = [mini.tensor(data(2, 3, 9, 4, seed=s), dtype=mini.float64, device=device).requires_grad_()
               for s in (8, 9, 10)]
        loss = fn(*qkv)
        loss.backward()
        return [to_np(loss.detach())] + [to_np(t.grad) for t in qkv]

    explained = mini.explain(attend)(*[mini.ones(2, 3, 9, 4, device=device) for _ in range(3)])
    ops = str(explained)
    assert explained.graph_count == 1 and "softmax" in ops and "matmul" in ops
    assert "attention" not in ops.replace("scaled_dot_product_attention", "")  # no fused node in the graph
    for got, want in zip(run(mini.compile(attend, fullgraph=True)), run(attend)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_is_compiling_is_true_only_while_capture_runs():
    def which(x):
        return x + 1.0 if mini.compiler.is_compiling() else x - 1.0

    x = mini.zeros(3)
    assert not mini.compiler.is_compiling()
    np.testing.assert_array_equal(to_np(which(x)), [-1.0] * 3)
    np.testing.assert_array_equal(to_np(mini.compile(which, fullgraph=True)(x)), [1.0] * 3)
    assert mini.compiler.is_dynamo_compiling is mini.compiler.is_compiling


@pytest.mark.parametrize("case", ["broadcast_batch", "mask", "mixed_dtypes", "head_dim_300"])
def test_what_the_kernel_does_not_take_runs_as_ops(device, case):
    rng_seed = {"broadcast_batch": 11, "mask": 12, "mixed_dtypes": 13, "head_dim_300": 14}[case]
    E = 300 if case == "head_dim_300" else 8
    q, v = data(2, 5, E, seed=rng_seed), data(2, 5, 6, seed=rng_seed + 1)
    k = data(1, 5, E, seed=rng_seed + 2) if case == "broadcast_batch" else data(2, 5, E, seed=rng_seed + 2)
    dtypes = (mini.float32, mini.float64, mini.float64) if case == "mixed_dtypes" else (mini.float64,) * 3
    tq, tk, tv = (mini.tensor(a, dtype=d, device=device) for a, d in zip((q, k, v), dtypes))
    why = mini._C.fused_attention_supports(tq, tk, tv)
    kwargs = {}
    if case == "mask":
        kwargs["attn_mask"] = mini.ones(5, 5, dtype=mini.bool, device=device).tril()
        assert why == ""  # the operands suit the kernel; the mask does not
    elif case == "head_dim_300" and device == "cpu":
        assert why == ""  # the CPU kernel holds any head dim
    else:
        assert why, "the kernel should refuse these operands"
    if case == "mixed_dtypes":
        with pytest.raises(RuntimeError):  # matmul refuses mixed dtypes, as torch's does
            F.scaled_dot_product_attention(tq, tk, tv)
        return
    got = F.scaled_dot_product_attention(tq, tk, tv, **kwargs)
    want, _ = reference(q, np.broadcast_to(k, q.shape), v, case == "mask", E ** -0.5)
    np.testing.assert_allclose(to_np(got), want, rtol=1e-10, atol=1e-12)


def test_under_autocast_the_kernel_runs_in_bfloat16(device):
    q, k, v = (mini.tensor(data(1, 2, 12, 16, seed=s), dtype=mini.float32, device=device).requires_grad_()
               for s in (20, 21, 22))
    with mini.autocast(device, dtype=mini.bfloat16):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == mini.bfloat16
    want, _ = reference(*(to_np(t.detach()).astype(np.float64) for t in (q, k, v)), True, 16 ** -0.5)
    np.testing.assert_allclose(to_np(out.detach()).astype(np.float64), want, rtol=3e-2, atol=3e-2)
    out.float().sum().backward()
    assert q.grad.dtype == mini.float32 and np.all(np.isfinite(to_np(q.grad)))


def test_writing_an_input_after_the_forward_is_caught_at_backward(device):
    q, k, v = (mini.tensor(data(1, 4, 4, seed=s), device=device).requires_grad_() for s in (30, 31, 32))
    kk = k * 1.0
    out = F.scaled_dot_product_attention(q, kk, v)
    kk.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_no_query_rows_give_zero_gradients_of_the_keys_and_values(device, dtype):
    # L = 0: the forward writes nothing and the backward has no score to go through; on CUDA the
    # flash kernels (head dim 64) would divide by the rows and launch an empty grid
    dt = DTYPES[dtype][0]
    q = mini.zeros(2, 3, 0, 64, dtype=dt, device=device).requires_grad_()
    k, v = (mini.ones(2, 3, 5, 64, dtype=dt, device=device).requires_grad_() for _ in range(2))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
    assert tuple(out.shape) == (2, 3, 0, 64)
    out.backward(mini.zeros(2, 3, 0, 64, dtype=dt, device=device))
    assert tuple(q.grad.shape) == (2, 3, 0, 64)
    for t in (k, v):
        assert tuple(t.grad.shape) == (2, 3, 5, 64) and t.grad.dtype == dt
        assert not to_np(t.grad.float()).any()
