"""Figure -- the stages a first call goes through, mini's folder for each, and what each took.

The function is a small MLP's training step, loss = cross_entropy(model(x), labels), compiled
with mini.compile (backend "inductor", the default). The model's parameters require grad, so
capture's graph goes through the joint graph (AOTAutograd: one forward and one backward graph),
and fusion, codegen and the C++ compiler (NVRTC on --device cuda) run once for each of the two.
The times are mini.compiler.stats()["stages"]: each stage times itself where it runs, so the
figure is read from mini, not from a clock around the call.

Three paths, one row each:
  cold        mini.reset() and an empty kernel cache (a fresh mini.config.cache_dir): the first
              call and its backward, every stage run for real;
  disk cache  mini.reset() again (the in-memory guard cache is gone, as in a new process) with
              the same cache_dir: capture, the joint graph, fusion and codegen run again, but the
              compiled kernels are read from disk ("disk cache" replaces "compile");
  cache hit   the calls after: a lookup whose guards pass runs the cached graph, nothing else;
              its time is per call (the median of many), beside the uncompiled call and the
              same call compiled with backend "eager" (the captured graph run op by op: what
              capture alone saves, the Python of the modules' __call__ and forward).

Each call is also timed as a whole (the forward call and the first backward), so the figure
can say how much of a first call is not in any stage (the hook, Python, running eager ops).
On --device cuda the model and its inputs are on the GPU (NVRTC compiles, the clock is read after
mini.cuda.synchronize()); torch.compile's times are not drawn beside (its cold compile takes
tens of seconds, too long for this figure).
"""

import shutil
import tempfile
import time

import mini
import mini.nn as nn
import mini.nn.functional as F

from measure import per_call_us, synchronizer

TITLE = ("A first call runs six stages, each in its own folder; the compiler takes nearly all "
         "of its time, and the disk cache and the guard cache remove it")
CAPTION = ("A small MLP's training step (cross_entropy of model(x), then backward) under "
           "mini.compile (inductor): stage times from mini.compiler.stats() over each path's "
           "first call and backward; the cache hit is the median of many calls.")

FULL = {"batch": 64, "features": 128, "hidden": 256, "classes": 10,
        "sample_seconds": 0.2, "samples": 9}
QUICK = {"batch": 32, "features": 64, "hidden": 128, "classes": 10,
         "sample_seconds": 0.05, "samples": 5}

# The stages of mini.compiler.stats(), in pipeline order: (stats key, label, folder, file).
# The folder says where to read the stage; guards are built by mini/guards/ during capture.
STAGES = [
    ("capture", "capture + guards", "mini/capture/, mini/guards/", "convert_frame.cpp"),
    ("joint graph", "joint graph", "mini/autograd/", "joint.cpp, partition.cpp"),
    ("fusion", "fusion", "mini/fusion/", "decompose.cpp, schedule.cpp"),
    ("codegen", "codegen", "mini/codegen/", "lower.cpp, cpp_kernel.cpp"),
    ("compile", "compile (C++)", "mini/runtime/", "compiled_graph.cpp"),
    ("disk cache", "disk cache", "mini/runtime/", "code_cache.cpp"),
    ("first run", "first run", "mini/runtime/", "compiled_graph.cpp"),
]
# what differs on the GPU: the kernels are CUDA, compiled by NVRTC
CUDA_STAGES = {
    "codegen": ("codegen", "mini/codegen/", "lower.cpp, cuda_kernel.cpp"),
    "compile": ("compile (NVRTC)", "mini/runtime/", "cuda_program.cpp, nvrtc.cpp"),
    "disk cache": ("disk cache", "mini/runtime/", "code_cache.cpp"),
    "first run": ("first run", "mini/runtime/", "cuda_program.cpp"),
}
# A cache hit's path: (label, folder, file). It is timed as a whole: one call, per call.
HIT_STAGES = [
    ("frame hook, lookup", "mini/capture/, mini/guards/", "frame_hook.cpp, cache.cpp"),
    ("guard check", "mini/guards/", "guards.cpp"),
    ("run the cached graph", "mini/runtime/", "compiled_graph.cpp"),
]
CUDA_HIT_FILES = {"run the cached graph": "compiled_cuda_graph.cpp"}
# The three rows: (key in the JSON, title)
PATHS = [
    ("cold", "1. first call, empty caches"),
    ("disk_cache", "2. after mini.reset(), as in a new process: kernels on disk"),
    ("hit", "3. every later call: cache hit"),
]


