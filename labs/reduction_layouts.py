"""Lab -- a CUDA reduction's layout: how mini's generated kernels meet rows of every length.

How many threads reduce a row, and whether the row stays in registers, depends on the row's
length and the kernel layout (mini/codegen/cuda_launch.cpp, assignment A10): rows that need a
warp or fewer lanes share a block of 8 warps (a thread per row, a few lanes per row, a warp per
row), each row combined with shuffles alone; a longer row gets a block of its own, whose warps
combine through shared memory too; a row held in registers ("per") is read from memory once, a
looped row ("red") once a pass; one long row alone (a full sum) is split over many blocks. This lab renders a row sum and a softmax for row lengths
1 to 2^20 in three layouts — 3 (rows held, 16 elements a thread), 6 (held, 8 a thread, lean
registers) and the default 9 (looped in vectors, 4 a thread at least) — and prints and draws
each decision: the block, the shape, the split. It needs no GPU: the decisions are the
renderer's (mini.inductor.render_graph_cuda).

    PYTHONPATH=build/python .venv/bin/python labs/reduction_layouts.py [--quick] [--out DIR]
        [--device cpu|cuda] [--no-torch]

--device cuda also runs each kernel: a row sum and a softmax over 2^26 float32 elements
(--quick: 2^20) cut into rows of each length, in each layout, against mini eager and, where torch
imports and sees the GPU (and --no-torch is not given), torch.compile; it draws the achieved
bandwidth (the input read once and the output written once, over the time) by row length.
Without a usable GPU that part says why in one line and the decisions are still drawn.

Writes reduction_layouts.png/.svg and reduction_layouts.json into --out (default: figures/).
"""

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import mini
import mini.inductor as inductor
from measure import REPO_ROOT, cuda_ms, cuda_torch, cuda_unavailable_reason, pyplot, save_figure, write_json

LAYOUTS = (3, 6, 9)
COLORS = {3: "#4C72B0", 6: "#55A868", 9: "#C44E52", "eager": "#8C8C8C", "torch": "#8172B3"}


def row_sum(x):
    return x.sum(-1)


