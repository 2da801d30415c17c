"""Lab -- what fusion wins: eager against compiled (backend="inductor").

Eager runs one kernel per op and every intermediate makes a round trip through memory. The
inductor backend fuses each program below into one generated C++ kernel (plus an extern
BLAS call for a matmul), so its intermediates stay in registers. For each program the lab
measures, per call (mini.metrics, reset then one call): kernels launched and bytes moved,
eager and compiled; the minimum bytes (each input read once, the output written once); the
time of a call, the speedup, and the achieved bandwidth (minimum bytes / time, and bytes
moved / time) against this machine's copy bandwidth measured in the same run (a large
mini clone: bytes read + written / time).

The programs are those of torch 2.11's H200 anchors (labs/anchors/torch211_h200.md),
written the same way, so torch's numbers are printed beside mini's:

    transform   relu((x + bias) * 0.5)                                        3 ops
    chain8      sin, *y, cos, +x, *0.5, -y, sigmoid, *x  (torch's chain8)      8 ops
    softmax     amax, sub, exp, sum, div (over the last dim)                 5 ops
    layernorm   mean, sub, pow, mean, add, rsqrt, sub, mul, mul, add          10 ops
    ffn         relu(x @ w + b), x: [8, K] (batch 8)                           3 ops

and, for the sweep over chain length, pointwise<k>: the first k of x*y, +x, *0.5, -y, relu,
*x, +1, *y, -x, *2, +y, abs -- cheap ops, so that on a CPU the chain stays bound by memory
traffic as torch's chain8 is on the GPU (on a CPU, chain8's sin and cos are bound by compute).

    PYTHONPATH=build/python .venv/bin/python labs/fusion_wins.py [--quick] [--out DIR]

Each program costs one C++ compile the first time (about 0.3 s; the disk cache in
mini.config.cache_dir makes later runs load it). --quick uses 2^16-element tensors and chain
lengths 1, 2, 4, 8, 12; the full run uses 2^24 elements (chains: 2^22) and lengths 1..12.
Writes fusion_wins.png / .svg and fusion_wins.json into --out (default: figures/).

--device cuda (labs/fusion_wins_cuda.py) runs the same programs on the GPU at torch's anchor
size (8192x8192; --quick as above): mini eager and mini compiled (generated CUDA kernels),
and, where torch imports (not with --no-torch), torch eager and torch.compile on the same
functions; kernels and bytes per call, median times with CUDA events, GB/s against the copy
ceiling of the same run, the speedups. It writes fusion_wins_cuda_traffic, _bandwidth and
_speedup (.png / .svg) and fusion_wins.json; on the H200:

    python labs/fusion_wins.py --device cuda --out DIR

Without a GPU it prints one line saying why and exits 0.
"""

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import mini

from fusion_programs import (FLOAT32_BYTES, FULL, MB, QUICK, REPO_ROOT, best_time_ms, compiled_side,
                             count_one_call, eager_side, kernels_text, make_programs, measure_copy_bandwidth,
                             plot_chain_traffic, program_record, read_torch_anchors)
from measure import save_figure, skip_without_cuda


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the figure and the JSON (default: figures/)")
    parser.add_argument("--quick", action="store_true",
                        help="2^16-element tensors and 5 chain lengths instead of 2^22-2^24 "
                             "and 12")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-torch", action="store_true",
                        help="with --device cuda: mini alone, even where torch imports")
    return parser.parse_args(argv)


# ---- the programs ---------------------------------------------------------------------------
# transform, chain8, softmax_decomp, layernorm_decomp and ffn_out come from labs/programs.py
# (torch's anchors, ../shared/anchors/torch_gpu_anchor.py, written the same way).


