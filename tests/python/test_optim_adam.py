"""Adam, AdamW (parameter groups, decoupled weight decay) and nn.utils.clip_grad_norm_
(issue 15, section 1) against numpy references, and a small model trained with them.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_optim_adam.py
"""
import math

import numpy as np
import pytest

import mini
import mini.nn as nn
from conftest import CUDA_SKIP_REASON, HAS_CUDA, to_np


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


def fused_and_op_by_op(cls, device, dtype, wd, steps=4, **kw):
    """The same parameters (a matrix, a vector, a non-contiguous one, a bfloat16 one when
    dtype is float32) stepped by the default optimizer and by fused=False, from the same grads;
    the launches of each's last step."""
    rng = np.random.default_rng(1)
    shapes = [(33, 17), (5,), (6, 4)]
    starts = [rng.standard_normal(s) for s in shapes]
    runs = []
    for fused in (None, False):
        params = [mini.tensor(x, dtype=dtype, device=device).requires_grad_() for x in starts]
        opt = cls([{"params": params[:2], "weight_decay": wd}, {"params": params[2:], "weight_decay": 0.0}],
                  lr=0.01, betas=(0.9, 0.95), eps=1e-8, fused=fused, **kw)
        g = np.random.default_rng(2)
        for _ in range(steps):
            for p, shape in zip(params, shapes):
                grad = mini.tensor(g.standard_normal(shape), dtype=dtype, device=device)
                p.grad = grad.t().contiguous().t() if p.dim() == 2 and shape == (6, 4) else grad  # [6, 4]: transposed strides
            launches = []
            with mini.no_grad():  # opt.step(), a parameter at a time, counting each one's kernels
                for group in opt.param_groups:
                    for p in group["params"]:
                        mini.metrics.reset()
                        opt._update(p, group)
                        launches.append(mini.metrics.kernel_launches)
        runs.append(([to_np(p.detach().cpu()) for p in params], launches))
    return runs


def check_fused_equals_op_by_op(device):
    for cls in (mini.optim.Adam, mini.optim.AdamW):
        for dtype in (mini.float32, mini.float64):
            for wd in (0.0, 0.1):
                (fused, fused_launches), (plain, plain_launches) = fused_and_op_by_op(cls, device, dtype, wd)
                for i, (a, b) in enumerate(zip(fused, plain)):
                    assert np.array_equal(a, b), (
                        f"{cls.__name__} {dtype} wd={wd} on {device}: parameter {i} differs from the op-by-op "
                        f"step by up to {np.max(np.abs(a - b)):.3g}")
                # the contiguous [33, 17] and [5]: one kernel each; [6, 4] with a transposed grad
                # is not fusable and takes the op-by-op kernels, as fused=False does for all three
                assert fused_launches[:2] == [1, 1] and fused_launches[2] == plain_launches[2], fused_launches
                assert min(plain_launches) >= 13, plain_launches


