"""The CPU matmul's three ways through a batch, each against numpy: a batch of rows against one
matrix folded into one GEMM (x @ w of a linear layer on [B, T, C]), small matrices of a true
batch split over the threads (attention's scores), and the plain loop (large matrices, or rows
that do not fold)."""

import numpy as np
import pytest

import mini

rng = np.random.default_rng(7)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):
    start = mini.get_num_threads()
    mini.set_num_threads(request.param)
    yield request.param
    mini.set_num_threads(start)


def swap_batch(x):
    return x.transpose(1, 0, 2) if isinstance(x, np.ndarray) else x.permute(1, 0, 2)


def transpose_matrices(x):
    return x.transpose(0, 2, 1) if isinstance(x, np.ndarray) else x.permute(0, 2, 1)


CASES = {
    # name: (a, b, how a is viewed before the product: the same for a numpy array and a tensor)
    "folded rows": (r(16, 64, 96), r(96, 40), None),
    "folded rows, one batch": (r(1, 64, 96), r(96, 40), None),
    "folded rows at a padded stride": (r(4, 8, 10), r(6, 3), lambda x: x[:, :, :6]),
    "rows that do not fold (batch dims swapped)": (r(5, 3, 7), r(7, 2), swap_batch),
    "a transposed in each matrix": (r(3, 7, 5), r(7, 2), transpose_matrices),
    "a true batch of small matrices": (r(16, 4, 64, 64), r(16, 4, 64, 32), None),
    "a batch broadcast against b": (r(6, 1, 20, 12), r(3, 12, 9), None),
    "a large batch of large matrices": (r(2, 160, 160), r(2, 160, 160), None),
    "empty inner dimension": (r(3, 4, 0), r(0, 5), None),
}


def viewed(x, view):
    return x if view is None else view(x)


@pytest.mark.parametrize("name", list(CASES))
def test_matmul_agrees_with_numpy(threads, name):
    a, b, view = CASES[name]
    got = (viewed(mini.from_numpy(a), view) @ mini.from_numpy(b)).numpy()
    want = viewed(a, view) @ b
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def reduced_to(x, shape):
    """x summed over the dims broadcasting added to `shape` (autograd's rule for a gradient)."""
    while x.ndim > len(shape):
        x = x.sum(axis=0)
    return x.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1), keepdims=True)


@pytest.mark.parametrize("name", ["folded rows", "a true batch of small matrices", "a batch broadcast against b"])
def test_matmul_gradients_agree_with_numpy(threads, name):
    a, b, _ = CASES[name]
    ta, tb = mini.from_numpy(a).requires_grad_(), mini.from_numpy(b).requires_grad_()
    out = ta @ tb
    g = r(*out.shape)
    out.backward(mini.from_numpy(g))
    np.testing.assert_allclose(ta.grad.numpy(), reduced_to(g @ np.swapaxes(b, -1, -2), a.shape), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tb.grad.numpy(), reduced_to(np.swapaxes(a, -1, -2) @ g, b.shape), rtol=1e-4, atol=1e-3)


def test_a_compiled_linear_layer_on_a_batch_of_rows_agrees_with_numpy(threads):
    a, b = r(8, 32, 48), r(48, 24)

    def f(x, w):
        return mini.relu(x @ w) * 2.0
    got = mini.compile(f)(mini.from_numpy(a), mini.from_numpy(b)).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ b, 0) * 2.0, rtol=1e-4, atol=1e-4)


def test_a_forked_child_runs_parallel_work_after_the_parent_did():
    """libgomp's thread pool does not survive fork: a child entering a parallel region of two
    threads waited forever (a fork-isolated fuzz test hung so). The child runs on one thread."""
    import os
    import time
    a, b = mini.randn(64, 32, 32), mini.randn(64, 32, 32)
    x = mini.randn(1 << 20)
    want_mm, want_sum = (a @ b).numpy(), float((x * 2).sum())  # the parent's pool is up now
    pid = os.fork()
    if pid == 0:
        ok = np.allclose((a @ b).numpy(), want_mm, rtol=1e-5, atol=1e-5) and \
            abs(float((x * 2).sum()) - want_sum) <= 1e-3 * abs(want_sum) + 1e-3 and mini.get_num_threads() == 1
        os._exit(0 if ok else 3)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung in a parallel region")
