"""Capture (issue 10): side effects of compiled code on program state — stores into closure
cells (nonlocal), globals and attributes of plain objects and modules. Tracing changes
nothing; the stores are replayed after the graph runs (torch's SideEffects), when the unit
returns and at a graph break before the breaking instruction runs. A later read in the same
trace sees the stored value.

Each test builds two copies of the same closure, runs one eagerly and one compiled, and
compares every result and the state after every call."""
import types

import numpy as np

import pytest

import mini
from capture_helpers import ALIVE, T, fresh_mini, same  # noqa: F401  (fresh_mini: autouse)

nn = mini.nn


def side_by_side(make, args_list, fullgraph=False):
    """make() -> (fn, state); calls the eager copy and the compiled copy with each args tuple,
    compares results and states; returns the compiled copy's CompileCounter."""
    eager, eager_state = make()
    compiled, compiled_state = make()
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    cf = mini.compile(compiled, backend=cnt, fullgraph=fullgraph)
    for i, args in enumerate(args_list):
        expected = eager(*args)
        same(cf(*args), expected, f"call {i}")
        same(compiled_state(), eager_state(), f"state after call {i}")
    return cnt


def explain(make, *args):
    mini.reset()
    return mini.explain(make()[0])(*args)


# ---- closure cells ---------------------------------------------------------------------------

def _nonlocal_counter():
    acc = 0

    def f(x):
        nonlocal acc
        acc += 1
        return x * acc
    return f, lambda: acc


def test_nonlocal_counter_is_written_back():
    x = T(3)
    cnt = side_by_side(_nonlocal_counter, [(x,)] * 3, fullgraph=True)
    # as torch: the int is specialized, changes once, then is a graph input (automatic dynamic)
    assert cnt.frame_count == 2
    e = explain(_nonlocal_counter, x)
    assert (e.graph_count, e.graph_break_count, e.break_reasons) == (1, 0, [])


def _nonlocal_tensor():
    total = None

    def f(x):
        nonlocal total
        total = x * 2 if total is None else total + x
        return total.sum(0)
    return f, lambda: total


def test_nonlocal_tensor_accumulator_compiles_twice_and_reuses():
    x = T(4)
    cnt = side_by_side(_nonlocal_tensor, [(x,)] * 4, fullgraph=True)
    assert cnt.frame_count == 2  # the None branch, then the tensor branch


def _inc_get():
    acc = 0

    def inc():
        nonlocal acc
        acc += 1

    def get():
        return acc

    def f(x):
        inc()
        inc()
        return x * get()
    return f, lambda: acc


def test_store_through_one_closure_is_seen_by_another_in_the_same_trace():
    cnt = side_by_side(_inc_get, [(T(3),)] * 3, fullgraph=True)
    assert cnt.frame_count == 2


def _bump_enclosing():
    def f(x):
        y = x

        def double():
            nonlocal y
            y = y * 2
        double()
        double()
        return y
    return f, lambda: None


def test_nested_function_writes_the_enclosing_functions_cell():
    cnt = side_by_side(_bump_enclosing, [(T(3),)] * 2, fullgraph=True)
    assert (cnt.frame_count, cnt.op_count) == (1, 2)


def _store_then_print():
    acc = 0

    def f(x):
        nonlocal acc
        acc += 1
        print("between")
        return x * acc
    return f, lambda: acc


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_cell_store_is_replayed_before_the_breaking_instruction(capsys):
    x = T(3)
    side_by_side(_store_then_print, [(x,)] * 3)
    e = explain(_store_then_print, x)
    assert (e.graph_count, e.graph_break_count) == (1, 0)  # the first unit has no ops


def _inlined_store_then_break():
    acc = 0

    def inc():
        nonlocal acc
        acc += 1
        print("inside")

    def f(x):
        y = x * 2
        inc()
        return y * acc
    return f, lambda: acc


def test_a_call_that_stores_then_breaks_stores_once(capsys):
    # inc() is traced up to its print, then runs for real at the break: the store it made
    # while being traced must not be replayed as well
    side_by_side(_inlined_store_then_break, [(T(3),)] * 3)


