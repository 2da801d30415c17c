"""Wrong results involving dynamic sizes and numbers (issue 10, section 1).

A size of a dynamic dim stays an expression through int arithmetic; every decision on it
(a comparison, a branch, bool) installs a shape guard that keeps the decision, and every use
as a plain int (range, an index, a float) specializes it under an `== value` guard. Sizes
returned (or kept across a graph break) are computed from the call's own tensors. Ranges and
slices read from the frame are guarded by value. Dynamic Python numbers keep Python's
meaning (exact int64, eager's overflow error, no tensor semantics leaking into Python code).
Sizes whose element count overflows int64 raise instead of making a too-small storage.
Every result is compared with eager's, computed first."""
import numpy as np
import pytest

import mini
from capture_helpers import ALIVE, T, chain, counted, frames_over, fresh_mini, same  # noqa: F401  (fresh_mini: autouse fixture)



def vectors(*sizes):
    return [(T(n, seed=n),) for n in sizes]


def matrices(*sizes, cols=3):
    return [(T(n, cols, seed=n),) for n in sizes]


# ---- 1. branches on size expressions install guards ---------------------------------------

def _numel_branch(x):
    if x.numel() > 16:
        return x.sum()
    return x.mean()


def test_numel_branch_is_guarded_as_torch_does():
    # torch guards s0 > 16 and compiles twice: the 8-sized entry is reused, 64 hits the second
    assert frames_over(_numel_branch, vectors(8, 32, 8, 64)) == [1, 2, 2, 2]


def _unpacked(x):
    n, m = x.shape
    return x + 1 if n * m > 14 else x - 1


BRANCHES = {
    "unpacked": _unpacked,
    "mul": lambda x: x.sum() if x.shape[0] * 2 > 10 else x.mean(),
    "floordiv": lambda x: x + 1 if x.shape[0] // 2 == 3 else x - 1,
    "mod": lambda x: x + 1 if x.shape[0] % 2 else x - 1,
    "sub_bool": lambda x: x + 1 if x.shape[0] - 5 else x - 1,
    "neg": lambda x: x + 1 if -x.shape[0] < -5 else x - 1,
    "numel_2d": lambda x: x.sum() if x.numel() >= 18 else x.mean(),
    "two_dims": lambda x: x.sum() if x.shape[0] > x.shape[1] else x.mean(),
    "dims_equal": lambda x: x.sum() if x.shape[0] == x.shape[1] else x.mean(),
    "len": lambda x: x + 1 if len(x) * 3 > 12 else x - 1,
    "int": lambda x: x + 1 if int(x.shape[0]) + 1 > 5 else x - 1,
    "size_call": lambda x: x + 1 if x.size(0) + x.size()[1] == 9 else x - 1,
    "chained": lambda x: x + 1 if 3 < x.shape[0] < 7 else x - 1,
}
SIZES = (3, 5, 6, 7, 4, 2, 9, 3, 8)


@pytest.mark.parametrize("name", sorted(BRANCHES))
@pytest.mark.parametrize("dynamic,most", [(True, 3), (None, 4)])
def test_branch_on_size_expression_matches_eager_at_every_size(name, dynamic, most):
    frames = frames_over(BRANCHES[name], matrices(*SIZES), dynamic=dynamic)
    # one entry per outcome of the guarded comparisons (chained: three), plus the first,
    # static compile under automatic dynamic; not one per size
    assert frames[-1] <= most, frames


def test_branch_guard_is_kept_per_outcome():
    fn = BRANCHES["mul"]  # x.shape[0] * 2 > 10: one entry per outcome, as for a plain size
    assert frames_over(fn, matrices(3, 4, 6, 8, 2, 5), dynamic=True) == [1, 1, 2, 2, 2, 2]


def test_shape_guard_is_printed_as_torch_prints_it():
    x = T(6, 3)
    mini.mark_dynamic(x, 0)
    e = mini.explain(BRANCHES["mul"])(x)
    same(e.out, BRANCHES["mul"](x))
    assert "SHAPE_ENV: L['x'].size()[0]*2 > 10" in e.guards[0], e.guards[0]
    y = T(6, 3)
    mini.mark_dynamic(y, 0)
    e = mini.explain(_numel_branch)(y)
    assert "SHAPE_ENV: L['x'].size()[0]*3 > 16" in e.guards[0], e.guards[0]


