"""The programs fusion_wins.py and fusion_wins_cuda.py measure, and what both labs share: their
sizes, the per-call records (kernels, bytes, the minimum traffic), the copy ceiling, torch's
anchors read from labs/anchors/torch211_h200.md, and the chain-traffic plot. Neither lab imports
the other for these."""
import math
import re
import time
from pathlib import Path

import mini

from programs import chain8, ffn_out, layernorm_decomp, softmax_decomp, transform

REPO_ROOT = Path(__file__).resolve().parents[1]

ANCHORS_FILE = REPO_ROOT / "labs" / "anchors" / "torch211_h200.md"

FULL = {"rows": 4096, "cols": 4096, "chain_rows": 2048, "chain_cols": 2048,
        "ffn_features": 4096, "copy_numel": 2**26, "repeats": 10, "min_seconds": 1.0,
        "chain_lengths": list(range(1, 13))}

QUICK = {"rows": 256, "cols": 256, "chain_rows": 256, "chain_cols": 256,
         "ffn_features": 256, "copy_numel": 2**24, "repeats": 20, "min_seconds": 0.05,
         "chain_lengths": [1, 2, 4, 8, 12]}

FFN_BATCH = 8

FLOAT32_BYTES = 4

MB = 1e6

# name in this lab -> workload in the anchors table (torch 2.11, H200)
TORCH_ANCHOR_NAMES = {"transform": "transform_f32", "chain8": "chain8_f32",
                      "softmax": "softmax_decomp_f32", "layernorm": "layernorm_decomp_f32",
                      "ffn": "ffn_out_bf16_b8"}

# One cheap op per line; pointwise<k> runs the first k. Both inputs are read by the first op,
# so the minimum bytes are the same for every length: read x and y, write the result.
POINTWISE_STEPS = [
    "t = x * y",
    "t = t + x",
    "t = t * 0.5",
    "t = t - y",
    "t = mini.relu(t)",
    "t = t * x",
    "t = t + 1.0",
    "t = t * y",
    "t = t - x",
    "t = t * 2.0",
    "t = t + y",
    "t = t.abs()",
]

def make_pointwise_chain(length):
    """A function pointwise<length>(x, y) whose body is the first `length` POINTWISE_STEPS,
    written out line by line (a plain Python function: capture sees straight-line code)."""
    lines = [f"def pointwise{length}(x, y):"]
    lines += [f"    {step}" for step in POINTWISE_STEPS[:length]]
    lines.append("    return t")
    source = "\n".join(lines) + "\n"
    namespace = {"mini": mini}
    exec(compile(source, f"<fusion_wins pointwise{length}>", "exec"), namespace)
    return namespace[f"pointwise{length}"]

def make_programs(sizes, device="cpu"):
    """Each program: its name, kind ("named": one of torch's anchors; "chain": the sweep), its
    function, a maker of its inputs (called when it is measured) and its op count."""
    def randn(*shape):
        return mini.randn(*shape) if device == "cpu" else mini.randn(*shape, device=device)

    rows, cols = sizes["rows"], sizes["cols"]
    features = sizes["ffn_features"]
    chain_shape = (sizes["chain_rows"], sizes["chain_cols"])
    programs = [
        ("transform", "named", transform, lambda: [randn(rows, cols), randn(cols)], 3),
        ("chain8", "named", chain8, lambda: [randn(rows, cols), randn(rows, cols)], 8),
        ("softmax", "named", softmax_decomp, lambda: [randn(rows, cols)], 5),
        ("layernorm", "named", layernorm_decomp,
         lambda: [randn(rows, cols), randn(cols), randn(cols)], 10),
        ("ffn", "named", ffn_out,
         lambda: [randn(FFN_BATCH, features), randn(features, features) * 0.02,
                  randn(features)], 3),
    ]
    for length in sizes["chain_lengths"]:
        fn = make_pointwise_chain(length)
        programs.append((f"pointwise{length}", "chain", fn,
                         lambda: [randn(*chain_shape), randn(*chain_shape)], length))
    return [{"name": name, "kind": kind, "fn": fn, "make_inputs": make_inputs, "ops": ops}
            for name, kind, fn, make_inputs, ops in programs]


# ---- measuring ------------------------------------------------------------------------------

