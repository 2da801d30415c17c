"""Lab -- mode="reduce-overhead": what CUDA graphs buy a launch-bound model, and where they lose.

A model of many small layers at batch 8 (N blocks of x + Linear(GELU(Linear(LayerNorm(x)))),
inference under no_grad) spends its time launching kernels, not running them. It runs eager,
compiled (default mode: fusion cuts the launches) and with mode="reduce-overhead" (the compiled
graph's launches recorded once into a CUDA graph and replayed: one graph launch a call), for mini
and, where torch imports and sees a GPU, for torch beside it: the same class body built from
each library's namespace (model_class), torch's loaded with mini's weights.

Per mode: launches per call (mini.metrics: a replay counts 1, and so does each copy mini makes
around it; torch: its profiler's cudaLaunchKernel / cuLaunchKernel, cudaGraphLaunch and
cudaMemcpy / cudaMemset calls), CPU time per call (the host issuing one call, the GPU idle when
it starts), GPU time per call (CUDA events around each call, idle gaps included) and wall time
per call (a loop, synchronized at its end), medians after warm-up. Then where CUDA graphs lose:

  input copies   a replay reads its recording's own buffers, so every call copies its input in
                 (mini also copies every output out). The model with the same input buffer
                 every call against a new one, and relu(x * 2 + 1), one fused kernel, over
                 input sizes: the copies grow with the input, the launches saved do not.
  shape changes  a recording holds one input layout: a new batch size warms up, records on its
                 second call and replays from its third. Two streams of batch sizes,
                 alternating and growing, under eager, default, reduce-overhead and
                 reduce-overhead with dynamic=False: compiles, what each call was (warm-up,
                 recorded, replayed) and its time.

On the CPU there is no CUDA graph: reduce-overhead runs as default mode, and the lab shows what
fusion alone does and the compiles of the streams; the GPU figures are the H200 run's
(figures/cuda/reduce_overhead*). notes/labs.md says how to read the figures.

    PYTHONPATH=build/python .venv/bin/python labs/reduce_overhead.py [--quick] [--out DIR]
        [--device cpu|cuda] [--no-torch]

Writes reduce_overhead.png/.svg (launches and time per call per mode), reduce_overhead_loses
.png/.svg (the copy sweep and the shape streams) and reduce_overhead.json into --out (default:
figures/). --device cuda without a usable GPU prints why in one line and exits 0.
"""

import argparse
import itertools
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mini

from measure import REPO_ROOT, cpu_threads, cuda_ms, cuda_unavailable_reason, per_call_us, pyplot
from measure import save_figure, write_json

FULL = {"width": 256, "depth": 16, "batch": 8, "calls": 200, "sample_seconds": 0.05, "samples": 5,
        "sweep": [2**k for k in range(10, 25, 2)],
        "alternating": [4, 8] * 8, "growing": [b for b in range(2, 10) for _ in range(2)]}
QUICK = {"width": 64, "depth": 8, "batch": 8, "calls": 40, "sample_seconds": 0.01, "samples": 3,
         "sweep": [2**10, 2**14, 2**18],
         "alternating": [4, 8] * 4, "growing": [b for b in range(2, 6) for _ in range(2)]}
MODES = ("eager", "default", "reduce-overhead")
# the shape streams add dynamic=False: a compile (and under reduce-overhead a recording) per size;
# default dynamic=False is the baseline its reduce-overhead calls are read against
STREAM_MODES = MODES + ("default dynamic=False", "reduce-overhead dynamic=False")
INPUT_POOL = 8  # "a new input every call": a pool of this many buffers, cycled
LIBRARIES = ("mini", "torch")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the figures and the JSON (default: figures/)")
    parser.add_argument("--quick", action="store_true",
                        help="8 blocks of width 64, shorter streams and 3 sweep sizes")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-torch", action="store_true",
                        help="with --device cuda: mini alone, even where torch imports")
    parser.add_argument("--redraw", type=Path, metavar="JSON",
                        help="measure nothing: print the tables and draw the figures again from "
                        "a saved reduce_overhead.json (e.g. figures/cuda/reduce_overhead.json)")
    return parser.parse_args(argv)


# ---- the model: one class body, built from either library's namespace ----------------------


