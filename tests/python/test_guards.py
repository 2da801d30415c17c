"""Guards (issue 3): for every guard kind, a change of the guarded value must miss (recompile,
and the new result is right) and a change of something unguarded must hit. Kinds: tensor
match (dtype, requires_grad, rank, static sizes, strides, tensor type), shape guards from
branches, type and length of containers, constants (int, float, bool, str, None arguments,
closure cells, globals, module attributes), identity (functions and modules read from globals
and closures) and grad mode.

Expected values come from running the same function eagerly on the same inputs."""
import gc

import pytest

import mini
from capture_helpers import Checked, T, calls, frames_over, fresh_mini  # noqa: F401  (fresh_mini: autouse)

pytestmark = pytest.mark.a5


# ---- tensor match -----------------------------------------------------------------------------

def _affine(x):
    return x * 2 + 1


def test_tensor_dtype_miss_and_hit():
    calls(_affine, (T(4),), (T(4, dtype=mini.float64),), frames=2)
    calls(_affine, (T(4),), (T(4, seed=1),), (T(4, seed=2),), frames=1)


def test_tensor_requires_grad_miss_and_hit():
    calls(_affine, (T(4),), (T(4, requires_grad=True),), frames=2)
    calls(_affine, (T(4, requires_grad=True),), (T(4, seed=3, requires_grad=True),), frames=1)


def test_tensor_rank_miss():
    calls(_affine, (T(4),), (T(4, 1),), (T(1, 4),), frames=3)


@pytest.mark.parametrize("second", [(5, 4), (3, 5)])
def test_tensor_static_size_miss(second):
    with mini.config.patch(automatic_dynamic_shapes=False):
        calls(lambda x: x.sum(1) * x.shape[0], (T(3, 4),), (T(*second),), frames=2)


def test_tensor_stride_miss_transposed_input():
    fn = lambda x: x.reshape(12) + 0  # noqa: E731  (element order depends on the layout)
    transposed = T(4, 3, seed=1).t()
    assert tuple(transposed.shape) == (3, 4)
    calls(fn, (T(3, 4),), (transposed,), frames=2)


def test_tensor_type_miss_parameter_vs_tensor():
    p = mini.nn.Parameter(T(4, seed=1), requires_grad=False)
    calls(_affine, (T(4),), (p,), frames=2)


def _printed_tensor_guards(capsys, fn, *args, **compile_kwargs):
    mini.set_logs("guards")
    try:
        mini.compile(fn, backend="eager", **compile_kwargs)(*args)
    finally:
        mini.set_logs()
    return [line.strip() for line in capsys.readouterr().err.splitlines() if "check_tensor(" in line]


def test_tensor_guard_prints_every_field_it_checks(capsys):
    """The guard's printed form (MINI_LOGS=guards) names the source and each field it checks."""
    x = T(2, 3, requires_grad=True).t()  # sizes [3, 2], strides [1, 3]
    (line,) = _printed_tensor_guards(capsys, lambda x: x * 2, x)
    assert line.endswith("check_tensor(L['x'], mini._C.Tensor, mini.float32, device=cpu, "
                         "requires_grad=True, size=[3, 2], stride=[1, 3])"), line
    p = mini.nn.Parameter(T(4, dtype=mini.float64))
    (line,) = _printed_tensor_guards(capsys, lambda p: p + 1, p)
    assert "check_tensor(L['p'], Parameter, mini.float64, device=cpu, requires_grad=True, size=[4], " \
           "stride=[1])" in line, line


def test_a_dynamic_dim_unchecks_its_size_and_the_strides_before_it(capsys):
    """dynamic=True: each size is -1 (any size >= 2); the stride of a dim before a dynamic one
    grows with it and is not checked; the last dim's stride (1) still is."""
    (line,) = _printed_tensor_guards(capsys, lambda x: x * 2, T(4, 3, 5), dynamic=True)
    assert "size=[None, None, None], stride=[None, None, 1])" in line, line  # None: not checked
    # it holds for other sizes; a layout whose last stride is not 1 misses
    fn = lambda x: x * 2  # noqa: E731
    assert frames_over(fn, [(T(4, 3, 5),), (T(6, 2, 7),), (T(7, 6, 2).transpose(0, 2),)], dynamic=True) == [1, 1, 2]


