"""Lab -- graph breaks: where a function stops being one graph, and what that costs.

When capture meets code it cannot put in a graph -- a print, a Tensor.item() that a Python
`if` branches on, a call into a library it does not know -- it compiles what it has so far,
runs that one instruction eagerly and starts a new graph after it (notes/graph_breaks.md).
This lab runs six programs through mini.explain and reports, for each, the graphs, the
breaks, every break's reason and source line, what fullgraph=True says, and the time per
call compiled against eager:

    dd_if_item       if x.sum().item() > 0: ...          a branch on a tensor's value
    where_no_break   mini.where(x.sum() > 0, ...)        the same logic kept in the graph
    print_mid        y = x * 2; print(...); relu(y)      a side effect in the middle
    several_breaks   logging, a print and an item() check in one training-style step
    item_in_loop     total += x.sum().item() in a loop   no graph at all: every iteration
                                                         would break, so (as Dynamo) the
                                                         whole frame runs as plain Python
    item_in_try      s = y.sum().item() in a try block   no graph either: an exception must
                                                         reach the handler

It then builds chains of nine `x = relu(x * 0.9 + 0.1)` segments with 0..8 prints between
them, and plots the time per call against the number of breaks.

    PYTHONPATH=build/python .venv/bin/python labs/graph_breaks.py [--quick] [--out DIR]
        [--backend inductor|eager] [--device cpu|cuda]

--device cuda runs the same programs on GPU tensors (compiled graphs become generated CUDA
kernels under inductor); the times per call are then the host's clock around a loop of calls,
read after a synchronize, so they hold the launches and the GPU's work both. Without a usable
GPU it says why in one line and exits 0.

Writes graph_breaks_regions.png/.svg (each program as its sequence of compiled regions and
eager islands, drawn from what explain() recorded), graph_breaks_cost.png/.svg (time per
call against breaks) and graph_breaks.json (the raw numbers) into --out (default: figures/).
"""

import argparse
import contextlib
import io
import linecache
import logging
import os
import sys
import textwrap

import mini

from measure import (CountingBackend, Progress, add_common_arguments, cold_kernel_cache,
                     device_fields, device_title, finish_arguments, load_torch_expectations,
                     per_call_us, pyplot, quietly, save_figure, synchronizer, write_json)

CHAIN_SEGMENTS = 9  # a chain has 9 segments, so 0..8 prints can sit between them
CHAIN_SEGMENT = "x = mini.relu(x * 0.9 + 0.1)"
FULL_CHAIN_SIZES = [1024, 2**16]
QUICK_CHAIN_SIZES = [1024]

log = logging.getLogger("graph_breaks_lab")  # at WARNING level: log.info prints nothing


# ---- the programs ---------------------------------------------------------------------------
# The first three are the conformance programs of the same names
# (tests/conformance/cases.py), so torch 2.11's numbers can be printed beside mini's.


def dd_if_item(x):
    if x.sum().item() > 0:
        return x * 2
    return x - 1


def where_no_break(x):
    return mini.where(x.sum() > 0, x * 2, x - 1)


def print_mid(x):
    y = x * 2
    print("step")
    return mini.relu(y)


def several_breaks(x, w):
    log.info("step start")
    h = mini.relu(x @ w)
    print("hidden layer done")
    loss = (h * h).mean()
    if loss.item() > 1e6:
        raise FloatingPointError("loss diverged")
    out = mini.tanh(h) * 0.5 + h
    return out.sum() + loss


def item_in_loop(x):
    total = 0.0
    for _ in range(3):
        x = x * 2
        total += x.sum().item()
    return x, total


def item_in_try(x):
    y = x * 2
    try:
        s = y.sum().item()
    except RuntimeError:
        s = 0.0
    return y * s


def program_list(device):
    """(name, function, arguments on `device`, conformance case or None, what it shows)."""
    mini.manual_seed(0)

    # drawn on the CPU, then moved: CUDA's generator draws other numbers, and a branch on their
    # values would change the facts
    def randn(*shape):
        return mini.randn(*shape).to(device)
    return [
        ("dd_if_item", dd_if_item, (randn(8, 8),), "dd_if_item",
         "a Python branch on x.sum().item()"),
        ("where_no_break", where_no_break, (randn(8, 8),), "where_no_break",
         "the same branch as mini.where"),
        ("print_mid", print_mid, (randn(8),), "print_mid",
         "a print between two ops"),
        ("several_breaks", several_breaks, (randn(32, 64), randn(64, 64)), None,
         "log.info, print and an item() check"),
        # where Dynamo gives up on the frame: no graph at all (cases_mini.py, same names)
        ("item_in_loop", item_in_loop, (randn(8),), "break_inside_for_loop",
         "x.sum().item() inside a for loop"),
        ("item_in_try", item_in_try, (randn(8),), "break_inside_try",
         "x.sum().item() inside a try block"),
    ]


