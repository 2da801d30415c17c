"""Lab 1 -- the anatomy of eager execution.

Eager mode runs one kernel per operation. For

    y = relu((x + bias) * 0.5)

that is three kernels, and each one reads its inputs from memory and writes its whole output
back, so the two intermediates, (x + bias) and (x + bias) * 0.5, make a round trip through
memory that a single fused kernel would not. This lab measures it: around each operation it
reads mini.metrics (kernels launched, bytes moved) and times the operation, then compares the
total with the least a fused kernel must move (read x and bias once, write y once).

    PYTHONPATH=build/python .venv/bin/python labs/eager_anatomy.py [--quick] [--out DIR]
                                                            [--device cpu|cuda]

--device cuda runs the same ops on the GPU (2^26 elements, so that no tensor fits in the L2
cache; --quick 2^16), timed with CUDA events, and adds the copy ceiling measured in the same
run (a clone of x: bytes read + written / time) and each op's share of it. Without a GPU it
exits saying why.

Writes eager_anatomy.png / .svg (the bytes chart) and eager_anatomy.json (the raw numbers)
into --out (default: figures/ at the repository root).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import mini

from measure import cuda_ms, require_cuda, save_figure

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPRESSION = "relu((x + bias) * 0.5)"
FULL_SIZE = 2**24
CUDA_FULL_SIZE = 2**26
QUICK_SIZE = 2**16
TIMING_REPEATS = 10
QUICK_TIMING_REPEATS = 50  # tiny tensors: microsecond ops, so take the best of more calls
MB = 1e6


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the figure and the JSON (default: figures/)")
    parser.add_argument("--quick", action="store_true",
                        help=f"small tensors ({QUICK_SIZE} elements instead of {FULL_SIZE})")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    return parser.parse_args(argv)


# ---- measuring ------------------------------------------------------------------------------


def best_time_ms(run, repeats):
    """The fastest of `repeats` timed calls of run(), in milliseconds (after one warm-up)."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def cuda_best_time_ms(run, repeats):
    """The fastest of `repeats` calls of run() on the GPU (CUDA events), in milliseconds."""
    return cuda_ms(mini.cuda, run, repeats)


def measure_copy_ceiling(x, timer, repeats):
    """A clone of x: bytes read + written / time, the most a memory-bound op can reach here."""
    time_ms = timer(x.clone, repeats)
    moved = 2 * x.numel() * 4
    return {"numel": x.numel(), "bytes": moved, "time_ms": time_ms,
            "GBps": moved / (time_ms * 1e-3) / 1e9}


def count_one_call(run):
    """Runs run() once between a reset and a read of mini.metrics; returns (result, counts)."""
    mini.metrics.reset()
    result = run()
    counts = {
        "kernel_launches": mini.metrics.kernel_launches,
        "bytes_moved": mini.metrics.bytes_moved,
    }
    return result, counts


def measure_eager_steps(x, bias, repeats, timer=best_time_ms):
    """Runs the expression one op at a time, measuring each; returns (y, list of steps)."""
    steps = []

    def measure(name, expression, run):
        result, counts = count_one_call(run)
        steps.append({
            "op": name,
            "expression": expression,
            **counts,
            "time_ms": timer(run, repeats),
        })
        return result

    shifted = measure("add", "t1 = x + bias", lambda: x + bias)
    scaled = measure("mul", "t2 = t1 * 0.5", lambda: shifted * 0.5)
    output = measure("relu", "y = relu(t2)", lambda: mini.relu(scaled))
    return output, steps


def check_against_numpy(x, bias, y):
    expected = np.maximum((x.cpu().numpy() + bias.cpu().numpy()) * np.float32(0.5), 0)
    if not np.allclose(y.cpu().numpy(), expected, rtol=1e-6, atol=1e-6):
        sys.exit("eager_anatomy: mini's result differs from numpy's; the numbers below "
                 "would not mean anything")


# ---- reporting ------------------------------------------------------------------------------


def print_table(n, steps, total, fused_minimum_bytes, ratio, device="cpu", copy=None):
    where = "" if device == "cpu" else f" on {device}"
    print(f"\n{EXPRESSION}   x, bias: float32 [{n:,}]   eager{where}, one kernel per op\n")
    header = f"{'op':<6}{'what runs':<18}{'kernels':>8}{'moved (MB)':>12}"
    header += f"{'time (ms)':>11}{'GB/s':>8}" + (f"{'% copy':>8}" if copy else "")
    print(header)
    print("-" * len(header))
    for step in steps + [total]:
        gb_per_s = step["bytes_moved"] / (step["time_ms"] * 1e-3) / 1e9
        share = f"{100 * gb_per_s / copy['GBps']:>7.0f}%" if copy else ""
        print(f"{step['op']:<6}{step['expression']:<18}{step['kernel_launches']:>8}"
              f"{step['bytes_moved'] / MB:>12.2f}{step['time_ms']:>11.3f}{gb_per_s:>8.1f}"
              f"{share}")
    print("-" * len(header))
    print(f"{'fused':<6}{'y in one pass':<18}{1:>8}{fused_minimum_bytes / MB:>12.2f}")
    print("      (the least any kernel can move: read x and bias once, write y once)")
    if copy:
        print(f"\ncopy ceiling, this GPU, this run: a clone of {copy['numel']:,} float32 "
              f"({copy['bytes'] / MB:.0f} MB read + written)\nin {copy['time_ms']:.3f} ms = "
              f"{copy['GBps']:.0f} GB/s; % copy is each row's GB/s against it")
    steps_ms = sum(step["time_ms"] for step in steps)
    if total["time_ms"] > 1.5 * steps_ms:
        print(f"\nnote: the whole expression took {total['time_ms']:.3f} ms; its ops timed "
              f"alone, {steps_ms:.3f} ms together.\nEach whole call also allocates fresh "
              f"intermediates (fresh memory pays page faults on first touch);\non a busy "
              f"machine, timings also vary from run to run.")
    extra = total["bytes_moved"] - fused_minimum_bytes
    print(f"\neager moves {ratio:.2f}x the fused minimum: {extra / MB:.2f} MB more, the "
          f"intermediates t1 and t2\nwritten by one kernel and read back by the next.")


