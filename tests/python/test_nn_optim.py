"""mini.nn and mini.optim: module registration and naming as torch, layer forwards against
numpy, Linear's init bounds, train/eval, SGD updates against a numpy re-implementation of
torch's rule, and a small training loop that converges. The forward, SGD and training tests
take conftest's `device` fixture: they run on the CPU and, with module.to(device), on CUDA."""
import math

import numpy as np
import pytest

import mini
import mini.nn as nn
import mini.optim as optim
from mini.nn import functional as F
from conftest import assert_close, gradcheck, mk, np_gelu, np_layer_norm, np_softmax, to_np


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(4, 2, bias=False)
        self.scale = nn.Parameter(mini.ones(2))
        self.buffer_like = mini.zeros(2)  # a plain tensor: not a parameter

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 3), nn.GELU(), nn.LayerNorm(3))
        self.head = MLP()

    def forward(self, x):
        return self.head(self.body(x))


# ---------------------------------------------------------------------------------------------
# registration


def test_parameter_is_tensor_requiring_grad():
    p = nn.Parameter(mini.zeros(2, 3))
    assert isinstance(p, mini.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad is None
    assert p.shape == (2, 3)
    q = nn.Parameter(mini.zeros(2), requires_grad=False)
    assert not q.requires_grad


def test_parameter_gets_grad():
    p = nn.Parameter(mk(np.array([1.0, 2.0])))
    (p * p).sum().backward()
    assert_close(p.grad, [2.0, 4.0])


def test_named_parameters_flat_module():
    names = [n for n, _ in MLP().named_parameters()]
    # as torch: a module's own parameters first, then its submodules' (pre-order)
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight"]


def test_named_parameters_nested_and_sequential():
    names = [n for n, _ in Outer().named_parameters()]
    assert names == ["body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias",
                     "head.scale", "head.fc1.weight", "head.fc1.bias", "head.fc2.weight"]
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_parameters_are_the_registered_tensors():
    m = MLP()
    params = list(m.parameters())
    assert len(params) == 4
    assert params[0] is m.scale and params[1] is m.fc1.weight and params[3] is m.fc2.weight
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in params)
    assert [tuple(p.shape) for p in params] == [(2,), (4, 3), (4,), (2, 4)]


def test_shared_parameter_listed_once():
    m = nn.Module()
    lin = nn.Linear(2, 2)
    m.a = lin
    m.b = lin
    assert len(list(m.parameters())) == 2


def test_children_and_modules():
    o = Outer()
    children = list(o.children())
    assert len(children) == 2 and children[0] is o.body and children[1] is o.head
    mods = list(o.modules())
    assert mods[0] is o
    assert len(mods) == 1 + 1 + 3 + 1 + 3  # self, body, its 3 layers, head, head's 3 layers
    assert sum(isinstance(m, nn.Linear) for m in mods) == 3


