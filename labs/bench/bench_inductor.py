"""Inductor on the CPU: eager mini against mini.compile(backend="inductor"), measured in one run.

    PYTHONPATH=build/python .venv/bin/python labs/bench/bench_inductor.py [--quick] [--json PATH]

Issue 5's bars, all checked from numbers measured in this run:
  * chain8 (the 8-op chain of ../shared/anchors/torch_gpu_anchor.py) on 2^24 float32 elements:
    compiled at least 4x faster than eager mini, and at most 1.2x the time of a hand-written
    C++ OpenMP loop for the same expression (built with mini's own compiler command; the faster
    of two: with libm's sin/cos/exp, and with mini's vectorizable float32 math);
  * decomposed softmax and layer norm on [4096, 4096]: speedup >= 0.6 x (eager bytes moved /
    compiled bytes moved), bytes as counted by mini.metrics;
  * relu(x @ w + b) at batch 8 (1024 -> 1024): compiled no slower than eager (>= 0.95x);
  * cold compile of a small graph in a fresh process with an empty cache: <= 0.5 s;
    warm (same cache directory, another fresh process): <= 5 ms.
transform (relu((x + b) * 0.5)) is measured for context, without a bar.

Times are medians over several samples after warm-up; a sample is enough back-to-back calls to
last ~10 ms. Each compiled result is checked against eager before it is timed: a result that
differs fails whatever its time. The copy bandwidth (mini's x.clone(), bytes read + written)
is printed as the machine's memory ceiling.
"""

import argparse
import ctypes
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

import mini
from mini._cpu import openblas

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/, for programs.py
from programs import chain8, ffn_out, layernorm_decomp, softmax_decomp, transform  # noqa: E402

CHAIN_BAR = 4.0           # chain8: compiled at least 4x faster than eager
HANDWRITTEN_BAR = 1.2     # chain8: compiled time <= 1.2 x hand-written C++ loop
BYTES_FACTOR = 0.6        # softmax / layer norm: speedup >= 0.6 x bytes ratio
NO_SLOWER_BAR = 0.95      # relu(x @ w + b): compiled >= 0.95x eager speed
COLD_BAR_S = 0.5
WARM_BAR_S = 0.005
TORCH_COLD_CPU_S = 54.67  # ../shared/anchors/torch211_h200.md: cold Inductor CPU compile
TORCH_COLD_CUDA_S = 0.39


def parse_args(argv):
    parser = argparse.ArgumentParser(description="mini eager vs inductor (CPU), one run.")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a fast check (CI)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    return parser.parse_args(argv)


def sizes(quick):
    if quick:
        return dict(rows=1024, cols=1024, batch=8, features=256, samples=5)
    return dict(rows=4096, cols=4096, batch=8, features=1024, samples=15)


# --- the workloads (labs/programs.py, as in ../shared/anchors/torch_gpu_anchor.py) ------------

def workloads(size):
    """(name, shape label, function, inputs, bar kind) for every row of the table."""
    mini.manual_seed(0)
    r, c = size["rows"], size["cols"]
    k = size["features"]
    grid = f"[{r}, {c}]"
    return [
        ("transform", grid, transform, (mini.randn(r, c), mini.randn(c)), None),
        ("chain8", grid, chain8, (mini.randn(r, c), mini.randn(r, c)), "chain"),
        ("softmax (decomposed)", grid, softmax_decomp, (mini.randn(r, c),), "bytes"),
        ("layer norm (decomposed)", grid, layernorm_decomp,
         (mini.randn(r, c), mini.randn(c), mini.randn(c)), "bytes"),
        (f"relu(x @ w + b), b{size['batch']}", f"[{size['batch']}, {k}] @ [{k}, {k}]", ffn_out,
         (mini.randn(size["batch"], k), mini.randn(k, k), mini.randn(k)), "no_slower"),
    ]


# --- timing -----------------------------------------------------------------------------------

