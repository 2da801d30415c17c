"""nn.Modules guarded by structure, not identity (issue 10): as torch 2.11 inlines modules
(UnspecializedNNModuleVariable), a compiled function called with another instance of the same
module class and layout reuses the graph, reading the new instance's parameters as graph
inputs; anything that would change what forward computes misses and recompiles.

torch 2.11: `def f(m, x): return m(x)` called with three `Linear(8, 8)` instances compiles
once (compiles after each call [1, 1, 1]). Each stale-hit case below changes one thing the
graph depends on (the forward function, a parameter's kind, a None parameter, a submodule's
class, `training`, a plain attribute, the layers of a Sequential, tied weights, identity
between two modules) and checks that the compiled result equals eager's.

Expected values come from running the same module eagerly on the same inputs."""
import contextlib
import io
import types
from collections import OrderedDict

import numpy as np
import pytest

import mini
from capture_helpers import ALIVE, Checked, T, calls, fresh_mini, same  # noqa: F401  (fresh_mini: autouse)
from conftest import to_np

nn = mini.nn


def call_module(m, x):
    return m(x)


def linear(seed, in_features=8, out_features=8, bias=True):
    mini.manual_seed(seed)
    return nn.Linear(in_features, out_features, bias=bias)


def traced_graphs(run):
    """How many graphs capture traced while run() ran (the graph_code log), for backends that
    are not a CompileCounter."""
    err = io.StringIO()
    mini.set_logs("graph_code")
    try:
        with contextlib.redirect_stderr(err):
            result = run()
    finally:
        mini.set_logs()
    return result, err.getvalue().count("TRACED GRAPH")


# ---- one graph for every instance -------------------------------------------------------------

def test_three_linears_compile_once():
    c = Checked(call_module)
    x = T(2, 8)
    after = []
    for seed in range(3):
        c(linear(seed), x)  # checked against eager: each instance's own weights are used
        after.append(c.frames)
    assert after == [1, 1, 1]  # torch 2.11: [1, 1, 1]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_three_linears_values_on_every_backend(backend):
    cf = mini.compile(call_module, backend=backend)
    x = T(2, 8)
    for seed in range(3):
        m = linear(seed)
        with mini.no_grad():
            expected = m(x)
        same(cf(m, x).detach(), expected)


def test_parameters_are_graph_inputs_not_constants():
    seen = []

    def backend(gm, example_inputs):
        seen.append([tuple(t.shape) for t in example_inputs])
        return gm.forward

    ALIVE.append(backend)
    cf = mini.compile(call_module, backend=backend)
    x = T(2, 8)
    for seed in range(2):
        m = linear(seed)
        same(cf(m, x), m(x))
    assert seen == [[(2, 8), (8, 8), (8,)]]  # x, weight, bias: one graph, three inputs


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gradients_of_each_instance(backend):
    cf = mini.compile(lambda m, x: (m(x) * m(x)).sum(), backend=backend)
    x = T(4, 8)

    def run():
        for seed in range(3):
            m, twin = linear(seed), linear(seed)
            cf(m, x).backward()
            (twin(x) * twin(x)).sum().backward()
            for name in ("weight", "bias"):
                got, want = getattr(m, name).grad, getattr(twin, name).grad
                assert got is not None, f"instance {seed}: no gradient for {name}"
                np.testing.assert_allclose(to_np(got), to_np(want), rtol=1e-5, atol=1e-6)

    _, graphs = traced_graphs(run)
    assert graphs == 1


def test_parameter_update_in_place_is_seen():
    c = Checked(call_module)
    m, x = linear(0), T(2, 8)
    c(m, x)
    with mini.no_grad():
        m.weight.mul_(2.0)
    c(m, x)
    assert c.frames == 1


def test_parameters_keep_static_shapes_under_automatic_dynamic():
    # torch's force_parameter_static_shapes: each weight shape is its own static graph
    c = Checked(call_module)
    x = T(2, 8)
    after = []
    for out_features in (8, 16, 32):
        c(linear(0, out_features=out_features), x)
        after.append(c.frames)
    assert after == [1, 2, 3]


# ---- where the module comes from ---------------------------------------------------------------

G_MODEL = None


def _calls_global_model(x):
    return G_MODEL(x) * 2


