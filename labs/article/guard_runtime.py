"""Figure -- what the guard cache costs at run time, and the order it keeps its entries in.

The function is scale_shift(x) = x * 2.0 + 1.0, compiled with dynamic=False, so that every new
size of x is a new cache entry (its guards check the exact size). Its graphs run on backend
"eager": the point is the cost of the lookup and its guards, and a C++ compile per entry would
be slow and would not change it.

  hit           one size, called again and again: the lookup finds the front entry.
  hit at depth  N sizes, called in turn: a hit moves its entry to the front, so cycling through
                N sizes always finds the size at the back, after N - 1 entries whose guards
                failed (checked with cache_entries after the loop). Timed for N = 1, 2, ...,
                beside the same calls uncompiled and each size's captured graph run alone (what
                backend "eager" runs on a hit). Compiled minus the graph alone is the cache's
                cost (the hook, the lookup, the guards); its slope against the depth is the
                cost of one failed entry. (Compiled minus uncompiled is reported too, but it
                mixes in what capture saves: the uncompiled call pays Python's frame and one
                dispatch per op, and is slower than a front hit.)
  recompile     a call with a size the cache does not hold: every entry fails, then capture
                traces the function again and the backend compiles it (eager: nothing to
                compile; unless --quick, also inductor into an empty kernel cache, whose stages
                come from mini.compiler.stats(): the C++ compiler's share).
  the order     a real sequence of sizes (8, 16, 8, 32, 16, 8 ...), with mini.compiler.
                cache_entries() after each call: the entries front first, each with its compile
                id and the size its guards check (parsed from its TENSOR_MATCH on L['x']). The
                rule it must follow: a compile puts the new entry in front, a hit moves the
                entry it hit to the front (most recently hit first), as Dynamo's cache does.
"""

import re
import shutil
import statistics
import tempfile
import textwrap
import time
import warnings

import mini

from measure import per_call_us, synchronizer

TITLE = ("A hit costs its guard check, each failed entry before it a little more, a recompile "
         "far more; entries stay most-recently-hit first")
CAPTION = ("scale_shift(x) = x * 2.0 + 1.0 under mini.compile(dynamic=False): per-call medians of "
           "back-to-back calls (backend 'eager'); the order from mini.compiler.cache_entries() "
           "after each call.")

FULL = {"depths": 8, "sample_seconds": 0.15, "samples": 7, "recompile_repeats": 7,
        "sequence": [8, 16, 8, 32, 16, 8, 64, 32, 8, 16], "inductor": True}
QUICK = {"depths": 5, "sample_seconds": 0.03, "samples": 5, "recompile_repeats": 3,
         "sequence": [8, 16, 8, 32, 16, 8], "inductor": False}
SIZE_STEP = 8  # the sizes of the depth sweep: 8, 16, 24, ...
SIZE_GUARD = re.compile(r"TENSOR_MATCH: check_tensor\(L\['x'\][^\n]*?size=\[([^\]]*)\]")


def scale_shift(x):
    return x * 2.0 + 1.0


# ---- the cache, read back -------------------------------------------------------------------


def guarded_size(guard_text):
    """The size an entry's guards check for x: [8] from `... size=[8], ...`."""
    found = SIZE_GUARD.search(guard_text)
    if not found:
        raise RuntimeError("no TENSOR_MATCH on L['x'] with a size in the guards:\n" + guard_text)
    return [int(n) for n in found.group(1).split(",") if n.strip()]


def cache_order(compiled):
    """The function's entries at offset 0, front first: [(compile_id, guarded size)]."""
    units = [u for u in mini.compiler.cache_entries(compiled) if u["offset"] == 0]
    if not units:
        return []
    return [(e["compile_id"], guarded_size(e["guards"])) for e in units[0]["entries"]]


def most_recently_hit(sizes):
    """The order the rule gives after each call of `sizes`: [[compile id, ...] front first]."""
    ids, order, orders = {}, [], []
    for n in sizes:
        if n in ids:
            order.remove(ids[n])
        else:
            ids[n] = len(ids)
        order.insert(0, ids[n])
        orders.append(list(order))
    return orders


