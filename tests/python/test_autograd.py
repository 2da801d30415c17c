"""Autograd: backward() of every differentiable op against central finite differences (float64,
via conftest.gradcheck), and the semantics of the tape: accumulation, detach, no_grad,
retain_graph, explicit gradients, non-leaf .grad, requires_grad rules."""
import warnings

import numpy as np
import pytest

import mini
from conftest import assert_close, gradcheck, mk, to_np

KIT_ASSIGNMENT = "a1"  # every test here is A1's unless it says otherwise (conftest.py)

R = np.random.default_rng(7)


def U(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape)


def away_from_zero(*shape):
    """Values with |x| in [0.2, 2] (no kinks of abs/relu nearby)."""
    return R.uniform(0.2, 2.0, size=shape) * R.choice([-1.0, 1.0], size=shape)


def distinct(*shape):
    """A random permutation scaled to steps of 0.1: no ties for max/min/amax."""
    n = int(np.prod(shape)) if shape else 1
    return (R.permutation(n).astype(np.float64) * 0.1 - n * 0.05).reshape(shape)


# (id, fn over mini tensors, input arrays)
CASES = [
    # pointwise unary
    ("neg", lambda x: -x, [U(3, 4)]),
    ("neg fn", lambda x: mini.neg(x), [U(5)]),
    ("abs", lambda x: x.abs(), [away_from_zero(3, 4)]),
    ("exp", lambda x: x.exp(), [U(3, 4)]),
    ("log", lambda x: x.log(), [U(3, 4, lo=0.3, hi=3)]),
    ("sin", lambda x: x.sin(), [U(3, 4)]),
    ("cos", lambda x: x.cos(), [U(3, 4)]),
    ("tanh", lambda x: x.tanh(), [U(3, 4)]),
    ("sigmoid", lambda x: x.sigmoid(), [U(3, 4)]),
    ("relu", lambda x: x.relu(), [away_from_zero(3, 4)]),
    ("sqrt", lambda x: x.sqrt(), [U(3, 4, lo=0.3, hi=3)]),
    ("rsqrt", lambda x: x.rsqrt(), [U(3, 4, lo=0.3, hi=3)]),
    ("gelu", lambda x: mini.gelu(x), [U(3, 4, lo=-3, hi=3)]),
    ("gelu tanh", lambda x: mini.gelu(x, approximate="tanh"), [U(3, 4, lo=-3, hi=3)]),
    # pointwise binary, incl. broadcasting (grads reduced to each input's shape)
    ("add", lambda a, b: a + b, [U(3, 4), U(3, 4)]),
    ("sub", lambda a, b: a - b, [U(3, 4), U(3, 4)]),
    ("mul", lambda a, b: a * b, [U(3, 4), U(3, 4)]),
    ("div", lambda a, b: a / b, [U(3, 4), away_from_zero(3, 4)]),
    ("add [3,1]x[1,4]", lambda a, b: a + b, [U(3, 1), U(1, 4)]),
    ("mul [3,1]x[1,4]", lambda a, b: a * b, [U(3, 1), U(1, 4)]),
    ("sub [5]x[2,5]", lambda a, b: a - b, [U(5), U(2, 5)]),
    ("div [2,5]x[5]", lambda a, b: a / b, [U(2, 5), away_from_zero(5)]),
    ("mul 0-d x [3]", lambda a, b: a * b, [U(), U(3)]),
    ("mul [2,3,4]x[3,1]", lambda a, b: a * b, [U(2, 3, 4), U(3, 1)]),
    ("add fn", lambda a, b: mini.add(a, b), [U(4), U(4)]),
    ("mul method", lambda a, b: a.mul(b), [U(4), U(2, 4)]),
    ("x used twice", lambda a: a * a + a, [U(3, 4)]),
    ("scalar ops", lambda a: (3.0 - a) * 2 / 4 + 1, [U(3, 4)]),
    ("rdiv", lambda a: 2.0 / a, [away_from_zero(3, 4)]),
    ("pow scalar", lambda a: a ** 3, [U(3, 4)]),
    ("pow fractional", lambda a: a ** 1.5, [U(3, 4, lo=0.3, hi=3)]),
    ("pow tensor", lambda a, b: a ** b, [U(3, 4, lo=0.3, hi=3), U(3, 4)]),
    ("pow tensor bcast", lambda a, b: a.pow(b), [U(3, 4, lo=0.3, hi=3), U(4)]),
    ("rpow", lambda a: 2.0 ** a, [U(3, 4)]),
    ("maximum", lambda a, b: mini.maximum(a, b), [distinct(3, 4), distinct(3, 4) + 0.05]),
    ("minimum", lambda a, b: mini.minimum(a, b), [distinct(3, 4), distinct(3, 4) + 0.05]),
    ("maximum bcast", lambda a, b: mini.maximum(a, b), [distinct(3, 4), distinct(4) + 0.05]),
    ("where", lambda a, b: mini.where(mk(np.array([[True, False, True, False]] * 3)), a, b),
     [U(3, 4), U(3, 4)]),
    ("where bcast", lambda a, b: mini.where(mk(np.array([True, False, True])[:, None]), a, b),
     [U(3, 1), U(4)]),
    # reductions
    ("sum", lambda x: x.sum(), [U(2, 3, 4)]),
    ("sum dim", lambda x: x.sum(1), [U(2, 3, 4)]),
    ("sum dim keepdim", lambda x: x.sum(dim=-1, keepdim=True), [U(2, 3, 4)]),
    ("sum dims", lambda x: x.sum(dim=(0, 2)), [U(2, 3, 4)]),
    ("sum dims keepdim", lambda x: x.sum(dim=(0, 2), keepdim=True), [U(2, 3, 4)]),
    ("mean", lambda x: x.mean(), [U(2, 3, 4)]),
    ("mean dim", lambda x: x.mean(0), [U(2, 3, 4)]),
    ("mean dims keepdim", lambda x: x.mean(dim=(1, 2), keepdim=True), [U(2, 3, 4)]),
    ("amax dim", lambda x: x.amax(1), [distinct(2, 3, 4)]),
    ("amax all dims", lambda x: x.amax(dim=(0, 1)), [distinct(3, 4)]),
    ("amax dims keepdim", lambda x: x.amax(dim=(0, 2), keepdim=True), [distinct(2, 3, 4)]),
    ("max", lambda x: x.max(), [distinct(3, 4)]),
    ("min", lambda x: x.min(), [distinct(3, 4)]),
    ("max dim values", lambda x: x.max(1).values, [distinct(3, 4)]),
    ("max dim keepdim", lambda x: x.max(0, keepdim=True)[0], [distinct(3, 4)]),
    ("min dim values", lambda x: x.min(-1).values, [distinct(2, 3, 4)]),
    # views
    ("transpose", lambda x, c=U(4, 3): x.transpose(0, 1) * mk(c), [U(3, 4)]),
    ("t", lambda x, c=U(3, 2): x.t() @ mk(c), [U(3, 4)]),
    ("reshape", lambda x, c=U(4, 3): x.reshape(4, 3) * mk(c), [U(3, 4)]),
    ("view", lambda x, c=U(12): x.view(-1) * mk(c), [U(3, 4)]),
    ("reshape of transposed", lambda x, c=U(12): x.t().reshape(-1) * mk(c), [U(3, 4)]),
    ("permute", lambda x, c=U(4, 2, 3): x.permute(2, 0, 1) * mk(c), [U(2, 3, 4)]),
    ("unsqueeze", lambda x, c=U(3, 2, 4): x.unsqueeze(1) * mk(c), [U(3, 4)]),
    ("squeeze", lambda x, c=U(3, 4): x.squeeze(1) * mk(c), [U(3, 1, 4)]),
    ("squeeze all", lambda x: x.squeeze(), [U(1, 3, 1)]),
    ("expand", lambda x, c=U(3, 4): x.expand(3, 4) * mk(c), [U(3, 1)]),
    ("expand new dim", lambda x, c=U(2, 3, 4): x.expand(2, 3, 4) * mk(c), [U(3, 4)]),
    ("slice", lambda x: x[:, 1:3], [U(3, 4)]),
    ("slice step", lambda x: x[::2, 1::2], [U(5, 4)]),
    ("index", lambda x: x[1], [U(3, 4)]),
    ("index 0-d", lambda x: x[1, 2] * 3, [U(3, 4)]),
    ("ellipsis None", lambda x, c=U(3, 4, 2): x[..., None] * mk(c), [U(3, 4)]),
    ("overlapping slices", lambda x: x[:2] * x[1:], [U(3, 4)]),
    ("contiguous", lambda x: x.t().contiguous(), [U(3, 4)]),
    ("clone", lambda x: x.clone() * x, [U(3, 4)]),
    # matmul and friends
    ("matmul 2-D", lambda a, b: a @ b, [U(3, 4), U(4, 5)]),
    ("matmul 1-D 1-D", lambda a, b: a @ b, [U(4), U(4)]),
    ("matmul 2-D 1-D", lambda a, b: a.matmul(b), [U(3, 4), U(4)]),
    ("matmul 1-D 2-D", lambda a, b: mini.matmul(a, b), [U(4), U(4, 5)]),
    ("matmul batched", lambda a, b: a @ b, [U(2, 3, 4), U(2, 4, 5)]),
    ("matmul batched x 2-D", lambda a, b: a @ b, [U(2, 3, 4), U(4, 5)]),
    ("matmul broadcast batch", lambda a, b: a @ b, [U(2, 1, 3, 4), U(3, 4, 2)]),
    ("mm", lambda a, b: mini.mm(a, b), [U(3, 4), U(4, 2)]),
    ("softmax -1", lambda x: x.softmax(-1), [U(3, 5)]),
    ("softmax 0", lambda x: x.softmax(0), [U(3, 5)]),
    ("softmax 3-D mid", lambda x: x.softmax(dim=1), [U(2, 3, 4)]),
    ("log_softmax -1", lambda x: x.log_softmax(-1), [U(3, 5)]),
    ("log_softmax 0", lambda x: x.log_softmax(0), [U(2, 3, 4)]),
    ("layer_norm", lambda x: mini.layer_norm(x, (5,)), [U(3, 5)]),
    ("layer_norm affine", lambda x, w, b: mini.layer_norm(x, (5,), w, b),
     [U(3, 5), U(5), U(5)]),
    ("layer_norm weight only", lambda x, w: mini.layer_norm(x, (5,), w), [U(3, 5), U(5)]),
    ("layer_norm 2 dims", lambda x, w, b: mini.layer_norm(x, (3, 4), w, b),
     [U(2, 3, 4), U(3, 4), U(3, 4)]),
    ("mse_loss mean", lambda a, b: mini.mse_loss(a, b), [U(3, 4), U(3, 4)]),
    ("mse_loss sum", lambda a, b: mini.mse_loss(a, b, reduction="sum"), [U(3, 4), U(3, 4)]),
    ("mse_loss none", lambda a, b: mini.mse_loss(a, b, reduction="none"), [U(3, 4), U(3, 4)]),
    # compositions
    ("mlp", lambda x, w1, w2: ((x @ w1).relu() @ w2).tanh().sum(),
     [U(4, 3), U(3, 5), U(5, 2)]),
    ("attention-ish", lambda q, k: (q @ k.transpose(-1, -2) / 2.0).softmax(-1).sum(0),
     [U(2, 3, 4), U(2, 3, 4)]),
    ("float64 conversion", lambda x: x.double() * 2, [U(3)]),
]


