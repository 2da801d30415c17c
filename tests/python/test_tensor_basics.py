"""Tensor basics: attributes, factories, random numbers, mini.tensor / from_numpy / numpy() /
__array__, clone, item, tolist and dtype conversions, for all four dtypes. The tests that take
conftest's `device` fixture (or use it) run on the CPU and on CUDA."""
import numpy as np
import pytest

import mini
from conftest import DTYPES, FLOAT_DTYPES, assert_close, dtype_id, mk, np_dtype, to_np

# ---------------------------------------------------------------------------------------------
# dtypes and attributes


def test_dtype_names_and_aliases():
    assert str(mini.float32) == "mini.float32"
    assert str(mini.float64) == "mini.float64"
    assert str(mini.int64) == "mini.int64"
    assert str(mini.bool) == "mini.bool"
    assert mini.float == mini.float32
    assert mini.double == mini.float64
    assert mini.long == mini.int64
    assert mini.float32 != mini.float64


def test_attributes():
    t = mini.zeros(2, 3, 4)
    assert isinstance(t, mini.Tensor)
    assert isinstance(t.shape, mini.Size) and isinstance(t.shape, tuple)
    assert t.shape == (2, 3, 4)
    assert t.size() == (2, 3, 4)
    assert t.size(1) == 3 and t.size(-1) == 4
    assert t.dim() == 3 and t.ndim == 3
    assert t.numel() == 24
    assert len(t) == 2
    assert t.dtype == mini.float32
    assert str(t.device) == "cpu"
    assert t.requires_grad is False
    assert t.grad is None and t.grad_fn is None and t.is_leaf
    assert isinstance(repr(t), str) and "tensor" in repr(t)


def test_repr_shows_values():
    r = repr(mk(np.array([1.5, -2.25])))
    assert "1.5" in r and "-2.25" in r


def test_0d_attributes():
    t = mini.tensor(3.0)
    assert t.shape == () and t.dim() == 0 and t.numel() == 1
    assert t.item() == 3.0


# ---------------------------------------------------------------------------------------------
# factories


@pytest.mark.parametrize("name,fill", [("zeros", 0), ("ones", 1)])
@pytest.mark.parametrize("dtype", DTYPES + [None], ids=lambda d: "default" if d is None
                         else dtype_id(d))
