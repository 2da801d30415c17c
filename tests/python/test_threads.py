"""mini.set_num_threads / get_num_threads: torch's names for the CPU's thread count."""

import numpy as np
import pytest

import mini


@pytest.fixture
def restore_threads():
    start = mini.get_num_threads()
    yield
    mini.set_num_threads(start)


def test_set_num_threads_is_read_back(restore_threads):
    mini.set_num_threads(1)
    assert mini.get_num_threads() == 1
    mini.set_num_threads(3)
    assert mini.get_num_threads() == 3


@pytest.mark.parametrize("bad", [0, -2, 1.5, "4", True])
def test_set_num_threads_refuses_what_is_not_a_positive_int(restore_threads, bad):
    start = mini.get_num_threads()
    with pytest.raises(ValueError, match="positive int"):
        mini.set_num_threads(bad)
    assert mini.get_num_threads() == start


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_and_matmuls_agree_with_numpy_at_each_thread_count(restore_threads, threads):
    mini.set_num_threads(threads)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 1 << 10)).astype(np.float32)

    def f(a, b):
        return mini.relu(a @ b + 1.0).sum(dim=1)
    expected = np.maximum(a @ b + 1.0, 0).sum(axis=1)
    for run in (f, mini.compile(f)):
        out = run(mini.from_numpy(a), mini.from_numpy(b)).numpy()
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-3)
