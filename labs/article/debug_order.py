"""Figure -- the debug order: four questions, the mini command that answers each, what it
printed for a slow program, and the time per call after each fix.

slow_step below has all four problems the article's debug order asks about, in that order:

  1. a graph break: a divergence check, a Python `if` on h.abs().max().item();
  2. recompiles: `scale`, a Python float that changes every step, under dynamic=False, so
     every new value is a new guard (a recompile, then past cache_size_limit eager runs);
  3. many launches: a Python loop of small ops over 8 column blocks, then a cat;
  4. a wrong mode: backend="aot_eager" (the bisecting backend: the graph's ops run as eager
     kernels, nothing is fused).

Each question's command runs on the program as the fixes before it left it, and its output is
captured: (1) mini.explain(fn)(...) printed; (2) the recompiles log (mini.set_logs
("recompiles"), stderr captured), the cache-limit warning and mini.compiler.stats(); (3)
mini.metrics.kernel_launches of one call, the captured graph's ops (explain) and the fusion
log (MINI_LOGS=fusion); (4) the time per call under each backend and mode. Then the problem
is fixed (the check returned as a tensor and tested by the caller, a 0-d tensor for scale, one
op over the whole tensor instead of the loop, backend="inductor") and the program timed again,
the caller's check included.

Time per call: a short training run of `steps` calls, each with a new scale, from a fresh cache
(mini.reset()), so recompiles are paid where they happen; the mean of calls 2..steps (the
first call, which compiles in every stage, left out), the best of `repeats` runs.
"""

import collections
import contextlib
import inspect
import io
import statistics
import textwrap
import time
import warnings

import mini

from measure import cpu_threads, quietly, synchronizer

TITLE = ("The debug order: breaks, then recompiles, then launches and fusion, then the mode; "
         "each answered by one mini command")
CAPTION = ("slow_step has all four problems; each panel: the question, the command run on the "
           "program as the fixes before left it, what it printed, and the time per call before "
           "and after the fix.")

FULL = {"rows": 256, "inner": 32, "features": 512, "steps": 40, "repeats": 3}
QUICK = {"rows": 64, "inner": 32, "features": 256, "steps": 16, "repeats": 2}


# ---- the program and its fixes ----------------------------------------------------------------


def slow_step(x, w, scale):
    h = x @ w
    if h.abs().max().item() > 1e3:
        raise FloatingPointError("h diverged")
    h = h * scale
    width = h.shape[1] // 8
    blocks = [mini.relu(h[:, width * i:width * (i + 1)]) * 0.5 + 0.1 for i in range(8)]
    return mini.cat(blocks, dim=1).sum(dim=1)


def step_without_break(x, w, scale):
    h = x @ w
    peak = h.abs().max()  # the divergence check's value, tested by the caller (check_outside)
    h = h * scale
    width = h.shape[1] // 8
    blocks = [mini.relu(h[:, width * i:width * (i + 1)]) * 0.5 + 0.1 for i in range(8)]
    return mini.cat(blocks, dim=1).sum(dim=1), peak


def step_vectorized(x, w, scale):
    h = x @ w
    peak = h.abs().max()
    h = mini.relu(h * scale) * 0.5 + 0.1
    return h.sum(dim=1), peak


def check_outside(result):
    """The caller's half of fix 1: the step returns (out, peak) and the check runs here, in
    plain Python after the compiled call, where .item() breaks nothing."""
    if not isinstance(result, tuple):  # slow_step checks inside and returns out alone
        return result
    out, peak = result
    if peak.item() > 1e3:
        raise FloatingPointError("h diverged")
    return out


