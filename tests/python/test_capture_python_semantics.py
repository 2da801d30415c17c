"""Python semantics the guards must see (issue 31, part B): what a compiled call runs is what
Python would run, on every backend, also after the program changes what Python would find.
Each case compares the compiled call with the same call made eagerly on the same inputs, before
and after the change."""
import pytest

import mini
from mini import nn
from capture_helpers import ALIVE, T, fresh_mini, same  # noqa: F401  (fresh_mini: autouse)

BACKENDS = ["eager", "aot_eager", "inductor"]


# ---- 1. a module whose class overrides __call__ ----------------------------------------------

class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x)

    def __call__(self, x):  # torch's compiled module runs this, not forward
        return self.forward(x) * 2 + 1


class _CallsSuper(_Scaled):
    def __call__(self, x):
        return super().__call__(x) - 5


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cls", [_Scaled, _CallsSuper])
def test_compiled_module_runs_the_classes_own_call(cls, backend):
    m, x = cls(), T(2, 3)
    expected = m(x)
    compiled = mini.compile(m, backend=backend)
    same(compiled(x), expected)
    same(compiled(x), expected)
    if cls is _Scaled:  # the frame captured is the class's __call__, and cache_entries shows its cache
        assert mini.compiler.cache_entries(compiled)[0]["entries"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_compile_in_place_with_its_own_call(backend):
    # Module.compile() compiles what nn.Module.__call__ runs (forward), as torch's does; the
    # class's own __call__ still runs first, and reaches it through super().__call__
    m, x = _CallsSuper(), T(2, 3)
    expected = m(x)
    m.compile(backend=backend)
    same(m(x), expected)


# ---- 2. a helper whose __code__ is replaced (hot reload) -------------------------------------

def _helper(x, k=1):
    return x + k


def _calls_helper(x):
    return _helper(x) * 2


def _patched(x, k=1):
    return x - 3 * k


@pytest.mark.parametrize("backend", BACKENDS)
def test_replacing_an_inlined_functions_code_recompiles(backend):
    saved = _helper.__code__, _helper.__defaults__
    try:
        x = T(3)
        compiled = mini.compile(_calls_helper, backend=backend)
        same(compiled(x), _calls_helper(x))
        _helper.__code__ = _patched.__code__  # what IPython's autoreload does
        same(compiled(x), _calls_helper(x))
        _helper.__defaults__ = (4,)
        same(compiled(x), _calls_helper(x))
    finally:
        _helper.__code__, _helper.__defaults__ = saved


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = nn.Linear(3, 3)

    def forward(self, x):
        return self.sub(x) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_replacing_a_forwards_code_recompiles(backend):
    saved = _Outer.forward.__code__
    try:
        m, x = _Outer(), T(2, 3)
        compiled = mini.compile(m, backend=backend)
        same(compiled(x), m(x))
        _Outer.forward.__code__ = (lambda self, x: self.sub(x) * 3).__code__
        same(compiled(x), m(x))
    finally:
        _Outer.forward.__code__ = saved


# ---- 3. an instance __dict__ entry that shadows a registered submodule -----------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_dict_shadows_a_submodule(backend):
    # Python finds an instance __dict__ entry before nn.Module.__getattr__ reads _modules
    m, x = _Outer(), T(2, 3)
    compiled = mini.compile(m, backend=backend)
    same(compiled(x), m(x))
    m.__dict__["sub"] = nn.ReLU()
    same(compiled(x), m(x))
    m.__dict__["sub"] = lambda t: t * 5
    same(compiled(x), m(x))
    del m.__dict__["sub"]
    same(compiled(x), m(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_dict_shadows_a_parameter_from_the_first_compile(backend):
    m, x = nn.Linear(3, 3), T(2, 3)
    m.__dict__["weight"] = T(3, 3, seed=1) * 10
    same(mini.compile(m, backend=backend)(x), m(x))


# ---- 4. the Python type of a tensor argument -------------------------------------------------

def _by_isinstance(p, x):
    if isinstance(p, nn.Parameter):
        return x + p
    return x - p


def _by_class(p, x):
    p.add_(1)  # in place: still the same object, of its own type
    return x * 2 if p.__class__ is nn.Parameter else x * 3


def _by_type(p, x):
    return x * 2 if type(p) is nn.Parameter else x * 3


def _copy(p):
    return nn.Parameter(p.detach().clone(), requires_grad=False) if isinstance(p, nn.Parameter) else p.clone()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_by_isinstance, _by_class, _by_type])
def test_the_python_type_of_a_parameter_argument(fn, backend):
    x = T(3)
    compiled = mini.compile(fn, backend=backend)
    for p in (nn.Parameter(T(3, seed=1), requires_grad=False), T(3, seed=1),
              nn.Parameter(T(3, seed=2), requires_grad=False)):
        expected = fn(_copy(p), x)
        same(compiled(p, x), expected)


class _Weighted(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(T(3))

    def forward(self, x):
        return x * 2 if isinstance(self.w, nn.Parameter) else x * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_isinstance_sees_a_modules_parameter(backend):
    m, x = _Weighted(), T(3)
    same(mini.compile(m, backend=backend)(x), m(x))


# ---- 5. a Tensor method patched on the class -------------------------------------------------

def _uses_relu(x):
    return x.relu() + 1


def _uses_added(x):
    return x.scaled_by_ten() + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_patching_a_tensor_method_recompiles(backend):
    saved = mini.Tensor.relu
    try:
        x = T(3, lo=-1.0, hi=1.0)
        compiled = mini.compile(_uses_relu, backend=backend)
        same(compiled(x), _uses_relu(x))
        mini.Tensor.relu = lambda self: self * 10  # replaces mini's own method
        same(compiled(x), _uses_relu(x))
        same(mini.compile(_uses_relu, backend=backend)(x), _uses_relu(x))  # a fresh compile too
    finally:
        mini.Tensor.relu = saved
    same(compiled(x), _uses_relu(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_method_added_to_tensor_and_then_replaced(backend):
    x = T(3)
    try:
        mini.Tensor.scaled_by_ten = lambda self: self * 10
        compiled = mini.compile(_uses_added, backend=backend)
        same(compiled(x), _uses_added(x))
        mini.Tensor.scaled_by_ten = lambda self: self - 10
        same(compiled(x), _uses_added(x))
    finally:
        del mini.Tensor.scaled_by_ten


def _uses_operators(x, y):
    return -(x * y) + 2 * x + (x < y) + (1.0 > y) + (y >= 1.5) + x[0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,replacement", [
    ("__mul__", lambda self, other: mini.maximum(self, other)),
    ("__rmul__", lambda self, other: self - other),
    ("__neg__", lambda self: self * 10),
    ("__lt__", lambda self, other: self * 0 + 5),
    ("__ge__", lambda self, other: self * 0 - 7),
    ("__getitem__", lambda self, index: self.sum() * 0 + 3),
])
def test_replacing_a_tensor_operator_recompiles(name, replacement, backend):
    saved = getattr(mini.Tensor, name)
    x, y = T(3), T(3, seed=1)
    compiled = mini.compile(_uses_operators, backend=backend)
    try:
        same(compiled(x, y), _uses_operators(x, y))
        setattr(mini.Tensor, name, replacement)
        same(compiled(x, y), _uses_operators(x, y))
    finally:
        setattr(mini.Tensor, name, saved)
    same(compiled(x, y), _uses_operators(x, y))