def test_sequential_indexing_and_len():
    layers = [nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3
    assert seq[0] is layers[0] and seq[2] is layers[2]
    assert list(seq) == layers


def test_module_call_runs_forward(rng):
    m = MLP()
    with mini.no_grad():
        m.scale.copy_(mk(np.array([2.0, -1.0])))
    s, W1, b1, W2 = [to_np(p).astype(np.float64) for p in m.parameters()]
    x = rng.standard_normal((5, 3)).astype(np.float32)
    assert_close(m(mk(x)), np.maximum(x @ W1.T + b1, 0) @ W2.T * s, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# layers


def test_linear_forward_matches_numpy(rng, device):
    lin = nn.Linear(3, 5).to(device)
    W, b = to_np(lin.weight).astype(np.float64), to_np(lin.bias).astype(np.float64)
    for shape in [(3,), (4, 3), (2, 4, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        assert_close(lin(mk(x)), x @ W.T + b, rtol=1e-5, atol=1e-6, dtype=mini.float32)


def test_linear_without_bias(rng, device):
    lin = nn.Linear(3, 2, bias=False).to(device)
    assert lin.bias is None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    x = rng.standard_normal((4, 3)).astype(np.float32)
    assert_close(lin(mk(x)), x @ to_np(lin.weight).T.astype(np.float64), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fan_in,fan_out", [(4, 3), (100, 50), (1, 7)])
def test_linear_init_bounds(fan_in, fan_out):
    mini.manual_seed(0)
    lin = nn.Linear(fan_in, fan_out)
    bound = 1.0 / math.sqrt(fan_in)
    w, b = to_np(lin.weight), to_np(lin.bias)
    assert w.shape == (fan_out, fan_in) and b.shape == (fan_out,)
    assert lin.weight.dtype == mini.float32
    assert np.abs(w).max() <= bound + 1e-7 and np.abs(b).max() <= bound + 1e-7
    if w.size >= 100:  # uniform over [-bound, bound]: spread and centred
        assert np.abs(w).max() > 0.9 * bound
        assert abs(w.mean()) < 0.1 * bound
        assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound
    assert len(np.unique(w)) > 0.99 * w.size  # random, not a constant fill


def test_functional_linear(rng):
    x, W, b = rng.standard_normal((4, 3)), rng.standard_normal((2, 3)), rng.standard_normal(2)
    assert_close(F.linear(mk(x), mk(W), mk(b)), x @ W.T + b)
    assert_close(F.linear(mk(x), mk(W)), x @ W.T)


def test_relu_gelu_modules(rng):
    x = rng.uniform(-3, 3, size=(4, 5))
    assert_close(nn.ReLU()(mk(x)), np.maximum(x, 0))
    assert_close(nn.GELU()(mk(x)), np_gelu(x))
    assert_close(nn.GELU(approximate="tanh")(mk(x)), np_gelu(x, "tanh"))
    assert list(nn.ReLU().parameters()) == []


@pytest.mark.parametrize("shape", [4, (4,), (3, 4)], ids=str)
def test_layernorm_module(shape, rng):
    ln = nn.LayerNorm(shape)
    ns = (shape,) if isinstance(shape, int) else shape
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    assert_close(ln.weight, np.ones(ns))
    assert_close(ln.bias, np.zeros(ns))
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    assert_close(ln(mk(x)), np_layer_norm(x.astype(np.float64), ns), rtol=1e-4, atol=1e-5)
    with mini.no_grad():  # a non-trivial affine part
        ln.weight.fill_(2.0)
        ln.bias.fill_(-1.0)
    assert_close(ln(mk(x)), np_layer_norm(x.astype(np.float64), ns, 2.0, -1.0), rtol=1e-4,
                 atol=1e-5)


def test_layernorm_eps():
    ln = nn.LayerNorm(3, eps=0.5)
    x = np.array([[0.0, 0.1, 0.2]], dtype=np.float32)
    assert_close(ln(mk(x)), np_layer_norm(x.astype(np.float64), (3,), eps=0.5), rtol=1e-5)


def test_functional_surface(rng):
    x = rng.standard_normal((3, 4))
    t = mk(x)
    assert_close(F.relu(t), np.maximum(x, 0))
    assert_close(F.gelu(t, approximate="tanh"), np_gelu(x, "tanh"))
    assert_close(F.softmax(t, dim=1), np_softmax(x, 1))
    assert_close(F.log_softmax(t, dim=0), np.log(np_softmax(x, 0)))
    assert_close(F.layer_norm(t, (4,)), np_layer_norm(x, (4,)))
    y = rng.standard_normal((3, 4))
    assert_close(F.mse_loss(t, mk(y)), ((x - y) ** 2).mean())
    assert_close(F.mse_loss(t, mk(y), reduction="sum"), ((x - y) ** 2).sum())


def test_module_gradients_match_finite_differences():
    mini.manual_seed(3)
    lin = nn.Linear(3, 2)
    W, b = to_np(lin.weight).astype(np.float64), to_np(lin.bias).astype(np.float64)
    x = np.random.default_rng(0).standard_normal((4, 3))
    gradcheck(lambda w, bb: F.layer_norm(F.gelu(F.linear(mk(x), w, bb)), (2,)), W, b)


# ---------------------------------------------------------------------------------------------
# train / eval / zero_grad


def test_train_eval_flags_recursive():
    o = Outer()
    assert o.training and all(m.training for m in o.modules())
    assert o.eval() is o
    assert not o.training and not any(m.training for m in o.modules())
    assert o.train() is o
    assert all(m.training for m in o.modules())
    o.train(False)
    assert not any(m.training for m in o.modules())


def test_module_zero_grad(rng):
    m = MLP()
    m(mk(rng.standard_normal((2, 3)).astype(np.float32))).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())  # set_to_none=True, as torch >= 2.0


# ---------------------------------------------------------------------------------------------
# SGD


def _np_sgd(p, grads_fn, steps, lr, momentum=0.0, weight_decay=0.0):
    """torch.optim.SGD's update (dampening 0, no nesterov), in numpy."""
    p = p.astype(np.float64).copy()
    buf = None
    for _ in range(steps):
        g = grads_fn(p) + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + g
            g = buf
        p = p - lr * g
    return p


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.usefixtures("device")
def test_sgd_matches_numpy(momentum, weight_decay, rng):
    p0 = rng.standard_normal((3, 2))
    c = rng.standard_normal((3, 2))
    p = nn.Parameter(mk(p0))
    opt = optim.SGD([p], lr=0.1, momentum=momentum, weight_decay=weight_decay)
    for _ in range(4):
        opt.zero_grad()
        loss = (p * p * p).sum() + (p * mk(c)).sum()  # grad = 3 p^2 + c, depends on p
        loss.backward()
        opt.step()
    expected = _np_sgd(p0, lambda q: 3 * q * q + c, 4, 0.1, momentum, weight_decay)
    assert_close(p, expected, rtol=1e-10, atol=1e-12)
    assert p.is_leaf and p.requires_grad


@pytest.mark.usefixtures("device")
def test_sgd_step_is_p_minus_lr_grad(rng):
    p0 = rng.standard_normal(5).astype(np.float32)
    p = nn.Parameter(mk(p0))
    (p * 2.0).sum().backward()
    optim.SGD([p], lr=0.25).step()
    assert_close(p, p0.astype(np.float64) - 0.25 * 2.0, dtype=mini.float32)


def test_sgd_skips_params_without_grad(rng):
    a, b = nn.Parameter(mini.ones(2)), nn.Parameter(mini.ones(2))
    (a * 3).sum().backward()
    optim.SGD([a, b], lr=1.0).step()
    assert_close(a, [-2.0, -2.0])
    assert_close(b, [1.0, 1.0])


def test_sgd_zero_grad_modes():
    p = nn.Parameter(mini.ones(2))
    opt = optim.SGD([p], lr=0.1)
    (p * 2).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert_close(p.grad, [0.0, 0.0])
    (p * 2).sum().backward()
    opt.zero_grad()
    assert p.grad is None


def test_sgd_param_groups_lr_is_used():
    p = nn.Parameter(mini.zeros(2))
    opt = optim.SGD([p], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1 and isinstance(opt.param_groups[0]["lr"], float)
    assert opt.param_groups[0]["params"][0] is p
    opt.param_groups[0]["lr"] = 1.0
    (p * 1.0).sum().backward()
    opt.step()
    assert_close(p, [-1.0, -1.0])


def test_sgd_on_module_parameters(rng, device):
    m = MLP().to(device)
    before = [to_np(p).copy() for p in m.parameters()]
    m(mk(rng.standard_normal((4, 3)).astype(np.float32))).pow(2).sum().backward()
    grads = [to_np(p.grad) for p in m.parameters()]
    optim.SGD(m.parameters(), lr=0.05).step()
    for p, p0, g in zip(m.parameters(), before, grads):
        assert_close(p, p0.astype(np.float64) - 0.05 * g, rtol=1e-5, atol=1e-6)


def test_training_loop_reduces_loss(rng, device):
    mini.manual_seed(0)
    X = rng.standard_normal((64, 3)).astype(np.float32)
    w_true = np.array([[1.5], [-2.0], [0.5]], dtype=np.float32)
    Y = X @ w_true + 0.3
    x, y = mk(X), mk(Y)
    model = nn.Sequential(nn.Linear(3, 1)).to(device)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 10, f"loss {losses[0]:.4f} -> {losses[-1]:.4f}"
    np.testing.assert_allclose(to_np(model[0].weight).ravel(), w_true.ravel(), atol=0.05)
    assert abs(model[0].bias.item() - 0.3) < 0.05
    assert not any(math.isnan(v) for v in losses)