@pytest.mark.parametrize("sizes", [(3,), (2, 3), ((2, 3),), ([4, 1, 2],), ((),)], ids=str)
def test_zeros_ones(name, fill, dtype, sizes, device):
    kw = {} if dtype is None else {"dtype": dtype}
    t = getattr(mini, name)(*sizes, **kw, device=device)
    assert t.device.type == device
    shape = tuple(sizes[0]) if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes
    expected_dtype = mini.float32 if dtype is None else dtype
    assert_close(t, np.full(shape, fill, dtype=np_dtype(expected_dtype)), dtype=expected_dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_empty(dtype):
    t = mini.empty(4, 5, dtype=dtype)
    assert t.shape == (4, 5) and t.dtype == dtype and t.is_contiguous()
    assert mini.empty((2, 3)).dtype == mini.float32


@pytest.mark.parametrize("args,kw,expected,dtype", [
    (((2, 3), 1.5), {}, np.full((2, 3), 1.5), mini.float32),
    (((2,), 7), {}, np.array([7, 7]), mini.int64),
    (((2,), True), {}, np.array([True, True]), mini.bool),
    (((3,), 2), {"dtype": mini.float64}, np.array([2.0, 2, 2]), mini.float64),
    (((1, 2), -0.5), {"dtype": mini.float64}, np.full((1, 2), -0.5), mini.float64),
])
def test_full(args, kw, expected, dtype):
    assert_close(mini.full(*args, **kw), expected, dtype=dtype)


@pytest.mark.parametrize("args,kw,expected,dtype", [
    ((5,), {}, np.arange(5), mini.int64),
    ((2, 10, 3), {}, np.arange(2, 10, 3), mini.int64),
    ((10, 2, -3), {}, np.arange(10, 2, -3), mini.int64),
    ((0, 1, 0.25), {}, np.arange(0, 1, 0.25), mini.float32),
    ((5.0,), {}, np.arange(5.0), mini.float32),
    ((1, 4), {"dtype": mini.float64}, np.arange(1.0, 4.0), mini.float64),
    ((6,), {"dtype": mini.float32}, np.arange(6.0), mini.float32),
])
def test_arange(args, kw, expected, dtype):
    assert_close(mini.arange(*args, **kw), expected, dtype=dtype)


@pytest.mark.parametrize("name,fill", [("zeros_like", 0), ("ones_like", 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_like_factories(name, fill, dtype):
    src = mini.empty(2, 5, dtype=dtype)
    t = getattr(mini, name)(src)
    assert_close(t, np.full((2, 5), fill, dtype=np_dtype(dtype)), dtype=dtype)
    t64 = getattr(mini, name)(src, dtype=mini.float64)
    assert_close(t64, np.full((2, 5), fill, dtype=np.float64), dtype=mini.float64)


@pytest.mark.parametrize("factory", [
    lambda **kw: mini.zeros(3, **kw), lambda **kw: mini.ones(3, **kw),
    lambda **kw: mini.randn(3, **kw), lambda **kw: mini.rand(3, **kw),
    lambda **kw: mini.full((3,), 2.0, **kw), lambda **kw: mini.empty(3, **kw),
    lambda **kw: mini.tensor([1.0, 2.0], **kw), lambda **kw: mini.arange(3.0, **kw)])
def test_factory_requires_grad(factory):
    t = factory(requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.grad is None
    assert not factory().requires_grad


@pytest.mark.parametrize("name", ["randn", "rand"])
def test_random_reproducible_with_manual_seed(name):
    mini.manual_seed(42)
    a = to_np(getattr(mini, name)(4, 5))
    b = to_np(getattr(mini, name)(4, 5))
    mini.manual_seed(42)
    c = to_np(getattr(mini, name)(4, 5))
    mini.manual_seed(43)
    d = to_np(getattr(mini, name)(4, 5))
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b), "consecutive draws must differ"
    assert not np.array_equal(a, d), "different seeds must differ"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [None], ids=lambda d: "default" if d is None
                         else dtype_id(d))
def test_random_dtypes_and_shapes(dtype):
    kw = {} if dtype is None else {"dtype": dtype}
    for name in ("randn", "rand"):
        t = getattr(mini, name)((3, 2), **kw)
        assert t.shape == (3, 2) and t.dtype == (dtype or mini.float32)


def test_rand_in_unit_interval():
    mini.manual_seed(0)
    a = to_np(mini.rand(10 ** 5))
    assert a.min() >= 0.0 and a.max() < 1.0
    assert abs(a.mean() - 0.5) < 0.01
    assert abs(a.std() - (1 / 12) ** 0.5) < 0.01


def test_randn_moments():
    mini.manual_seed(0)
    a = to_np(mini.randn(10 ** 5)).astype(np.float64)
    assert abs(a.mean()) < 0.02
    assert abs(a.std() - 1.0) < 0.02
    assert 0.66 < np.mean(np.abs(a) < 1.0) < 0.70  # ~68.3% within one sigma
    assert len(np.unique(a)) > 99_000


# ---------------------------------------------------------------------------------------------
# mini.tensor, from_numpy, numpy(), __array__


@pytest.mark.parametrize("data,dtype,expected", [
    ([1, 2, 3], mini.int64, np.array([1, 2, 3])),
    ([1.0, 2.5], mini.float32, np.array([1.0, 2.5])),
    ([1, 2.5], mini.float32, np.array([1.0, 2.5])),
    ([True, False], mini.bool, np.array([True, False])),
    ([[1, 2], [3, 4]], mini.int64, np.array([[1, 2], [3, 4]])),
    (3, mini.int64, np.array(3)),
    (2.5, mini.float32, np.array(2.5)),
    (True, mini.bool, np.array(True)),
    ([[[1.0]], [[2.0]]], mini.float32, np.array([[[1.0]], [[2.0]]])),
])
def test_tensor_from_python(data, dtype, expected):
    assert_close(mini.tensor(data), expected, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_tensor_explicit_dtype(dtype):
    t = mini.tensor([[0, 1], [2, 3]], dtype=dtype)
    assert_close(t, np.array([[0, 1], [2, 3]]).astype(np_dtype(dtype)), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_tensor_from_numpy_copies(dtype):
    arr = np.array([[1, 0, 3], [4, 5, 0]]).astype(np_dtype(dtype))
    t = mini.tensor(arr)
    assert t.dtype == dtype
    assert_close(t, arr)
    arr[0, 0] = 0  # the tensor holds its own copy
    assert to_np(t)[0, 0] == 1


def test_tensor_from_non_contiguous_numpy():
    arr = np.arange(12.0).reshape(3, 4).T[::2]
    assert_close(mini.tensor(arr), arr, dtype=mini.float64)


def test_tensor_from_tensor_copies():
    src = mk(np.array([1.0, 2.0], dtype=np.float32))
    t = mini.tensor(src)
    t.add_(1)
    assert_close(src, [1.0, 2.0])
    assert_close(t, [2.0, 3.0])
    assert mini.tensor(src, dtype=mini.float64).dtype == mini.float64


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_from_numpy_shares_memory(dtype):
    arr = np.array([1, 0, 1, 1]).astype(np_dtype(dtype))
    t = mini.from_numpy(arr)
    assert t.dtype == dtype and t.shape == (4,)
    arr[1] = 1  # numpy write -> tensor sees it
    assert bool(to_np(t)[1])
    t.zero_()  # tensor write -> numpy sees it
    assert not arr.any()


def test_from_numpy_2d_keeps_array_alive():
    arr = np.arange(6.0).reshape(2, 3)
    t = mini.from_numpy(arr)
    del arr
    import gc
    gc.collect()
    assert_close(t, np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_numpy_shares_memory_when_contiguous(dtype):
    t = mini.tensor([[1, 0], [0, 1]], dtype=dtype)
    arr = t.numpy()
    assert isinstance(arr, np.ndarray)
    assert arr.dtype == np_dtype(dtype) and arr.shape == (2, 2)
    np.testing.assert_array_equal(arr, np.eye(2).astype(np_dtype(dtype)))
    t.fill_(1)  # tensor write -> array sees it
    assert arr.all()
    arr[0, 0] = 0  # array write -> tensor sees it
    assert not bool(to_np(t)[0, 0])


def test_numpy_of_non_contiguous_values():
    t = mk(np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(t.t().numpy(), np.arange(12.0).reshape(3, 4).T)
    np.testing.assert_array_equal(t[:, ::2].numpy(), np.arange(12.0).reshape(3, 4)[:, ::2])


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_array_protocol(dtype):
    t = mini.tensor([[1, 2, 0]], dtype=dtype)
    arr = np.asarray(t)
    assert arr.dtype == np_dtype(dtype) and arr.shape == (1, 3)
    np.testing.assert_array_equal(arr, np.array([[1, 2, 0]]).astype(np_dtype(dtype)))
    np.testing.assert_array_equal(np.array(t, dtype=np.float64), [[1, 2, 0]] if dtype != mini.bool
                                  else [[1, 1, 0]])
    assert np.add(np.asarray(mk(np.float64([1, 2]))), 1).tolist() == [2.0, 3.0]


def test_numpy_requires_grad_raises_or_detach_works():
    t = mini.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        t.numpy()  # torch: "Can't call numpy() on Tensor that requires grad"
    np.testing.assert_array_equal(t.detach().numpy(), [1.0, 1.0])


# ---------------------------------------------------------------------------------------------
# clone, item, tolist


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.usefixtures("device")
def test_clone_is_a_copy(dtype):
    arr = np.array([[1, 0], [1, 1]]).astype(np_dtype(dtype))
    t = mk(arr)
    c = t.clone()
    assert c.dtype == dtype
    assert_close(c, arr)
    c.zero_()
    assert_close(t, arr)


@pytest.mark.usefixtures("device")
def test_clone_of_non_contiguous():
    arr = np.arange(12.0).reshape(3, 4)
    c = mk(arr).t().clone()
    assert_close(c, arr.T)


@pytest.mark.parametrize("data,dtype,expected,pytype", [
    (2.5, mini.float32, 2.5, float), (2.5, mini.float64, 2.5, float),
    (-7, mini.int64, -7, int), (True, mini.bool, True, bool), ([3.0], mini.float32, 3.0, float),
    ([[9]], mini.int64, 9, int)])
def test_item(data, dtype, expected, pytype):
    v = mini.tensor(data, dtype=dtype).item()
    assert type(v) is pytype
    assert v == expected


def test_item_float32_rounding():
    assert mini.tensor(0.1).item() == float(np.float32(0.1))
    assert mini.tensor(0.1, dtype=mini.float64).item() == 0.1


def test_item_large_int64():
    assert mini.tensor(2 ** 62 + 1).item() == 2 ** 62 + 1


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.usefixtures("device")
def test_tolist(dtype):
    arr = np.array([[1, 0, 2], [0, 3, 1]]).astype(np_dtype(dtype))
    lst = mk(arr).tolist()
    assert lst == arr.tolist()
    pytype = {mini.float32: float, mini.float64: float, mini.int64: int, mini.bool: bool}
    assert all(type(x) is pytype[dtype] for row in lst for x in row)
    assert mk(arr)[1, 2].tolist() == arr[1, 2].item()  # 0-d -> a Python scalar


@pytest.mark.usefixtures("device")
def test_tolist_non_contiguous():
    arr = np.arange(6).reshape(2, 3)
    assert mk(arr).t().tolist() == arr.T.tolist()


# ---------------------------------------------------------------------------------------------
# dtype conversions

SOURCE = np.array([-1.75, -0.5, 0.0, 0.5, 2.0, 3.9])


def _source(dtype):
    if dtype == mini.bool:
        return SOURCE != 0
    return SOURCE.astype(np_dtype(dtype))  # float -> int64 truncates toward zero, as torch


CONVERSIONS = [("float", mini.float32), ("double", mini.float64), ("long", mini.int64),
               ("bool", mini.bool)]


@pytest.mark.parametrize("src", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("method,dst", CONVERSIONS)
@pytest.mark.usefixtures("device")
def test_conversion_methods(src, method, dst):
    arr = _source(src)
    out = getattr(mk(arr), method)()
    assert_close(out, arr.astype(np_dtype(dst)), dtype=dst)


@pytest.mark.parametrize("src", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dst", DTYPES, ids=dtype_id)
@pytest.mark.usefixtures("device")
def test_to_dtype(src, dst):
    arr = _source(src)
    assert_close(mk(arr).to(dst), arr.astype(np_dtype(dst)), dtype=dst)
    assert_close(mk(arr).to(dtype=dst), arr.astype(np_dtype(dst)), dtype=dst)


@pytest.mark.usefixtures("device")
def test_conversion_to_other_dtype_copies():
    t = mk(np.array([1.0, 2.0]))
    f = t.float()
    f.add_(1)
    assert_close(t, [1.0, 2.0])


@pytest.mark.usefixtures("device")
def test_conversion_to_same_dtype_returns_self_storage():
    t = mk(np.array([1.0, 2.0], dtype=np.float32))
    same = t.float()  # like torch: no copy when nothing changes
    same.add_(1)
    assert_close(t, [2.0, 3.0])


def test_cpu_is_noop_and_device_cpu_factory():
    t = mk(np.array([1.0, 2.0]))
    assert str(t.cpu().device) == "cpu"
    assert_close(t.cpu(), [1.0, 2.0])
    assert str(mini.zeros(2, device="cpu").device) == "cpu"


# ---------------------------------------------------------------------------------------------
# allclose


@pytest.mark.usefixtures("device")
def test_allclose():
    a = mk(np.array([1.0, 2.0, 3.0]))
    assert mini.allclose(a, mk(np.array([1.0, 2.0, 3.0 + 1e-9])))
    assert not mini.allclose(a, mk(np.array([1.0, 2.0, 3.1])))
    assert mini.allclose(a, mk(np.array([1.0, 2.0, 3.1])), atol=0.2)
    assert mini.allclose(a, mk(np.array([1.0, 2.0, 3.1])), rtol=0.05)
    assert isinstance(mini.allclose(a, a), bool)
