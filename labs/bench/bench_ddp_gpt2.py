"""GPT-2 124M over 1, 2 and 4 GPUs: DistributedDataParallel's scaling, mini beside torch.

The training step of labs/bench/bench_gpt2.py (labs/gpt.py at GPT-2 size, batch 8 x 1024 a rank,
AdamW fused on CUDA, bfloat16 autocast), now data-parallel: every rank holds the model, wrapped in
DistributedDataParallel (25 MB buckets, the gradients averaged over NCCL on the GPU, Gloo on the
CPU), trains on its own batch, and the step's tokens are the world's. Modes: mini-compiled
(mini.compile of the DDP module: capture's graph split at DDP's buckets, mini.config.optimize_ddp),
mini-eager, torch-compile (torch DDP + torch.compile, the same file run by torch, as bench_gpt2's
torch modes) and torch-eager. For each mode and world size the ranks are started by mini's
launcher, `python -m mini.distributed.run --nproc-per-node N` (it sets torchrun's variables, which
torch reads too, and gives each rank its own GPU through CUDA_VISIBLE_DEVICES), in a process group
of their own that a timeout ends whole. A world size of 1 is DDP too (its all-reduces are copies):
the base the others are measured against.

Rank 0 times the steps (median after the warm-up; the collectives keep the ranks in step) and
reports, per mode and world size:

    ms/step      one step: forward, backward with its all-reduces, the optimizer step
    tokens/s     the world's: ranks x batch x context / step
    efficiency   tokens/s(N) / (N x tokens/s(1)) of the same mode: 100% is perfect scaling
    vs 1         the step's time minus the 1-rank step's: what N ranks add
    exposed      mini only: the backward's exposed communication, from the end of its compute
                 (just before DDP flattens its last bucket, which the last gradient fills) to
                 the averaged gradients in .grad; CUDA events on rank 0's compute stream (GPU
                 time), wall clock on the CPU. torch's DDP keeps no such timeline: not measured
    MFU          per GPU, as bench_gpt2 counts it (against 989 TFLOP/s)

    PYTHONPATH=build/python python labs/bench/bench_ddp_gpt2.py [--device cuda|cpu] [--quick]
        [--world-sizes 1,2,4] [--modes mini-compiled,torch-compile] [--dtype bfloat16|float32]
        [--out DIR] [--timeout S] [--budget S] [--steps N] [--layers N] [--batch N]
        [--bucket-cap-mb MB]

World sizes above the GPUs visible are skipped, saying so. --device cpu --quick: bench_gpt2's tiny
GPT on 1 and 2 Gloo ranks (one thread each), in seconds (the test runs it; under bfloat16 the
compiled graphs run eager kernels there, as mini's inductor writes no bfloat16 C++). --device cuda
without a GPU prints one line why and exits 0. Writes ddp_scaling.txt, .json, .png and .svg
(tokens/s and efficiency against ranks, mini beside torch) into --out (default figures/cuda/ on
the GPU, figures/ on the CPU), after every configuration. scripts/gpu_ddp.sh runs it on a lent
multi-GPU machine.
"""
import argparse
import copy
import importlib
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpt2 as one_gpu  # noqa: E402  (it puts labs/ on the path too)

MODES = ("mini-compiled", "mini-eager", "torch-compile", "torch-eager")
DEFAULT_MODES = "mini-compiled,torch-compile"
BAR = 0.90  # issue 35: scaling efficiency from 1 to 4 GPUs, and at least torch's
STEM = "ddp_scaling"