def model_class(lib):
    """The launch-bound model's class, its layers taken from `lib` (mini or torch): the same
    code for both, so torch runs exactly what mini runs."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.fc1 = nn.Linear(width, width)
            self.fc2 = nn.Linear(width, width)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(self.norm(x))))

    class LaunchBound(nn.Module):
        def __init__(self, width, depth):
            super().__init__()
            self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    return LaunchBound


def scale_shift(x):
    """One fused kernel under default mode: the input-copy sweep's function."""
    return (x * 2.0 + 1.0).relu()


# ---- the two libraries behind one interface ------------------------------------------------


class Library:
    """What the lab asks of mini and of torch: the same calls, the same meanings."""

    def __init__(self, lib, device):
        self.lib, self.device = lib, device
        self.cuda = lib.cuda if device == "cuda" else None

    def tensor(self, array):
        return self.lib.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(self.device)

    def sync(self):
        if self.cuda:
            self.cuda.synchronize()

    def compile(self, fn, mode):
        if mode == "eager":
            return fn
        if mode.endswith(" dynamic=False"):
            return self.lib.compile(fn, mode=mode.split()[0], dynamic=False)
        return self.lib.compile(fn, mode=mode)


class Mini(Library):
    name = "mini"

    def model(self, config, weights=None):
        mini.manual_seed(0)
        return model_class(mini)(config["width"], config["depth"]).to(self.device)

    def reset(self):
        mini.reset()

    def compiles(self):
        return mini.compiler.stats()["units"]["compiles"]

    def launches(self, calls):
        """Launches of each call in `calls` (callables), from mini.metrics."""
        counts = []
        for call in calls:
            before = mini.metrics.kernel_launches
            call()
            counts.append({"launches": mini.metrics.kernel_launches - before})
        self.sync()
        return counts


TORCH_KERNEL_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")


def api_kind(name):
    """What a CUDA runtime or driver call in torch's profile is, or None."""
    if name.startswith(TORCH_KERNEL_CALLS):
        return "kernel"
    if name.startswith("cudaGraphLaunch"):
        return "graph"
    if name.startswith(("cudaMemcpy", "cudaMemset")):
        return "copy"
    if name.startswith("cudaGraphInstantiate"):
        return "instantiate"
    return None


class Torch(Library):
    name = "torch"

    def model(self, config, weights):
        model = model_class(self.lib)(config["width"], config["depth"])
        model.load_state_dict({k: self.lib.from_numpy(v) for k, v in weights.items()})
        return model.to(self.device)

    def reset(self):
        self.lib._dynamo.reset()

    def compiles(self):
        from torch._dynamo.utils import counters
        return counters["stats"]["unique_graphs"]

    def launches(self, calls):
        """Per call in `calls`: its CUDA runtime calls by kind (api_kind) from torch's profiler,
        each attributed to the call whose record_function range holds its start."""
        from torch.profiler import ProfilerActivity, profile, record_function
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i, call in enumerate(calls):
                with record_function(f"reduce_overhead call {i}"):
                    call()
                self.sync()
        cpu = self.lib.autograd.DeviceType.CPU
        ranges = [(e.time_range.start, e.time_range.end, int(e.name.rsplit(" ", 1)[1]))
                  for e in prof.events()
                  if e.name.startswith("reduce_overhead call ") and e.device_type == cpu]
        counts = [{"kernel": 0, "graph": 0, "copy": 0, "instantiate": 0} for _ in calls]
        for event in prof.events():
            kind = api_kind(event.name)
            for start, end, i in ranges if kind else ():
                if start <= event.time_range.start <= end:
                    counts[i][kind] += 1
                    break
        for c in counts:
            c["launches"] = c["kernel"] + c["graph"] + c["copy"]
        return counts


# ---- measuring one mode --------------------------------------------------------------------


def launch_counts(library, calls):
    """library.launches(calls), or None where counting failed (torch's profiler around a CUDA
    graph recording, say): the times are still measured, the launches shown as "-"."""
    try:
        return library.launches(calls)
    except Exception as error:  # noqa: BLE001
        text = str(error).strip().splitlines()
        print(f"  {library.name}: counting launches failed: {type(error).__name__}: "
              f"{text[0] if text else ''}")
        return None


def host_us(library, run, calls):
    """CPU time per call: the host's time from the call to its return, the GPU idle when it
    starts (synchronized before each call, not after); the median, in microseconds."""
    times = []
    for _ in range(calls):
        library.sync()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    library.sync()
    return statistics.median(times) * 1e6


