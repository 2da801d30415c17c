"""mini on CUDA, against torch's API and numpy: devices and copies, errors (mixed devices,
numpy() of a CUDA tensor, out of memory, no GPU), one kernel per op in mini.metrics, events,
the caching allocator's statistics, random numbers under manual_seed, autograd, nn and optim
on CUDA, bfloat16, and float32 matmul without TF32.

Tests marked `cuda` need a GPU and are skipped without one, saying why (conftest's
CUDA_SKIP_REASON); the tests of the last section run only where there is none and check what a
user without a GPU is told. The op catalog itself runs on CUDA through conftest's `device`
fixture (test_ops_forward.py and friends); scripts/gpu_cuda.sh runs all of it on the H200.
"""
import re

import numpy as np
import pytest

import mini
from conftest import (BFLOAT16, CUDA_SKIP_REASON, DTYPES, HAS_CUDA, assert_close, bf16_round,
                      dtype_id, mk, np_dtype, np_softmax, requires_cuda, to_np)

cuda = getattr(mini, "cuda", None)  # the module lands with issue 12's Python surface

ALL_DTYPES = DTYPES + ([BFLOAT16] if BFLOAT16 is not None else [])
MIXED_DEVICES = ("Expected all tensors to be on the same device, but found at least two "
                 "devices, cuda:0 and cpu!")
NUMPY_OF_CUDA = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
                 "the tensor to host memory first.")


def gpu(test):
    """Marks a test `cuda` and skips it without a GPU."""
    for mark in requires_cuda:
        test = mark(test)
    return test


def sample(dtype, shape=(3, 4), seed=0):
    """numpy values exactly representable in `dtype` (bfloat16: small integers and halves)."""
    rng = np.random.default_rng(seed)
    if dtype == mini.bool:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype == mini.int64:
        return rng.integers(-50, 50, size=shape)
    if dtype == BFLOAT16:
        return (rng.integers(-64, 64, size=shape) / 2).astype(np.float32)
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def host(values, dtype):
    """A CPU tensor of `dtype` holding `values` (bfloat16 made from float32: exact here)."""
    if dtype == BFLOAT16:
        return mk(values).to(BFLOAT16)
    return mk(values, dtype=dtype, device="cpu")


# ---------------------------------------------------------------------------------------------
# devices and copies


@gpu
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "device('cuda')", "device('cuda:0')"])
def test_device_specs(spec):
    dev = eval("mini." + spec) if spec.startswith("device") else spec
    for t in (mini.zeros(2, 3, device=dev), mini.ones(4, device=dev),
              mini.randn(5, device=dev), mini.arange(6, device=dev),
              mini.full((2,), 1.5, device=dev), mini.tensor([1.0, 2.0], device=dev),
              mini.empty(3, device=dev)):
        assert t.is_cuda
        assert t.device.type == "cuda" and t.device.index == 0
        assert str(t.device) == "cuda:0"
        assert t.device == mini.device("cuda:0")
    assert_close(mini.arange(6, device=dev), np.arange(6), dtype=mini.int64)
    assert_close(mini.full((2,), 1.5, device=dev), [1.5, 1.5])


@gpu
def test_cuda_module_basics():
    assert cuda.is_available()
    assert cuda.device_count() >= 1
    cuda.synchronize()
    assert not mk([1.0]).is_cuda and mk([1.0]).device == mini.device("cpu")


@gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_round_trips_keep_values(dtype):
    values = sample(dtype)
    t = host(values, dtype)
    moves = [lambda: t.cuda(), lambda: t.to("cuda"), lambda: t.to(device="cuda"),
             lambda: t.to(mini.device("cuda")), lambda: t.to("cuda:0"),
             lambda: t.cuda(non_blocking=True), lambda: t.to("cuda", non_blocking=True)]
    for move in moves:
        g = move()
        assert g.is_cuda and g.dtype == dtype and tuple(g.shape) == values.shape
        back = g.cpu()
        assert not back.is_cuda and back.dtype == dtype
        np.testing.assert_array_equal(to_np(back), values)
        np.testing.assert_array_equal(to_np(g), values)  # tolist() of a CUDA tensor works too
        np.testing.assert_array_equal(to_np(g.to("cpu")), values)
    g = t.cuda()
    assert g.cuda() is g and g.to("cuda") is g  # already there: itself, as torch
    assert t.cpu() is t


@gpu
def test_to_device_and_dtype_together():
    t = mk(np.array([1.5, -2.25, 3.0], dtype=np.float32), device="cpu")
    g = t.to("cuda", mini.float64)
    assert g.is_cuda and g.dtype == mini.float64
    assert_close(g, [1.5, -2.25, 3.0])
    c = g.to(device="cpu", dtype=mini.int64)
    assert not c.is_cuda and c.dtype == mini.int64
    assert_close(c, [1, -2, 3])


@gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_non_contiguous_copies_both_ways(dtype):
    values = sample(dtype, (4, 6), seed=1)
    t = host(values, dtype)
    for view, ref in [(lambda x: x.t(), lambda a: a.T), (lambda x: x[:, 1::2], lambda a: a[:, 1::2]),
                      (lambda x: x[1:3].t()[::2], lambda a: a[1:3].T[::2]),
                      (lambda x: x[:1].expand(3, 6), lambda a: np.broadcast_to(a[:1], (3, 6)))]:
        np.testing.assert_array_equal(to_np(view(t).cuda().cpu()), ref(values))  # to the device
        np.testing.assert_array_equal(to_np(view(t.cuda()).cpu()), ref(values))  # from it


@gpu
def test_large_copy_round_trip():
    values = np.arange(2**22, dtype=np.float32)
    g = mini.from_numpy(values).cuda()
    back = g.cpu().numpy()
    np.testing.assert_array_equal(back, values)


@gpu
def test_item_and_repr_of_a_cuda_tensor():
    g = mk(np.array([[1.5, 2.0], [3.0, -4.0]], dtype=np.float32), device="cuda")
    assert g[1, 1].item() == -4.0 and type(g.sum().item()) is float
    assert "device='cuda:0'" in repr(g)


# ---------------------------------------------------------------------------------------------
# errors


@gpu
def test_numpy_of_cuda_tensor_raises_torchs_type_error():
    g = mini.ones(3, device="cuda")
    with pytest.raises(TypeError, match=re.escape(NUMPY_OF_CUDA)):
        g.numpy()
    with pytest.raises(TypeError, match=re.escape(NUMPY_OF_CUDA)):
        np.asarray(g)
    np.testing.assert_array_equal(g.cpu().numpy(), np.ones(3, dtype=np.float32))


@gpu
@pytest.mark.parametrize("op", ["add", "mul", "sub_", "matmul", "where", "maximum"])
def test_mixing_devices_raises(op):
    g = mini.ones(3, device="cuda")
    c = mini.ones(3)
    runs = {"add": lambda: g + c, "mul": lambda: mini.mul(g, c), "sub_": lambda: g.sub_(c),
            "matmul": lambda: g @ c, "where": lambda: mini.where(g > 0, g, c),
            "maximum": lambda: mini.maximum(g, c)}
    with pytest.raises(RuntimeError, match=re.escape(MIXED_DEVICES)):
        runs[op]()
    # the CPU tensor first: the same error, naming both devices
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device") as e:
        c + g
    assert "cuda:0" in str(e.value) and "cpu" in str(e.value)
    assert_close(g, [1.0, 1.0, 1.0])  # sub_ refused before it wrote anything


@gpu
def test_cpu_scalars_mix_with_cuda_tensors():
    a = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    g = mk(a, device="cuda")
    for out, expected in [(g + mini.tensor(2.0), a + 2), (mini.tensor(2.0) * g, a * 2),
                          (g * 2.5, a * 2.5), (3 - g, 3 - a), (g ** 2, a ** 2),
                          (mini.where(g > 0, g, 0.0), np.maximum(a, 0)),
                          (mini.maximum(g, mini.tensor(0.5)), np.maximum(a, 0.5)),
                          (g + mini.tensor(1.0, dtype=mini.float64), a + 1)]:
        assert out.is_cuda
        assert_close(out, expected, dtype=mini.float32)
    g.add_(mini.tensor(1.0))
    assert_close(g, a + 1)


# ---------------------------------------------------------------------------------------------
# one kernel per op


