"""mini.distributed (mini/distributed/, notes/distributed.md): the collectives on Gloo with 2 and 4
processes, checked against numpy; async Works; every mistake a user can make, each a clear
exception (never a hang); the launcher's flags, variables and failure propagation; and, on a GPU,
the NCCL backend (world size 1: one GPU).

The multi-process cases run tests/python/distributed_worker.py; those of one process run here,
in world size 1 or against a rank that never comes (short timeouts)."""
import datetime
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mini
import mini.distributed as dist
from conftest import HAS_CUDA, requires_cuda

WORKER = str(Path(__file__).with_name("distributed_worker.py"))
PACKAGE_DIR = mini.__path__[0].rsplit(os.sep, 1)[0]
SHORT = datetime.timedelta(seconds=1)
# Gloo comes from Debian's libgloo-dev (scripts/setup.sh); the GPU machine may build without it
requires_gloo = pytest.mark.skipif(not dist.is_gloo_available(),
                                   reason="this build of mini has no Gloo (libgloo-dev)")


def child_env(**variables):
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR, OMP_NUM_THREADS="1", **variables)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if name not in variables:
            env.pop(name, None)
    return env


def launch(nproc, *worker_args, flag="--nproc-per-node", timeout=60):
    command = [sys.executable, "-m", "mini.distributed.run", flag, str(nproc), WORKER, *worker_args]
    return subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture
def single():
    """A gloo group of world size 1 in this process, destroyed afterwards."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


# ---- the collectives, 2 and 4 processes ----------------------------------------------------
@requires_gloo
def test_collectives_through_the_launcher_with_two_processes():
    done = launch(2, "collectives", flag="--nproc_per_node")  # torchrun's spelling
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[rank0]: OK 0" in done.stdout and "[rank1]: OK 1" in done.stdout


@requires_gloo
def test_collectives_with_four_processes_started_as_torchrun_would():
    port = free_port()
    procs = [subprocess.Popen([sys.executable, WORKER, "collectives"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=child_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="4",
                                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
             for r in range(4)]
    outputs = [p.communicate(timeout=90)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0 and f"OK {rank}" in out, out


# ---- world size 1, in this process ---------------------------------------------------------
@requires_gloo
def test_world_of_one(single):
    assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    t = mini.tensor([1.5, -2.0, 3.0])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert t.tolist() == [1.5, -2.0, 3.0]
    out = mini.zeros(2, 3, dtype=mini.bfloat16)
    work = dist.all_gather_into_tensor(out[1:], mini.ones(3, dtype=mini.bfloat16), async_op=True)
    assert work.wait() is True and work.is_completed()
    assert out.tolist() == [[0, 0, 0], [1, 1, 1]]


@pytest.mark.parametrize("call, error, words", [
    (lambda: dist.all_reduce(mini.ones(4, 4).t()), ValueError, "not contiguous"),
    (lambda: dist.all_reduce(mini.ones(3, dtype=mini.bool)), TypeError, "dtype bool"),
    (lambda: dist.all_reduce(mini.ones(3, dtype=mini.int64), op=dist.ReduceOp.AVG), TypeError,
     "AVG needs a floating"),
    (lambda: dist.all_reduce(mini.ones(3), op="sum"), ValueError, "ReduceOp.SUM"),
    (lambda: dist.all_gather_into_tensor(mini.ones(5), mini.ones(2)), ValueError, "must hold"),
    (lambda: dist.reduce_scatter_tensor(mini.ones(5), mini.ones(2)), ValueError, "must hold"),
    (lambda: dist.all_gather_into_tensor(mini.ones(2, dtype=mini.float64), mini.ones(2)), TypeError,
     "one dtype"),
    (lambda: dist.broadcast(mini.ones(2), src=3), ValueError, "src=3"),
    (lambda: dist.all_reduce(np.ones(2)), TypeError, "mini.Tensor"),
    (lambda: dist.all_reduce(mini.ones(2), group=object()), ValueError, "group=None"),
    (lambda: dist.init_process_group("gloo"), ValueError, "twice"),
], ids=["strided", "bool", "int-avg", "op", "gather-size", "scatter-size", "dtypes", "src",
        "numpy", "group", "twice"])
@requires_gloo
def test_mistakes_with_a_group_are_clear_errors(single, call, error, words):
    with pytest.raises(error, match=words):
        call()
    t = mini.ones(2)
    dist.all_reduce(t)  # the group is still usable
    assert t.tolist() == [1, 1]


def test_collectives_before_init_process_group():
    assert not dist.is_initialized()
    for call in (lambda: dist.all_reduce(mini.ones(2)), dist.get_rank, dist.barrier):
        with pytest.raises(ValueError, match="has not been initialized"):
            call()


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"])
@requires_gloo
def test_missing_environment_variables(monkeypatch, missing):
    for name, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="29999", RANK="0", WORLD_SIZE="1").items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(missing)
    with pytest.raises(ValueError, match=f"environment variable {missing} expected.*mini.distributed.run"):
        dist.init_process_group("gloo")


@pytest.mark.parametrize("rank, world_size", [(2, 2), (-1, 2), (0, 0)])
@requires_gloo
def test_rank_outside_the_world(rank, world_size):
    with pytest.raises(ValueError, match="RANK=|WORLD_SIZE=|rank="):
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29999", rank=rank,
                                world_size=world_size, timeout=SHORT)
    assert not dist.is_initialized()


def test_unknown_backend():
    with pytest.raises(ValueError, match="Invalid backend: 'mpi'"):
        dist.init_process_group("mpi", init_method="tcp://127.0.0.1:29999", rank=0, world_size=1)


@pytest.mark.skipif(dist.is_nccl_available(), reason="NCCL can run here")
def test_nccl_without_a_gpu_says_why():
    with pytest.raises(RuntimeError, match="backend='nccl'.*backend='gloo'"):
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29999", rank=0, world_size=1)
    assert not dist.is_initialized()


@requires_gloo
def test_a_rank_that_never_joins_is_named():
    started = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="rank 1 of 2 never joined"):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                world_size=2, timeout=SHORT)
    with pytest.raises(dist.DistStoreError, match="missing rank: 0"):  # nobody hosts the store
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=1,
                                world_size=2, timeout=SHORT)
    assert time.monotonic() - started < 10
    assert not dist.is_initialized()


@requires_gloo
def test_port_in_use():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        with pytest.raises(dist.DistNetworkError, match="already in use"):
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{taken.getsockname()[1]}",
                                    rank=0, world_size=1, timeout=SHORT)


@requires_gloo
def test_ranks_that_disagree_on_the_world_size():
    port = free_port()
    other = subprocess.Popen(
        [sys.executable, "-c", "import datetime, mini.distributed as d\n"
         "d.init_process_group('gloo', timeout=datetime.timedelta(seconds=20))"],
        env=child_env(RANK="1", WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with pytest.raises(ValueError, match="rank 1 was started with WORLD_SIZE=3, this rank .0. with WORLD_SIZE=2"):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2,
                                timeout=datetime.timedelta(seconds=20))
    out = other.communicate(timeout=30)[0]
    assert other.returncode != 0 and "rank 0 was started with WORLD_SIZE=2" in out, out


# ---- failures among processes, and the launcher --------------------------------------------
@requires_gloo
def test_a_rank_that_never_calls_the_collective_is_named():
    done = launch(2, "timeout", "1")
    assert done.returncode != 0
    assert "[rank0]:" in done.stderr and "all_reduce #0 of float32[3] (sum) timed out after 1 s" in done.stderr
    assert "rank 1 never reached it" in done.stderr, done.stderr


@requires_gloo
def test_the_launcher_stops_the_others_when_one_fails():
    started = time.monotonic()
    done = launch(2, "fail")
    assert done.returncode == 1
    assert "[rank1]: RuntimeError: boom from rank 1" in done.stderr
    assert "rank 1 (pid" in done.stderr and "exited with code 1; stopped the other ranks" in done.stderr
    assert time.monotonic() - started < 30  # rank 0 would have slept for 120 s


@requires_gloo
def test_a_rank_that_exits_is_reported_by_the_others():
    done = launch(2, "exits")
    assert done.returncode != 0
    assert "another rank has probably exited" in done.stderr.lower(), done.stderr


def test_the_launcher_rejects_bad_flags():
    run = [sys.executable, "-m", "mini.distributed.run"]
    for flags, words in ((["--nproc-per-node", "0"], "positive number"),
                         (["--nnodes", "2"], "--master-port is required"),
                         (["--nnodes", "1:2"], "elastic")):
        done = subprocess.run(run + flags + [WORKER], env=child_env(), capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and words in done.stderr, done.stderr


# ---- NCCL (a GPU) ---------------------------------------------------------------------------
# both backends where Gloo is built too (the GPU machine may build without it)
NCCL_BACKEND = "cpu:gloo,cuda:nccl" if dist.is_gloo_available() else "nccl"


@pytest.fixture
def nccl_single():
    dist.init_process_group(NCCL_BACKEND, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64"])
@pytest.mark.usefixtures("nccl_single")
@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_nccl_collectives_of_one_gpu(dtype):
    dt = getattr(mini, dtype)
    values = np.arange(8) % 5 + 1
    t = mini.tensor(values.tolist(), dtype=dt, device="cuda")
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX] + ([dist.ReduceOp.AVG] if dtype != "int64" else [])
    for op in ops:
        dist.all_reduce(t, op=op)
    work = dist.broadcast(t, src=0, async_op=True)
    work.wait()
    gathered = mini.zeros(8, dtype=dt, device="cuda")
    dist.all_gather_into_tensor(gathered, (t * 2).contiguous())
    scattered = mini.zeros(8, dtype=dt, device="cuda")
    dist.reduce_scatter_tensor(scattered, gathered)
    dist.barrier()
    assert t.cpu().tolist() == values.tolist()
    assert scattered.cpu().tolist() == (values * 2).tolist()
    assert dist.get_backend() == NCCL_BACKEND
    if dist.is_gloo_available():
        cpu = mini.ones(3)
        dist.all_reduce(cpu)  # the CPU tensor goes to the gloo group
        assert cpu.tolist() == [1, 1, 1]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_tensors_on_the_wrong_device_for_the_backend():
    cases = [("nccl", lambda: mini.ones(2), "nccl, moves CUDA")]
    if dist.is_gloo_available():
        cases.append(("gloo", lambda: mini.ones(2, device="cuda"), "gloo, moves CPU"))
    for backend, tensor, words in cases:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                                world_size=1)
        try:
            with pytest.raises(ValueError, match=words):
                dist.all_reduce(tensor())
        finally:
            dist.destroy_process_group()


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_nccl_work_orders_the_compute_stream_after_it(nccl_single):
    big = mini.ones(1 << 22, device="cuda")
    works = [dist.all_reduce(big, async_op=True) for _ in range(3)]
    for w in works:
        w.wait()
    assert (big * 1).sum().item() == float(1 << 22)  # kernels after wait() see the result
    assert all(w.is_completed() for w in works)  # item() waited for the compute stream
