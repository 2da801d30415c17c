"""mini.autocast (torch.autocast): matmuls in bfloat16, softmax / log_softmax / layer_norm /
mse_loss in float32, float64 never cast; the same casts eager and compiled (captured into the
graph, guarded on the autocast state), gradients through the casts, backward with autocast off."""

import sys
from pathlib import Path

import numpy as np
import pytest

import mini
import mini.nn.functional as F
from conftest import CUDA_SKIP_REASON, HAS_CUDA

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "labs"))

rng = np.random.default_rng(3)


def t(*shape, dtype=mini.float32, grad=False, device="cpu"):
    x = mini.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(device=device, dtype=dtype)
    return x.requires_grad_() if grad else x


def test_a_matmul_runs_in_bfloat16_inside_the_block_only():
    a, b = t(8, 16), t(16, 4)
    with mini.autocast("cpu"):
        assert mini.is_autocast_enabled("cpu") and not mini.is_autocast_enabled("cuda")
        assert mini.get_autocast_dtype("cpu") is mini.bfloat16
        inside = a @ b
    assert inside.dtype == mini.bfloat16
    expected = a.to(mini.bfloat16) @ b.to(mini.bfloat16)  # the casts autocast makes, by hand
    assert np.array_equal(inside.float().numpy(), expected.float().numpy())
    assert (a @ b).dtype == mini.float32 and not mini.is_autocast_enabled("cpu")


def test_float64_is_never_cast_and_other_devices_are_untouched():
    a, b = t(4, 5, dtype=mini.float64), t(5, 2, dtype=mini.float64)
    with mini.autocast("cpu"):
        assert (a @ b).dtype == mini.float64
    with mini.autocast("cuda"):  # a CPU matmul under CUDA autocast
        assert (t(4, 5) @ t(5, 2)).dtype == mini.float32


def test_blocks_nest_and_restore_and_enabled_false_turns_it_off():
    a, b = t(4, 5), t(5, 2)
    with mini.autocast("cpu"):
        with mini.autocast("cpu", enabled=False):
            assert (a @ b).dtype == mini.float32
        assert (a @ b).dtype == mini.bfloat16
    assert not mini.is_autocast_enabled("cpu")


def test_float32_ops_take_bfloat16_in_float32():
    x = t(6, 10, dtype=mini.bfloat16)
    w, b = t(10), t(10)
    with mini.autocast("cpu"):
        assert x.softmax(-1).dtype == mini.float32
        assert x.log_softmax(-1).dtype == mini.float32
        assert F.layer_norm(x, (10,), w, b).dtype == mini.float32
        assert F.mse_loss(x, x * 2).dtype == mini.float32
        assert (x.exp()).dtype == mini.bfloat16  # not on mini's float32 list
    np.testing.assert_allclose(mini.autocast("cpu")(lambda v: v.softmax(-1))(x).numpy(),
                               x.float().softmax(-1).numpy(), rtol=1e-6)


def test_linear_adds_its_bias_in_bfloat16_as_torch():
    layer = mini.nn.Linear(16, 8)
    with mini.autocast("cpu"):
        y = layer(t(4, 16))
    assert y.dtype == mini.bfloat16


def test_gradients_flow_through_the_casts_to_float32_leaves():
    a, b = t(8, 16, grad=True), t(16, 4, grad=True)
    with mini.autocast("cpu"):
        loss = (a @ b).float().pow(2).sum()
    loss.backward()
    ga, gb = a.grad, b.grad
    assert ga.dtype == mini.float32 and gb.dtype == mini.float32
    a2, b2 = a.detach().requires_grad_(), b.detach().requires_grad_()
    (a2.to(mini.bfloat16) @ b2.to(mini.bfloat16)).float().pow(2).sum().backward()
    assert np.array_equal(ga.numpy(), a2.grad.numpy()) and np.array_equal(gb.numpy(), b2.grad.numpy())


def test_backward_inside_the_block_runs_with_autocast_off():
    a, b = t(8, 16, grad=True), t(16, 4, grad=True)
    with mini.autocast("cpu"):
        (a @ b).float().sum().backward()
        inside = a.grad.numpy().copy()
    a.grad = None
    with mini.autocast("cpu"):
        loss = (a @ b).float().sum()
    loss.backward()
    assert np.array_equal(inside, a.grad.numpy())


