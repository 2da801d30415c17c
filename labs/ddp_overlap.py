"""Lab -- DDP's overlap: how much of the gradient all-reduce hides behind the backward, for eager
DDP, for a compiled model whose backward is one graph, and for one cut at DDP's buckets.

DDP all-reduces gradients in buckets, each started from autograd hooks as soon as its last
gradient is final, so that communication runs while the backward of earlier layers still
computes. Eager autograd produces gradients layer by layer, and the hooks fire as they come. A
compiled graph's backward is one autograd node: every gradient comes out at its end, every
bucket starts then, and all communication is exposed. Dynamo's DDPOptimizer (mini: the graph
split, capture/ddp_optimizer.h, mini.config.optimize_ddp) cuts the graph at the buckets so that
each piece's backward is its own node and the overlap comes back.

The lab starts --nproc ranks of itself on this machine (Gloo over loopback TCP, the variables
torchrun sets; one thread each), trains an MLP of --layers Linear layers for --steps steps in
each mode, and reads each step's timeline from DDP (mini's _timeline: when each gradient was
final, each bucket launched, waited for; a thread per all-reduce notes when it finished). Per
mode it prints, as the median step
over steps and the mean over ranks:

    step ms        forward + backward + SGD step
    backward ms    loss.backward(), communication included
    exposed ms     from the end of backward compute to the averaged gradients in .grad: the
                   buckets still to flatten and launch, the wait for every all-reduce, the
                   copy back (the backward's wait alone is in the JSON, waited_ms)
    early          all-reduces launched while backward compute still ran, of all launched
    graphs         graphs compiled (1 whole; one per bucket split)

and, where torch imports (the GPU machine), torch DDP + torch.compile on the same model and
ranks: step ms, and its exposed communication as step time minus the step time under no_sync
(mini's by the same measure beside it).

    PYTHONPATH=build/python .venv/bin/python labs/ddp_overlap.py [--nproc 2] [--quick] [--out DIR]
        [--backend inductor|aot_eager] [--no-torch]

Writes ddp_overlap.png/.svg (rank 0's timeline of its median step in each mode, and the exposed
communication per mode) and ddp_overlap.json into --out (default: figures/); with --nproc 4,
ddp_overlap_4ranks.*.
"""

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import mini

REPO_ROOT = Path(__file__).resolve().parents[1]
MODES = ["eager", "compiled, whole", "compiled, split"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the figure and the JSON (default: figures/)")
    parser.add_argument("--quick", action="store_true", help="a smaller model and fewer steps")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="the ranks run on the CPU over Gloo; cuda: says so and exits 0")
    parser.add_argument("--backend", choices=["inductor", "aot_eager"], default=None,
                        help="the compiled modes' backend (default: inductor; aot_eager under --quick)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (processes) on this machine")
    parser.add_argument("--layers", type=int, default=None, help="Linear layers (default 8; --quick 6)")
    parser.add_argument("--width", type=int, default=None, help="their width (default 768; --quick 384)")
    parser.add_argument("--batch", type=int, default=64, help="rows per rank and step")
    parser.add_argument("--bucket-cap-mb", type=float, default=None,
                        help="DDP's bucket cap (default: two layers' parameters)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per mode (default 10; --quick 4)")
    parser.add_argument("--no-torch", action="store_true", help="skip torch's DDP beside mini's")
    parser.add_argument("--rank-output", help=argparse.SUPPRESS)  # set for the ranks the lab starts
    args = parser.parse_args(argv)
    args.layers = args.layers or (6 if args.quick else 8)
    args.width = args.width or (384 if args.quick else 768)
    args.steps = args.steps or (4 if args.quick else 10)
    args.backend = args.backend or ("aot_eager" if args.quick else "inductor")
    layer_mb = (args.width * args.width + args.width) * 4 / 2 ** 20
    args.bucket_cap_mb = args.bucket_cap_mb or 2 * layer_mb
    return args


# ---- one rank ---------------------------------------------------------------------------------


def make_model(nn, manual_seed, args):
    manual_seed(0)
    blocks = []
    for _ in range(args.layers):
        blocks += [nn.Linear(args.width, args.width), nn.ReLU()]
    return nn.Sequential(*blocks[:-1])


