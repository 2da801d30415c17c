"""The surface around capture (issue 3): backends ("eager", "aot_eager", "inductor", a Python
callable given a GraphModule), CompileCounter, explain, reset, config and config.patch, the
decorator forms, compiled methods, Module.compile() and mini.compile(module).

Expected values come from running the same function eagerly before the compiled call."""
import pytest

import mini
from capture_helpers import T, fresh_mini, same  # noqa: F401  (fresh_mini: autouse)

nn = mini.nn


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * 0.5


# ---- backends ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_builtin_backends(backend):
    fn = lambda x, y: (x * y).sum(1) + y.mean()  # noqa: E731
    x, y = T(3, 4), T(3, 4, seed=1)
    expected = fn(x, y)
    cf = mini.compile(fn, backend=backend)
    same(cf(x, y), expected)
    same(cf(x, y), expected)  # cached call


def test_unknown_backend_and_bad_arguments():
    with pytest.raises(ValueError, match="nope"):
        mini.compile(lambda x: x, backend="nope")
    with pytest.raises(TypeError):
        mini.compile(lambda x: x, backend=42)
    with pytest.raises(ValueError):
        mini.compile(lambda x: x, mode="fastest")
    with pytest.raises(TypeError):
        mini.compile(123)


def test_callable_backend_receives_graph_module():
    got = {}
    calls = []

    def backend(gm, example_inputs):
        got["gm"], got["examples"] = gm, list(example_inputs)
        got["str"], got["readable"] = str(gm), gm.print_readable(False)
        got["ops"] = [n.op for n in gm.nodes]

        def run(*args):
            calls.append(len(args))
            return gm(*args)
        return run

    fn = lambda x, y: (x.sin() * y, x.cos())  # noqa: E731
    x, y = T(2, 3), T(2, 3, seed=1)
    expected = fn(x, y)
    cf = mini.compile(fn, backend=backend)
    same(cf(x, y), expected)
    same(cf(x, y), expected)
    assert calls == [2, 2]  # the backend's callable runs on each call, cached or not
    ops = got["ops"]
    assert sorted(ops) == sorted(["placeholder"] * 2 + ["call_function"] * 3 + ["output"])
    assert ops[-1] == "output"
    assert "sin" in got["str"] and "cos" in got["str"] and "mul" in got["str"]
    assert got["readable"] == got["str"]
    assert len(got["examples"]) == 2 and all(isinstance(e, mini.Tensor) for e in got["examples"])
    out = got["gm"](x, y)
    assert isinstance(out, tuple) and len(out) == 2
    same(out, expected)


def test_graph_module_lists_placeholders_first():
    ops = []

    def backend(gm, example_inputs):
        ops.extend(n.op for n in gm.nodes)
        return gm.forward
    mini.compile(lambda x, y: x.sin() * y, backend=backend)(T(2), T(2, seed=1))
    assert ops == ["placeholder", "placeholder", "call_function", "call_function", "output"]


def test_backend_exception_propagates():
    def backend(gm, example_inputs):
        raise RuntimeError("backend exploded")
    with pytest.raises(RuntimeError, match="backend exploded"):
        mini.compile(lambda x: x + 1, backend=backend)(T(2))


def test_compile_counter_counts_frames_and_ops():
    cnt = mini.CompileCounter()
    cf = mini.compile(lambda x: x.relu() + 1, backend=cnt)
    for _ in range(3):
        cf(T(4))
    assert (cnt.frame_count, cnt.op_count) == (1, 2)
    cf(T(5))  # a new shape: a second frame
    assert (cnt.frame_count, cnt.op_count) == (2, 4)
    cnt.clear()
    assert (cnt.frame_count, cnt.op_count) == (0, 0)


# ---- explain, reset, config -----------------------------------------------------------------

def test_explain_reports_graph_ops_and_guards():
    fn = lambda x, y: (x + y).exp() * 2  # noqa: E731
    x, y = T(3), T(3, seed=1)
    e = mini.explain(fn)(x, y)
    assert (e.graph_count, e.graph_break_count, e.op_count) == (1, 0, 3)
    assert len(e.graphs) == 1 and e.break_reasons == []
    assert any("TENSOR_MATCH" in g for g in e.guards)
    s = str(e)
    assert "Graph Count: 1" in s and "Graph Break Count: 0" in s and "Op Count: 3" in s
    same(e.out, fn(x, y))


def test_explain_counts_breaks():
    def fn(x):
        print("side effect")
        return x + 1
    x = T(3)
    e = mini.explain(fn)(x)
    assert any("print" in r.reason for r in e.break_reasons)
    assert e.graph_break_count == e.graph_count - 1  # torch's definition
    same(e.out, x + 1)


def test_explain_of_a_function_without_a_graph_counts_minus_one_break():
    # torch 2.11 measured (tests/conformance, return_shape): 0 graphs, -1 breaks
    e = mini.explain(lambda x: x.shape)(T(3, 2))
    assert (e.graph_count, e.graph_break_count) == (0, -1)
    assert tuple(e.out) == (3, 2)