def make_chain(breaks):
    """A function of CHAIN_SEGMENTS segments with a print after each of the first `breaks`.
    Its source is registered with linecache, so break reasons can quote its lines."""
    name = f"chain_with_{breaks}_breaks"
    lines = [f"def {name}(x):"]
    for segment in range(CHAIN_SEGMENTS):
        lines.append(f"    {CHAIN_SEGMENT}")
        if segment < breaks:
            lines.append(f'    print("checkpoint {segment + 1}")')
    lines.append("    return x")
    source = "\n".join(lines) + "\n"
    filename = f"<graph_breaks lab: {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"mini": mini}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


# ---- what explain() says, in the order the function ran ---------------------------------------


def explain_in_order(fn, args):
    """mini.explain(fn)(*args), and the order its graphs and breaks happened in.

    explain() lists the graphs in order and the break reasons in order, but the two lists do
    not simply alternate: a break before any tensor op leaves an empty region that is not a
    graph, and a break after the last op is followed by none. So the explain() call runs with
    the graph_code and graph_breaks logs captured: capture writes "TRACED GRAPH" when a region
    becomes a graph and "Graph break" when it ends at a break, in the order they happen.
    Returns (explanation, sequence), sequence a list of ("graph", i) and ("break", j) that
    index explanation.graphs and explanation.break_reasons."""
    captured = io.StringIO()
    mini.set_logs("graph_code", "graph_breaks")
    try:
        with contextlib.redirect_stderr(captured), quietly():
            explanation = mini.explain(fn)(*args)
    finally:
        mini.set_logs(os.environ.get("MINI_LOGS", ""))
    sequence, graphs, breaks = [], 0, 0
    for line in captured.getvalue().splitlines():
        if line.startswith("TRACED GRAPH"):
            sequence.append(("graph", graphs))
            graphs += 1
        elif line.startswith("Graph break in user code") or line.startswith("Skipping the rest of the frame"):
            sequence.append(("break", breaks))
            breaks += 1
    if graphs != explanation.graph_count or breaks != len(explanation.break_reasons):
        print(f"note: the logs of {fn.__name__} listed {graphs} graphs and {breaks} breaks, "
              f"explain() {explanation.graph_count} and {len(explanation.break_reasons)}; "
              "drawing them alternately")
        sequence = alternate(explanation.graph_count, len(explanation.break_reasons))
    return explanation, sequence


def alternate(graph_count, break_count):
    sequence = []
    for index in range(max(graph_count, break_count)):
        if index < graph_count:
            sequence.append(("graph", index))
        if index < break_count:
            sequence.append(("break", index))
    return sequence


def op_names(graph_module):
    return [node.target.replace("mini.", "") for node in graph_module.nodes
            if node.op == "call_function"]


def line_and_code(break_reason):
    """(line number, source text) of a break, from its location and code fields."""
    location = break_reason.location  # "path:LINE in fn"
    line = location.rsplit(":", 1)[-1].split(" ")[0] if ":" in location else "?"
    code = break_reason.code.split("code: ", 1)[-1] if "code: " in break_reason.code else ""
    return line, code.strip()


def short_reason(reason):
    """The reason up to its first ': ' (the cause, without the advice that follows)."""
    return reason.split(": ", 1)[0]


def describe(explanation, sequence):
    """The JSON form of one explained program: counts, reasons and the region sequence."""
    reasons = []
    for reason in explanation.break_reasons:
        line, code = line_and_code(reason)
        reasons.append({"reason": reason.reason, "location": reason.location,
                        "line": line, "code": code})
    regions = []
    for kind, index in sequence:
        if kind == "graph":
            regions.append({"kind": "graph", "index": index,
                            "ops": op_names(explanation.graphs[index])})
        else:
            regions.append({"kind": "eager", "break_index": index,
                            "line": reasons[index]["line"], "code": reasons[index]["code"],
                            "reason": short_reason(reasons[index]["reason"]),
                            "whole_frame": "the whole frame runs as plain Python" in reasons[index]["reason"]})
    return {
        "graph_count": explanation.graph_count,
        "graph_break_count": explanation.graph_break_count,
        "break_reasons": reasons,
        "regions": regions,
    }


