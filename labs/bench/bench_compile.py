"""Compile time against program size: where a cold inductor compile spends its time.

    PYTHONPATH=build/python .venv/bin/python labs/bench/bench_compile.py [--quick] [--out DIR]

Programs of 10, 30, 100, 300, 1000 and 3000 ops (--quick: 10, 30, 100), of four kinds:
  pointwise  x = (x * 1.0001 + 0.001).sin(), repeated (issue 11's 1,000-op chain);
  broadcast  x = (x * b - c).sin() on x [64, 64] with b [64] and c [64, 1] (three inputs);
(inputs uniform in [0, 1): with |b| < 1 the chain contracts, so float rounding differences
between eager and compiled code stay small, as the check against eager needs)
  reduction  x = (x - x.mean(-1, keepdim=True)).sin() * 1.0001: a reduction every 4 ops;
  diamond    x = x + x.sin(): every value read twice (a walk without memory is exponential).
Each is compiled once with backend="inductor" and an empty kernel cache, and its first call
timed, split into the stages mini records (CompiledGraph's schedule_seconds, codegen_seconds,
cxx_seconds): capture (the first call less the backend: bytecode tracing, guards, and one
run), fusion (decompose, fuse, plan buffers), codegen (render C++), C++ (the compiler and
dlopen; `cxx cpu` is the compiler's CPU time, which other load on the machine does not
inflate). Issue 11's bar: the 1,000-op pointwise chain compiles in under 2 s.

--gpt-layers 1 2 4 8 12 (issue 32): the training graphs (forward and backward) of labs/gpt.py's
GPT of that many blocks (width 128, 4 heads, context 64; its kernels are the same at any size)
compiled for CUDA with NVRTC (no GPU needed), each in a process of its own: cold (an empty
cache folder) and warm (the same folder, a second process: every CUBIN read from the disk
cache). Kernels are keyed by their body (runtime/cuda_program.h), so NVRTC compiles the
distinct bodies only and the cold time stays nearly flat past the first block; printed with
the kernel count, the distinct programs, and the time the same kernels took as one NVRTC
program a graph (as before). --gpt-cpu adds the forward graph's C++ compile (render_cpp emits
one function per distinct body).

Where torch imports (the GPU machine), torch.compile compiles the same programs beside mini
(a fresh dynamo and inductor cache each; on CUDA when there is a GPU), total time only.
Writes bench_compile.json, .png and .svg (compile time against ops, log-log) into --out.
"""

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import mini

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/, for measure.py
from measure import REPO_ROOT, pyplot, save_figure, write_json  # noqa: E402

SIZES = (10, 30, 100, 300, 1000, 3000)
QUICK_SIZES = (10, 30, 100)
BAR_OPS, BAR_SECONDS = 1000, 2.0  # issue 11: a 1,000-op chain compiles in under 2 s


# ---- the programs: (ops per step, step, input shapes) ---------------------------------------

def pointwise_step(x):
    return (x * 1.0001 + 0.001).sin()


def broadcast_step(x, b, c):
    return (x * b - c).sin()


def reduction_step(x):
    return (x - x.mean(-1, keepdim=True)).sin() * 1.0001


def diamond_step(x):
    return x + x.sin()


KINDS = {
    "pointwise": (3, pointwise_step, [(64, 64)]),
    "broadcast": (3, broadcast_step, [(64, 64), (64,), (64, 1)]),
    "reduction": (4, reduction_step, [(64, 64)]),
    "diamond": (2, diamond_step, [(64, 64)]),
}


def program(kind, ops):
    """The function of about `ops` ops of `kind` (a fresh code object: nothing is cached)."""
    per_step, step, shapes = KINDS[kind]
    steps = max(1, round(ops / per_step))
    namespace = {"step": step}
    args = ", ".join(f"a{i}" for i in range(len(shapes)))
    rest = "".join(f", a{i}" for i in range(1, len(shapes)))
    exec(f"def {kind}_{ops}({args}):\n    x = a0\n    for _ in range({steps}):\n"
         f"        x = step(x{rest})\n    return x\n", namespace)
    return namespace[f"{kind}_{ops}"], shapes


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ---- mini -------------------------------------------------------------------------------------