def _append_then_break():
    def f(x):
        items = [1]

        def add():
            items.append(2)
            print("inside")
        add()
        return x * len(items), items
    return f, lambda: None


def test_a_call_that_appends_then_breaks_appends_once(capsys):
    side_by_side(_append_then_break, [(T(3),)] * 2)


def _store_then_unsupported_instruction():
    acc = 0

    def f(x):
        nonlocal acc
        acc += 1
        s = {acc}  # an instruction capture cannot run: the rest runs in CPython
        return x * acc, len(s)
    return f, lambda: acc


def test_cell_store_is_replayed_before_cpython_takes_over():
    side_by_side(_store_then_unsupported_instruction, [(T(3),)] * 3)


# ---- globals ---------------------------------------------------------------------------------

_COUNT = 0


def _global_counter():
    def f(x):
        global _COUNT
        _COUNT += 1
        return x * _COUNT
    return f, lambda: _COUNT


def test_global_store_is_replayed_in_one_graph():
    global _COUNT
    x = T(3)
    _COUNT = 0
    expected = [x * k for k in (1, 2, 3)]
    f = _global_counter()[0]
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    cf = mini.compile(f, backend=cnt, fullgraph=True)
    for k in range(3):
        same(cf(x), expected[k])
        assert _COUNT == k + 1
    # a global number is specialized (as Dynamo): each new value is a new graph
    assert cnt.frame_count == 3
    _COUNT = 0
    e = mini.explain(f)(x)
    assert (e.graph_count, e.graph_break_count, e.break_reasons) == (1, 0, [])


def _other_module():
    mod = types.ModuleType("other")
    exec("calls = 0\ndef bump(x):\n    global calls\n    calls += 1\n    return x * 2\n", mod.__dict__)

    def f(x):
        return mod.bump(x) + mod.calls
    return f, lambda: mod.calls


def test_global_store_in_a_function_of_another_module():
    side_by_side(_other_module, [(T(3),)] * 3, fullgraph=True)


# ---- attributes ------------------------------------------------------------------------------

class _Box:
    def __init__(self, n):
        self.n = n


def _attribute_counter():
    box = _Box(0)

    def f(x):
        box.n += 1
        return x * box.n
    return f, lambda: box.n


def test_attribute_store_on_a_plain_object():
    x = T(3)
    side_by_side(_attribute_counter, [(x,)] * 3, fullgraph=True)
    e = explain(_attribute_counter, x)
    assert (e.graph_count, e.graph_break_count, e.break_reasons) == (1, 0, [])


def _tensor_attribute():
    box = _Box(T(3))

    def f(x):
        box.n = box.n + x
        return box.n * 1
    return f, lambda: box.n


def test_tensor_attribute_accumulates():
    cnt = side_by_side(_tensor_attribute, [(T(3, seed=1),)] * 3, fullgraph=True)
    assert cnt.frame_count == 1


