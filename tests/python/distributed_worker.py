"""One process of the multi-process tests of test_distributed.py, started by the launcher
(python -m mini.distributed.run) or directly with torchrun's variables set:

    distributed_worker.py MODE [TIMEOUT_SECONDS]

Modes:
  collectives  every collective, dtype and reduce op, checked against numpy (each rank knows
               every rank's input: a function of the rank); async Works; ranks that pass
               different sizes or collectives get an error and stay in step. Prints "OK <rank>".
  timeout      rank 1 sleeps through rank 0's all_reduce: rank 0's error must name rank 1.
  fail         rank 1 raises; the others would wait forever: the launcher must stop them.
  exits        rank 1 exits quietly; rank 0's next collective must say a peer went away.
"""
import datetime
import os
import sys
import time

import numpy as np

import mini
import mini.distributed as dist

DTYPES = {"float32": np.float32, "float64": np.float64, "bfloat16": np.float32, "int64": np.int64}


def rank_data(rank, n, dtype_name):
    """Rank `rank`'s input: small integers (exact in bfloat16), distinct per rank."""
    values = (np.arange(n) % 7 + 1) * (rank + 1) + rank
    return values.astype(DTYPES[dtype_name])


def tensor(values, dtype_name):
    return mini.tensor(values.tolist(), dtype=getattr(mini, dtype_name))


def check(what, got, want):
    got = np.array(got.tolist(), dtype=np.float64)
    np.testing.assert_allclose(got, np.asarray(want, dtype=np.float64), rtol=0, atol=0,
                               err_msg=f"rank {dist.get_rank()}: {what}")


def reduce_np(stack, op):
    return {"sum": stack.sum(0), "avg": stack.sum(0) / stack.shape[0], "max": stack.max(0)}[op]


def check_collectives(rank, world, dtype_name):
    n = 12
    everyone = np.stack([rank_data(r, n * world, dtype_name) for r in range(world)]).astype(np.float64)
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
    if dtype_name != "int64":
        ops["avg"] = dist.ReduceOp.AVG
    for name, op in ops.items():
        t = tensor(rank_data(rank, n * world, dtype_name), dtype_name)
        dist.all_reduce(t, op=op)
        check(f"all_reduce {name} {dtype_name}", t, reduce_np(everyone, name))
        out = mini.zeros(n, dtype=getattr(mini, dtype_name))
        dist.reduce_scatter_tensor(out, tensor(rank_data(rank, n * world, dtype_name), dtype_name), op=op)
        check(f"reduce_scatter {name} {dtype_name}", out, reduce_np(everyone, name)[rank * n:(rank + 1) * n])
    t = tensor(rank_data(rank, n, dtype_name), dtype_name)
    dist.broadcast(t, src=world - 1)
    check(f"broadcast {dtype_name}", t, rank_data(world - 1, n, dtype_name))
    gathered = mini.zeros(world, n, dtype=getattr(mini, dtype_name))
    dist.all_gather_into_tensor(gathered, tensor(rank_data(rank, n, dtype_name), dtype_name))
    check(f"all_gather {dtype_name}", gathered, np.stack([rank_data(r, n, dtype_name) for r in range(world)]))


def check_async(rank, world):
    t = mini.ones(1000)
    first = dist.all_reduce(t, async_op=True)
    second = dist.all_reduce(t, async_op=True)  # queued after the first: sums the sums
    second.wait()
    assert first.is_completed() and second.is_completed()
    assert first.wait() is True
    check("two async all_reduces in order", t, np.full(1000, world * world))
    works = [dist.broadcast(mini.full((3,), float(rank)), src=r, async_op=True) for r in range(world)]
    for w in reversed(works):
        w.wait()
    assert dist.barrier() is None


def check_disagreement(rank):
    try:
        dist.all_reduce(mini.ones(4 + rank))
        raise AssertionError("all_reduce of different sizes did not raise")
    except dist.DistBackendError as e:
        assert "ranks called different collectives" in str(e) and "rank 1: all_reduce of 5" in str(e), e
    try:
        dist.broadcast(mini.ones(4), src=0) if rank == 1 else dist.all_reduce(mini.ones(4))
        raise AssertionError("broadcast against all_reduce did not raise")
    except dist.DistBackendError as e:
        assert "rank 1: broadcast" in str(e), e
    t = mini.ones(2)
    dist.all_reduce(t)  # still in step
    check("all_reduce after a disagreement", t, np.full(2, dist.get_world_size()))


def check_environment(rank, world):
    assert os.environ["RANK"] == str(rank) and os.environ["WORLD_SIZE"] == str(world)
    assert dist.get_node_local_rank() == rank  # one node
    assert dist.get_backend() == "gloo" and dist.is_initialized()


def main():
    mode = sys.argv[1]
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "collectives":
        check_environment(rank, world)
        for dtype_name in DTYPES:
            check_collectives(rank, world, dtype_name)
        check_async(rank, world)
        check_disagreement(rank)
        print(f"OK {rank}")
    elif mode == "timeout":
        if rank == 1:
            time.sleep(timeout + 4)
        else:
            dist.all_reduce(mini.ones(3))
    elif mode == "fail":
        if rank == 1:
            raise RuntimeError("boom from rank 1")
        time.sleep(120)
    elif mode == "exits":
        if rank == 1:
            os._exit(0)
        time.sleep(0.5)
        dist.all_reduce(mini.ones(3))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