# Each stage: the function, how scale is passed, the backend, and the fix that made it.
STAGES = [
    {"name": "slow", "fn": slow_step, "scale": "float", "backend": "aot_eager",
     "fix": "the slow program"},
    {"name": "fix 1", "fn": step_without_break, "scale": "float", "backend": "aot_eager",
     "fix": "the check leaves the step: it returns peak = h.abs().max(), the caller "
            "tests peak.item() > 1e3"},
    {"name": "fix 2", "fn": step_without_break, "scale": "tensor", "backend": "aot_eager",
     "fix": "scale passed as a 0-d tensor, mini.tensor(scale): a graph input, not a guard"},
    {"name": "fix 3", "fn": step_vectorized, "scale": "tensor", "backend": "aot_eager",
     "fix": "the loop over 8 column blocks and the cat  ->  mini.relu(h * scale) * 0.5 + 0.1"},
    {"name": "fix 4", "fn": step_vectorized, "scale": "tensor", "backend": "inductor",
     "fix": "backend='aot_eager'  ->  backend='inductor' (fused, generated kernels)"},
]


# ---- running a stage ------------------------------------------------------------------------


class Program:
    """The inputs, and the scale schedule the training run feeds the function."""

    def __init__(self, sizes, device):
        mini.manual_seed(0)
        self.device = device
        self.x = mini.randn(sizes["rows"], sizes["inner"], device=device)
        self.w = mini.randn(sizes["inner"], sizes["features"], device=device) * 0.1
        self.steps, self.repeats = sizes["steps"], sizes["repeats"]
        self.sync = synchronizer(device)

    def scale(self, step, kind):
        value = 1.0 / (1.0 + 0.01 * step)  # a warm-down schedule: a new value every step
        return mini.tensor(value, device=self.device) if kind == "tensor" else value

    def args(self, step, kind):
        return self.x, self.w, self.scale(step, kind)


def training_run(program, fn, scale_kind, backend, mode="default"):
    """One run of program.steps calls from a fresh cache: (seconds of each call, stats)."""
    mini.reset()
    compiled = mini.compile(fn, backend=backend, mode=mode, dynamic=False)
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cache-limit warning: question 2 records it
        for step in range(program.steps):
            args = program.args(step, scale_kind)
            program.sync()
            start = time.perf_counter()
            check_outside(compiled(*args))
            program.sync()
            times.append(time.perf_counter() - start)
    return times, mini.compiler.stats()["units"], compiled


def time_per_call_us(program, fn, scale_kind, backend, mode="default"):
    """The mean of calls 2..steps of a training run, the best of program.repeats runs, in
    microseconds; with the run's recompiles, its native runs and the launches of its last call."""
    best, units, launches = float("inf"), None, None
    for _ in range(program.repeats):
        times, stats, compiled = training_run(program, fn, scale_kind, backend, mode)
        mean = statistics.mean(times[1:]) * 1e6
        if mean < best:
            best, units = mean, stats
        mini.metrics.reset()
        compiled(*program.args(program.steps - 1, scale_kind))
        launches = mini.metrics.kernel_launches
    return {"us": best, "recompiles": units["recompiles"],
            "run_natively": sum(units["run_natively"].values()), "launches": launches}


def plain_eager_us(program, fn):
    """The function uncompiled, timed the same way (calls 2..steps, best of the repeats)."""
    best = float("inf")
    for _ in range(program.repeats):
        times = []
        for step in range(program.steps):
            args = program.args(step, "tensor")
            program.sync()
            start = time.perf_counter()
            check_outside(fn(*args))
            program.sync()
            times.append(time.perf_counter() - start)
        best = min(best, statistics.mean(times[1:]) * 1e6)
    return best


# ---- the four questions -----------------------------------------------------------------------


def ask_breaks(program, stage):
    """Question 1: mini.explain(fn)(...), printed."""
    explanation = mini.explain(stage["fn"])(*program.args(0, stage["scale"]))
    reasons = [{"reason": r.reason, "location": r.location} for r in explanation.break_reasons]
    return {
        "command": f"print(mini.explain({stage['fn'].__name__})(x, w, scale))",
        "printed": str(explanation),
        "graph_count": explanation.graph_count,
        "break_reasons": reasons,
    }