# ---- one rank --------------------------------------------------------------------------------
class ExposedCommunication:
    """mini's DDP on this rank: each step's exposed communication, from the end of the
    backward's compute to the averaged gradients in .grad. The start is marked just before DDP
    flattens and launches its last bucket: the last gradient's hook launches it, and no backward
    compute is left after it (compute_kernels_after_last_launch, from DDP's _timeline, checks
    that). The end is marked once backward() has returned: DDP's end-of-backward callback has
    waited for every all-reduce and copied the averages back. On CUDA the marks are CUDA events
    on mini's compute stream, so the time is the GPU's (the host runs ahead of it); on the CPU
    they are the wall clock."""

    def __init__(self, lib, ddp, cuda):
        self.lib, self.ddp, self.cuda = lib, ddp, cuda
        self.last_launch = None
        self.steps = []  # per step: (start mark, end mark, compute kernels after the last launch)
        reducer = ddp._reducer
        launch = reducer._launch

        def marked_launch(bucket):  # on the instance: the gradient hooks call self._launch
            self.last_launch = self.mark()
            launch(bucket)
        reducer._launch = marked_launch

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = self.lib.cuda.Event(enable_timing=True)
        event.record()
        return event

    def end_of_backward(self):
        events = self.ddp._timeline
        done = [e for e in events if e.kind == "done"][-1]
        last_launch = [e for e in events if e.kind == "launch"][-1]
        self.steps.append((self.last_launch, self.mark(),
                           done.compute_kernels - last_launch.compute_kernels))

    def fields(self, warmup):
        """The timed steps' numbers (read after the steps' synchronize: the events are done)."""
        timed = self.steps[warmup:]
        if self.cuda:
            ms = [start.elapsed_time(end) for start, end, _ in timed]
        else:
            ms = [(end - start) * 1e3 for start, end, _ in timed]
        clock = "CUDA events, rank 0's compute stream" if self.cuda else "wall clock"
        return dict(exposed_ms=statistics.median(ms), exposed_ms_steps=ms, exposed_clock=clock,
                    compute_kernels_after_last_launch=max(k for _, _, k in timed))


def train_rank(lib, lib_name, how, gpt, dist, args, size, ddp_options):
    """This rank's DDP training steps; the fields rank 0 reports."""
    device, cuda = args.device, args.device == "cuda"
    sync = lib.cuda.synchronize if cuda else (lambda: None)
    model, config = one_gpu.build_model(lib, gpt, size, device)
    ddp_class = importlib.import_module(f"{lib_name}.nn.parallel").DistributedDataParallel
    ddp = ddp_class(model, bucket_cap_mb=args.bucket_cap_mb, **ddp_options)  # rank 0's weights
    fn = one_gpu.model_to_run(lib, lib_name, how, ddp)
    opt = one_gpu.make_optimizer(model, device)
    lib.manual_seed(1000 + dist.get_rank())  # each rank its own batches
    batches = one_gpu.random_batches(lib, config, size, device, size["warmup"] + size["steps"])
    is_mini = lib_name == "mini"
    exposed = ExposedCommunication(lib, ddp, cuda) if is_mini else None
    step = one_gpu.training_step(fn, opt, batches, one_gpu.autocast_for(lib, device, args.dtype),
                                 after_backward=exposed.end_of_backward if exposed else None)
    times, losses, _, _ = one_gpu.time_steps(step, lib, size, cuda, is_mini, sync)
    world = dist.get_world_size()
    ms = statistics.median(times[size["warmup"]:]) * 1e3
    tokens_per_s = world * size["batch"] * config.block_size / (ms / 1e3)
    parameters, flops_per_token = one_gpu.model_flops_per_token(model, config)
    result = dict(mode=f"{lib_name}-{how}", world_size=world, dtype=args.dtype, ms=ms,
                  step_ms=[t * 1e3 for t in times], tokens_per_s=tokens_per_s,
                  tokens_per_s_per_rank=tokens_per_s / world,
                  mfu=flops_per_token * tokens_per_s / world / (one_gpu.PEAK_TFLOPS * 1e12),
                  peak_memory_bytes=one_gpu.peak_memory(lib, cuda, is_mini), first_step_s=times[0],
                  parameters=parameters, flops_per_token=flops_per_token, losses=losses,
                  buckets=len(ddp.bucket_sizes) if is_mini else None)
    if exposed:
        result.update(exposed.fields(size["warmup"]))
    else:
        result.update(exposed_ms=None,
                      exposed_not_measured="torch's DDP keeps no per-bucket timeline")
    return result