def timings(library, run, config):
    """Launches, CPU, GPU and wall time per call of run() (already warmed up)."""
    counts = launch_counts(library, [run] * 5)
    record = {"launches": statistics.median(c["launches"] for c in counts) if counts else None,
              "cpu_us": host_us(library, run, config["calls"]),
              "wall_us": per_call_us(run, config["sample_seconds"], config["samples"],
                                     library.sync)}
    if library.name == "torch" and counts:
        record["launch_kinds"] = {k: statistics.median(c[k] for c in counts)
                                  for k in ("kernel", "graph", "copy")}
    if library.cuda is not None:
        record["gpu_us"] = 1e3 * cuda_ms(library.cuda, run, config["calls"], warmup=2,
                                         reduce=statistics.median)
    return record


def measure_mode(library, model, mode, config, expected):
    """One mode of the model: its timings with the same input every call, and with a new
    input buffer every call (a pool of INPUT_POOL, cycled); its largest difference to mini
    eager's output (`expected`)."""
    rng = np.random.default_rng(1)
    pool = [library.tensor(rng.standard_normal((config["batch"], config["width"])))
            for _ in range(INPUT_POOL)]
    library.reset()
    fn = library.compile(model, mode)
    with library.lib.no_grad():
        for _ in range(3):  # compile; warm up; record (reduce-overhead on a GPU); then replays
            out = fn(pool[0])
        gap = float(np.abs(out.cpu().numpy() - expected).max())
        del out  # torch's replays write over its recording's outputs: hold none of them
        record = timings(library, lambda: fn(pool[0]), config)
        turn = itertools.count()
        for x in pool:  # each buffer once before timing (a recording is per layout, not address)
            fn(x)
        record["new_input"] = timings(library, lambda: fn(pool[next(turn) % INPUT_POOL]), config)
    record["max_abs_diff_to_mini_eager"] = gap
    return record


def measure_sweep(library, sizes, config):
    """scale_shift over growing inputs, per mode: launches and wall time per call."""
    rng = np.random.default_rng(2)
    result = {}
    for mode in MODES:
        library.reset()
        fn = library.compile(scale_shift, mode)
        rows = {"launches": [], "wall_us": []}
        with library.lib.no_grad():
            for n in sizes:
                x = library.tensor(rng.standard_normal(n))
                for _ in range(3):
                    fn(x)
                counts = launch_counts(library, [lambda: fn(x)])
                rows["launches"].append(counts[0]["launches"] if counts else None)
                rows["wall_us"].append(per_call_us(lambda: fn(x), config["sample_seconds"],
                                                   config["samples"], library.sync))
        result[mode] = rows
    return result


def run_stream(library, model, sizes, mode, width):
    """Calls in order with the batch sizes of `sizes`, from a fresh compile cache: per call its
    size, wall time (synchronized after), launches and whether it compiled."""
    rng = np.random.default_rng(3)
    inputs = [library.tensor(rng.standard_normal((b, width))) for b in sizes]
    library.reset()
    fn = library.compile(model, mode)
    calls = []
    with library.lib.no_grad():
        for b, x in zip(sizes, inputs):
            compiles = library.compiles()
            library.sync()
            start = time.perf_counter()
            if library.name == "mini":
                launches = library.launches([lambda: fn(x)])[0]["launches"]
            else:
                fn(x)
                launches = None
            library.sync()
            calls.append({"size": b, "us": (time.perf_counter() - start) * 1e6,
                          "compiled": library.compiles() > compiles, "launches": launches})
        if library.name == "torch" and mode.startswith("reduce-overhead"):
            # a second pass, profiled: launches and recordings per call
            library.reset()
            fn = library.compile(model, mode)
            counted = launch_counts(library, [lambda x=x: fn(x) for x in inputs])
            for call, counts in zip(calls, counted or ()):
                call["launches"] = counts["launches"]
                call["kind"] = ("recorded" if counts["instantiate"] else
                                "replayed" if counts["graph"] else "warm-up")
    return calls


