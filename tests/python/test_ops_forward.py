"""Forward values of mini's compute ops against numpy: pointwise ops with broadcasting and type
promotion, reductions, matmul, softmax / log_softmax, gelu, layer_norm, mse_loss, nonzero,
where and the in-place ops. (Views, factories and conversions: test_views.py,
test_tensor_basics.py.) Every test runs on each device of conftest's `device` fixture: mk()
builds its inputs there (the cuda runs skip, saying why, without a GPU)."""
import math
import operator

import numpy as np
import pytest

import mini
from conftest import (FLOAT_DTYPES, NUMERIC_DTYPES, assert_close, dtype_id, mk, np_dtype,
                      np_gelu, np_layer_norm, np_log_softmax, np_sigmoid, np_softmax, to_np)

pytestmark = pytest.mark.usefixtures("device")

# ---------------------------------------------------------------------------------------------
# unary pointwise

# name -> (numpy reference, domain of the random inputs)
UNARY = {
    "neg": (np.negative, (-3, 3)),
    "abs": (np.abs, (-3, 3)),
    "exp": (np.exp, (-3, 3)),
    "log": (np.log, (0.1, 5)),
    "sin": (np.sin, (-3, 3)),
    "cos": (np.cos, (-3, 3)),
    "tanh": (np.tanh, (-3, 3)),
    "sigmoid": (np_sigmoid, (-6, 6)),
    "relu": (lambda x: np.maximum(x, 0), (-3, 3)),
    "sqrt": (np.sqrt, (0.1, 5)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.1, 5)),
    "gelu": (np_gelu, (-4, 4)),
}


UNARY_FORMS = [(n, f) for n in sorted(UNARY) for f in ("function", "method")
               if not (n == "gelu" and f == "method")]  # torch has no Tensor.gelu


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name,form", UNARY_FORMS)
@pytest.mark.parametrize("shape", [(), (7,), (3, 4)], ids=str)
def test_unary(name, form, dtype, shape, rng):
    ref, (lo, hi) = UNARY[name]
    a = rng.uniform(lo, hi, size=shape).astype(np_dtype(dtype))
    t = mk(a)
    out = getattr(mini, name)(t) if form == "function" else getattr(t, name)()
    assert_close(out, ref(a.astype(np.float64)), dtype=dtype)


def test_unary_operators(rng):
    a = rng.uniform(-3, 3, size=(5,)).astype(np.float32)
    assert_close(-mk(a), -a, dtype=mini.float32)
    assert_close(abs(mk(a)), np.abs(a), dtype=mini.float32)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_approximate(approximate, rng):
    a = rng.uniform(-5, 5, size=(4, 6))
    assert_close(mini.gelu(mk(a), approximate=approximate), np_gelu(a, approximate))


def test_gelu_tanh_differs_from_erf():
    x = mk(np.array([1.5]))
    erf = mini.gelu(x).item()
    tanh = mini.gelu(x, approximate="tanh").item()
    assert erf == pytest.approx(np_gelu(1.5), rel=1e-12)
    assert tanh == pytest.approx(np_gelu(1.5, "tanh"), rel=1e-12)
    assert erf != tanh


@pytest.mark.parametrize("name", ["neg", "abs", "relu"])
def test_int_unary_keeps_int64(name):
    a = np.array([-3, 0, 2, 7], dtype=np.int64)
    assert_close(getattr(mini, name)(mk(a)), UNARY[name][0](a), dtype=mini.int64)


@pytest.mark.parametrize("name", ["exp", "sin", "sqrt", "sigmoid", "tanh"])
def test_int_unary_float_ops_promote_to_float32(name):
    a = np.array([1, 2, 3], dtype=np.int64)
    assert_close(getattr(mini, name)(mk(a)), UNARY[name][0](a.astype(np.float64)),
                 dtype=mini.float32)


# ---------------------------------------------------------------------------------------------
# binary pointwise with broadcasting