def measure_mini(kind, ops):
    fn, shapes = program(kind, ops)
    inputs = [mini.rand(*s) for s in shapes]
    compiles = []

    def backend(gm, example_inputs):
        start = time.perf_counter()
        info = mini._C._inductor_compile(gm)
        compiles.append(dict(info, backend_seconds=time.perf_counter() - start, ops=gm.op_count()))
        return info["run"]

    saved = mini.config.cache_dir
    mini.config.cache_dir = tempfile.mkdtemp(prefix="mini-bench-compile-")
    try:
        mini.reset()
        cpu = children_cpu_seconds()
        start = time.perf_counter()
        out = mini.compile(fn, backend=backend)(*inputs)
        total = time.perf_counter() - start
        cpu = children_cpu_seconds() - cpu
    finally:
        mini.config.cache_dir = saved
    expected = fn(*inputs)
    if not mini.allclose(out, expected, rtol=1e-4, atol=1e-4):
        sys.exit(f"bench_compile: {kind} with {ops} ops: the compiled result differs from eager")
    backend_seconds = sum(c["backend_seconds"] for c in compiles)
    return {
        "kind": kind, "ops": sum(c["ops"] for c in compiles), "graphs": len(compiles),
        "kernels": sum(len(c["kernels"]) for c in compiles),
        "source_bytes": sum(len(c["source"]) for c in compiles),
        "capture_s": total - backend_seconds,
        "fusion_s": sum(c["schedule_seconds"] for c in compiles),
        "codegen_s": sum(c["codegen_seconds"] for c in compiles),
        "cxx_s": sum(c["cxx_seconds"] for c in compiles),
        "cxx_cpu_s": cpu,
        "total_s": total,
    }


# ---- GPT blocks (issue 32): compile time against layer count ------------------------------

GPT_ONE = """
import json, sys, time
sys.path.insert(0, sys.argv[4])
import numpy as np
import mini
from gpt import GPT, Config
layers, target, mini.config.cache_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
config = Config(block_size=64, vocab_size=256, n_layer=layers, n_head=4, n_embd=128)
mini.manual_seed(0)
model = GPT(config)
idx = mini.from_numpy(np.random.default_rng(0).integers(0, 256, size=(4, 64)))
row = dict(layers=layers, graphs=0, kernels=0, programs=0, nvrtc=0, compile_s=0.0, one_program_s=0.0)
def backend(gm, example_inputs):
    start = time.perf_counter()
    if target == "cuda":
        info = mini._C._inductor_compile_training_cuda(gm, "sm_90")
        row["kernels"] += len(info["forward_kernels"]) + len(info["backward_kernels"])
    else:
        info = mini._C._inductor_compile(gm)
        row["kernels"] += len(info["kernels"])
        row["programs"] += info["source"].count('extern "C" void ')  # functions: one per body
    row["compile_s"] += time.perf_counter() - start
    row["graphs"] += 1
    if target == "cuda":
        done = mini._C._cuda_kernel_cache_stats()
        row["programs"], row["nvrtc"] = done["programs"] - before["programs"], done["nvrtc_compiles"] - before["nvrtc_compiles"]
    if target == "cuda" and sys.argv[5] == "cold":  # as before issue 32: a graph's kernels as one NVRTC program
        start = time.perf_counter()
        for source in (info["forward_source"], info["backward_source"]):
            mini._C._compile_cuda(source, "sm_90")
        row["one_program_s"] += time.perf_counter() - start
    return gm.forward
before = mini._C._cuda_kernel_cache_stats()
mini.compile(model, backend=backend)(idx, idx)
print(json.dumps(row))
"""