def best_time_ms(run, repeats, min_seconds=0.0):
    """The fastest timed call of run(), in milliseconds, after one warm-up: at least `repeats`
    calls, and more (up to 20x) until min_seconds have passed -- on a busy machine the
    fastest call is the one least disturbed by other processes."""
    run()
    best = float("inf")
    calls = 0
    began = time.perf_counter()
    while calls < repeats or (time.perf_counter() - began < min_seconds
                              and calls < 20 * repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
        calls += 1
    return best * 1e3

def count_one_call(run):
    mini.metrics.reset()
    result = run()
    return result, mini.metrics.snapshot()

def program_record(program, inputs, minimum):
    """What a program's row says about the program itself."""
    return {"name": program["name"], "kind": program["kind"],
            "shapes": [list(t.shape) for t in inputs], "ops": program["ops"],
            "minimum_bytes": minimum}

def eager_side(counts, minimum, eager_ms):
    """A program's eager numbers: kernels and bytes of one call, its time, and GB/s."""
    return {
        "kernel_launches": counts["kernel_launches"],
        "bytes_moved": counts["bytes_moved"],
        "time_ms": eager_ms,
        "minimum_GBps": minimum / (eager_ms * 1e-3) / 1e9,
        "moved_GBps": counts["bytes_moved"] / (eager_ms * 1e-3) / 1e9,
    }

def compiled_side(first_counts, counts, minimum, compiled_ms, compile_seconds):
    """A program's compiled numbers: kernels (generated by the first call's compile, and the
    extern calls beside them) and bytes of one cached call, its time, and GB/s."""
    generated = first_counts["generated_kernel_count"]
    return {
        "kernel_launches": counts["kernel_launches"],
        "generated_kernels": generated,
        "extern_kernels": counts["kernel_launches"] - generated,
        "bytes_moved": counts["bytes_moved"],
        "time_ms": compiled_ms,
        "compile_seconds": compile_seconds,
        "minimum_GBps": minimum / (compiled_ms * 1e-3) / 1e9,
        "moved_GBps": counts["bytes_moved"] / (compiled_ms * 1e-3) / 1e9,
    }

def measure_copy_bandwidth(copy_numel, repeats, min_seconds, device="cpu", timer=best_time_ms):
    """This machine's copy bandwidth: a clone of copy_numel float32 values reads and writes
    them once; GB/s = (bytes read + bytes written) / time. `timer` is best_time_ms on the CPU
    and fusion_wins_cuda's cuda_median_ms on the GPU."""
    source = mini.randn(copy_numel, device=device)
    _, counts = count_one_call(source.clone)
    seconds = timer(source.clone, repeats, min_seconds) * 1e-3
    moved = 2 * copy_numel * FLOAT32_BYTES
    return {"numel": copy_numel, "bytes": moved, "bytes_moved_metric": counts["bytes_moved"],
            "time_ms": seconds * 1e3, "GBps": moved / seconds / 1e9}


# ---- torch's numbers ------------------------------------------------------------------------

def read_torch_anchors():
    """torch 2.11's H200 rows from the anchors file: {workload: {column: value}}, plus the
    copy ceiling; None (with a message) if the file is missing."""
    if not ANCHORS_FILE.exists():
        print(f"note: {ANCHORS_FILE} is missing; torch 2.11's numbers are not shown")
        return None
    rows, header, copy_ceiling = {}, None, None
    for line in ANCHORS_FILE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| workload"):
            header = cells
        elif header and line.startswith("|") and not line.startswith("|---"):
            rows[cells[0]] = dict(zip(header, cells))
        found = re.search(r"Copy ceiling.*?([\d.]+) GB/s", line)
        if found:
            copy_ceiling = float(found.group(1))
    anchors = {}
    for name, workload in TORCH_ANCHOR_NAMES.items():
        row = rows.get(workload)
        if row:
            anchors[name] = {
                "workload": workload,
                "eager_kernels": int(row["eager kernels"]),
                "inductor_kernels": int(row["Inductor kernels"]),
                "speedup": float(row["speedup"].rstrip("×x")),
                "inductor_GBps": float(row["Inductor GB/s"]),
            }
    return {"source": str(ANCHORS_FILE), "copy_ceiling_GBps": copy_ceiling,
            "programs": anchors}


# ---- reporting ------------------------------------------------------------------------------

def kernels_text(side):
    text = str(side["kernel_launches"])
    if side.get("extern_kernels"):
        text += f" ({side['generated_kernels']}+{side['extern_kernels']}x)"
    return text

def side_value(row, side, key):
    """row[side][key], or NaN where that side was not measured (on the GPU: a program mini
    could not compile, or torch absent), so that a plotted line has a gap there."""
    numbers = row.get(side)
    return numbers[key] if numbers else math.nan

def plot_chain_traffic(ax, chains, series):
    """The panel of bytes moved per call against chain length: one line per (label, side,
    style, color) of `series` ("eager" or "compiled"), then the minimum."""
    lengths = [r["ops"] for r in chains]
    for label, side, style, color in series:
        ax.plot(lengths, [side_value(r, side, "bytes_moved") / MB for r in chains], style,
                color=color, label=label)
    ax.plot(lengths, [r["minimum_bytes"] / MB for r in chains], "--", color="#55A868",
            label="minimum (inputs read once, output written once)")
    ax.set_xlabel("chain length (pointwise ops)")
    ax.set_ylabel("bytes moved per call (MB)")
    ax.set_title(f"memory traffic of a pointwise chain, float32 {chains[0]['shapes'][0]}")
    ax.set_xticks(lengths)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=9)