BINARY = {  # name -> (operator form, numpy reference)
    "add": (operator.add, np.add),
    "sub": (operator.sub, np.subtract),
    "mul": (operator.mul, np.multiply),
    "div": (operator.truediv, np.true_divide),
    "pow": (operator.pow, np.power),
    "maximum": (None, np.maximum),
    "minimum": (None, np.minimum),
    "eq": (operator.eq, np.equal),
    "ne": (operator.ne, np.not_equal),
    "lt": (operator.lt, np.less),
    "le": (operator.le, np.less_equal),
    "gt": (operator.gt, np.greater),
    "ge": (operator.ge, np.greater_equal),
}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
BROADCAST_SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((5,), (2, 5)), ((), (3,)),
                    ((2, 3), ()), ((), ()), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1))]


def _operands(name, dtype, sa, sb, rng):
    if dtype == mini.int64:
        a = rng.integers(-4, 5, size=sa)
        b = rng.integers(-4, 5, size=sb)
        if name == "div":
            b = np.where(b == 0, 3, b)
        if name == "pow":
            a, b = rng.integers(1, 4, size=sa), rng.integers(0, 4, size=sb)
    else:
        a = rng.uniform(-2, 2, size=sa)
        b = rng.uniform(-2, 2, size=sb)
        if name in ("div", "pow"):
            b = np.where(np.abs(b) < 0.2, 0.7, b)
        if name == "pow":
            a = rng.uniform(0.2, 2, size=sa)
        if name in COMPARISONS:  # create exact ties so eq/le/ge see equal elements
            a = np.round(a)
            b = np.round(b)
    return (np.asarray(a).astype(np_dtype(dtype)), np.asarray(b).astype(np_dtype(dtype)))


def _expected_dtype(name, dtype):
    if name in COMPARISONS:
        return mini.bool
    if name == "div" and dtype == mini.int64:
        return mini.float32
    return dtype


BINARY_FORMS = [(n, f) for n in sorted(BINARY) for f in ("function", "method", "operator")
                if not (f == "operator" and BINARY[n][0] is None)]


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name,form", BINARY_FORMS)
@pytest.mark.parametrize("sa,sb", BROADCAST_SHAPES, ids=str)
def test_binary(name, form, dtype, sa, sb, rng):
    op, ref = BINARY[name]
    a, b = _operands(name, dtype, sa, sb, rng)
    ta, tb = mk(a), mk(b)
    if form == "function":
        out = getattr(mini, name)(ta, tb)
    elif form == "method":
        out = getattr(ta, name)(tb)
    else:
        out = op(ta, tb)
    expected = ref(a.astype(np.float64), b.astype(np.float64))
    out_dtype = _expected_dtype(name, dtype)
    rtol, atol = (1e-5, 1e-5) if out_dtype == mini.float32 else (None, None)
    assert_close(out, expected, rtol=rtol, atol=atol, dtype=out_dtype)


