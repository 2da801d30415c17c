"""Figure -- a real program's compiled regions and eager islands, with the time spent in each.

The program is a small training-style step with three graph breaks between its tensor work:
a print, a Python `if` on a tensor's value (Tensor.item()) and a logging call, a library mini
does not trace. mini.explain says where it breaks and why (graphs, their ops, each reason with
its source line); the capture logs of the same run give the order of graphs and breaks
(labs/graph_breaks.py's explain_in_order).

Time in each part of a call is measured in place, with timestamps: the program is compiled with
a backend that wraps each graph's runner in a timer (the inductor runner,
mini._C._inductor_compile(gm)["run"], or gm.forward under --quick, through measure's
CountingBackend), so each call records when each compiled region started and ended. Between
two regions is an eager island: the breaking statement, run by Python, and the frame hook's
work to enter the next resume unit (its cache lookup and guard check). Before the first region
is the call's entry (the hook's lookup and the first unit's guards), after the last its return.
Each statement is also timed alone, in isolation (a print to a discarded stdout, .item() of a
0-d tensor, log.info), to show how much of an island is the statement and how much the hook.
"""

import logging
import re
import statistics
import textwrap
import time

import mini

from graph_breaks import explain_in_order, line_and_code, op_names
from measure import cpu_threads, CountingBackend, quietly, synchronizer

TITLE = ("A graph break splits one function into compiled regions and eager islands; "
         "each island costs a trip through Python and the frame hook")
CAPTION = ("One call of training_step (3 breaks: print, Tensor.item(), log.info), its time "
           "split by timestamps around each compiled region; labels are mini.explain's graphs "
           "and break reasons.")

log = logging.getLogger("article.graph_breaks")  # at WARNING level: log.info prints nothing

FULL = {"rows": 256, "inner": 32, "features": 256, "calls": 1000, "backend": "inductor"}
QUICK = {"rows": 64, "inner": 32, "features": 128, "calls": 200, "backend": "eager"}


# ---- the program ----------------------------------------------------------------------------


def training_step(x, w):
    h = mini.relu(x @ w) * 0.5 + 0.1
    print("hidden layer done")
    h = mini.sigmoid(h) * h + 0.25
    if h.mean().item() > 10.0:
        h = h * 0.5
    h = (h - 0.5) * 2.0
    log.info("step done")
    return (h * h).sum()


def breaking_call(reason):
    """The call a break reason names: `print`, Tensor.item, Logger.info, ..."""
    for pattern in (r"`([\w.]+)`", r"(Tensor\.\w+)\(\)", r"skipped: ([\w.]+)", r"calling (\S+)"):
        found = re.search(pattern, reason)
        if found:
            return found.group(1)
    return reason.split(":", 1)[0]


def statement_alone(call, h):
    """The breaking call run by itself, with nothing of the frame hook around it: what an
    island would cost if the statement were all of it. None for a call not in this program."""
    mean = h.mean()
    alone = {
        "print": lambda: print("hidden layer done"),
        "Tensor.item": lambda: mean.item() > 10.0,
        "Logger.info": lambda: log.info("step done"),
    }
    return alone.get(call)


# ---- timing the regions in place --------------------------------------------------------------


class TimedBackend(CountingBackend):
    """CountingBackend (inductor or eager runners) whose runners write, at each call, the
    time they started and ended into `events` as (start, end) in seconds."""

    def __init__(self, kind, sync):
        super().__init__(kind)
        self.events = []
        self.sync = sync

    def __call__(self, graph_module, example_inputs):
        run = super().__call__(graph_module, example_inputs)
        events, sync = self.events, self.sync

        def timed(*inputs):
            sync()
            start = time.perf_counter()
            outputs = run(*inputs)
            sync()
            events.append((start, time.perf_counter()))
            return outputs
        return timed


def time_one_call(compiled, args, backend, sync):
    """Per-part seconds of one call: [entry, region 1, gap 1, ..., region n, return]."""
    backend.events.clear()
    sync()
    start = time.perf_counter()
    compiled(*args)
    sync()
    end = time.perf_counter()
    parts, previous = [], start
    for region_start, region_end in backend.events:
        parts += [region_start - previous, region_end - region_start]
        previous = region_end
    return parts + [end - previous], end - start