def _reasons(capsys, fn, first, second, **compile_kwargs):
    """The guard failures the recompile log gives when `second` misses the entry `first` compiled
    (each without its "0/0: " entry number)."""
    mini.set_logs("recompiles")
    try:
        cf = mini.compile(fn, backend="eager", **compile_kwargs)
        cf(*first)
        capsys.readouterr()
        cf(*second)
    finally:
        mini.set_logs()
    lines = [line.strip()[2:] for line in capsys.readouterr().err.splitlines() if line.strip().startswith("- ")]
    return [line.split(": ", 1)[1] for line in lines]


# Each field's miss, named as torch names it (the handout's sentences): the tensor by its source,
# the field, what the entry expected and what the call passed.
MISSES = {
    "type": ((T(4),), (mini.nn.Parameter(T(4), requires_grad=False),),
             "expected type of 'x' to be mini._C.Tensor, but found Parameter"),
    "dtype": ((T(4),), (T(4, dtype=mini.float64),), "tensor 'x' dtype mismatch. expected float32, actual float64"),
    "requires_grad": ((T(4),), (T(4, requires_grad=True),),
                      "tensor 'x' requires_grad mismatch. expected requires_grad=0"),
    "rank": ((T(4),), (T(4, 1),), "tensor 'x' rank mismatch. expected 1, actual 2"),
    "size": ((T(3, 4),), (T(5, 4),), "tensor 'x' size mismatch at index 0. expected 3, actual 5"),
    "stride": ((T(3, 4),), (T(4, 3).t(),), "tensor 'x' stride mismatch at index 0. expected 4, actual 1"),
}


@pytest.mark.parametrize("field", list(MISSES))
def test_each_field_that_misses_is_named_as_torch_names_it(capsys, field):
    first, second, sentence = MISSES[field]
    with mini.config.patch(automatic_dynamic_shapes=False):
        assert _reasons(capsys, lambda x: x.reshape(-1) * 2, first, second) == [sentence]


def test_a_dynamic_dim_misses_below_size_2_and_says_so(capsys):
    # a dynamic size is any size >= 2: 0 and 1 stay specialized (notes/dynamic_shapes.md), so a
    # graph traced at 32 rows does not run one of 1 row
    fn = lambda x: x * 2  # noqa: E731
    assert frames_over(fn, [(T(32, 16),), (T(1, 16),)], dynamic=True) == [1, 2]
    assert _reasons(capsys, fn, (T(32, 16),), (T(1, 16),), dynamic=True) == [
        "tensor 'x' size mismatch at index 0. expected a dynamic size >= 2, actual 1"]


@pytest.mark.parametrize("first, second, sentence", [
    # two fields differ each time: the earlier one in the contract's order is named
    ((T(4),), (T(4, dtype=mini.float64, requires_grad=True),),
     "tensor 'x' dtype mismatch. expected float32, actual float64"),         # dtype, requires_grad
    ((T(4),), (T(4, 1, requires_grad=True),),
     "tensor 'x' requires_grad mismatch. expected requires_grad=0"),          # requires_grad, rank
    ((T(4),), (T(5, 4, 1),), "tensor 'x' rank mismatch. expected 1, actual 3"),  # rank, sizes
    ((T(4, 6),), (T(4, 6).t(),), "tensor 'x' size mismatch at index 0. expected 4, actual 6"),  # sizes, strides
])
def test_the_first_field_in_the_contracts_order_decides(capsys, first, second, sentence):
    with mini.config.patch(automatic_dynamic_shapes=False):
        assert _reasons(capsys, lambda x: x.reshape(-1) * 2, first, second) == [sentence]


def test_tensor_unrelated_changes_hit():
    base = T(6, 4, seed=9)
    view = base[2:5]  # same sizes and strides, another storage offset
    x_unused = T(2, seed=4)
    c = calls(lambda x, unused: x * 3, (T(3, 4), x_unused), (view, T(7, dtype=mini.int64)), frames=1)
    c(T(3, 4, seed=5), None)
    assert c.frames == 1