SCALAR_CASES = [  # (lambda on the tensor, numpy reference on the array)
    (lambda t: t + 2, lambda a: a + 2), (lambda t: 2 + t, lambda a: 2 + a),
    (lambda t: t - 2, lambda a: a - 2), (lambda t: 2 - t, lambda a: 2 - a),
    (lambda t: t * 3, lambda a: a * 3), (lambda t: 3 * t, lambda a: 3 * a),
    (lambda t: t / 4, lambda a: a / 4), (lambda t: 4 / t, lambda a: 4 / a),
    (lambda t: t ** 2, lambda a: a ** 2), (lambda t: 2 ** t, lambda a: 2.0 ** a),
    (lambda t: t ** 0.5, lambda a: a ** 0.5), (lambda t: t + 0.25, lambda a: a + 0.25),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", range(len(SCALAR_CASES)))
def test_python_scalar_operands(case, dtype, rng):
    fn, ref = SCALAR_CASES[case]
    a = rng.uniform(0.5, 2, size=(3, 4)).astype(np_dtype(dtype))
    assert_close(fn(mk(a)), ref(a.astype(np.float64)), dtype=dtype)


@pytest.mark.parametrize("fn,ref", [
    (lambda t: t < 2, lambda a: a < 2), (lambda t: 2 < t, lambda a: 2 < a),
    (lambda t: t >= 2.5, lambda a: a >= 2.5), (lambda t: t == 3, lambda a: a == 3),
    (lambda t: t != 3, lambda a: a != 3), (lambda t: 1 > t, lambda a: 1 > a),
])
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_scalar_comparisons_give_bool(fn, ref, dtype):
    a = np.array([0, 1, 2, 3, 4], dtype=np_dtype(dtype))
    assert_close(fn(mk(a)), ref(a), dtype=mini.bool)


# (lhs, rhs, expected dtype, numpy reference computed in float64/int64)
PROMOTION = [
    ("int64[3] + float32[3]", lambda: mk(np.array([1, 2, 3])) + mk(np.float32([0.5, 1, 2])),
     mini.float32, [1.5, 3, 5]),
    ("int64[3] * 2.5", lambda: mk(np.array([1, 2, 3])) * 2.5, mini.float32, [2.5, 5, 7.5]),
    ("int64[3] * 2", lambda: mk(np.array([1, 2, 3])) * 2, mini.int64, [2, 4, 6]),
    ("float32[3] + float64 0-d",
     lambda: mk(np.float32([1, 2, 3])) + mini.tensor(0.5, dtype=mini.float64),
     mini.float32, [1.5, 2.5, 3.5]),
    ("float32[3] + float64[3]", lambda: mk(np.float32([1, 2, 3])) + mk(np.float64([1, 1, 1])),
     mini.float64, [2, 3, 4]),
    ("float32 0-d + float64 0-d",
     lambda: mini.tensor(1.0) + mini.tensor(2.0, dtype=mini.float64), mini.float64, 3.0),
    ("int64[3] + float64 0-d",
     lambda: mk(np.array([1, 2, 3])) + mini.tensor(0.5, dtype=mini.float64),
     mini.float64, [1.5, 2.5, 3.5]),
    ("int64[3] + float32 0-d", lambda: mk(np.array([1, 2, 3])) + mini.tensor(0.5),
     mini.float32, [1.5, 2.5, 3.5]),
    ("int64[3] / int64[3]", lambda: mk(np.array([1, 3, 7])) / mk(np.array([2, 2, 2])),
     mini.float32, [0.5, 1.5, 3.5]),
    ("int64[3] / 2", lambda: mk(np.array([1, 3, 7])) / 2, mini.float32, [0.5, 1.5, 3.5]),
    ("bool[3] + 1", lambda: mk(np.array([True, False, True])) + 1, mini.int64, [2, 1, 2]),
    ("bool[3] * 2.5", lambda: mk(np.array([True, False, True])) * 2.5, mini.float32,
     [2.5, 0, 2.5]),
    ("bool[3] + int64[3]", lambda: mk(np.array([True, False, True])) + mk(np.array([5, 5, 5])),
     mini.int64, [6, 5, 6]),
    ("float64[3] * 2.5", lambda: mk(np.float64([1, 2, 3])) * 2.5, mini.float64, [2.5, 5, 7.5]),
    ("float32[3] * 2", lambda: mk(np.float32([1, 2, 3])) * 2, mini.float32, [2, 4, 6]),
    ("int64[3] < 2.5", lambda: mk(np.array([1, 2, 3])) < 2.5, mini.bool, [True, True, False]),
    ("float32[3] == float64[3]",
     lambda: mk(np.float32([1, 2, 3])) == mk(np.float64([1, 0, 3])), mini.bool,
     [True, False, True]),
    ("int64[3] ** 2", lambda: mk(np.array([1, 2, 3])) ** 2, mini.int64, [1, 4, 9]),
    ("int64[3] ** 0.5", lambda: mk(np.array([1, 4, 9])) ** 0.5, mini.float32, [1, 2, 3]),
]


@pytest.mark.parametrize("case", PROMOTION, ids=[c[0] for c in PROMOTION])
def test_type_promotion(case):
    _, fn, dtype, expected = case
    assert_close(fn(), np.array(expected), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# reductions

DIMS = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "amax"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_reduction(name, dim, keepdim, layout, rng):
    a = rng.standard_normal((2, 3, 4))
    t = mk(a)
    if layout == "transposed":  # same logical values, non-contiguous strides
        t = mk(np.ascontiguousarray(a.transpose(2, 1, 0))).permute(2, 1, 0)
        assert not t.is_contiguous()
    ref = {"sum": np.sum, "mean": np.mean, "amax": np.max}[name]
    expected = ref(a, axis=dim, keepdims=keepdim)
    if dim is None and not keepdim:
        out = getattr(t, name)()
    elif dim is None and name == "amax":  # torch's amax has no dim=None; name every dim
        out = t.amax(dim=(0, 1, 2), keepdim=True)
    else:
        out = getattr(t, name)(dim=dim, keepdim=keepdim)
    assert_close(out, expected, dtype=mini.float64)


@pytest.mark.parametrize("name", ["sum", "mean", "amax"])
def test_reduction_function_form(name, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    ref = {"sum": np.sum, "mean": np.mean, "amax": np.max}[name]
    assert_close(getattr(mini, name)(mk(a), 1), ref(a.astype(np.float64), axis=1),
                 dtype=mini.float32)
    assert_close(getattr(mini, name)(mk(a)), ref(a.astype(np.float64)), dtype=mini.float32)


def test_sum_integer_and_bool_dtypes():
    assert_close(mk(np.array([[1, 2], [3, 4]])).sum(0), [4, 6], dtype=mini.int64)
    assert_close(mk(np.array([True, False, True])).sum(), 2, dtype=mini.int64)
    assert_close(mk(np.array([[5, -2], [3, 9]])).amax(1), [5, 9], dtype=mini.int64)


def test_sum_large_float32_accuracy():
    a = np.full(10 ** 6, 0.1, dtype=np.float32)
    assert mk(a).sum().item() == pytest.approx(float(a.astype(np.float64).sum()), rel=1e-4)


@pytest.mark.parametrize("name,ref,argref", [("max", np.max, np.argmax),
                                             ("min", np.min, np.argmin)])
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_max_min_with_dim(name, ref, argref, dim, keepdim, dtype, rng):
    a = rng.permutation(24).reshape(2, 3, 4).astype(np_dtype(dtype))  # no ties
    res = getattr(mk(a), name)(dim, keepdim=keepdim) if keepdim else getattr(mk(a), name)(dim)
    values, indices = res
    assert_close(res.values, ref(a, axis=dim, keepdims=keepdim), dtype=dtype)
    assert_close(values, ref(a, axis=dim, keepdims=keepdim), dtype=dtype)
    idx = argref(a, axis=dim)
    if keepdim:
        idx = np.expand_dims(idx, dim)
    assert_close(res.indices, idx, dtype=mini.int64)
    assert_close(indices, idx, dtype=mini.int64)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_max_min_full_reduction_is_0d(dtype, rng):
    a = rng.permutation(12).reshape(3, 4).astype(np_dtype(dtype)) - 5
    assert_close(mk(a).max(), np.array(a.max()), dtype=dtype)
    assert_close(mk(a).min(), np.array(a.min()), dtype=dtype)
    assert mk(a).max().dim() == 0


# ---------------------------------------------------------------------------------------------
# matmul

MATMUL_SHAPES = [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)),
                 ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((4,), (2, 4, 5)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (6, 4, 2)), ((2, 3, 4), (4,))]


# the error names the dtype: torch's "not implemented for 'Long'", mini's "... not int64"
INT64_MATMUL_ON_CUDA = r"'Long'|int64"


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("form", ["function", "method", "operator"])
def test_matmul(sa, sb, dtype, form, rng, device):
    a = rng.integers(-3, 4, size=sa).astype(np_dtype(dtype))
    b = rng.integers(-3, 4, size=sb).astype(np_dtype(dtype))
    if dtype != mini.int64:
        a = a + rng.uniform(-0.5, 0.5, size=sa)
        b = b + rng.uniform(-0.5, 0.5, size=sb)
        a, b = a.astype(np_dtype(dtype)), b.astype(np_dtype(dtype))
    ta, tb = mk(a), mk(b)
    run = {"function": lambda: mini.matmul(ta, tb), "method": lambda: ta.matmul(tb),
           "operator": lambda: ta @ tb}[form]
    if device == "cuda" and dtype == mini.int64:  # cuBLAS has no int64 GEMM: torch refuses too
        with pytest.raises(RuntimeError, match=INT64_MATMUL_ON_CUDA):
            run()
        return
    out = run()
    assert_close(out, np.matmul(a.astype(np.float64), b.astype(np.float64)),
                 rtol=1e-5, atol=1e-5, dtype=dtype)


def test_matmul_non_contiguous_operands(rng):
    a = rng.standard_normal((4, 3))
    b = rng.standard_normal((5, 4))
    out = mk(a).t() @ mk(b).t()  # (3,4) @ (4,5), both transposed views
    assert_close(out, a.T @ b.T)


def test_matmul_larger_float32(rng):
    a = rng.standard_normal((64, 130)).astype(np.float32)
    b = rng.standard_normal((130, 33)).astype(np.float32)
    assert_close(mk(a) @ mk(b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_mm(dtype, rng, device):
    a = rng.integers(-3, 4, size=(3, 4)).astype(np_dtype(dtype))
    b = rng.integers(-3, 4, size=(4, 2)).astype(np_dtype(dtype))
    if device == "cuda" and dtype == mini.int64:
        with pytest.raises(RuntimeError, match=INT64_MATMUL_ON_CUDA):
            mini.mm(mk(a), mk(b))
        return
    assert_close(mini.mm(mk(a), mk(b)), a @ b, dtype=dtype)
    assert_close(mk(a).mm(mk(b)), a @ b, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# softmax, log_softmax, layer_norm, mse_loss


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("name,ref", [("softmax", np_softmax), ("log_softmax", np_log_softmax)])
def test_softmax_family(name, ref, dim, dtype, rng):
    a = rng.standard_normal((3, 4, 5)).astype(np_dtype(dtype)) * 3
    out = getattr(mk(a), name)(dim)
    assert_close(out, ref(a.astype(np.float64), dim), dtype=dtype)
    assert_close(getattr(mk(a), name)(dim=dim), ref(a.astype(np.float64), dim))


@pytest.mark.parametrize("name,ref", [("softmax", np_softmax), ("log_softmax", np_log_softmax)])
def test_softmax_is_numerically_stable(name, ref):
    a = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]], dtype=np.float32)
    out = to_np(getattr(mk(a), name)(1))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, ref(a.astype(np.float64), 1), rtol=1e-5, atol=1e-5)