def test_explain_and_compile_see_through_a_compiled_function():
    # torch's innermost_fn: compiling a compiled function compiles the original with the new
    # settings; the inner wrapper's own backend would otherwise capture every frame first
    fn = lambda x: (x + 1).relu()  # noqa: E731
    x = T(4)
    inner = mini.compile(fn)
    inner(x)
    e = mini.explain(inner)(x)
    assert (e.graph_count, e.graph_break_count, e.op_count) == (1, 0, 2)
    cnt = mini.CompileCounter()
    outer = mini.compile(mini.compile(inner, backend="eager"), backend=cnt)
    same(outer(x), fn(x))
    assert (cnt.frame_count, cnt.op_count) == (1, 2)

    class Net(mini.nn.Module):
        def forward(self, x):
            return x * 2 - 1
    e = mini.explain(mini.compile(Net()))(x)
    assert (e.graph_count, e.op_count) == (1, 2)
    same(e.out, x * 2 - 1)


def test_explain_twice_reports_the_same():
    fn = lambda x: x.sin()  # noqa: E731
    x = T(3)
    counts = [mini.explain(fn)(x).graph_count for _ in range(3)]
    assert counts == [1, 1, 1]


def test_explain_log_stays_bounded_over_many_short_lived_functions():
    # issue 11: the log explain reads kept every compile's graph and guard text until reset
    # (~5 KB per compiled function); it keeps the newest entries and counts what it dropped
    x = T(8)
    n = 700
    for i in range(n):
        ns = {}
        exec(f"def f{i}(x):\n    return (x + {i}).sin() * 2\n", ns)
        same(mini.compile(ns[f"f{i}"], backend="eager")(x), (x + i).sin() * 2)
    kept = len(mini._C._compile_events())
    assert 0 < kept <= 256
    assert kept + mini._C._dropped_events() == n
    fn = lambda x: (x + 1).exp()  # noqa: E731
    e = mini.explain(fn)(x)  # explain still sees its own compile
    assert (e.graph_count, e.op_count, len(e.guards)) == (1, 2, 1)
    assert mini._C._dropped_events() == 0
    same(e.out, fn(x))


def test_reset_forgets_compiled_entries():
    cnt = mini.CompileCounter()
    cf = mini.compile(lambda x: x * 2, backend=cnt)
    x = T(3)
    cf(x)
    cf(x)
    assert cnt.frame_count == 1
    mini.reset()
    cf(x)
    assert cnt.frame_count == 2


def test_config_patch_restores_and_validates():
    assert mini.config.cache_size_limit == 8
    with mini.config.patch(cache_size_limit=2, automatic_dynamic_shapes=False):
        assert mini.config.cache_size_limit == 2
        assert mini.config.automatic_dynamic_shapes is False
    assert mini.config.cache_size_limit == 8 and mini.config.automatic_dynamic_shapes is True
    with pytest.raises(KeyError):
        with mini.config.patch(cache_size_limit=3):
            raise KeyError("inside")
    assert mini.config.cache_size_limit == 8
    with pytest.raises(AttributeError):
        mini.config.no_such_option = 1
    with pytest.raises(TypeError):
        mini.config.cache_size_limit = "8"
    assert mini.config.capture_scalar_outputs is False


# ---- decorators and modules -------------------------------------------------------------------

def test_decorator_forms():
    cnt = mini.CompileCounter()

    @mini.compile
    def a(x):
        return x + 1

    @mini.compile()
    def b(x):
        return x + 2

    @mini.compile(backend=cnt, fullgraph=True)
    def c(x):
        return x + 3

    x = T(3)
    for f, k in ((a, 1), (b, 2), (c, 3)):
        same(f(x), x + k)
    assert a.__name__ == "a" and c.__name__ == "c"
    assert cnt.frame_count == 1 and cnt.op_count == 1


def test_compiled_method():
    cnt = mini.CompileCounter()

    class Scaler:
        def __init__(self, s):
            self.s = s

        @mini.compile(backend=cnt)
        def apply(self, x):
            return x * self.s

    x = T(3)
    same(Scaler(2.0).apply(x), x * 2.0)
    assert cnt.frame_count == 1


def test_module_compile_in_place():
    mini.manual_seed(2)
    model = _Block()
    x = T(5, 4)
    expected = model(x)
    cnt = mini.CompileCounter()
    assert model.compile(backend=cnt) is None
    same(model(x), expected)
    same(model(x), expected)
    assert cnt.frame_count == 1 and cnt.op_count > 0


def test_compile_module_returns_wrapper():
    mini.manual_seed(3)
    model = _Block()
    x = T(2, 4)
    expected = model(x)
    cnt = mini.CompileCounter()
    opt = mini.compile(model, backend=cnt)
    same(opt(x), expected)
    assert opt.fc1 is model.fc1  # attributes are the module's
    assert cnt.frame_count == 1
    e = mini.explain(model)(x)
    assert e.graph_count == 1 and e.op_count == cnt.op_count