def median_us(run, calls):
    """The median of `calls` timed calls of run(), in microseconds."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


# ---- measure --------------------------------------------------------------------------------


def describe_breaks(explanation):
    reasons = []
    for reason in explanation.break_reasons:
        line, code = line_and_code(reason)
        reasons.append({"reason": reason.reason, "call": breaking_call(reason.reason),
                        "location": reason.location, "line": line, "code": code})
    return reasons


def timeline(sequence, graphs, reasons, median_parts, alone_us):
    """The call's parts in order: entry, compiled regions, the eager islands between them
    (each with the break reasons explain() recorded there), return."""
    graph_positions = [i for i, (kind, _) in enumerate(sequence) if kind == "graph"]
    parts = [{"kind": "entry", "us": median_parts[0], "breaks": []}]
    for k, position in enumerate(graph_positions):
        index = sequence[position][1]
        parts.append({"kind": "graph", "index": index, "us": median_parts[1 + 2 * k],
                      "ops": op_names(graphs[index])})
        following = (graph_positions[k + 1] if k + 1 < len(graph_positions) else len(sequence))
        breaks = [sequence[i][1] for i in range(position + 1, following)]
        is_last = k + 1 == len(graph_positions)
        part = {"kind": "return" if is_last else "island", "us": median_parts[2 + 2 * k],
                "breaks": [reasons[b] for b in breaks]}
        part["statement_alone_us"] = sum(alone_us.get(reasons[b]["call"], 0.0) for b in breaks)
        parts.append(part)
    before_first = graph_positions[0] if graph_positions else len(sequence)
    parts[0]["breaks"] = [reasons[sequence[i][1]] for i in range(before_first)]
    return parts


def measure(args):
    sizes = QUICK if args.quick else FULL
    device, sync = args.device, synchronizer(args.device)
    mini.manual_seed(0)
    x = mini.randn(sizes["rows"], sizes["inner"], device=device)
    w = mini.randn(sizes["inner"], sizes["features"], device=device) * 0.1
    fn_args = (x, w)

    explanation, sequence = explain_in_order(training_step, fn_args)
    reasons = describe_breaks(explanation)

    mini.reset()
    backend = TimedBackend(sizes["backend"], sync)
    compiled = mini.compile(training_step, backend=backend)
    per_part, totals = [], []
    with quietly(), cpu_threads(device, 1) as threads:
        compiled(*fn_args)  # compiles every graph
        for _ in range(sizes["calls"]):
            parts, total = time_one_call(compiled, fn_args, backend, sync)
            per_part.append(parts)
            totals.append(total)
        eager_us = median_us(lambda: training_step(*fn_args), sizes["calls"])
        h = mini.randn(sizes["rows"], sizes["features"], device=device)
        alone_us = {}
        for reason in reasons:
            run = statement_alone(reason["call"], h)
            if run is not None:
                alone_us[reason["call"]] = median_us(run, sizes["calls"])
    stats = mini.compiler.stats()["units"]
    if any(len(parts) != 2 * explanation.graph_count + 1 for parts in per_part):
        raise RuntimeError("a timed call ran a different number of compiled regions than "
                           f"explain() found ({explanation.graph_count}); the timeline would "
                           "not match its labels")
    median_parts = [statistics.median(column) * 1e6 for column in zip(*per_part)]
    return {
        "program": "training_step",
        "shapes": {"x": list(x.shape), "w": list(w.shape)},
        "backend": sizes["backend"],
        "device": device,
        "calls_timed": sizes["calls"],
        "cpu_threads": threads,
        "graph_count": explanation.graph_count,
        "graph_break_count": explanation.graph_break_count,
        "break_reasons": reasons,
        "parts": timeline(sequence, explanation.graphs, reasons, median_parts, alone_us),
        "call_us_median": statistics.median(totals) * 1e6,
        "parts_sum_us": sum(median_parts),
        "eager_us": eager_us,
        "statement_alone_us": alone_us,
        "compiles": stats["compiles"],
        "recompiles": stats["recompiles"],
        "how": ("time of each part: median over the timed calls of timestamps read at the call's "
                "start and end and around each compiled region's runner (wrapped by the backend); "
                "an island is the time between one region's end and the next one's start: the "
                "breaking statement plus the frame hook entering the next resume unit. "
                "'alone': the breaking call timed by itself (stdout discarded)."),
    }


# ---- draw -----------------------------------------------------------------------------------

COLORS = {"graph": "#4C72B0", "island": "#DD8452", "entry": "#B0B0B0", "return": "#B0B0B0"}


def part_label(part):
    if part["kind"] == "graph":
        ops = part["ops"]
        shown = ", ".join(ops[:4]) + (", ..." if len(ops) > 4 else "")
        return f"graph {part['index'] + 1}: {len(ops)} ops\n{shown}"
    if part["kind"] == "island":
        lines = []
        for b in part["breaks"]:
            code = b["code"] if len(b["code"]) <= 34 else b["code"][:31] + "..."
            reason = b["reason"] if len(b["reason"]) <= 100 else b["reason"][:97] + "..."
            lines += [f"line {b['line']}: {code}", wrap(reason, 36)]
        return "eager island\n" + "\n".join(lines)
    return part["kind"]


def wrap(text, width):
    return "\n".join(textwrap.wrap(text, width))


def draw_timeline(ax_line, data):
    """The timeline: one bar, each part as wide as its measured time, the graphs labelled above
    and the islands below; the title sums the call up."""
    from matplotlib.patches import Patch
    parts = data["parts"]
    total = sum(p["us"] for p in parts)
    islands = sum(p["us"] for p in parts if p["kind"] == "island")
    alone = sum(p["statement_alone_us"] for p in parts if p["kind"] == "island")
    x = 0.0
    labelled = [p for p in parts if p["kind"] in ("graph", "island")]
    slots = {id(p): (i + 0.5) / len(labelled) * total for i, p in enumerate(labelled)}
    for part in parts:
        ax_line.barh(0, part["us"], left=x, height=0.5, color=COLORS[part["kind"]],
                     edgecolor="black", linewidth=0.5)
        centre = x + part["us"] / 2
        if id(part) in slots:
            above = part["kind"] == "graph"
            y_text = 0.62 if above else -0.62
            ax_line.annotate(part_label(part) + f"\n{part['us']:.1f} us",
                             xy=(centre, 0.25 if above else -0.25),
                             xytext=(slots[id(part)], y_text), ha="center",
                             va="bottom" if above else "top", fontsize=7.5,
                             arrowprops={"arrowstyle": "-", "color": "#555555", "lw": 0.6},
                             bbox={"boxstyle": "round,pad=0.25", "facecolor": "white",
                                   "edgecolor": COLORS[part["kind"]]})
        x += part["us"]
    ax_line.set_xlim(0, total)
    ax_line.set_ylim(-2.3, 2.1)
    ax_line.set_yticks([])
    ax_line.set_xlabel("time within one call (microseconds; widths are the measured medians)")
    shapes = ", ".join(f"{name} {shape}" for name, shape in data["shapes"].items())
    ax_line.set_title(
        f"{data['program']}({shapes}), backend="
        f"{data['backend']!r}: {data['graph_count']} graphs, {len(data['break_reasons'])} "
        f"breaks; one call {data['call_us_median']:.0f} us (median of whole calls; the parts' "
        f"medians add to {total:.0f} us),\nof which eager islands {islands:.1f} us (their "
        f"statements alone: {alone:.1f} us); the same function uncompiled: "
        f"{data['eager_us']:.0f} us a call", fontsize=9.5, loc="left")
    for side in ("left", "right", "top"):
        ax_line.spines[side].set_visible(False)
    ax_line.legend(handles=[Patch(color=COLORS["graph"], label="compiled region (one graph)"),
                            Patch(color=COLORS["island"], label="eager island (a break)"),
                            Patch(color=COLORS["entry"], label="entry / return")],
                   loc="upper right", fontsize=8, ncol=3, frameon=False,
                   bbox_to_anchor=(1.0, 1.0))


def part_name(part):
    """A part's row label in the bar chart."""
    if part["kind"] == "graph":
        return f"graph {part['index'] + 1} ({len(part['ops'])} ops)"
    if part["kind"] == "island":
        return "island: " + ", ".join(b["call"] for b in part["breaks"])
    return part["kind"] + (" (hook, guards)" if part["kind"] == "entry" else "")