def rank_main(args, size):
    """What each rank the launcher starts runs; rank 0 writes its result to --result."""
    lib_name, how = args.rank_of.split("-", 1)
    lib, gpt = one_gpu.load_library(lib_name)
    dist = importlib.import_module(f"{lib_name}.distributed")
    ddp_options = {}
    if args.device == "cuda" and lib_name == "torch":
        # torch's habit: the rank picks its GPU (mini's launcher already left it one, cuda:0)
        lib.cuda.set_device(int(os.environ["LOCAL_RANK"]) % lib.cuda.device_count())
        ddp_options["device_ids"] = [lib.cuda.current_device()]
    if args.device == "cpu":
        lib.set_num_threads(1)  # ranks share the cores: one thread each, the 1-rank base too
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    try:
        result = train_rank(lib, lib_name, how, gpt, dist, args, size, ddp_options)
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        Path(args.result).write_text(json.dumps(result))
        print(f"{args.rank_of}, {result['world_size']} ranks: {result['ms']:.2f} ms/step",
              flush=True)


# ---- the driver: a world of ranks per configuration ------------------------------------------
def rank_flags(args):
    """The flags a rank gets from the driver's command line."""
    flags = ["--device", args.device, "--dtype", args.dtype,
             "--bucket-cap-mb", str(args.bucket_cap_mb)]
    if args.quick:
        flags.append("--quick")
    chosen = (("--steps", args.steps), ("--layers", args.layers), ("--batch", args.batch))
    for flag, value in chosen:
        if value is not None:
            flags += [flag, str(value)]
    return flags