@pytest.mark.usefixtures("device")  # mk() builds the leaves on each device
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradcheck(case):
    _, fn, arrays = case
    gradcheck(fn, *arrays)


# Where a derivative has a choice (a kink, a tie), torch's value, exactly: finite differences
# cannot see these, the inputs above avoid them. (notes/assignments/A1.md, "Kinks and ties")
KINKS = {
    # d/dx x**0 = 0 * x**-1: torch masks it to 0 where the exponent is 0, not NaN at x = 0
    "pow, exponent 0 at x = 0": (lambda x: x ** 0, [0.0, 2.0], [0.0, 0.0]),
    # d/dy 0**y = 0**y * log(0): masked to 0 where the base is 0 and y >= 0
    "pow, base 0": (lambda y: mini.zeros(2, dtype=mini.float64) ** y, [0.0, 1.0], [0.0, 0.0]),
    # a tie gives each side half: maximum(x, x) sums back to 1, not 2
    "maximum, a tie": (lambda x: mini.maximum(x, x), [1.0, 3.0], [1.0, 1.0]),
    "minimum, a tie": (lambda x: mini.minimum(x, x), [1.0, 3.0], [1.0, 1.0]),
    # elements tied for the extreme share it equally
    "amax, two tie": (lambda x: x.amax(), [2.0, 2.0, 1.0], [0.5, 0.5, 0.0]),
    "amin, two tie": (lambda x: x.amin(), [1.0, 1.0, 3.0], [0.5, 0.5, 0.0]),
}


