"""Everyday Python around tensor code, captured in one graph as torch.compile does (1 graph, 0
breaks, fullgraph=True compiles): f-strings of values known while tracing (FORMAT_VALUE /
FORMAT_SIMPLE / FORMAT_WITH_SPEC / CONVERT_VALUE, BUILD_STRING), map, functools.reduce, sorted
and reversed (calls.cpp, call_builtin). Every value against the same function run eagerly; an
f-string of a tensor's value is a graph break with eager's result.
"""
import collections
import contextlib
import dataclasses
import functools

import numpy as np
import pytest

import mini
from capture_helpers import fresh_mini  # noqa: F401  (autouse: mini.reset() around each test)
from conftest import to_np


def T(*shape, seed=0):
    return mini.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32).tolist())


def tagged(x):
    name = f"rows={x.shape[0]:03d} cols={x.shape[1]!r} {'wide' if x.shape[1] > 2 else 'narrow'}"
    return x * len(name), name


def by_name(d):
    return [d[k] * (i + 1) for i, k in enumerate(sorted(d))][-1]


PROGRAMS = {
    "f-string of sizes": (tagged, lambda: [T(2, 3)]),
    "f-string as a dict key": (lambda d, x: d[f"layer{x.dim()}"] * x, lambda: [{"layer2": 3.0}, T(2, 2)]),
    "map with a lambda": (lambda xs: list(map(lambda t: t + 1, xs))[1], lambda: [[T(3, seed=i) for i in range(2)]]),
    "map over two lists": (lambda xs, ys: sum(map(lambda a, b: a * b, xs, ys)),
                           lambda: [[T(3, seed=i) for i in range(3)], [T(3, seed=10 + i) for i in range(3)]]),
    "functools.reduce": (lambda xs: functools.reduce(lambda a, b: a * 0.5 + b, xs),
                         lambda: [[T(2, seed=i) for i in range(4)]]),
    "functools.reduce with an initial value": (lambda xs, x: functools.reduce(lambda a, b: a @ b, xs, x),
                                               lambda: [[T(3, 3, seed=i) for i in range(3)], T(2, 3, seed=7)]),
    "sorted over a dict": (by_name, lambda: [{"b": T(2, seed=1), "a": T(2, seed=2), "c": T(2, seed=3)}]),
    "sorted reversed": (lambda d: [d[k] for k in sorted(d, reverse=True)][0] * 2, lambda: [{"x": T(2), "y": T(2, seed=1)}]),
    "reversed list": (lambda xs: [t * (i + 1) for i, t in enumerate(reversed(xs))][0],
                      lambda: [[T(2, seed=i) for i in range(3)]]),
}


def flat(out):
    return [o for o in (out if isinstance(out, tuple) else (out,))]


def same(got, want):
    for g, w in zip(flat(got), flat(want)):
        if isinstance(w, mini.Tensor):
            np.testing.assert_allclose(to_np(g), to_np(w), rtol=1e-5, atol=1e-6)
        else:
            assert g == w


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_one_graph_no_break_and_eagers_values(name):
    fn, make_args = PROGRAMS[name]
    want = fn(*make_args())
    explained = mini.explain(fn)(*make_args())
    assert (explained.graph_count, len(explained.break_reasons)) == (1, 0), [r.reason for r in explained.break_reasons]
    mini.reset()
    same(mini.compile(fn, fullgraph=True, backend="inductor")(*make_args()), want)


def test_an_fstring_of_a_tensors_value_breaks_and_stays_right():
    def fn(x):
        y = x + 1
        label = f"{y.sum()}"  # the text of a value known only when the graph runs
        return y * 2, label

    x = T(3)
    want = fn(x)
    explained = mini.explain(fn)(x)
    assert any("f-string" in r.reason for r in explained.break_reasons), [r.reason for r in explained.break_reasons]
    mini.reset()
    got = mini.compile(fn)(x)
    np.testing.assert_allclose(to_np(got[0]), to_np(want[0]))
    assert got[1] == want[1]


