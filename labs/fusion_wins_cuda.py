"""fusion_wins --device cuda: the same programs on the GPU, eager against compiled (issue 13).

For each program of labs/fusion_wins.py (torch's anchors and the pointwise chains of length
1..12, 8192x8192 float32; --quick: 256x256) on one GPU:

- mini eager: one kernel per op, every intermediate written to and read back from memory;
- mini compiled: mini.compile(fn) on the CUDA tensors, one generated CUDA kernel per fused
  group (plus a cuBLAS call for ffn's matmul);
- where torch imports and sees the GPU (and --no-torch is not given): torch eager and
  torch.compile on the same functions, their global `mini` bound to torch (torch_twin).

Per program: the median time of a call (CUDA events), kernels launched per call (mini.metrics;
torch's profiler), bytes moved per call (mini.metrics) against the minimum (each input read
once, the output written once), achieved GB/s (minimum bytes / time, and bytes moved / time)
against the copy ceiling of the same run (a clone of 2^28 float32), and the speedup of
compiled over eager (each system's compiled over its own eager).

Three figures of the chain sweep, each titled with the GPU's name and footed with the date
and the command: fusion_wins_cuda_traffic (bytes and kernels per call), fusion_wins_cuda_
bandwidth (GB/s against the copy ceiling), fusion_wins_cuda_speedup. The JSON, fusion_wins.json,
has the CPU run's fields and, per program, torch_eager / torch_compiled / torch_speedup where
torch ran. plot_cuda and cuda_table take the measured rows, so tests/python/test_labs_fusion.py
checks them with made-up rows on a machine without a GPU.

This file is not a lab (labs/run_all.py does not run it): labs/fusion_wins.py --device cuda
calls main_cuda, after checking that a GPU is there.
"""

import datetime
import json
import math
import statistics
import time
import types

import mini

from fusion_programs import (FLOAT32_BYTES, FULL, MB, QUICK, compiled_side, count_one_call,
                             eager_side, kernels_text, make_programs, measure_copy_bandwidth,
                             plot_chain_traffic, program_record, read_torch_anchors, side_value)
from measure import cuda_ms, pyplot, save_figure

# torch's anchor size, every tensor far larger than the GPU's L2 cache
CUDA_FULL = dict(FULL, rows=8192, cols=8192, chain_rows=8192, chain_cols=8192,
                 ffn_features=8192, copy_numel=2**28, repeats=20)
FIGURE_STEMS = ["fusion_wins_cuda_traffic", "fusion_wins_cuda_bandwidth",
                "fusion_wins_cuda_speedup"]
# one color per (system, mode), the same in every figure
COLORS = {"eager": "#C44E52", "compiled": "#4C72B0", "torch_eager": "#DD8452",
          "torch_compiled": "#8172B3", "minimum": "#55A868"}
LABELS = {"eager": "mini eager", "compiled": "mini compiled", "torch_eager": "torch eager",
          "torch_compiled": "torch.compile"}
STYLES = {"eager": "o-", "compiled": "s-", "torch_eager": "^--", "torch_compiled": "v--"}


# ---- measuring ------------------------------------------------------------------------------


def cuda_median_ms(run, repeats, min_seconds=0.0):
    """The median of `repeats` calls of run() on the GPU (CUDA events), in milliseconds
    (min_seconds is best_time_ms's, unused here: measure_copy_bandwidth passes it)."""
    return cuda_ms(mini.cuda, run, repeats, reduce=statistics.median)