def classify_mini_calls(calls, default_calls, device):
    """What each of mini's reduce-overhead calls was, from its launches against default mode's
    (with the same dynamic setting: the same graphs) on the same call: fewer, a replay (one graph launch and its copies); more, a recording (the
    graph's launches counted while recorded, then its replay); the same, a warm-up run in
    default mode. On the CPU every call runs in default mode."""
    for call, default in zip(calls, default_calls):
        if device != "cuda":
            call["kind"] = "no CUDA graph (CPU)"
        elif call["launches"] < default["launches"]:
            call["kind"] = "replayed"
        elif call["launches"] > default["launches"]:
            call["kind"] = "recorded"
        else:
            call["kind"] = "warm-up"


def summarize_stream(calls, steady):
    """A stream's counts, and its time over the `steady` calls (indices where no mode of this
    library compiled: the same calls for every mode) and over all calls."""
    kinds = [c.get("kind") for c in calls]
    times = [calls[i]["us"] for i in steady]
    return {"calls": calls, "compiles": sum(c["compiled"] for c in calls),
            "recordings": kinds.count("recorded"), "replays": kinds.count("replayed"),
            "steady_us": sum(times),
            "steady_median_us": statistics.median(times) if times else None,
            "all_us": sum(c["us"] for c in calls)}


def measure_streams(library, model, config, device):
    streams = {}
    for name in ("alternating", "growing"):
        sizes = config[name]
        if library.name == "mini":  # an untimed pass first: its C++/NVRTC compiles reach the disk
            for mode in STREAM_MODES[1:]:
                run_stream(library, model, sizes, mode, config["width"])
        runs = {mode: run_stream(library, model, sizes, mode, config["width"])
                for mode in STREAM_MODES}
        if library.name == "mini":
            # each against default mode with the same dynamic setting: the same graphs, compiled
            # on the same calls, so only a warm-up, a recording or a replay tells them apart
            classify_mini_calls(runs["reduce-overhead"], runs["default"], device)
            classify_mini_calls(runs["reduce-overhead dynamic=False"], runs["default dynamic=False"], device)
        steady = [i for i in range(len(sizes)) if not any(runs[m][i]["compiled"] for m in runs)]
        streams[name] = {"sizes": sizes, "steady_calls": steady,
                         "modes": {mode: summarize_stream(calls, steady)
                                   for mode, calls in runs.items()}}
    return streams


def measure_library(library, config, weights, expected, say, result):
    """Fills `result` part by part (modes, sweep, streams), so that a failure part way through
    torch's side keeps what it measured before."""
    model = library.model(config, weights)
    result["modes"] = {}
    for mode in MODES:
        result["modes"][mode] = measure_mode(library, model, mode, config, expected)
        launches = cell(result["modes"][mode]["launches"], "g")
        say(f"{library.name} {mode}: {launches} launches a call")
    result["sweep"] = measure_sweep(library, config["sweep"], config)
    say(f"{library.name}: the input-copy sweep")
    result["streams"] = measure_streams(library, model, config, library.device)
    say(f"{library.name}: the shape streams")


# ---- the printed tables --------------------------------------------------------------------


def cell(value, spec):
    return "-" if value is None else format(value, spec)


def mode_table(results, device):
    cuda = device == "cuda"
    header = f"{'':<29}{'launches':>9}{'CPU us':>9}"
    header += f"{'GPU us':>9}{'wall us':>9}" if cuda else ""
    header += f"{'vs eager':>10}   new input each call: launches, {'wall' if cuda else 'CPU'} us"
    lines = [header, "-" * len(header)]
    for name in LIBRARIES:
        modes = results.get(name, {}).get("modes", {})
        key = "wall_us" if cuda else "cpu_us"
        for mode, r in modes.items():
            line = f"{name + ' ' + mode:<29}{cell(r['launches'], 'g'):>9}{r['cpu_us']:>9.1f}"
            if cuda:
                line += f"{cell(r.get('gpu_us'), '.1f'):>9}{r['wall_us']:>9.1f}"
            line += f"{modes['eager'][key] / r[key]:>9.2f}x"
            line += f"   {cell(r['new_input']['launches'], 'g'):>5}, {r['new_input'][key]:.1f}"
            lines.append(line)
    return lines


def sweep_table(results, sizes):
    lines = []
    for name in LIBRARIES:
        sweep = results.get(name, {}).get("sweep")
        if not sweep:
            continue
        header = (f"{name + ' elements':<18}" + "".join(f"{m + ' us':>20}" for m in MODES)
                  + "   launches e/d/r")
        lines += [header, "-" * len(header)]
        for i, n in enumerate(sizes):
            launches = "/".join(cell(sweep[m]["launches"][i], "g") for m in MODES)
            lines.append(f"{n:<18,}" + "".join(f"{sweep[m]['wall_us'][i]:>20.1f}" for m in MODES)
                         + f"   {launches}")
        lines.append("")
    return lines


