"""DistributedDataParallel on Gloo, 2 and 4 processes on this machine (tests/python/ddp_worker.py is
one rank): after one step every rank's gradients equal one process's on the whole batch, eager
and compiled with the graph whole or split at the buckets; split, the compiled model is several
graphs and each bucket's all-reduce but the last starts while backward compute still runs,
whole, every one starts after; no_sync accumulates locally; the parameters are broadcast at
construction; ranks with different parameters get a clear error, not a hang."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import mini
import mini.distributed as dist
from conftest import HAS_CUDA

WORKER = Path(__file__).with_name("ddp_worker.py")
TIMEOUT = 120  # seconds for a whole job: a hang fails the test instead of the run
# Gloo comes from Debian's libgloo-dev (scripts/setup.sh); the GPU machine may build without it
requires_gloo = pytest.mark.skipif(not dist.is_gloo_available(), reason="this build of mini has no Gloo (libgloo-dev)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world, *args):
    """Starts `world` ranks of ddp_worker.py with torchrun's variables; their JSON lines by rank."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
                   MINI_PYTHON_DIR=os.path.dirname(os.path.dirname(mini.__file__)))
        procs.append(subprocess.Popen([sys.executable, str(WORKER), *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = {}
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"rank {rank} of {world} did not finish in {TIMEOUT} s")
        assert p.returncode == 0, f"rank {rank} failed:\n{err[-3000:]}"
        results[rank] = json.loads(out.strip().splitlines()[-1])
    return results


@pytest.fixture(scope="module", params=[2, 4], ids=["2 ranks", "4 ranks"])
def trained(request):
    world = request.param
    backends = "aot_eager,counter" + (",inductor" if world == 2 else "")
    return world, run_ranks(world, "train", backends)


def modes(results):
    return [key for key in results[0] if key == "eager" or ":" in key]


@requires_gloo
def test_gradients_equal_one_process_on_the_whole_batch(trained):
    world, results = trained
    for rank, r in results.items():
        for mode in modes(results):
            assert r[mode]["grads_ok"], f"rank {rank}, {mode}"
            assert r[mode]["buckets"] == 4


@requires_gloo
def test_split_graph_has_a_piece_per_bucket_whole_graph_one(trained):
    _, results = trained
    assert results[0]["split:counter"]["pieces"] == 4
    assert results[0]["whole:counter"]["pieces"] == 1


@requires_gloo
def test_split_all_reduces_start_during_backward_whole_after_it(trained):
    _, results = trained
    for mode in [m for m in modes(results) if m.startswith("split:") and "counter" not in m] + ["eager"]:
        launched = results[0][mode]["overlap"]
        assert len(launched) == 4 and all(launched[:-1]), (mode, launched)
    for mode in [m for m in modes(results) if m.startswith("whole:") and "counter" not in m]:
        assert not any(results[0][mode]["overlap"]), (mode, results[0][mode]["overlap"])


@requires_gloo
def test_broadcast_at_construction_and_no_sync_accumulates_locally(trained):
    _, results = trained
    for rank, r in results.items():
        assert r["broadcast_ok"], rank
        assert r["no_sync_local_ok"], rank
        assert r["accumulated_ok"], rank


@requires_gloo
def test_ranks_with_different_parameters_get_a_clear_error():
    results = run_ranks(2, "mismatch")
    for rank, r in results.items():
        assert r["error"] and "do not have the same parameters" in r["error"], rank
        assert "rank 0: 8 parameters" in r["error"] and "rank 1: 10 parameters" in r["error"], r["error"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU")
def test_ddp_on_one_gpu_over_nccl():
    result = run_ranks(1, "cuda")[0]
    assert result["eager"] and result["split"], result