def median_ms(run, samples, warmup=2, min_sample_s=0.01):
    """Median over `samples` of the mean time of one call, in milliseconds. Each sample runs
    enough back-to-back calls to last about min_sample_s, so tiny workloads are measurable."""
    for _ in range(warmup):
        run()
    start = time.perf_counter()
    run()
    one = time.perf_counter() - start
    calls = max(1, int(min_sample_s / max(one, 1e-9)))
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1e3


def per_call_metrics(run):
    """Kernel launches and bytes moved by one call of run(), from mini.metrics."""
    mini.metrics.reset()
    run()
    snap = mini.metrics.snapshot()
    mini.metrics.reset()
    return snap["kernel_launches"], snap["bytes_moved"]


def close(a, b, rtol=1e-4, atol=1e-5):
    return bool(np.allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=rtol, atol=atol))


def measure(name, shape, fn, inputs, bar, samples):
    compiled = mini.compile(fn, backend="inductor", fullgraph=True)
    row = {"workload": name, "shape": shape}
    row["same_result"] = close(compiled(*inputs), fn(*inputs))  # first call compiles
    row["eager_ms"] = median_ms(lambda: fn(*inputs), samples)
    row["compiled_ms"] = median_ms(lambda: compiled(*inputs), samples)
    row["eager_launches"], row["eager_bytes"] = per_call_metrics(lambda: fn(*inputs))
    row["compiled_launches"], row["compiled_bytes"] = per_call_metrics(lambda: compiled(*inputs))
    row["speedup"] = row["eager_ms"] / row["compiled_ms"]
    row["bytes_ratio"] = row["eager_bytes"] / row["compiled_bytes"]
    row["compiled_GBps"] = row["compiled_bytes"] / row["compiled_ms"] / 1e6
    if bar == "chain":
        row["bar"], row["bar_value"] = f">= {CHAIN_BAR:g}x", CHAIN_BAR
    elif bar == "bytes":
        need = BYTES_FACTOR * row["bytes_ratio"]
        row["bar"], row["bar_value"] = f">= {need:.2f}x (0.6 x bytes)", need
    elif bar == "no_slower":
        row["bar"], row["bar_value"] = f">= {NO_SLOWER_BAR:g}x", NO_SLOWER_BAR
    else:
        row["bar"], row["bar_value"] = "(none)", None
    if not row["same_result"]:
        row["verdict"] = "FAIL (result differs from eager)"
    elif row["bar_value"] is None:
        row["verdict"] = "-"
    else:
        row["verdict"] = "PASS" if row["speedup"] >= row["bar_value"] else "FAIL"
    row["_compiled"] = compiled
    return row


# --- the hand-written C++ loop for chain8 --------------------------------------------------------

# Two hand-written versions of the same one-loop expression: with libm's sin/cos/exp (what a
# person writes first), and with mini's own vectorizable float32 math (mini/tensor/
# scalar_math.h, the functions the generated kernel calls). The bar is checked against the
# faster of the two.
HANDWRITTEN_SOURCE = r"""
#include <cmath>
#include <cstdint>
#include "scalar_math.h"

#ifdef MINI_MATH
#define SIN mini::sin_of<float>
#define COS mini::cos_of<float>
#define EXP mini::exp_of<float>
#else
#define SIN std::sin
#define COS std::cos
#define EXP std::exp
#endif

// chain8 by hand: one OpenMP loop, the whole chain in registers.
extern "C" void chain8(const float* x, const float* y, float* out, int64_t n) {
  #pragma omp parallel for simd
  for (int64_t i = 0; i < n; i++) {
    float t = SIN(x[i]) * y[i];
    t = COS(t) + x[i];
    t = t * 0.5f - y[i];
    t = 1.0f / (1.0f + EXP(-t)) * x[i];
    out[i] = t;
  }
}
"""
HANDWRITTEN_VARIANTS = {"libm": [], "mini's math": ["-DMINI_MATH"]}
SCALAR_MATH_DIR = Path(__file__).resolve().parents[2] / "mini" / "tensor"


