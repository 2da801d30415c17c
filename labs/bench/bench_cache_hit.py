"""What a cache hit costs: a compiled call against the plain call, from one run.

The function is `x + 1` on a one-element tensor with backend "eager", so the difference is
the frame hook, the guard check and running the cached graph: mini's bar is at most 1 us
more than the plain call (torch 2.11 adds 10.8 us, ../shared/anchors/torch211_h200.md).
The check must not slow down as more code objects are cached, so the compiled call is
timed again after compiling 1000 other functions.

Then a model's cache hit: labs/gpt.py (4 blocks, written for torch) at toy widths, so that its
kernels cost little and its ~580 guards (every submodule's type, training flag and forward,
every parameter's tensor match) show. Its forward compiled with backend "eager" against the
plain forward: what the hook, the guard check and fetching the graph's 52 parameters add.

usage: PYTHONPATH=build/python .venv/bin/python labs/bench/bench_cache_hit.py [--quick] [--json PATH]
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mini

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/, for gpt.py

TORCH_211_OVERHEAD_US = 14.3 - 3.5  # anchors: compiled 14.3 us, plain 3.5 us


def per_call_us(fn, x, calls, repeats):
    """Median over `repeats` of the mean time of `calls` back-to-back calls, in microseconds."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def make_function(i):
    namespace = {}
    exec(f"def f{i}(x):\n    return x + {i}\n", namespace)  # a fresh code object each
    return namespace[f"f{i}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (CI-sized)")
    ap.add_argument("--json", help="write the numbers to this file")
    args = ap.parse_args()
    calls, repeats = (2000, 5) if args.quick else (20000, 15)

    def f(x):
        return x + 1

    x = mini.ones(1)
    compiled = mini.compile(f, backend="eager")
    compiled(x)  # compile once; every timed call below is a cache hit
    plain = per_call_us(f, x, calls, repeats)
    hit = per_call_us(compiled, x, calls, repeats)

    others = [mini.compile(make_function(i), backend="eager") for i in range(1000)]
    for g in others:
        g(x)
    hit_many = per_call_us(compiled, x, calls, repeats)
    plain_again = per_call_us(f, x, calls, repeats)

    extra, extra_many = hit - plain, hit_many - plain_again
    print("cache hit cost: f(x) = x + 1 on a 1-element tensor, backend='eager'")
    print(f"{'':38s}{'us/call':>10s}")
    print(f"{'plain call':38s}{plain:10.2f}")
    print(f"{'compiled call (cache hit)':38s}{hit:10.2f}")
    print(f"{'compiled call, 1000 more codes cached':38s}{hit_many:10.2f}")
    print(f"{'added by compiling':38s}{extra:10.2f}   bar <= 1.00 us: {'PASS' if extra <= 1.0 else 'FAIL'}")
    print(f"{'added, with 1000 more codes cached':38s}{extra_many:10.2f}   bar <= 1.00 us: "
          f"{'PASS' if extra_many <= 1.0 else 'FAIL'}")
    print(f"{'torch 2.11 adds (H200 anchor)':38s}{TORCH_211_OVERHEAD_US:10.2f}")
    model = model_hit(calls // 100, repeats)
    print(f"\na model's cache hit: labs/gpt.py, {model['blocks']} blocks at width {model['width']}, "
          f"{model['guards']} guards, backend='eager'")
    print(f"{'plain forward':38s}{model['plain_us']:10.1f}")
    print(f"{'compiled forward (cache hit)':38s}{model['hit_us']:10.1f}")
    print(f"{'added by compiling':38s}{model['hit_us'] - model['plain_us']:10.1f}   "
          f"({(model['hit_us'] - model['plain_us']) / model['guards'] * 1e3:.0f} ns a guard, at most)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(plain_us=plain, hit_us=hit, hit_many_us=hit_many, extra_us=extra,
                           extra_many_us=extra_many, torch_extra_us=TORCH_211_OVERHEAD_US, model=model),
                      fh, indent=2)


def model_hit(calls, repeats):
    """The GPT's forward, plain and compiled (a cache hit), in microseconds a call."""
    from gpt import GPT, Config
    config = Config(block_size=8, vocab_size=16, n_layer=4, n_head=4, n_embd=16)
    mini.manual_seed(0)
    model = GPT(config)
    idx = mini.from_numpy(np.random.default_rng(0).integers(0, 16, size=(2, 8)))
    guards = mini.explain(model)(idx, idx).guards
    count = sum(text.count("| | +- ") + text.count("\n| +- GLOBAL_STATE") for text in guards)
    mini.reset()
    compiled = mini.compile(model, backend="eager")
    with mini.no_grad():
        compiled(idx, idx)
        plain = per_call_us(lambda x: model(x, x), idx, calls, repeats)
        hit = per_call_us(lambda x: compiled(x, x), idx, calls, repeats)
    return dict(blocks=config.n_layer, width=config.n_embd, guards=count, plain_us=plain, hit_us=hit)


if __name__ == "__main__":
    main()