def stop_group(proc):
    """SIGTERM to the launcher's process group (the launcher and its ranks), SIGKILL to what is
    left of it after 5 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not signal_group(proc.pid, sig):
            return
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            if proc.poll() is not None and not signal_group(proc.pid, 0):  # 0: is anyone left?
                return
            time.sleep(0.1)


def signal_group(group, sig):
    """Sends sig to the process group; False when none of it is left."""
    try:
        os.killpg(group, sig)
        return True
    except ProcessLookupError:
        return False


def why_it_failed(output):
    """The line of a failed run that says why: a rank's last error line (its exception, or
    argparse's), else its last line; the launcher's own closing line only names the rank."""
    lines = [line for line in output.splitlines() if line.strip()]
    ranks = [line for line in lines if not line.startswith("mini.distributed.run:")]
    said = [line for line in ranks if "Error" in line or "error:" in line or "Exception" in line]
    return (said or ranks or lines or ["no output"])[-1][:300]


def run_world(mode, world, args, folder):
    """Starts `world` ranks of this file in `mode` under mini's launcher; rank 0's result, or a
    dict whose "error" says why there is none (with the output's tail)."""
    result_path = folder / f"{mode}_{world}.json"
    command = [sys.executable, "-m", "mini.distributed.run", "--nproc-per-node", str(world),
               str(Path(__file__).resolve()), "--rank-of", mode, *rank_flags(args),
               "--result", str(result_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1") if args.device == "cpu" else dict(os.environ)
    # a process group of its own (not a session: whatever ends this session's processes ends
    # them too), so that a timeout or an interrupt ends every rank
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, process_group=0)
    error = None
    try:
        output, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        output, _ = proc.communicate()
        error = f"timed out after {args.timeout:.0f} s"
    finally:
        if proc.poll() is None:  # interrupted: the ranks go too
            stop_group(proc)
    if error is None and (proc.returncode != 0 or not result_path.exists()):
        error = f"exit status {proc.returncode}: {why_it_failed(output)}"
    if error:
        return dict(mode=mode, world_size=world, error=error, output_tail=output.splitlines()[-40:])
    return json.loads(result_path.read_text())


def why_skipped(mode, world, gpus, args, spent_s):
    """Why a configuration is not run ("" when it is): too few GPUs, the library or its backend
    missing here, the --budget spent."""
    import mini.distributed as dist
    if gpus is not None and world > gpus:
        return f"{world} ranks need {world} GPUs; {gpus} visible"
    if mode.startswith("torch") and importlib.util.find_spec("torch") is None:
        return "torch is not importable here"
    if mode.startswith("mini") and args.device == "cuda" and not dist.is_nccl_available():
        return "this build of mini has no NCCL (nccl.h was not found when it was built)"
    if mode.startswith("mini") and args.device == "cpu" and not dist.is_gloo_available():
        return "this build of mini has no Gloo (Debian's libgloo-dev)"
    if args.budget is not None and spent_s > args.budget:
        return f"the run's --budget of {args.budget:.0f} s was spent"
    return ""


def add_scaling(results):
    """Each measured row's efficiency against its mode's 1-rank row, and what N ranks add."""
    base = {r["mode"]: r for r in results if r["world_size"] == 1 and "error" not in r}
    for r in results:
        one = base.get(r["mode"])
        if "error" in r or one is None:
            continue
        r["efficiency"] = r["tokens_per_s"] / (r["world_size"] * one["tokens_per_s"])
        r["added_ms"] = r["ms"] - one["ms"]


def the_bar(results, device):
    """Issue 35's bar at 4 GPUs: mini-compiled's efficiency >= 90% and >= torch-compile's."""
    if device != "cuda":
        return dict(measured=False, said="bar (1 to 4 GPUs, >= 90% and >= torch's): a GPU bar, "
                                         "not judged on CPU ranks")
    at_four = {r["mode"]: r.get("efficiency") for r in results
               if r["world_size"] == 4 and "error" not in r}
    mini_eff, torch_eff = at_four.get("mini-compiled"), at_four.get("torch-compile")
    if mini_eff is None:
        return dict(measured=False, said="bar (1 to 4 GPUs, >= 90% and >= torch's): not measured "
                                         "(no mini-compiled run at 1 and 4 GPUs)")
    met = mini_eff >= BAR and (torch_eff is None or mini_eff >= torch_eff)
    torch_said = f"{100 * torch_eff:.1f}%" if torch_eff is not None else "not measured"
    said = (f"bar (1 to 4 GPUs, >= 90% and >= torch's): mini-compiled {100 * mini_eff:.1f}%, "
            f"torch-compile {torch_said}: {'met' if met else 'not met'}"
            + ("" if torch_eff is not None else " (against 90% only)"))
    return dict(measured=True, mini=mini_eff, torch=torch_eff, met=met, said=said)


def not_measured(device):
    lines = ["torch's exposed communication: torch's DDP keeps no per-bucket timeline; what its "
             "ranks add shows in 'vs 1' (the step minus the 1-rank step)",
             "ranks other than 0: rank 0 alone times its steps (the collectives keep the ranks "
             "in step)",
             "the GPU time by kernel class and memory phases (bench_gpt2.py, one GPU)",
             "more than one machine: every rank runs on this one"]
    if device == "cpu":
        lines.insert(1, "GPU time: these ranks are CPU processes; their exposed communication "
                        "is wall clock")
    return lines


def fmt(value, spec, unit=""):
    return "-" if value is None else f"{value:{spec}}{unit}"


def row_line(r):
    if "error" in r:
        said = r["error"] if r["error"].startswith("skipped") else f"failed: {r['error']}"
        return f"{r['mode']:<15} {r['world_size']:>5}  {said}"
    peak = None if r["peak_memory_bytes"] is None else r["peak_memory_bytes"] / 1e6
    efficiency = None if r.get("efficiency") is None else 100 * r["efficiency"]
    return (f"{r['mode']:<15} {r['world_size']:>5} {r['ms']:9.2f} {r['tokens_per_s']:11,.0f} "
            f"{r['tokens_per_s_per_rank']:10,.0f} {fmt(efficiency, '9.1f', '%'):>10} "
            f"{fmt(r.get('added_ms'), '+8.2f'):>9} {fmt(r['exposed_ms'], '8.2f'):>9} "
            f"{100 * r['mfu']:5.1f}% {fmt(peak, '.0f', ' MB'):>9} {r['first_step_s']:7.2f}s")


def table(results, header, device):
    lines = [header, "",
             f"{'mode':<15} {'ranks':>5} {'ms/step':>9} {'tokens/s':>11} {'per rank':>10} "
             f"{'efficiency':>10} {'vs 1 (ms)':>9} {'exposed':>9} {'MFU':>6} {'peak mem':>9} "
             f"{'1st step':>8}"]
    lines += [row_line(r) for r in results]
    lines += ["", the_bar(results, device)["said"], "not measured:"]
    lines += [f"  {line}" for line in not_measured(device)]
    return "\n".join(lines) + "\n"


def figure(results, out, title, device):
    from measure import pyplot, save_figure
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    colors = {"mini-compiled": "#4477aa", "mini-eager": "#66ccee", "torch-compile": "#ee6677",
              "torch-eager": "#ccbb44"}
    done = [r for r in results if "error" not in r]
    for mode in MODES:
        rows = sorted((r for r in done if r["mode"] == mode), key=lambda r: r["world_size"])
        if not rows:
            continue
        ranks = [r["world_size"] for r in rows]
        left.plot(ranks, [r["tokens_per_s"] for r in rows], "o-", color=colors[mode], label=mode)
        if rows[0]["world_size"] == 1:  # perfect scaling of this mode's 1-rank step
            left.plot(ranks, [n * rows[0]["tokens_per_s"] for n in ranks], ":", color=colors[mode])
        scaled = [r for r in rows if r.get("efficiency") is not None]
        right.plot([r["world_size"] for r in scaled], [100 * r["efficiency"] for r in scaled], "o-",
                   color=colors[mode], label=mode)
    ranks_label = "ranks (GPUs)" if device == "cuda" else "ranks (processes)"
    left.set(xlabel=ranks_label, ylabel="tokens/s, all ranks",
             title="throughput (dotted: perfect scaling)")
    right.axhline(100 * BAR, color="gray", linestyle="--", label="the bar: 90%")
    right.set(xlabel=ranks_label, ylabel="scaling efficiency (%)", ylim=(0, 105),
              title="tokens/s(N) / (N x tokens/s(1))")
    for ax in (left, right):
        ax.set_xticks(sorted({r["world_size"] for r in done}) or [1])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out, STEM)


def write_report(out, header, results, fields):
    """ddp_scaling.txt and .json, rewritten after every configuration (a run cut short keeps
    what it measured)."""
    add_scaling(results)
    (out / f"{STEM}.txt").write_text(table(results, header, fields["device"]))
    report = dict(header=header, **fields, results=results, bar=the_bar(results, fields["device"]),
                  not_measured=not_measured(fields["device"]))
    (out / f"{STEM}.json").write_text(json.dumps(report, indent=2) + "\n")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny GPT for 3 steps (seconds on the CPU)")
    parser.add_argument("--world-sizes", default=None,
                        help="comma-separated (default 1,2,4; --device cpu 1,2)")
    parser.add_argument("--modes", default=DEFAULT_MODES,
                        help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                        help="bfloat16: the forward under autocast (default)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a world of ranks may take")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole run: later configurations are skipped")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps (default 10; --quick 3)")
    parser.add_argument("--layers", type=int, default=None, help="layers (default 12; --quick 2)")
    parser.add_argument("--batch", type=int, default=None,
                        help="sequences a rank and step (default 8; --quick 2)")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0,
                        help="DDP's bucket cap (default 25)")
    parser.add_argument("--rank-of", choices=MODES, help=argparse.SUPPRESS)  # the launcher's ranks
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.world_sizes = args.world_sizes or ("1,2,4" if args.device == "cuda" else "1,2")
    try:
        args.world_sizes = [int(n) for n in args.world_sizes.split(",")]
    except ValueError:
        parser.error(f"--world-sizes {args.world_sizes}: comma-separated numbers of ranks")
    args.modes = args.modes.split(",")
    bad = [m for m in args.modes if m not in MODES]
    bad += [f"{n} ranks" for n in args.world_sizes if n < 1]
    if bad:
        parser.error(f"unknown {bad[0]!r}: modes are {', '.join(MODES)}; world sizes are 1 or more")
    size = copy.deepcopy(one_gpu.QUICK if args.quick else one_gpu.FULL)
    for key, value in (("steps", args.steps), ("batch", args.batch)):
        if value is not None:
            size[key] = value
    if args.layers is not None:
        size["config"]["n_layer"] = args.layers
    return args, size


