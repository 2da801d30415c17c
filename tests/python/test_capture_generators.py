"""Generators in captured code: a generator expression or a generator function runs to its end
where it is called and hands its consumer an iterator over what it yielded (tracer.cpp,
inline_function), so `sum(f(t) for t in xs)`, `all(... for ...)`, `tuple(...)` and a for loop
over a generator stay in one graph, as under torch.compile (1 graph, 0 breaks, fullgraph=True
compiles). Also sum/all/any over items capture computes, and isinstance with a tuple of classes.
Every value against the same function run eagerly.
"""
import numpy as np
import pytest

import mini
from capture_helpers import fresh_mini  # noqa: F401  (autouse: mini.reset() around each test)
from conftest import to_np


def T(*shape, seed=0):
    return mini.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32).tolist())


def squares(xs):
    for t in xs:
        if t.shape[0] > 0:
            yield t * t


def countdown(n, x):
    while n > 0:
        yield x * n
        n -= 1


PROGRAMS = {
    "sum of a generator expression": (lambda xs: sum(t * 2 for t in xs), lambda: [[T(3, seed=i) for i in range(3)]]),
    "sum with a start": (lambda xs, x: sum((t + 1 for t in xs), x), lambda: [[T(3, seed=i) for i in range(2)], T(3, seed=9)]),
    "filtered generator expression": (lambda xs: sum(t for i, t in enumerate(xs) if i % 2 == 0),
                                      lambda: [[T(2, 2, seed=i) for i in range(5)]]),
    "all over shapes": (lambda xs: xs[0] + 1 if all(t.shape[0] == 3 for t in xs) else xs[0] - 1,
                        lambda: [[T(3, seed=i) for i in range(3)]]),
    "any over shapes": (lambda xs: xs[0] + 1 if any(t.dim() == 2 for t in xs) else xs[0] - 1,
                        lambda: [[T(3, seed=i) for i in range(3)]]),
    "tuple of a generator": (lambda xs: tuple(t.relu() for t in xs)[1], lambda: [[T(4, seed=i) for i in range(2)]]),
    "nested generators": (lambda xs: sum(sum(u for u in (t, t * 3)) for t in xs), lambda: [[T(2, seed=i) for i in range(3)]]),
    "a generator function in a for loop": (lambda xs: [s.sum() for s in squares(xs)][-1], lambda: [[T(3, seed=i) for i in range(3)]]),
    "a generator function with a while loop": (lambda x: sum(countdown(3, x)), lambda: [T(2, 3)]),
    "sum of sizes": (lambda x: x.reshape(sum(d for d in x.shape)), lambda: [T(2, 3, seed=2).reshape(6)]),
    "isinstance with a tuple of classes": (lambda x: x + 1 if isinstance(x, (int, mini.Tensor)) else x,
                                           lambda: [T(3)]),
    "isinstance with a tuple, false": (lambda x: x + 1 if isinstance(x, (int, float)) else x * 2, lambda: [T(3)]),
}


def results(fn, args):
    out = fn(*args)
    return [to_np(o) for o in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_one_graph_no_break_and_eagers_values(name):
    fn, make_args = PROGRAMS[name]
    want = results(fn, make_args())
    explained = mini.explain(fn)(*make_args())
    assert (explained.graph_count, len(explained.break_reasons)) == (1, 0), [r.reason for r in explained.break_reasons]
    mini.reset()
    got = results(mini.compile(fn, fullgraph=True, backend="inductor"), make_args())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_all_over_tensor_values_breaks_and_stays_right():
    # a tensor's truth is known only when the graph runs: a graph break (torch: the same), the
    # result still eager's
    def fn(xs):
        return xs[0] * 2 if all(t.sum() > -100 for t in xs) else xs[0]

    xs = [T(3, seed=i) for i in range(2)]
    want = to_np(fn(xs))
    explained = mini.explain(fn)(xs)
    assert explained.break_reasons and "known only when the graph runs" in explained.break_reasons[0].reason
    mini.reset()
    np.testing.assert_allclose(to_np(mini.compile(fn)(xs)), want)


def test_a_generator_that_never_ends_is_refused_by_name():
    def forever(x):
        while True:
            yield x

    def fn(x):
        total = x
        for i, y in enumerate(forever(x)):
            if i == 3:
                break
            total = total + y
        return total

    with pytest.raises(mini.Unsupported, match="too many instructions|more than 100000 values"):
        mini.compile(fn, fullgraph=True)(T(2))
    mini.reset()
    np.testing.assert_allclose(to_np(mini.compile(fn)(T(2))), to_np(T(2)) * 4, rtol=1e-6)  # runs eagerly