def hit_table(device):
    """HIT_STAGES with the GPU's files on --device cuda."""
    if device != "cuda":
        return HIT_STAGES
    return [(label, folder, CUDA_HIT_FILES.get(label, file)) for label, folder, file in HIT_STAGES]


def stage_table(device):
    """STAGES with the GPU's labels on --device cuda."""
    if device != "cuda":
        return STAGES
    return [(key,) + CUDA_STAGES.get(key, (label, folder, file))
            for key, label, folder, file in STAGES]


# ---- the program ----------------------------------------------------------------------------


def make_program(sizes, device):
    mini.manual_seed(0)
    model = nn.Sequential(nn.Linear(sizes["features"], sizes["hidden"]), nn.ReLU(),
                          nn.Linear(sizes["hidden"], sizes["classes"])).to(device)
    x = mini.randn(sizes["batch"], sizes["features"], device=device)
    labels = mini.tensor([i % sizes["classes"] for i in range(sizes["batch"])], device=device)

    def training_step(x, labels):
        return F.cross_entropy(model(x), labels)

    return model, training_step, x, labels


# ---- measure --------------------------------------------------------------------------------


def stages_now():
    """stats()'s stages as {name: {"ms", "count"}}."""
    return {name: {"ms": t["seconds"] * 1e3, "count": t["count"]}
            for name, t in mini.compiler.stats()["stages"].items()}


def first_call(step, x, labels, sync):
    """One first call and its backward under a fresh stats() count: the stages, and the wall
    time of the forward call and of the backward."""
    mini.compiler.reset_stats()
    compiled = mini.compile(step)
    sync()
    start = time.perf_counter()
    loss = compiled(x, labels)
    sync()
    forward_s = time.perf_counter() - start
    after_forward = stages_now()
    start = time.perf_counter()
    loss.backward()
    sync()
    backward_s = time.perf_counter() - start
    stages = stages_now()
    return compiled, {
        "stages": stages,
        "stages_after_forward_call": after_forward,
        "forward_call_ms": forward_s * 1e3,
        "backward_ms": backward_s * 1e3,
        "wall_ms": (forward_s + backward_s) * 1e3,
        "stages_ms": sum(t["ms"] for t in stages.values()),
        "compiles": mini.compiler.stats()["units"]["compiles"],
    }


def count_guards(guard_text):
    """The leaf checks of a printed guard set (TENSOR_MATCH, ID_MATCH, ...)."""
    return sum(1 for line in guard_text.splitlines()
               if "+- " in line and "GuardManager" not in line)


def measure(args):
    sizes = QUICK if args.quick else FULL
    device, sync = args.device, synchronizer(args.device)
    model, step, x, labels = make_program(sizes, device)

    saved_dir = mini.config.cache_dir
    cache_dir = tempfile.mkdtemp(prefix="mini-article-pipeline-")
    try:
        mini.config.cache_dir = cache_dir
        mini.reset()
        _, cold = first_call(step, x, labels, sync)
        model.zero_grad()
        mini.reset()  # the guard cache and the compiled graphs in memory are gone; the disk is not
        compiled, disk = first_call(step, x, labels, sync)
        model.zero_grad()

        # the cache hit: the forward call (lookup, guards, the compiled forward graph)
        def hit():
            return compiled(x, labels)
        hit_us = per_call_us(hit, sizes["sample_seconds"], sizes["samples"], sync)
        (unit,) = [u for u in mini.compiler.cache_entries(compiled) if u["offset"] == 0]
        guards = count_guards(unit["entries"][0]["guards"])
        hits_counted = mini.compiler.stats()["units"]["cache_hits"]

        def uncompiled():
            return step(x, labels)
        eager_us = per_call_us(uncompiled, sizes["sample_seconds"], sizes["samples"], sync)
        mini.reset()
        eager_backend = mini.compile(step, backend="eager")
        eager_backend_us = per_call_us(lambda: eager_backend(x, labels),
                                       sizes["sample_seconds"], sizes["samples"], sync)
    finally:
        mini.config.cache_dir = saved_dir
        mini.reset()
        shutil.rmtree(cache_dir, ignore_errors=True)

    return {
        "program": "training_step(x, labels) = F.cross_entropy(model(x), labels); loss.backward()",
        "model": (f"Sequential(Linear({sizes['features']}, {sizes['hidden']}), ReLU, "
                  f"Linear({sizes['hidden']}, {sizes['classes']}))"),
        "shapes": {"x": list(x.shape), "labels": list(labels.shape)},
        "backend": "inductor",
        "device": device,
        "stage_table": [list(row) for row in stage_table(device)],
        "hit_table": [list(row) for row in hit_table(device)],
        "paths": {
            "cold": cold,
            "disk_cache": disk,
            "hit": {
                "call_us": hit_us,
                "uncompiled_us": eager_us,
                "eager_backend_us": eager_backend_us,
                "guards_checked": guards,
                "hits_counted": hits_counted,
            },
        },
        "how": ("stage times: mini.compiler.stats()['stages'] after the forward call and its "
                "backward, reset before each path; wall: perf_counter around the forward call "
                "and the backward; hit: measure.per_call_us (median of samples of back-to-back "
                "forward calls); eager backend: the same call compiled with backend='eager'"),
    }