def stream_table(results, config):
    lines = []
    for stream in ("alternating", "growing"):
        lines.append(f"{stream}: batch sizes {config[stream]}")
        header = (f"{'':<37}{'compiles':>9}{'recorded':>9}{'replayed':>9}{'us/call':>9}"
                  f"{'total us':>10}{'vs eager':>10}{'all calls ms':>14}")
        lines += [header, "-" * len(header)]
        for name in LIBRARIES:
            runs = results.get(name, {}).get("streams", {}).get(stream, {}).get("modes", {})
            for mode, s in runs.items():
                lines.append(f"{name + ' ' + mode:<37}{s['compiles']:>9}{s['recordings']:>9}"
                             f"{s['replays']:>9}{cell(s['steady_median_us'], '.1f'):>9}"
                             f"{s['steady_us']:>10.0f}"
                             f"{runs['eager']['steady_us'] / s['steady_us']:>9.2f}x"
                             f"{s['all_us'] / 1e3:>14.1f}")
        lines.append("")
    return lines


def print_report(results, config, device):
    print("\nper call, the same input every call (medians after warm-up):\n")
    print("\n".join(mode_table(results, device)))
    print("\nlaunches: mini.metrics.kernel_launches (a CUDA graph replay counts 1; mini's copies "
          "of the input in and the output out count 1 each);")
    if "torch" in results:
        print("torch: cudaLaunchKernel + cuLaunchKernel + cudaGraphLaunch + cudaMemcpy/Memset "
              "calls in its profile.")
    print("CPU us: the host's time to issue one call, the GPU idle when it starts.")
    if device == "cuda":
        print("GPU us: CUDA events around each call (idle gaps waiting for the host included); "
              "wall us: a loop of calls, synchronized at its end.")
    print("vs eager: eager's time / this mode's (above 1: faster). New input each call: a pool of "
          f"{INPUT_POOL} buffers cycled.\n")
    print("input copies grow with the input: scale_shift(x) = relu(x * 2 + 1), x of N float32, "
          "wall time per call\n")
    print("\n".join(sweep_table(results, config["sweep"])))
    print("shape changes: each call timed alone (synchronized), from an empty compile cache "
          "(mini's kernels on disk);")
    print("us/call, total us: the median and the sum over the calls no mode compiled (the same "
          "calls for every mode);")
    print("all calls ms: the whole stream, compiles (kernels from the disk cache) included.\n")
    print("\n".join(stream_table(results, config)))
    if device != "cuda":
        print("CUDA graphs need a GPU: on the CPU mode='reduce-overhead' runs as default mode (the "
              "same launches and time; 0 recordings),")
        print("so this run shows what fusion alone does. The GPU's numbers come from the H200 run: "
              "figures/cuda/reduce_overhead.*")


# ---- the figures ---------------------------------------------------------------------------


COLORS = {"eager": "#C44E52", "default": "#4C72B0", "reduce-overhead": "#55A868",
          "default dynamic=False": "#937860", "reduce-overhead dynamic=False": "#8172B3"}


def caption(fig, results, text):
    m = results["measured"]
    fig.text(0.01, 0.01, f"{text}\nmeasured {m['date']} on {m['on']} by: {m['command']}",
             fontsize=7, color="#555555", ha="left", va="bottom")