@gpu
def test_each_op_is_one_kernel_and_views_none(metrics):
    x = mini.randn(64, 128, device="cuda")
    y = mini.randn(128, device="cuda")
    w = mini.randn(128, 32, device="cuda")
    big = mini.randn(2**24, device="cuda")
    one_kernel = {
        "add": lambda: x + y, "mul scalar": lambda: x * 2.0, "exp": lambda: x.exp(),
        "relu": lambda: mini.relu(x), "gt": lambda: x > 0, "neg": lambda: x.neg(),
        "sum": lambda: x.sum(), "sum(1)": lambda: x.sum(1), "amax(0)": lambda: x.amax(0),
        "mean": lambda: x.mean(), "softmax": lambda: x.softmax(-1),
        "log_softmax": lambda: x.log_softmax(-1), "layer_norm": lambda: mini.layer_norm(x, (128,)),
        "gelu": lambda: mini.gelu(x), "matmul": lambda: x @ w,
        "contiguous of t()": lambda: x.t().contiguous(), "clone": lambda: x.clone(),
        "to(float64)": lambda: x.to(mini.float64), "zeros": lambda: mini.zeros(5, device="cuda"),
        "randn": lambda: mini.randn(5, device="cuda"),
        "long sum": lambda: big.sum(),  # two passes or atomics: still the op's one kernel
    }
    for name, run in one_kernel.items():
        metrics.reset()
        run()
        assert metrics.kernel_launches == 1, f"{name}: {metrics.kernel_launches} kernels"
    metrics.reset()
    views = [x.t(), x.view(128, 64), x[1], x[:, ::2], x.unsqueeze(0), x.reshape(-1),
             y.expand(64, 128), x.permute(1, 0), x.contiguous(), x.to("cuda")]
    assert metrics.kernel_launches == 0
    assert all(v.is_cuda for v in views)


@gpu
def test_where_is_one_kernel(metrics):
    x = mini.randn(1000, device="cuda")
    cond = x > 0
    metrics.reset()
    out = mini.where(cond, x, 0.0)
    assert metrics.kernel_launches == 1
    assert_close(out, np.maximum(to_np(x), 0))


# ---------------------------------------------------------------------------------------------
# events and memory


@gpu
def test_event_timing():
    start = cuda.Event(enable_timing=True)
    end = cuda.Event(enable_timing=True)
    x = mini.randn(512, 512, device="cuda")
    start.record()
    for _ in range(5):
        x = (x @ x).tanh()
    end.record()
    cuda.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms > 0


