"""In-place ops under capture (issue 10): add_, sub_, mul_, div_, zero_, fill_, copy_,
masked_fill_, clamp_, relu_ and x += y / x *= y on tensors are traced into one graph of
out-of-place ops (functionalization), through views (slice_scatter) and aliases; a graph input
written in place gets its final value copied back after the graph runs, at graph breaks too;
training graphs give eager's gradients and eager's errors. Also: requires_grad, is_leaf,
grad_fn, device and is_contiguous() of traced tensors agree with eager.

Every program runs eagerly and compiled on copies of the same inputs, under the eager,
aot_eager and inductor backends; outputs (values, dtype, shape, requires_grad), the inputs
after the call and, for training programs, the gradients are compared. torch 2.11 traces all
of these in-place programs into 1 graph with 0 breaks (Dynamo records in-place ops; AOTAutograd
functionalizes them), so those counts are asserted with mini.explain."""
import numpy as np
import pytest

import mini
from capture_helpers import ALIVE, T, fresh_mini, same  # noqa: F401  (fresh_mini: autouse)
from conftest import to_np

BACKENDS = ["eager", "aot_eager", "inductor"]


def copies(args):
    """Fresh leaf copies of the tensor arguments (requires_grad kept), other arguments as is."""
    out = []
    for a in args:
        if isinstance(a, mini.Tensor):
            c = a.detach().clone()
            out.append(c.requires_grad_(True) if a.requires_grad else c)
        else:
            out.append(a)
    return out


def flat(x):
    return [y for item in x for y in flat(item)] if isinstance(x, (tuple, list)) else [x]


def check(fn, *args, backend, grad=False, graphs=(1, 0)):
    """fn eagerly and compiled on copies of args: same outputs, same inputs afterwards and,
    with grad, the same gradients of the sum of the outputs that require grad; mini.explain's
    (graph count, graph break count) is `graphs` (torch 2.11's for these programs)."""
    if graphs is not None:
        assert counts(fn, *args) == graphs
        mini.reset()
    eager_args, compiled_args = copies(args), copies(args)
    expected = fn(*eager_args)
    got = mini.compile(fn, backend=backend)(*compiled_args)
    same(got, expected)
    for i, (g, e) in enumerate(zip(compiled_args, eager_args)):
        if isinstance(e, mini.Tensor):
            same(g, e, f"argument {i} after the call")
    if grad:
        for out, args_ in ((expected, eager_args), (got, compiled_args)):
            sum(o.sum() for o in flat(out) if isinstance(o, mini.Tensor) and o.requires_grad).backward()
        for i, (g, e) in enumerate(zip(compiled_args, eager_args)):
            if isinstance(e, mini.Tensor) and e.requires_grad:
                same(g.grad, e.grad, f"gradient of argument {i}")
    return got, compiled_args


def counts(fn, *args):
    """mini.explain's graph and graph break counts. With no break, no break reason either (a
    unit that ends in CPython after its graph, with no graph after it, only shows there)."""
    ex = mini.explain(fn)(*copies(args))
    if ex.graph_break_count == 0:
        assert not ex.break_reasons, [b.reason for b in ex.break_reasons]
    return ex.graph_count, ex.graph_break_count


# ---- the in-place ops, traced into one graph -----------------------------------------------------

def chain(x):
    y = x.clone()
    y.add_(1)
    y.mul_(2)
    return y.relu()


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_chain_on_a_clone(backend):
    check(chain, T(3, 4, lo=-2), backend=backend)


def test_inplace_chain_is_one_graph_of_out_of_place_ops():
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    mini.compile(chain, backend=cnt)(T(3, 4))
    assert (cnt.frame_count, cnt.op_count) == (1, 4)  # clone, add, mul, relu: torch's 4 nodes
    ex = mini.explain(chain)(T(3, 4))
    assert (ex.graph_count, ex.graph_break_count) == (1, 0)
    targets = [n.target for n in ex.graphs[0].nodes if n.op == "call_function"]
    assert targets == ["mini.clone", "mini.add", "mini.mul", "mini.relu"]  # out of place


def augmented(x, w):
    y = x * 1.0
    y += w
    y *= 2
    y -= 1
    y /= 3
    x += 1  # the input itself
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_augmented_assignment_writes_in_place(backend):
    check(augmented, T(3, 4), T(4, seed=1), backend=backend)


def augmented_alias(x):
    a = x * 2
    b = a
    b += 1  # a and b are one tensor
    c = a
    c **= 2  # a tensor has no __ipow__: c is rebound, a keeps its value
    return a, b, c