def test_a_dtype_compared_with_another_dtype_is_one_graph_per_dtype():
    # x.dtype == mini.float64 for a float32 x: False under x's guards (and mini.float64 pinned),
    # one graph; a float64 x recompiles (torch: two compiles), each eager's answer
    def fn(x):
        return x + 1 if x.dtype == mini.float64 else x - 1

    explained = mini.explain(fn)(T(3))
    assert (explained.graph_count, len(explained.break_reasons)) == (1, 0), [r.reason for r in explained.break_reasons]
    mini.reset()
    counter = mini.CompileCounter()
    cf = mini.compile(fn, backend=counter, fullgraph=True)
    for x in (T(3), T(3).double(), T(3, seed=1), T(3, seed=1).double()):
        np.testing.assert_allclose(to_np(cf(x)), to_np(fn(x)))
    assert counter.frame_count == 2


def test_a_frame_whose_tensors_are_inside_an_object_is_captured():
    import dataclasses

    @dataclasses.dataclass
    class Batch:
        x: mini.Tensor
        y: mini.Tensor
        scale: float = 2.0

    def step(batch):
        return (batch.x * batch.scale - batch.y).relu().sum()

    b = Batch(T(4, 3), T(4, 3, seed=1))
    explained = mini.explain(step)(b)
    assert (explained.graph_count, len(explained.break_reasons)) == (1, 0)
    mini.reset()
    counter = mini.CompileCounter()
    cf = mini.compile(step, backend=counter)
    for batch in (b, Batch(T(4, 3, seed=2), T(4, 3, seed=3)), Batch(T(4, 3, seed=4), T(4, 3, seed=5), scale=0.5)):
        np.testing.assert_allclose(to_np(cf(batch)), to_np(step(batch)), rtol=1e-6)
    assert counter.frame_count >= 1  # captured, not skipped; a new scale is guarded (recompiles)


def test_module_containers_len_items_and_hasattr_in_one_graph():
    import mini.nn as nn

    class Net(nn.Module):
        def __init__(self, extra):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
            self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 2)})
            if extra:
                self.gate = nn.Linear(3, 3)

        def forward(self, x):
            for i in range(len(self.blocks)):
                x = self.blocks[i](x) * (1.0 / len(self.blocks))
            if hasattr(self, "gate"):
                x = self.gate(x)
            return sum(head(x) for name, head in self.heads.items())

    x = T(4, 3)
    plain, gated = Net(False), Net(True)
    explained = mini.explain(plain)(x)
    assert (explained.graph_count, len(explained.break_reasons)) == (1, 0), [r.reason for r in explained.break_reasons]
    mini.reset()
    counter = mini.CompileCounter()
    for net in (plain, gated, plain):  # hasattr's answer is guarded: the gated net recompiles
        cf = mini.compile(net, backend=counter)
        np.testing.assert_allclose(to_np(cf(x)), to_np(net(x)), rtol=1e-5, atol=1e-6)
    assert counter.frame_count == 2


# ---- contextlib.nullcontext ------------------------------------------------------------------

def _null_block(x, cm=None):
    with (cm if cm is not None else contextlib.nullcontext(x * 3)) as y:
        z = x * 2 + y
    return z + 1


def test_a_nullcontext_block_is_one_graph_and_hands_its_enter_result():
    mini.reset()
    x = mini.randn(4)
    got = mini.compile(_null_block, backend="eager", fullgraph=True)(x)
    np.testing.assert_allclose(got.numpy(), _null_block(x).numpy(), rtol=1e-6)


def test_a_nullcontext_from_outside_reads_its_enter_result():
    mini.reset()
    x = mini.randn(4)
    cnt = mini.CompileCounter()
    cf = mini.compile(_null_block, backend=cnt)
    for k in (1.0, 1.0, 5.0):
        got = cf(x, contextlib.nullcontext(k))
        np.testing.assert_allclose(got.numpy(), (x * 2 + k + 1).numpy(), rtol=1e-6)
    assert cnt.frame_count == 2  # enter_result is guarded


