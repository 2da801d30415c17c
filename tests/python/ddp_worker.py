"""One rank of the DDP tests: tests/python/test_ddp.py starts WORLD_SIZE of these (the variables
torchrun sets), each prints one JSON line of what it found.

    ddp_worker.py train BACKENDS     one DDP step per mode (eager, then compiled by each backend
                                     without and with the graph split): gradients against one
                                     process on the whole batch, the pieces compiled, when each
                                     bucket's all-reduce started; the broadcast at construction;
                                     no_sync
    ddp_worker.py mismatch           rank 1 wraps a model with one layer more: the error
    ddp_worker.py cuda               one rank on a GPU (NCCL): DDP's gradients, eager and compiled
                                     split, against the model's own
"""
import json
import os
import sys

import numpy as np

_PY_DIR = os.environ.get("MINI_PYTHON_DIR")
if _PY_DIR and _PY_DIR not in sys.path:
    sys.path.insert(0, _PY_DIR)

import mini  # noqa: E402
import mini.distributed as dist  # noqa: E402
import mini.nn as nn  # noqa: E402
from mini.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

WIDTH, LAYERS, BATCH = 32, 4, 4   # BATCH rows per rank
LAYER_MB = (WIDTH * WIDTH + WIDTH) * 4 / 2 ** 20  # one layer's parameters: a bucket each


def make_model(seed, layers=LAYERS):
    mini.manual_seed(seed)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*blocks[:-1])


def batch(step, world):
    """The whole batch of a step (every rank makes the same one): inputs and targets."""
    mini.manual_seed(1000 + step)
    return mini.randn(BATCH * world, WIDTH), mini.randn(BATCH * world, WIDTH)


def shard(t, rank):
    return t[rank * BATCH:(rank + 1) * BATCH].contiguous()


def grads(model):
    return {n: p.grad.tolist() for n, p in model.named_parameters()}


def reference(steps, world):
    """One process, rank 0's initial model, the whole batch of each step: the gradients."""
    model = make_model(seed=0)
    for step in steps:
        x, y = batch(step, world)
        nn.functional.mse_loss(model(x), y).backward()
    return grads(model)


def close(a, b, tol=1e-5):
    """Two {name: values} dicts equal within float32 tolerance (tol=0: exactly)."""
    return a.keys() == b.keys() and all(np.allclose(a[n], b[n], rtol=tol, atol=tol) for n in a)


def overlap(timeline):
    """Per bucket launched, in launch order: did backward compute go on after it started (kernels
    ran between its launch and the end of backward)?"""
    done = [e for e in timeline if e.kind == "done"][-1].compute_kernels
    return [e.compute_kernels < done for e in timeline if e.kind == "launch"]


def one_step(mode, backend, rank, world):
    mini.reset()
    model = make_model(seed=rank)  # every rank differs until DDP broadcasts rank 0's
    ddp = DDP(model, bucket_cap_mb=LAYER_MB)
    counter = mini.CompileCounter()
    run = ddp
    if mode != "eager":
        run = mini.compile(ddp, backend=counter if backend == "counter" else backend)
    x, y = batch(0, world)
    with mini.config.patch(optimize_ddp=mode == "split"):
        nn.functional.mse_loss(run(shard(x, rank)), shard(y, rank)).backward()
    out = {"grads_ok": close(grads(model), reference([0], world)), "overlap": overlap(ddp._timeline),
           "buckets": len(ddp.bucket_sizes)}
    if backend == "counter":
        out["pieces"] = counter.frame_count
    return out


def no_sync_steps(rank, world):
    """Step 0 under no_sync (local gradients), then step 1 synchronized: the average of the sums."""
    model = make_model(seed=rank)
    ddp = DDP(model, bucket_cap_mb=LAYER_MB)
    initial_equal = close({n: p.tolist() for n, p in model.named_parameters()},
                          {n: p.tolist() for n, p in make_model(seed=0).named_parameters()}, tol=0)
    x, y = batch(0, world)
    with ddp.no_sync():
        nn.functional.mse_loss(ddp(shard(x, rank)), shard(y, rank)).backward()
    local = make_model(seed=0)
    nn.functional.mse_loss(local(shard(x, rank)), shard(y, rank)).backward()
    local_ok = close(grads(model), grads(local)) and not any(e.kind == "launch" for e in ddp._timeline)
    x, y = batch(1, world)
    nn.functional.mse_loss(ddp(shard(x, rank)), shard(y, rank)).backward()
    # the mean over ranks of (step 0's local gradient + step 1's) = the whole batches' gradients, summed
    return {"broadcast_ok": initial_equal, "no_sync_local_ok": local_ok,
            "accumulated_ok": close(grads(model), reference([0, 1], world))}


def train(backends):
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {"eager": one_step("eager", None, rank, world)}
    for backend in backends:
        for mode in ("whole", "split"):
            results[f"{mode}:{backend}"] = one_step(mode, backend, rank, world)
    results.update(no_sync_steps(rank, world))
    return results


def cuda_step():
    out = {}
    for mode in ("eager", "split"):
        mini.reset()
        model = make_model(seed=0).to("cuda")
        ddp = DDP(model, bucket_cap_mb=LAYER_MB)
        run = ddp if mode == "eager" else mini.compile(ddp, backend="inductor")
        x, y = (t.to("cuda") for t in batch(0, 1))
        nn.functional.mse_loss(run(x), y).backward()
        alone = make_model(seed=0).to("cuda")
        nn.functional.mse_loss(alone(x), y).backward()
        out[mode] = close(grads(model), grads(alone), tol=1e-4)
    return out


def mismatch():
    rank = dist.get_rank()
    try:
        DDP(make_model(seed=0, layers=LAYERS + rank))
    except RuntimeError as e:
        return {"error": str(e)}
    return {"error": None}


def main():
    mini.set_num_threads(1)
    scenario = sys.argv[1]
    cuda_backend = "cpu:gloo,cuda:nccl" if dist.is_gloo_available() else "nccl"
    dist.init_process_group(cuda_backend if scenario == "cuda" else "gloo")
    try:
        if scenario == "train":
            result = train(sys.argv[2].split(","))
        else:
            result = cuda_step() if scenario == "cuda" else mismatch()
    finally:
        dist.destroy_process_group()
    print(json.dumps({"rank": int(os.environ["RANK"]), **result}), flush=True)


if __name__ == "__main__":
    main()