def main(argv=None):
    args, size = parse_args(argv)
    if args.rank_of:
        return rank_main(args, size)
    # a caller's time limit sends SIGINT (gpu_ddp.sh's `timeout`): stop with what was measured,
    # even where the signal came in ignored (a background job of a shell without job control)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import mini
    from measure import REPO_ROOT, cuda_unavailable_reason
    if args.device == "cuda":
        why = cuda_unavailable_reason()
        if why:
            print(f"bench_ddp_gpt2: --device cuda: skipped: no CUDA device ({why})")
            return 0
    gpus = mini.cuda.device_count() if args.device == "cuda" else None
    out = args.out or REPO_ROOT / "figures" / ("cuda" if args.device == "cuda" else "")
    out.mkdir(parents=True, exist_ok=True)
    where = (f"{gpus} x {mini.cuda.get_device_name(0)}, NCCL" if gpus else
             f"cpu ({os.cpu_count()} cores), Gloo, one thread a rank")
    c = size["config"]
    autocast = " autocast" if args.dtype == "bfloat16" else ""
    header = (f"bench_ddp_gpt2: labs/gpt.py, {c['n_layer']} layers, width {c['n_embd']}, context "
              f"{c['block_size']}, vocabulary {c['vocab_size']}; batch {size['batch']} x "
              f"{c['block_size']} a rank; {args.dtype}{autocast}; AdamW (fused on CUDA); DDP, "
              f"{args.bucket_cap_mb:g} MB buckets; median of {size['steps']} steps after "
              f"{size['warmup']} warm-up, rank 0; {where}; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(header, flush=True)
    fields = dict(device=args.device, gpus=gpus, where=where, quick=args.quick, size=size,
                  dtype=args.dtype, bucket_cap_mb=args.bucket_cap_mb,
                  peak_tflops=one_gpu.PEAK_TFLOPS)
    start, results = time.monotonic(), []
    try:
        with tempfile.TemporaryDirectory() as folder:
            for world in args.world_sizes:
                for mode in args.modes:
                    why = why_skipped(mode, world, gpus, args, time.monotonic() - start)
                    try:
                        r = (dict(mode=mode, world_size=world, error=f"skipped: {why}") if why else
                             run_world(mode, world, args, Path(folder)))
                    except KeyboardInterrupt:
                        results.append(dict(mode=mode, world_size=world, error="interrupted"))
                        raise
                    results.append(r)
                    write_report(out, header, results, fields)
                    print(row_line(r), flush=True)
    except KeyboardInterrupt:  # a caller's time limit: keep what was measured
        print("bench_ddp_gpt2: interrupted; the table and figure hold what was measured so far")
    write_report(out, header, results, fields)
    print(table(results, header, args.device))
    paths = figure(results, out, "; ".join(header.split("; ")[:3]) + f"; {where}", args.device)
    print("wrote", ", ".join(str(p) for p in [out / f"{STEM}.txt", out / f"{STEM}.json", *paths]))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