def _print_in_null_block(x):
    y = x * 2
    with contextlib.nullcontext():
        print("inside")
        y = y + 1
    return y


def test_a_break_inside_a_nullcontext_block_leaves_the_frame_to_cpython(capsys):
    mini.reset()
    x = mini.randn(4)
    cnt = mini.CompileCounter()
    got = mini.compile(_print_in_null_block, backend=cnt)(x)
    np.testing.assert_allclose(got.numpy(), (x * 2 + 1).numpy(), rtol=1e-6)
    assert cnt.frame_count == 0 and capsys.readouterr().out == "inside\n"


# ---- zero-argument super() in an inlined method ----------------------------------------------

class _Scaled(mini.nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


class _Base:
    def __init__(self, k):
        self.k = k

    def apply(self, t):
        return t * self.k


class _Shifted(_Base):
    def apply(self, t):
        return super().apply(t) + 1


def test_super_forward_of_a_module_subclass_is_one_graph():
    mini.reset()
    m = _Scaled(4, 3)
    x = mini.randn(2, 4)

    def fn(x):
        return m(x).relu()
    got = mini.compile(fn, backend="eager", fullgraph=True)(x)
    np.testing.assert_allclose(got.detach().numpy(), fn(x).detach().numpy(), rtol=1e-6)
    compiled_module = mini.compile(m, backend="eager")
    np.testing.assert_allclose(compiled_module(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)


def test_super_method_of_a_plain_class_is_inlined_and_guarded():
    mini.reset()
    cnt = mini.CompileCounter()

    def fn(obj, x):
        return obj.apply(x)
    cf = mini.compile(fn, backend=cnt)
    x = mini.randn(4)
    for k in (2.0, 2.0, 3.0):
        np.testing.assert_allclose(cf(_Shifted(k), x).numpy(), (x * k + 1).numpy(), rtol=1e-6)
    assert cnt.frame_count == 2  # self.k, read by the parent's method, is guarded


# ---- namedtuples and dataclasses built in compiled code --------------------------------------

Pair = collections.namedtuple("Pair", ["a", "b"], defaults=[0.5])


@dataclasses.dataclass
class Batch:
    x: object
    y: object
    scale: float = 2.0


def _records(x):
    p = Pair(x * 2)
    q = Pair(b=p.a.sum(), a=p[1])
    d = Batch(x, x + 1)
    ok = isinstance(q, Pair) and isinstance(d, Batch) and not isinstance(d, tuple)
    return q, d.x * d.scale + d.y, ok, len(p)


def test_namedtuples_and_dataclasses_are_built_read_and_returned_in_one_graph():
    mini.reset()
    x = mini.randn(4)
    q, out, ok, n = mini.compile(_records, backend="eager", fullgraph=True)(x)
    wq, wout, wok, wn = _records(x)
    assert type(q) is Pair and ok and wok and n == wn == 2
    np.testing.assert_allclose(q.b.numpy(), wq.b.numpy(), rtol=1e-6)
    assert q.a == wq.a == 0.5
    np.testing.assert_allclose(out.numpy(), wout.numpy(), rtol=1e-6)


def test_a_dataclass_built_in_compiled_code_is_returned_as_itself():
    def fn(x):
        return Batch(x * 2, x)
    mini.reset()
    x = mini.randn(3)
    got = mini.compile(fn, backend="eager", fullgraph=True)(x)
    assert type(got) is Batch and got.scale == 2.0
    np.testing.assert_allclose(got.x.numpy(), (x * 2).numpy())


def test_indexing_a_dataclass_is_eagers_error():
    def fn(x):
        return Batch(x, x)[0]
    mini.reset()
    with pytest.raises(TypeError):
        mini.compile(fn, backend="eager")(mini.randn(3))