# ---- draw -----------------------------------------------------------------------------------

PATH_COLORS = {"cold": "#4C72B0", "disk_cache": "#DD8452", "hit": "#55A868"}


def format_ms(ms):
    if ms < 0.1:
        return f"{ms * 1e3:.1f} us"
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 1:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def row_boxes(data, path):
    """The boxes of one row: (label, folder, file, time text, ms or None)."""
    if path == "hit":  # timed as a whole: the time is drawn under the row
        hit = data["paths"]["hit"]
        boxes = []
        for label, folder, file in data["hit_table"]:
            extra = f" ({hit['guards_checked']})" if label == "guard check" else ""
            boxes.append((label + extra, folder, file, "", hit["call_us"] / 1e3))
        return boxes
    stages = data["paths"][path]["stages"]
    boxes = []
    for key, label, folder, file in data["stage_table"]:
        t = stages.get(key, {"count": 0})
        if t["count"] == 0:
            continue
        times = f"  (x{t['count']})" if t["count"] > 1 else ""
        boxes.append((label, folder, file, format_ms(t["ms"]) + times, t["ms"]))
    return boxes


def shade(ms, smallest, largest, color):
    """A box's fill: the path's color, stronger for a longer stage (log scale)."""
    import math
    import matplotlib.colors as mcolors
    if ms is None or ms <= 0:
        alpha = 0.08
    else:
        span = max(math.log10(largest) - math.log10(smallest), 1e-9)
        alpha = 0.1 + 0.75 * (math.log10(ms) - math.log10(smallest)) / span
    r, g, b = mcolors.to_rgb(color)
    return (r, g, b, min(max(alpha, 0.08), 0.6))


def draw_rows(ax, data):
    rows = [(path, title, row_boxes(data, path)) for path, title in PATHS]
    all_ms = [b[4] for _, _, boxes in rows for b in boxes if b[4] and b[4] > 0]
    smallest, largest = min(all_ms), max(all_ms)
    widest = max(len(boxes) for _, _, boxes in rows)
    box_w, gap, box_h = 1.0, 0.3, 0.62
    ax.set_xlim(-0.05, widest * (box_w + gap) + 1.45)
    ax.set_ylim(-len(rows) + 0.35, 0.7)
    ax.axis("off")
    for r, (path, title, boxes) in enumerate(rows):
        y = -r * 1.05
        ax.text(0, y + box_h / 2 + 0.06, title, fontsize=10, fontweight="bold",
                color=PATH_COLORS[path], va="bottom")
        for i, (label, folder, file, time_text, ms) in enumerate(boxes):
            x = i * (box_w + gap)
            ax.add_patch(_box(x, y - box_h / 2, box_w, box_h,
                              shade(ms, smallest, largest, PATH_COLORS[path]), PATH_COLORS[path]))
            ax.text(x + box_w / 2, y + 0.19, label, ha="center", va="center", fontsize=8,
                    fontweight="bold")
            ax.text(x + box_w / 2, y + 0.05, folder, ha="center", va="center", fontsize=6.5,
                    family="monospace")
            ax.text(x + box_w / 2, y - 0.07, file, ha="center", va="center", fontsize=5.8,
                    family="monospace", color="#555555")
            ax.text(x + box_w / 2, y - 0.2, time_text, ha="center", va="center", fontsize=8.5,
                    fontweight="bold")
            if i + 1 < len(boxes):
                ax.annotate("", xy=(x + box_w + gap, y), xytext=(x + box_w, y),
                            arrowprops={"arrowstyle": "->", "color": "#333333", "lw": 1.0})
        if path == "hit":  # one time for the whole row: a bracket under its boxes
            right = len(boxes) * (box_w + gap) - gap
            low = y - box_h / 2 - 0.06
            ax.plot([0, 0, right, right], [low + 0.04, low, low, low + 0.04], color="#333333",
                    lw=1.0)
            hit = data["paths"]["hit"]
            ax.text(right / 2, low - 0.03, f"timed as a whole: {hit['call_us']:.1f} us per "
                    f"call (median)", ha="center", va="top", fontsize=8.5, fontweight="bold")
        ax.text(widest * (box_w + gap) - gap + 0.1, y, row_summary(data, path), fontsize=8,
                va="center", ha="left")


