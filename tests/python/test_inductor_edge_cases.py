"""Edge cases of inductor's lowering and of the eager kernels it must agree with (issue 11):
reductions of 0-d tensors and over dims of size 1, zero-size reductions (torch 2.11's values
and errors, eagerly and compiled), layer_norm's precision on rows of small variance, and the
bugs the differential fuzzer (test_inductor_fuzz.py) found, one test each.

Expected values come from mini's eager ops on the same inputs, torch's error messages from
its sources (aten/src/ATen/native/ReduceOpsUtils.h zero_numel_check_dims, ReduceOps.cpp's
amax/amin meta functions, TensorCompare.cpp's max.dim/min.dim), layer_norm's reference from
numpy in float64.
"""
import re

import numpy as np
import pytest

import mini
# fresh_mini (autouse): mini.reset() and no logs around each test
from capture_helpers import fresh_mini  # noqa: F401
from conftest import to_np

pytestmark = [pytest.mark.usefixtures("own_cache_dir")]


def T(*shape, seed=0):
    return mini.from_numpy(np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32))


def check_same(got, expected):
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(got, expected, strict=True):
        assert tuple(g.shape) == tuple(e.shape) and g.dtype == e.dtype, (g, e)
        np.testing.assert_allclose(to_np(g).astype(np.float64), to_np(e).astype(np.float64), rtol=1e-6, atol=1e-6)


def run_inductor(fn, *args):
    """fn compiled by inductor (one graph, no break) and the number of kernels it generated."""
    before = mini.metrics.generated_kernel_count
    out = mini.compile(fn, backend="inductor", fullgraph=True)(*args)
    return out, mini.metrics.generated_kernel_count - before


# ---- reductions of 0-d tensors, and over dims of size 1 ------------------------------------------
# Were C++ that did not compile ('t2' was not declared in this scope): a reduction of a 0-d
# tensor has no reduced dim, and the kernel's loops come from its reduced dims.

REDUCTIONS_OF_0D = {
    "sum_sum": (lambda x: x.sum().sum(), (5,)),
    "sum_mean": (lambda x: x.sum().mean(), (5,)),
    "sum_amax0": (lambda x: x.sum().amax(0), (5,)),
    "mean0_mean": (lambda x: x.mean(0).mean(), (5,)),
    "amin_keepdim": (lambda x: x.amax().amin(-1, keepdim=True) * 2, (3, 4)),
    "0d_input": (lambda x: (x.sum() + 1, x.mean(0), x.amax(), x.amin(-1)), ()),
    "bool_sum_of_0d": (lambda x: (x > 0).sum().sum(), ()),
    "mixed": (lambda x: x.sum(1).sum().exp() + x.mean(), (4, 3)),
    "size1_dims": (lambda x: (x.sum(1), x.mean((0, 1), keepdim=True), x.amax(0), x.amin(-1) + 1), (1, 1)),
    "size1_reduced": (lambda x: (x.sum(1), x.amax(1, keepdim=True) - x), (4, 1)),
    # a composite whose decomposition reduces a 0-d tensor (decompose.cpp's Builder::reduce)
    "mse_loss_of_0d": (lambda x: (mini.nn.functional.mse_loss(x, x * 0.5, reduction="sum"),
                                  mini.nn.functional.mse_loss(x, x * 0.25)), ()),
}


@pytest.mark.parametrize("case", list(REDUCTIONS_OF_0D))
def test_reduction_of_a_0d_tensor_or_size_one_dims_compiles(case):
    fn, shape = REDUCTIONS_OF_0D[case]
    x = T(*shape, seed=1) if shape else mini.tensor(0.75)
    got, kernels = run_inductor(fn, x)
    check_same(got, fn(x))
    assert kernels >= 1


# ---- zero-size reductions: torch 2.11's values and errors, eager and compiled --------------------

def both_ways(fn, *args):
    """[eager result, compiled result]; each a tensor/tuple or the exception raised."""
    out = []
    for f in (fn, mini.compile(fn, backend="inductor")):
        try:
            out.append(f(*args))
        except Exception as e:  # noqa: BLE001
            out.append(e)
    return out


ZERO_SIZE_ERRORS = {
    # torch: zero_numel_check_dims, an IndexError naming the dim as the caller wrote it
    "amax_dim0": (lambda x: x.amax(0), IndexError, "amax(): Expected reduction dim 0 to have non-zero size."),
    "amin_dim0": (lambda x: x.amin(0), IndexError, "amin(): Expected reduction dim 0 to have non-zero size."),
    "amax_neg_dim": (lambda x: (x * 2).amax(-2, keepdim=True), IndexError,
                     "amax(): Expected reduction dim -2 to have non-zero size."),
    "amin_two_dims": (lambda x: x.amin((0, 1)), IndexError, "amin(): Expected reduction dim 0 to have non-zero size."),
    # no dim given on an empty input: a RuntimeError
    "amax_all": (lambda x: x.amax(), RuntimeError,
                 "amax(): Expected reduction dim to be specified for input.numel() == 0. "
                 "Specify the reduction dim with the 'dim' argument."),
    "amin_all": (lambda x: x.sin().amin(), RuntimeError,
                 "amin(): Expected reduction dim to be specified for input.numel() == 0. "
                 "Specify the reduction dim with the 'dim' argument."),
    # max/min along a dim: the dim wrapped (TensorCompare.cpp)
    "max_dim0": (lambda x: x.max(0), IndexError, "max(): Expected reduction dim 0 to have non-zero size."),
    "min_neg_dim": (lambda x: x.min(-2), IndexError, "min(): Expected reduction dim 0 to have non-zero size."),
}