# ---- measuring ------------------------------------------------------------------------------


def fullgraph_outcome(fn, args):
    """'ok', or the first line of the error fullgraph=True raises."""
    mini.reset()
    try:
        with quietly():
            mini.compile(fn, backend="eager", fullgraph=True)(*args)
    except mini.Unsupported as error:
        return "error: Unsupported: " + str(error).splitlines()[0]
    except Exception as error:  # noqa: BLE001 -- any other error is a finding too
        return f"error: {type(error).__name__}: " + str(error).splitlines()[0]
    return "ok"


def compiles_on_first_call(fn, args):
    """Graphs compiled by the first call (CompileCounter's frame_count, as the conformance
    runner counts them)."""
    mini.reset()
    counter = CountingBackend("eager")
    with quietly():
        mini.compile(fn, backend=counter)(*args)
    return counter.frame_count


def time_per_call(fn, args, backend, timing, sync):
    """(eager us, compiled us, kernel launches per compiled call); `timing` is (seconds per
    sample, samples), `sync` what runs before the clock is read (measure.synchronizer)."""
    calls, repeats = timing
    mini.reset()
    compiled = mini.compile(fn, backend=backend)
    with quietly():
        compiled(*args)  # compile
        mini.metrics.reset()
        compiled(*args)
        kernels = mini.metrics.kernel_launches
        eager_us = per_call_us(lambda: fn(*args), calls, repeats, sync)
        compiled_us = per_call_us(lambda: compiled(*args), calls, repeats, sync)
    return eager_us, compiled_us, kernels


def measure_program(name, fn, args, backend, timing, sync):
    explanation, sequence = explain_in_order(fn, args)
    result = {"name": name, **describe(explanation, sequence)}
    result["compiles_after_first_call"] = compiles_on_first_call(fn, args)
    result["fullgraph"] = fullgraph_outcome(fn, args)
    eager_us, compiled_us, kernels = time_per_call(fn, args, backend, timing, sync)
    result.update(eager_us=eager_us, compiled_us=compiled_us,
                  kernel_launches_per_compiled_call=kernels)
    return result


def measure_chains(sizes, backend, timing, device, progress):
    chains = []
    for n in sizes:
        mini.manual_seed(0)
        x = mini.randn(n).to(device)
        points = []
        for breaks in range(CHAIN_SEGMENTS):
            fn = make_chain(breaks)
            explanation, _ = explain_in_order(fn, (x,))
            eager_us, compiled_us, kernels = time_per_call(fn, (x,), backend, timing,
                                                           synchronizer(device))
            points.append({
                "breaks": breaks,
                "graph_count": explanation.graph_count,
                "graph_break_count": explanation.graph_break_count,
                "break_reason_count": len(explanation.break_reasons),
                "kernel_launches_per_compiled_call": kernels,
                "eager_us": eager_us,
                "compiled_us": compiled_us,
            })
        progress.say(f"chains of {CHAIN_SEGMENTS} segments on [{n:,}] measured")
        chains.append({"n": n, "points": points})
    return chains


# ---- reporting ------------------------------------------------------------------------------


def print_programs(programs, backend, device):
    print(f"\nprograms on {device} (compiled with backend={backend!r}; times are the median "
          "per call)\n")
    header = (f"{'program':<16}{'graphs':>7}{'breaks':>7}{'reasons':>8}{'compiles':>9}"
              f"{'fullgraph':>11}{'eager us':>10}{'compiled us':>12}{'ratio':>7}")
    print(header)
    print("-" * len(header))
    for p in programs:
        fullgraph = "ok" if p["fullgraph"] == "ok" else "error"
        ratio = p["compiled_us"] / p["eager_us"]
        print(f"{p['name']:<16}{p['graph_count']:>7}{p['graph_break_count']:>7}"
              f"{len(p['break_reasons']):>8}{p['compiles_after_first_call']:>9}{fullgraph:>11}"
              f"{p['eager_us']:>10.1f}{p['compiled_us']:>12.1f}{ratio:>7.2f}")
    print("(breaks: explain().graph_break_count, graphs - 1 as in torch; reasons: every break"
          " explain() recorded,\n including one before the first graph)")
    for p in programs:
        print(f"\n{p['name']}: " + " | ".join(region_label(r) for r in p["regions"]))
        for i, reason in enumerate(p["break_reasons"], 1):
            print(f"  break {i}, line {reason['line']}: {reason['code']}")
            print(f"    reason: {reason['reason']}")
        print(f"  fullgraph=True: {p['fullgraph']}")