def machine_state():
    """What the timings depend on: CPUs, the OpenMP thread setting, the load average."""
    return {"cpus": os.cpu_count(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "load_average_1min": round(os.getloadavg()[0], 2)}


def print_machine_state(state):
    threads = state["OMP_NUM_THREADS"] or "unset (one thread per CPU)"
    print(f"\nmachine: {state['cpus']} CPUs, OMP_NUM_THREADS {threads}, load average "
          f"{state['load_average_1min']} at the start")
    if state["load_average_1min"] > 0.5 * state["cpus"]:
        if state["OMP_NUM_THREADS"] == "1":
            print("other processes were running: the times are noisy")
        else:
            print("other processes were running: the OpenMP kernels wait for busy CPUs and "
                  "the times are noisy;\nOMP_NUM_THREADS=1 gives steadier single-thread "
                  "numbers")


def measure_program(program, repeats, min_seconds):
    fn, inputs = program["fn"], program["make_inputs"]()
    graph_ops = mini.explain(fn)(*inputs).op_count
    mini.reset()

    def eager():
        return fn(*inputs)

    expected, eager_counts = count_one_call(eager)
    # the least any kernel can move: every input read once, the output written once
    minimum = (sum(t.numel() for t in inputs) + expected.numel()) * FLOAT32_BYTES
    compiled_fn = mini.compile(fn, backend="inductor")

    def compiled():
        return compiled_fn(*inputs)

    start = time.perf_counter()
    _, first_counts = count_one_call(compiled)  # compiles: C++ source, c++ -O3, dlopen
    compile_seconds = time.perf_counter() - start
    result, compiled_counts = count_one_call(compiled)
    if not mini.allclose(result, expected, rtol=1e-4, atol=1e-5):
        sys.exit(f"fusion_wins: {program['name']}: the compiled result differs from eager; "
                 f"the numbers below would not mean anything")

    eager_ms = best_time_ms(eager, repeats, min_seconds)
    compiled_ms = best_time_ms(compiled, repeats, min_seconds)
    return {
        **program_record(program, inputs, minimum),
        "graph_ops": graph_ops,
        "eager": eager_side(eager_counts, minimum, eager_ms),
        "compiled": compiled_side(first_counts, compiled_counts, minimum, compiled_ms,
                                  compile_seconds),
        "speedup": eager_ms / compiled_ms,
    }


def print_table(results, copy, copy_same_size):
    print(f"\neager vs compiled (backend='inductor'), float32, one call each; "
          f"times are the best of several calls\n")
    header = (f"{'program':<10}{'ops':>4}{'kernels e':>10}{'kernels c':>11}{'eager MB':>10}"
              f"{'comp MB':>9}{'min MB':>8}{'eager ms':>10}{'comp ms':>9}{'speedup':>9}"
              f"{'GB/s min':>10}{'GB/s moved':>11}{'% copy':>8}")
    print(header)
    print("-" * len(header))
    for r in results:
        e, c = r["eager"], r["compiled"]
        print(f"{r['name']:<10}{r['ops']:>4}{kernels_text(e):>10}{kernels_text(c):>11}"
              f"{e['bytes_moved'] / MB:>10.2f}{c['bytes_moved'] / MB:>9.2f}"
              f"{r['minimum_bytes'] / MB:>8.2f}{e['time_ms']:>10.3f}{c['time_ms']:>9.3f}"
              f"{r['speedup']:>8.2f}x{c['minimum_GBps']:>10.1f}{c['moved_GBps']:>11.1f}"
              f"{100 * c['minimum_GBps'] / copy['GBps']:>7.0f}%")
    print("\nkernels c: launched per compiled call, (generated + extern) when a BLAS call is "
          "one of them.\nGB/s min: minimum bytes / compiled time; GB/s moved: bytes the "
          "compiled kernels moved / time;\n% copy: GB/s min against the copy bandwidth "
          f"below. Compiled bytes count each kernel operand once: the\nextra passes of a "
          f"reduction over a row (softmax, layernorm) re-read it from cache.")
    print(f"\ncopy bandwidth, this machine, this run: clone of {copy['numel']:,} float32 "
          f"({copy['bytes'] / MB:.0f} MB read + written) in {copy['time_ms']:.2f} ms = "
          f"{copy['GBps']:.1f} GB/s")
    for what, same in copy_same_size.items():
        print(f"  a clone of {same['numel']:,} float32, the size of one {what} input: "
              f"{same['GBps']:.1f} GB/s")
    print("a program whose tensors stay in the CPU caches can beat the large clone (% copy "
          "over 100);\nthe clone of one of its inputs is its ceiling then.")
    compile_total = sum(r["compiled"]["compile_seconds"] for r in results)
    print(f"first compiled calls (C++ compile or disk-cache load, plus one run): "
          f"{compile_total:.2f} s for {len(results)} programs")


def print_torch_beside(results, copy, anchors):
    if not anchors or not anchors["programs"]:
        return
    print(f"\nbeside torch 2.11 on one H200 ({Path(anchors['source']).name}; 8192x8192, "
          f"ffn in bf16 at batch 8):\n")
    header = (f"{'program':<10}{'mini kernels e/c':>18}{'torch kernels e/i':>19}"
              f"{'mini speedup':>14}{'torch speedup':>15}{'mini % copy':>13}{'torch % copy':>14}")
    print(header)
    print("-" * len(header))
    by_name = {r["name"]: r for r in results}
    for name, torch_row in anchors["programs"].items():
        r = by_name.get(name)
        if not r:
            continue
        mine = f"{r['eager']['kernel_launches']}/{kernels_text(r['compiled'])}"
        theirs = f"{torch_row['eager_kernels']}/{torch_row['inductor_kernels']}"
        torch_copy = "-"
        if anchors["copy_ceiling_GBps"]:
            torch_copy = f"{100 * torch_row['inductor_GBps'] / anchors['copy_ceiling_GBps']:.0f}%"
        mini_copy = f"{100 * r['compiled']['minimum_GBps'] / copy['GBps']:.0f}%"
        print(f"{name:<10}{mine:>18}{theirs:>19}{r['speedup']:>13.2f}x"
              f"{torch_row['speedup']:>14.2f}x{mini_copy:>13}{torch_copy:>14}")
    print("\nmini runs on this machine's CPU and torch on the H200: compare kernel counts and "
          "the shape of\nthe speedups, not the milliseconds. torch's eager ffn is 4 kernels "
          "(its bf16 GEMM launches two).")


EAGER_COLOR, COMPILED_COLOR, MINIMUM_COLOR = "#C44E52", "#4C72B0", "#55A868"


def plot_chain_kernels(ax, chains):
    """Kernels launched per call of each chain, eager's and compiled's, against the minimum of 1."""
    lengths = [r["ops"] for r in chains]
    ax.plot(lengths, [r["eager"]["kernel_launches"] for r in chains], "o-",
            color=EAGER_COLOR, label="eager")
    ax.plot(lengths, [r["compiled"]["kernel_launches"] for r in chains], "s-",
            color=COMPILED_COLOR, label="compiled (inductor)")
    ax.axhline(1, color=MINIMUM_COLOR, linestyle="--", linewidth=1, label="minimum: 1 kernel")
    ax.set_xlabel("chain length (pointwise ops)")
    ax.set_ylabel("kernels launched per call")
    ax.set_title("kernels per call")
    ax.set_xticks(lengths)
    ax.set_ylim(0, max(lengths) + 1)
    ax.legend(fontsize=9)


def draw_copy_ceilings(ax, copy, same, same_label):
    """The two copy ceilings: a clone of the large copy buffer, and a clone the size of one input."""
    ax.axhline(copy["GBps"], color="black", linestyle="--", linewidth=1,
               label=f"copy: clone of {copy['numel'] * FLOAT32_BYTES / MB:.0f} MB, "
                     f"{copy['GBps']:.1f} GB/s")
    ax.axhline(same["GBps"], color="gray", linestyle="-.", linewidth=1, label=same_label)


def plot_chain_bandwidth(ax, chains, copy, same):
    """Each chain's achieved bandwidth (minimum bytes and bytes moved, over time), eager's and
    compiled's, against the copy ceilings."""
    lengths = [r["ops"] for r in chains]
    ax.plot(lengths, [r["compiled"]["minimum_GBps"] for r in chains], "s-",
            color=COMPILED_COLOR, label="compiled: minimum bytes / time")
    ax.plot(lengths, [r["compiled"]["moved_GBps"] for r in chains], "s:",
            color=COMPILED_COLOR, alpha=0.6, label="compiled: bytes moved / time")
    ax.plot(lengths, [r["eager"]["minimum_GBps"] for r in chains], "o-",
            color=EAGER_COLOR, label="eager: minimum bytes / time")
    ax.plot(lengths, [r["eager"]["moved_GBps"] for r in chains], "o:",
            color=EAGER_COLOR, alpha=0.6, label="eager: bytes moved / time")
    draw_copy_ceilings(ax, copy, same, f"copy: clone of one input "
                                       f"({same['numel'] * FLOAT32_BYTES / MB:.2g} MB), {same['GBps']:.1f} GB/s")
    ax.set_xlabel("chain length (pointwise ops)")
    ax.set_ylabel("GB/s")
    ax.set_title(f"achieved bandwidth of a pointwise chain, float32 {chains[0]['shapes'][0]}")
    ax.set_xticks(lengths)
    rates = [r[side]["moved_GBps"] for r in chains for side in ("eager", "compiled")]
    top = max([copy["GBps"], same["GBps"]] + rates)
    ax.set_ylim(0, top * 1.25)
    ax.legend(fontsize=8, loc="upper right")


def plot_programs(ax, results, copy, same, anchors):
    """The named programs' bandwidth, eager's and compiled's bars, each labelled with the speedup
    (and torch's, where the anchors have it), against the copy ceilings."""
    named = [r for r in results if r["kind"] == "named"]
    order = ["transform", "chain8", "softmax", "layernorm", "ffn"]
    named.sort(key=lambda r: order.index(r["name"]) if r["name"] in order else len(order))
    positions = range(len(named))
    width = 0.38
    eager_bars = ax.bar([p - width / 2 for p in positions],
                        [r["eager"]["minimum_GBps"] for r in named], width,
                        color=EAGER_COLOR, label="eager: minimum bytes / time")
    compiled_bars = ax.bar([p + width / 2 for p in positions],
                           [r["compiled"]["minimum_GBps"] for r in named], width,
                           color=COMPILED_COLOR, label="compiled: minimum bytes / time")
    torch_speedups = (anchors or {}).get("programs", {})
    for position, r, eager_bar, compiled_bar in zip(positions, named, eager_bars,
                                                    compiled_bars):
        label = f"speedup {r['speedup']:.2f}x"
        if r["name"] in torch_speedups:
            label += f"\n(torch {torch_speedups[r['name']]['speedup']:.2f}x)"
        ax.text(position, max(eager_bar.get_height(), compiled_bar.get_height()), label,
                ha="center", va="bottom", fontsize=8)
    draw_copy_ceilings(ax, copy, same, f"copy: clone of one [{named[0]['shapes'][0][0]}, "
                                       f"{named[0]['shapes'][0][1]}] input, {same['GBps']:.1f} GB/s")
    ax.set_xticks(list(positions))
    ax.set_xticklabels([f"{r['name']}\n{r['eager']['kernel_launches']} -> "
                        f"{r['compiled']['kernel_launches']} kernels" for r in named],
                       fontsize=9)
    ax.set_ylabel("GB/s (minimum bytes / time)")
    ax.set_title("programs: bandwidth, and speedup of compiled over eager")
    heights = [bar.get_height() for bar in list(eager_bars) + list(compiled_bars)]
    top = max([copy["GBps"], same["GBps"]] + heights)
    ax.set_ylim(0, top * 1.3)
    ax.legend(fontsize=8, loc="upper right")


def plot(results, copy, copy_same_size, anchors, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chains = [r for r in results if r["kind"] == "chain"]
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    plot_chain_traffic(axes[0][0], chains, [("eager (one kernel per op)", "eager", "o-", EAGER_COLOR),
                                            ("compiled (inductor)", "compiled", "s-",
                                             COMPILED_COLOR)])
    plot_chain_kernels(axes[0][1], chains)
    plot_chain_bandwidth(axes[1][0], chains, copy, copy_same_size["chain"])
    plot_programs(axes[1][1], results, copy, copy_same_size["program"], anchors)
    fig.tight_layout()
    paths = save_figure(fig, out_dir, "fusion_wins")
    plt.close(fig)
    return paths


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.device == "cuda":
        skip_without_cuda("fusion_wins")
        import fusion_wins_cuda  # here, not above: only --device cuda needs it (and torch beside it)
        return fusion_wins_cuda.main_cuda(args, "python labs/fusion_wins.py " + shlex.join(argv))
    sizes = QUICK if args.quick else FULL
    mini.manual_seed(0)

    state = machine_state()
    timing = (sizes["repeats"], sizes["min_seconds"])
    copy = measure_copy_bandwidth(sizes["copy_numel"], *timing)
    # a clone as large as one input of a program: the ceiling when that working set is cached
    copy_same_size = {
        "chain": measure_copy_bandwidth(sizes["chain_rows"] * sizes["chain_cols"], *timing),
        "program": measure_copy_bandwidth(sizes["rows"] * sizes["cols"], *timing),
    }
    results = []
    for program in make_programs(sizes):
        results.append(measure_program(program, sizes["repeats"], sizes["min_seconds"]))
    mini.reset()

    anchors = read_torch_anchors()
    print_table(results, copy, copy_same_size)
    print_torch_beside(results, copy, anchors)
    print_machine_state(state)

    args.out.mkdir(parents=True, exist_ok=True)
    figure_paths = plot(results, copy, copy_same_size, anchors, args.out)
    output = {
        "device": args.device,
        "quick": args.quick,
        "dtype": "float32",
        "timing": f"fastest of at least {sizes['repeats']} calls (more until "
                  f"{sizes['min_seconds']} s) after one warm-up, milliseconds",
        "machine": state,
        "sizes": {k: v for k, v in sizes.items()},
        "copy_bandwidth": copy,
        "copy_bandwidth_same_size": copy_same_size,
        "programs": results,
        "torch_2_11_h200": anchors,
    }
    json_path = args.out / "fusion_wins.json"
    json_path.write_text(json.dumps(output, indent=2) + "\n")
    print("\nwrote " + ", ".join(str(path) for path in figure_paths + [json_path]))


if __name__ == "__main__":
    sys.exit(main())