# ---- measure --------------------------------------------------------------------------------


def captured_graphs(xs):
    """The graphs capture makes for each of xs (a backend that keeps them), to time alone."""
    graphs = []

    def keep(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    mini.reset()
    compiled = mini.compile(scale_shift, backend=keep, dynamic=False)
    for x in xs:
        compiled(x)
    if len(graphs) != len(xs):
        raise RuntimeError(f"expected one graph per size, got {len(graphs)} for {len(xs)} sizes")
    return graphs


def hit_at_depth(n_sizes, sizes, sync, device):
    """Per-call time when cycling through n_sizes sizes: every hit after n_sizes - 1 failed
    entries; beside it, the same calls uncompiled and each size's captured graph run alone (what
    backend "eager" runs for a hit: the difference is the hook, the lookup and the guards).
    Returns the row, with the cache's order read back to check the depth."""
    xs = [mini.ones(SIZE_STEP * (k + 1), device=device) for k in range(n_sizes)]
    graphs = captured_graphs(xs)
    mini.reset()
    compiled = mini.compile(scale_shift, backend="eager", dynamic=False)
    for x in xs:
        compiled(x)  # n_sizes entries, the last size in front

    def cycle_compiled():
        for x in xs:
            compiled(x)

    def cycle_uncompiled():
        for x in xs:
            scale_shift(x)

    def cycle_graphs():
        for graph, x in zip(graphs, xs):
            graph.forward(x)

    def time_cycle(run):
        return per_call_us(run, sizes["sample_seconds"], sizes["samples"], sync) / n_sizes

    mini.compiler.reset_stats()
    compiled_us = time_cycle(cycle_compiled)
    units = mini.compiler.stats()["units"]
    order = cache_order(compiled)
    uncompiled_us, graph_us = time_cycle(cycle_uncompiled), time_cycle(cycle_graphs)
    # after whole cycles the last size called is in front and the first at the back: the next
    # call (the first size again) finds its entry after n_sizes - 1 others
    return {
        "sizes": n_sizes,
        "depth": n_sizes - 1,
        "compiled_us": compiled_us,
        "uncompiled_us": uncompiled_us,
        "graph_alone_us": graph_us,
        "cache_overhead_us": compiled_us - graph_us,
        "compiled_minus_uncompiled_us": compiled_us - uncompiled_us,
        "order_after": [size[0] for _, size in order],
        "depth_checked": (bool(order) and order[-1][1] == [SIZE_STEP] and units["compiles"] == 0
                          and units["run_natively"] == {}),
        "hits_counted": units["cache_hits"],
    }


def time_recompiles(sizes, sync, device, backend, repeats, cache_dir=None):
    """The first compile (empty cache) and a recompile (a new size, one entry failing first),
    each timed as a call, `repeats` times from mini.reset(); with their stages."""
    first, again, stages = [], [], {}
    x_first, x_new = mini.ones(SIZE_STEP, device=device), mini.ones(3 * SIZE_STEP, device=device)
    for _ in range(repeats):
        mini.reset()
        compiled = mini.compile(scale_shift, backend=backend, dynamic=False)
        for x, times in ((x_first, first), (x_new, again)):
            mini.compiler.reset_stats()
            sync()
            start = time.perf_counter()
            compiled(x)
            sync()
            times.append((time.perf_counter() - start) * 1e3)
            if times is again:
                for name, t in mini.compiler.stats()["stages"].items():
                    stages.setdefault(name, []).append(t["seconds"] * 1e3)
        if mini.compiler.stats()["units"]["recompiles"] != 1:
            raise RuntimeError("the call with a new size did not recompile")
    return {
        "backend": backend,
        "repeats": repeats,
        "first_compile_ms": statistics.median(first),
        "recompile_ms": statistics.median(again),
        "recompile_stages_ms": {name: statistics.median(v) for name, v in stages.items()},
        "fresh_kernel_cache": cache_dir is not None,
    }


def run_sequence(sequence, device):
    """The cache after each call of `sequence`: what the call did, and the order."""
    xs = {n: mini.ones(n, device=device) for n in sequence}
    mini.reset()
    compiled = mini.compile(scale_shift, backend="eager", dynamic=False)
    calls, before = [], cache_order(compiled)
    for n in sequence:
        units_before = dict(mini.compiler.stats()["units"])
        compiled(xs[n])
        units = mini.compiler.stats()["units"]
        order = cache_order(compiled)
        compiled_now = units["compiles"] > units_before["compiles"]
        front_id = order[0][0]
        previous_ids = [i for i, _ in before]
        calls.append({
            "size": n,
            "outcome": "compile" if compiled_now else "hit",
            "found_at_depth": None if compiled_now else previous_ids.index(front_id),
            "failed_entries": len(before) if compiled_now else previous_ids.index(front_id),
            "order": [i for i, _ in order],
            "guarded_sizes": [size for _, size in order],
        })
        before = order
    rule = most_recently_hit(sequence)
    return {"sizes": sequence, "calls": calls,
            "most_recently_hit_rule": rule,
            "matches_rule": [c["order"] for c in calls] == rule}


def measure(args):
    sizes = QUICK if args.quick else FULL
    device, sync = args.device, synchronizer(args.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        depths = [hit_at_depth(n, sizes, sync, device) for n in range(1, sizes["depths"] + 1)]
        recompile = {"eager": time_recompiles(sizes, sync, device, "eager",
                                              sizes["recompile_repeats"])}
        if sizes["inductor"]:
            saved = mini.config.cache_dir
            folder = tempfile.mkdtemp(prefix="mini-article-guards-")
            try:
                mini.config.cache_dir = folder  # empty: each compile is a real C++ compile
                recompile["inductor"] = time_recompiles(sizes, sync, device, "inductor", 1, folder)
            finally:
                mini.config.cache_dir = saved
                shutil.rmtree(folder, ignore_errors=True)
        sequence = run_sequence(sizes["sequence"], device)
    mini.reset()
    fit = statistics.linear_regression([d["depth"] for d in depths],
                                       [d["cache_overhead_us"] for d in depths])
    return {
        "function": "scale_shift(x) = x * 2.0 + 1.0",
        "compile": "mini.compile(scale_shift, backend='eager', dynamic=False)",
        "device": device,
        "depths": depths,
        "per_failed_entry_us": fit.slope,
        "front_hit_overhead_fit_us": fit.intercept,
        "recompile": recompile,
        "sequence": sequence,
        "cache_size_limit": mini.config.cache_size_limit,
        "how": ("per call: measure.per_call_us (median over samples of back-to-back calls; a "
                "cycle of N sizes divided by N); uncompiled: the same calls of scale_shift; graph "
                "alone: each size's captured GraphModule.forward called directly; cache overhead "
                "= compiled - graph alone; fit: least squares of it against the depth; "
                "recompile: one call timed with perf_counter after mini.reset() and a first "
                "call, median over repeats; stages "
                "from mini.compiler.stats() of that call"),
    }


# ---- draw -----------------------------------------------------------------------------------

COLORS = {"compiled": "#4C72B0", "eager": "#8C8C8C", "graph": "#404040", "hit": "#55A868",
          "compile": "#DD8452",
          "entry": "#F2F2F2", "inductor": "#C44E52"}
# The cost bars, top to bottom: (label, how to read its value from the data)
COSTS = [
    ("the same call, uncompiled", lambda d: d["depths"][0]["uncompiled_us"]),
    ("its captured graph, run alone", lambda d: d["depths"][0]["graph_alone_us"]),
    ("cache hit: the front entry", lambda d: d["depths"][0]["compiled_us"]),
    ("cache hit after {depth} failed entries", lambda d: d["depths"][-1]["compiled_us"]),
    ("recompile, backend 'eager'", lambda d: d["recompile"]["eager"]["recompile_ms"] * 1e3),
    ("recompile, backend 'inductor'", lambda d: d["recompile"]["inductor"]["recompile_ms"] * 1e3
     if "inductor" in d["recompile"] else None),
    ("  of which the C++ compiler", lambda d: d["recompile"]["inductor"]["recompile_stages_ms"]
     .get("compile", 0) * 1e3 if "inductor" in d["recompile"] else None),
]


def format_us(us):
    if us >= 1000:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.1f} us"


def draw_depths(ax, data):
    depths = data["depths"]
    xs = [d["depth"] for d in depths]
    ax.plot(xs, [d["compiled_us"] for d in depths], "o-", color=COLORS["compiled"],
            label="compiled call: a hit at that depth")
    ax.plot(xs, [d["graph_alone_us"] for d in depths], "^:", color=COLORS["graph"],
            label="its captured graph run alone (what backend 'eager' runs)")
    ax.plot(xs, [d["uncompiled_us"] for d in depths], "s--", color=COLORS["eager"],
            label="the same call uncompiled (Python + one op at a time)")
    fit_x = [xs[0], xs[-1]]
    graph_mean = statistics.mean(d["graph_alone_us"] for d in depths)
    ax.plot(fit_x, [graph_mean + data["front_hit_overhead_fit_us"] + data["per_failed_entry_us"] * x
                    for x in fit_x], "-", color="black", lw=0.8, alpha=0.6,
            label=(f"fit: graph + {data['front_hit_overhead_fit_us']:.2f} us + "
                   f"{data['per_failed_entry_us']:.2f} us per failed entry"))
    for d in depths:
        ax.annotate(f"{d['cache_overhead_us']:+.2f}", (d["depth"], d["compiled_us"]),
                    textcoords="offset points", xytext=(0, 9), ha="center", fontsize=7.5,
                    color=COLORS["compiled"],
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.85})
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{d['depth']}\n({d['sizes']} size{'s' if d['sizes'] > 1 else ''})"
                        for d in depths], fontsize=8)
    ax.set_xlabel("entries whose guards fail before the hit (cycling through N sizes)")
    ax.set_ylabel("microseconds per call (median)")
    top = max(max(d["compiled_us"], d["uncompiled_us"]) for d in depths)
    ax.set_ylim(0, top * 1.45)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.set_title("a hit at the front and after failed entries (labels: the cache's cost, "
                 "compiled minus graph alone, us)", fontsize=9.5, loc="left")