def step_record(ddp, times, finished):
    """One step's numbers and timeline (seconds from the step's start) from DDP's _timeline and
    the all-reduces' finishing times."""
    t0, t_backward, t_end_backward, t_end = times
    events = ddp._timeline
    done = [e for e in events if e.kind == "done"][-1]
    launches = [e for e in events if e.kind == "launch"]
    # compute is over at the first event after the backward's last kernel (DDP's own kernels,
    # flattening and copying back, are not counted as compute)
    compute_end = next(e.time for e in events if e.compute_kernels == done.compute_kernels)
    return {
        "step_ms": (t_end - t0) * 1e3,
        "backward_ms": (t_end_backward - t_backward) * 1e3,
        "exposed_ms": (done.time - compute_end) * 1e3,
        "waited_ms": sum(e.seconds for e in events if e.kind == "wait") * 1e3,
        "early": sum(e.compute_kernels < done.compute_kernels for e in launches),
        "launched": len(launches),
        "timeline": {
            "backward": [t_backward - t0, compute_end - t0],
            "launch": {e.bucket: e.time - t0 for e in launches},
            "complete": {bucket: at - t0 for bucket, at in finished.items()},
            "wait": [[e.time - e.seconds - t0, e.time - t0] for e in events if e.kind == "wait"],
            "end": t_end - t0,
        },
    }


def watch_completions(ddp):
    """When each bucket's all-reduce finishes: a thread per launch waits for it (Work.wait lets go
    of the GIL) and notes the time in the dict of the step that launched it. Returns new_step(),
    which starts a step's dict and returns it."""
    current = [{}]

    def observe(bucket, work):
        finished = current[0]

        def wait():
            try:
                work.wait()
            finally:
                finished[bucket] = time.perf_counter()
        threading.Thread(target=wait, daemon=True).start()
    ddp._reducer.launch_observers.append(observe)

    def new_step():
        current[0] = {}
        return current[0]
    return new_step


def run_mode(mode, ddp, x, y, args, no_sync=False):
    """Warm-up steps (the compile), then args.steps timed ones; their records."""
    nn = mini.nn
    mini.reset()
    run = ddp if mode == "eager" else mini.compile(ddp, backend=args.backend)
    optimizer = mini.optim.SGD(ddp.parameters(), lr=1e-3)
    records, new_step = [], watch_completions(ddp)
    with mini.config.patch(optimize_ddp=mode == "compiled, split"):
        for step in range(2 + args.steps):
            finished = new_step()
            t0 = time.perf_counter()
            if no_sync:
                with ddp.no_sync():
                    loss = nn.functional.mse_loss(run(x), y)
                    t1 = time.perf_counter()
                    loss.backward()
            else:
                loss = nn.functional.mse_loss(run(x), y)
                t1 = time.perf_counter()
                loss.backward()
            t2 = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad()
            t3 = time.perf_counter()
            if step >= 2:
                records.append({"step_ms": (t3 - t0) * 1e3} if no_sync else
                               step_record(ddp, (t0, t1, t2, t3), finished))
    return records


def mini_rank(args):
    import mini.distributed as dist
    from mini.nn.parallel import DistributedDataParallel as DDP
    mini.set_num_threads(1)
    rank = dist.get_rank()
    mini.manual_seed(100 + rank)
    x, y = mini.randn(args.batch, args.width), mini.randn(args.batch, args.width)
    out = {}
    for mode in MODES:
        ddp = DDP(make_model(mini.nn, mini.manual_seed, args), bucket_cap_mb=args.bucket_cap_mb)
        counter = mini.CompileCounter()
        if mode != "eager":  # the graphs compiled: one, or one per bucket
            with mini.config.patch(optimize_ddp=mode == "compiled, split"):
                mini.compile(ddp, backend=counter)(x)
        records = run_mode(mode, ddp, x, y, args)
        quiet = run_mode(mode, ddp, x, y, args, no_sync=True)
        out[mode] = {"steps": records, "no_sync_step_ms": statistics.median(r["step_ms"] for r in quiet),
                     "graphs": counter.frame_count if mode != "eager" else 0,
                     "buckets": len(ddp.bucket_sizes)}
    return out


