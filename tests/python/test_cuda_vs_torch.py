"""mini on CUDA against torch on CUDA, same inputs, same interpreter: a representative set of
ops (pointwise with broadcasting, reductions, softmax, layer_norm, matmul, where) in float32 and
bfloat16, result dtypes, the error messages, and the gradients of a small MLP.

Runs where torch imports and both torch and mini see a GPU (the H200 of scripts/gpu_cuda.sh,
which runs this file in its own process: torch is imported by the first test, not at
collection, so the other modules of a run never load it); skipped otherwise, saying why.
"""
import numpy as np
import pytest

import mini
from conftest import BFLOAT16, dtype_id, mk, requires_cuda, to_np

pytestmark = requires_cuda


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


DTYPES = ["float32"] + (["bfloat16"] if BFLOAT16 is not None else [])


def both(torch, array, dtype="float32"):
    """The same values as a mini and a torch CUDA tensor of `dtype` (made from float32, so a
    bfloat16 is rounded the same way on both sides)."""
    array = np.asarray(array)
    t = torch.from_numpy(np.ascontiguousarray(array)).cuda()
    m = mk(array, device="cuda")
    if dtype != "float32" and array.dtype == np.float32:
        t, m = t.to(getattr(torch, dtype)), m.to(getattr(mini, dtype))
    return m, t


def assert_same(m, t, rtol, atol):
    assert m.is_cuda, "mini's result is not on the GPU"
    assert dtype_id(m.dtype) == str(t.dtype).split(".")[-1], f"dtype {m.dtype} vs {t.dtype}"
    expected = t.detach().float().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()
    got = to_np(m.float() if m.dtype.is_floating_point else m)
    assert got.shape == expected.shape
    if expected.dtype == np.bool_:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def tolerance(dtype):
    return (2**-7, 1e-3) if dtype == "bfloat16" else (1e-5, 1e-6)


UNARY = ["neg", "abs", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "sqrt", "rsqrt"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY + ["gelu", "gelu_tanh"])
def test_unary(torch, name, dtype):
    rng = np.random.default_rng(0)
    low = 0.1 if name in ("log", "sqrt", "rsqrt") else -4
    m, t = both(torch, rng.uniform(low, 4, size=(1000,)).astype(np.float32), dtype)
    if name.startswith("gelu"):
        approximate = "tanh" if name == "gelu_tanh" else "none"
        out_m = mini.gelu(m, approximate=approximate)
        out_t = torch.nn.functional.gelu(t, approximate=approximate)
    else:
        out_m, out_t = getattr(mini, name)(m), getattr(torch, name)(t)
    assert_same(out_m, out_t, *tolerance(dtype))


BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
          "ge"]


@pytest.mark.parametrize("dtype", DTYPES + ["int64"])
@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcasting(torch, name, dtype):
    rng = np.random.default_rng(1)
    if dtype == "int64":
        a, b = rng.integers(1, 5, size=(64, 1)), rng.integers(1, 4, size=(1, 32))
    else:
        a = np.round(rng.uniform(0.5, 3, size=(64, 1)), 1).astype(np.float32)  # some ties
        b = np.round(rng.uniform(0.5, 3, size=(1, 32)), 1).astype(np.float32)
    (ma, ta), (mb, tb) = both(torch, a, dtype), both(torch, b, dtype)
    assert_same(getattr(mini, name)(ma, mb), getattr(torch, name)(ta, tb), *tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalars_and_cpu_0d_operands(torch, dtype):
    rng = np.random.default_rng(2)
    m, t = both(torch, rng.standard_normal((7, 9)).astype(np.float32), dtype)
    cases = [(lambda x, lib: x * 2.5), (lambda x, lib: 1 - x), (lambda x, lib: x ** 2),
             (lambda x, lib: x + lib.tensor(0.5)),
             (lambda x, lib: x * lib.tensor(3.0, dtype=lib.float64)),
             (lambda x, lib: lib.where(x > 0, x, 0.0))]
    for case in cases:
        assert_same(case(m, mini), case(t, torch), *tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sum", "mean", "amax"])
@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1)], ids=str)
def test_reductions(torch, name, dim, dtype):
    rng = np.random.default_rng(3)
    m, t = both(torch, rng.standard_normal((37, 1029)).astype(np.float32), dtype)
    if dim is None:
        out_m, out_t = getattr(m, name)(), getattr(t, name)()
    else:
        out_m, out_t = getattr(m, name)(dim=dim), getattr(t, name)(dim=dim)
    rtol, atol = tolerance(dtype)
    assert_same(out_m, out_t, rtol, 1e-4 if name == "sum" and dtype == "float32" else atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,dim", [((64, 1000), -1), ((64, 1000), 0), ((8, 5000), -1),
                                       ((4, 6, 10), 1)], ids=str)