def first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def measure_compiled_cuda(program, inputs, expected, minimum, repeats):
    """{"compiled": the compiled side} of a program's row, or {"compiled": None,
    "compile_error": why} when mini cannot compile it (the run goes on with the next)."""
    compiled_fn = mini.compile(program["fn"], backend="inductor")

    def compiled():
        return compiled_fn(*inputs)

    start = time.perf_counter()
    try:
        _, first_counts = count_one_call(compiled)  # captures, renders, NVRTC, loads the kernels
        mini.cuda.synchronize()
    except Exception as error:  # one program mini cannot compile must not end the GPU run
        reason = first_line(error)
        print(f"fusion_wins: {program['name']}: mini.compile failed on CUDA ({reason}); "
              "its compiled columns are empty")
        return {"compiled": None, "compile_error": reason}
    compile_seconds = time.perf_counter() - start
    result, counts = count_one_call(compiled)
    compiled_ms = cuda_median_ms(compiled, repeats)
    side = compiled_side(first_counts, counts, minimum, compiled_ms, compile_seconds)
    side["matches_eager"] = mini.allclose(result, expected, rtol=1e-4, atol=1e-5)  # on the host
    if not side["matches_eager"]:
        print(f"fusion_wins: {program['name']}: the compiled result differs from eager; "
              "its table row says so")
    return {"compiled": side}


def torch_twin(torch, fn):
    """fn with torch ops: the same code, its global `mini` bound to torch (the programs use
    tensor methods and relu, sigmoid, rsqrt, which torch also has)."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, "mini": torch}, fn.__name__)


def torch_kernels(torch, run):
    """CUDA kernels one call of run() launches, counted by torch's profiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return sum(1 for event in prof.events()
               if event.device_type == torch.autograd.DeviceType.CUDA)


def torch_side(torch, run, minimum, repeats):
    time_ms = cuda_ms(torch.cuda, run, repeats, reduce=statistics.median)
    return {"kernel_launches": torch_kernels(torch, run), "time_ms": time_ms,
            "minimum_GBps": minimum / (time_ms * 1e-3) / 1e9}


def measure_torch(torch, program, inputs, minimum, repeats):
    """torch eager and torch.compile on the program's twin, with mini's input values:
    {"torch_eager", "torch_compiled", "torch_speedup"}."""
    twin = torch_twin(torch, program["fn"])
    torch_inputs = [torch.from_numpy(t.cpu().numpy()).cuda() for t in inputs]
    # each program from a clean Dynamo: the twins share one code object per program body, and
    # past torch's recompile limit (8) torch.compile would quietly run the rest eagerly
    torch._dynamo.reset()
    compiled_twin = torch.compile(twin)
    start = time.perf_counter()
    compiled_twin(*torch_inputs)  # Dynamo, Inductor, Triton
    torch.cuda.synchronize()
    compile_seconds = time.perf_counter() - start
    eager = torch_side(torch, lambda: twin(*torch_inputs), minimum, repeats)
    compiled = torch_side(torch, lambda: compiled_twin(*torch_inputs), minimum, repeats)
    compiled["compile_seconds"] = compile_seconds
    return {"torch_eager": eager, "torch_compiled": compiled,
            "torch_speedup": eager["time_ms"] / compiled["time_ms"]}


def measure_program_cuda(program, repeats, torch):
    """One row: the program, mini eager, mini compiled, the speedup, and torch's sides."""
    inputs = program["make_inputs"]()

    def eager():
        return program["fn"](*inputs)

    expected, eager_counts = count_one_call(eager)
    # the least any kernel can move: every input read once, the output written once
    minimum = (sum(t.numel() for t in inputs) + expected.numel()) * FLOAT32_BYTES
    eager_ms = cuda_median_ms(eager, repeats)
    row = {**program_record(program, inputs, minimum),
           "eager": eager_side(eager_counts, minimum, eager_ms)}
    row.update(measure_compiled_cuda(program, inputs, expected, minimum, repeats))
    row["speedup"] = eager_ms / row["compiled"]["time_ms"] if row["compiled"] else None
    if torch is not None:
        try:
            row.update(measure_torch(torch, program, inputs, minimum, repeats))
        except Exception as error:  # torch's columns of this row stay empty, the run goes on
            print(f"fusion_wins: {program['name']}: torch failed ({first_line(error)})")
    return row


def import_torch():
    """torch, where it imports and sees a GPU; else None, saying why (no torch columns)."""
    try:
        import torch
    except (ImportError, OSError) as error:
        print(f"note: torch does not import here ({first_line(error)}): mini alone")
        return None
    if not torch.cuda.is_available():
        print("note: torch imports but sees no GPU: mini alone")
        return None
    return torch


