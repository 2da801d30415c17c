"""CUDA code generation against torch.compile, in one run on one GPU (issue 13).

    PYTHONPATH=build/python python labs/bench/bench_cuda_inductor.py [--quick] [--out DIR] [--no-torch]
    PYTHONPATH=build/python python labs/bench/bench_cuda_inductor.py --null-device   # no GPU needed

For the Inductor anchors on 8192 x 8192 (transform in float32 and bfloat16, the 8-op chain,
decomposed softmax and layer norm) and relu(x @ w + b) in bfloat16 at batch 8: mini eager,
mini compiled (mini.compile on the CUDA tensors: the graph captured once, rendered by
mini/codegen/cuda_kernel.cpp, compiled by NVRTC, run behind its guards), torch eager and
torch.compile (default mode), each timed with CUDA events (median of --repeats calls after
--warmup), with GB/s of the least a program must move (each input read once, each output
written once), kernels launched per call (mini: mini.metrics; torch: the profiler's kernel
count), and mini's cold compile (an empty cache folder: fusion, rendering, NVRTC; the slowest
of three, each into a new folder, after one warm-up compile that pays NVRTC's once-a-process
costs, printed on their own line) and warm compile (a new process, its GPU context made,
compiling the same graph: a checked read of the disk cache). --layouts also times each
numbered kernel layout (MINI_CODEGEN_LAYOUT) per program. Then the issue's ToyModel (Linear
1024 -> ReLU -> Linear 1024, batch 32, no grad) in eager, default and reduce-overhead mode,
mini's and torch's.

Bars (issue 13), printed at the end: each fused pointwise program at >= 90% of the copy
ceiling measured in the same run; mini compiled >= 95% of torch.compile's throughput on the
five memory-bound programs; relu(x @ w + b) compiled no slower than torch eager; cold compile
<= 0.2 s, warm <= 5 ms; the ToyModel's reduce-overhead faster than its default mode and than
torch's reduce-overhead.

--null-device: what a machine without a GPU can check: every program captured, rendered for
CUDA and compiled by NVRTC (kernels, CUBIN bytes, compile seconds), nothing launched.
Writes bench_cuda_inductor.json and .md into --out (default figures/).
"""

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import mini
import mini.inductor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/
from measure import REPO_ROOT, cuda_ms, cuda_unavailable_reason  # noqa: E402
import programs  # noqa: E402

COPY_BAR = 0.90          # fused pointwise, of the copy ceiling
TORCH_COMPILE_BAR = 0.95  # mini compiled throughput / torch.compile's
COLD_BAR_S = 0.2
WARM_BAR_S = 0.005


def torch_twin(torch, fn):
    """fn of labs/programs.py with torch ops: the same code, its global `mini` bound to torch
    (the programs use only tensor methods and relu, sigmoid, rsqrt, which torch also has)."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, "mini": torch}, fn.__name__)


def workloads(quick):
    """name -> (program, shapes, dtype, min bytes, kind); kind: pointwise, reduction or matmul."""
    r, c = (1024, 1024) if quick else (8192, 8192)
    f32, bf16 = 4, 2
    return {
        "transform f32": ("transform", [(r, c), (c,)], "float32", (2 * r * c + c) * f32, "pointwise"),
        "transform bf16": ("transform", [(r, c), (c,)], "bfloat16", (2 * r * c + c) * bf16, "pointwise"),
        "chain8 f32": ("chain8", [(r, c), (r, c)], "float32", 3 * r * c * f32, "pointwise"),
        "softmax_decomp f32": ("softmax_decomp", [(r, c)], "float32", 2 * r * c * f32, "reduction"),
        "layernorm_decomp f32": ("layernorm_decomp", [(r, c), (c,), (c,)], "float32", (2 * r * c + 2 * c) * f32,
                                 "reduction"),
        "ffn_out bf16 b8": ("ffn_out", [(8, 4096), (4096, 4096), (4096,)], "bfloat16",
                            (8 * 4096 + 4096 * 4096 + 4096 + 8 * 4096) * bf16, "matmul"),
    }


def capture(fn, args):
    """The graph mini.compile captures from fn(*args) (CPU tensors), and its example inputs."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    mini.reset()
    mini.compile(fn, backend=backend, fullgraph=True, dynamic=False)(*args)
    return graphs[0]