def region_label(region):
    if region["kind"] == "graph":
        return f"graph {region['index'] + 1} ({', '.join(region['ops'])})"
    if region.get("whole_frame"):
        return f"eager: the whole frame (its break at line {region['line']} cannot resume)"
    return f"eager: line {region['line']}"


def print_torch_comparison(programs, torch):
    rows = [(p, torch[p["case"]]) for p in programs if p.get("case") in torch]
    if not rows:
        return
    print("\nbeside torch 2.11 (tests/conformance/expected_torch_2.11*.jsonl, same programs)\n")
    header = f"{'case':<23}{'':<8}{'graphs':>7}{'breaks':>7}{'compiles':>9}  {'fullgraph':<22}"
    header += "first reason"
    print(header)
    print("-" * (len(header) + 40))
    for p, want in rows:
        reasons = want["explain"]["reasons"]
        print(f"{p['case']:<23}{'torch':<8}{want['explain']['graphs']:>7}"
              f"{want['explain']['breaks']:>7}{want['compiles']:>9}  {want['fullgraph']:<22}"
              f"{reasons[0] if reasons else '-'}")
        mine = p["break_reasons"]
        fullgraph = "ok" if p["fullgraph"] == "ok" else "error: " + p["fullgraph"].split(": ")[1]
        print(f"{'':<23}{'mini':<8}{p['graph_count']:>7}{p['graph_break_count']:>7}"
              f"{p['compiles_after_first_call']:>9}  {fullgraph:<22}"
              f"{short_reason(mine[0]['reason']) if mine else '-'}")


def print_chains(chains, backend, device):
    print(f"\nchains of {CHAIN_SEGMENTS} `{CHAIN_SEGMENT}` segments with a print after the "
          f"first k (backend={backend!r})\n")
    for chain in chains:
        print(f"x: float32 [{chain['n']:,}] on {device}")
        header = (f"{'breaks':>7}{'graphs':>8}{'kernels/call':>14}{'eager us':>11}"
                  f"{'compiled us':>13}{'compiled - eager':>18}")
        print(header)
        print("-" * len(header))
        for point in chain["points"]:
            print(f"{point['graph_break_count']:>7}{point['graph_count']:>8}"
                  f"{point['kernel_launches_per_compiled_call']:>14}{point['eager_us']:>11.1f}"
                  f"{point['compiled_us']:>13.1f}"
                  f"{point['compiled_us'] - point['eager_us']:>+18.1f}")
        print()


# ---- figures --------------------------------------------------------------------------------

GRAPH_COLOR = "#4C72B0"
EAGER_COLOR = "#DD8452"


def plot_regions(programs, device, out_dir):
    plt = pyplot()
    from matplotlib.patches import FancyBboxPatch, Patch

    graph_width, eager_width, gap, row_height = 3.0, 3.0, 0.3, 2.8
    widest = max(sum(graph_width if r["kind"] == "graph" else eager_width for r in p["regions"])
                 + gap * (len(p["regions"]) - 1) for p in programs)
    fig, ax = plt.subplots(figsize=(11, 1.0 + 1.75 * len(programs)))
    for row, program in enumerate(programs):
        y = -row * row_height
        ax.text(0, y + 0.75, f"{program['name']}: {program['graph_count']} graph(s), "
                f"graph_break_count {program['graph_break_count']}, "
                f"{len(program['break_reasons'])} break reason(s)",
                fontsize=9.5, fontweight="bold", va="bottom")
        x = 0.0
        for region in program["regions"]:
            is_graph = region["kind"] == "graph"
            width = graph_width if is_graph else eager_width
            ax.add_patch(FancyBboxPatch((x, y - 0.55), width, 1.1, boxstyle="round,pad=0.02",
                                        facecolor=GRAPH_COLOR if is_graph else EAGER_COLOR,
                                        edgecolor="black", linewidth=0.6))
            if is_graph:
                ops = region["ops"]
                shown = ", ".join(ops[:3]) + (", ..." if len(ops) > 3 else "")
                label = f"graph {region['index'] + 1}: {len(ops)} op(s)\n{shown}"
            else:
                code = textwrap.shorten(region["code"], 24, placeholder="...")
                label = f"eager, line {region['line']}\n{code}"
                reason = textwrap.shorten(region["reason"], 76, placeholder="...")
                ax.text(x + width / 2, y - 0.62, textwrap.fill(reason, 34), ha="center",
                        va="top", fontsize=7, color="#333333")
            ax.text(x + width / 2, y, label, ha="center", va="center", fontsize=8,
                    color="white")
            x += width + gap
    ax.set_xlim(-0.1, max(widest, 16.0) + 0.1)
    ax.set_ylim(-(len(programs) - 1) * row_height - 1.6, 1.4)
    ax.axis("off")
    ax.legend(handles=[Patch(color=GRAPH_COLOR, label="compiled region (one graph)"),
                       Patch(color=EAGER_COLOR, label="eager island: the break, run by Python "
                                                      "(reason below it)")],
              loc="upper left", fontsize=8, frameon=False, bbox_to_anchor=(0.0, 1.06), ncol=2)
    ax.set_title("Each program as it ran: compiled regions and eager islands, in order "
                 f"(drawn from mini.explain){device_title(device)}", fontsize=11, loc="left",
                 pad=26)
    fig.tight_layout()
    paths = save_figure(fig, out_dir, "graph_breaks_regions")
    plt.close(fig)
    return paths