def ask_recompiles(program, stage):
    """Question 2: the recompiles log of a short training run, the cache-limit warning and
    mini.compiler.stats()."""
    captured = io.StringIO()
    mini.reset()
    compiled = mini.compile(stage["fn"], backend=stage["backend"], dynamic=False)
    mini.set_logs("recompiles")
    try:
        with contextlib.redirect_stderr(captured), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for step in range(program.steps):
                compiled(*program.args(step, stage["scale"]))
    finally:
        mini.set_logs()
    units = mini.compiler.stats()["units"]
    stats_line = [line for line in mini.compiler.format_stats().splitlines()
                  if line.startswith("units:")]
    return {
        "command": "mini.set_logs(\"recompiles\")   # or MINI_LOGS=recompiles; "
                   "then mini.compiler.print_stats()",
        "printed": captured.getvalue(),
        "warnings": [str(w.message) for w in caught],
        "stats": stats_line[0] if stats_line else "",
        "recompiles": units["recompiles"],
        "run_natively": sum(units["run_natively"].values()),
    }


def ask_launches(program, stage):
    """Question 3: kernel launches of one call (mini.metrics), the graph's ops (explain) and
    what the fusion log printed while it compiled."""
    args = program.args(0, stage["scale"])
    explanation = mini.explain(stage["fn"])(*args)
    ops = collections.Counter(n.target.replace("mini.", "") for g in explanation.graphs
                              for n in g.nodes if n.op == "call_function")
    captured = io.StringIO()
    mini.reset()
    compiled = mini.compile(stage["fn"], backend=stage["backend"], dynamic=False)
    mini.set_logs("fusion")
    try:
        with contextlib.redirect_stderr(captured):
            compiled(*args)
    finally:
        mini.set_logs()
    mini.metrics.reset()
    compiled(*args)
    counts = mini.metrics.snapshot()
    return {
        "command": "mini.metrics.reset(); step(x, w, scale); mini.metrics.snapshot()   "
                   "# and MINI_LOGS=fusion",
        "kernel_launches": counts["kernel_launches"],
        "bytes_moved": counts["bytes_moved"],
        "graph_ops": sum(ops.values()),
        "ops": dict(ops.most_common()),
        "fusion_log": captured.getvalue(),
    }


def ask_mode(program, stage):
    """Question 4: the time per call of the program as it stands under each backend and mode
    (on the CPU the modes are the same compile: mini's modes act on CUDA graphs and kernels)."""
    fn, kind = stage["fn"], stage["scale"]
    options = [("uncompiled (eager)", None, None)]
    options += [(f"backend={b!r}", b, "default") for b in ("eager", "aot_eager", "inductor")]
    options += [(f"backend='inductor', mode={m!r}", "inductor", m)
                for m in ("reduce-overhead", "max-autotune")]
    results = []
    for label, backend, mode in options:
        if backend is None:
            row = {"us": plain_eager_us(program, fn), "launches": None}
        else:
            row = time_per_call_us(program, fn, kind, backend, mode)
        results.append({"option": label, "backend": backend, "mode": mode,
                        "current": backend == stage["backend"] and mode == "default", **row})
    return {"command": f"mini.compile({fn.__name__}, backend=..., mode=...): the time per "
                       "call under each",
            "options": results}


# ---- measure --------------------------------------------------------------------------------