def compiler_command():
    """mini's command (mini/runtime/compiled_graph.cpp: compiler_command): $CXX or c++."""
    cxx = os.environ.get("CXX") or "c++"
    return shlex.split(cxx) + "-O3 -march=native -mprefer-vector-width=512 -fopenmp -std=c++17 -shared -fPIC".split()


def handwritten_chain8(row, samples, workdir):
    src = Path(workdir) / "chain8_by_hand.cpp"
    src.write_text(HANDWRITTEN_SOURCE)
    x, y = row["inputs"]
    n = x.numel()
    got = row["_compiled"](x, y).numpy().reshape(-1)
    variants = []
    for k, (name, flags) in enumerate(HANDWRITTEN_VARIANTS.items()):
        lib = Path(workdir) / f"chain8_by_hand_{k}.so"
        cmd = compiler_command() + flags + [f"-I{SCALAR_MATH_DIR}", str(src), "-o", str(lib)]
        subprocess.run(cmd, check=True)
        fn = ctypes.CDLL(str(lib)).chain8
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        out = np.empty(n, dtype=np.float32)  # allocated once: the loop alone is timed
        xp, yp, op = x.data_ptr(), y.data_ptr(), out.ctypes.data

        def run(fn=fn, xp=xp, yp=yp, op=op):
            fn(xp, yp, op, n)

        run()
        diff = float(np.max(np.abs(got.astype(np.float64) - out.astype(np.float64))))
        variants.append({"math": name, "command": " ".join(cmd), "handwritten_ms": median_ms(run, samples),
                         "max_abs_diff": diff, "same_result": bool(np.allclose(got, out, rtol=1e-5, atol=1e-6))})
    best = min(variants, key=lambda v: v["handwritten_ms"])
    ratio = row["compiled_ms"] / best["handwritten_ms"]
    same = all(v["same_result"] for v in variants)
    return {"variants": variants, "handwritten_ms": best["handwritten_ms"], "best": best["math"],
            "compiled_ms": row["compiled_ms"], "ratio": ratio, "same_result": same,
            "verdict": ("PASS" if ratio <= HANDWRITTEN_BAR else "FAIL") if same
            else "FAIL (result differs from mini's)"}


# --- cold and warm compile, each in a fresh process -----------------------------------------------

CHILD = textwrap.dedent(r"""
    import json, statistics, sys, time
    import mini

    record = {}

    def recording_backend(gm, example_inputs):
        # the inductor backend's own compile step, with its timer (mini/runtime/compiled_graph.cpp)
        info = mini._C._inductor_compile(gm)
        record.update(compile_seconds=info["compile_seconds"], from_disk_cache=info["from_disk_cache"],
                      kernels=list(info["kernels"]))
        run = info["run"]
        return lambda *args: run(*args)

    def small(x, b):  # the anchor's cold-compile graph
        return mini.relu((x + b) * 0.25 + 1.0)

    def median_s(fn, n=20):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    x, b = mini.randn(1024, 1024), mini.randn(1024)
    for _ in range(3):
        small(x, b)
    eager_s = median_s(lambda: small(x, b))
    compiled = mini.compile(small, backend=recording_backend, fullgraph=True)
    t0 = time.perf_counter()
    out = compiled(x, b)  # capture + compile (or load from the disk cache) + the first run
    first_s = time.perf_counter() - t0
    steady_s = median_s(lambda: compiled(x, b))  # the same call once compiled: a cache hit
    record.update(first_call_s=first_s, eager_call_s=eager_s, compiled_call_s=steady_s,
                  compile_step_s=first_s - steady_s, same_result=bool(mini.allclose(out, small(x, b))))
    print(json.dumps(record))
""")


