"""GPT-2 124M, one training step, mini beside torch: the model people bring, at its real size.

The project's GPT (labs/gpt.py, written for torch's API, only its imports naming mini) at GPT-2
size (12 layers, 12 heads, width 768, context 1024, vocabulary 50304, bias, no dropout), batch
8 x 1024 tokens drawn with randint as a training script draws them, fused AdamW (gpt.py's
configure_optimizers). One step = forward + backward + optimizer step; the time is the median
of 10 steps after 3 warm-up steps. Modes: mini eager, mini.compile, mini.compile(mode=
"max-autotune"), and the same file run by torch 2.11 (its imports naming torch, as
labs/train_gpt.py runs it): torch eager and torch.compile; each in float32 and under bfloat16
autocast (the forward and the loss, as nanoGPT does). Every configuration runs in a process of
its own (peak memory and the first step clean, a failure or a timeout stops only it).

Per configuration: ms per step, tokens/s, MFU (model FLOPs a token = 6 x parameters +
12 x layers x context x width, against PEAK_TFLOPS, the H200's dense bfloat16 peak), peak
memory (max_memory_allocated over the timed steps), the first step's time (capture and compile
included), bytes moved per step (mini: mini.metrics.bytes_moved, every kernel's loads and
stores and every extern call's operands; torch does not count them), launches per step (mini:
mini.metrics.kernel_launches; torch: the kernels its
profiler sees) and, on the GPU where torch imports, the GPU time of one step by kernel class
(GEMM, attention, generated, optimizer, copies, other) from torch's profiler, which sees mini's
kernels as it sees its own.

    PYTHONPATH=build/python python labs/bench/bench_gpt2.py [--quick] [--device cpu|cuda]
        [--modes mini-eager,mini-compiled,...] [--dtypes float32,bfloat16] [--out DIR]
        [--timeout S] [--budget S] [--layers N] [--batch N]

--quick: a tiny GPT (2 layers, width 32, context 32) for 3 steps, in seconds on the CPU (the
test runs it). --device cuda without a GPU prints one line why and exits 0. Writes
gpt2_step.txt, .json and .png (step time and its breakdown, mini beside torch) into --out
(default figures/cuda/ on the GPU, figures/ on the CPU).
"""
import argparse
import collections
import copy
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LABS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(LABS))

PEAK_TFLOPS = 989.0  # H200 SXM, dense bfloat16 (NVIDIA's datasheet; 1979 is with sparsity)
FULL = dict(config=dict(block_size=1024, vocab_size=50304, n_layer=12, n_head=12, n_embd=768,
                        dropout=0.0, bias=True), batch=8, warmup=3, steps=10)
QUICK = dict(config=dict(block_size=32, vocab_size=64, n_layer=2, n_head=2, n_embd=32,
                         dropout=0.0, bias=True), batch=2, warmup=1, steps=3)
# mini-min-cut: compiled with mini.config.partitioner = "min-cut" (the fewest bytes saved for the
# backward, torch's partitioner) instead of the greedy recompute rule
MODES = ("mini-eager", "mini-compiled", "mini-max-autotune", "mini-min-cut", "torch-eager", "torch-compile")
DTYPES = ("float32", "bfloat16")
CLASSES = ("GEMM", "attention", "generated", "optimizer", "copies", "other")


# ---- one configuration, in its own process -------------------------------------------------------
def kernel_class(name):
    """The class of a GPU kernel (or copy) by its name, for mini's kernels and torch's."""
    n = name.lower()
    if n.startswith("triton_tem_"):  # torch.compile's GEMM templates (max-autotune)
        return "GEMM"
    if n.startswith("triton_") or n.startswith("cuda_"):  # torch.compile's and mini's generated kernels
        return "generated"  # (triton_poi_fused__to_copy_0 too: generated, not a copy)
    if n.startswith("memcpy") or n.startswith("memset") or "copy" in n or "cat_" in n:
        return "copies"
    if any(k in n for k in ("attention", "flash", "fmha", "sdpa", "attn")):
        return "attention"
    # cuBLAS's GEMMs: sm80_xmma_gemm_*, cutlass_*, and on Hopper with CUDA 13 nvjet_* (bfloat16)
    if any(k in n for k in ("gemm", "xmma", "cutlass", "cublas", "matmul", "splitk", "nvjet")) or n.startswith("sm90_"):
        return "GEMM"
    if any(k in n for k in ("adam", "multi_tensor", "foreach")):
        return "optimizer"
    return "other"