def plot(n, steps, fused_minimum_bytes, ratio, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"add": "#4C72B0", "mul": "#DD8452", "relu": "#55A868"}
    fig, ax = plt.subplots(figsize=(7, 5))
    bottom = 0.0
    for step in steps:
        height = step["bytes_moved"] / MB
        ax.bar(0, height, bottom=bottom, width=0.6, color=colors.get(step["op"], "gray"),
               label=f"eager {step['op']} ({step['expression']})")
        ax.text(0, bottom + height / 2, f"{height:.3g} MB", ha="center", va="center",
                color="white", fontsize=9)
        bottom += height
    fused_height = fused_minimum_bytes / MB
    ax.bar(1, fused_height, width=0.6, color="#8172B2",
           label="fused minimum (read x, bias; write y)")
    ax.text(1, fused_height / 2, f"{fused_height:.3g} MB", ha="center", va="center",
            color="white", fontsize=9)

    ax.axhline(fused_height, color="black", linestyle="--", linewidth=0.8)
    ax.text(0, bottom * 1.03, f"{ratio:.2f}x the fused minimum", ha="center", va="bottom",
            fontsize=11, fontweight="bold")
    ax.set_xticks([0, 1])
    ax.set_xticklabels([f"eager ({len(steps)} kernels)", "fused (1 kernel)"])
    ax.set_ylabel("bytes moved (MB)")
    ax.set_ylim(0, bottom * 1.45)
    ax.set_title(f"{EXPRESSION}, float32 [{n:,}]: memory traffic")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    paths = save_figure(fig, out_dir, "eager_anatomy")
    plt.close(fig)
    return paths


def main(argv=None):
    args = parse_args(argv)
    on_gpu = args.device == "cuda"
    if on_gpu:
        require_cuda("eager_anatomy")
    n = QUICK_SIZE if args.quick else (CUDA_FULL_SIZE if on_gpu else FULL_SIZE)
    repeats = QUICK_TIMING_REPEATS if args.quick else TIMING_REPEATS
    timer = cuda_best_time_ms if on_gpu else best_time_ms
    where = {"device": "cuda"} if on_gpu else {}

    mini.manual_seed(0)
    x = mini.randn(n, **where)
    bias = mini.randn(n, **where)
    y, steps = measure_eager_steps(x, bias, repeats, timer)
    check_against_numpy(x, bias, y)
    copy = measure_copy_ceiling(x, timer, repeats) if on_gpu else None

    _, whole = count_one_call(lambda: mini.relu((x + bias) * 0.5))
    whole["time_ms"] = timer(lambda: mini.relu((x + bias) * 0.5), repeats)
    total = {"op": "total", "expression": "all ops, one call", **whole}
    steps_bytes = sum(step["bytes_moved"] for step in steps)
    if steps_bytes != total["bytes_moved"]:
        print(f"note: the ops one at a time moved {steps_bytes} bytes, the whole expression "
              f"{total['bytes_moved']}; the ratio below uses the whole expression")

    itemsize = x[:1].cpu().numpy().itemsize
    fused_minimum_bytes = (x.numel() + bias.numel() + y.numel()) * itemsize
    ratio = total["bytes_moved"] / fused_minimum_bytes
    print_table(n, steps, total, fused_minimum_bytes, ratio, args.device, copy)

    args.out.mkdir(parents=True, exist_ok=True)
    figure_paths = plot(n, steps, fused_minimum_bytes, ratio, args.out)
    results = {
        "expression": EXPRESSION,
        "n": n,
        "dtype": "float32",
        "device": args.device,
        "timing": f"best of {repeats} calls, milliseconds" + (" (CUDA events)" if on_gpu else ""),
        "steps": steps,
        "whole_expression": total,
        "fused_minimum_bytes": fused_minimum_bytes,
        "eager_over_fused_bytes": ratio,
    }
    if copy:
        results["copy_ceiling"] = copy
    json_path = args.out / "eager_anatomy.json"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    print("\nwrote " + ", ".join(str(path) for path in figure_paths + [json_path]))


if __name__ == "__main__":
    main()
