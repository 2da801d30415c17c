"""FlashAttention on the GPU (mini/tensor/cuda/flash_attention.cu): eager
F.scaled_dot_product_attention on CUDA bfloat16 with head dim 64 or 128 runs tiled kernels on the
tensor cores, the backward recomputing the scores from the saved log-sum-exp. Each case against
a float64 numpy reference on the same (bfloat16-rounded) inputs: the output, the lse and the three
gradients, by relative error ||x - ref|| / ||ref||; shapes with L and S not multiples of the tiles,
S != L, odd batch and head counts, inputs that are transposed views (as a GPT's heads are).

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_flash_attention.py
"""
import numpy as np
import pytest

import mini
import mini.nn.functional as F
from conftest import requires_cuda, to_np

pytestmark = requires_cuda

# bfloat16 operands, float32 accumulation: errors of a few 1e-3 (the output rounds once, P is
# rounded to bfloat16 before P V as FlashAttention does); 2e-2 leaves room, a wrong tile is ~1.
TOL = 2e-2

SHAPES = {  # (batch dims, L, S, head dim)
    "one_tile": ((2, 3), 128, 128, 64),
    "ragged_d128": ((1, 5), 100, 100, 128),
    "L_lt_S": ((3,), 77, 130, 64),
    "L_gt_S": ((1, 3), 200, 50, 128),
    "single": ((1,), 1, 1, 64),
    "many_tiles": ((1, 1), 1030, 1030, 64),
}


def reference(q, k, v, causal, scale, g):
    """out, lse and (dq, dk, dv) for the incoming gradient g, in float64; causal masks key j > i
    (the top-left triangle, also for L != S)."""
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    lse = (mx + np.log(e.sum(-1, keepdims=True)))[..., 0]
    p = e / e.sum(-1, keepdims=True)
    out = p @ v
    dv = np.swapaxes(p, -1, -2) @ g
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (g * out).sum(-1, keepdims=True))
    return out, lse, (ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv)


def rel_err(got, want):
    """||got - want|| / ||want||; where want is 0 (dq and dk when each query sees one key: its
    softmax is constant) against 1e-3 per element instead."""
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "non-finite values (an element left unwritten or a masked row)"
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-3 * np.sqrt(want.size))


def bf16_cuda(a, transposed=False):
    """a as a CUDA bfloat16 tensor; transposed: a view of a [..., L, H, D] tensor with its dims
    -2 and -3 swapped, as q, k, v are in a transformer (not contiguous)."""
    if transposed:
        return mini.tensor(np.ascontiguousarray(np.swapaxes(a, -2, -3)), dtype=mini.bfloat16,
                           device="cuda").transpose(-2, -3)
    return mini.tensor(a, dtype=mini.bfloat16, device="cuda")


def run_case(batch, L, S, D, causal, seed, transposed=False):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((*batch, n, D)) for n in (L, S, S))
    g = rng.standard_normal((*batch, L, D))
    scale = 0.9 / np.sqrt(D)
    qkv = [bf16_cuda(a, transposed).requires_grad_() for a in (q, k, v)]
    exact = [to_np(t.detach().float()).astype(np.float64) for t in qkv]
    gt = bf16_cuda(g)
    want_out, want_lse, want_grads = reference(*exact, causal, scale, to_np(gt.float()).astype(np.float64))

    out, lse = mini._C.fused_attention_lse(*(t.detach() for t in qkv), causal, scale)
    assert out.dtype == mini.bfloat16 and lse.dtype == mini.float32 and tuple(lse.shape) == (*batch, L)
    assert rel_err(to_np(out.float()), want_out) < TOL
    assert np.abs(to_np(lse) - want_lse).max() < 2e-2  # log units; a wrong row is off by O(1)

    out = F.scaled_dot_product_attention(*qkv, is_causal=causal, scale=scale)
    assert rel_err(to_np(out.detach().float()), want_out) < TOL
    out.backward(gt)
    for name, t, want in zip("qkv", qkv, want_grads):
        assert t.grad.dtype == mini.bfloat16 and tuple(t.grad.shape) == want.shape
        err = rel_err(to_np(t.grad.float()), want)
        assert err < TOL, f"d{name}: relative error {err:.3g}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_forward_lse_and_gradients_match_float64(shape, causal):
    batch, L, S, D = SHAPES[shape]
    run_case(batch, L, S, D, causal, seed=len(shape) * 7 + causal)


@pytest.mark.parametrize("D", [64, 128])
def test_flash_takes_transposed_views_as_a_transformer_passes_them(D):
    run_case((2,), 65, 65, D, True, seed=D, transposed=True)


def test_flash_gradients_agree_with_the_float32_path():
    """The same inputs in float32 run the other kernel and the decomposed backward: the two
    paths agree to bfloat16's rounding (each against the other, not against itself)."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, 96, 64)) for _ in range(3))
    g = rng.standard_normal((2, 3, 96, 64))
    grads = {}
    for dt in (mini.bfloat16, mini.float32):
        qkv = [mini.tensor(a, dtype=mini.bfloat16, device="cuda").to(dt).requires_grad_() for a in (q, k, v)]
        out = F.scaled_dot_product_attention(*qkv, is_causal=True)
        out.backward(mini.tensor(g, dtype=mini.bfloat16, device="cuda").to(dt))
        grads[dt] = [to_np(out.detach().float())] + [to_np(t.grad.float()) for t in qkv]
    for fast, slow in zip(grads[mini.bfloat16], grads[mini.float32]):
        assert rel_err(fast, slow.astype(np.float64)) < TOL