@pytest.mark.parametrize("case", list(KINKS))
def test_kinks_and_ties_take_torchs_values(case):
    fn, values, want = KINKS[case]
    x = mini.tensor(values, dtype=mini.float64, requires_grad=True)
    fn(x).sum().backward()
    assert x.grad.tolist() == want, f"{case}: gradient {x.grad.tolist()}, torch's is {want}"


# ---------------------------------------------------------------------------------------------
# tape semantics


def _leaf(values=(1.0, 2.0, 3.0), dtype=mini.float64):
    return mini.tensor(list(values), dtype=dtype, requires_grad=True)


def test_grad_is_none_before_backward():
    x = _leaf()
    assert x.grad is None
    y = (x * x).sum()
    assert x.grad is None
    y.backward()
    assert_close(x.grad, [2.0, 4.0, 6.0])


def test_gradient_accumulates_over_backward_calls():
    x = _leaf()
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    assert_close(x.grad, np.array([2.0, 4.0, 6.0]) + 3.0)


def test_float32_grad_dtype_and_values():
    x = mini.tensor([1.0, -2.0], requires_grad=True)
    (x * x * x).sum().backward()
    assert x.grad.dtype == mini.float32
    assert_close(x.grad, [3.0, 12.0])


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_requires_grad_propagation_and_grad_fn():
    x = _leaf()
    c = mini.tensor([1.0, 1.0, 1.0], dtype=mini.float64)
    y = x * c
    assert y.requires_grad and not y.is_leaf and y.grad_fn is not None
    assert x.is_leaf and x.grad_fn is None
    z = c * 2
    assert not z.requires_grad and z.grad_fn is None and z.is_leaf


