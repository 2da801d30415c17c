"""Adam, AdamW (parameter groups, decoupled weight decay) and nn.utils.clip_grad_norm_
(issue 15, section 1) against numpy references, and a small model trained with them.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_optim_adam.py
"""
import math

import numpy as np
import pytest

import mini
import mini.nn as nn
from conftest import to_np


def reference_adam(p, grads, lr, betas, eps, wd, decoupled):
    p = p.astype(np.float64).copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        if wd and decoupled:
            p *= 1 - lr * wd
        elif wd:
            g = g + wd * p
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        p -= lr / (1 - betas[0] ** t) * m / (np.sqrt(v) / math.sqrt(1 - betas[1] ** t) + eps)
    return p


@pytest.mark.parametrize("cls,decoupled", [(mini.optim.Adam, False), (mini.optim.AdamW, True)])
def test_adam_and_adamw_follow_the_reference_per_parameter_group(cls, decoupled):
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    a, b = mini.from_numpy(a0.copy()).requires_grad_(), mini.from_numpy(b0.copy()).requires_grad_()
    opt = cls([{"params": [a], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0, "lr": 0.05}],
              lr=0.01, betas=(0.9, 0.95), eps=1e-8)
    grads_a, grads_b = [], []
    for _ in range(5):
        ga, gb = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
        grads_a.append(ga)
        grads_b.append(gb)
        a.grad, b.grad = mini.from_numpy(ga), mini.from_numpy(gb)
        opt.step()
    np.testing.assert_allclose(to_np(a.detach()), reference_adam(a0, grads_a, 0.01, (0.9, 0.95), 1e-8, 0.1, decoupled),
                               rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(to_np(b.detach()), reference_adam(b0, grads_b, 0.05, (0.9, 0.95), 1e-8, 0.0, decoupled),
                               rtol=2e-5, atol=2e-6)
    assert opt.state[a]["step"] == 5 and a.is_leaf


def test_adam_refuses_bad_hyperparameters_by_name():
    p = [mini.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        mini.optim.AdamW(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        mini.optim.Adam(p, lr=-1)
    with pytest.raises(NotImplementedError, match="amsgrad"):
        mini.optim.Adam(p, amsgrad=True)
    mini.optim.AdamW(p, fused=True, foreach=False)  # accepted, as GPT training scripts pass them


@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm_scales_to_max_norm_and_returns_the_norm_before(norm_type):
    rng = np.random.default_rng(1)
    g1, g2 = rng.standard_normal((4, 3)).astype(np.float32) * 3, rng.standard_normal(5).astype(np.float32)
    p1, p2 = mini.zeros(4, 3, requires_grad=True), mini.zeros(5, requires_grad=True)
    p1.grad, p2.grad = mini.from_numpy(g1.copy()), mini.from_numpy(g2.copy())
    both = np.concatenate([g1.ravel(), g2])
    want = np.abs(both).max() if norm_type == float("inf") else np.sqrt((both.astype(np.float64) ** 2).sum())
    total = nn.utils.clip_grad_norm_([p1, p2], 1.0, norm_type=norm_type)
    np.testing.assert_allclose(float(total.item()), want, rtol=1e-5)
    clipped = np.concatenate([to_np(p1.grad).ravel(), to_np(p2.grad)])
    after = np.abs(clipped).max() if norm_type == float("inf") else np.sqrt((clipped ** 2).sum())
    assert abs(after - 1.0) < 1e-4  # scaled to the max norm
    np.testing.assert_allclose(clipped, both / want * (1.0 / (1.0 + 1e-6 / want)), rtol=1e-5)
    small = mini.zeros(2, requires_grad=True)
    small.grad = mini.tensor([0.1, 0.1])
    nn.utils.clip_grad_norm_(small, 1.0)  # under the max: unchanged
    np.testing.assert_allclose(to_np(small.grad), [0.1, 0.1], rtol=1e-6)
    small.grad = mini.tensor([float("nan"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(small, 1.0, error_if_nonfinite=True)


def test_a_small_model_trains_with_adamw_and_clipping_eager_and_compiled():
    losses = {}
    for mode in ("eager", "compiled"):
        mini.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
        x, y = mini.randn(64, 8), mini.randn(64, 8)
        opt = mini.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
        fwd = mini.compile(model) if mode == "compiled" else model
        losses[mode] = []
        for _ in range(30):
            loss = ((fwd(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses[mode].append(float(loss.item()))
    assert losses["eager"][-1] < 0.7 * losses["eager"][0]
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=1e-3)
