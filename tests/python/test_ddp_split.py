"""Compile meets DDP, in one process (a Gloo world of one): mini.compile of a DDP module captures
its inner module, and the graph is cut at DDP's buckets (DDPOptimizer): explain() lists the
pieces and the cuts as graph breaks, MINI_LOGS=ddp says which parameters went where and why a
graph was not cut; mini.config.optimize_ddp turns it off. DDP's forward passes through to
`module`. The gradients of the multi-process runs are checked in test_ddp.py."""
import socket

import pytest

import mini
import mini.distributed as dist
import mini.nn as nn
from mini.nn.parallel import DistributedDataParallel as DDP

pytestmark = pytest.mark.skipif(not dist.is_gloo_available(), reason="this build of mini has no Gloo (libgloo-dev)")

WIDTH = 32
LAYER_MB = (WIDTH * WIDTH + WIDTH) * 4 / 2 ** 20


@pytest.fixture(scope="module", autouse=True)
def world_of_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(autouse=True)
def fresh_caches():
    mini.reset()
    yield
    mini.set_logs()


def mlp(layers=3):
    mini.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*blocks[:-1])


def test_forward_passes_through_to_module():
    model = mlp()
    ddp = DDP(model, bucket_cap_mb=LAYER_MB)
    x = mini.randn(4, WIDTH)
    assert ddp.module is model
    assert mini.allclose(ddp(x), model(x))
    assert [n for n, _ in ddp.named_parameters()] == ["module." + n for n, _ in model.named_parameters()]
    assert len(ddp.bucket_sizes) == 3


def test_explain_shows_a_graph_per_bucket_and_why_it_was_cut():
    ddp = DDP(mlp(), bucket_cap_mb=LAYER_MB)
    out = mini.explain(ddp)(mini.randn(4, WIDTH))
    assert out.graph_count == 3 and out.graph_break_count == 2
    assert all("DDPOptimizer intentional graph-break" in r.reason for r in out.break_reasons)
    assert "optimize_ddp = False" in out.break_reasons[0].reason
    assert "DDPOptimizer" in str(out)
    # the pieces' ops are the whole graph's: 3 layers of transpose, matmul, add, and 2 relus
    assert out.op_count == 11


def test_one_bucket_or_optimize_ddp_off_is_one_graph_and_the_log_says_why(capsys):
    mini.set_logs("ddp")
    out = mini.explain(DDP(mlp()))(mini.randn(4, WIDTH))  # 25 MB: every parameter in one bucket
    assert out.graph_count == 1
    assert "is not split: its parameters fit one bucket" in capsys.readouterr().err
    with mini.config.patch(optimize_ddp=False):
        out = mini.explain(DDP(mlp(), bucket_cap_mb=LAYER_MB))(mini.randn(4, WIDTH))
    assert out.graph_count == 1
    assert "mini.config.optimize_ddp is False" in capsys.readouterr().err


def test_the_log_lists_each_bucket_with_its_parameters(capsys):
    mini.set_logs("ddp")
    x = mini.randn(4, WIDTH, requires_grad=False)
    mini.compile(DDP(mlp(), bucket_cap_mb=LAYER_MB), backend="aot_eager")(x).sum().backward()
    err = capsys.readouterr().err
    assert "made 3 buckets, one graph each" in err
    assert "submod_0: 4 ops, 2 parameters (4224 B): L['self']._modules['0']._parameters['weight']" in err
    assert "submod_2: 3 ops" in err


def test_a_graph_outside_ddp_is_not_cut():
    model = mlp()
    DDP(model, bucket_cap_mb=LAYER_MB)
    assert mini.explain(model)(mini.randn(4, WIDTH)).graph_count == 1


def test_optimize_ddp_is_a_bool_option():
    assert mini.config.optimize_ddp is True
    with pytest.raises(TypeError, match="optimize_ddp must be bool"):
        mini.config.optimize_ddp = 1


def test_a_function_calling_ddp_breaks_once_there_and_the_inner_module_is_still_cut():
    ddp = DDP(mlp(), bucket_cap_mb=LAYER_MB)
    x = mini.randn(4, WIDTH)
    out = mini.explain(lambda x: ddp(x).sum())(x)
    reasons = [r.reason for r in out.break_reasons]
    assert sum("DistributedDataParallel's code runs as it is" in r for r in reasons) == 1, reasons
    assert sum("DDPOptimizer intentional graph-break" in r for r in reasons) == 2, reasons
    assert out.graph_count == 4  # the 3 pieces, and the sum after the break