def draw_costs(ax, data):
    rows = []
    for label, read in COSTS:
        value = read(data)
        if value is not None:
            rows.append((label.format(depth=data["depths"][-1]["depth"]), value))
    ys = list(range(len(rows)))
    colors = [COLORS["eager"], COLORS["graph"], COLORS["hit"], COLORS["hit"], COLORS["compile"],
              COLORS["inductor"], COLORS["inductor"]][:len(rows)]
    ax.barh(ys, [v for _, v in rows], color=colors)
    for y, (_, v) in zip(ys, rows):
        ax.text(v * 1.1, y, format_us(v), va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels([label for label, _ in rows], fontsize=8.5)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(v for _, v in rows) / 2, max(v for _, v in rows) * 10)
    ax.set_xlabel("microseconds per call (log scale)")
    ax.grid(axis="x", alpha=0.3)
    eager = data["recompile"]["eager"]
    notes = [f"recompile: a call of a new size (one entry failing first), median of "
             f"{eager['repeats']}; a first compile (empty cache) of backend 'eager': "
             f"{format_us(eager['first_compile_ms'] * 1e3)}"]
    if "inductor" in data["recompile"]:
        ind = data["recompile"]["inductor"]
        notes.append(f"inductor: one call into an empty kernel cache (its first compile: "
                     f"{format_us(ind['first_compile_ms'] * 1e3)})")
    else:
        notes.append("inductor: not timed under --quick")
    text = "\n".join(textwrap.fill(n, 70) for n in notes)
    ax.set_title("what each path costs\n" + text, fontsize=8.5, loc="left")