def measure(args):
    sizes = QUICK if args.quick else FULL
    program = Program(sizes, args.device)
    stages = []
    with quietly(), cpu_threads(args.device, 1) as threads:
        for stage in STAGES:
            timed = time_per_call_us(program, stage["fn"], stage["scale"], stage["backend"])
            explanation = mini.explain(stage["fn"])(*program.args(0, stage["scale"]))
            stages.append({"name": stage["name"], "fix": stage["fix"],
                           "function": stage["fn"].__name__, "scale": stage["scale"],
                           "backend": stage["backend"], "graph_count": explanation.graph_count,
                           **timed})
        questions = [
            {"question": "1. Does it break? (graph breaks)", **ask_breaks(program, STAGES[0])},
            {"question": "2. Does it recompile?", **ask_recompiles(program, STAGES[1])},
            {"question": "3. Weak fusion or launch gaps? (kernels per call)",
             **ask_launches(program, STAGES[2])},
            {"question": "4. The wrong mode? (backend and mode)", **ask_mode(program, STAGES[3])},
        ]
    mini.reset()
    return {
        "program": "slow_step",
        "source": inspect.getsource(slow_step).rstrip().splitlines(),
        "device": args.device,
        "shapes": {"x": list(program.x.shape), "w": list(program.w.shape), "scale": []},
        "steps": program.steps,
        "cpu_threads": threads,
        "repeats": program.repeats,
        "stages": stages,
        "questions": questions,
        "how": (f"a run of {program.steps} calls, a new scale each, from a fresh "
                "cache (mini.reset()); the mean of calls 2.. (recompiles included, the first "
                f"compile left out), the best of {program.repeats} runs"),
    }


# ---- draw -----------------------------------------------------------------------------------

BEFORE_COLOR, AFTER_COLOR = "#C44E52", "#55A868"
MONO_WIDTH = 100


def clip(line, width=MONO_WIDTH):
    return line if len(line) <= width else line[:width - 3] + "..."


def excerpt_breaks(q):
    lines = q["printed"].splitlines()
    keep = [line for line in lines if line.startswith(("Graph Count", "Graph Break Count"))]
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(("Reason:", "User Stack:")):
            keep += textwrap.wrap(stripped, MONO_WIDTH - 4, initial_indent="  ",
                                  subsequent_indent="    ")
    return keep[:7]


def excerpt_recompiles(q):
    lines = [line for line in q["printed"].splitlines() if line.strip()]
    keep = lines[:3]
    failures = [line.strip() for line in lines if line.strip().startswith("- ")]
    if len(failures) > 1:
        keep.append(f"  ... {len(failures) - 1} more recompiles: "
                    + ", ".join(f.split(": ", 1)[-1] for f in failures[1:3]) + ", ...")
    if q["warnings"]:
        keep.append("UserWarning: " + q["warnings"][0].splitlines()[0])
    keep.append(q["stats"])
    return keep


def excerpt_launches(q):
    ops = ", ".join(f"{name} x{count}" for name, count in list(q["ops"].items())[:8])
    fusion = q["fusion_log"].strip().splitlines()
    return [f"{{'kernel_launches': {q['kernel_launches']}, "
            f"'bytes_moved': {q['bytes_moved']}}}",
            f"the graph (explain): {q['graph_ops']} ops: {ops}, ...",
            f"MINI_LOGS=fusion: {len(fusion)} lines"
            + (": " + fusion[0] if fusion else " (nothing: this backend fuses nothing)")]


def excerpt_mode(q):
    lines = []
    for row in q["options"]:
        launches = "" if row["launches"] is None else f"{row['launches']:3d} launches"
        now = "   <- now" if row["current"] else ""
        lines.append(f"{row['option']:<40} {row['us']:9.1f} us/call  {launches}{now}")
    return lines


EXCERPTS = [excerpt_breaks, excerpt_recompiles, excerpt_launches, excerpt_mode]


def target(stage, k):
    """What fix k changes, as the before/after bars label it."""
    if k == 0:
        n = stage["graph_count"]
        return f"{n} graph" + ("s" if n != 1 else "")
    if k == 1:
        return f"{stage['recompiles']} recompiles"
    if k == 2:
        return f"{stage['launches']} launches/call"
    return f"backend={stage['backend']!r}"


