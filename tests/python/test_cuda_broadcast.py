"""Eager CUDA binary ops where one operand is broadcast along the other's leading dims (a bias
[C] against [B, T, C]) or trailing dims (a row's mean [N, 1] against [N, C]) run in the flat,
vectorized kernel (loops.cuh: FlatIn's period and divisor) instead of the strided one. Against
the CPU on every layout that takes the fast path and on the ones beside it that must not (a
middle dim broadcast, a period that is not a whole number of vectors).

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_cuda_broadcast.py
"""
import numpy as np
import pytest

import mini
from conftest import CUDA_SKIP_REASON, HAS_CUDA, to_np

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)]

PAIRS = {  # (big, small): the small one broadcast to the big one's shape
    "bias": ((4, 33, 768), (768,)),
    "bias_2d": ((4, 5, 64), (1, 5, 64)),
    "row_mean": ((70, 96), (70, 1)),
    "row_mean_3d": ((3, 7, 40), (3, 7, 1)),
    "middle": ((4, 6, 32), (4, 1, 32)),      # neither: the strided kernel
    "odd_period": ((9, 6), (6,)),              # 6 elements: not whole vectors
    "odd_rows": ((9, 5), (9, 1)),
}


@pytest.mark.parametrize("op", ["add", "mul", "sub", "div"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("pair", PAIRS)
def test_broadcast_binary_matches_the_cpu(pair, dtype, op):
    big_shape, small_shape = PAIRS[pair]
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal(big_shape), rng.standard_normal(small_shape) + 3.0
    dt = getattr(mini, dtype)
    for swap in (False, True):  # the broadcast operand first or second
        x, y = (b_np, a_np) if swap else (a_np, b_np)
        want = getattr(mini, op)(mini.tensor(x, dtype=dt), mini.tensor(y, dtype=dt))
        got = getattr(mini, op)(mini.tensor(x, dtype=dt, device="cuda"), mini.tensor(y, dtype=dt, device="cuda"))
        assert tuple(got.shape) == tuple(want.shape)
        tol = 8e-3 if dtype == "bfloat16" else 1e-6  # one bfloat16 rounding; float32 division's last bit
        np.testing.assert_allclose(to_np(got.cpu()), to_np(want), rtol=tol, atol=0, err_msg=f"{pair} {op} swap={swap}")