def softmax(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def full_sum(x):
    return x.sum()


PROGRAMS = {"row_sum": row_sum, "softmax": softmax}


def graph_of(fn, x):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    mini.reset()
    mini.compile(fn, backend=backend, fullgraph=True)(x)
    return graphs[0]


def decision(fn, shape, layout):
    """The one reduction kernel of fn over a tensor of `shape`, rendered in `layout`."""
    kernels = inductor.render_graph_cuda(graph_of(fn, mini.zeros(*shape)), layouts=layout)["kernels"]
    return [k for k in kernels if k["shape"] != "poi"][0]


def decisions(lengths, sms):
    """Per row length and layout: the row sum's block and shape over 64 rows, and the full sum's
    split (the blocks one row of that length is shared among, on a GPU of `sms` SMs)."""
    rows = []
    for r in lengths:
        row = {"rnumel": r}
        for layout in LAYOUTS:
            k = decision(row_sum, (64, r), layout)
            full = decision(full_sum, (r,), layout)
            grid = inductor.cuda_split_grid(r, full["block"], sms) if full["split"] else 1
            row[str(layout)] = {"block": k["block"], "row_threads": k["row_threads"], "rows_per_block": k["rows_per_block"],
                                "shape": k["shape"],
                                "name": k["name"], "full_sum_split": full["split"], "full_sum_blocks": grid}
        rows.append(row)
    return rows


def print_decisions(rows, sms):
    print(f"\nA row sum over 64 rows of each length, and a full sum of one row of it, rendered for CUDA "
          f"({sms} SMs for the split):")
    head = f"{'row length':>11s}" + "".join(f"  {'layout ' + str(n):>28s}" for n in LAYOUTS)
    print(head + "\n" + f"{'':>11s}" + "".join(f"  {'threads rows shape split':>28s}" for _ in LAYOUTS))
    print("-" * len(head))
    for row in rows:
        cells = "".join(f"  {row[str(n)]['row_threads']:>11d} {row[str(n)]['rows_per_block']:>4d} {row[str(n)]['shape']:>5s}"
                        f" {row[str(n)]['full_sum_blocks']:>5d}" for n in LAYOUTS)
        print(f"{row['rnumel']:>11d}{cells}")
    print("threads: threads reducing one row; rows: rows a block reduces at once (more than 1: rows of a warp\n"
          "or fewer lanes share a block of 8 warps, each row's lanes combining it with shuffles alone: a warp\n"
          "per row at 32, a thread per row at 1; 1: a block per row, the warps' values combined through shared\n"
          "memory); shape: per = the row held in registers (read once), red = looped over (read each pass);\n"
          "split: a full sum of one row that long, shared among that many blocks (1: one block).")


# ---- on the GPU -------------------------------------------------------------------------------

TORCH_FNS = {"row_sum": lambda torch: (lambda x: x.sum(-1)), "softmax": lambda torch: (lambda x: torch.softmax(x, -1))}


def timings(lengths, numel, use_torch, repeats):
    """GB/s of each program at each row length: mini compiled per layout, mini eager, and
    torch.compile where torch is there (compiled afresh per length: a shape per compile, as
    mini's, and no recompile limit reached); "copy": a clone's GB/s, the ceiling."""
    import numpy as np
    torch, note = cuda_torch(use_torch)
    source = mini.randn(numel, device="cuda")  # the ceiling: a clone reads and writes each element once
    out = {"copy": 2 * 4 * numel / cuda_ms(mini.cuda, source.clone, repeats, warmup=2, reduce=statistics.median) / 1e6}
    del source
    for name, fn in PROGRAMS.items():
        series = {}
        for r in lengths:
            rows = max(1, numel // r)
            host = np.random.default_rng(0).standard_normal((rows, r), dtype=np.float32)
            x = mini.tensor(host).to("cuda")
            out_elems = rows if name == "row_sum" else rows * r
            moved = 4 * (rows * r + out_elems)
            gm = graph_of(fn, mini.tensor(host))
            for layout in LAYOUTS:
                run = inductor.compile_graph_cuda(gm, layouts=layout)["run"]
                ms = cuda_ms(mini.cuda, lambda: run(x), repeats, warmup=2, reduce=statistics.median)
                series.setdefault(str(layout), []).append(moved / ms / 1e6)
            ms = cuda_ms(mini.cuda, lambda: fn(x), repeats, warmup=2, reduce=statistics.median)
            series.setdefault("eager", []).append(moved / ms / 1e6)
            if torch:
                torch._dynamo.reset()
                compiled = torch.compile(TORCH_FNS[name](torch), dynamic=False)
                tx = torch.from_numpy(host).cuda()
                ms = cuda_ms(torch.cuda, lambda: compiled(tx), repeats, warmup=2, reduce=statistics.median)
                series.setdefault("torch", []).append(moved / ms / 1e6)
        out[name] = series
    return out, note


# ---- the figure -------------------------------------------------------------------------------

def plot(result, out_dir):
    plt = pyplot()
    lengths = [row["rnumel"] for row in result["decisions"]]
    gpu = {k: v for k, v in (result.get("gb_per_s") or {}).items() if k != "copy"}
    copy = (result.get("gb_per_s") or {}).get("copy")
    fig, axes = plt.subplots(1, 1 + (len(gpu) if gpu else 0), figsize=(6.4 * (1 + (len(gpu) if gpu else 0)), 4.8),
                             squeeze=False)
    ax = axes[0][0]
    for n in LAYOUTS:
        blocks = [row[str(n)]["row_threads"] for row in result["decisions"]]
        ax.plot(lengths, blocks, color=COLORS[n], label=f"layout {n}", drawstyle="steps-post", alpha=0.8)
        for shape, marker in (("per", "o"), ("red", "x")):
            pts = [(r, row[str(n)]["row_threads"]) for r, row in zip(lengths, result["decisions"])
                   if row[str(n)]["shape"] == shape]
            if pts:
                ax.scatter(*zip(*pts), color=COLORS[n], marker=marker, s=22)
    ax.scatter([], [], color="black", marker="o", label="row held in registers (per)")
    ax.scatter([], [], color="black", marker="x", label="row looped over (red)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("row length (elements)")
    ax.set_ylabel("threads reducing one row (up to 32: rows share a block)")
    ax.set_title("A short row gets a few lanes, a long one a block")
    ax.legend(fontsize=8)
    if gpu:
        for ax, (name, series) in zip(axes[0][1:], gpu.items()):
            for key, values in series.items():
                label = f"mini, layout {key}" if key.isdigit() else ("mini eager" if key == "eager" else "torch.compile")
                ax.plot(lengths[:len(values)], values, marker="o", ms=3, color=COLORS[int(key) if key.isdigit() else key],
                        label=label)
            if copy:
                ax.axhline(copy, color="black", linestyle="--", linewidth=1, label=f"a clone's {copy:.0f} GB/s (the ceiling)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("row length (elements)")
            ax.set_ylabel("GB/s (input read once, output written once)")
            ax.set_title(f"{name}: 2^{result['numel'].bit_length() - 1} float32 elements, cut into rows")
            ax.legend(fontsize=8)
    where = result.get("device_name") or "decisions only (no GPU run)"
    fig.suptitle(f"How a CUDA reduction's layout follows the row length\n{where}", fontsize=11)
    caption = ("Read: rows of up to 32 threads share a block of 8 warps (a thread, some lanes or a warp a row), longer rows "
               "a block each; "
               "dots: the row held in registers" + ("; GB/s against a clone's, measured in the same run" if gpu else ""))
    fig.text(0.01, 0.035, caption, fontsize=8)
    fig.text(0.01, 0.01, f"{result['date']}; {result['command']}", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.06, 1, 0.93))
    return save_figure(fig, out_dir, "reduction_layouts")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures")
    parser.add_argument("--quick", action="store_true", help="fewer lengths, 2^20 elements on the GPU")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-torch", action="store_true", help="no torch.compile beside mini on the GPU")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    lengths = [4 ** p for p in range(0, 11)] if args.quick else [2 ** p for p in range(0, 21)]
    sms = 132  # an H200's, for the split's blocks (the runtime asks the GPU)
    gpu_reason = cuda_unavailable_reason() if args.device == "cuda" else ""
    if args.device == "cuda" and not gpu_reason:
        sms = mini.cuda.get_device_properties(0).multi_processor_count \
            if hasattr(mini.cuda, "get_device_properties") else sms
    try:
        rows = decisions(lengths, sms)
    except RuntimeError as error:
        if "not implemented: A10" in str(error):
            sys.exit(f"reduction_layouts: assignment A10 is not written yet, so no reduction kernel has a layout:\n  {error}")
        raise
    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": "labs/reduction_layouts.py" + (" --quick" if args.quick else "")
              + (" --device cuda" if args.device == "cuda" else ""),
              "layouts": {str(n): inductor.cuda_layout(n) for n in LAYOUTS}, "sms": sms, "decisions": rows}
    print_decisions(rows, sms)
    if args.device == "cuda":
        if gpu_reason:
            print(f"\nreduction_layouts: --device cuda: skipped the timings: no CUDA device ({gpu_reason})")
        else:
            numel = 2 ** 20 if args.quick else 2 ** 26  # 256 MiB: each kernel's time, not a call's host overhead
            result.update(device="cuda", device_name=mini.cuda.get_device_name(0), numel=numel)
            result["gb_per_s"], note = timings(lengths, numel, not args.no_torch, 10 if args.quick else 30)
            result["torch"] = note or "torch.compile(dynamic=False)"
            print(f"\nGB/s on {result['device_name']} ({numel} float32 elements cut into rows; torch: {result['torch']}):")
            print(f"  a clone of {numel} float32 elements (the ceiling): {result['gb_per_s']['copy']:.0f} GB/s")
            for name, series in result["gb_per_s"].items():
                if name == "copy":
                    continue
                print(f"  {name}:")
                print(f"    {'row length':>11s}" + "".join(f"{k:>10s}" for k in series))
                for i, r in enumerate(lengths):
                    print(f"    {r:>11d}" + "".join(f"{series[k][i]:>10.0f}" for k in series))
    paths = plot(result, args.out)
    json_path = write_json(args.out, "reduction_layouts", result)
    print("\nwrote " + ", ".join(str(p) for p in [*paths, json_path]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