def torch_rank(args):
    """torch DDP + torch.compile on the same model: step and no_sync step times per mode."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    torch.manual_seed(100 + dist.get_rank())
    x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)
    out = {}
    for mode in MODES:
        torch._dynamo.reset()
        torch._dynamo.config.optimize_ddp = mode == "compiled, split"
        ddp = DDP(make_model(torch.nn, torch.manual_seed, args), bucket_cap_mb=args.bucket_cap_mb)
        run = ddp if mode == "eager" else torch.compile(ddp, backend=args.torch_backend)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        times = {}
        for no_sync in (False, True):
            samples = []
            for step in range(2 + args.steps):
                t0 = time.perf_counter()
                with ddp.no_sync() if no_sync else contextlib.nullcontext():
                    torch.nn.functional.mse_loss(run(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
                samples.append((time.perf_counter() - t0) * 1e3)
            times[no_sync] = statistics.median(samples[2:])
        out[mode] = {"step_ms": times[False], "no_sync_step_ms": times[True]}
    return out


def rank_main(args):
    """What each started rank runs: mini's modes, then torch's where asked; one JSON file."""
    import mini.distributed as dist
    dist.init_process_group("gloo")
    try:
        result = {"mini": mini_rank(args)}
    finally:
        dist.destroy_process_group()
    if args.torch_backend:
        import torch.distributed
        os.environ["MASTER_PORT"] = os.environ["DDP_LAB_TORCH_PORT"]  # mini's store may linger on its own
        torch.distributed.init_process_group("gloo")
        try:
            result["torch"] = torch_rank(args)
        finally:
            torch.distributed.destroy_process_group()
    Path(args.rank_output).write_text(json.dumps(result))


# ---- the lab: start the ranks, print, draw -------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(args, folder, torch_backend):
    """Runs --nproc ranks of this file; their results, by rank."""
    procs, port, torch_port = [], free_port(), free_port()
    for rank in range(args.nproc):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(args.nproc), OMP_NUM_THREADS="1",
                   DDP_LAB_TORCH_BACKEND=torch_backend, DDP_LAB_TORCH_PORT=str(torch_port))
        command = [sys.executable, __file__, *sys.argv[1:], "--rank-output", str(folder / f"rank{rank}.json")]
        procs.append(subprocess.Popen(command, env=env))
    failed = [rank for rank, p in enumerate(procs) if p.wait() != 0]
    if failed:
        sys.exit(f"ddp_overlap: rank(s) {failed} failed (their errors are above)")
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(args.nproc)]


def torch_backend_here(args):
    """torch.compile's backend for the torch runs ("" where torch does not import): aot_eager, as
    Inductor's cold C++ compile of each piece on the CPU would take minutes (notes/perf.md)."""
    if args.no_torch:
        return ""
    try:
        import torch  # noqa: F401
    except ImportError:
        return ""
    return "aot_eager"


def summarize(ranks):
    """Per mode: the median step's numbers, averaged over the ranks."""
    rows = {}
    for mode in MODES:
        per_rank = [r["mini"][mode] for r in ranks]

        def mean_median(key):
            return statistics.mean(statistics.median(s[key] for s in pr["steps"]) for pr in per_rank)
        step = mean_median("step_ms")
        rows[mode] = {"step_ms": step, "backward_ms": mean_median("backward_ms"),
                      "exposed_ms": mean_median("exposed_ms"), "waited_ms": mean_median("waited_ms"),
                      "early": per_rank[0]["steps"][0]["early"], "launched": per_rank[0]["steps"][0]["launched"],
                      "graphs": per_rank[0]["graphs"], "buckets": per_rank[0]["buckets"],
                      "no_sync_step_ms": statistics.mean(pr["no_sync_step_ms"] for pr in per_rank)}
        if "torch" in ranks[0]:
            rows[mode]["torch_step_ms"] = statistics.mean(r["torch"][mode]["step_ms"] for r in ranks)
            rows[mode]["torch_no_sync_step_ms"] = statistics.mean(r["torch"][mode]["no_sync_step_ms"]
                                                                  for r in ranks)
    return rows


def print_table(rows, args):
    print(f"\nDDP over Gloo, {args.nproc} ranks, MLP {args.layers} x Linear({args.width}, {args.width}), "
          f"batch {args.batch} a rank, bucket cap {args.bucket_cap_mb:.2f} MB, backend {args.backend}; "
          f"median step, mean over ranks")
    header = f"{'mode':<18}{'step ms':>9}{'backward ms':>13}{'exposed ms':>12}{'early':>8}{'graphs':>8}" \
             f"{'step - no_sync':>16}"
    torch_cols = any("torch_step_ms" in r for r in rows.values())
    if torch_cols:
        header += f"{'torch step':>12}{'torch - no_sync':>17}"
    print(header)
    for mode, r in rows.items():
        line = (f"{mode:<18}{r['step_ms']:>9.1f}{r['backward_ms']:>13.1f}{r['exposed_ms']:>12.1f}"
                f"{r['early']:>5}/{r['launched']:<2}{r['graphs'] or '-':>8}"
                f"{r['step_ms'] - r['no_sync_step_ms']:>16.1f}")
        if torch_cols:
            line += f"{r['torch_step_ms']:>12.1f}{r['torch_step_ms'] - r['torch_no_sync_step_ms']:>17.1f}"
        print(line)