def _rounded(nbytes):  # the allocator's block size, as torch's: a multiple of 512 bytes
    return max(512, (nbytes + 511) // 512 * 512)


@gpu
def test_memory_stats():
    cuda.synchronize()
    base = cuda.memory_allocated()
    small = mini.empty(1000, device="cuda")  # 4000 bytes -> a 4096-byte block
    assert cuda.memory_allocated() - base == _rounded(4000)
    tiny = mini.empty(1, dtype=mini.bool, device="cuda")
    assert cuda.memory_allocated() - base == _rounded(4000) + _rounded(1)
    big = mini.empty(2**20, device="cuda")
    assert cuda.memory_allocated() - base == _rounded(4000) + _rounded(1) + 4 * 2**20
    peak = cuda.max_memory_allocated()
    assert peak >= cuda.memory_allocated()
    del big, small, tiny
    assert cuda.memory_allocated() == base
    assert cuda.max_memory_allocated() == peak  # the peak stays until reset
    cuda.reset_peak_memory_stats()
    assert cuda.max_memory_allocated() == cuda.memory_allocated()
    cuda.empty_cache()
    assert cuda.memory_allocated() == base
    again = mini.ones(2**20, device="cuda")  # the pool works after emptying the cache
    assert again.sum().item() == 2**20


@gpu
def test_freed_blocks_are_reused_and_empty_cache_returns_them():
    a = mini.empty(2**20, device="cuda")
    reserved = cuda.memory_reserved()
    del a
    assert cuda.memory_reserved() == reserved  # the freed block stays cached
    b = mini.empty(2**20, device="cuda")
    assert cuda.memory_reserved() == reserved  # and serves the next request: no cudaMalloc
    del b
    cuda.empty_cache()
    assert cuda.memory_reserved() < reserved


@gpu
def test_out_of_memory_is_an_error_and_the_process_goes_on():
    assert issubclass(mini.OutOfMemoryError, RuntimeError)
    keep = mini.arange(10, device="cuda", dtype=mini.float32)
    before = cuda.memory_allocated()
    with pytest.raises(mini.OutOfMemoryError, match="(?i)out of memory") as e:
        mini.empty(2**50, device="cuda")
    assert isinstance(e.value, RuntimeError)
    with pytest.raises(RuntimeError, match="(?i)out of memory"):
        mini.zeros(2**48, 8, device="cuda")
    assert cuda.memory_allocated() == before
    assert_close(keep, np.arange(10))
    assert mini.ones(1000, device="cuda").sum().item() == 1000.0


# ---------------------------------------------------------------------------------------------
# random numbers


@gpu
@pytest.mark.parametrize("name", ["randn", "rand"])
def test_manual_seed_reproduces_cuda_random_numbers(name):
    fn = getattr(mini, name)
    mini.manual_seed(7)
    a, b = fn(1000, device="cuda"), fn(3, 5, device="cuda")
    mini.manual_seed(7)
    a2, b2 = fn(1000, device="cuda"), fn(3, 5, device="cuda")
    np.testing.assert_array_equal(to_np(a), to_np(a2))
    np.testing.assert_array_equal(to_np(b), to_np(b2))
    assert not np.array_equal(to_np(a)[:15], to_np(b).ravel())  # the offset moved on
    mini.manual_seed(8)
    assert not np.array_equal(to_np(fn(1000, device="cuda")), to_np(a))


@gpu
def test_cuda_random_distributions():
    mini.manual_seed(0)
    n = mini.randn(2**20, device="cuda", dtype=mini.float64)
    u = to_np(mini.rand(2**20, device="cuda"))
    assert abs(n.mean().item()) < 0.01 and abs(to_np(n).std() - 1) < 0.01
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    f = mini.randn(7, device="cuda", dtype=mini.float32)
    assert f.dtype == mini.float32 and f.is_cuda


# ---------------------------------------------------------------------------------------------
# autograd, nn and optim


def _mlp_grads(device, x, w1, w2):
    leaves = [mk(a, requires_grad=True, device=device) for a in (x, w1, w2)]
    xs, a, b = leaves
    loss = ((xs @ a).relu() @ b).tanh().pow(2).mean()
    loss.backward()
    return loss, leaves


@gpu
def test_autograd_of_an_mlp_matches_cpu():
    rng = np.random.default_rng(3)
    x, w1, w2 = rng.standard_normal((8, 5)), rng.standard_normal((5, 16)), \
        rng.standard_normal((16, 3))
    loss_c, cpu = _mlp_grads("cpu", x, w1, w2)
    loss_g, gpu_leaves = _mlp_grads("cuda", x, w1, w2)
    assert loss_g.is_cuda
    assert loss_g.item() == pytest.approx(loss_c.item(), rel=1e-12)
    for c, g in zip(cpu, gpu_leaves):
        assert g.grad.is_cuda and g.grad.dtype == mini.float64
        np.testing.assert_allclose(to_np(g.grad), to_np(c.grad), rtol=1e-10, atol=1e-12)


def _model():
    mini.manual_seed(0)  # the CPU generator: both copies start from the same weights
    return mini.nn.Sequential(mini.nn.Linear(4, 16), mini.nn.ReLU(), mini.nn.Linear(16, 1))


def _train(model, x, y, steps=20):
    opt = mini.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = mini.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@gpu
@pytest.mark.parametrize("move", ["cuda()", "to('cuda')", "to(device('cuda'))"])
def test_nn_and_sgd_on_cuda_match_cpu(move):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((32, 4)).astype(np.float32)
    Y = (X @ np.array([[1.0], [-1.0], [0.5], [2.0]]) + 0.1).astype(np.float32)
    cpu_model = _model()
    model = _model()
    moved = {"cuda()": model.cuda, "to('cuda')": lambda: model.to("cuda"),
             "to(device('cuda'))": lambda: model.to(mini.device("cuda"))}[move]()
    assert moved is model  # as torch: the module itself, its parameters moved
    params = list(model.parameters())
    assert len(params) == 4
    assert all(isinstance(p, mini.nn.Parameter) and p.is_cuda and p.requires_grad
               and p.is_leaf for p in params)
    cpu_losses = _train(cpu_model, mk(X, device="cpu"), mk(Y, device="cpu"))
    losses = _train(model, mk(X, device="cuda"), mk(Y, device="cuda"))
    assert all(p.grad is None or p.grad.is_cuda for p in params)
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-4, atol=1e-6)
    assert losses[-1] < losses[0] / 4
    for p, q in zip(params, cpu_model.parameters()):
        np.testing.assert_allclose(to_np(p), to_np(q), rtol=1e-4, atol=1e-5)
    back = model.cpu()
    assert back is model and not any(p.is_cuda for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# bfloat16 on CUDA: math in float32, one rounding to bfloat16 (nearest, ties to even)


requires_bf16 = pytest.mark.skipif(BFLOAT16 is None, reason="mini has no bfloat16 yet")


@gpu
@requires_bf16
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "neg", "relu", "abs",
                                  "exp", "tanh", "sigmoid", "sqrt", "gelu", "sum", "amax",
                                  "softmax", "matmul"])
