"""Functions as values in captured code (issue 33, section 3): a function argument is guarded
by its code, not its identity (as Dynamo), and what inlining reads of it — closure cells,
defaults — by what it holds; callable objects and functools.partial are called through."""
import functools
import operator

import numpy as np
import pytest

import mini


def counted(fn):
    cnt = mini.CompileCounter()
    return mini.compile(fn, backend=cnt), cnt


def same(a, b):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def scale_by(k):
    return lambda t: t * k


def apply(x, f):
    return f(x) + 1


def test_a_new_closure_of_the_same_code_reuses_the_graph():
    mini.reset()
    cf, cnt = counted(apply)
    x = mini.randn(4)
    for _ in range(3):
        same(cf(x, scale_by(2)), apply(x, scale_by(2)))
    assert cnt.frame_count == 1


def test_what_the_closure_holds_is_guarded():
    mini.reset()
    cf, cnt = counted(apply)
    x = mini.randn(4)
    same(cf(x, scale_by(2)), x * 2 + 1)
    same(cf(x, scale_by(5)), x * 5 + 1)  # same code, another cell value: a new graph
    assert cnt.frame_count == 2


def test_another_code_recompiles():
    mini.reset()
    cf, cnt = counted(apply)
    x = mini.randn(4)
    same(cf(x, lambda t: t * 2), x * 2 + 1)
    same(cf(x, lambda t: t - 3), x - 3 + 1)
    assert cnt.frame_count == 2


def with_default(t, k=2.0):
    return t * k


def test_a_function_whose_defaults_change_recompiles():
    mini.reset()
    cf, cnt = counted(apply)
    x = mini.randn(4)
    same(cf(x, with_default), x * 2 + 1)
    with_default.__defaults__ = (4.0,)
    try:
        same(cf(x, with_default), x * 4 + 1)
    finally:
        with_default.__defaults__ = (2.0,)
    assert cnt.frame_count == 2


def test_a_function_whose_code_is_replaced_in_place_recompiles():
    def f(t):
        return t * 2

    def g(t):
        return t - 1
    mini.reset()
    cf, _ = counted(apply)
    x = mini.randn(4)
    same(cf(x, f), x * 2 + 1)
    f.__code__ = g.__code__  # a hot reload
    same(cf(x, f), x - 1 + 1)


def mul_add(t, k, b=0.0):
    return t * k + b


class Affine:
    def __init__(self, k):
        self.k = k

    def __call__(self, t):
        return t * self.k + 1


def test_a_partial_from_outside_is_called_through_and_its_arguments_guarded():
    mini.reset()
    cf, cnt = counted(apply)
    x = mini.randn(4)
    for _ in range(2):  # a new equal partial each call: one graph
        same(cf(x, functools.partial(mul_add, k=2.0, b=1.0)), x * 2 + 1 + 1)
    same(cf(x, functools.partial(mul_add, k=3.0)), x * 3 + 1)  # other keywords: a new graph
    same(cf(x, functools.partial(mul_add, k=5.0, b=2.0)), x * 5 + 2 + 1)
    assert cnt.frame_count == 3


def test_a_partial_made_in_the_compiled_code_is_one_graph():
    def fn(x):
        g = functools.partial(mul_add, k=3.0)
        return g(x, b=2.0) + g(x)
    mini.reset()
    x = mini.randn(4)
    same(mini.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


def test_a_callable_object_inlines_its_call_and_guards_what_it_reads():
    mini.reset()
    cf, cnt = counted(apply)
    x = mini.randn(4)
    same(cf(x, Affine(2.0)), x * 2 + 2)
    same(cf(x, Affine(2.0)), x * 2 + 2)  # another instance, the same state: the same graph
    same(cf(x, Affine(4.0)), x * 4 + 2)  # self.k is read, and guarded
    assert cnt.frame_count == 2


def test_operator_functions_on_tensors_are_graph_ops():
    def fn(xs):
        return functools.reduce(operator.mul, xs) + operator.add(xs[0], 1) + operator.mul(2, 3)
    mini.reset()
    xs = [mini.randn(4) for _ in range(3)]
    same(mini.compile(fn, backend="eager", fullgraph=True)(xs), fn(xs))
