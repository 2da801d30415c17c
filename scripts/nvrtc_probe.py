"""Why is a program's first NVRTC compile slower than its second?

    PYTHONPATH=build/python python scripts/nvrtc_probe.py            # the experiment (5 processes)
    PYTHONPATH=build/python python scripts/nvrtc_probe.py --child [--nonce] [--prefetch]   # one of them

On the lent H200 host a program's first compile took 0.07-0.22 s and the same source compiled
again 0.015-0.03 s, each into an empty kernel cache, in the same process or a later one
(notes/perf.md); on a machine without a GPU every compile takes the full time. Each step below
is a new process compiling the anchor programs (8192 columns) three times each:
  A. the same source three times, as found;
  B. the source made new each time (a comment with a counter appended);
  C. as B, with CUDA_CACHE_DISABLE=1 (the driver's JIT cache off);
  D. as A (sources the earlier steps compiled), with CUDA_CACHE_DISABLE=1;
  E. as A, after evicting NVRTC's library files from the page cache (posix_fadvise DONTNEED)
     and reading them back in at NVRTC's first use.
A cache keyed by the source text shows as B slow and A fast after its first; one of the driver
as C and D slow; the page cache as E faster than a first compile of A.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "labs"), str(ROOT / "labs" / "bench")]


def nvrtc_files():
    """The NVRTC shared libraries this process has mapped."""
    files = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "nvrtc" in path and path.startswith("/"):
                files.add(path)
    return sorted(files)


def advise(paths, advice):
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, advice)
        finally:
            os.close(fd)


def read_through(paths):
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def child(prefetch, nonce):
    import mini
    import mini.inductor
    import programs
    from bench_cuda_inductor import FIRST_USE_SOURCE, capture
    shapes = {"transform": [(8192, 8192), (8192,)], "chain8": [(8192, 8192), (8192, 8192)],
              "softmax_decomp": [(8192, 8192)], "layernorm_decomp": [(8192, 8192), (8192,), (8192,)]}
    graphs = {p: capture(getattr(programs, p), [mini.randn(*s) for s in shapes[p]])[0] for p in shapes}
    result = {}
    mini.config.cache_dir = tempfile.mkdtemp()
    t0 = time.perf_counter()
    mini.inductor.compile_cuda(FIRST_USE_SOURCE)
    result["first_use_s"] = time.perf_counter() - t0
    if prefetch:
        t0 = time.perf_counter()
        read_through(nvrtc_files())
        result["prefetch_s"] = time.perf_counter() - t0
    counter = 0
    for prog, gm in graphs.items():
        times = []
        if nonce:  # the program's source, then new text each time
            mini.config.cache_dir = tempfile.mkdtemp()
            source = mini.inductor.compile_graph_cuda(gm)["source"]
        for _ in range(3):
            mini.config.cache_dir = tempfile.mkdtemp()
            t0 = time.perf_counter()
            if nonce:
                counter += 1
                mini.inductor.compile_cuda(f"{source}\n// {os.getpid()} {counter}\n")
            else:
                mini.inductor.compile_graph_cuda(gm)
            times.append(round(time.perf_counter() - t0, 4))
        result[prog] = times
    result["nvrtc_files"] = nvrtc_files()
    print(json.dumps(result))


def run_child(prefetch=False, nonce=False, env=None):
    cmd = [sys.executable, __file__, "--child"] + (["--prefetch"] if prefetch else []) + (["--nonce"] if nonce else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode:
        raise SystemExit(f"nvrtc_probe child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    if "--child" in sys.argv:
        return child("--prefetch" in sys.argv, "--nonce" in sys.argv)
    off = {"CUDA_CACHE_DISABLE": "1"}
    steps = {}
    steps["A as found"] = run_child()
    files = steps["A as found"]["nvrtc_files"]
    steps["B new text"] = run_child(nonce=True)
    steps["C new text, no JIT cache"] = run_child(nonce=True, env=off)
    steps["D as A, no JIT cache"] = run_child(env=off)
    advise(files, os.POSIX_FADV_DONTNEED)
    steps["E evicted, read back"] = run_child(prefetch=True)
    print("NVRTC libraries:", ", ".join(f"{f} ({os.path.getsize(f) / 2**20:.0f} MiB)" for f in files))
    print(f"{'step':28s}{'first use':>10s}{'prefetch':>9s}  " + "  ".join(f"{p:>22s}" for p in steps["A as found"]
                                                                        if p not in ("first_use_s", "nvrtc_files")))
    for name, r in steps.items():
        progs = [k for k in r if k not in ("first_use_s", "nvrtc_files", "prefetch_s")]
        print(f"{name:28s}{r['first_use_s']:10.3f}{r.get('prefetch_s', 0):9.3f}  "
              + "  ".join(f"{'/'.join(f'{t:.3f}' for t in r[p]):>22s}" for p in progs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
