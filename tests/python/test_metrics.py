"""mini.metrics: every eager compute op is exactly one kernel launch; bytes_moved adds the bytes
of each input operand as stored plus the bytes of the output; views launch nothing."""
import pytest

import mini

N = 1000
F32 = 4


@pytest.fixture
def xb():
    x = mini.randn(N)
    b = mini.randn(N)
    mini.metrics.reset()
    return x, b


def _counts():
    return mini.metrics.kernel_launches, mini.metrics.bytes_moved


def test_reset_zeroes_everything():
    x = mini.randn(N)
    x + x
    assert mini.metrics.kernel_launches > 0 and mini.metrics.bytes_moved > 0
    mini.metrics.reset()
    assert _counts() == (0, 0)
    assert mini.metrics.generated_kernel_count == 0


def test_counters_are_ints(xb):
    x, b = xb
    x + b
    assert isinstance(mini.metrics.kernel_launches, int)
    assert isinstance(mini.metrics.bytes_moved, int)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_op_one_launch_three_buffers(xb, op):
    x, b = xb
    getattr(mini, op)(x, b)
    assert _counts() == (1, 3 * N * F32)


@pytest.mark.parametrize("op", ["exp", "neg", "relu", "sigmoid", "tanh", "abs", "sin"])
def test_unary_op_one_launch_two_buffers(xb, op):
    x, _ = xb
    getattr(mini, op)(x)
    assert _counts() == (1, 2 * N * F32)


def test_comparison_writes_one_byte_per_bool(xb):
    x, b = xb
    x < b
    assert _counts() == (1, 2 * N * F32 + N * 1)


def test_where_counts_all_three_inputs(xb):
    x, b = xb
    c = x > b
    mini.metrics.reset()
    mini.where(c, x, b)
    assert _counts() == (1, N * 1 + 3 * N * F32)


@pytest.mark.parametrize("expr", [lambda x: x * 0.5, lambda x: 0.5 * x, lambda x: x + 1,
                                  lambda x: x / 3.0, lambda x: x ** 2])
def test_python_scalar_counts_one_element(xb, expr):
    x, _ = xb
    expr(x)
    launches, moved = _counts()
    assert launches == 1
    assert 2 * N * F32 <= moved <= 2 * N * F32 + 8


def test_zero_dim_tensor_operand_counts_one_element(xb):
    x, _ = xb
    s = mini.tensor(2.0)
    mini.metrics.reset()
    x * s
    assert _counts() == (1, 2 * N * F32 + F32)


def test_broadcast_operands_count_as_stored():
    a = mini.randn(3, 1)
    b = mini.randn(1, 4)
    mini.metrics.reset()
    a + b
    assert _counts() == (1, (3 + 4 + 12) * F32)


def test_float64_and_int64_itemsizes():
    d = mini.randn(N, dtype=mini.float64)
    i = mini.ones(N, dtype=mini.int64)
    mini.metrics.reset()
    d + d
    assert _counts() == (1, 3 * N * 8)
    mini.metrics.reset()
    i * i
    assert _counts() == (1, 3 * N * 8)


def test_chain_counts_each_op(xb):
    x, b = xb
    y = (x + b) * b
    y.exp()
    launches, moved = _counts()
    assert launches == 3
    assert moved == 3 * N * F32 + 3 * N * F32 + 2 * N * F32


def test_reduction_one_launch(xb):
    x, _ = xb
    x.sum()
    assert _counts() == (1, N * F32 + F32)
    mini.metrics.reset()
    m = mini.randn(10, 20)
    mini.metrics.reset()
    m.sum(dim=1)
    assert _counts() == (1, 200 * F32 + 10 * F32)


def test_matmul_one_launch():
    a = mini.randn(8, 16)
    b = mini.randn(16, 4)
    mini.metrics.reset()
    a @ b
    assert _counts() == (1, (8 * 16 + 16 * 4 + 8 * 4) * F32)


@pytest.mark.parametrize("view", [
    lambda t: t.reshape(20, 10), lambda t: t.view(-1), lambda t: t.transpose(0, 1),
    lambda t: t.t(), lambda t: t.permute(1, 0), lambda t: t.unsqueeze(0),
    lambda t: t.unsqueeze(1).squeeze(1), lambda t: t[:, None].expand(10, 3, 20),
    lambda t: t[1], lambda t: t[:, 2:5], lambda t: t[..., None], lambda t: t[::2],
    lambda t: t.contiguous(), lambda t: t.detach(), lambda t: t.float()])
def test_views_launch_nothing(view):
    t = mini.randn(10, 20)
    mini.metrics.reset()
    view(t)
    assert _counts() == (0, 0)


def test_contiguous_of_transposed_is_one_copy():
    t = mini.randn(10, 20).t()
    mini.metrics.reset()
    t.contiguous()
    assert _counts() == (1, 2 * 200 * F32)


def test_reshape_of_transposed_is_one_copy():
    t = mini.randn(10, 20).t()
    mini.metrics.reset()
    t.reshape(-1)
    assert _counts() == (1, 2 * 200 * F32)


def test_clone_and_conversion(xb):
    x, _ = xb
    x.clone()
    assert _counts() == (1, 2 * N * F32)
    mini.metrics.reset()
    x.double()
    assert _counts() == (1, N * F32 + N * 8)


def test_inplace_op_is_one_launch(xb):
    x, b = xb
    x.add_(b)
    assert mini.metrics.kernel_launches == 1
    mini.metrics.reset()
    x.mul_(2.0)
    assert mini.metrics.kernel_launches == 1


def test_eager_ops_generate_no_kernels(xb):
    x, b = xb
    ((x + b).relu() @ b).sum()
    assert mini.metrics.generated_kernel_count == 0


def test_counts_accumulate_until_reset(xb):
    x, b = xb
    for _ in range(5):
        x + b
    assert _counts() == (5, 5 * 3 * N * F32)