def test_the_fused_adam_step_is_one_kernel_and_the_op_by_op_steps_bits():
    # the default (fused) step computes what fused=False's 14 eager kernels compute, bit for
    # bit (optim_math.h: the same roundings in the same order, no fused multiply-adds), for
    # Adam and AdamW, float32 and float64, with and without weight decay, over 4 steps
    check_fused_equals_op_by_op("cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_the_fused_adam_step_is_one_kernel_and_the_op_by_op_steps_bits_on_cuda():
    check_fused_equals_op_by_op("cuda")


def test_a_groups_fused_step_is_one_call_one_kernel_a_parameter_and_the_same_bits():
    # opt.step() hands each group's parameters to adam_steps_ at once: the contiguous ones are
    # one kernel each, a parameter whose grad is a transposed view goes op by op
    rng = np.random.default_rng(3)
    starts = [rng.standard_normal(s).astype(np.float32) for s in [(8, 8), (8,), (4, 6)]]
    grads = [[rng.standard_normal(x.shape).astype(np.float32) for x in starts] for _ in range(3)]
    results = []
    for fused in (None, False):
        params = [mini.from_numpy(x.copy()).requires_grad_() for x in starts]
        opt = mini.optim.AdamW([{"params": params[:2]}, {"params": params[2:], "weight_decay": 0.0}], lr=0.01,
                               fused=fused)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = mini.from_numpy(g.T.copy()).t() if g.shape == (4, 6) else mini.from_numpy(g)
            mini.metrics.reset()
            opt.step()
        results.append(([to_np(p.detach()) for p in params], mini.metrics.kernel_launches))
    (fused_params, fused_launches), (plain_params, plain_launches) = results
    for a, b in zip(fused_params, plain_params):
        assert np.array_equal(a, b)
    per_param = (plain_launches - 1) // 3  # the (4, 6) group has no weight decay: one kernel fewer
    assert fused_launches == 2 + per_param and per_param >= 13, (fused_launches, plain_launches)


def test_the_fused_adam_step_names_what_it_cannot_take():
    p = mini.zeros(4, 3)
    ok = [mini.zeros(4, 3) for _ in range(3)]

    def step(*operands):
        mini._C.adam_step_(*operands, lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0, decoupled=True,
                           step=1)

    with pytest.raises(RuntimeError, match="grad has shape \\[3, 4\\] but param has shape \\[4, 3\\]"):
        step(p, mini.zeros(3, 4), *ok[1:])
    with pytest.raises(RuntimeError, match="exp_avg is float64 but param is float32"):
        step(p, ok[0], mini.zeros(4, 3, dtype=mini.float64), ok[2])
    with pytest.raises(RuntimeError, match="takes float32 or float64 \\(pass fused=False"):
        step(mini.zeros(4, 3, dtype=mini.int64), *ok)
    with pytest.raises(RuntimeError, match="exp_avg_sq is not contiguous"):
        step(p, ok[0], ok[1], mini.zeros(3, 4).t())
    with pytest.raises(ValueError, match="step must be at least 1"):
        mini._C.adam_step_(p, *ok, lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0, decoupled=True, step=0)
    assert np.array_equal(to_np(p), np.zeros((4, 3)))  # nothing written by a refused step


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


def check_multi_tensor_step(device):
    # 30 parameters in one group (more than one launch's 24 on CUDA), sizes from 1 element to a
    # few chunks, two dtypes, and 3 parameters whose state starts a step later (another step
    # number, so other bias corrections): every element as the op-by-op step computes it, and
    # on CUDA one launch for each 24 parameters of one dtype and step number
    rng = np.random.default_rng(5)
    shapes = [(1,), (7,), (1024,), (1025,), (33, 97), (5000,)] * 5
    dtypes = [np.float32] * 25 + [np.float64] * 5
    starts = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    grads = [[rng.standard_normal(x.shape).astype(x.dtype) for x in starts] for _ in range(3)]
    late = {3, 11, 20}  # stepped from the second step on
    results = []
    for fused in (None, False):
        params = [mini.from_numpy(x.copy()).to(device).requires_grad_() for x in starts]
        opt = mini.optim.AdamW(params, lr=0.01, weight_decay=0.1, fused=fused)
        launches = []
        for t, step in enumerate(grads):
            for i, (p, g) in enumerate(zip(params, step)):
                p.grad = None if (t == 0 and i in late) else mini.from_numpy(g).to(device)
            mini.metrics.reset()
            opt.step()
            launches.append(mini.metrics.kernel_launches)
        results.append(([to_np(p.detach()) for p in params], launches))
    (fused_params, fused_launches), (plain_params, _) = results
    for i, (a, b) in enumerate(zip(fused_params, plain_params)):
        assert np.array_equal(a, b), i
    # the third step (the first two also make the optimizer's state: zeros_like launches): on
    # CUDA 22 float32 parameters at step 3 (one launch), the 3 late ones at step 2 (one), the 5
    # float64 ones (one); on the CPU one kernel a parameter
    assert fused_launches[2] == (3 if device == "cuda" else 30), fused_launches


def test_the_fused_step_of_many_parameters_computes_the_op_by_op_bits():
    check_multi_tensor_step("cpu")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_the_fused_step_of_many_parameters_is_one_launch_per_24_on_cuda():
    check_multi_tensor_step("cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_more_than_24_parameters_of_one_step_take_two_launches_on_cuda():
    params = [mini.ones(3, device="cuda").requires_grad_() for _ in range(25)]
    opt = mini.optim.Adam(params, lr=0.1)
    for p in params:
        p.grad = mini.ones(3, device="cuda")
    opt.step()  # the first step also makes the state (zeros_like: launches of their own)
    # Adam's first step moves each element by lr (m / sqrt(v) = 1 at t = 1, up to eps)
    for p in params:
        assert np.allclose(to_np(p.detach()), 0.9, atol=1e-6)
    mini.metrics.reset()
    opt.step()
    assert mini.metrics.kernel_launches == 2
