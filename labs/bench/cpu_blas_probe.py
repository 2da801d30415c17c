"""Which BLAS mini's extern matmuls run on this CPU, and how fast each matmul form of a training
step is: the question behind issue 15's MLP rows, whose steps are almost all matmul.

    PYTHONPATH=build/python .venv/bin/python labs/bench/cpu_blas_probe.py [--torch] [--json PATH]

It prints the OpenBLAS that mini loaded (its path, openblas_get_config, the core it picked and
its thread count), then, for the 2-layer MLP's shapes, the three forms a training step runs —
x @ w (forward), g @ w.T (the input's gradient), x.T @ g (the weight's gradient) — each timed
through mini.matmul and through numpy (its own BLAS) in this process: median ms and GFLOP/s.
With --torch, torch.matmul beside them in a child process (torch brings its own OpenMP
runtime, which must not share this process's threads). OPENBLAS_CORETYPE and OMP_* in the
environment change what it measures: the GPU script runs it under several. `import mini` sets
OPENBLAS_CORETYPE from the CPU's flags where it is unset (mini/_cpu.py); MINI_BLAS_CORE=openblas
leaves the choice to OpenBLAS, to measure it.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import mini
from mini._cpu import openblas

FORMS = (("x @ w", lambda x, w, g: (x, w)), ("g @ w.T", lambda x, w, g: (g, w.T)),
         ("x.T @ g", lambda x, w, g: (x.T, g)))


def median_ms(fn, samples=15):
    fn()
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def shapes(batch=256, width=1024):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, width), dtype=np.float32)
    w = rng.standard_normal((width, width), dtype=np.float32)
    g = rng.standard_normal((batch, width), dtype=np.float32)
    return x, w, g


def time_forms(matmul, wrap):
    x, w, g = (wrap(a) for a in shapes())
    rows = {}
    for name, operands in FORMS:
        a, b = operands(x, w, g)
        ms = median_ms(lambda: matmul(a, b))
        flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
        rows[name] = {"ms": ms, "gflops": flops / ms / 1e6}
    return rows


def torch_forms():
    import torch
    out = time_forms(torch.matmul, torch.from_numpy)
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "forms": out}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", action="store_true", help="torch.matmul beside them (a child process)")
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument("--child-torch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_torch:
        print(json.dumps(torch_forms()))
        return
    env = {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "OPENBLAS_", "GOMP_"))}
    blas = openblas()
    print(f"environment: {env or 'no OMP_/OPENBLAS_/GOMP_ variables'}; {os.cpu_count()} cores; "
          f"mini threads {mini.get_num_threads()}")
    if blas:
        print(f"OpenBLAS: {blas['path']}\n  config: {blas['config']}\n  core: {blas['core']}, threads {blas['threads']}")
    else:
        print("OpenBLAS: not found among this process's libraries (mini links another BLAS)")
    result = {"env": env, "cores": os.cpu_count(), "openblas": blas,
              "mini": time_forms(mini.matmul, mini.tensor), "numpy": time_forms(np.matmul, np.asarray)}
    if args.torch:
        child = subprocess.run([sys.executable, __file__, "--child-torch"], capture_output=True, text=True)
        result["torch"] = json.loads(child.stdout) if child.returncode == 0 else child.stderr[-300:]
    print(f"{'form (256x1024, 1024x1024)':28s}{'mini ms':>9s}{'GFLOP/s':>9s}{'numpy ms':>10s}{'GFLOP/s':>9s}"
          + (f"{'torch ms':>10s}{'GFLOP/s':>9s}" if isinstance(result.get("torch"), dict) else ""))
    for name, _ in FORMS:
        m, n = result["mini"][name], result["numpy"][name]
        line = f"{name:28s}{m['ms']:9.3f}{m['gflops']:9.0f}{n['ms']:10.3f}{n['gflops']:9.0f}"
        if isinstance(result.get("torch"), dict):
            t = result["torch"]["forms"][name]
            line += f"{t['ms']:10.3f}{t['gflops']:9.0f}"
        print(line)
    if isinstance(result.get("torch"), str):
        print("torch: the child failed:", result["torch"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