def mlp(x, w1, w2, y):
    h = mini.relu(x @ w1)
    return F.mse_loss(h @ w2, y)


def test_compiled_code_makes_the_same_casts_and_recompiles_when_the_state_changes():
    x, w1, w2, y = t(8, 16), t(16, 32, grad=True), t(32, 4, grad=True), t(8, 4)
    compiled = mini.compile(mlp)
    mini.reset()
    with mini.autocast("cpu"):
        want = mlp(x, w1, w2, y)
        want.backward()
        want_grads = [w1.grad.numpy().copy(), w2.grad.numpy().copy()]
        w1.grad = w2.grad = None
        got = compiled(x, w1, w2, y)
        got.backward()
    assert got.dtype == want.dtype == mini.float32
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(w1.grad.numpy(), want_grads[0], rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(w2.grad.numpy(), want_grads[1], rtol=1e-2, atol=1e-3)
    outside = compiled(x, w1, w2, y)  # a graph of its own, float32 throughout
    np.testing.assert_allclose(outside.item(), mlp(x, w1, w2, y).item(), rtol=1e-6)


def test_the_recompile_names_the_autocast_change(capsys):
    mini.reset()
    f = mini.compile(lambda a, b: a @ b)
    a, b = t(4, 5), t(5, 3)
    mini.set_logs("recompiles")
    try:
        f(a, b)
        with mini.autocast("cpu"):
            assert f(a, b).dtype == mini.bfloat16
        assert f(a, b).dtype == mini.float32  # the first entry again: no third compile
    finally:
        mini.set_logs()
    err = capsys.readouterr().err
    assert "autocast changed: compiled with autocast off, now cpu:bfloat16" in err
    assert err.count("Recompiling") == 1


@pytest.mark.parametrize("bad", [dict(device_type="tpu"), dict(device_type="cuda", dtype=mini.float32)])
def test_what_autocast_refuses_it_names(bad):
    with pytest.raises(ValueError, match="device_type|bfloat16"):
        mini.autocast(**bad)


def test_mini_amp_autocast_is_the_same_thing():
    with mini.amp.autocast(device_type="cpu", dtype=mini.bfloat16):
        assert (t(2, 3) @ t(3, 2)).dtype == mini.bfloat16


def gpt_step(device, compiled):
    from gpt import GPT, Config
    mini.manual_seed(0)
    model = GPT(Config(block_size=16, vocab_size=32, n_layer=1, n_head=2, n_embd=32)).to(device)
    idx = mini.from_numpy(np.random.default_rng(0).integers(0, 32, size=(2, 16))).to(device)
    run = mini.compile(model) if compiled else model
    with mini.autocast(device):
        logits, loss = run(idx, idx)
    loss.backward()
    return logits, loss, model.transformer.wte.weight.grad


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)])])
def test_the_gpt_under_autocast_compiled_as_eager(device):
    mini.reset()
    e_logits, e_loss, e_grad = gpt_step(device, False)
    c_logits, c_loss, c_grad = gpt_step(device, True)
    assert e_logits.dtype == c_logits.dtype == mini.bfloat16  # the tied head's matmul
    assert e_loss.dtype == c_loss.dtype == mini.float32  # cross_entropy's log_softmax
    np.testing.assert_allclose(c_loss.item(), e_loss.item(), rtol=1e-2)
    np.testing.assert_allclose(c_grad.cpu().numpy(), e_grad.cpu().numpy(), rtol=5e-2, atol=5e-3)


# ---- every matrix product in bfloat16: mini.metrics.matmuls counts them by dtype ---------------
def matmuls_of(fn):
    """{dtype name: matmuls} that fn() runs."""
    mini.metrics.reset()
    fn()
    return mini.metrics.matmuls


def forward_backward(device, f, *inputs):
    """fn() running f(*inputs) under autocast and its backward (outside the block)."""
    def run():
        with mini.autocast(device):
            out = f(*inputs)
        out.float().sum().backward()
    return run