def compile_in_fresh_process(cache_dir):
    # One OpenMP thread: on a busy machine a parallel kernel's time varies by milliseconds,
    # which would drown the warm figure; the compiler runs as its own process either way.
    env = dict(os.environ, MINI_CACHE_DIR=str(cache_dir), OMP_NUM_THREADS="1")
    env.pop("MINI_LOGS", None)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"compile subprocess failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compile_latency(workdir, trials):
    """Median over `trials` of (cold, warm) pairs, each trial with its own empty cache dir."""
    colds, warms = [], []
    for i in range(trials):
        cache = Path(workdir) / f"cache{i}"
        cache.mkdir()
        colds.append(compile_in_fresh_process(cache))
        warms.append(compile_in_fresh_process(cache))

    def summarize(runs, bar, want_disk):
        r = dict(sorted(runs, key=lambda t: t["compile_step_s"])[len(runs) // 2])  # the median trial
        r["all_compile_step_s"] = [t["compile_step_s"] for t in runs]
        r["verdict"] = "PASS" if r["compile_step_s"] <= bar else "FAIL"
        if any(t["from_disk_cache"] != want_disk for t in runs):
            r["verdict"] = f"FAIL (from_disk_cache is not {want_disk})"
        if not all(t["same_result"] for t in runs):
            r["verdict"] = "FAIL (result differs from eager)"
        return r

    return {"trials": trials, "cold": summarize(colds, COLD_BAR_S, False),
            "warm": summarize(warms, WARM_BAR_S, True)}


# --- context ---------------------------------------------------------------------------------------

def copy_bandwidth(n, samples):
    x = mini.randn(n)
    ms = median_ms(lambda: x.clone(), samples)
    return {"numel": n, "ms": ms, "GBps": 2 * n * 4 / ms / 1e6}


def describe_machine():
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset"),
            "openblas_core": (openblas() or {}).get("core", "not OpenBLAS"),
            "compiler": " ".join(compiler_command()), "loadavg_start": os.getloadavg()}


def fmt_bytes(n):
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def print_table(rows):
    header = ["workload", "shape", "eager ms", "comp ms", "speedup", "launches e/c",
              "bytes eager", "bytes comp", "bytes ratio", "comp GB/s", "bar", "verdict"]
    body = [[r["workload"], r["shape"], f"{r['eager_ms']:.3f}", f"{r['compiled_ms']:.3f}",
             f"{r['speedup']:.2f}x", f"{r['eager_launches']}/{r['compiled_launches']}",
             fmt_bytes(r["eager_bytes"]), fmt_bytes(r["compiled_bytes"]),
             f"{r['bytes_ratio']:.2f}x", f"{r['compiled_GBps']:.1f}", r["bar"], r["verdict"]]
            for r in rows]
    left = {0, 1, 10, 11}
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(header))
    print("-" * len(line(header)))
    for b in body:
        print(line(b))