def row_summary(data, path):
    p = data["paths"][path]
    if path == "hit":
        return (f"one forward call: {p['call_us']:.1f} us\n"
                f"uncompiled: {p['uncompiled_us']:.1f} us\n"
                f"backend='eager': {p['eager_backend_us']:.1f} us\n"
                f"(the captured graph run op by op)")
    graphs = p["stages"].get("codegen", {}).get("count", 0)
    which = " (forward, backward)" if p["stages"].get("joint graph", {}).get("count") else ""
    return (f"all stages: {format_ms(p['stages_ms'])}\n"
            f"wall: call {format_ms(p['forward_call_ms'])}\n"
            f"  + first backward {format_ms(p['backward_ms'])}\n"
            f"graphs generated: {graphs}{which}")


def _box(x, y, w, h, face, edge):
    from matplotlib.patches import FancyBboxPatch
    return FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.05",
                          facecolor=face, edgecolor=edge, linewidth=1.2)


def draw_bars(ax, data):
    """The same times as bars on a log scale, one group per stage."""
    labels, cold, disk = [], [], []
    for key, label, _, _ in data["stage_table"]:
        c = data["paths"]["cold"]["stages"].get(key, {"ms": 0, "count": 0})
        d = data["paths"]["disk_cache"]["stages"].get(key, {"ms": 0, "count": 0})
        if c["count"] == 0 and d["count"] == 0:
            continue
        labels.append(label)
        cold.append(c["ms"] if c["count"] else None)
        disk.append(d["ms"] if d["count"] else None)
    hit = data["paths"]["hit"]
    labels.append("cache hit (per call)")
    cold.append(None)
    disk.append(None)
    rows = list(range(len(labels)))
    height = 0.38
    for values, offset, path, name in ((cold, -height / 2, "cold", "1. first call, empty caches"),
                                       (disk, height / 2, "disk_cache", "2. kernels on disk")):
        ys = [r + offset for r, v in zip(rows, values) if v is not None]
        vs = [v for v in values if v is not None]
        ax.barh(ys, vs, height=height, color=PATH_COLORS[path], label=name)
        for y, v in zip(ys, vs):
            ax.text(v * 1.08, y, format_ms(v), va="center", fontsize=7.5)
    ax.barh([rows[-1]], [hit["call_us"] / 1e3], height=height, color=PATH_COLORS["hit"],
            label="3. cache hit")
    ax.text(hit["call_us"] / 1e3 * 1.08, rows[-1], format_ms(hit["call_us"] / 1e3), va="center",
            fontsize=7.5)
    ax.set_yticks(rows)
    ax.set_yticklabels(labels, fontsize=8.5)
    ax.invert_yaxis()
    ax.set_xscale("log")
    every = [v for v in cold + disk if v] + [hit["call_us"] / 1e3]
    ax.set_xlim(min(every) / 3, max(every) * 8)
    ax.set_xlabel("milliseconds (log scale; a stage's time summed over the graphs it ran for)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("the same times as bars", fontsize=9.5, loc="left")


def draw(data, plt):
    fig = plt.figure(figsize=(14, 10.5))
    ax_rows = fig.add_axes([0.015, 0.44, 0.97, 0.44])  # the boxes use the whole width
    ax_bars = fig.add_axes([0.16, 0.1, 0.8, 0.29])  # the bars leave room for their labels
    draw_rows(ax_rows, data)
    ax_rows.set_title(f"{data['program']}\nmodel = {data['model']}, x {data['shapes']['x']}, "
                      f"backend={data['backend']!r}, device={data['device']!r} "
                      f"(box shade: longer stage, darker; log scale)",
                      fontsize=9, loc="left")
    draw_bars(ax_bars, data)
    return fig