class _Steps(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
        self.last = None

    def forward(self, x):
        self.step = self.step + 1
        self.last = x * self.step
        return self.last + 1


def _module_attributes():
    m = _Steps()
    return (lambda x: m(x)), lambda: (m.step, m.last)


def test_module_attribute_stores():
    side_by_side(_module_attributes, [(T(3),)] * 3, fullgraph=True)


class _Counter:
    def __init__(self):
        self.n = 0

    def step(self, t):
        self.n += 1
        return t * self.n


def _method_mutates_self():
    c = _Counter()
    return (lambda x: c.step(x) + c.step(x)), lambda: c.n


def test_method_that_mutates_self():
    side_by_side(_method_mutates_self, [(T(3),)] * 3, fullgraph=True)


def _aliasing():
    a, b = _Box(1), _Box(10)
    calls = [0]

    def f(x, p, q):
        p.n = p.n + 1
        return x * q.n

    def g(x):
        calls[0] += 1
        return f(x, a, a) if calls[0] % 2 else f(x, a, b)
    return g, lambda: (a.n, b.n)


def test_attribute_store_and_read_through_objects_that_alias_on_one_call_only():
    # f(x, a, a) stores a.n and reads it back through q; f(x, a, b) must not reuse that
    side_by_side(_aliasing, [(T(3),)] * 4)


def _fresh_object_each_call():
    def f(x, box):
        box.out = x * 2
        return box.out + box.n
    return f, lambda: None


def test_attribute_store_on_a_fresh_object_each_call_reuses_the_graph():
    cnt = side_by_side(_fresh_object_each_call, [(T(3), _Box(1.0)) for _ in range(3)], fullgraph=True)
    assert cnt.frame_count == 1


def _default_list():
    def remember(t, seen=[]):
        seen.append(1)
        return t * len(seen)

    def f(x):
        return remember(x) + 1  # inlined: its default list is a real list, not one to rebuild
    return f, lambda: len(remember.__defaults__[0])


def test_append_to_a_default_argument_list_is_not_lost():
    side_by_side(_default_list, [(T(3),)] * 3)


# ---- tensors -----------------------------------------------------------------------------

def test_the_same_tensor_at_two_sources_is_one_input_under_a_duplicate_input_guard():
    # torch: f(x, x) compiles with one input and DUPLICATE_INPUT; f(x, y) misses and
    # recompiles; f(y, y) hits the first entry again
    x, y = T(3), T(3, seed=1)
    cnt = side_by_side(lambda: ((lambda a, b: a + b), lambda: None), [(x, x), (x, y), (y, y)])
    assert cnt.frame_count == 2


def test_is_between_two_input_tensors_is_decided_on_each_call():
    x, y = T(3), T(3, seed=1)
    make = lambda: ((lambda a, b: a * 2 if a is b else a * 3), lambda: None)  # noqa: E731
    side_by_side(make, [(x, x), (x, y), (x, x)])


# ---- a list or dict of the frame's, changed in place (issue 33) ------------------------------

OUT_LIST = []
OUT_DICT = {}


def _append_and_store(x):
    y = x * 2
    OUT_LIST.append(y)
    OUT_LIST.extend([y + 1])
    OUT_DICT["last"] = y
    OUT_DICT["count"] = OUT_DICT.get("count", 0) + 1
    OUT_DICT["count"] = OUT_DICT["count"] * 10  # reads what the trace stored
    return y + len(OUT_LIST)


def test_appends_and_stores_into_outside_containers_are_replayed_in_one_graph():
    x = mini.randn(3)
    OUT_LIST.clear(), OUT_DICT.clear()
    want = _append_and_store(x)
    want_list, want_dict = list(OUT_LIST), dict(OUT_DICT)
    OUT_LIST.clear(), OUT_DICT.clear()
    cnt = mini.CompileCounter()
    got = mini.compile(_append_and_store, backend=cnt, fullgraph=True)(x)
    np.testing.assert_allclose(got.numpy(), want.numpy())
    assert len(OUT_LIST) == 2 and OUT_DICT["count"] == want_dict["count"] == 10
    np.testing.assert_allclose(OUT_LIST[1].numpy(), want_list[1].numpy())
    np.testing.assert_allclose(OUT_DICT["last"].numpy(), want_dict["last"].numpy())
    assert cnt.frame_count == 1
    # the next call's list is longer: its length is guarded, a new graph sees it
    got = mini.compile(_append_and_store, backend=cnt)(x)
    assert len(OUT_LIST) == 4 and OUT_DICT["count"] == 110
    np.testing.assert_allclose(got.numpy(), (x * 2 + 4).numpy())


def _append_break_append(x):
    y = x + 1
    OUT_LIST.append(y)
    print("between")
    OUT_LIST.append(y * 2)
    return y


def test_an_append_before_a_break_happens_once(capsys):
    OUT_LIST.clear()
    x = mini.randn(3)
    mini.compile(_append_break_append, backend="eager")(x)
    assert len(OUT_LIST) == 2 and capsys.readouterr().out == "between\n"
    np.testing.assert_allclose(OUT_LIST[1].numpy(), ((x + 1) * 2).numpy())