# ---- the table ------------------------------------------------------------------------------


def cell(value, spec):
    """value formatted with spec, or "-" where it was not measured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def times_text(ratio):
    """A speedup as "2.41x", or "-" where it was not measured."""
    text = cell(ratio, ".2f")
    return text if text == "-" else text + "x"


def percent_of(rate, copy):
    """A rate as a percentage of the copy ceiling, or "-"."""
    text = cell(100 * rate / copy["GBps"], ".0f")
    return text if text == "-" else text + "%"


def mini_table_lines(rows, copy):
    header = (f"{'program':<12}{'ops':>4}{'kernels e':>10}{'kernels c':>11}{'eager MB':>10}"
              f"{'comp MB':>9}{'min MB':>9}{'eager ms':>10}{'comp ms':>9}{'speedup':>9}"
              f"{'GB/s e':>8}{'GB/s c':>8}{'% copy c':>9}{'moved e':>9}")
    lines = [header, "-" * len(header)]
    for r in rows:
        eager, compiled = r["eager"], r["compiled"]
        kernels_c = kernels_text(compiled) if compiled else "-"
        compiled_mb = cell(side_value(r, "compiled", "bytes_moved") / MB, ".1f")
        compiled_ms = cell(side_value(r, "compiled", "time_ms"), ".3f")
        compiled_rate = side_value(r, "compiled", "minimum_GBps")
        line = (f"{r['name']:<12}{r['ops']:>4}{eager['kernel_launches']:>10}{kernels_c:>11}"
                f"{eager['bytes_moved'] / MB:>10.1f}{compiled_mb:>9}"
                f"{r['minimum_bytes'] / MB:>9.1f}{eager['time_ms']:>10.3f}{compiled_ms:>9}"
                f"{times_text(r['speedup']):>9}{eager['minimum_GBps']:>8.0f}"
                f"{cell(compiled_rate, '.0f'):>8}{percent_of(compiled_rate, copy):>9}"
                f"{eager['moved_GBps']:>9.0f}")
        if compiled and not compiled["matches_eager"]:
            line += "  differs from eager"
        lines.append(line)
    return lines


def torch_table_lines(rows, copy):
    header = (f"{'program':<12}{'torch eager ms':>15}{'torch.compile ms':>17}{'kernels e/c':>12}"
              f"{'speedup':>9}{'GB/s c':>8}{'% copy c':>9}{'mini c vs torch.compile':>24}")
    lines = [header, "-" * len(header)]
    for r in rows:
        if not r.get("torch_eager"):
            lines.append(f"{r['name']:<12}{'-':>15}{'-':>17}")
            continue
        eager, compiled = r["torch_eager"], r["torch_compiled"]
        kernels = f"{eager['kernel_launches']}/{compiled['kernel_launches']}"
        # above 1: mini's compiled call is faster than torch.compile's
        versus = times_text(compiled["time_ms"] / side_value(r, "compiled", "time_ms"))
        lines.append(f"{r['name']:<12}{eager['time_ms']:>15.3f}{compiled['time_ms']:>17.3f}"
                     f"{kernels:>12}{times_text(r['torch_speedup']):>9}"
                     f"{compiled['minimum_GBps']:>8.0f}"
                     f"{percent_of(compiled['minimum_GBps'], copy):>9}{versus:>24}")
    return lines


def cuda_table(rows, copy):
    """The printed table of the GPU rows, as text: mini's, then torch's where it ran."""
    lines = ["mini eager vs mini compiled (inductor: generated CUDA kernels), float32, one call",
             "each; times: the median of several calls (CUDA events)", ""]
    lines += mini_table_lines(rows, copy)
    lines += ["",
              "kernels c: launched per compiled call, (generated + extern) when a cuBLAS call "
              "is one of them.",
              "GB/s e, GB/s c: minimum bytes / time; % copy c: GB/s c against the copy "
              "ceiling; moved e: bytes the",
              "eager kernels moved / time (what the memory system did).",
              f"copy ceiling, this GPU, this run: clone of {copy['numel']:,} float32 "
              f"({copy['bytes'] / MB:.0f} MB read + written) in {copy['time_ms']:.3f} ms = "
              f"{copy['GBps']:.0f} GB/s"]
    for r in rows:
        if r.get("compile_error"):
            lines.append(f"{r['name']}: not compiled: {r['compile_error']}")
    if any(r.get("torch_eager") for r in rows):
        lines += ["", "torch eager vs torch.compile, the same functions and inputs", ""]
        lines += torch_table_lines(rows, copy)
        lines += ["", "speedup: torch.compile over torch eager; mini c vs torch.compile: "
                      "torch.compile's time / mini compiled's (above 1: mini is faster)."]
    return "\n".join(lines)


# ---- the figures ----------------------------------------------------------------------------


def figure_caption(about):
    """The footer of every figure: when and by which command it was measured."""
    return f"measured {about['date']} by: {about['command']}"


def finish_figure(fig, about, title):
    fig.suptitle(f"{title} -- {about['device_name']}", fontsize=11)
    fig.text(0.01, 0.01, figure_caption(about), fontsize=7, color="#555555", ha="left",
             va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))


def plot_sides(ax, chains, sides, key):
    lengths = [r["ops"] for r in chains]
    for side in sides:
        ax.plot(lengths, [side_value(r, side, key) for r in chains], STYLES[side],
                color=COLORS[side], label=LABELS[side])


def finite_max(values):
    return max([v for v in values if not math.isnan(v)] or [1.0])


def draw_traffic(plt, chains, copy, torch_sides):
    """Bytes moved and kernels launched per call against chain length."""
    fig, (traffic, kernels) = plt.subplots(1, 2, figsize=(13, 5))
    plot_chain_traffic(traffic, chains,
                       [("mini eager (one kernel per op)", "eager", STYLES["eager"],
                         COLORS["eager"]),
                        ("mini compiled (fused)", "compiled", STYLES["compiled"],
                         COLORS["compiled"])])
    sides = ["eager", "compiled"] + torch_sides
    plot_sides(kernels, chains, sides, "kernel_launches")
    kernels.axhline(1, color=COLORS["minimum"], linestyle="--", linewidth=1,
                    label="minimum: 1 kernel")
    lengths = [r["ops"] for r in chains]
    counts = [side_value(r, side, "kernel_launches") for r in chains for side in sides]
    kernels.set_xlabel("chain length (pointwise ops)")
    kernels.set_ylabel("kernels launched per call")
    kernels.set_title("kernels per call")
    kernels.set_xticks(lengths)
    kernels.set_ylim(0, finite_max(counts) + 1)
    kernels.legend(fontsize=9)
    return fig


def draw_bandwidth(plt, chains, copy, torch_sides):
    """Achieved GB/s against chain length, under the copy ceiling."""
    fig, ax = plt.subplots(figsize=(11, 5.5))
    sides = ["eager", "compiled"] + torch_sides
    plot_sides(ax, chains, sides, "minimum_GBps")
    lengths = [r["ops"] for r in chains]
    ax.plot(lengths, [r["eager"]["moved_GBps"] for r in chains], "o:", color=COLORS["eager"],
            alpha=0.6, label="mini eager: bytes moved / time")
    ax.axhline(copy["GBps"], color="black", linestyle="--", linewidth=1,
               label=f"copy ceiling: clone of {copy['bytes'] / 2 / MB:.0f} MB, "
                     f"{copy['GBps']:.0f} GB/s")
    rates = [side_value(r, side, "minimum_GBps") for r in chains for side in sides]
    rates += [r["eager"]["moved_GBps"] for r in chains]
    ax.set_xlabel("chain length (pointwise ops)")
    ax.set_ylabel("GB/s (minimum bytes / time, unless said)")
    ax.set_title(f"achieved bandwidth of a pointwise chain, float32 {chains[0]['shapes'][0]}",
                 fontsize=10)
    ax.set_xticks(lengths)
    ax.set_ylim(0, max(finite_max(rates), copy["GBps"]) * 1.1)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside, not over
    return fig


def draw_speedup(plt, chains, copy, torch_sides):
    """Compiled over eager against chain length: mini's, and torch.compile's over torch's."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    lengths = [r["ops"] for r in chains]
    mini_speedups = [r["speedup"] if r["speedup"] else math.nan for r in chains]
    ax.plot(lengths, mini_speedups, STYLES["compiled"], color=COLORS["compiled"],
            label="mini: compiled / mini eager")
    speedups = list(mini_speedups)
    if torch_sides:
        torch_speedups = [r.get("torch_speedup", math.nan) for r in chains]
        ax.plot(lengths, torch_speedups, STYLES["torch_compiled"],
                color=COLORS["torch_compiled"], label="torch.compile / torch eager")
        speedups += torch_speedups
    ax.axhline(1, color="gray", linestyle=":", linewidth=1, label="no speedup")
    ax.set_xlabel("chain length (pointwise ops)")
    ax.set_ylabel("speedup over eager (eager time / compiled time)")
    ax.set_title(f"what fusion buys on a pointwise chain, float32 {chains[0]['shapes'][0]}",
                 fontsize=10)
    ax.set_xticks(lengths)
    ax.set_ylim(0, finite_max(speedups) * 1.2)
    ax.legend(fontsize=9, loc="upper left")
    return fig