@pytest.mark.parametrize("backend", BACKENDS)
def test_augmented_assignment_through_a_second_name(backend):
    got, _ = check(augmented_alias, T(5), backend=backend)
    assert got[0] is got[1] and got[2] is not got[0]


def methods(x, mask):
    y = x.clone()
    y.sub_(0.5).div_(2)
    y.clamp_(min=-0.2, max=0.3)
    return (y, x.clone().masked_fill_(mask, 7.0), x.clone().relu_(), x.clone().zero_(),
            x.clone().fill_(3), x.clone().copy_(x[0]), x.clone().clamp_(max=x[1]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_inplace_method(backend):
    x = T(3, 4, lo=-1, hi=1)
    check(methods, x, x > 0, backend=backend)


def inputs_written(x, y, z, n):
    x.add_(y)
    y.zero_()
    z.masked_fill_(z > 1, -1).clamp_(min=0.7)
    n.copy_(x)  # float32 into int64: truncated
    return x + y


@pytest.mark.parametrize("backend", BACKENDS)
def test_written_inputs_get_their_final_values(backend):
    n = mini.zeros(3, dtype=mini.int64)
    _, after = check(inputs_written, T(3, hi=9), T(3, seed=1), T(3, seed=2), n, backend=backend)
    assert after[3].dtype == mini.int64


def returns_itself(x):
    y = x.clone()
    z = y.add_(1)
    w = x.mul_(2)
    return z is y, w is x, z, w


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_methods_return_the_tensor_itself(backend):
    x = T(3)
    got, after = check(returns_itself, x, backend=backend)
    assert got[3] is after[0]  # the written input comes back as the caller's own object


def dtypes(i, f, d, b):
    i.fill_(2.7)  # truncated, as eager
    f.copy_(d)  # float64 into float32
    b.fill_(1)
    d.mul_(f)
    return i, f, d, b


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_keeps_the_written_tensors_dtype(backend):
    check(dtypes, mini.zeros(3, dtype=mini.int64), T(3), T(3, seed=1, dtype=mini.float64),
          mini.zeros(3, dtype=mini.bool), backend=backend)


# ---- views and aliases ------------------------------------------------------------------------------

def views_of_input(x):
    x[1].mul_(3)
    x[:, 0].fill_(0)
    x.t()[2].add_(10)
    x[0, 1:3].copy_(x[2, :2])
    return x.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_through_a_view_changes_the_input(backend):
    check(views_of_input, T(3, 4), backend=backend)


def aliases(x):
    y = x.clone()
    v = y[0]
    w = y[:, 1:].t()
    r = y.reshape(-1)
    y.mul_(2)
    v.add_(100)
    r[5].fill_(-1)
    return y, v, w, r


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_alias_sees_a_write(backend):
    check(aliases, T(3, 4), backend=backend)


def view_then_write(x):
    v = x[0]
    x.add_(1)
    return v


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_returned_view_of_a_written_input_shares_its_memory(backend):
    got, after = check(view_then_write, T(2, 3), backend=backend)
    got.mul_(0)  # eager code writing the view writes the input, as eager's view would
    assert to_np(after[0])[0].tolist() == [0.0, 0.0, 0.0]


def detach_alias(x):
    d = x.detach()
    d.mul_(2)
    return x + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_detach_shares_memory(backend):
    check(detach_alias, T(3), backend=backend)


def detach_grad(x):
    y = x * 2
    y.detach().mul_(3)  # the data changes under y's history
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_through_detach_of_a_tensor_with_history(backend):
    check(detach_grad, T(3, requires_grad=True), backend=backend, grad=True, graphs=None)
    ex = mini.explain(detach_grad)(T(3, requires_grad=True))
    assert "detach()" in ex.break_reasons[0].reason


def expanded(x):
    e = x[:1].expand(3, 4)
    e[1].add_(1)  # a row of the expand: no two of its elements share memory, so eager writes x[0]
    return x


def test_write_through_a_view_of_an_expanded_tensor_runs_eagerly():
    # (a write into the expanded tensor itself raises eager's error: test_capture_eager_errors.py)
    ex = mini.explain(expanded)(T(3, 4))
    assert any("expanded" in b.reason for b in ex.break_reasons)
    x = T(3, 4)
    expected = expanded(x.clone())
    same(mini.compile(expanded)(x), expected)


# ---- loops, graph breaks, the cache -------------------------------------------------------------

def loop(x):
    y = x.clone()
    for i in range(4):
        y.mul_(2)
        y[i % 2].add_(i)
    for row in x:  # rows of the input: each a view written in place
        row.sub_(1)
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_unrolled_loops_write_in_place(backend):
    check(loop, T(40, 2), backend=backend)  # 40 rows: the graph grows while iterating


def setitem_augmented(x):
    x[0] += 1  # a write through the view x[0], then x[0] = that view (STORE_SUBSCR)
    return x * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_augmented_assignment_to_an_item(backend):
    # STORE_SUBSCR is not traced yet: the unit ends there, after writing x back
    check(setitem_augmented, T(2, 3), backend=backend, graphs=None)


SEEN = []


def sees(x):
    SEEN.append(x.tolist())  # tolist() breaks the graph: eager code reads x here
    return x


def break_between_writes(x):
    x.add_(1)
    sees(x)
    x.mul_(2)
    return x


@pytest.mark.a9  # a graph break's resume units: assignment A9
@pytest.mark.parametrize("backend", BACKENDS)
def test_write_back_happens_before_a_graph_break(backend):
    SEEN.clear()
    check(break_between_writes, T(3), backend=backend, graphs=None)
    assert SEEN[0] == SEEN[1]  # eager code after the break saw the first write, both times
    assert counts(break_between_writes, T(3)) == (2, 1)  # as torch: print in the middle


def writes_then_breaks(y):
    y.add_(1)
    print("a side effect")
    return y * 2


def calls_a_helper_that_breaks(x):
    y = x.clone()
    z = writes_then_breaks(y)
    return y, z, writes_then_breaks(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_in_an_instruction_that_breaks_happens_once(backend, capsys):
    check(calls_a_helper_that_breaks, T(3), backend=backend, graphs=None)


def view_across_a_break(x):
    v = x[0]
    x.add_(1)
    sees(x)
    v.mul_(2)  # v is still a view of x after the break
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_keep_sharing_memory_across_a_graph_break(backend):
    # torch: 2 graphs, 1 break (AOTAutograd writes through the aliased inputs v and x of the
    # resumed graph); mini breaks once more at v.mul_ (notes/capture.md)
    check(view_across_a_break, T(2, 3), backend=backend, graphs=None)


def add_one(x):
    x.add_(1)
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_cached_call_writes_back(backend):
    x = mini.zeros(3)
    f = mini.compile(add_one, backend=backend)
    for _ in range(3):
        f(x)
    assert x.tolist() == [3.0, 3.0, 3.0]
    assert x._version == 3  # one copy into the input per call, as AOTAutograd's epilogue


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_saved_tensor_written_by_a_compiled_call_is_caught(backend):
    x, w = T(3), T(3, requires_grad=True)
    loss = (w * x).sum()  # saves x
    mini.compile(add_one, backend=backend)(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def write_and_read(x, y):
    x.add_(1)
    return y * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_sharing_memory_with_a_written_input(backend):
    f = mini.compile(write_and_read, backend=backend)
    for make in (lambda a: (a, mini.ones(3)), lambda a: (a, a), lambda a: (a, a[1:])):
        a, b = mini.zeros(3), mini.zeros(3)
        expected = write_and_read(*make(b))
        same(f(*make(a)), expected)
        same(a, b, "the written input")


def add_both(x, y):
    return x + y


def write_one_read_other(x, y):
    x.mul_(2)
    return y + 1


@pytest.mark.parametrize("fn", [add_both, write_one_read_other])
@pytest.mark.parametrize("backend", BACKENDS)
def test_one_tensor_passed_twice_then_two(fn, backend):
    # traced with x and y one tensor, the graph reads both through one input: a call with two
    # tensors must not reuse it as is (torch guards this with DUPLICATE_INPUT)
    f = mini.compile(fn, backend=backend)
    for make in (lambda: [T(3)] * 2, lambda: [T(3), T(3, seed=1)], lambda: [T(3)] * 2):
        args = make()
        eager_args = copies(args) if args[0] is not args[1] else [args[0].clone()] * 2
        expected = fn(*eager_args)
        same(f(*args), expected)
        same(args[0], eager_args[0], "x after the call")


def test_tracing_with_aliased_inputs_breaks_with_a_reason():
    a = mini.zeros(3)
    ex = mini.explain(write_and_read)(a, a[1:])
    assert "shares memory" in ex.break_reasons[0].reason


def dynamic(x):
    y = x.clone()
    y[1:].mul_(2)
    y[0].fill_(5)
    x.add_(y)
    return x.sum(0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_with_dynamic_sizes(backend):
    f = mini.compile(dynamic, backend=backend, dynamic=True)
    for n in (3, 5, 7):
        a = T(n, 2, seed=n)
        b = a.clone()
        same(f(a), dynamic(b))
        same(a, b, "the written input")
    assert counts(dynamic, T(5, 2)) == (1, 0)


class Counter(mini.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = mini.nn.Linear(3, 3)
        self.count = mini.zeros(1)

    def forward(self, x):
        self.count.add_(1)
        return self.lin(x) * self.count


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_state_written_in_forward(backend):
    m, reference = Counter(), Counter()
    reference.lin = m.lin
    cm = mini.compile(m, backend=backend)
    x = T(2, 3)
    for _ in range(3):
        same(cm(x), reference(x))
    same(m.count, reference.count)
    assert counts(Counter(), x) == (1, 0)


STATE = mini.zeros(3)


def writes_a_global(x):
    STATE.add_(x)  # no return value: the write is the graph's only effect


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_global_written_in_place(backend):
    STATE.zero_()
    f = mini.compile(writes_a_global, backend=backend)
    assert f(mini.ones(3)) is None
    f(mini.ones(3) * 2)
    assert STATE.tolist() == [3.0, 3.0, 3.0]
    assert counts(writes_a_global, mini.ones(3)) == (1, 0)


def test_fullgraph_accepts_inplace_ops():
    x = T(3, 4)
    same(mini.compile(chain, fullgraph=True)(x), chain(x))


# ---- errors, as eager raises them ------------------------------------------------------------------

@pytest.mark.parametrize("fn,args,match", [
    (lambda x: x.add_(1.5), lambda: (mini.ones(3, dtype=mini.int64),), "can't be cast"),
    (lambda x, y: x.add_(y), lambda: (T(3), T(2, 3)), "doesn't match the broadcast shape"),
    (lambda x, m: x.masked_fill_(m, 1), lambda: (T(3), mini.ones(3, dtype=mini.int64)), "boolean masks"),
    (lambda x: x.clamp_(), lambda: (T(3),), "At least one of 'min' or 'max'"),
    (lambda x: x.relu_(), lambda: (T(3, requires_grad=True),), "leaf Variable that requires grad"),
    (lambda x: x[0].zero_(), lambda: (T(2, 3, requires_grad=True),), "view of a leaf Variable"),
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_match_eager(fn, args, match, backend):
    eager_args, compiled_args = args(), args()
    with pytest.raises(RuntimeError, match=match):
        fn(*eager_args)
    with pytest.raises(RuntimeError, match=match):
        mini.compile(fn, backend=backend)(*compiled_args)
    for g, e in zip(compiled_args, eager_args):
        same(g, e, "an argument after the error")


# ---- training graphs ----------------------------------------------------------------------------------

def intermediates(x, w):
    y = x * w
    y.add_(1)
    y.mul_(y)
    z = y.sin()
    z.clamp_(max=0.5)
    z -= w
    return z.sum(), y


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_through_writes_to_intermediates(backend):
    check(intermediates, T(3, 4, requires_grad=True), T(4, seed=1, requires_grad=True),
          backend=backend, grad=True)


def view_of_intermediate(x):
    y = x * 2
    y[0].mul_(3)
    y[:, 1:].add_(x[:, :2])
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_through_writes_to_views_of_intermediates(backend):
    # eager mini refuses in-place writes to views under autograd (it does not rebase the base,
    # torch does); compiled mini functionalizes them as torch does: compare with numpy
    x = T(3, 3, requires_grad=True)
    got = mini.compile(view_of_intermediate, backend=backend)(x)
    ref = to_np(x) * 2
    ref[0] *= 3
    ref[:, 1:] += to_np(x)[:, :2]
    np.testing.assert_allclose(to_np(got), ref, rtol=1e-6)
    assert got.requires_grad
    g = np.arange(9, dtype=np.float32).reshape(3, 3) / 4
    got.backward(mini.tensor(g.tolist()))
    # d got / d x: 2 everywhere, times 3 in row 0; plus the x[:, :2] added into columns 1:
    expected_grad = 2 * g
    expected_grad[0] *= 3
    expected_grad[:, :2] += g[:, 1:]
    np.testing.assert_allclose(to_np(x.grad), expected_grad, rtol=1e-6)


def written_input_with_history(x):
    x.mul_(2)
    return x.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_writing_an_input_with_history(backend):
    w, we = T(3, requires_grad=True), T(3, requires_grad=True)
    x, xe = w * 3, we * 3  # not leaves: eager allows the write, autograd rebases x
    got = mini.compile(written_input_with_history, backend=backend)(x)
    expected = written_input_with_history(xe)
    same(got, expected)
    same(x, xe, "the written input")
    assert not x.is_leaf
    got.backward()
    expected.backward()
    same(w.grad, we.grad, "gradient")
    ex = mini.explain(written_input_with_history)(T(3, requires_grad=True) * 3)
    assert (ex.graph_count, ex.graph_break_count, ex.break_reasons) == (1, 0, [])


def buffer_times_weight(b, w):
    b.mul_(w)  # the gradient of w reads b's old value
    return (b * 2).sum()


@pytest.mark.parametrize("backend", BACKENDS + ["counter"])
def test_an_input_written_with_a_value_that_requires_grad(backend):
    if backend == "counter":
        backend = mini.CompileCounter()
        ALIVE.append(backend)
    _, (b, w) = check(buffer_times_weight, T(3), T(3, seed=1, requires_grad=True), backend=backend, grad=True)
    assert b.requires_grad and not b.is_leaf  # eager gives b a history too


def sgd_step(w, g):
    w.sub_(0.1 * g)
    return w


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_leaf_that_requires_grad_written_under_no_grad(backend):
    w, g = T(3, requires_grad=True), T(3, seed=1)
    we = w.detach().clone().requires_grad_(True)
    with mini.no_grad():
        got = mini.compile(sgd_step, backend=backend)(w, g)
        sgd_step(we, g)
    assert got is w and w.requires_grad and w.is_leaf
    same(w, we, "the parameter")


# ---- tensor attributes read while tracing ------------------------------------------------------------

def attributes(x, y):
    a = x * 2
    b = y * 2
    d = a.detach()
    return (a.requires_grad, b.requires_grad, a.is_leaf, b.is_leaf, b.grad_fn is None,
            d.requires_grad, d.is_leaf, y.is_leaf, y.grad_fn is None, a.dtype, a.shape[1],
            a.device, a.ndim, a.is_contiguous(), a.t().is_contiguous(),
            a[:, :1].is_contiguous(), a[:1].is_contiguous(), x.requires_grad, a)


@pytest.mark.parametrize("backend", BACKENDS)
def test_attributes_of_traced_tensors_agree_with_eager(backend):
    check(attributes, T(3, 4, requires_grad=True), T(3, 4), backend=backend)


def grad_fn_of_a_result_with_history(x):
    a = x * 2
    return a.grad_fn is None, a


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_fn_of_a_result_with_history_breaks_the_graph(backend):
    # its autograd node exists only once the graph has run: Dynamo breaks here too
    check(grad_fn_of_a_result_with_history, T(3, requires_grad=True), backend=backend, graphs=None)
    ex = mini.explain(grad_fn_of_a_result_with_history)(T(3, requires_grad=True))
    assert "grad_fn" in ex.break_reasons[0].reason


def layout_of_a_written_input(x):
    x.add_(1)
    return x.is_contiguous(), x.t().is_contiguous(), x * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_written_input_keeps_its_layout(backend):
    check(layout_of_a_written_input, T(3, 4), backend=backend)
    # a transposed input: its new value in the graph is contiguous, the input is not
    base = T(4, 3)
    xe, xc = base.clone().t(), base.clone().t()
    expected = layout_of_a_written_input(xe)
    same(mini.compile(layout_of_a_written_input, backend=backend)(xc), expected)
    same(xc, xe, "the written input")
    assert xc.stride() == (1, 3) and expected[:2] == (False, True)


def intermediate_requires_grad(x):
    y = x * 2
    return y.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_requires_grad_of_an_intermediate_follows_grad_mode(backend):
    x = T(3, requires_grad=True)
    f = mini.compile(intermediate_requires_grad, backend=backend)
    assert f(x) is True
    with mini.no_grad():
        assert f(x) is False  # recompiled: grad mode is guarded
    assert f(T(3)) is False


def leafness_of_an_input(x):
    return x.is_leaf, x * 2


def test_leafness_of_an_input_that_requires_grad_is_not_guessed():
    leaf, nonleaf = T(3, requires_grad=True), T(3, requires_grad=True) * 1
    f = mini.compile(leafness_of_an_input, backend="eager")
    assert f(leaf)[0] is True and f(nonleaf)[0] is False  # TENSOR_MATCH does not guard leafness
    ex = mini.explain(leafness_of_an_input)(leaf)
    assert "is_leaf" in ex.break_reasons[0].reason