def plot_cost(chains, backend, device, out_dir):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(chains), figsize=(max(8.0, 6.2 * len(chains)), 4.8),
                             squeeze=False)
    for ax, chain in zip(axes[0], chains):
        breaks = [p["graph_break_count"] for p in chain["points"]]
        ax.plot(breaks, [p["compiled_us"] for p in chain["points"]], marker="o",
                color=GRAPH_COLOR, label=f"compiled (backend={backend!r})")
        ax.plot(breaks, [p["eager_us"] for p in chain["points"]], marker="s", linestyle="--",
                color=EAGER_COLOR, label="eager (no compile)")
        ax.set_xlabel("graph breaks in the function (prints between segments)")
        ax.set_ylabel("time per call (microseconds)")
        ax.set_title(f"x: float32 [{chain['n']:,}]", fontsize=10)
        ax.set_xticks(breaks)
        top = max(max(p["compiled_us"], p["eager_us"]) for p in chain["points"])
        ax.set_ylim(0, top * 1.3)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", ncol=2)
    fig.suptitle(f"Time per call against graph breaks{device_title(device)}\n"
                 f"{CHAIN_SEGMENTS} segments `{CHAIN_SEGMENT}` with a print after the first k "
                 "(k breaks, k + 1 graphs)", fontsize=10.5)
    fig.tight_layout()
    paths = save_figure(fig, out_dir, "graph_breaks_cost")
    plt.close(fig)
    return paths


# ---- main -----------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(parser, "CI-sized: fewer timed calls, one chain size")
    return finish_arguments(parser.parse_args(argv), "graph_breaks")


def main(argv=None):
    args = parse_args(argv)
    progress = Progress("graph_breaks")
    timing = (0.002, 3) if args.quick else (0.03, 7)  # (seconds per sample, samples)
    sync = synchronizer(args.device)
    torch = load_torch_expectations()
    with cold_kernel_cache(args.backend):
        programs = []
        for name, fn, fn_args, case, what in program_list(args.device):
            result = measure_program(name, fn, fn_args, args.backend, timing, sync)
            result.update(case=case, what=what)
            programs.append(result)
            progress.say(f"{name} measured")
        chains = measure_chains(QUICK_CHAIN_SIZES if args.quick else FULL_CHAIN_SIZES,
                                args.backend, timing, args.device, progress)

    print_programs(programs, args.backend, args.device)
    print_torch_comparison(programs, torch)
    print_chains(chains, args.backend, args.device)

    paths = (plot_regions(programs, args.device, args.out)
             + plot_cost(chains, args.backend, args.device, args.out))
    synchronized = ", read after mini.cuda.synchronize()" if args.device == "cuda" else ""
    results = {
        "backend": args.backend,
        **device_fields(args.device),
        "quick": args.quick,
        "timing": f"microseconds per call: median over {timing[1]} samples, each a loop of "
                  f"calls taking about {timing[0]} s{synchronized}",
        "programs": programs,
        "chains": {"segments": CHAIN_SEGMENTS, "segment": CHAIN_SEGMENT, "sizes": chains},
        "torch_2_11": {p["case"]: torch[p["case"]] for p in programs if p.get("case") in torch},
    }
    paths.append(write_json(args.out, "graph_breaks", results))
    print("wrote " + ", ".join(str(path) for path in paths))


if __name__ == "__main__":
    sys.exit(main())