def test_detach_stops_gradients():
    x = _leaf()
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    (x * x.detach()).sum().backward()
    assert_close(x.grad, [1.0, 2.0, 3.0])  # not 2x: the detached factor is a constant


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_detach_shares_storage():
    x = _leaf()
    x.detach().mul_(0)
    assert_close(x.detach(), [0.0, 0.0, 0.0])


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_detach_inplace():
    x = _leaf()
    y = x * 2
    y.detach_()
    assert not y.requires_grad and y.grad_fn is None


@pytest.mark.parametrize("op,rule", [
    (lambda y: y.relu_(), lambda y: (y > 0) * 1.0),
    (lambda y: y.clamp_(-1.0, 1.5), lambda y: ((y >= -1.0) & (y <= 1.5)) * 1.0),
    (lambda y: y.masked_fill_(y > 1, 0.0), lambda y: (y <= 1) * 1.0),
    (lambda y: y.fill_(2.0), lambda y: y * 0.0),
    (lambda y: y.copy_(mini.ones(3)), lambda y: y * 0.0),
])
def test_inplace_ops_on_intermediates_are_differentiated(op, rule):
    # y = 2x written in place: the gradient of x is 2 * d(op)/dy at y's old value
    x = _leaf((-1.0, 0.25, 1.0))
    y = x * 2
    old = to_np(y)
    op(y)
    y.sum().backward()
    assert_close(x.grad, 2 * rule(old))


def test_copy_into_an_intermediate_differentiates_the_source():
    x, s = _leaf(), _leaf((4.0, 5.0, 6.0))
    y = x * 1
    y.copy_(s * 3)
    (y * mini.tensor([1.0, 2.0, 3.0], dtype=mini.float64)).sum().backward()
    assert_close(s.grad, [3.0, 6.0, 9.0])
    assert_close(x.grad, [0.0, 0.0, 0.0])


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_inplace_on_a_view_with_a_value_that_requires_grad_is_refused():
    # the view would get a history and its base none: the base's gradient would be lost
    base = mini.zeros(3, dtype=mini.float64)
    with pytest.raises(RuntimeError, match="on a view"):
        base[:2].add_(_leaf((1.0, 2.0)))


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_no_grad_context():
    x = _leaf()
    assert mini.is_grad_enabled()
    with mini.no_grad():
        assert not mini.is_grad_enabled()
        y = x * 2 + 1
        with mini.enable_grad():
            assert mini.is_grad_enabled()
            w = x * 2
        assert not mini.is_grad_enabled()
    assert mini.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert w.requires_grad
    assert_close(y, [3.0, 5.0, 7.0])


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_no_grad_decorator():
    @mini.no_grad()
    def f(t):
        assert not mini.is_grad_enabled()
        return t * 2

    x = _leaf()
    assert not f(x).requires_grad
    assert mini.is_grad_enabled()


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_no_grad_restored_after_exception():
    with pytest.raises(ZeroDivisionError):
        with mini.no_grad():
            1 / 0
    assert mini.is_grad_enabled()


def test_retain_graph_allows_second_backward():
    x = _leaf()
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert_close(x.grad, 2 * np.array([2.0, 4.0, 6.0]))


def test_second_backward_without_retain_graph_raises():
    x = _leaf()
    y = (x.exp() * x).sum()  # saves tensors, freed after the first backward
    y.backward()
    with pytest.raises(RuntimeError):
        y.backward()
    (x * 1.0).sum().backward()  # the tape keeps working


def test_backward_with_explicit_gradient():
    x = _leaf()
    y = x * x  # non-scalar
    y.backward(mini.tensor([1.0, 0.5, -1.0], dtype=mini.float64))
    assert_close(x.grad, np.array([2.0, 4.0, 6.0]) * [1.0, 0.5, -1.0])