def test_false_outcome_guards_the_comparison_that_held():
    x = T(4, 3)
    mini.mark_dynamic(x, 0)
    e = mini.explain(BRANCHES["mul"])(x)
    assert "SHAPE_ENV: L['x'].size()[0]*2 <= 10" in e.guards[0], e.guards[0]


def test_a_size_in_tensor_math_stays_symbolic():
    def fn(x):
        # a dynamic size as an operand of tensor math: a graph value computed from the sizes
        # on each call (as Dynamo hands the graph a SymInt), not a guarded constant
        return x * (x.shape[0] // 2) + x.shape[1] ** 2
    assert frames_over(fn, matrices(4, 6, 7, 6), dynamic=True) == [1, 1, 1, 1]


def test_a_size_used_as_a_plain_int_is_specialized():
    def fn(x):
        return x.sum(0)[x.shape[0] // 2]  # an index: its value, guarded
    assert frames_over(fn, [(T(4, 6),), (T(6, 6),), (T(7, 6),), (T(6, 6),)], dynamic=True) == [1, 2, 2, 2]


def test_a_size_as_a_slice_bound_of_another_dim_stays_symbolic():
    def fn(x):
        return x.sum(0)[: x.shape[0] // 2]  # the bound a graph symbol, `s0 // 2 <= 6` guarded
    # the bound past the end (14 // 2 > 6) breaks the guard: a second graph, clamped as eager
    sizes = [(T(4, 6),), (T(6, 6),), (T(7, 6),), (T(6, 6),), (T(14, 6),), (T(16, 6),)]
    assert frames_over(fn, sizes, dynamic=True) == [1, 1, 1, 1, 2, 2]


SLICES = {  # fn, the calls' shapes, the frames after each call
    # min's winner changes at the third call (a guard: x <= y); the fourth's equal sizes keep x
    "min of sizes": (lambda x, y: x[:min(x.shape[0], y.shape[0])] + y[:min(x.shape[0], y.shape[0])],
                     [((4,), (6,)), ((5,), (7,)), ((9,), (3,)), ((3,), (3,))], [1, 2, 3, 3]),
    "floordiv": (lambda x: x[: x.shape[0] // 2] * 2, [((4,),), ((6,),), ((9,),), ((2,),)], [1, 2, 2, 2]),
    # the fourth call's start 2 - 3 would count from the end: `0 <= s0 - 3` fails, a recompile
    "start from a difference": (lambda x: x[x.shape[0] - 3:] * 2, [((4,),), ((6,),), ((9,),), ((2,),)], [1, 2, 2, 3]),
    "two dims": (lambda x: x[1: x.shape[0] - 1, : x.shape[1] // 2] + 1,
                 [((4, 6),), ((6, 7),), ((9, 3),), ((2, 2),)], [1, 2, 2, 2]),
    # the third call's bound 7 is past the end of 5: `s1 <= s0` fails, a graph clamped to s0
    "bound of another tensor": (lambda x, y: x[: y.shape[0]] * 2,
                                [((4,), (2,)), ((6,), (3,)), ((5,), (7,)), ((2,), (9,))], [1, 2, 3, 3]),
    "step": (lambda x: x[x.shape[0] // 3: x.shape[0] // 2: 2] + 1, [((6,),), ((9,),), ((12,),), ((4,),)], [1, 2, 2, 2]),
    # a fixed dim sliced by another tensor's dynamic size: 9 past its end of 6 recompiles
    "static dim, dynamic bound": (lambda x, y: x[: y.shape[0]] * 2,
                                  [((6,), (2,)), ((6,), (3,)), ((6,), (4,)), ((6,), (9,))], [1, 2, 2, 3]),
}


def _slice_calls(shapes):
    return [tuple(T(*s, seed=i + k) for k, s in enumerate(shape)) for i, shape in enumerate(shapes)]


@pytest.mark.parametrize("name", SLICES)
def test_symbolic_slice_bounds_compile_once_per_size_relation(name):
    # a dynamic size as a slice bound stays a graph symbol (torch keeps a SymInt): a new graph
    # only where a size relation the graph relies on changes
    fn, shapes, frames = SLICES[name]
    assert frames_over(fn, _slice_calls(shapes)) == frames


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("name", SLICES)
def test_symbolic_slice_bounds_match_eager_on_every_backend(name, backend):
    fn, shapes, _ = SLICES[name]
    cf = mini.compile(fn, backend=backend)
    for args in _slice_calls(shapes):
        expected = fn(*args)
        same(cf(*args), expected)


def test_symbolic_slice_bound_trains_like_eager():
    def fn(x, y):
        n = min(x.shape[0], y.shape[0])
        return (x[:n] * y[:n]).sum()
    cf = mini.compile(fn, backend="inductor")
    for n in (4, 6, 8):
        x, y = (T(n, seed=n).requires_grad_(), T(n + 2, seed=n + 1).requires_grad_())
        cf(x, y).backward()
        got = x.grad.numpy().copy(), y.grad.numpy().copy()
        x.grad = y.grad = None
        fn(x, y).backward()
        np.testing.assert_allclose(got[0], x.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(got[1], y.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dynamic", [True, None])
def test_range_and_index_over_a_dynamic_size(dynamic):
    def fn(x):
        acc = x[0]
        for i in range(1, x.shape[0] - 1):
            acc = acc + x[i] * i
        return acc + x[x.shape[0] - 1]
    frames_over(fn, matrices(3, 5, 4, 5), dynamic=dynamic)


@pytest.mark.parametrize("dynamic", [True, None])
def test_iterating_a_tensor_with_a_dynamic_first_dim(dynamic):
    def fn(x):
        acc = x[0] * 0
        for row in x:  # unrolled: the number of rows is specialized
            acc = acc + row
        return acc
    frames_over(fn, matrices(3, 5, 4, 5), dynamic=dynamic)


# ---- 2. sizes returned are the real values ---------------------------------------------------

def test_len_numel_and_shape_returned_are_the_values():
    # rebuilt from each call's own tensor: no recompile per size (torch returns them the same way)
    fn = lambda x: (len(x), x.shape[0], x.numel(), x * 2)  # noqa: E731
    assert frames_over(fn, [(T(n, 2, seed=n),) for n in (3, 5, 7, 9)]) == [1, 2, 2, 2]


def test_size_expression_returned_without_a_graph():
    cf = mini.compile(lambda x: (len(x) * 2 - 1, x.numel() // 3, x.shape[1] % 2), dynamic=True)
    for n in (3, 5, 8):
        x = T(n, 3, seed=n)
        assert cf(x) == (2 * n - 1, n, 1)


# automatic dynamic shapes (A7) across a graph break (A9): no one assignment's
def test_size_kept_across_a_graph_break_is_the_value():
    def fn(x):
        n = x.shape[0] * 2 + 1
        y = x.sin()
        print("", end="")  # a graph break: n lives on in a local
        return y * 2, n
    # the first graph stays dynamic; the unit after the break sees n as an int argument,
    # which recompiles once and then is a graph input (as any int argument)
    assert frames_over(fn, matrices(3, 5, 7), dynamic=True) == [2, 3, 3]


# ---- 3. ranges, slices and dynamic numbers ---------------------------------------------------

def _loop(x, n):
    for _ in range(n):
        x = x * 2
    return x


def test_range_of_a_dynamic_int_recompiles_per_value():
    x = T(2)
    frames_over(_loop, [(x, 2), (x, 1), (x, 3), (x, 0), (x, 3), (x, 2)])


def test_range_and_slice_arguments_are_guarded_by_value():
    def by_range(x, r):
        for i in r:
            x = x + i
        return x

    def by_slice(x, s):
        return x[s] * 2

    x = T(6)
    frames_over(by_range, [(x, range(2)), (x, range(3)), (x, range(1, 4)), (x, range(2))])
    frames_over(by_slice, [(x, slice(0, 2)), (x, slice(0, 3)), (x, slice(1, 5, 2)), (x, slice(0, 2))])


def test_dynamic_int_keeps_python_semantics():
    def fn(x, n):
        return x + 1, n / 3, n * n, isinstance(n, int), isinstance(n, float), -n, abs(n), n > 2
    x = T(2)
    frames_over(fn, [(x, 1), (x, 2), (x, 5), (x, -1)])


def test_dynamic_int_power_and_attributes_run_as_python():
    def fn(x, n):
        return x * 2, 2 ** n, n.real, n // 2
    x = T(2)
    frames_over(fn, [(x, 1), (x, 2), (x, -1), (x, -3)])


def test_mini_functions_of_a_dynamic_number_return_tensors():
    def fn(x, n):
        return x + 1, mini.exp(n), mini.add(n, 1)
    x = T(2)
    frames_over(fn, [(x, 1), (x, 2), (x, 3)])


def test_dynamic_int_is_not_taken_for_a_tensor_argument():
    def fn(x, n):
        return x.max(n), x.to(n), [i for i, _ in enumerate((x, x), n)], x * 2
    x = T(2, 3)
    frames_over(fn, [(x, 0), (x, 1), (x, 0)])


def test_dynamic_number_as_layer_norm_weight_raises_as_eager():
    fn = lambda x, w: mini.nn.functional.layer_norm(x, (3,), w)  # noqa: E731
    cf = mini.compile(fn)
    x = T(2, 3)
    for w in (2.0, 3.0):
        with pytest.raises(TypeError):
            fn(x, w)
        with pytest.raises(TypeError):
            cf(x, w)


def test_dynamic_int_past_two_to_the_53_is_exact():
    x = mini.ones(2, dtype=mini.int64)
    fn = lambda x, k: x * k  # noqa: E731
    cf = mini.compile(fn)
    for k in (3, 5, 2 ** 53 + 1, 2 ** 62 + 7, -(2 ** 63)):
        expected = fn(x, k)
        assert expected.tolist() == [k, k]  # eager is exact too
        same(cf(x, k), expected)


def test_int_constant_past_two_to_the_53_is_exact():
    x = mini.ones(2, dtype=mini.int64)
    fn = lambda x: x * (2 ** 53 + 1)  # noqa: E731
    assert fn(x).tolist() == [2 ** 53 + 1] * 2
    same(mini.compile(fn)(x), fn(x))


# ---- 4. Python ints past int64 ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [mini.int64, mini.float32])
def test_int_past_int64_raises_as_eager(dtype):
    x = mini.ones(2, dtype=dtype)
    fn = lambda x: x * 2 ** 70  # noqa: E731
    with pytest.raises(RuntimeError, match="Overflow when unpacking long") as eager:
        fn(x)
    with pytest.raises(RuntimeError) as compiled:
        mini.compile(fn)(x)
    assert str(compiled.value) == str(eager.value)


@pytest.mark.parametrize("dtype", [mini.int64, mini.float32])
def test_dynamic_int_past_int64_raises_as_eager(dtype):
    x = mini.ones(2, dtype=dtype)
    fn = lambda x, k: x * k  # noqa: E731
    cf = mini.compile(fn)
    same(cf(x, 3), fn(x, 3))
    same(cf(x, 5), fn(x, 5))  # k is a graph input from here on
    with pytest.raises(RuntimeError, match="Overflow when unpacking long") as eager:
        fn(x, 2 ** 70)
    with pytest.raises(RuntimeError) as compiled:
        cf(x, 2 ** 70)
    assert str(compiled.value) == str(eager.value)


# ---- 5. sizes whose element count overflows int64 --------------------------------------------

OVERFLOWING = {
    "zeros": lambda: mini.zeros(1 << 62, 4),
    "ones": lambda: mini.ones(1 << 62, 4),
    "randn": lambda: mini.randn(1 << 62, 4),
    "empty": lambda: mini.empty(1 << 62, 4),
    "full": lambda: mini.full((1 << 62, 4), 1.0),
    "expand": lambda: mini.ones(1).expand(1 << 40, 1 << 40),
    "reshape": lambda: mini.zeros(0).reshape(1 << 62, 4),
    "view": lambda: mini.zeros(0).view(1 << 62, 4),
}


@pytest.mark.parametrize("name", sorted(OVERFLOWING))
def test_overflowing_sizes_raise(name):
    with pytest.raises(RuntimeError, match=r"element count of shape \[.*\] overflows int64"):
        OVERFLOWING[name]()


def test_storage_bytes_overflowing_raise():
    with pytest.raises(RuntimeError, match="more bytes than int64"):
        mini.zeros(1 << 61, 2)


def test_negative_size_raises():
    with pytest.raises(RuntimeError, match="negative dimension"):
        mini.zeros(-1, 3)


@pytest.mark.parametrize("fn", [lambda x: x.expand(1 << 40, 1 << 40) + 0,
                                lambda x: x[:0].reshape(1 << 62, 4) + 0,
                                lambda x: x.expand(1 << 40).unsqueeze(1) + x.expand(1 << 40).unsqueeze(0)],
                         ids=["expand", "reshape", "broadcast"])
def test_overflowing_sizes_raise_in_compiled_code(fn):
    x = mini.ones(1)
    with pytest.raises(RuntimeError, match="overflows int64") as eager:
        fn(x)
    with pytest.raises(RuntimeError) as compiled:
        mini.compile(fn)(x)
    assert str(compiled.value) == str(eager.value)


# ---- range() of a Python number that automatic dynamic made an input --------------------------

def test_range_of_a_number_made_dynamic_specializes_under_fullgraph():
    # the trip count changes between calls, so automatic dynamic makes it a graph input; range()
    # needs its value: it is specialized and guarded (Dynamo's guard_if_dyn), not an error
    cnt = mini.CompileCounter()
    x = mini.rand(3)
    for steps in [1, 2, 3, 2, 4, 1]:
        got = mini.compile(chain(steps), backend=cnt, fullgraph=True)(x)
        assert got.tolist() == chain(steps)(x).tolist()
    assert cnt.frame_count == 4  # one graph per trip count: the guard holds each value


def test_a_dynamic_dims_own_stride_is_guarded():
    # With dynamic sizes the stride of a dim depends only on the dims after it, so a transposed
    # input of the same sizes is another layout: its own graph, not the contiguous one's (the
    # graph once recorded a dynamic last dim's stride as 1 and checked nothing)
    def f(x):
        return (x * 2 + 1).sum(-1)
    counter = mini.CompileCounter()
    g = mini.compile(f, backend=counter, dynamic=True)
    h = mini.compile(f, dynamic=True)  # the inductor backend: generated code on the layouts
    for x in (mini.randn(6, 5), mini.randn(5, 6).t(), mini.randn(7, 4)):
        assert mini.allclose(g(x), f(x)) and mini.allclose(h(x), f(x))
    assert counter.frame_count == 2  # the transposed input's own graph; the contiguous one serves 7x4
    x = mini.randn(4, 7).t()  # its dim 1 stride is dim 0's size: specialized, so compiled again
    assert mini.allclose(g(x), f(x)) and mini.allclose(h(x), f(x))


# ---- size relations between symbols: guarded, so a call that breaks one raises eager's error --
# Meta inference decides every relation a symbol takes part in (a broadcast against a fixed
# size or another symbol, a matmul's inner dims, a cat's other dims, a reshape's element
# count, an expand, where) with the sizes seen, and a shape guard keeps the outcome: a call
# whose sizes break it misses the cache, and the new trace raises eager's error.

FIXED = T(2, 3, seed=9)
FIXED5 = T(5, 3, seed=8)  # a size seen that is not the smallest a dynamic dim may have


def _pair(n, m, cols=3):
    return T(n, cols, seed=n), T(m, cols, seed=m + 20)


def _cond(n):
    return mini.tensor([[bool(i % 2)] for i in range(n)])


# name -> (fn, calls): the first calls make the dims dynamic, the later ones break a relation
RELATIONS = {
    "broadcast_fixed": (lambda x: x + FIXED, [(T(2, 3),), (T(3, 3),), (T(4, 3),), (T(2, 3),), (T(5, 3),)]),
    "broadcast_fixed_5": (lambda x: x - FIXED5, [(T(5, 3),), (T(6, 3),), (T(5, 3),), (T(7, 3),), (T(1, 3),)]),
    "broadcast_symbols": (lambda x, y: x * y, [_pair(2, 2), _pair(3, 3), _pair(4, 4), _pair(5, 6), _pair(6, 6)]),
    "broadcast_symbol_against_one": (lambda x, y: x - y, [_pair(2, 2), _pair(3, 3), _pair(4, 1), _pair(1, 4),
                                                          _pair(5, 7)]),
    "matmul_inner": (lambda a, b: a @ b, [(T(2, n), T(n, 4)) for n in (2, 3, 4)] + [(T(2, 5), T(6, 4)),
                                                                                     (T(2, 6), T(6, 4))]),
    "dot": (lambda a, b: a @ b, [(T(n), T(n)) for n in (2, 3, 4)] + [(T(5), T(6)), (T(6), T(6))]),
    "cat_other_dims": (lambda a, b: mini.cat([a, b], 1), [(T(n, 2), T(n, 3)) for n in (2, 3, 4)] +
                       [(T(5, 2), T(6, 3)), (T(5, 2), T(1, 3)), (T(7, 2), T(7, 3))]),
    "reshape_numel": (lambda x, y: y.view(x.shape[0], 3), [(T(n, 3), T(3 * n)) for n in (2, 3, 4)] +
                      [(T(5, 3), T(14)), (T(5, 3), T(15))]),
    # the -1 is s0 * 6 / 4: exact for even s0 only
    "reshape_inferred": (lambda x: x.reshape(-1, 4) * 2, [(T(n, 6),) for n in (2, 4, 6, 3, 8)]),
    "expand": (lambda x, y: y.expand(x.shape[0], 3), [(T(n, 3), T(n, 1)) for n in (2, 3, 4)] +
               [(T(5, 3), T(6, 1)), (T(5, 3), T(1, 1)), (T(6, 3), T(6, 1))]),
    "where": (lambda c, x, y: mini.where(c, x, y), [(_cond(n), T(n, 3), T(1, 3)) for n in (2, 3, 4)] +
              [(_cond(5), T(6, 3), T(1, 3)), (_cond(6), T(6, 3), T(6, 3))]),
    # eager broadcasts the values first, then the condition: its message names x and y
    "where_values_first": (lambda c, x, y: mini.where(c, x, y),
                           [(mini.tensor([[[True, False, True]]]),) + _pair(n, n) for n in (2, 3, 4)] +
                           [(mini.tensor([[[True, False, True]]]),) + _pair(5, 6)]),
    "layer_norm_weight": (lambda x, w: mini.nn.functional.layer_norm(x, x.shape[-1:], w),
                          [(T(2, n), T(n)) for n in (2, 3, 4)] + [(T(2, 5), T(6)), (T(2, 6), T(6))]),
    # a step slice's length ((m + 1) // 2) broadcast as the 1 it was, then matched against 4
    "step_slice_broadcast": (lambda x, y: x[:, ::2] * y, [(T(3, m), T(3, 4)) for m in (2, 8, 7, 6, 2)]),
    "select_index": (lambda x: x[:, 3] * 2, [(T(2, n),) for n in (5, 6, 4, 3, 7)]),
    "slice_then_broadcast": (lambda x, y: x[1:] + y, [_pair(n + 1, n) for n in (2, 3, 4)] + [_pair(6, 4),
                                                                                            _pair(6, 5)]),
}


def outcome(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001
        return None, (type(e), str(e))


@pytest.mark.parametrize("name", sorted(RELATIONS))
@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("fullgraph", [False, True])
def test_call_breaking_a_size_relation_raises_eagers_error(name, dynamic, backend, fullgraph):
    # fullgraph=True: the error raised while tracing is the user's, not mini.Unsupported (cat's
    # check is a raise statement in mini's Python)
    fn, calls = RELATIONS[name]
    compiled = mini.compile(fn, backend=backend, dynamic=dynamic, fullgraph=fullgraph)
    raised = 0
    for k, args in enumerate(calls):
        exp, exp_error = outcome(fn, args)
        got, got_error = outcome(compiled, args)
        assert got_error == exp_error, f"call {k}: compiled {got_error}, eager {exp_error}"
        if exp_error is None:
            same(got, exp, f"call {k}")
        raised += exp_error is not None
    assert 0 < raised < len(calls)  # the calls both hold and break the relation


def test_broadcast_against_a_fixed_size_guards_the_symbol():
    x = T(2, 3)
    mini.mark_dynamic(x, 0)
    e = mini.explain(RELATIONS["broadcast_fixed"][0])(x)
    assert "SHAPE_ENV: L['x'].size()[0] == 2" in e.guards[0], e.guards[0]
    x, y = _pair(3, 3)
    mini.mark_dynamic(x, 0)
    mini.mark_dynamic(y, 0)
    e = mini.explain(RELATIONS["broadcast_symbols"][0])(x, y)
    assert "SHAPE_ENV: L['x'].size()[0] == L['y'].size()[0]" in e.guards[0], e.guards[0]


def test_big_broadcast_against_a_fixed_size_does_not_read_past_the_fixed_operand():
    # the kernel looped over the symbol's rows reading the [2, 3] operand past its end
    # (garbage, and SIGSEGV at millions of rows); now the call misses and eager raises
    compiled = mini.compile(RELATIONS["broadcast_fixed"][0], backend="inductor", dynamic=True)
    same(compiled(T(2, 3)), T(2, 3) + FIXED)
    big = mini.ones(1 << 20, 3)
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        compiled(big)


# ---- cat along a dynamic dim: the size is a sum of symbols -------------------------------------

def _append(cache, new):
    return mini.cat([cache, new], dim=1)


def _decode(cache, steps, step_fn):
    out = []
    for i in range(steps):
        cache = step_fn(cache, mini.full((2, 1, 4), float(i)))
        out.append(cache.sum(1))
    return cache, out


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_kv_cache_grown_by_cat_matches_eager(backend):
    start = T(2, 3, 4)
    same(_decode(start, 6, mini.compile(_append, backend=backend)), _decode(start, 6, _append))


def test_kv_cache_grown_by_cat_compiles_once_its_length_is_dynamic():
    compiled, cnt = counted(_append)
    _decode(T(2, 3, 4), 6, compiled)
    assert cnt.frame_count == 2  # the static first length, then one graph for every length


def _attend(q, cache, new):
    cache = mini.cat([cache, new], dim=1)
    scores = (q.unsqueeze(1) * cache).sum(-1).softmax(-1)
    return (scores.unsqueeze(-1) * cache).sum(1), cache


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_kv_cache_attention_step_matches_eager(backend):
    compiled = mini.compile(_attend, backend=backend, dynamic=True)
    q = T(2, 4, seed=1)
    cache_e = cache_c = T(2, 2, 4, seed=2)
    for i in range(5):
        new = T(2, 1, 4, seed=10 + i)
        out_e, cache_e = _attend(q, cache_e, new)
        out_c, cache_c = compiled(q, cache_c, new)
        same((out_c, cache_c), (out_e, cache_e))
    counter, cnt = counted(_attend, dynamic=True)
    for n in (2, 3, 4):
        counter(q, T(2, n, 4), T(2, 1, 4))
    assert cnt.frame_count == 1


def test_a_size_in_tensor_math_compiles_and_trains_with_inductor():
    def fn(x):
        return (x * x.shape[0]).sum() / x.shape[0]
    cf = mini.compile(fn, backend="inductor", dynamic=True)
    for n in (3, 5, 8):
        x = T(n, 4)
        x.requires_grad_(True)
        out = cf(x)
        out.backward()
        np.testing.assert_allclose(out.item(), x.detach().sum().item(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), np.ones((n, 4)), rtol=1e-6)