def product_cases(device):
    x, w, b = t(4, 6, 16, grad=True, device=device), t(8, 16, grad=True, device=device), t(8, grad=True, device=device)
    b1, b2 = t(3, 5, 7, grad=True, device=device), t(3, 7, 4, grad=True, device=device)
    q, k, v = (t(2, 2, 8, 16, grad=True, device=device) for _ in range(3))
    emb, x2 = t(10, 16, grad=True, device=device), t(6, 16, grad=True, device=device)
    idx = mini.tensor([[1, 2, 3], [4, 5, 9]]).to(device)

    def tied(idx, emb):  # the lm_head sharing the embedding's weight, as gpt.py ties them
        h = F.embedding(idx, emb)
        return F.linear(F.layer_norm(h, (16,)), emb)

    return {
        "linear": (lambda x, w, b: F.linear(x, w, b), x, w, b),
        "matmul": (lambda x, w: x @ w.t(), x, w),
        "mm": (lambda a, w: a.mm(w.t()), x2, w),
        "bmm": (lambda a, c: mini.bmm(a, c), b1, b2),
        "tied weights": (tied, idx, emb),
        "sdpa causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v),
        "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v),
    }


DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda,
                                               pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)])]
CASES = ["linear", "matmul", "mm", "bmm", "tied weights", "sdpa causal", "sdpa"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("compiled", [False, True])
def test_every_matmul_forward_and_backward_runs_in_bfloat16(device, case, compiled):
    mini.reset()
    f, *inputs = product_cases(device)[case]
    run = forward_backward(device, mini.compile(f) if compiled else f, *inputs)
    counts = matmuls_of(run)
    assert counts.get("bfloat16", 0) >= 2 and "float32" not in counts, counts  # forward and backward
    for x in inputs:
        if x.requires_grad:
            assert x.grad is not None and x.grad.dtype == x.dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compiled", [False, True])
def test_a_gpt_training_step_under_autocast_runs_no_float32_matmul(device, compiled):
    from gpt import GPT, Config
    mini.reset()
    mini.manual_seed(0)
    model = GPT(Config(block_size=16, vocab_size=32, n_layer=2, n_head=2, n_embd=32)).to(device)
    idx = mini.randint(0, 32, (2, 16), device=device)
    fn = mini.compile(model) if compiled else model

    def step():
        with mini.autocast(device):
            _, loss = fn(idx, idx)
        loss.backward()

    counts = matmuls_of(step)
    # per layer: 4 linears forward and 2 x 4 backward (attention's own products come on top)
    assert counts.get("bfloat16", 0) >= 2 * 12 + 3 and "float32" not in counts, counts


def test_bmm_checks_its_operands_as_torch():
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        mini.bmm(t(3, 4), t(2, 4, 5))
    with pytest.raises(RuntimeError, match="batch2 must be a 3D tensor"):
        t(2, 3, 4).bmm(t(4, 5))
    with pytest.raises(RuntimeError, match=r"to be: \[2, 4\] but got: \[3, 4\]"):
        mini.bmm(t(2, 3, 4), t(3, 4, 5))
    a, b = t(2, 3, 4), t(2, 4, 5)
    np.testing.assert_allclose(mini.bmm(a, b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5)


def test_a_transposed_weight_is_cast_as_the_matrix_it_views(capsys):
    # torch's cast keeps its operand's layout (preserve_format): autocast's bfloat16 copy of a
    # Linear's W.t() is W cast and transposed again, so no cast reads every element strided
    # (GPT-2's tied lm_head, 50304 x 768, took 0.28 ms a step as a transposing copy)
    layer = mini.nn.Linear(16, 8)
    x = t(4, 16)

    def f(x):
        with mini.autocast("cpu"):
            return layer(x).float().sum()
    want = f(x)
    want.backward()
    want_grad = layer.weight.grad.numpy().copy()
    layer.weight.grad = None
    mini.set_logs("aot_graphs")
    got = mini.compile(f, backend="aot_eager")(x)
    mini.set_logs("")
    got.backward()
    forward = capsys.readouterr().err.split("===== Backward graph")[0]
    casts = [line for line in forward.splitlines() if "mini.to(" in line and "bfloat16" in line]
    assert casts and not [c for c in casts if "transpose" in c.split("mini.to(")[1]], forward
    assert [c for c in casts if "mini.to(l_self_modules_" in c or "weight" in c.split("mini.to(")[1]], forward
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    np.testing.assert_allclose(layer.weight.grad.numpy(), want_grad, rtol=1e-6)