def plot_cuda(rows, copy, about, out_dir):
    """The three figures of the chain sweep from the measured rows; `about` holds the
    device_name, date and command each figure names. Returns the paths written."""
    plt = pyplot()
    chains = sorted((r for r in rows if r["kind"] == "chain"), key=lambda r: r["ops"])
    torch_sides = ["torch_eager", "torch_compiled"] if any(
        r.get("torch_eager") for r in chains) else []
    figures = [(draw_traffic, "memory traffic and kernels per call"),
               (draw_bandwidth, "achieved bandwidth against the copy ceiling"),
               (draw_speedup, "speedup of compiled over eager")]
    paths = []
    for stem, (draw, title) in zip(FIGURE_STEMS, figures):
        fig = draw(plt, chains, copy, torch_sides)
        finish_figure(fig, about, title)
        paths += save_figure(fig, out_dir, stem)
        plt.close(fig)
    return paths


# ---- main -----------------------------------------------------------------------------------


def main_cuda(args, command):
    """--device cuda, a GPU being there: measure, print the table, write the figures and the
    JSON. `command` is the command line, for the figures' footers."""
    sizes = QUICK if args.quick else CUDA_FULL
    torch = None if args.no_torch else import_torch()
    about = {"device_name": mini.cuda.get_device_name(0),
             "date": datetime.datetime.now().isoformat(timespec="seconds"),
             "command": command}
    print(f"fusion_wins on {about['device_name']}: {command}", flush=True)
    mini.manual_seed(0)
    copy = measure_copy_bandwidth(sizes["copy_numel"], sizes["repeats"], 0.0, "cuda",
                                  cuda_median_ms)
    rows = []
    for program in make_programs(sizes, "cuda"):
        rows.append(measure_program_cuda(program, sizes["repeats"], torch))
        print(f"  measured {program['name']}", flush=True)
    mini.reset()

    print("\n" + cuda_table(rows, copy))
    args.out.mkdir(parents=True, exist_ok=True)
    figure_paths = plot_cuda(rows, copy, about, args.out)
    output = {"device": "cuda", **about,
              "torch": torch.__version__ if torch is not None else None,
              "quick": args.quick, "dtype": "float32",
              "timing": f"median of {sizes['repeats']} calls after one warm-up, CUDA events, "
                        "milliseconds",
              "sizes": sizes, "copy_bandwidth": copy, "programs": rows,
              "torch_2_11_h200": read_torch_anchors()}
    json_path = args.out / "fusion_wins.json"
    json_path.write_text(json.dumps(output, indent=2) + "\n")
    print("\nwrote " + ", ".join(str(path) for path in figure_paths + [json_path]))
    return 0