def test_module_from_a_global():
    global G_MODEL
    c = Checked(_calls_global_model)
    x = T(2, 8)
    G_MODEL = linear(0)
    c(x)
    G_MODEL = linear(1)  # same structure: a hit that reads the new weights
    c(x)
    assert c.frames == 1
    G_MODEL = nn.Sequential(linear(2))
    c(x)
    assert c.frames == 2


def test_module_from_a_closure():
    model = linear(0)

    def fn(x):
        return model(x) + 1

    c = Checked(fn)
    x = T(2, 8)
    c(x)
    model = linear(1)  # noqa: F841  (rebinds the cell fn reads)
    c(x)
    assert c.frames == 1
    model = nn.ReLU()  # noqa: F841
    c(x)
    assert c.frames == 2


class _Block(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.act(self.fc(x)))


def test_compiled_module_instances_share_one_graph():
    cnt = mini.CompileCounter()
    x = T(2, 8)
    for seed in range(3):
        mini.manual_seed(seed)
        block = _Block()
        expected = block(x)
        same(mini.compile(block, backend=cnt)(x), expected)
    assert cnt.frame_count == 1


def test_module_compile_in_place_per_layer_is_one_compile():
    cnt = mini.CompileCounter()
    mini.manual_seed(0)
    blocks = [_Block() for _ in range(10)]  # more layers than cache_size_limit (8)
    x = T(2, 8, requires_grad=True)  # as every later block's input (a requires_grad mismatch
                                     # would be a second graph, in torch too)
    expected = x
    for block in blocks:
        expected = block(expected)
    for block in blocks:
        block.compile(backend=cnt)
    got = x
    for block in blocks:
        got = block(got)
    same(got, expected)
    assert cnt.frame_count == 1


# ---- what must miss: the forward function ------------------------------------------------------

def test_instance_with_a_monkeypatched_forward_misses():
    c = Checked(call_module)
    x = T(2, 8)
    c(linear(0), x)
    patched = linear(1)
    patched.forward = types.MethodType(lambda self, x: self.weight.sum() * x, patched)
    c(patched, x)
    assert c.frames == 2
    c(linear(2), x)  # the class's forward again: the first entry
    assert c.frames == 2


def test_instance_forward_set_to_a_plain_function_misses():
    c = Checked(call_module)
    x = T(2, 8)
    c(linear(0), x)
    patched = linear(1)
    patched.forward = lambda x: x * 3
    c(patched, x)
    assert c.frames == 2


def test_class_forward_patched_after_compiling_misses():
    class Scale(nn.Module):
        def forward(self, x):
            return x * 2

    c = Checked(call_module)
    x = T(3)
    c(Scale(), x)
    Scale.forward = lambda self, x: x * 5
    c(Scale(), x)
    assert c.frames == 2


def test_other_method_monkeypatched_misses():
    class Helper(nn.Module):
        def helper(self, x):
            return x + 1

        def forward(self, x):
            return self.helper(x) * 2

    c = Checked(call_module)
    x = T(3)
    c(Helper(), x)
    c(Helper(), x)
    assert c.frames == 1
    patched = Helper()
    patched.helper = types.MethodType(lambda self, x: x - 1, patched)
    c(patched, x)
    assert c.frames == 2


def test_class_overriding_call_is_not_inlined_as_forward():
    class Doubled(nn.Module):
        def forward(self, x):
            return x + 1

        def __call__(self, x):
            return self.forward(x) * 2

    c = Checked(lambda m, x: m(x) - 1)
    c(Doubled(), T(3))  # checked against eager: __call__'s doubling is kept


# ---- what must miss: parameters, submodules, attributes ---------------------------------------

class _Scaled(nn.Module):
    """x * scale, where scale is a Parameter or a plain tensor attribute."""

    def __init__(self, scale, parameter):
        super().__init__()
        self.scale = nn.Parameter(scale) if parameter else scale

    def forward(self, x):
        return x * self.scale


def test_parameter_replaced_by_a_plain_tensor_misses():
    x = T(3)
    c = Checked(call_module)
    c(_Scaled(T(3, seed=1), parameter=True), x)
    c(_Scaled(T(3, seed=2), parameter=False), x)
    c(_Scaled(T(3, seed=3), parameter=False), x)  # a plain tensor attribute is an input too
    assert c.frames == 2
    c(_Scaled(T(3, seed=4), parameter=True), x)
    assert c.frames == 2


def test_plain_tensor_attribute_then_parameter_misses():
    x = T(3)
    c = Checked(call_module)
    c(_Scaled(T(3, seed=1), parameter=False), x)
    c(_Scaled(T(3, seed=2), parameter=True), x)
    assert c.frames == 2