def draw_sequence(ax, data):
    seq = data["sequence"]
    calls = seq["calls"]
    widest = max(len(c["order"]) for c in calls)
    box_w, gap, row_h = 0.9, 0.12, 1.0
    label_w = 2.2
    # room for at least 5 boxes, so that a box keeps its size whatever the sequence
    ax.set_xlim(0, label_w + max(widest, 5) * (box_w + gap) + 0.2)
    ax.set_ylim(-len(calls) * row_h - 0.2, 0.9)
    ax.axis("off")
    from matplotlib.patches import FancyBboxPatch
    ax.text(label_w, 0.35, "front (checked first)  ->  back", fontsize=8.5, style="italic")
    for r, call in enumerate(calls):
        y = -(r + 1) * row_h + 0.5
        what = ("compiled: new entry" if call["outcome"] == "compile"
                else f"hit at depth {call['found_at_depth']}")
        ax.text(0, y, f"call {r + 1}: x of size [{call['size']}]\n{what}", va="center",
                fontsize=8.5)
        for i, (cid, size) in enumerate(zip(call["order"], call["guarded_sizes"])):
            x = label_w + i * (box_w + gap)
            mark = i == 0
            face = COLORS[call["outcome"]] if mark else COLORS["entry"]
            ax.add_patch(FancyBboxPatch((x, y - 0.36), box_w, 0.72,
                                        boxstyle="round,pad=0.01,rounding_size=0.08",
                                        facecolor=face, alpha=0.85 if mark else 1.0,
                                        edgecolor="#333333", lw=1.0))
            ax.text(x + box_w / 2, y + 0.12, f"#{cid}", ha="center", va="center", fontsize=8.5,
                    fontweight="bold")
            ax.text(x + box_w / 2, y - 0.16, f"size={size}", ha="center", va="center",
                    fontsize=7.5, family="monospace")
    verdict = ("matches" if seq["matches_rule"] else "DOES NOT match")
    ax.set_title(f"the cache after each call (mini.compiler.cache_entries): #compile id and the "
                 f"size its guards check;\ncolored: the entry hit (green) or added (orange); the "
                 f"order {verdict} the most-recently-hit rule", fontsize=9.5, loc="left")