def draw_modes(plt, results, device):
    cuda = device == "cuda"
    panels = [("launches", "launches per call"), ("cpu_us", "CPU time per call (us)")]
    if cuda:
        panels.append(("gpu_us", "GPU time per call (us)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.4))
    libraries = [name for name in LIBRARIES if results.get(name, {}).get("modes")]
    width = 0.8 / len(libraries)
    for ax, (key, label) in zip(axes, panels):
        for j, name in enumerate(libraries):
            modes = results[name]["modes"]
            xs = [i + (j - (len(libraries) - 1) / 2) * width for i in range(len(MODES))]
            values = [modes.get(m, {}).get(key) for m in MODES]
            bars = ax.bar(xs, [v or 0 for v in values], width, label=name,
                          color=["#4C72B0", "#DD8452"][j], edgecolor="black", linewidth=0.5)
            spec = "g" if key == "launches" else ".1f"
            ax.bar_label(bars, labels=[cell(v, spec) for v in values], fontsize=7)
        ax.set_xticks(range(len(MODES)), MODES)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    model = results["model"]
    if cuda:
        title = ("mode='reduce-overhead': a CUDA graph replays the compiled model's launches as one"
                 f" ({results['device_name']})")
    else:
        title = ("On the CPU fusion alone cuts the launches; mode='reduce-overhead' runs as default"
                 " (CUDA graphs need a GPU)")
    fig.suptitle(title, fontsize=10.5)
    caption(fig, results, f"{model['depth']} blocks x + Linear(GELU(Linear(LayerNorm(x)))), width "
            f"{model['width']}, batch {model['batch']}, float32, no_grad; medians after warm-up; "
            "CPU time: the host issuing one call; GPU time: CUDA events around it.")
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    return fig


def draw_stream(ax, results, stream):
    for name, style in zip(LIBRARIES, ("-", "--")):
        runs = results.get(name, {}).get("streams", {}).get(stream, {}).get("modes", {})
        for mode, s in runs.items():
            calls = s["calls"]
            xs = range(1, len(calls) + 1)
            ax.plot(xs, [c["us"] for c in calls], style, color=COLORS[mode], marker=".",
                    label=f"{name} {mode}: {s['compiles']} / {s['recordings']}")
            compiled = [(i + 1, c["us"]) for i, c in enumerate(calls) if c["compiled"]]
            recorded = [(i + 1, c["us"]) for i, c in enumerate(calls)
                        if c.get("kind") == "recorded"]
            if compiled:
                ax.plot(*zip(*compiled), "x", color="black", markersize=7)
            if recorded:
                ax.plot(*zip(*recorded), "o", mfc="none", color="black", markersize=8)
    sizes = results["config"][stream]
    ax.set_title(f"{stream} batch sizes: {', '.join(map(str, sizes[:8]))}"
                 + (", ..." if len(sizes) > 8 else ""), fontsize=9)
    ax.set_yscale("log")
    ax.set_xlabel("call (x: compiled, o: CUDA graph recorded)")
    ax.set_ylabel("time of the call (us, synchronized)")
    ax.grid(alpha=0.3)
    # ten lines cross each other on the log scale: the legend goes under the panel
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
              handlelength=2.5, columnspacing=1.0, title="mode: compiles / recordings",
              title_fontsize=7)


def draw_losses(plt, results, device):
    fig, (sweep_ax, alt_ax, grow_ax) = plt.subplots(1, 3, figsize=(16, 6.8))
    sizes = results["config"]["sweep"]
    for name, style in zip(LIBRARIES, ("-", "--")):
        sweep = results.get(name, {}).get("sweep")
        for mode in MODES if sweep else ():
            launches = "/".join(sorted({cell(v, "g") for v in sweep[mode]["launches"]}))
            sweep_ax.plot(sizes, sweep[mode]["wall_us"], style, color=COLORS[mode], marker="o",
                          label=f"{name} {mode} (launches: {launches})")
    sweep_ax.set_xscale("log", base=2)
    sweep_ax.set_yscale("log")
    sweep_ax.set_xlabel("input elements (float32)")
    sweep_ax.set_ylabel("wall time per call (us)")
    sweep_ax.set_title("input copies: relu(x * 2 + 1), one fused kernel", fontsize=9)
    sweep_ax.grid(alpha=0.3)
    sweep_ax.legend(fontsize=7)
    draw_stream(alt_ax, results, "alternating")
    draw_stream(grow_ax, results, "growing")
    if device == "cuda":
        title = ("Where CUDA graphs lose: every input is copied in (mini: every output out too), "
                 f"every new shape warms up and records again ({results['device_name']})")
        text = ("reduce-overhead: a replay is one launch plus its copies; a new batch size runs in "
                "default mode once, records on its second call, replays from its third.")
    else:
        title = ("On the CPU nothing is recorded or copied: reduce-overhead runs as default; "
                 "shape changes still recompile")
        text = ("CUDA graphs need a GPU: the GPU run is figures/cuda/reduce_overhead_loses.*; here "
                "the streams show compiles (x) under automatic dynamic shapes and dynamic=False.")
    for name in LIBRARIES:  # the model's input-copy case: the same buffer against a new one
        ro = results.get(name, {}).get("modes", {}).get("reduce-overhead")
        if ro:
            text += (f"\n{name}'s model under reduce-overhead: the same input every call "
                     f"{ro['wall_us']:.0f} us a call, {cell(ro['launches'], 'g')} launches; a new "
                     f"input each call {ro['new_input']['wall_us']:.0f} us, "
                     f"{cell(ro['new_input']['launches'], 'g')} launches.")
    fig.suptitle(title, fontsize=10.5)
    caption(fig, results, text)
    # placed by hand: tight_layout would shrink the stream panels to make room for their legends
    fig.subplots_adjust(left=0.045, right=0.99, top=0.89, bottom=0.36, wspace=0.22)
    return fig


# ---- main ----------------------------------------------------------------------------------


def import_torch(device, no_torch):
    """torch on the GPU where it imports and sees one; else None, saying why."""
    if no_torch:
        return None
    if device != "cuda":
        print("  (torch is not run on the CPU: CUDA graphs do not apply, and torch.compile's "
              "CPU compile of this model takes minutes)")
        return None
    try:
        import torch
    except (ImportError, OSError) as error:
        print(f"  (torch does not import here: {str(error).splitlines()[0]}; mini alone)")
        return None
    if not torch.cuda.is_available():
        print("  (torch imports but sees no GPU: mini alone)")
        return None
    return torch


def draw_all(results, out):
    plt = pyplot()
    out.mkdir(parents=True, exist_ok=True)
    device = results["device"]
    save_figure(draw_modes(plt, results, device), out, "reduce_overhead")
    save_figure(draw_losses(plt, results, device), out, "reduce_overhead_loses")
    write_json(out, "reduce_overhead", results)
    print(f"\nwrote reduce_overhead.png/.svg, reduce_overhead_loses.png/.svg and "
          f"reduce_overhead.json into {out}")


def main(argv=None):
    args = parse_args(argv)
    if args.redraw:  # a saved run (say the GPU's, on a machine without one): tables and figures
        results = json.loads(args.redraw.read_text())
        print_report(results, results["config"], results["device"])
        draw_all(results, args.out)
        return 0
    if args.device == "cuda":
        why = cuda_unavailable_reason()
        if why:
            print(f"reduce_overhead: --device cuda: skipped: no CUDA device ({why})")
            return 0
    config = dict(QUICK if args.quick else FULL)
    device = args.device
    started = time.perf_counter()

    def say(text):
        print(f"  [{time.perf_counter() - started:6.1f} s] {text}", flush=True)

    on = (mini.cuda.get_device_name(0) if device == "cuda"
          else platform.processor() or platform.machine())
    results = {"lab": "reduce_overhead", "device": device, "config": config,
               "measured": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "on": on,
                            "command": "python labs/reduce_overhead.py "
                            + " ".join(sys.argv[1:] if argv is None else argv)},
               "cuda_graphs": device == "cuda"}
    if device == "cuda":
        results["device_name"] = on
    with cpu_threads(device, 1) as threads:
        print(f"reduce_overhead: {config['depth']} blocks of x + Linear(GELU(Linear(LayerNorm(x)"
              f"))), width {config['width']}, batch {config['batch']}, float32, no_grad, on "
              f"{device}" + (f" ({threads} CPU thread)" if threads else f" ({on})"), flush=True)
        library = Mini(mini, device)
        model = library.model(config)
        weights = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
        x = np.random.default_rng(1).standard_normal((config["batch"], config["width"]))
        with mini.no_grad():
            expected = model(library.tensor(x)).cpu().numpy()
        results["model"] = {"width": config["width"], "depth": config["depth"],
                            "batch": config["batch"],
                            "parameters": sum(p.numel() for p in model.parameters())}
        results["threads"] = threads
        results["mini"] = {}
        measure_library(library, config, weights, expected, say, results["mini"])
        torch = import_torch(device, args.no_torch)
        if torch is not None:
            results["torch"] = {"version": torch.__version__}
            try:  # torch's side must never lose mini's results: say what failed
                measure_library(Torch(torch, device), config, weights, expected, say,
                                results["torch"])
            except Exception as error:  # noqa: BLE001
                text = str(error).strip().splitlines()
                print(f"  torch failed: {type(error).__name__}: {text[0] if text else ''}")
    print_report(results, config, device)
    draw_all(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