def test_softmax_family(torch, name, shape, dim, dtype):
    rng = np.random.default_rng(4)
    m, t = both(torch, (rng.standard_normal(shape) * 3).astype(np.float32), dtype)
    assert_same(getattr(m, name)(dim), getattr(t, name)(dim), *tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [64, 1000, 4096])
def test_layer_norm(torch, cols, dtype):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((16, cols)) * 2 + 1).astype(np.float32)
    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    (mx, tx), (mw, tw), (mb, tb) = (both(torch, v, dtype) for v in (x, w, b))
    rtol, atol = tolerance(dtype)
    assert_same(mini.layer_norm(mx, (cols,), mw, mb),
                torch.nn.functional.layer_norm(tx, (cols,), tw, tb), rtol * 10, atol * 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", [((128, 64), (64, 96)), ((3, 40, 64), (64, 24)),
                                   ((64,), (64, 8)), ((2, 5, 16), (2, 16, 7))], ids=str)
def test_matmul(torch, sa, sb, dtype):
    rng = np.random.default_rng(6)
    (ma, ta), (mb, tb) = (both(torch, rng.standard_normal(s).astype(np.float32), dtype)
                          for s in (sa, sb))
    rtol, atol = (2**-7, 1e-2) if dtype == "bfloat16" else (1e-4, 1e-4)
    assert_same(ma @ mb, ta @ tb, rtol, atol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_of_transposed_operands(torch, dtype):
    rng = np.random.default_rng(8)
    (ma, ta), (mb, tb) = (both(torch, rng.standard_normal(s).astype(np.float32), dtype)
                          for s in ((96, 128), (40, 96)))
    rtol, atol = (2**-7, 1e-2) if dtype == "bfloat16" else (1e-4, 1e-4)
    assert_same(ma.t() @ mb.t(), ta.t() @ tb.t(), rtol, atol)


def test_mixed_devices_message_is_torchs(torch):
    with pytest.raises(RuntimeError) as torch_error:
        torch.ones(3, device="cuda") + torch.ones(3)
    with pytest.raises(RuntimeError) as mini_error:
        mini.ones(3, device="cuda") + mini.ones(3)
    # torch's sentence, then (mini) which op and the fix
    assert str(mini_error.value).startswith(str(torch_error.value).split("\n")[0])


def test_numpy_of_cuda_message_is_torchs(torch):
    with pytest.raises(TypeError) as torch_error:
        torch.ones(3, device="cuda").numpy()
    with pytest.raises(TypeError) as mini_error:
        mini.ones(3, device="cuda").numpy()
    assert str(mini_error.value) == str(torch_error.value)


def test_out_of_memory_error_kinds(torch):
    assert issubclass(torch.cuda.OutOfMemoryError, RuntimeError)
    assert issubclass(mini.OutOfMemoryError, RuntimeError)


def test_mlp_gradients_match_torch(torch):
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((32, 16), (16, 64), (64,),
                                                                  (64, 4))]
    pairs = [both(torch, a) for a in arrays]
    for m, t in pairs:
        m.requires_grad_(True)
        t.requires_grad_(True)

    def loss(lib, x, w1, b1, w2):
        return ((lib.nn.functional.gelu(x @ w1 + b1) @ w2).softmax(-1) ** 2).sum()

    mini_loss = loss(mini, *[m for m, _ in pairs])
    torch_loss = loss(torch, *[t for _, t in pairs])
    mini_loss.backward()
    torch_loss.backward()
    assert mini_loss.item() == pytest.approx(torch_loss.item(), rel=1e-5)
    for m, t in pairs:
        assert_same(m.grad, t.grad, 1e-4, 1e-6)


def test_random_numbers_have_torchs_distribution(torch):
    mini.manual_seed(0)
    x = to_np(mini.randn(2**20, device="cuda"))
    assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.01
    u = to_np(mini.rand(2**20, device="cuda"))
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