def median_step(steps):
    return sorted(steps, key=lambda s: s["step_ms"])[len(steps) // 2]


def draw_timeline(ax, tl, buckets):
    """One step: the forward and the backward compute in the top lane, then a lane per bucket
    (in launch order): its all-reduce from launch to finished, the end of backward's wait
    for it in red."""
    ms = {k: v * 1e3 for k, v in tl["launch"].items()}
    b0, b1 = (v * 1e3 for v in tl["backward"])
    ax.barh(buckets, b0, left=0, height=0.6, color="tab:gray", label="forward")
    ax.barh(buckets, b1 - b0, left=b0, height=0.6, color="tab:blue", label="backward compute")
    for bucket, start in ms.items():
        lane = buckets - 1 - int(bucket)
        end = tl["complete"].get(bucket, tl["end"]) * 1e3
        ax.barh(lane, end - start, left=start, height=0.6, color="tab:green", alpha=0.6,
                label="all-reduce, launch to finished")
    for (w0, w1), bucket in zip(tl["wait"], sorted(ms, key=int)):
        ax.barh(buckets - 1 - int(bucket), (w1 - w0) * 1e3, left=w0 * 1e3, height=0.3, color="tab:red",
                label="exposed: backward waits for it")
    ax.set_yticks(range(buckets + 1), [f"bucket {buckets - 1 - i}" for i in range(buckets)] + ["compute"],
                  fontsize=7)


def draw(ranks, rows, args):
    from measure import pyplot, save_figure
    plt = pyplot()
    fig, axes = plt.subplots(len(MODES) + 1, 1, figsize=(10, 2.2 * len(MODES) + 2.4),
                             gridspec_kw={"height_ratios": [1] * len(MODES) + [1.1]})
    steps = {m: median_step(ranks[0]["mini"][m]["steps"]) for m in MODES}
    span = max(s["timeline"]["end"] for s in steps.values()) * 1e3
    for ax, mode in zip(axes, MODES):
        draw_timeline(ax, steps[mode]["timeline"], rows[mode]["buckets"])
        ax.set_xlim(0, span * 1.02)
        ax.set_title(f"rank 0, {mode}: its median step, {steps[mode]['step_ms']:.1f} ms, of which "
                     f"{steps[mode]['exposed_ms']:.1f} ms after backward compute, until the gradients "
                     "are averaged", fontsize=9, loc="left")
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), fontsize=8, loc="upper right", ncol=2)
    axes[len(MODES) - 1].set_xlabel("ms from the step's start")
    bars = axes[-1]
    bars.bar(MODES, [rows[m]["exposed_ms"] for m in MODES], color=["tab:gray", "tab:red", "tab:green"])
    bars.set_ylabel("exposed comm (ms)")
    bars.set_title(f"{args.nproc} Gloo ranks: exposed communication (end of backward compute to "
                   "averaged gradients), median step, mean over ranks", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save_figure(fig, args.out, figure_stem(args))


def why_not_here(args):
    """Why the lab cannot run here ("" when it can): it measures CPU ranks over Gloo."""
    if args.device == "cuda":
        return ("--device cuda: the lab's ranks run on the CPU over Gloo (one GPU per rank would need "
                "as many GPUs as ranks); run it with --device cpu")
    import mini.distributed as dist
    if not dist.is_gloo_available():
        return "this build of mini has no Gloo (Debian's libgloo-dev; scripts/setup.sh installs it)"
    return ""


def figure_stem(args):
    """ddp_overlap for 2 ranks (the default), ddp_overlap_4ranks for 4."""
    return "ddp_overlap" if args.nproc == 2 else f"ddp_overlap_{args.nproc}ranks"


def main(argv=None):
    args = parse_args(argv)
    if args.rank_output:
        args.torch_backend = os.environ.get("DDP_LAB_TORCH_BACKEND", "")
        return rank_main(args)
    why_not = why_not_here(args)
    if why_not:
        print(f"ddp_overlap: skipped: {why_not}", flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    torch_backend = torch_backend_here(args)
    load = os.getloadavg()[0]  # the timings are wall clock: a busy machine stretches them
    with tempfile.TemporaryDirectory() as folder:
        ranks = start_ranks(args, Path(folder), torch_backend)
    rows = summarize(ranks)
    print_table(rows, args)
    paths = draw(ranks, rows, args)
    from measure import write_json
    write_json(args.out, figure_stem(args), {"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "cpus": os.cpu_count(), "load_average_at_start": load,
                                         "nproc": args.nproc, "layers": args.layers, "width": args.width,
                                         "batch": args.batch, "bucket_cap_mb": args.bucket_cap_mb,
                                         "backend": args.backend, "torch_backend": torch_backend or None,
                                         "modes": rows, "ranks": ranks})
    print("wrote", ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