# NVRTC's costs that come once a process, not once a graph: loading the library and, at the
# first kernel that calls one of its functions, the device math library (libdevice). Paid by a
# warm-up compile before any graph is timed, and reported on their own line: otherwise the
# first program to call expf or sinf carries them (measured 0.05-0.09 s on the H200's host,
# moving from program to program as the kernels' math changed).
FIRST_USE_SOURCE = """extern "C" __global__ void mini_first_use(float* x) {
  x[threadIdx.x] = expf(x[threadIdx.x]) + sinf(x[threadIdx.x]) + logf(x[threadIdx.x]) + tanhf(x[threadIdx.x]);
}
"""


def nvrtc_first_use():
    """Seconds of the process's first NVRTC compile (a small kernel calling libdevice), into an
    empty cache folder."""
    saved = mini.config.cache_dir
    folder = tempfile.mkdtemp(prefix="mini_first_")
    try:
        mini.config.cache_dir = folder
        t0 = time.perf_counter()
        mini.inductor.compile_cuda(FIRST_USE_SOURCE)
        return time.perf_counter() - t0
    finally:
        mini.config.cache_dir = saved
        shutil.rmtree(folder, ignore_errors=True)


def compile_times(gm, spec):
    """(cold seconds, NVRTC seconds, warm seconds, info): the slowest of three compiles, each into
    an empty cache folder (all three: cold_runs_s), then a new process compiling the same graph
    from the last folder. Where a GPU driver is installed the first is the cold one: NVRTC's
    output for a source it has compiled before comes from the CUDA JIT cache (~/.nv, kept across
    processes; CUDA_CACHE_DISABLE=1 turns it off: scripts/nvrtc_probe.py), 0.02-0.03 s on the
    H200's host; without a driver all three compile."""
    saved = mini.config.cache_dir
    colds, nvrtc, folders = [], [], []
    try:
        for _ in range(3):
            folder = tempfile.mkdtemp(prefix="mini_cold_")
            folders.append(folder)
            mini.config.cache_dir = folder
            t0 = time.perf_counter()
            info = mini.inductor.compile_graph_cuda(gm)
            colds.append(time.perf_counter() - t0)
            nvrtc.append(info["nvrtc_seconds"])
        prog, shapes, dtype = spec[:3]
        probe = subprocess.run([sys.executable, __file__, "--warm-probe", json.dumps([prog, shapes, dtype, folder])],
                               capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    finally:
        mini.config.cache_dir = saved
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    if probe.returncode:
        raise RuntimeError(f"the warm-compile process failed: {probe.stderr.strip()[-400:]}")
    warm = json.loads(probe.stdout.strip().splitlines()[-1])
    worst = max(range(3), key=lambda i: colds[i])
    return colds, nvrtc[worst], warm["seconds"] if warm["from_disk_cache"] else None, info


def warm_probe(spec):
    """In a new process: the program's graph compiled from `folder`'s disk cache; prints JSON.
    Where there is a GPU its context is made first, as a user's CUDA inputs have made it."""
    prog, shapes, dtype, folder = json.loads(spec)
    mdtype = getattr(mini, dtype)
    gm, _ = capture(getattr(programs, prog), [mini.randn(*s, dtype=mdtype) for s in shapes])
    if not cuda_unavailable_reason():
        mini.ones(1, device="cuda").cpu()
    mini.config.cache_dir = folder
    t0 = time.perf_counter()
    info = mini.inductor.compile_graph_cuda(gm)
    print(json.dumps({"seconds": time.perf_counter() - t0, "from_disk_cache": bool(info["from_disk_cache"])}))
    return 0


def torch_kernels(torch, run):
    """CUDA kernels one call of run() launches, by torch's profiler."""
    from torch.profiler import ProfilerActivity, profile
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def mini_kernels(run):
    run()
    mini.cuda.synchronize()
    before = mini.metrics.snapshot()["kernel_launches"]
    run()
    mini.cuda.synchronize()
    return mini.metrics.snapshot()["kernel_launches"] - before


def measure(name, spec, torch, args):
    prog, shapes, dtype, nbytes, kind = spec
    fn = getattr(programs, prog)
    mdtype = getattr(mini, dtype)
    mini.manual_seed(0)
    cpu_args = [mini.randn(*s, dtype=mdtype) for s in shapes]
    row = {"name": name, "kind": kind, "bytes": nbytes}
    gm, inputs = capture(fn, cpu_args)
    try:
        colds, nvrtc, warm, info = compile_times(gm, spec)
        row.update(cold_s=max(colds), cold_runs_s=colds, nvrtc_s=nvrtc, kernels=info["kernels"], cubin_bytes=info["cubin_bytes"])
        if warm is not None:
            row["warm_s"] = warm
    except RuntimeError as e:
        row["compile_error"] = str(e).split("\n")[0]
        info = None
    if args.null_device:
        return row
    cuda_args = [a.cuda() for a in cpu_args]
    cuda_inputs = [x.cuda() for x in inputs]
    timing = lambda run: cuda_ms(mini.cuda, run, args.repeats, args.warmup, statistics.median)  # noqa: E731
    row["mini_eager_ms"] = timing(lambda: fn(*cuda_args))
    row["mini_eager_kernels"] = mini_kernels(lambda: fn(*cuda_args))
    if info is not None:
        # mini.compile on the CUDA tensors: capture, guards and the generated kernels, as a user
        # runs it (the graph compiled above is the same graph, timed for its compile)
        mini.reset()
        compiled = mini.compile(fn, fullgraph=True, dynamic=False)
        compiled(*cuda_args)
        row["mini_compiled_ms"] = timing(lambda: compiled(*cuda_args))
        row["mini_compiled_kernels"] = mini_kernels(lambda: compiled(*cuda_args))
        row["graph_run_ms"] = timing(lambda: info["run"](*cuda_inputs))  # the graph alone, no guards
        if args.layouts:
            row["layout_ms"] = layout_times(gm, cuda_inputs, timing)
        if args.nvrtc_variants:
            row["nvrtc_variants"] = nvrtc_variant_times(gm, cuda_inputs, timing, args.nvrtc_variants)
    if torch is not None:
        tfn = torch_twin(torch, fn)
        targs = [torch.from_numpy(a.float().numpy()).to("cuda", getattr(torch, dtype)) for a in cpu_args]
        tt = lambda run: cuda_ms(torch.cuda, run, args.repeats, args.warmup, statistics.median)  # noqa: E731
        row["torch_eager_ms"] = tt(lambda: tfn(*targs))
        row["torch_eager_kernels"] = torch_kernels(torch, lambda: tfn(*targs))
        torch._dynamo.reset()
        compiled = torch.compile(tfn)
        t0 = time.perf_counter()
        compiled(*targs)
        torch.cuda.synchronize()
        row["torch_compile_first_call_s"] = time.perf_counter() - t0
        row["torch_compile_ms"] = tt(lambda: compiled(*targs))
        row["torch_compile_kernels"] = torch_kernels(torch, lambda: compiled(*targs))
    return row


@contextlib.contextmanager
def environment(name):
    """Lets the block set os.environ[name] as it goes; puts the variable back as it was."""
    saved = os.environ.get(name)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def nvrtc_variant_times(gm, cuda_inputs, timing, variants):
    """{options: (NVRTC seconds, ms)} of the graph compiled with each set of NVRTC options
    (MINI_NVRTC_OPTIONS; '-' the empty set), each into an empty cache folder."""
    times = {}
    saved_dir = mini.config.cache_dir
    with environment("MINI_NVRTC_OPTIONS"):
        try:
            for options in variants.split(","):
                os.environ["MINI_NVRTC_OPTIONS"] = "" if options == "-" else options
                mini.config.cache_dir = tempfile.mkdtemp(prefix="mini_nvrtc_")
                try:
                    info = mini.inductor.compile_graph_cuda(gm)
                    times[options] = (info["nvrtc_seconds"], timing(lambda: info["run"](*cuda_inputs)))
                except RuntimeError as e:  # an option this NVRTC refuses: say so, measure the rest
                    times[options] = str(e).split("\n")[0][:120]
                shutil.rmtree(mini.config.cache_dir, ignore_errors=True)
        finally:
            mini.config.cache_dir = saved_dir
    return times


def layout_times(gm, cuda_inputs, timing):
    """{layout: ms} of the graph rendered with each numbered kernel layout (MINI_CODEGEN_LAYOUT)."""
    times = {}
    with environment("MINI_CODEGEN_LAYOUT"):
        for layout in range(1, mini.inductor.cuda_layouts() + 1):
            os.environ["MINI_CODEGEN_LAYOUT"] = str(layout)
            info = mini.inductor.compile_graph_cuda(gm)
            times[layout] = timing(lambda: info["run"](*cuda_inputs))
    return times


def layout_table(rows):
    layouts = sorted({k for r in rows for k in r.get("layout_ms", {})})
    if not layouts:
        return ""
    lines = ["| program | " + " | ".join(f"layout {k} ms" for k in layouts) + " | fastest |",
             "|---|" + "---|" * (len(layouts) + 1)]
    for r in rows:
        t = r.get("layout_ms")
        if t:
            best = min(t, key=t.get)
            lines.append(f"| {r['name']} | " + " | ".join(f"{t[k]:.3f}" for k in layouts) + f" | {best} |")
    return "\n".join(lines)


def toy_model(args, torch):
    """The issue's ToyModel (Linear 1024 -> ReLU -> Linear 1024, batch 32, no grad): mini and
    torch eager, default mode and mode="reduce-overhead" (CUDA graphs), the same weights."""
    n = 1024
    mini.manual_seed(0)
    model = mini.nn.Sequential(mini.nn.Linear(n, n), mini.nn.ReLU(), mini.nn.Linear(n, n)).cuda()
    x = mini.randn(32, n, device="cuda")
    timing = lambda run: cuda_ms(mini.cuda, run, args.repeats * 5, args.warmup + 3, statistics.median)  # noqa: E731
    row = {"name": "ToyModel b32", "kind": "toy"}
    with mini.no_grad():
        row["mini_eager_ms"] = timing(lambda: model(x))
        mini.reset()
        default = mini.compile(model)
        row["mini_default_ms"] = timing(lambda: default(x))
        replayed = mini.compile(model, mode="reduce-overhead")
        row["mini_reduce_overhead_ms"] = timing(lambda: replayed(x))
        row["mini_reduce_overhead_kernels"] = mini_kernels(lambda: replayed(x))
        row["mini_default_kernels"] = mini_kernels(lambda: default(x))
        assert mini.allclose(replayed(x).cpu(), model(x).cpu(), atol=1e-4)
    if torch is not None:
        tmodel = torch.nn.Sequential(torch.nn.Linear(n, n), torch.nn.ReLU(), torch.nn.Linear(n, n)).cuda()
        with torch.no_grad():
            for i in (0, 2):
                tmodel[i].weight.copy_(torch.from_numpy(model[i].weight.detach().cpu().numpy()))
                tmodel[i].bias.copy_(torch.from_numpy(model[i].bias.detach().cpu().numpy()))
            tx = torch.from_numpy(x.cpu().numpy()).cuda()
            tt = lambda run: cuda_ms(torch.cuda, run, args.repeats * 5, args.warmup + 3, statistics.median)  # noqa: E731
            row["torch_eager_ms"] = tt(lambda: tmodel(tx))
            torch._dynamo.reset()
            tdefault = torch.compile(tmodel)
            row["torch_default_ms"] = tt(lambda: tdefault(tx))
            torch._dynamo.reset()
            treplay = torch.compile(tmodel, mode="reduce-overhead")
            row["torch_reduce_overhead_ms"] = tt(lambda: treplay(tx).clone())
    return row


def toy_table(row):
    cols = [("mini eager", "mini_eager_ms"), ("mini default", "mini_default_ms"),
            ("mini reduce-overhead", "mini_reduce_overhead_ms"), ("torch eager", "torch_eager_ms"),
            ("torch.compile default", "torch_default_ms"), ("torch.compile reduce-overhead", "torch_reduce_overhead_ms")]
    return ("| " + " | ".join(c for c, _ in cols) + " |\n|" + "---|" * len(cols) + "\n| "
            + " | ".join(fmt(row.get(k)) for _, k in cols) + " |\n\n(ms a call; mini's kernels a call: "
            + f"default {row.get('mini_default_kernels')}, reduce-overhead {row.get('mini_reduce_overhead_kernels')}; "
            + "torch's reduce-overhead output cloned, as mini's is)")


def copy_ceiling(args):
    n = (1 << 20) if args.quick else (1 << 28)
    a = mini.randn(n, device="cuda")
    ms = cuda_ms(mini.cuda, lambda: a.clone(), args.repeats, args.warmup, statistics.median)
    return 2 * n * 4 / ms / 1e6  # GB/s


def bars(rows, ceiling):
    out = []
    for r in rows:
        if r["kind"] == "toy":
            ro, d = r.get("mini_reduce_overhead_ms", 1e9), r.get("mini_default_ms", 0)
            out.append(("ToyModel: reduce-overhead faster than default mode", ro < d))
            if "torch_reduce_overhead_ms" in r:
                out.append(("ToyModel: mini reduce-overhead faster than torch's", ro < r["torch_reduce_overhead_ms"]))
            continue
        gbps = r["bytes"] / r["mini_compiled_ms"] / 1e6 if "mini_compiled_ms" in r else 0.0
        if r["kind"] == "pointwise":
            out.append((f"{r['name']}: compiled >= {COPY_BAR:.0%} of copy", gbps >= COPY_BAR * ceiling))
        if r["kind"] != "matmul" and "torch_compile_ms" in r:
            ok = "mini_compiled_ms" in r and r["torch_compile_ms"] / r["mini_compiled_ms"] >= TORCH_COMPILE_BAR
            out.append((f"{r['name']}: >= {TORCH_COMPILE_BAR:.0%} of torch.compile", ok))
        if r["kind"] == "matmul" and "torch_eager_ms" in r:
            ok = "mini_compiled_ms" in r and r["mini_compiled_ms"] <= r["torch_eager_ms"]
            out.append((f"{r['name']}: compiled <= torch eager", ok))
        out.append((f"{r['name']}: cold compile <= {COLD_BAR_S} s", r.get("cold_s", 1e9) <= COLD_BAR_S))
        out.append((f"{r['name']}: warm compile <= {WARM_BAR_S * 1e3:.0f} ms", r.get("warm_s", 1e9) <= WARM_BAR_S))
    return out


def fmt(v, unit=""):
    return "-" if v is None else f"{v:.3f}{unit}" if isinstance(v, float) else str(v)


def table(rows, ceiling):
    head = ["program", "mini eager ms", "mini compiled ms", "torch eager ms", "torch.compile ms",
            "compiled GB/s", "% copy", "kernels (mini e/c, torch e/c)", "cold s (NVRTC)", "warm ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        gbps = r["bytes"] / r["mini_compiled_ms"] / 1e6 if "mini_compiled_ms" in r else None
        kernels = "/".join(fmt(r.get(k)) for k in ("mini_eager_kernels", "mini_compiled_kernels",
                                                   "torch_eager_kernels", "torch_compile_kernels"))
        cells = [r["name"], fmt(r.get("mini_eager_ms")),
                 fmt(r.get("mini_compiled_ms")) if "compile_error" not in r else "n/a: " + r["compile_error"],
                 fmt(r.get("torch_eager_ms")), fmt(r.get("torch_compile_ms")), fmt(gbps),
                 f"{gbps / ceiling:.0%}" if gbps and ceiling else "-", kernels,
                 f"{fmt(r.get('cold_s'))} ({fmt(r.get('nvrtc_s'))})",
                 fmt(r["warm_s"] * 1e3) if "warm_s" in r else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1024 x 1024 instead of 8192 x 8192")
    parser.add_argument("--null-device", action="store_true",
                        help="capture, render and compile with NVRTC only (no GPU needed)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--layouts", action="store_true",
                        help="also time each numbered kernel layout (MINI_CODEGEN_LAYOUT=1..N) per program")
    parser.add_argument("--nvrtc-variants", default="",
                        help="also compile and time each program with each of these comma-separated NVRTC "
                             "option sets (MINI_NVRTC_OPTIONS; '-' for none), e.g. '-lineinfo,-,-Ofc=min'")
    parser.add_argument("--warm-probe", help=argparse.SUPPRESS)  # compile_times' new process
    args = parser.parse_args(argv)
    if args.warm_probe:
        return warm_probe(args.warm_probe)
    if mini.inductor.nvrtc_version() is None:
        print("bench_cuda_inductor: skipped: " + mini._C._nvrtc_unavailable_reason())
        return 0
    if not args.null_device:
        why = cuda_unavailable_reason()
        if why:
            print(f"bench_cuda_inductor: skipped: no CUDA device ({why}); --null-device compiles without one")
            return 0
    torch = None
    if not args.null_device and not args.no_torch:
        try:
            import torch  # noqa: F811
        except ImportError:
            print("note: torch does not import here: mini alone")
    first_use = nvrtc_first_use()
    print(f"NVRTC's first use in this process (library and libdevice loaded; not counted below): {first_use:.3f} s")
    rows = []
    for name, spec in workloads(args.quick).items():
        rows.append(measure(name, spec, torch, args))
        r = rows[-1]
        colds = r.get("cold_runs_s", [])
        again = f" (again: {', '.join(fmt(c) for c in colds[1:])} s; from the CUDA JIT cache where a driver is)" if colds else ""
        print(f"{name}: kernels {r.get('kernels', r.get('compile_error'))}, cold {fmt(max(colds, default=None), ' s')}"
              f"{again}, warm {fmt(r.get('warm_s'), ' s')}", flush=True)
    toy = None if args.null_device else toy_model(args, torch)
    ceiling = None if args.null_device else copy_ceiling(args)
    report = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "device": "null (NVRTC only)" if args.null_device else mini.cuda.get_device_name(0),
              "nvrtc": mini.inductor.nvrtc_version(), "nvrtc_first_use_s": first_use,
              "copy_ceiling_GBps": ceiling, "rows": rows, "toy_model": toy,
              "torch": getattr(torch, "__version__", None)}
    args.out.mkdir(parents=True, exist_ok=True)
    text = table(rows, ceiling)
    text += (f"\n\nNVRTC's first use in the process (library and libdevice loaded, before the cold compiles above): "
             f"{first_use:.3f} s")
    if toy:
        text += "\n\nToyModel (Linear 1024 -> ReLU -> Linear 1024, batch 32, no grad):\n\n" + toy_table(toy)
    if layout_table(rows):
        text += "\n\nKernel layouts (the graph alone; codegen/cuda_launch.h numbers them):\n\n" + layout_table(rows)
    variants = [r for r in rows if r.get("nvrtc_variants")]
    if variants:
        text += "\n\nNVRTC options (NVRTC seconds of one compile / ms of the graph alone):\n\n"
        def cell(o, v):
            return f"'{o}' {v[0]:.3f} s / {v[1]:.3f} ms" if isinstance(v, (tuple, list)) else f"'{o}' refused: {v}"
        text += "\n".join(f"{r['name']}: " + ", ".join(cell(o, v) for o, v in r["nvrtc_variants"].items()) for r in variants)
    if not args.null_device:
        results = bars(rows + ([toy] if toy else []), ceiling)
        report["bars"] = [{"bar": b, "pass": ok} for b, ok in results]
        text += "\n\n" + "\n".join(f"{'PASS' if ok else 'FAIL'}  {b}" for b, ok in results)
        text += f"\n\nbars: {sum(ok for _, ok in results)} of {len(results)} PASS"
    print(text)
    (args.out / "bench_cuda_inductor.json").write_text(json.dumps(report, indent=1))
    (args.out / "bench_cuda_inductor.md").write_text(
        f"bench_cuda_inductor, {report['date']}, {report['device']}, NVRTC {report['nvrtc']}, "
        f"torch {report['torch']}\n\n{text}\n")
    print(f"wrote {args.out / 'bench_cuda_inductor.json'}, {args.out / 'bench_cuda_inductor.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
