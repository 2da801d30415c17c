"""Eager baseline: mini's eager ops against numpy on the same arrays, measured in one run.

    PYTHONPATH=build/python .venv/bin/python labs/bench/bench_eager.py [--quick] [--json PATH]

For each op it times mini and numpy on the same data (mini.from_numpy shares numpy's memory),
takes the median of several calls, and prints mini/numpy. The bar is "within 1.5x of numpy":
PASS when mini/numpy <= 1.5; a result that differs from numpy's fails whatever its time.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mini

BAR = 1.5
REPEATS = 15


def parse_args(argv):
    parser = argparse.ArgumentParser(description="mini eager vs numpy, one run.")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    return parser.parse_args(argv)


def sizes(quick):
    if quick:
        return {"elementwise": 2**20, "reduction": (1024, 1024), "matmul": 256}
    return {"elementwise": 2**24, "reduction": (4096, 4096), "matmul": 1024}


def cases(size):
    """(name, shape label, mini function, numpy function, tolerance) for every benchmark."""
    rng = np.random.default_rng(0)
    n = size["elementwise"]
    x_np = rng.standard_normal(n, dtype=np.float32)
    y_np = rng.standard_normal(n, dtype=np.float32)
    x, y = mini.from_numpy(x_np), mini.from_numpy(y_np)
    flat = f"[{n}]"

    rows, cols = size["reduction"]
    r_np = rng.standard_normal((rows, cols), dtype=np.float32)
    r = mini.from_numpy(r_np)
    grid = f"[{rows}, {cols}]"

    k = size["matmul"]
    a_np = rng.standard_normal((k, k), dtype=np.float32)
    b_np = rng.standard_normal((k, k), dtype=np.float32)
    a, b = mini.from_numpy(a_np), mini.from_numpy(b_np)
    square = f"[{k}, {k}] @ [{k}, {k}]"

    exact, summed = 1e-6, 1e-3  # summing reorders float32 additions: looser tolerance
    return [
        ("add", flat, lambda: x + y, lambda: x_np + y_np, exact),
        ("mul", flat, lambda: x * y, lambda: x_np * y_np, exact),
        ("mul scalar 2.5", flat, lambda: x * 2.5, lambda: x_np * np.float32(2.5), exact),
        ("relu", flat, lambda: mini.relu(x), lambda: np.maximum(x_np, 0), exact),
        ("exp", flat, lambda: mini.exp(x), lambda: np.exp(x_np), 1e-5),
        ("sigmoid", flat, lambda: mini.sigmoid(x),
         lambda: 1 / (1 + np.exp(-x_np)), 1e-5),
        ("sum (all)", grid, lambda: r.sum(), lambda: r_np.sum(), summed),
        ("sum dim=-1", grid, lambda: r.sum(dim=-1), lambda: r_np.sum(axis=-1), summed),
        ("mean (all)", grid, lambda: r.mean(), lambda: r_np.mean(), summed),
        ("amax (all)", grid, lambda: r.amax(), lambda: r_np.max(), exact),
        ("matmul", square, lambda: a @ b, lambda: a_np @ b_np, summed),
    ]


def median_ms(run, repeats):
    """Median of `repeats` timed calls of run(), in milliseconds (after one warm-up)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def same_result(mini_result, numpy_result, tolerance):
    got = np.asarray(mini_result.numpy(), dtype=np.float64)
    want = np.asarray(numpy_result, dtype=np.float64)
    return got.shape == want.shape and np.allclose(got, want, rtol=tolerance, atol=tolerance)


def measure(name, shape, run_mini, run_numpy, tolerance):
    row = {"op": name, "shape": shape}
    row["same_result"] = same_result(run_mini(), run_numpy(), tolerance)
    row["mini_ms"] = median_ms(run_mini, REPEATS)
    row["numpy_ms"] = median_ms(run_numpy, REPEATS)
    row["ratio"] = row["mini_ms"] / row["numpy_ms"]
    row["verdict"] = "PASS" if row["ratio"] <= BAR else "FAIL"
    if not row["same_result"]:
        row["verdict"] = "FAIL (result differs from numpy)"
    return row


def describe_machine():
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numpy_blas": f"{blas.get('name')} {blas.get('version')}",
        "OPENBLAS_NUM_THREADS": threads,
        "cpu_count": os.cpu_count(),
    }


def print_table(rows):
    op_width = max(len(row["op"]) for row in rows)
    shape_width = max(len(row["shape"]) for row in rows)
    header = (f"{'op':<{op_width}}  {'shape':<{shape_width}}  {'mini ms':>9}  "
              f"{'numpy ms':>9}  {'mini/numpy':>10}  vs {BAR}x")
    print(header)
    print("-" * len(header))
    for row in rows:
        timings = (f"{row['mini_ms']:>9.3f}  {row['numpy_ms']:>9.3f}  "
                   f"{row['ratio']:>9.2f}x")
        print(f"{row['op']:<{op_width}}  {row['shape']:<{shape_width}}  {timings}  "
              f"{row['verdict']}")


def main(argv=None):
    args = parse_args(argv)
    machine = describe_machine()
    print("numpy {numpy} ({numpy_blas}), OPENBLAS_NUM_THREADS={OPENBLAS_NUM_THREADS}, "
          "{cpu_count} CPUs, Python {python}".format(**machine))
    print(f"float32; median of {REPEATS} calls each; PASS when mini/numpy <= {BAR}\n")

    rows = [measure(*case) for case in cases(sizes(args.quick))]
    print_table(rows)
    passed = sum(row["verdict"] == "PASS" for row in rows)
    print(f"\n{passed} of {len(rows)} within {BAR}x of numpy")

    if args.json:
        report = {"machine": machine, "bar": BAR, "repeats": REPEATS, "quick": args.quick,
                  "rows": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
