"""mini.compile meets CUDA tensors before CUDA code generation exists (issue 13): a frame that
touches a CUDA tensor runs eagerly as a whole (its ops as eager CUDA kernels), explain() says
why, fullgraph=True raises naming the cause, and a graph compiled for CPU tensors is never run
with CUDA ones (its tensor guards fail on the device)."""
import pytest

import mini

cuda = pytest.mark.skipif(not mini.cuda.is_available(),
                          reason="no CUDA device: " + mini._C._cuda.unavailable_reason())


def f(x, y):
    return (x * y + 1).relu().sum(dim=-1)


@cuda
def test_compiled_function_on_cuda_runs_eagerly_and_matches():
    x = mini.randn(8, 16, device="cuda")
    y = mini.randn(8, 16, device="cuda")
    got = mini.compile(f)(x, y)
    assert got.device == mini.device("cuda:0")
    assert mini.allclose(got.cpu(), f(x, y).cpu())
    e = mini.explain(f)(x, y)
    assert e.graph_count == 0
    assert any("CUDA tensor" in r.reason for r in e.break_reasons), e


@cuda
def test_fullgraph_names_the_cause():
    x = mini.randn(4, device="cuda")
    with pytest.raises(mini.Unsupported, match="CUDA tensor"):
        mini.compile(lambda t: t.sin() + 1, fullgraph=True)(x)


@cuda
def test_cpu_graph_is_not_reused_for_cuda_inputs():
    mini.reset()
    counter = mini.CompileCounter()
    g = mini.compile(f, backend=counter)
    x, y = mini.randn(3, 5), mini.randn(3, 5)
    assert mini.allclose(g(x, y), f(x, y))
    got = g(x.cuda(), y.cuda())
    assert got.is_cuda
    assert mini.allclose(got.cpu(), f(x, y), atol=1e-5)
    assert counter.frame_count == 1  # the CUDA call compiled nothing


def test_factory_on_cuda_inside_compiled_code_breaks_the_graph_not_the_program():
    def h(x):
        return x + mini.zeros(3, device="cuda")
    if mini.cuda.is_available():
        x = mini.randn(3, device="cuda")
        assert mini.allclose(mini.compile(h)(x).cpu(), h(x).cpu())
    else:
        with pytest.raises(RuntimeError, match="CUDA"):
            mini.compile(h)(mini.randn(3))