def test_parameter_set_to_none_misses():
    x = T(2, 8)
    c = Checked(call_module)
    c(linear(0, bias=True), x)
    c(linear(1, bias=False), x)
    assert c.frames == 2
    no_bias = linear(2)
    no_bias.bias = None  # _parameters['bias'] = None
    c(no_bias, x)
    assert c.frames == 2  # the bias=False entry


def test_submodule_of_another_class_misses():
    x = T(2, 8)
    c = Checked(call_module)
    mini.manual_seed(0)
    block = _Block()
    c(block, x)
    block.act = nn.ReLU()
    c(block, x)
    assert c.frames == 2
    block.act = nn.GELU()
    c(block, x)
    assert c.frames == 2  # the first entry again


def test_submodule_set_to_none_misses():
    class Optional(nn.Module):
        def __init__(self, with_proj):
            super().__init__()
            self.proj = nn.Linear(3, 3) if with_proj else None

        def forward(self, x):
            if self.proj is None:
                return x * 2
            return self.proj(x)

    calls(call_module, (Optional(True), T(3)), (Optional(False), T(3)), (Optional(True), T(3)),
          frames=2)


class _TrainingScale(nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x * 3


def test_eval_and_train_switch_entries():
    c = Checked(call_module)
    m, x = _TrainingScale(), T(3)
    c(m, x)
    m.eval()
    c(m, x)
    assert c.frames == 2
    m.train()
    c(m, x)
    c(_TrainingScale(), x)
    assert c.frames == 2


def test_eval_of_a_module_that_never_reads_training_is_still_correct():
    c = Checked(call_module)
    m, x = linear(0), T(2, 8)
    c(m, x)
    m.eval()
    c(m, x)
    assert c.frames == 2  # `training` is guarded on every module read (a conservative guard)


class _Attrs(nn.Module):
    def __init__(self, factor=2, offset=0.5, mode="add", clamp=None, flag=True):
        super().__init__()
        self.factor, self.offset, self.mode, self.clamp, self.flag = factor, offset, mode, clamp, flag

    def forward(self, x):
        y = x * self.factor
        y = y + self.offset if self.mode == "add" else y - self.offset
        if self.clamp is not None:
            y = mini.relu(y - self.clamp)
        return y if self.flag else -y


@pytest.mark.parametrize("change", [dict(factor=3), dict(offset=1.5), dict(mode="sub"),
                                    dict(clamp=1.0), dict(flag=False)])
def test_plain_attribute_change_misses(change):
    with mini.config.patch(automatic_dynamic_shapes=False):
        calls(call_module, (_Attrs(), T(3)), (_Attrs(), T(3, seed=1)), (_Attrs(**change), T(3)),
              frames=2)


# ---- what must miss: the layers of a Sequential -----------------------------------------------

class _Neg(nn.Module):
    def forward(self, x):
        return -x


def test_sequential_with_another_layout_misses():
    x = T(2, 4)
    c = Checked(call_module)
    c(nn.Sequential(linear(0, 4, 4), _Neg()), x)
    c(nn.Sequential(linear(1, 4, 4), _Neg()), x)
    assert c.frames == 1
    c(nn.Sequential(linear(2, 4, 4), _Neg(), _Neg()), x)  # a layer more
    c(nn.Sequential(linear(3, 4, 4)), x)  # a layer less
    assert c.frames == 3


def test_sequential_with_its_layers_in_another_order_misses():
    x = T(2, 4)
    c = Checked(call_module)
    c(nn.Sequential(OrderedDict([("a", linear(0, 4, 4)), ("b", _Neg())])), x)
    c(nn.Sequential(OrderedDict([("b", _Neg()), ("a", linear(1, 4, 4))])), x)
    assert c.frames == 2


def test_sequential_indexing():
    def first_and_last(m, x):
        return m[0](x) + m[-1](x)

    x = T(2, 4)
    c = Checked(first_and_last)
    c(nn.Sequential(linear(0, 4, 4), _Neg(), linear(1, 4, 4)), x)
    c(nn.Sequential(linear(2, 4, 4), _Neg(), linear(3, 4, 4)), x)
    assert c.frames == 1
    c(nn.Sequential(linear(4, 4, 4), linear(5, 4, 4)), x)  # m[-1] is another module now
    assert c.frames == 2


def test_sequential_slice_is_correct():
    c = Checked(lambda m, x: m[1:](x) * 2)
    for seed in range(2):
        c(nn.Sequential(linear(seed, 4, 4), _Neg(), linear(seed + 10, 4, 4)), T(2, 4))


def test_iterating_a_module_that_is_not_a_sequential_is_correct():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = linear(0, 4, 4), _Neg()

        def __iter__(self):
            return iter([self.b, self.a])  # not _modules' order

        def forward(self, x):
            for layer in self:
                x = layer(x)
            return x

    Checked(call_module)(Pair(), T(2, 4))


# ---- what must miss: aliasing ------------------------------------------------------------------

class _Tied(nn.Module):
    def __init__(self, tie):
        super().__init__()
        self.enc = nn.Linear(4, 4, bias=False)
        self.dec = nn.Linear(4, 4, bias=False)
        if tie:
            self.dec.weight = self.enc.weight

    def forward(self, x):
        return self.dec(mini.relu(self.enc(x)))


def test_tied_weights_then_untied_misses():
    c = Checked(call_module)
    x = T(2, 4)
    mini.manual_seed(0)
    c(_Tied(tie=True), x)
    mini.manual_seed(1)
    c(_Tied(tie=False), x)
    assert c.frames == 2
    mini.manual_seed(2)
    c(_Tied(tie=True), x)
    assert c.frames == 2


def test_one_block_twice_then_two_blocks_misses():
    c = Checked(call_module)
    x = T(2, 4)
    shared = linear(0, 4, 4)
    c(nn.Sequential(shared, shared), x)
    c(nn.Sequential(linear(1, 4, 4), linear(2, 4, 4)), x)
    assert c.frames == 2


def test_same_tensor_twice_then_two_tensors_misses():
    c = Checked(lambda x, y: x + y * 2)
    a, b = T(3), T(3, seed=1)
    c(a, a)
    c(a, b)
    assert c.frames == 2


def test_identity_of_two_modules_is_guarded():
    def fn(m, n, x):
        if m is n:
            return m(x)
        return m(x) + n(x)

    c = Checked(fn)
    x = T(2, 8)
    a = linear(0)
    c(a, a, x)
    c(a, linear(1), x)
    assert c.frames == 2


# ---- the module as `self`: mini.compile(module) and Module.compile() --------------------------

def test_compiled_module_follows_changes_to_self():
    mini.manual_seed(0)
    block, x = _Block(), T(2, 8)
    cnt = mini.CompileCounter()
    compiled = mini.compile(block, backend=cnt)
    with mini.config.patch(automatic_dynamic_shapes=False):
        same(compiled(x), block(x))
        block.act = nn.ReLU()  # a submodule of another class
        same(compiled(x), block(x))
        block.norm.eps = 1e-3  # a plain attribute of a submodule
        same(compiled(x), block(x))
        block.eval()
        same(compiled(x), block(x))
    assert cnt.frame_count == 4


def test_layer_norm_eps_that_changes_between_calls():
    # automatic dynamic makes a float that changed a graph input; layer_norm's kernel needs
    # eps while tracing, so that call breaks the graph instead of using a stale eps
    c = Checked(call_module)
    x = T(2, 8)
    for eps in (1e-5, 1e-3, 1e-1, 1e-1):
        norm = nn.LayerNorm(8, eps=eps)
        c(norm, x)


def test_module_ints_stay_static(capsys):
    # torch (allow_unspec_int_on_nn_module=False): a module's int is its structure, so each
    # value is a static graph, never an automatic-dynamic input
    class Softmax(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim

        def forward(self, x):
            return mini.softmax(x * 2, self.dim)

    c = Checked(call_module)
    x = T(3, 4)
    mini.set_logs("graph_breaks")
    for dim in (0, 1, -1, 0):
        c(Softmax(dim), x)
    assert c.frames == 3
    assert "Graph break" not in capsys.readouterr().err


@pytest.mark.parametrize("how", ["mini.compile", "Module.compile"])
def test_forward_patched_after_compiling_the_module_runs(how):
    m, x = linear(0), T(2, 8)
    cnt = mini.CompileCounter()
    if how == "mini.compile":
        compiled = mini.compile(m, backend=cnt)
    else:
        m.compile(backend=cnt)
        compiled = m
    same(compiled(x), m.forward(x))
    m.forward = types.MethodType(lambda self, x: x * 7 + self.bias, m)
    same(compiled(x), x * 7 + m.bias)
    assert cnt.frame_count == 2