def measure_gpt(layers, target, cache_dir, which):
    """One process compiling the GPT of `layers` blocks for `target` ("cuda": NVRTC, "cpu": C++)."""
    import json
    import subprocess
    labs = str(Path(__file__).resolve().parents[1])
    r = subprocess.run([sys.executable, "-c", GPT_ONE, str(layers), target, str(cache_dir), labs, which],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    if r.returncode:
        sys.exit(f"bench_compile: the GPT of {layers} blocks ({target}) failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def gpt_rows(layer_counts, targets):
    rows = []
    for target in targets:
        for layers in layer_counts:
            cache_dir = tempfile.mkdtemp(prefix="mini-bench-compile-gpt-")
            cold = measure_gpt(layers, target, cache_dir, "cold")
            warm = measure_gpt(layers, target, cache_dir, "warm")
            rows.append(dict(cold, target=target, warm_s=warm["compile_s"], warm_nvrtc=warm["nvrtc"]))
            print(f"  {target} GPT, {layers} blocks: cold {cold['compile_s']:.2f} s, warm {warm['compile_s']:.2f} s",
                  flush=True)
    head = (f"{'target':<7}{'blocks':>7}{'graphs':>7}{'kernels':>8}{'programs':>9}{'nvrtc':>6}{'cold':>8}{'warm':>8}"
            f"{'one program':>12}")
    print(f"\nthe GPT's graphs compiled (cuda: forward and backward; cpu: forward), against blocks ({platform.node()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')}):\n\n{head}\n{'-' * len(head)}")
    for r in rows:
        programs = f"{r['programs']:>9}" + (f"{r['nvrtc']:>6}" if r["target"] == "cuda" else f"{'-':>6}")
        print(f"{r['target']:<7}{r['layers']:>7}{r['graphs']:>7}{r['kernels']:>8}{programs}"
              f"{r['compile_s']:>8.2f}{r['warm_s']:>8.2f}"
              + (f"{r['one_program_s']:>12.2f}" if r["target"] == "cuda" else f"{'-':>12}"))
    print("(seconds: the backend's compiles, the first call; cold: an empty cache folder; warm: the same "
          "folder, a new process; programs: distinct kernel bodies (cpu: functions in the C++ source), nvrtc: NVRTC "
          "runs; one program: "
          "the same kernels as one NVRTC program a graph, cold, as mini compiled them before)")
    return rows


# ---- torch (optional) -------------------------------------------------------------------------

def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def measure_torch(torch, kind, ops, device):
    fn, shapes = program(kind, ops)
    inputs = [torch.rand(*s, device=device) for s in shapes]
    torch._dynamo.reset()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="torch-bench-compile-")
    with torch._inductor.config.patch(fx_graph_cache=False):
        start = time.perf_counter()
        torch.compile(fn)(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start


# ---- report -----------------------------------------------------------------------------------

def print_table(rows):
    head = (f"{'kind':<10}{'ops':>6}{'kernels':>8}{'source':>9}{'capture':>9}{'fusion':>8}"
            f"{'codegen':>9}{'C++':>8}{'cxx cpu':>9}{'total':>8}{'torch':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        torch_s = f"{r['torch_s']:8.2f}" if r.get("torch_s") is not None else f"{'-':>8}"
        print(f"{r['kind']:<10}{r['ops']:>6}{r['kernels']:>8}{r['source_bytes'] / 1024:>8.0f}K"
              f"{r['capture_s']:>9.3f}{r['fusion_s']:>8.3f}{r['codegen_s']:>9.3f}{r['cxx_s']:>8.2f}"
              f"{r['cxx_cpu_s']:>9.2f}{r['total_s']:>8.2f}{torch_s}")
    print("(seconds; source: generated C++ in KiB; cxx cpu: the C++ compiler's CPU time)")


def plot(rows, out_dir, torch_device):
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        line, = left.plot([r["ops"] for r in mine], [r["total_s"] for r in mine], "o-", label=f"mini: {kind}")
        timed = [r for r in mine if r.get("torch_s") is not None]
        if timed:
            left.plot([r["ops"] for r in timed], [r["torch_s"] for r in timed], "s--", color=line.get_color(),
                      label=f"torch.compile ({torch_device}): {kind}")
    shown = "pointwise" if "pointwise" in kinds else kinds[0]
    chain = [r for r in rows if r["kind"] == shown]
    ops = [r["ops"] for r in chain]
    left.plot(ops, [chain[-1]["total_s"] * o / ops[-1] for o in ops], ":", color="gray",
              label="linear through the longest chain")
    left.axhline(BAR_SECONDS, color="red", linewidth=0.8, label=f"bar: {BAR_OPS} ops in {BAR_SECONDS:g} s")
    left.set(xscale="log", yscale="log", xlabel="ops in the program", ylabel="cold compile, first call (s)",
             title="compile time against program size")
    left.legend(fontsize=7)
    for key, label in (("capture_s", "capture"), ("fusion_s", "fusion"), ("codegen_s", "codegen"),
                       ("cxx_s", "C++ compiler"), ("total_s", "total")):
        right.plot([r["ops"] for r in chain], [max(r[key], 1e-5) for r in chain], "o-", label=label)
    right.set(xscale="log", yscale="log", xlabel="ops in the program", ylabel="seconds",
              title=f"{shown}: by stage")
    right.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_dir, "bench_compile")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"programs of {QUICK_SIZES} ops only (CI)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for bench_compile.json/.png/.svg (default: figures/)")
    parser.add_argument("--torch-max-ops", type=int, default=1000,
                        help="compile with torch.compile only programs up to this size (default 1000: "
                             "torch's compile of 3,000 ops takes minutes)")
    parser.add_argument("--kinds", nargs="+", choices=sorted(KINDS), default=list(KINDS),
                        help="the kinds of program to compile (default: all)")
    parser.add_argument("--gpt-layers", type=int, nargs="+", metavar="N",
                        help="instead: the GPT's training graphs of N blocks compiled for CUDA, cold and warm")
    parser.add_argument("--gpt-cpu", action="store_true", help="with --gpt-layers: the C++ compile too")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.gpt_layers:
        rows = gpt_rows(args.gpt_layers, ["cuda"] + (["cpu"] if args.gpt_cpu else []))
        write_json(args.out, "bench_compile_gpt", {"machine": platform.node(), "cores": os.cpu_count(), "rows": rows})
        return
    torch = torch_or_none()
    torch_device = ("cuda" if torch.cuda.is_available() else "cpu") if torch else None
    if torch:  # torch's one-time start (imports, Triton, the compile workers) is not any program's
        measure_torch(torch, "pointwise", 2, torch_device)
    rows = []
    for kind in args.kinds:
        for ops in QUICK_SIZES if args.quick else SIZES:
            row = measure_mini(kind, ops)
            timed = torch and ops <= args.torch_max_ops
            row["torch_s"] = measure_torch(torch, kind, ops, torch_device) if timed else None
            rows.append(row)
            theirs = f", torch.compile {row['torch_s']:.2f} s" if row["torch_s"] is not None else ""
            print(f"  {kind} {row['ops']} ops: mini {row['total_s']:.2f} s{theirs}", flush=True)
    print(f"\ncold compile time by stage ({platform.node()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')}):\n")
    print_table(rows)
    bar = [r for r in rows if r["kind"] == "pointwise" and abs(r["ops"] - BAR_OPS) <= BAR_OPS // 10]
    if bar:
        verdict = "meets" if bar[0]["total_s"] < BAR_SECONDS else "MISSES"
        print(f"\n{bar[0]['ops']}-op pointwise chain: {bar[0]['total_s']:.2f} s, {verdict} the bar "
              f"(< {BAR_SECONDS:g} s; the C++ compiler's CPU time {bar[0]['cxx_cpu_s']:.2f} s)")
    paths = plot(rows, args.out, torch_device)
    write_json(args.out, "bench_compile", {"machine": platform.node(), "cores": os.cpu_count(),
                                           "torch_device": torch_device, "rows": rows})
    print("wrote", ", ".join(str(p) for p in paths + [args.out / "bench_compile.json"]))


if __name__ == "__main__":
    main()