@pytest.mark.parametrize("case", list(ZERO_SIZE_ERRORS))
def test_zero_size_reduction_raises_torchs_error_eagerly_and_compiled(case):
    fn, kind, message = ZERO_SIZE_ERRORS[case]
    x = mini.zeros(0, 3)
    for i, result in enumerate(both_ways(fn, x)):
        assert isinstance(result, kind), f"{['eager', 'compiled'][i]}: {result!r}"
        assert str(result) == message, f"{['eager', 'compiled'][i]}: {result}"


ZERO_SIZE_VALUES = {
    # (fn, expected shape, expected values as a list)
    "amax_dim1": (lambda x: x.amax(1), (0,), []),
    "amin_dim1_keepdim": (lambda x: x.amin(-1, keepdim=True), (0, 1), []),
    "max_dim1": (lambda x: x.max(1).values, (0,), []),
    "min_dim1_indices": (lambda x: x.min(1, keepdim=True).indices, (0, 1), []),
    "sum_dim0": (lambda x: x.sum(0), (3,), [0.0, 0.0, 0.0]),
    "sum_all": (lambda x: x.sum(), (), 0.0),
    "mean_dim0": (lambda x: x.mean(0), (3,), [float("nan")] * 3),
    "mean_all": (lambda x: x.mean(), (), float("nan")),
    "sum_bool": (lambda x: (x > 0).sum(0), (3,), [0, 0, 0]),
    "softmax_of_empty": (lambda x: mini.softmax(x, 0), (0, 3), []),
}


@pytest.mark.parametrize("case", list(ZERO_SIZE_VALUES))
def test_zero_size_reduction_values_eagerly_and_compiled(case):
    fn, shape, values = ZERO_SIZE_VALUES[case]
    x = mini.zeros(0, 3)
    eager, compiled = both_ways(fn, x)
    for result in (eager, compiled):
        assert isinstance(result, mini.Tensor), repr(result)
        assert tuple(result.shape) == shape
        np.testing.assert_array_equal(to_np(result), np.array(values).reshape(shape))
    assert compiled.dtype == eager.dtype


def test_softmax_of_an_empty_tensor_compiles():
    # found by the fuzzer: the decomposed softmax's amax over the empty dim raised
    for shape, dim in (((0,), -1), ((0, 3), 0), ((3, 0), 1), ((2, 0, 4), -1)):
        mini.reset()
        x = mini.zeros(*shape)
        got, _ = run_inductor(lambda t: (mini.softmax(t, dim), mini.log_softmax(t, dim)), x)
        check_same(got, (mini.softmax(x, dim), mini.log_softmax(x, dim)))


# ---- layer_norm on rows of small variance -------------------------------------------------------
# A float32 mean of a row with mean 100 and std 0.01 is off by up to half an ulp of 100
# (4e-6), which is 4e-4 of a standard deviation: eager and compiled were 1.5e-4 and 3e-4
# (relative to the output's largest value) from float64.

@pytest.mark.parametrize("rows,m", [(8, 4096), (4, 16384), (64, 1000)])
def test_layer_norm_of_small_variance_rows_is_close_to_float64(rows, m):
    rng = np.random.default_rng(rows)
    a = (100 + 0.01 * rng.standard_normal((rows, m))).astype(np.float32)
    w = rng.standard_normal(m).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    a64 = a.astype(np.float64)
    mu = a64.mean(-1, keepdims=True)
    ref = (a64 - mu) / np.sqrt(((a64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b

    def fn(x, weight, bias):
        return mini.layer_norm(x, (m,), weight, bias, 1e-5)

    args = (mini.from_numpy(a), mini.from_numpy(w), mini.from_numpy(b))
    for name, out in (("eager", fn(*args)), ("compiled", run_inductor(fn, *args)[0])):
        err = np.abs(to_np(out).astype(np.float64) - ref).max() / np.abs(ref).max()
        assert err < 2e-7, f"{name}: {err:.2e} of the largest output from float64"


def test_a_graph_with_a_size_known_only_at_run_time_is_refused_by_name():
    """mini.compile runs such a graph with eager kernels; compiled directly (a custom backend
    handing it to mini._C._inductor_compile) it is refused with the reason, not a shape error."""
    def f(x):
        return (x > 40).nonzero().transpose(0, 1) * -2  # how many are > 40: known when it runs

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = mini.arange(96).reshape(6, 16)
    mini.compile(f, backend=backend, dynamic=True, fullgraph=True)(x)
    with pytest.raises(RuntimeError, match=r"nonzero has a size known only at run time \(\[u, 2\]"):
        mini._C._inductor_compile(graphs[0])
    mini.reset()
    assert mini.compile(f, dynamic=True)(x).tolist() == f(x).tolist()  # the eager-kernel path


def test_a_compiled_graph_called_directly_refuses_another_layout():
    """Generated code indexes an input by the strides it was compiled for. mini.compile's guards
    never hand it another layout; a direct call (mini._C._inductor_compile's run) with one is
    refused, naming both layouts, instead of reading the wrong elements."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x):
        return x * 2 + 1

    x = mini.randn(8, 6).t()  # strides (1, 6)
    mini.compile(f, backend=backend, fullgraph=True, dynamic=False)(x)
    run = mini._C._inductor_compile(graphs[0])["run"]
    assert mini.allclose(run(x)[0], f(x))
    with pytest.raises(RuntimeError, match=r"strides \(8, 1\), but the graph was compiled for .* strides \(1, 6\)"):
        run(x.contiguous())