def _shape_branch(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_shape_guard_from_branch_miss_and_hit():
    c = Checked(_shape_branch, dynamic=True)
    c(T(3))
    c(T(2))  # another size on the same side of the branch: hit
    assert c.frames == 1
    c(T(5))  # the branch's guard fails: miss
    assert c.frames == 2
    c(T(8))
    c(T(4))
    assert c.frames == 2


# ---- type match (containers) ------------------------------------------------------------------

def _sum_all(xs):
    total = xs[0]
    for t in xs[1:]:
        total = total + t
    return total


def test_type_match_tuple_vs_list_miss():
    calls(lambda xs: (xs[0] + xs[1], len(xs)), ((T(3), T(3, seed=1)),), ([T(3), T(3, seed=1)],), frames=2)


def test_length_miss_and_hit():
    a, b, c = T(3), T(3, seed=1), T(3, seed=2)
    calls(_sum_all, ((a, b),), ((a, b, c),), frames=2)
    calls(_sum_all, ((a, b),), ((c, a),), ((b, b),), frames=1)


# ---- constant match ---------------------------------------------------------------------------

def _scaled(x, n):
    return x * n, n * 3


def _scaled_tensor(x, n):
    return x * n + n * 3


@pytest.mark.parametrize("first,second", [(2, 3), (2, 2.0), (1, True), (1.5, 2.5), (0.5, -0.5)])
def test_constant_number_miss(first, second):
    calls(_scaled_tensor, (T(3), first), (T(3), second), frames=2)


@pytest.mark.parametrize("first,second", [(2, 3), (1.5, 2.5)])
def test_python_number_result_stays_a_python_number(first, second):
    calls(_scaled, (T(3), first), (T(3), second), frames=2)


@pytest.mark.parametrize("value", [2, 1.5, True])
def test_constant_number_hit(value):
    calls(_scaled, (T(3), value), (T(3, seed=1), value), (T(3, seed=2), value), frames=1)


def _branchy(x, flag, mode, opt):
    y = x * 2 if flag else x - 1
    if mode == "sq":
        y = y * y
    if opt is None:
        return y
    return y + opt


@pytest.mark.parametrize("change", ["bool", "str", "none_to_float", "float_to_none", "none_to_tensor"])
def test_constant_bool_str_none_miss(change):
    a = {"bool": (True, "sq", None), "str": (True, "sq", None), "none_to_float": (True, "sq", None),
         "float_to_none": (True, "sq", 1.5), "none_to_tensor": (False, "id", None)}[change]
    b = {"bool": (False, "sq", None), "str": (True, "id", None), "none_to_float": (True, "sq", 1.5),
         "float_to_none": (True, "sq", None), "none_to_tensor": (False, "id", T(3, seed=7))}[change]
    calls(_branchy, (T(3), *a), (T(3), *b), frames=2)


def test_constant_unread_argument_hits():
    calls(lambda x, n: x + 1, (T(3), 1), (T(3), 2), (T(3), "s"), (T(3), None), frames=1)


def _make_closure():
    k = 2.0
    other = 1

    def fn(x):
        return x * k

    def set_k(v):
        nonlocal k
        k = v

    def set_other(v):
        nonlocal other
        other = v

    def read_other():
        return other

    return fn, set_k, set_other, read_other


def test_closure_cell_miss_and_hit():
    fn, set_k, set_other, read_other = _make_closure()
    c = Checked(fn)
    x = T(3)
    c(x)
    set_other(5)  # a cell fn does not read: hit
    assert read_other() == 5
    c(x)
    assert c.frames == 1
    set_k(3.0)  # the cell fn reads: miss, and the new value is used
    c(x)
    assert c.frames == 2
    set_k(2.0)  # back to the first value: the first entry hits
    c(x)
    assert c.frames == 2


G_K = 2
G_OTHER = 0
G_T = None


def _reads_globals(x):
    return x * G_K + G_T


def test_global_constant_miss_and_unrelated_global_hit():
    global G_K, G_OTHER, G_T
    G_K, G_OTHER, G_T = 2, 0, T(3, seed=4)
    c = Checked(_reads_globals)
    x = T(3)
    c(x)
    G_OTHER = 7
    c(x)
    assert c.frames == 1
    G_T = T(3, seed=5)  # a new tensor with the same metadata: hit, and its values are used
    c(x)
    assert c.frames == 1
    G_K = 5
    c(x)
    assert c.frames == 2
    G_T = T(3, seed=5, dtype=mini.float64)
    c(x)
    assert c.frames == 3


# ---- identity match ---------------------------------------------------------------------------

def _double(t):
    return t * 2


def _triple(t):
    return t * 3


class _Neg(mini.nn.Module):
    def forward(self, x):
        return -x


G_FN = _double
G_UNUSED_FN = _double
G_ACT = None


def _calls_global_fn(x):
    return G_FN(x) + 1


def _calls_global_module(x):
    return G_ACT(x) * 2


def test_identity_global_function_miss_and_hit():
    global G_FN, G_UNUSED_FN
    G_FN, G_UNUSED_FN = _double, _double
    c = Checked(_calls_global_fn)
    x = T(3)
    c(x)
    G_UNUSED_FN = _triple
    c(x)
    assert c.frames == 1
    G_FN = _triple
    c(x)
    assert c.frames == 2


def test_identity_global_module_miss_and_hit():
    global G_ACT
    G_ACT = mini.nn.ReLU()
    c = Checked(_calls_global_module)
    x = T(4)
    c(x)
    G_ACT.note = "an attribute forward never reads"
    c(x)
    assert c.frames == 1
    G_ACT = _Neg()
    c(x)
    assert c.frames == 2


def test_identity_closure_function_miss():
    helper = _double

    def fn(x):
        return helper(x)

    c = Checked(fn)
    c(T(3))
    helper = _triple  # noqa: F841  (rebinds the cell fn reads)
    c(T(3))
    assert c.frames == 2


def test_module_attribute_constant_miss():
    class Scale(mini.nn.Module):
        def __init__(self):
            super().__init__()
            self.factor = 2.0

        def forward(self, x):
            return x * self.factor

    m = Scale()
    c = calls(lambda mod, x: mod(x), (m, T(3)), frames=1)
    m.factor = 4.0
    c(m, T(3))
    assert c.frames == 2


def test_identity_guard_on_dead_object_does_not_match_none():
    def fn(x, f):
        if f is None:
            return x + 0
        return f(x)

    c = Checked(fn)
    x = T(3)
    g = lambda t: t * 100  # noqa: E731
    c(x, g)
    del g
    gc.collect()
    c(x, None)  # must recompile; a stale hit returns x * 100


# ---- grad mode --------------------------------------------------------------------------------

def test_grad_mode_miss_and_hit():
    c = Checked(lambda x: x * 2)
    x = T(3, requires_grad=True)
    assert c(x).requires_grad
    with mini.no_grad():
        assert not c(x).requires_grad
        c(x)
    assert c.frames == 2
    c(x)  # grad enabled again: the first entry
    assert c.frames == 2


# ---- how a check reads its sources --------------------------------------------------------------

class _Sub:
    def __init__(self):
        self.a, self.b, self.c = 2, 3, 4


class _Holder:
    reads = 0

    def __init__(self):
        self._sub = _Sub()

    @property
    def sub(self):
        _Holder.reads += 1
        return self._sub


def _reads_through_a_property(x, h):
    return x * h.sub.a + h.sub.b + h.sub.c


def test_a_check_reads_each_source_once_however_many_guards_sit_below_it():
    # guards on L['h'].sub, .sub.a, .sub.b and .sub.c: a cache hit fetches L['h'].sub once
    # (GuardSet::node_value), as Dynamo's guard tree does, not once per guard below it (four
    # property calls a hit before), and a changed value below it still misses
    h, x = _Holder(), mini.ones(3)
    f = mini.compile(_reads_through_a_property, backend="eager")
    f(x, h)
    _Holder.reads = 0
    for _ in range(5):
        f(x, h)
    assert _Holder.reads == 5
    h._sub.c = 40
    assert f(x, h).tolist() == _reads_through_a_property(x, h).tolist() == [45.0, 45.0, 45.0]