def draw_source(ax, data):
    ax.axis("off")
    ax.text(0.0, 1.0, f"the slow program: {data['program']}, compiled with "
            f"backend='aot_eager', dynamic=False", fontsize=10.5, fontweight="bold", va="top",
            transform=ax.transAxes)
    ax.text(0.0, 0.84, "\n".join(data["source"]), fontsize=8.5, family="monospace", va="top",
            transform=ax.transAxes, bbox={"boxstyle": "round,pad=0.4", "facecolor": "#FFF8E7",
                                          "edgecolor": "#D9C38A"})


def draw_summary(ax, data):
    stages = data["stages"]
    names = [s["name"] for s in stages]
    values = [s["us"] for s in stages]
    colors = [BEFORE_COLOR] + ["#7FA8C9"] * (len(stages) - 2) + [AFTER_COLOR]
    bars = ax.bar(names, values, color=colors, width=0.6)
    ax.bar_label(bars, labels=[f"{v:.0f}" for v in values], fontsize=8)
    ax.set_ylabel("time per call (us)", fontsize=8.5)
    ax.set_ylim(0, max(values) * 1.25)
    ax.tick_params(labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"after each fix, in order: {values[0]:.0f} -> {values[-1]:.0f} us per call "
                 f"({values[0] / values[-1]:.1f}x)", fontsize=9.5)


def draw_question(fig, cell_text, cell_bar, question, before, after, k):
    ax = fig.add_subplot(cell_text)
    ax.axis("off")
    ax.text(0.0, 1.0, question["question"], fontsize=12, fontweight="bold", va="top",
            transform=ax.transAxes)
    ax.text(0.0, 0.83, "$ " + clip(question["command"], 112), fontsize=8.8,
            family="monospace", va="top", color="#1F4E79", transform=ax.transAxes)
    printed = "\n".join(clip(line) for line in EXCERPTS[k](question))
    ax.text(0.0, 0.67, printed, fontsize=8.3, family="monospace", va="top",
            transform=ax.transAxes, bbox={"boxstyle": "round,pad=0.4", "facecolor": "#F4F4F4",
                                          "edgecolor": "#BBBBBB"})
    ax.text(0.0, 0.0, f"{after['name']}: {after['fix']}", fontsize=9.5, va="bottom",
            color="#2E6B30", fontweight="bold", transform=ax.transAxes)

    ax = fig.add_subplot(cell_bar)
    labels = [f"{s['name']}\n{target(s, k)}" for s in (before, after)]
    values = [before["us"], after["us"]]
    bars = ax.bar(labels, values, color=[BEFORE_COLOR, AFTER_COLOR], width=0.6)
    ax.bar_label(bars, labels=[f"{v:.0f} us" for v in values], fontsize=8.5)
    ax.set_ylim(0, max(values) * 1.3)
    ax.set_ylabel("time per call (us)", fontsize=8.5)
    ax.tick_params(labelsize=8)
    ratio = before["us"] / after["us"]
    change = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
    ax.set_title(f"time per call after {after['name']}: {change}", fontsize=9.5)
    ax.grid(axis="y", alpha=0.3)


def draw(data, plt):
    stages, questions = data["stages"], data["questions"]
    fig = plt.figure(figsize=(14, 17))
    grid = fig.add_gridspec(5, 2, width_ratios=[3.2, 1], height_ratios=[1.15, 1, 1, 1, 1],
                            hspace=0.5, wspace=0.1, top=0.925, bottom=0.07, left=0.02,
                            right=0.98)
    draw_source(fig.add_subplot(grid[0, 0]), data)
    draw_summary(fig.add_subplot(grid[0, 1]), data)
    for k, question in enumerate(questions):
        draw_question(fig, grid[k + 1, 0], grid[k + 1, 1], question, stages[k],
                      stages[k + 1], k)
    shapes = ", ".join(f"{k} {v}" for k, v in data["shapes"].items())
    threads = f", {data['cpu_threads']} CPU thread" if data.get("cpu_threads") else ""
    fig.text(0.02, 0.945, f"inputs: {shapes} on {data['device']}{threads}. Time per call: "
             f"{data['how']}.", fontsize=8.5, wrap=True)
    return fig