def test_softmax_rows_sum_to_one(rng):
    out = mk(rng.standard_normal((6, 9)).astype(np.float32)).softmax(-1)
    np.testing.assert_allclose(to_np(out).sum(-1), np.ones(6), rtol=1e-5)


@pytest.mark.parametrize("normalized_shape", [(5,), (4, 5)], ids=str)
@pytest.mark.parametrize("affine", ["none", "weight", "weight+bias"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_layer_norm(normalized_shape, affine, dtype, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np_dtype(dtype)) * 2 + 1
    w = rng.standard_normal(normalized_shape).astype(np_dtype(dtype)) if affine != "none" else None
    b = rng.standard_normal(normalized_shape).astype(np_dtype(dtype)) \
        if affine == "weight+bias" else None
    out = mini.layer_norm(mk(x), normalized_shape, None if w is None else mk(w),
                          None if b is None else mk(b))
    f64 = (lambda v: None if v is None else v.astype(np.float64))
    assert_close(out, np_layer_norm(f64(x), normalized_shape, f64(w), f64(b)),
                 rtol=1e-4 if dtype == mini.float32 else 1e-9, atol=1e-5 if dtype == mini.float32
                 else 1e-10, dtype=dtype)


def test_layer_norm_eps(rng):
    x = rng.standard_normal((2, 3)) * 0.01  # tiny variance, so eps matters
    out = mini.layer_norm(mk(x), (3,), eps=1e-2)
    assert_close(out, np_layer_norm(x, (3,), eps=1e-2))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_mse_loss(reduction, dtype, rng):
    a = rng.standard_normal((4, 3)).astype(np_dtype(dtype))
    b = rng.standard_normal((4, 3)).astype(np_dtype(dtype))
    sq = (a.astype(np.float64) - b) ** 2
    expected = {"mean": sq.mean(), "sum": sq.sum(), "none": sq}[reduction]
    assert_close(mini.mse_loss(mk(a), mk(b), reduction=reduction), expected, dtype=dtype)


def test_mse_loss_default_is_mean(rng):
    a, b = rng.standard_normal(5), rng.standard_normal(5)
    assert_close(mini.mse_loss(mk(a), mk(b)), ((a - b) ** 2).mean())


# ---------------------------------------------------------------------------------------------
# nonzero, where


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("dtype", [mini.float32, mini.int64, mini.bool], ids=dtype_id)
def test_nonzero(shape, dtype, rng):
    a = (rng.integers(0, 3, size=shape) * rng.integers(0, 2, size=shape)).astype(np_dtype(dtype))
    out = mk(a).nonzero()
    assert out.dtype == mini.int64
    assert tuple(out.shape) == (int(np.count_nonzero(a)), len(shape))
    assert_close(out, np.argwhere(a), dtype=mini.int64)


def test_nonzero_none_found():
    out = mini.zeros(3, 4).nonzero()
    assert tuple(out.shape) == (0, 2)
    assert out.dtype == mini.int64


@pytest.mark.parametrize("sc,sa,sb", [((3, 4), (3, 4), (3, 4)), ((3, 4), (3, 1), (1, 4)),
                                      ((4,), (3, 4), ()), ((3, 1), (4,), (3, 4))], ids=str)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_where(sc, sa, sb, dtype, rng):
    c = rng.integers(0, 2, size=sc).astype(bool)
    a = rng.integers(-9, 9, size=sa).astype(np_dtype(dtype))
    b = rng.integers(-9, 9, size=sb).astype(np_dtype(dtype))
    assert_close(mini.where(mk(c), mk(a), mk(b)), np.where(c, a, b), dtype=dtype)


def test_where_from_comparison_and_scalar(rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    t = mk(a)
    assert_close(mini.where(t > 0, t, -t), np.abs(a), dtype=mini.float32)
    assert_close(mini.where(t > 0, t, 0.0), np.maximum(a, 0), dtype=mini.float32)


# ---------------------------------------------------------------------------------------------
# in-place ops

INPLACE = [  # (description, mutate(t) -> result, numpy reference on the array)
    ("add_ tensor", lambda t: t.add_(mk(np.float32([1, 2, 3, 4]))), lambda a: a + [1, 2, 3, 4]),
    ("add_ broadcast col", lambda t: t.add_(mk(np.float32([[10], [20], [30]]))),
     lambda a: a + [[10], [20], [30]]),
    ("add_ scalar", lambda t: t.add_(2.5), lambda a: a + 2.5),
    ("sub_ tensor", lambda t: t.sub_(mk(np.float32([1, 2, 3, 4]))), lambda a: a - [1, 2, 3, 4]),
    ("sub_ scalar", lambda t: t.sub_(1), lambda a: a - 1),
    ("mul_ tensor", lambda t: t.mul_(mk(np.float32([1, 2, 3, 4]))), lambda a: a * [1, 2, 3, 4]),
    ("mul_ scalar", lambda t: t.mul_(-2), lambda a: a * -2),
    ("div_ tensor", lambda t: t.div_(mk(np.float32([1, 2, 4, 8]))), lambda a: a / [1, 2, 4, 8]),
    ("div_ scalar", lambda t: t.div_(4), lambda a: a / 4),
    ("zero_", lambda t: t.zero_(), lambda a: np.zeros_like(a)),
    ("fill_", lambda t: t.fill_(7.5), lambda a: np.full_like(a, 7.5)),
    ("copy_ same shape", lambda t: t.copy_(mk(np.arange(12.0).reshape(3, 4))),
     lambda a: np.arange(12.0).reshape(3, 4)),
    ("copy_ broadcast + cast", lambda t: t.copy_(mk(np.array([1, 2, 3, 4]))),
     lambda a: np.broadcast_to([1.0, 2, 3, 4], a.shape)),
    ("iadd operator", lambda t: t.__iadd__(1), lambda a: a + 1),
    ("imul operator", lambda t: t.__imul__(3), lambda a: a * 3),
    ("relu_", lambda t: t.relu_(), lambda a: np.maximum(a, 0)),
    ("clamp_ min max", lambda t: t.clamp_(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5)),
    ("clamp_ min only", lambda t: t.clamp_(min=0.1), lambda a: np.maximum(a, 0.1)),
    ("clamp_ tensor max", lambda t: t.clamp_(max=mk(np.float32([0, 0.5, 1, 2]))),
     lambda a: np.minimum(a, [0, 0.5, 1, 2])),
    ("masked_fill_", lambda t: t.masked_fill_(mk(np.array([True, False, True, False])), 9),
     lambda a: np.where([True, False, True, False], 9, a)),
    ("masked_fill_ 0-d value", lambda t: t.masked_fill_(t > 0, mk(np.float32(-3))),
     lambda a: np.where(a > 0, -3, a)),
]


@pytest.mark.parametrize("case", INPLACE, ids=[c[0] for c in INPLACE])
def test_inplace(case, rng):
    _, fn, ref = case
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = mk(a)
    out = fn(t)
    expected = ref(a.astype(np.float64))
    assert_close(t, expected, rtol=1e-6, atol=1e-6, dtype=mini.float32)  # t itself changed
    assert_close(out, expected, rtol=1e-6, atol=1e-6, dtype=mini.float32)  # and is returned
    out.fill_(-1.0)  # the result is t itself (or aliases it)
    assert_close(t, np.full((3, 4), -1.0))


def test_inplace_through_view_changes_base():
    base = mk(np.zeros((3, 4), dtype=np.float32))
    base[1].add_(5)
    base[:, 2].fill_(1)
    expected = np.zeros((3, 4))
    expected[1] += 5
    expected[:, 2] = 1
    assert_close(base, expected)


def test_inplace_on_non_contiguous_view(rng):
    a = rng.standard_normal((3, 4))
    base = mk(a)
    base.t().mul_(mk(np.array([1.0, 2.0, 3.0])))  # scales the columns of base.t() = rows of base
    assert_close(base, a * np.array([[1.0], [2.0], [3.0]]))


def test_clamp_and_masked_fill_out_of_place(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = mk(a)
    assert_close(t.clamp(-0.5, 0.5), np.clip(a, -0.5, 0.5), dtype=mini.float32)
    assert_close(mini.clamp(t, max=0.0), np.minimum(a, 0), dtype=mini.float32)
    assert_close(t.clamp(1.0, -1.0), np.full((3, 4), -1.0))  # min > max gives max, as torch
    assert np.isnan(mk(np.float32([np.nan])).clamp(0, 1).item())  # NaN stays NaN, as torch
    assert_close(mini.masked_fill(t, t < 0, 0.0), np.maximum(a, 0), dtype=mini.float32)
    assert_close(t, a)  # out of place
    i = mk(np.array([1, 5, 9]))
    assert_close(i.clamp(2, 6), [2, 5, 6], dtype=mini.int64)
    assert_close(i.masked_fill(i > 4, 1.5), [1, 1, 1], dtype=mini.int64)  # value cast to int64


def test_inplace_errors():
    with pytest.raises(RuntimeError, match="can't be cast"):
        mk(np.array([1, 2])).clamp_(min=0.5)
    with pytest.raises(RuntimeError, match="boolean masks"):
        mk(np.float32([1, 2])).masked_fill_(mk(np.array([1, 0])), 0)
    with pytest.raises(RuntimeError, match="0-dimensional value"):
        mk(np.float32([1, 2])).masked_fill_(mk(np.array([True, False])), mk(np.float32([1, 2])))
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max'"):
        mk(np.float32([1, 2])).clamp_()
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        mk(np.float32([1, 2])).masked_fill_(mk(np.array([[True], [False]])), 0)


def test_version_counts_inplace_writes():
    t = mk(np.float32([1, 2, 3]))
    v = t._version
    t.add_(1)
    t[0].relu_()
    t.clamp_(max=2)
    assert t._version == v + 3
    t + 1
    assert t._version == v + 3


def test_int_inplace_ops():
    t = mk(np.array([1, 2, 3]))
    t.add_(2)
    t.mul_(mk(np.array([1, 0, 2])))
    assert_close(t, [3, 0, 10], dtype=mini.int64)


def test_exp_log_roundtrip_float64(rng):
    a = rng.uniform(0.1, 10, size=100)
    assert_close(mini.log(mini.exp(mk(a))), a, rtol=1e-12, atol=1e-12)
    assert math.isclose(mini.exp(mk(np.array(1.0))).item(), math.e, rel_tol=1e-15)