def main(argv=None):
    args = parse_args(argv)
    size = sizes(args.quick)
    samples = size["samples"]
    machine = describe_machine()
    print(f"{machine['cpu']}, {machine['cpu_count']} CPUs, OMP_NUM_THREADS={machine['OMP_NUM_THREADS']}, "
          f"OMP_WAIT_POLICY={machine['OMP_WAIT_POLICY']}, "
          f"Python {machine['python']}, load average {machine['loadavg_start'][0]:.2f}")
    print(f"compiler: {machine['compiler']}")
    print(f"float32; median of {samples} samples after warm-up; speedup = eager ms / compiled ms\n")

    with tempfile.TemporaryDirectory(prefix="mini-bench-inductor-") as workdir:
        saved_cache = mini.config.cache_dir
        mini.config.cache_dir = str(Path(workdir) / "run-cache")
        try:
            rows = []
            for name, shape, fn, inputs, bar in workloads(size):
                row = measure(name, shape, fn, inputs, bar, samples)
                row["inputs"] = inputs
                rows.append(row)
            chain = next(r for r in rows if r["workload"] == "chain8")
            hand = handwritten_chain8(chain, samples, workdir)
            copy = copy_bandwidth(size["rows"] * size["cols"], samples)
        finally:
            mini.config.cache_dir = saved_cache
        latency = compile_latency(workdir, 1 if args.quick else 5)

    print_table(rows)
    print(f"\ncopy bandwidth (mini x.clone() of {copy['numel']} float32, read + written): "
          f"{copy['GBps']:.1f} GB/s ({copy['ms']:.3f} ms)")

    print(f"\nchain8 against a hand-written C++ OpenMP loop (one loop, same compiler command, same arrays):")
    for v in hand["variants"]:
        print(f"  hand-written with {v['math']:12s} {v['handwritten_ms']:9.3f} ms   "
              f"agrees with compiled: {v['same_result']} (max |diff| {v['max_abs_diff']:.2e})")
    print(f"  mini compiled {hand['compiled_ms']:.3f} ms: compiled/fastest hand-written "
          f"{hand['ratio']:.2f}x   bar <= {HANDWRITTEN_BAR}x: {hand['verdict']}")

    cold, warm = latency["cold"], latency["warm"]
    print(f"\ncompile latency of relu((x + b) * 0.25 + 1) on [1024, 1024], each in a fresh process, "
          f"median of {latency['trials']} trial(s) (import not timed):")
    print(f"  {'':34s}{'first call - compiled call':>27s}{'backend compile':>17s}   bar")
    print(f"  {'cold (empty MINI_CACHE_DIR)':34s}{cold['compile_step_s'] * 1e3:24.1f} ms"
          f"{cold['compile_seconds'] * 1e3:14.1f} ms   <= {COLD_BAR_S * 1e3:.0f} ms: {cold['verdict']}")
    print(f"  {'warm (same dir, from disk cache)':34s}{warm['compile_step_s'] * 1e3:24.2f} ms"
          f"{warm['compile_seconds'] * 1e3:14.2f} ms   <= {WARM_BAR_S * 1e3:.0f} ms: {warm['verdict']}")
    print(f"  (eager call {cold['eager_call_s'] * 1e3:.2f} ms, compiled call {cold['compiled_call_s'] * 1e3:.2f} ms "
          f"on one thread; backend compile = codegen + compiler + dlopen, from _C._inductor_compile)")
    print(f"  torch 2.11 cold Inductor compile of the same graph (anchor): {TORCH_COLD_CPU_S} s on cpu, "
          f"{TORCH_COLD_CUDA_S} s on cuda")

    verdicts = [(r["workload"], r["verdict"]) for r in rows if r["bar_value"] is not None]
    verdicts += [("chain8 vs hand-written", hand["verdict"]), ("cold compile", cold["verdict"]),
                 ("warm compile", warm["verdict"])]
    passed = sum(v == "PASS" for _, v in verdicts)
    machine["loadavg_end"] = os.getloadavg()
    if args.quick:
        print("\n--quick: 2^20 elements fit in this CPU's cache, so eager is not memory-bound there and the"
              "\nspeedup bars (set for 2^24) are indicative only; run without --quick for the real verdicts.")
    print(f"\n{passed} of {len(verdicts)} bars pass"
          + "".join(f"\n  FAIL: {n} ({v})" for n, v in verdicts if v != "PASS"))
    print(f"load average at the end: {machine['loadavg_end'][0]:.2f}")

    if args.json:
        clean = [{k: v for k, v in r.items() if not k.startswith("_") and k != "inputs"} for r in rows]
        report = {"machine": machine, "quick": args.quick, "samples": samples, "rows": clean,
                  "handwritten_chain8": hand, "compile_latency": latency, "copy_bandwidth": copy,
                  "torch_cold_cpu_s": TORCH_COLD_CPU_S, "passed": passed, "bars": len(verdicts)}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0  # a benchmark, not a test: timings never fail the run (notes/perf.md)


if __name__ == "__main__":
    sys.exit(main())
