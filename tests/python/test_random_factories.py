"""torch's random factories a training script reaches for: randint, randint_like, randperm,
rand_like / randn_like with dtype=, and the in-place Tensor.normal_ / uniform_. Each on the CPU
and on CUDA where present: the dtype (int64 by default for the integer ones), the bounds, a
loose check of the distribution, reproducibility from mini.manual_seed, and torch's errors."""
import numpy as np
import pytest

import mini

pytestmark = pytest.mark.usefixtures("device")


def values(t):
    return np.asarray(t.cpu().tolist())


def test_randint_forms_dtype_and_bounds(device):
    x = mini.randint(3, 7, (20000,), device=device)
    assert x.dtype == mini.int64 and tuple(x.shape) == (20000,) and x.device.type == device
    v = values(x)
    assert v.min() == 3 and v.max() == 6
    counts = np.bincount(v - 3, minlength=4)
    assert np.all(np.abs(counts - 5000) < 5 * np.sqrt(5000 * 0.75)), counts  # 5 sigma each
    assert tuple(mini.randint(5, (2, 3), device=device).shape) == (2, 3)
    assert values(mini.randint(5, (200,), device=device)).min() >= 0
    assert tuple(mini.randint(0, 4, size=(3,), device=device).shape) == (3,)
    neg = values(mini.randint(-4, -1, (500,), device=device))
    assert neg.min() == -4 and neg.max() == -2
    assert mini.randint(0, 10, (4,), dtype=mini.float32, device=device).dtype == mini.float32
    b = mini.randint(0, 2, (400,), dtype=mini.bool, device=device)
    assert b.dtype == mini.bool and 0 < values(b).sum() < 400


def test_randint_repeats_from_the_seed(device):
    mini.manual_seed(11)
    a = values(mini.randint(0, 50304, (8, 64), device=device))
    mini.manual_seed(11)
    b = values(mini.randint(0, 50304, (8, 64), device=device))
    c = values(mini.randint(0, 50304, (8, 64), device=device))
    assert (a == b).all() and not (a == c).all()
    assert len(np.unique(a)) > 400  # 512 draws out of 50304 values: few repeats


def test_randint_errors(device):
    with pytest.raises(RuntimeError, match="from=5 >= to=3"):
        mini.randint(5, 3, (2,), device=device)
    with pytest.raises(RuntimeError, match="from=0 >= to=0"):
        mini.randint(0, (2,), device=device)
    with pytest.raises(TypeError, match="size"):
        mini.randint(10, device=device)
    with pytest.raises(RuntimeError, match="floating point"):
        mini.randint(10, (2,), requires_grad=True, device=device)
    with pytest.raises(NotImplementedError, match="manual_seed"):
        mini.randint(10, (2,), generator=object(), device=device)
    with pytest.raises(RuntimeError, match="bool"):
        mini.randint(0, 3, (2,), dtype=mini.bool, device=device)


def test_randint_like(device):
    t = mini.zeros(4, 5, dtype=mini.int64, device=device)
    r = mini.randint_like(t, 3)
    assert r.dtype == mini.int64 and tuple(r.shape) == (4, 5) and r.device.type == device
    assert values(r).min() >= 0 and values(r).max() <= 2
    r = mini.randint_like(mini.zeros(300, device=device), 10, 12)
    assert r.dtype == mini.float32 and set(values(r).tolist()) == {10.0, 11.0}


def test_randperm(device):
    p = mini.randperm(1000, device=device)
    assert p.dtype == mini.int64 and p.device.type == device
    v = values(p)
    assert sorted(v.tolist()) == list(range(1000)) and not (v == np.arange(1000)).all()
    mini.manual_seed(3)
    a = values(mini.randperm(50, device=device))
    mini.manual_seed(3)
    assert (values(mini.randperm(50, device=device)) == a).all()
    assert tuple(mini.randperm(0, device=device).shape) == (0,)
    assert mini.randperm(5, dtype=mini.float32, device=device).dtype == mini.float32
    with pytest.raises(RuntimeError, match="non-negative"):
        mini.randperm(-1, device=device)


def test_rand_like_and_randn_like(device):
    t = mini.zeros(2000, device=device)
    u = mini.rand_like(t)
    assert u.dtype == mini.float32 and u.device.type == device
    assert 0 <= values(u).min() and values(u).max() < 1 and abs(values(u).mean() - 0.5) < 0.05
    n = mini.randn_like(t, dtype=mini.float64)
    assert n.dtype == mini.float64 and abs(values(n).mean()) < 0.15 and abs(values(n).std() - 1) < 0.1
    assert mini.rand_like(t, requires_grad=True).requires_grad


def test_normal_and_uniform_in_place(device):
    t = mini.empty(4000, device=device)
    assert t.normal_(2.0, 0.5) is t
    assert abs(values(t).mean() - 2.0) < 0.05 and abs(values(t).std() - 0.5) < 0.05
    assert t.uniform_(-3.0, -1.0) is t
    assert values(t).min() >= -3.0 and values(t).max() < -1.0 and abs(values(t).mean() + 2.0) < 0.1
    t.uniform_(**{"from": 5.0, "to": 6.0})
    assert values(t).min() >= 5.0
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        t.normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match=r"from=2.0 > to=1.0"):
        t.uniform_(2.0, 1.0)
    with pytest.raises(RuntimeError, match="floating point"):
        mini.zeros(3, dtype=mini.int64, device=device).normal_()


def assert_captured_with_eager_draws(fn, x):
    """fn compiles into one graph without breaks and draws what eager draws from the same seed."""
    mini.manual_seed(5)
    expected = fn(x)
    compiled = mini.compile(fn, backend="eager")
    mini.manual_seed(5)
    got = compiled(x)
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and (values(g) == values(e)).all()
    explained = mini.explain(fn)(x)
    assert (explained.graph_count, explained.graph_break_count, explained.break_reasons) == (1, 0, [])


def test_like_factories_with_dtype_are_captured():
    assert_captured_with_eager_draws(
        lambda x: (x + mini.rand_like(x), mini.randn_like(x, dtype=mini.float64)), mini.zeros(3, 4))


def test_randint_is_captured_with_eager_draws():
    assert_captured_with_eager_draws(
        lambda x: (x + mini.randint(0, 50, (2, 3)), mini.randint(5, size=(4,)),
                   mini.randint(-3, 3, (2,), dtype=mini.float32)),
        mini.zeros(2, 3, dtype=mini.int64))


def test_randint_refused_inside_compiled_code_raises_eager_error():
    compiled = mini.compile(lambda x: x + mini.randint(5, 3, (2,)), backend="eager")
    with pytest.raises(RuntimeError, match="from=5 >= to=3"):
        compiled(mini.zeros(2, dtype=mini.int64))
