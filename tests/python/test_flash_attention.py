"""FlashAttention on the GPU (mini/tensor/cuda/flash_attention.cu and flash_attention_f32.cu):
eager F.scaled_dot_product_attention on CUDA bfloat16 or float32 with head dim 64 or 128 runs
tiled kernels on the tensor cores (float32 as three TF32 products a product), the backward
recomputing the scores from the saved log-sum-exp. Each case against a float64 numpy reference on
the same (rounded) inputs: the output, the lse and the three
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
# float32 (3xTF32) passes 2e-5; a single TF32 product a product keeps 10 mantissa bits (2^-11, 5e-4).
TOL = {"bfloat16": 2e-2, "float32": 2e-5}
LSE_TOL = {"bfloat16": 2e-2, "float32": 1e-4}  # log units; a wrong row is off by O(1)
# A gradient that is 0 (each query sees one key) comes out as dS = P (dP - delta), a difference of
# two numbers of size about sqrt(D) computed two ways (dP on the tensor cores, delta by FFMA):
# float32 leaves 3e-7 to 1e-6 of it in an element (measured on an H100, L = S = 1), so its floor
# is 0.5 an element (with the 2e-5 tolerance: 1e-5 allowed); bfloat16 keeps 1e-3.
ZERO_FLOOR = {"bfloat16": 1e-3, "float32": 0.5}
DTYPES = {"bfloat16": mini.bfloat16, "float32": mini.float32}

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


def rel_err(got, want, floor=1e-3):
    """||got - want|| / ||want||; where want is 0 (dq and dk when each query sees one key: its
    softmax is constant) against `floor` per element instead."""
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "non-finite values (an element left unwritten or a masked row)"
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), floor * np.sqrt(want.size))


def on_cuda(a, dtype, transposed=False):
    """a as a CUDA tensor of dtype; transposed: a view of a [..., L, H, D] tensor with its dims
    -2 and -3 swapped, as q, k, v are in a transformer (not contiguous)."""
    if transposed:
        return mini.tensor(np.ascontiguousarray(np.swapaxes(a, -2, -3)), dtype=dtype,
                           device="cuda").transpose(-2, -3)
    return mini.tensor(a, dtype=dtype, device="cuda")


def run_case(batch, L, S, D, causal, seed, dtype_name, transposed=False):
    dtype, tol = DTYPES[dtype_name], TOL[dtype_name]
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((*batch, n, D)) for n in (L, S, S))
    g = rng.standard_normal((*batch, L, D))
    scale = 0.9 / np.sqrt(D)
    qkv = [on_cuda(a, dtype, transposed).requires_grad_() for a in (q, k, v)]
    exact = [to_np(t.detach().float()).astype(np.float64) for t in qkv]
    gt = on_cuda(g, dtype)
    want_out, want_lse, want_grads = reference(*exact, causal, scale, to_np(gt.float()).astype(np.float64))

    out, lse = mini._C.fused_attention_lse(*(t.detach() for t in qkv), causal, scale)
    assert out.dtype == dtype and lse.dtype == mini.float32 and tuple(lse.shape) == (*batch, L)
    assert rel_err(to_np(out.float()), want_out) < tol
    assert np.abs(to_np(lse) - want_lse).max() < LSE_TOL[dtype_name]

    out = F.scaled_dot_product_attention(*qkv, is_causal=causal, scale=scale)
    assert rel_err(to_np(out.detach().float()), want_out) < tol
    out.backward(gt)
    for name, t, want in zip("qkv", qkv, want_grads):
        assert t.grad.dtype == dtype and tuple(t.grad.shape) == want.shape
        err = rel_err(to_np(t.grad.float()), want, ZERO_FLOOR[dtype_name])
        assert err < tol, f"d{name}: relative error {err:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_forward_lse_and_gradients_match_float64(shape, causal, dtype):
    batch, L, S, D = SHAPES[shape]
    run_case(batch, L, S, D, causal, len(shape) * 7 + causal, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [64, 128])
def test_flash_takes_transposed_views_as_a_transformer_passes_them(D, dtype):
    run_case((2,), 65, 65, D, True, D, dtype, transposed=True)


def test_flash_gradients_agree_with_the_float32_path():
    """The same (bfloat16-exact) inputs in bfloat16 and in float32 run two different kernels
    (m16n8k16 on bfloat16, 3xTF32 on float32): they agree to bfloat16's rounding."""
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
        assert rel_err(fast, slow.astype(np.float64)) < TOL["bfloat16"]


def test_flash_bfloat16_under_the_other_kernel_generation():
    """On a compute capability 9.0 GPU, MINI_FLASH_SM90=1 runs bfloat16 on Hopper's wgmma kernels
    (cuda/sm90/) and anything else on the mma.sync kernels every other GPU runs. This process runs
    the checks above under one setting; this test runs them under the other in a process of its
    own (the choice is read once), so that both generations stay right on the machine that has
    both. Elsewhere both settings run the mma.sync kernels."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    other = "0" if os.environ.get("MINI_FLASH_SM90") == "1" else "1"
    env = dict(os.environ, MINI_FLASH_SM90=other)
    code = ("import test_flash_attention as t\n"
            "for causal in (False, True):\n"
            "    t.run_case((2, 3), 200, 200, 64, causal, 1, 'bfloat16', transposed=True)\n"
            "    t.run_case((1, 2), 100, 77, 128, causal, 2, 'bfloat16')\n"
            "print('both passed')\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "both passed" in run.stdout, run.stdout + run.stderr