def test_backward_gradient_keyword():
    x = _leaf()
    (x * 3).backward(gradient=mini.ones(3, dtype=mini.float64))
    assert_close(x.grad, [3.0, 3.0, 3.0])


def test_non_leaf_grad_stays_none():
    x = _leaf()
    y = x * 2
    y.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when .grad of a non-leaf is read
        assert y.grad is None
    assert x.grad is not None


def test_requires_grad_on_leaf():
    x = mini.ones(3)
    assert not x.requires_grad
    out = x.requires_grad_()
    assert x.requires_grad and out.requires_grad
    (x * 2).sum().backward()
    assert_close(x.grad, [2.0, 2.0, 2.0])
    x.requires_grad_(False)
    assert not x.requires_grad


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
@pytest.mark.parametrize("dtype", [mini.int64, mini.bool])
def test_int_tensors_cannot_require_grad(dtype):
    with pytest.raises(RuntimeError, match="floating point"):
        mini.tensor([1, 0], dtype=dtype, requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        mini.tensor([1, 0], dtype=dtype).requires_grad_()
    assert (mini.tensor([1, 2]) + 1).tolist() == [2, 3]


def test_diamond_graph():
    x = _leaf((0.5, -1.0))
    a = x.exp()
    y = (a * x + a.sin()).sum()
    y.backward()
    v = np.array([0.5, -1.0])
    assert_close(x.grad, np.exp(v) * v + np.exp(v) + np.cos(np.exp(v)) * np.exp(v))


def test_grad_zero_and_reuse():
    x = _leaf()
    (x * x).sum().backward()
    x.grad.zero_()
    (x * 5).sum().backward()
    assert_close(x.grad, [5.0, 5.0, 5.0])


def test_integer_ops_inside_graph_do_not_break_backward():
    x = _leaf((1.0, -2.0, 3.0))
    mask = (x > 0).float().double()
    (x * mask).sum().backward()
    assert_close(x.grad, [1.0, 0.0, 1.0])


def test_leaf_used_by_several_outputs_of_one_view_chain():
    x = mini.tensor(np.arange(6.0).reshape(2, 3).tolist(), dtype=mini.float64,
                    requires_grad=True)
    y = x.t()[1:] * 2 + x[0].unsqueeze(0).expand(2, 3).t()[1:]
    y.sum().backward()
    expected = np.zeros((2, 3))
    expected[:, 1:] += 2
    expected[0, 1:] += 2  # x[0, j] feeds both columns of the expanded view
    assert_close(x.grad, expected)


def test_backward_frees_grad_of_no_grad_inputs():
    w = _leaf()
    c = mini.ones(3, dtype=mini.float64)
    (w * c).sum().backward()
    assert c.grad is None


@pytest.mark.usefixtures("device")
def test_matmul_grad_float32_against_hand_formula():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    b = np.array([[0.5, -1.0], [2.0, 0.0]], dtype=np.float32)
    ta = mk(a, requires_grad=True)
    tb = mk(b, requires_grad=True)
    (ta @ tb).sum().backward()
    ones = np.ones((2, 2))
    assert_close(ta.grad, ones @ b.T)
    assert_close(tb.grad, a.T @ ones)
    assert np.all(np.isfinite(to_np(ta.grad)))


def test_a_leaf_takes_the_gradient_the_backward_made_for_it_without_a_copy():
    # torch's AccumulateGrad steals a gradient nothing else holds; a clone of every weight
    # gradient cost a GPT-2 step 48 copies. Backward of (w * 3).sum(): the root's ones (one
    # kernel), the product's gradient ones * 3 (one kernel), and no copy into w.grad.
    w = mini.randn(64, 32, requires_grad=True)
    loss = (w * 3).sum()
    mini.metrics.reset()
    loss.backward()
    assert mini.metrics.kernel_launches == 2
    assert np.allclose(w.grad.numpy(), 3.0)


def test_a_gradient_someone_else_holds_is_copied_into_grad():
    # what may not be stolen: the caller's gradient tensor, and one value given to two leaves
    x = mini.randn(8, requires_grad=True)
    g = mini.ones(8)
    x.backward(g)
    g.add_(5)
    assert x.grad.tolist() == [1.0] * 8
    a, b = mini.randn(8, requires_grad=True), mini.randn(8, requires_grad=True)
    (a + b).sum().backward()
    assert a.grad.data_ptr() != b.grad.data_ptr()
    a.grad.add_(1)
    assert b.grad.tolist() == [1.0] * 8
