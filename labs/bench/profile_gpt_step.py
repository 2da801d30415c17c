"""Where a GPT training step's time goes on the GPU: mini eager and compiled (and torch's two
modes where torch imports), each step under torch's profiler (CUPTI sees mini's driver-API
launches as it sees torch's).

Per mode, medians over the profiled steps: the step's wall time; the GPU's busy time (the
union of its kernels' and copies' intervals) and so its idle share; the host's time inside CUDA
API calls by kind (kernel launches, cuBLAS's own calls, copies, memsets, allocations); the
launches a step; and the kinds of kernels that run most often. A step whose GPU is idle most of
the time is host-bound: fewer launches, or cheaper ones, are what make it faster.

    PYTHONPATH=build/python python labs/bench/profile_gpt_step.py [--steps N] [--no-torch]
        [--json PATH]

Needs a GPU and torch (for its profiler); without them it says why and exits 0.
"""
import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mini  # noqa: E402
from measure import cuda_unavailable_reason  # noqa: E402

SIZES = dict(block_size=64, vocab_size=106, n_layer=4, n_head=4, n_embd=128)  # train_gpt.py's
BATCH = 16


def build(lib_name, mode):
    """(step, sync, lib): one training step of labs/gpt.py under `lib_name` ("mini" or
    "torch") in `mode` ("eager" or "compiled")."""
    if lib_name == "torch":
        import torch as lib
        from train_gpt import torch_gpt
        module = torch_gpt(lib)
    else:
        import gpt as module
        lib = mini
    lib.manual_seed(0)
    model = module.GPT(module.Config(**SIZES)).to("cuda")
    fn = (mini.compile(model) if lib is mini else lib.compile(model)) if mode == "compiled" else model
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-3, betas=(0.9, 0.95),
                                     device_type="cuda")
    rng = np.random.default_rng(1)
    x = lib.from_numpy(rng.integers(0, SIZES["vocab_size"], (BATCH, SIZES["block_size"]))).to("cuda")
    y = lib.from_numpy(rng.integers(0, SIZES["vocab_size"], (BATCH, SIZES["block_size"]))).to("cuda")

    def step():
        _, loss = fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    sync = mini.cuda.synchronize if lib is mini else lib.cuda.synchronize
    return step, sync


def api_kind(name):
    if "LaunchKernel" in name or name.startswith("cuLaunch"):
        return "kernel launch"
    if name.startswith("cublas") or name.startswith("cublasLt"):
        return "cuBLAS call"
    if "Memcpy" in name:
        return "copy"
    if "Memset" in name:
        return "memset"
    if "Malloc" in name or "Free" in name or "MemAlloc" in name:
        return "allocation"
    if "Synchronize" in name:
        return "synchronize"
    return "other"


def union_us(intervals):
    total, end = 0.0, -1.0
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def profile_mode(step, sync, steps):
    from torch.profiler import ProfilerActivity, profile, record_function
    for _ in range(5):  # compile and warm up
        step()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            with record_function(f"gpt step {i}"):
                step()
                sync()
    events = list(prof.events())
    ranges = sorted((e.time_range.start, e.time_range.end) for e in events if e.name.startswith("gpt step "))
    per_step = []
    for start, end in ranges:
        inside = [e for e in events if start <= e.time_range.start <= end]
        # the GPU's work, without the profiler's own range of the step (record_function's
        # annotation also appears on the GPU's timeline)
        gpu = [e for e in inside if e.device_type.name == "CUDA" and not e.name.startswith("gpt step")]
        api = collections.Counter()
        api_us = collections.Counter()
        for e in inside:
            if e.device_type.name == "CPU" and (e.name.startswith("cu") or e.name.startswith("cublas")):
                kind = api_kind(e.name)
                api[kind] += 1
                api_us[kind] += e.time_range.end - e.time_range.start
        busy = union_us([(e.time_range.start, e.time_range.end) for e in gpu])
        names = collections.Counter(e.name[:60] for e in gpu)
        per_step.append(dict(wall_us=end - start, gpu_busy_us=busy, gpu_events=len(gpu),
                             api=dict(api), api_us=dict(api_us), names=names))
    med = lambda key: statistics.median(s[key] for s in per_step)  # noqa: E731
    kinds = sorted({k for s in per_step for k in s["api"]})
    return {
        "wall_us": med("wall_us"),
        "gpu_busy_us": med("gpu_busy_us"),
        "gpu_events": med("gpu_events"),
        "api_calls": {k: statistics.median(s["api"].get(k, 0) for s in per_step) for k in kinds},
        "api_us": {k: statistics.median(s["api_us"].get(k, 0) for s in per_step) for k in kinds},
        "top_kernels": per_step[-1]["names"].most_common(12),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-torch", action="store_true", help="mini's modes only")
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    args = parser.parse_args(argv)
    why = cuda_unavailable_reason()
    if why:
        print(f"profile_gpt_step: skipped: no CUDA device ({why})")
        return 0
    try:
        import torch  # noqa: F401  (its profiler)
    except ImportError:
        print("profile_gpt_step: skipped: torch is not importable (its profiler reads the GPU's timeline)")
        return 0
    print(f"profile_gpt_step: labs/gpt.py {SIZES}, batch {BATCH}, one training step (forward, "
          f"backward, fused AdamW), {args.steps} steps profiled, {mini.cuda.get_device_name(0)}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    runs = [("mini", "eager"), ("mini", "compiled")] + ([] if args.no_torch else [("torch", "eager"), ("torch", "compiled")])
    results = {}
    for lib, mode in runs:
        step, sync = build(lib, mode)
        r = profile_mode(step, sync, args.steps)
        results[f"{lib} {mode}"] = r
        idle = 100 * (1 - r["gpu_busy_us"] / r["wall_us"])
        print(f"\n{lib} {mode}: step {r['wall_us'] / 1e3:.2f} ms, GPU busy {r['gpu_busy_us'] / 1e3:.2f} ms "
              f"({idle:.0f}% idle), {r['gpu_events']:.0f} GPU events")
        for kind in r["api_calls"]:
            calls, us = r["api_calls"][kind], r["api_us"][kind]
            print(f"  {kind:14s} {calls:6.0f} calls  {us / 1e3:6.2f} ms host  "
                  f"{us / max(calls, 1):5.1f} us each")
        print("  most frequent GPU work: " + "; ".join(f"{n} x{c}" for n, c in r["top_kernels"][:8]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