def draw_parts(ax_bars, parts):
    """The same parts as bars, so the thin islands can be read, each island's breaking statement
    alone marked on its bar."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    names = [part_name(part) for part in parts]
    values = [part["us"] for part in parts]
    colors = [COLORS[part["kind"]] for part in parts]
    rows = list(range(len(parts)))[::-1]
    ax_bars.barh(rows, values, color=colors, edgecolor="black", linewidth=0.5)
    alone = [(row, p["statement_alone_us"]) for row, p in zip(rows, parts)
             if p["kind"] == "island"]
    ax_bars.scatter([v for _, v in alone], [r for r, _ in alone], marker="|", s=260,
                    color="black", zorder=3, label="the breaking statement alone")
    for row, value in zip(rows, values):
        ax_bars.text(value, row, f" {value:.1f} us", va="center", fontsize=8)
    ax_bars.set_yticks(rows)
    ax_bars.set_yticklabels(names, fontsize=8.5)
    ax_bars.set_xlabel("microseconds per call (median)")
    ax_bars.set_xlim(0, max(values) * 1.18)
    ax_bars.grid(axis="x", alpha=0.3)
    ax_bars.legend(handles=[Patch(facecolor="white", edgecolor="black",
                                  label="bar: the part in place (timestamps in the call)"),
                            Line2D([], [], color="black", marker="|", linestyle="none",
                                   markersize=14, label="the breaking statement alone")],
                   fontsize=8, loc="lower right")
    ax_bars.set_title("each part of the call, in order: an island is the time between two "
                      "regions (the statement + the hook entering the next unit)",
                      fontsize=9.5, loc="left")


def draw(data, plt):
    fig, (ax_line, ax_bars) = plt.subplots(2, 1, figsize=(13, 9.4),
                                           gridspec_kw={"height_ratios": [1.25, 1]})
    fig.subplots_adjust(top=0.87, bottom=0.14, left=0.17, right=0.97, hspace=0.32)
    draw_timeline(ax_line, data)
    draw_parts(ax_bars, data["parts"])
    return fig