def load_library(lib_name):
    """(lib, gpt module): mini and labs/gpt.py, or torch and the same file run by torch."""
    if lib_name == "torch":
        import torch
        from train_gpt import torch_gpt
        return torch, torch_gpt(torch)
    import gpt
    import mini
    return mini, gpt


def profile_step(step, sync):
    """One step under torch's profiler: GPU milliseconds by kernel class, the kernels launched,
    the costliest kernels: of all (with their class and calls; the table shows 12, the JSON
    report keeps every one) and of those classed "other" (so that a name the classes miss shows),
    and where the GPU waited for the host (idle_gaps)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        sync()
    by_class, other, every, calls = collections.Counter(), collections.Counter(), collections.Counter(), collections.Counter()
    kernels = 0
    spans = []
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        spans.append((e.time_range.start, e.time_range.end, e.name[:80]))
        us = e.time_range.end - e.time_range.start
        by_class[kernel_class(e.name)] += us
        if kernel_class(e.name) == "other":
            other[e.name[:240]] += us
        every[e.name[:240]] += us
        calls[e.name[:240]] += 1
        kernels += not (e.name.startswith("Memcpy") or e.name.startswith("Memset"))
    top_other = [(name, round(us / 1e3, 2)) for name, us in other.most_common(5)]
    top = [(name, kernel_class(name), calls[name], round(us / 1e3, 2)) for name, us in every.most_common()]
    return {c: by_class.get(c, 0.0) / 1e3 for c in CLASSES}, kernels, top_other, top, idle_gaps(spans)


def idle_gaps(spans, shown=8):
    """Where the GPU sat idle inside the step: the time between one kernel's end and the next's
    start, summed (the step's GPU time plus this is its span on the GPU), and the longest gaps
    with the kernels on either side: a gap after a kernel that copies to the host is a sync, a
    run of short gaps between short kernels is the host's launch rate."""
    spans.sort()
    gaps, end = [], None
    for i, (start, stop, name) in enumerate(spans):
        if end is not None and start > end:
            gaps.append((start - end, spans[i - 1][2], name))
        end = stop if end is None else max(end, stop)
    total_us = sum(g for g, _, _ in gaps)
    longest = sorted(gaps, reverse=True)[:shown]
    return dict(idle_ms=total_us / 1e3, gaps=len(gaps), gaps_over_20us=sum(g > 20 for g, _, _ in gaps),
                longest=[(round(g / 1e3, 3), before, after) for g, before, after in longest])


def memory_phases(lib, fn, batch, autocast, opt, sync):
    """Where a step's peak memory is reached, one step split in its phases (bytes): allocated at
    the start (parameters, gradients from zero_grad's None on, the optimizer's state), the
    forward's peak and what it leaves (the loss and what the backward keeps), the backward's peak
    and the optimizer's. The peak a table shows is the largest of the three peaks."""
    cuda = lib.cuda
    x, y = batch
    sync()
    phases = dict(start=cuda.memory_allocated())
    cuda.reset_peak_memory_stats()
    if autocast:
        with autocast():
            _, loss = fn(x, y)
    else:
        _, loss = fn(x, y)
    sync()
    phases.update(forward_peak=cuda.max_memory_allocated(), after_forward=cuda.memory_allocated())
    opt.zero_grad(set_to_none=True)
    cuda.reset_peak_memory_stats()
    loss.backward()
    sync()
    phases.update(backward_peak=cuda.max_memory_allocated(), after_backward=cuda.memory_allocated())
    cuda.reset_peak_memory_stats()
    opt.step()
    sync()
    phases.update(optimizer_peak=cuda.max_memory_allocated())
    return phases


def model_to_run(lib, lib_name, how, model):
    """The model as the mode runs it: eager, torch.compile, or mini.compile (under the min-cut
    partitioner, or with max-autotune, where the mode says)."""
    if how == "eager":
        return model
    if lib_name == "torch":
        return lib.compile(model)
    if how == "min-cut":
        lib.config.partitioner = "min-cut"
    return lib.compile(model, mode="max-autotune" if how == "max-autotune" else "default")


def time_steps(step, lib, size, cuda, is_mini, sync):
    """Runs the warmup and timed steps: per step its seconds and loss, and on mini its kernel
    launches and bytes moved (None elsewhere); peak memory is counted from the first timed step."""
    times, losses, launches, moved = [], [], [], []
    for i in range(size["warmup"] + size["steps"]):
        if i == size["warmup"] and cuda:
            lib.cuda.reset_peak_memory_stats()
        if i == size["warmup"] and not cuda and is_mini:
            lib.metrics.reset_peak_memory()
        before = lib.metrics.kernel_launches if is_mini else 0
        bytes_before = lib.metrics.bytes_moved if is_mini else 0
        sync()
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
        launches.append(lib.metrics.kernel_launches - before if is_mini else None)
        moved.append(lib.metrics.bytes_moved - bytes_before if is_mini else None)
        losses.append(float(loss.item()))
    return times, losses, launches, moved


def add_gpu_profile(result, step, sync, is_mini):
    """The profiled step's GPU time by kernel class and its top kernels (torch's launches per
    step are its profiled kernels), or why it was skipped."""
    try:
        gpu_ms, kernels, top_other, top, idle = profile_step(step, sync)
        result.update(gpu_ms_by_class=gpu_ms, gpu_ms=sum(gpu_ms.values()), profiled_kernels=kernels,
                      top_other_kernels=top_other, top_kernels=top[:12], kernels=top, idle=idle)
        if not is_mini:
            result["launches_per_step"] = kernels
    except ImportError:
        result["profile_skipped"] = "torch is not importable (its profiler reads the GPU's timeline)"


def build_model(lib, gpt, size, device):
    """labs/gpt.py's GPT at the size's config, from seed 0, on the device: (model, config)."""
    lib.manual_seed(0)
    config = gpt.Config(**size["config"])
    return gpt.GPT(config).to(device), config


def make_optimizer(model, device):
    """gpt.py's configure_optimizers: AdamW, fused where the library has it and on CUDA."""
    return model.configure_optimizers(weight_decay=0.1, learning_rate=6e-4, betas=(0.9, 0.95),
                                      device_type=device)


def random_batches(lib, config, size, device, count):
    """`count` (inputs, targets) pairs of size["batch"] x context tokens, drawn with randint."""
    B, T = size["batch"], config.block_size
    return [(lib.randint(0, config.vocab_size, (B, T), device=device),
             lib.randint(0, config.vocab_size, (B, T), device=device)) for _ in range(count)]


def autocast_for(lib, device, dtype):
    """What makes the forward's autocast context under bfloat16 (nanoGPT's habit), else None."""
    if dtype != "bfloat16":
        return None
    return lambda: lib.autocast(device_type=device, dtype=lib.bfloat16)


def training_step(fn, opt, batches, autocast, after_backward=None):
    """step(): the next batch's forward (the loss under autocast where given), zero_grad,
    backward, after_backward() where given, the optimizer step; it returns the loss."""
    batch_iter = iter(batches)

    def step():
        x, y = next(batch_iter)
        if autocast:
            with autocast():
                _, loss = fn(x, y)
        else:
            _, loss = fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if after_backward:
            after_backward()
        opt.step()
        return loss
    return step


def model_flops_per_token(model, config):
    """(parameters, FLOPs a token): 6 x parameters (the tied lm_head counted once) +
    12 x layers x context x width for attention."""
    params = {id(p): p.numel() for p in model.parameters()}
    n_params = sum(params.values())
    return n_params, 6 * n_params + 12 * config.n_layer * config.block_size * config.n_embd


def peak_memory(lib, cuda, is_mini):
    """Peak bytes allocated since the last reset: CUDA's counter, mini's on the CPU, else None."""
    if cuda:
        return lib.cuda.max_memory_allocated()
    return lib.metrics.max_memory_allocated if is_mini else None


def run_config(mode, dtype, device, size):
    """Times one (mode, dtype) training step; returns the result's fields."""
    lib_name, how = mode.split("-", 1)
    lib, gpt = load_library(lib_name)
    cuda = device == "cuda"
    sync = lib.cuda.synchronize if cuda else (lambda: None)
    model, config = build_model(lib, gpt, size, device)
    fn = model_to_run(lib, lib_name, how, model)
    opt = make_optimizer(model, device)
    B, T = size["batch"], config.block_size
    total = size["warmup"] + size["steps"] + 2  # +2: the profiled step, the memory phases' step
    batches = random_batches(lib, config, size, device, total)
    autocast = autocast_for(lib, device, dtype)
    step = training_step(fn, opt, batches, autocast)
    is_mini = lib_name == "mini"
    times, losses, launches, moved = time_steps(step, lib, size, cuda, is_mini, sync)
    ms = statistics.median(times[size["warmup"]:]) * 1e3
    n_params, flops_per_token = model_flops_per_token(model, config)
    tokens_per_s = B * T / (ms / 1e3)
    peak = peak_memory(lib, cuda, is_mini)
    result = dict(mode=mode, dtype=dtype, ms=ms, tokens_per_s=tokens_per_s,
                  mfu=flops_per_token * tokens_per_s / (PEAK_TFLOPS * 1e12),
                  peak_memory_bytes=peak, first_step_s=times[0], parameters=n_params,
                  flops_per_token=flops_per_token, losses=losses,
                  launches_per_step=statistics.median(launches[size["warmup"]:]) if is_mini else None,
                  bytes_per_step=statistics.median(moved[size["warmup"]:]) if is_mini else None)
    if cuda:
        result["memory_phases"] = memory_phases(lib, fn, batches[-1], autocast, opt, sync)
        add_gpu_profile(result, step, sync, is_mini)
    return result


# ---- the driver: one process a configuration, then the table and the figure ----------------------
def run_in_subprocess(mode, dtype, args):
    """The configuration's result dict, or one with "error" saying why it has no numbers."""
    cmd = [sys.executable, __file__, "--worker", mode, dtype, "--device", args.device]
    if args.quick:
        cmd.append("--quick")
    for flag, value in (("--layers", args.layers), ("--batch", args.batch)):
        if value is not None:
            cmd += [flag, str(value)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return dict(mode=mode, dtype=dtype, error=f"timed out after {args.timeout:.0f} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        return dict(mode=mode, dtype=dtype, error=f"exit status {done.returncode}: {tail[0][:300]}")
    return json.loads(lines[-1][len("RESULT "):])


def fmt(value, spec, unit=""):
    return "-" if value is None else f"{value:{spec}}{unit}"


def table(results, header):
    lines = [header, "",
             f"{'mode':<18} {'dtype':<9} {'ms/step':>9} {'tokens/s':>10} {'MFU':>6} {'peak mem':>9} "
             f"{'1st step':>9} {'launches':>9} {'moved':>9}   GPU ms by class ({', '.join(CLASSES)})"]
    for r in results:
        if "error" in r:
            said = r["error"] if r["error"].startswith("skipped") else f"failed: {r['error']}"
            lines.append(f"{r['mode']:<18} {r['dtype']:<9} {said}")
            continue
        peak = None if r["peak_memory_bytes"] is None else r["peak_memory_bytes"] / 1e6
        by_class = r.get("gpu_ms_by_class")
        split = " ".join(f"{by_class[c]:.1f}" for c in CLASSES) if by_class else r.get("profile_skipped", "-")
        lines.append(f"{r['mode']:<18} {r['dtype']:<9} {r['ms']:9.2f} {r['tokens_per_s']:10.0f} "
                     f"{100 * r['mfu']:5.1f}% {fmt(peak, '.0f', ' MB'):>9} {r['first_step_s']:8.2f}s "
                     f"{fmt(r['launches_per_step'], '.0f'):>9} "
                     f"{fmt(None if r.get('bytes_per_step') is None else r['bytes_per_step'] / 1e9, '.2f', ' GB'):>9}   {split}")
    by_key = {(r["mode"], r["dtype"]): r for r in results if "error" not in r}
    for mini_mode, torch_mode in (("mini-eager", "torch-eager"), ("mini-compiled", "torch-compile")):
        for dtype in DTYPES:
            if (mini_mode, dtype) in by_key and (torch_mode, dtype) in by_key:
                ratio = by_key[(mini_mode, dtype)]["ms"] / by_key[(torch_mode, dtype)]["ms"]
                lines.append(f"{mini_mode} / {torch_mode}, {dtype}: {ratio:.2f}x the step time")
    phased = [r for r in results if r.get("memory_phases")]
    if phased:
        lines += ["", "memory (GB) in one step's phases: allocated at its start, the forward's peak, what the "
                  "forward leaves (the loss and what the backward keeps), the backward's peak, the optimizer's"]
        for r in phased:
            m = {k: v / 1e9 for k, v in r["memory_phases"].items()}
            lines.append(f"  {r['mode']:<18} {r['dtype']:<9} start {m['start']:.2f}  forward peak {m['forward_peak']:.2f}  "
                         f"after forward {m['after_forward']:.2f}  backward peak {m['backward_peak']:.2f}  "
                         f"optimizer peak {m['optimizer_peak']:.2f}")
    idled = [r for r in results if r.get("idle")]
    if idled:
        lines += ["", "the GPU idle inside one profiled step (ms in all, gaps; the longest with the kernels "
                  "before and after it)"]
        for r in idled:
            i = r["idle"]
            lines.append(f"  {r['mode']:<18} {r['dtype']:<9} idle {i['idle_ms']:.2f} ms in {i['gaps']} gaps "
                         f"({i['gaps_over_20us']} over 20 us)")
            lines += [f"      {ms:.3f} ms after {before[:50]} before {after[:50]}" for ms, before, after in i["longest"][:4]]
    for r in results:  # where each mode's GPU time goes, kernel by kernel
        if r.get("top_kernels"):
            lines += ["", f"{r['mode']} {r['dtype']}: the costliest kernels of one step (ms, calls, class)"]
            lines += [f"  {ms:8.2f} {n:5d}  {cls:<10} {name}" for name, cls, n, ms in r["top_kernels"]]
    return "\n".join(lines) + "\n"


def figure(results, out_dir, title):
    from measure import pyplot, save_figure
    plt = pyplot()
    done = [r for r in results if "error" not in r]
    dtypes = [d for d in DTYPES if any(r["dtype"] == d for r in done)]
    fig, axes = plt.subplots(1, max(len(dtypes), 1), figsize=(6.5 * max(len(dtypes), 1), 4.8), squeeze=False)
    colors = dict(zip(CLASSES, ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#bbbbbb")))
    order = ("mini-eager", "torch-eager", "mini-compiled", "mini-max-autotune", "mini-min-cut", "torch-compile")
    for ax, dtype in zip(axes[0], dtypes):
        rows = sorted((r for r in done if r["dtype"] == dtype), key=lambda r: order.index(r["mode"]))
        for i, r in enumerate(rows):
            by_class = r.get("gpu_ms_by_class")
            if by_class:  # the step's GPU time split by class, the step's wall time as a line
                bottom = 0.0
                for c in CLASSES:
                    ax.bar(i, by_class[c], bottom=bottom, color=colors[c], label=c if i == 0 else None)
                    bottom += by_class[c]
                ax.hlines(r["ms"], i - 0.4, i + 0.4, colors="black", label="step (wall)" if i == 0 else None)
            else:
                ax.bar(i, r["ms"], color="#4477aa" if r["mode"].startswith("mini") else "#ee6677")
            ax.text(i, r["ms"], f"{r['ms']:.1f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(rows)), [r["mode"] for r in rows], rotation=20, fontsize=8)
        ax.set_ylabel("ms per training step")
        ax.set_title(dtype if dtype == "float32" else "bfloat16 autocast")
        if any(r.get("gpu_ms_by_class") for r in rows):
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out_dir, "gpt2_step")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny GPT for 3 steps (seconds on the CPU)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: float32, bfloat16")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a configuration may take")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole run: configurations that would start later are skipped")
    parser.add_argument("--layers", type=int, default=None, help="layers (default: GPT-2's 12; --quick's 2)")
    parser.add_argument("--batch", type=int, default=None, help="sequences a step (default: 8; --quick's 2)")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size = copy.deepcopy(QUICK if args.quick else FULL)
    if args.layers is not None:
        size["config"]["n_layer"] = args.layers
    if args.batch is not None:
        size["batch"] = args.batch
    if args.worker:
        from measure import cold_kernel_cache
        with cold_kernel_cache("inductor"):  # mini's first step compiles for real, as a new user's
            result = run_config(*args.worker, args.device, size)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    modes, dtypes = args.modes.split(","), args.dtypes.split(",")
    for name, allowed in ((modes, MODES), (dtypes, DTYPES)):
        bad = [n for n in name if n not in allowed]
        if bad:
            parser.error(f"unknown {bad[0]!r}: choose from {', '.join(allowed)}")
    import mini
    from measure import REPO_ROOT, cuda_unavailable_reason
    if args.device == "cuda":
        why = cuda_unavailable_reason()
        if why:
            print(f"bench_gpt2: --device cuda: skipped: no CUDA device ({why})")
            return 0
    out = args.out or REPO_ROOT / "figures" / ("cuda" if args.device == "cuda" else "")
    out.mkdir(parents=True, exist_ok=True)
    where = mini.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    c = size["config"]
    header = (f"bench_gpt2: labs/gpt.py, {c['n_layer']} layers, {c['n_head']} heads, width {c['n_embd']}, "
              f"context {c['block_size']}, vocabulary {c['vocab_size']}, batch {size['batch']}; "
              f"fused AdamW; median of {size['steps']} steps after {size['warmup']} warm-up; "
              f"{where}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; MFU against "
              f"{PEAK_TFLOPS:.0f} TFLOP/s (H200 dense bfloat16)")
    print(header, flush=True)
    start, results = time.monotonic(), []
    try:
        for dtype in dtypes:
            for mode in modes:
                if args.budget is not None and time.monotonic() - start > args.budget:
                    r = dict(mode=mode, dtype=dtype,
                             error=f"skipped: the run's --budget of {args.budget:.0f} s was spent")
                elif mode.startswith("torch") and importlib.util.find_spec("torch") is None:
                    r = dict(mode=mode, dtype=dtype, error="skipped: torch is not importable here")
                else:
                    r = run_in_subprocess(mode, dtype, args)
                results.append(r)
                print(table([r], "").splitlines()[-1], flush=True)
                write_report(out, header, results, dict(peak_tflops=PEAK_TFLOPS, device=args.device,
                                                        device_name=where, quick=args.quick, size=size))
    except KeyboardInterrupt:  # a caller's time limit: keep what was measured
        print("bench_gpt2: interrupted; the table and figure hold the configurations measured so far")
    print(table(results, header))
    figure(results, out, header.split(";")[0] + f"; {where}")
    return 0


def write_report(out, header, results, fields):
    """gpt2_step.txt and .json, rewritten after every configuration (a run cut short keeps
    what it measured)."""
    (out / "gpt2_step.txt").write_text(table(results, header))
    (out / "gpt2_step.json").write_text(json.dumps(dict(header=header, **fields, results=results), indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