def draw_rule(ax, data):
    """The rule the order follows, and the check of every call against it."""
    ax.axis("off")
    seq = data["sequence"]
    agree = sum(c["order"] == r for c, r in zip(seq["calls"], seq["most_recently_hit_rule"]))
    text = "\n".join([
        "How a lookup walks the cache (mini/guards/cache.cpp):",
        "",
        "  1. check the entries front to back;",
        "  2. the first whose guards all pass runs, and moves to the front;",
        "  3. when none passes, capture compiles a new entry, put in front;",
        f"  4. after cache_size_limit = {data['cache_size_limit']} compiles the unit runs "
        "natively.",
        "",
        "So a hot size stays in front and costs one guard check, and a size",
        "used in turn with others pays one failed check per entry before it.",
        "",
        f"check: the order read back equals the rule's after {agree} of "
        f"{len(seq['calls'])} calls",
        "(the rule computed from the sizes alone: new -> front, hit -> front).",
    ])
    ax.text(0.0, 0.95, text, va="top", ha="left", fontsize=9, family="monospace")


def draw(data, plt):
    fig = plt.figure(figsize=(15, 11))
    ax_depth = fig.add_axes([0.06, 0.57, 0.42, 0.29])
    ax_cost = fig.add_axes([0.68, 0.57, 0.29, 0.25])
    ax_seq = fig.add_axes([0.03, 0.1, 0.55, 0.38])
    ax_rule = fig.add_axes([0.6, 0.1, 0.39, 0.36])
    draw_depths(ax_depth, data)
    draw_costs(ax_cost, data)
    draw_sequence(ax_seq, data)
    draw_rule(ax_rule, data)
    fig.text(0.06, 0.885, f"{data['compile']}, device={data['device']!r}", fontsize=9.5)
    return fig