def test_bfloat16_ops_match_float32_rounded(name):
    rng = np.random.default_rng(11)
    a = bf16_round(rng.uniform(0.25, 2, size=(16, 32)))  # values exact in bfloat16
    b = bf16_round(rng.uniform(0.25, 2, size=(16, 32)))
    w = bf16_round(rng.uniform(-1, 1, size=(32, 8)))
    A, B, W = (mk(v, device="cuda").to(BFLOAT16) for v in (a, b, w))
    f32 = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
           "div": lambda x, y: x / y, "maximum": mini.maximum}
    if name in f32:
        out, ref = f32[name](A, B), f32[name](mk(a, device="cuda"), mk(b, device="cuda"))
    elif name == "matmul":
        out, ref = A @ W, mk(a, device="cuda") @ mk(w, device="cuda")
    elif name in ("sum", "amax"):
        out, ref = getattr(A, name)(1), getattr(mk(a, device="cuda"), name)(1)
    elif name == "softmax":
        out, ref = A.softmax(-1), mk(a, device="cuda").softmax(-1)
    else:
        fn = getattr(mini, name)
        out, ref = fn(A), fn(mk(a, device="cuda"))
    assert out.dtype == BFLOAT16 and out.is_cuda
    expected = bf16_round(to_np(ref))
    got = to_np(out)
    if name in ("add", "sub", "mul", "div", "maximum", "neg", "relu", "abs", "amax"):
        np.testing.assert_array_equal(got, expected)  # exact: one float32 op, one rounding
    else:  # transcendental or accumulated: within one bfloat16 step of the float32 result
        np.testing.assert_allclose(got, expected, rtol=2**-7, atol=1e-6)


@gpu
@requires_bf16
def test_bfloat16_promotion_and_conversion_on_cuda():
    x = mk(np.array([1.0, 2.5, -3.0], dtype=np.float32), device="cuda").to(BFLOAT16)
    assert (x + 1).dtype == BFLOAT16  # a Python number keeps bfloat16
    assert (x + mini.ones(3, device="cuda")).dtype == mini.float32
    assert (x + mini.ones(3, dtype=mini.int64, device="cuda")).dtype == BFLOAT16
    assert (x * mini.tensor(2.0, dtype=mini.float64)).dtype == BFLOAT16  # 0-d: no promotion
    assert_close(x.float(), [1.0, 2.5, -3.0], dtype=mini.float32)
    r = mk(np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8], dtype=np.float32), device="cuda")
    assert to_np(r.to(BFLOAT16)).tolist() == [1.0, 1.0 + 2**-6]  # ties to even


# ---------------------------------------------------------------------------------------------
# matmul precision: float32 without TF32 by default, as torch


@gpu
def test_float32_matmul_is_not_tf32_by_default():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    got = to_np(mk(a, device="cuda") @ mk(b, device="cuda")).astype(np.float64)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    error = np.abs(got - ref).max() / np.abs(ref).max()
    # float32 accumulation over 256 terms: ~1e-6; TF32's 10-bit mantissa would give ~1e-3
    assert error < 2e-5, f"relative error {error:.2e}: TF32 (or worse) is on"


@gpu
def test_softmax_rows_on_cuda_against_numpy():
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((33, 3000)) * 4).astype(np.float32)  # a row longer than a block
    assert_close(mk(a, device="cuda").softmax(-1), np_softmax(a.astype(np.float64), -1),
                 rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# without a GPU: what the user is told


no_gpu = pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")


def _says_reason_and_fix(message):
    assert "cuda" in message.lower(), message
    assert re.search(r"device='cpu'|toolkit|MINI_CUDA|driver|GPU", message), \
        f"the message names no fix: {message!r}"


@no_gpu
def test_no_gpu_is_available_is_false():
    if cuda is None:
        pytest.skip(CUDA_SKIP_REASON)
    assert cuda.is_available() is False
    assert cuda.device_count() == 0


@no_gpu
@pytest.mark.parametrize("make", ["zeros", "randn", "tensor", "cuda()", "to('cuda')",
                                  "module.cuda()"])
def test_no_gpu_cuda_tensors_raise_with_reason_and_fix(make):
    runs = {"zeros": lambda: mini.zeros(2, device="cuda"),
            "randn": lambda: mini.randn(2, device="cuda:0"),
            "tensor": lambda: mini.tensor([1.0], device="cuda"),
            "cuda()": lambda: mini.ones(2).cuda(),
            "to('cuda')": lambda: mini.ones(2).to("cuda"),
            "module.cuda()": lambda: mini.nn.Linear(2, 2).cuda()}
    if make == "module.cuda()" and not hasattr(mini.nn.Module, "cuda"):
        pytest.skip("mini.nn.Module.cuda lands with issue 12's Python surface")
    with pytest.raises(RuntimeError) as e:
        runs[make]()
    _says_reason_and_fix(str(e.value))
    assert mini.zeros(2).sum().item() == 0  # the CPU goes on working
