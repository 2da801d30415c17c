"""Figure -- what the frame hook did in a real run: frames seen, captured, skipped (why), and the
units it ran from the cache, compiled, or left to CPython (why).

The program is a small training loop compiled whole, `mini.compile(train_step)`: each step runs
the model, prints, calls loss.backward(), sets the learning rate from a helper that takes no
tensor, and steps the optimizer. The print, the backward and the store into the optimizer's
param_groups each break train_step into one more unit (the optimizer's own methods are mini's
code: the hook leaves those frames to CPython). The model holds what real models hold:
  * a module method (Net.hidden) that capture inlines into its caller;
  * a layer that reuses its parent's forward through zero-argument super() (ScaledLinear),
    which capture inlines into its caller (a frame that calls super() itself is left to CPython);
  * a helper (shrink) with a branch on a tensor inside a loop: capture gives that unit up, and
    from then on it runs natively;
and the batch size changes twice, so the first new size recompiles (automatic dynamic shapes
make the sizes symbolic) and the later ones hit.

Everything drawn is mini.compiler.stats(), reset before the first step and read after each one
(each step's counts are the difference), and mini.compiler.cache_entries() of the functions
the program defines (their resume units and the entries each holds). A frame is one Python
call that starts while the compiled function runs; a unit is the part of a captured frame
between two graph breaks, the thing the cache holds entries for.
"""

import textwrap
import warnings

import mini
import mini.nn as nn
import mini.nn.functional as F

from measure import quietly

TITLE = ("The frame hook sees every Python frame a compiled call starts: it skips most, captures "
         "the rest, and runs their units from the cache")
CAPTION = ("A training loop under mini.compile(train_step): counts from mini.compiler.stats() over "
           "the whole run (arrow widths and labels are the counts); units from "
           "mini.compiler.cache_entries().")

FULL = {"rows": [16, 16, 16, 32, 32, 32, 16, 16, 24, 24, 24, 48, 48, 16, 16, 16],
        "features": 32, "hidden": 64, "backend": "inductor"}
QUICK = {"rows": [16, 16, 16, 32, 32, 16, 24, 24], "features": 16, "hidden": 32,
         "backend": "eager"}
LR = 0.05


# ---- the program ----------------------------------------------------------------------------


def warmup(step, steps=4):
    """The learning rate's warm-up factor: no tensor among its arguments."""
    return min(1.0, (step + 1) / steps)


def shrink(h):
    """Halves h while it is large: a branch on a tensor's value inside a loop."""
    for _ in range(2):
        if h.abs().max() > 4.0:
            h = h * 0.5
    return h


class ScaledLinear(nn.Linear):
    """Linear's forward through zero-argument super(), then scaled."""

    def forward(self, x):
        return super().forward(x) * 0.5


class Net(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.fc1 = ScaledLinear(features, hidden)
        self.fc2 = nn.Linear(hidden, 1)

    def hidden(self, x):
        return F.relu(self.fc1(x))

    def forward(self, x):
        return self.fc2(shrink(self.hidden(x)))


def train_step(model, opt, x, y, step):
    loss = F.mse_loss(model(x), y)
    print("step", step)  # a graph break: printing must happen in Python
    loss.backward()
    for group in opt.param_groups:
        group["lr"] = LR * warmup(step)
    opt.step()
    opt.zero_grad()
    return loss


# The functions whose guard caches the figure lists: (name, function). A function the hook never
# captured (it skipped every frame of it) has no cache.
FUNCTIONS = [
    ("train_step", train_step),
    ("Module.__call__", nn.Module.__call__),
    ("Net.forward", Net.forward),
    ("Net.hidden", Net.hidden),
    ("ScaledLinear.forward", ScaledLinear.forward),
    ("Linear.forward", nn.Linear.forward),
    ("shrink", shrink),
    ("warmup", warmup),
]


# ---- measure --------------------------------------------------------------------------------


def units_of(stats):
    u = stats["units"]
    return u["cache_hits"] + u["compiles"] + sum(u["run_natively"].values())


def difference(after, before):
    """One step's counts: stats() after it minus stats() before it."""
    def sub(a, b):
        return {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b) if a.get(k, 0) - b.get(k, 0)}
    fa, fb, ua, ub = after["frames"], before["frames"], after["units"], before["units"]
    return {
        "frames_seen": fa["seen"] - fb["seen"],
        "captured": fa["captured"] - fb["captured"],
        "skipped": sub(fa["skipped"], fb["skipped"]),
        "cache_hits": ua["cache_hits"] - ub["cache_hits"],
        "compiles": ua["compiles"] - ub["compiles"],
        "recompiles": ua["recompiles"] - ub["recompiles"],
        "run_natively": sub(ua["run_natively"], ub["run_natively"]),
        "units_run": units_of(after) - units_of(before),
    }


def captured_functions():
    """Each listed function's resume units after the run: its offset and how many entries."""
    table = []
    for name, fn in FUNCTIONS:
        units = mini.compiler.cache_entries(fn)
        table.append({"function": name,
                      "units": [{"offset": u["offset"], "entries": len(u["entries"]),
                                 "compile_ids": [e["compile_id"] for e in u["entries"]]}
                                for u in units]})
    return table


def measure(args):
    sizes = QUICK if args.quick else FULL
    device = args.device
    mini.reset()
    mini.manual_seed(0)
    model = Net(sizes["features"], sizes["hidden"]).to(device)
    opt = mini.optim.SGD(model.parameters(), lr=LR)
    compiled = mini.compile(train_step, backend=sizes["backend"])
    batches = [(mini.randn(n, sizes["features"], device=device), mini.randn(n, 1, device=device))
               for n in sizes["rows"]]

    mini.compiler.reset_stats()
    steps, losses, before = [], [], mini.compiler.stats()
    with quietly(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a cache-limit warning would be counted, not printed
        for step, (x, y) in enumerate(batches):
            loss = compiled(model, opt, x, y, step)
            losses.append(loss.item())
            after = mini.compiler.stats()
            steps.append(dict(step=step, rows=x.shape[0], **difference(after, before)))
            before = after
    stats = mini.compiler.stats()
    functions = captured_functions()
    mini.reset()

    frames, units = stats["frames"], stats["units"]
    skipped = sum(frames["skipped"].values())
    native = sum(units["run_natively"].values())
    return {
        "program": "train_step(model, opt, x, y, step)",
        "backend": sizes["backend"],
        "device": device,
        "calls": len(batches),
        "rows_per_step": sizes["rows"],
        "losses": losses,
        "frames": {"seen": frames["seen"], "captured": frames["captured"],
                   "skipped": skipped, "skipped_by_reason": frames["skipped"]},
        "units": {"run": units["cache_hits"] + units["compiles"] + native,
                  "cache_hits": units["cache_hits"], "compiles": units["compiles"],
                  "recompiles": units["recompiles"], "run_natively": native,
                  "run_natively_by_reason": units["run_natively"]},
        "steps": steps,
        "functions": functions,
        "checks": {
            "seen = captured + skipped": frames["seen"] == frames["captured"] + skipped,
            # step 0 traces warmup(step) with step a constant; from step 1 on, step is a graph
            # input and every step runs the same units, whether they hit or compile
            "steps after the first run the same units":
                len({s["units_run"] for s in steps[1:]}) == 1,
        },
        "how": ("mini.compiler.reset_stats() before the first step; stats() after each step (a "
                "step's counts are the difference); cache_entries() of FUNCTIONS after the last "
                "step. A unit's first run counts as its compile (also when capture gives it up: "
                "later runs count as run natively)."),
    }


# ---- draw -----------------------------------------------------------------------------------

COLORS = {"interpreter": "#8C8C8C", "hook": "#4C72B0", "skipped": "#C44E52",
          "captured": "#4C72B0", "hit": "#55A868", "compile": "#DD8452", "native": "#8172B2"}

# The path's boxes: key -> (x, y, title, where in mini). Positions are the path's structure;
# the counts written in them and the arrows' widths come from the data.
NODES = {
    "interpreter": (0.075, 0.55, "CPython interpreter", "runs train_step"),
    "hook": (0.235, 0.55, "frame hook", "mini/capture/frame_hook.cpp"),
    "captured": (0.405, 0.78, "captured", "mini/capture/convert_frame.cpp"),
    "skipped": (0.405, 0.22, "skipped", "convert_frame.cpp: skip_reason()"),
    "hit": (0.61, 0.9, "cache hit", "mini/guards/cache.cpp"),
    "compile": (0.61, 0.68, "compile", "mini/capture/ -> the backend"),
    "native": (0.61, 0.46, "run natively", "CPython runs the unit"),
}
NODE_W, NODE_H = 0.135, 0.16


def wrap(text, width, lines):
    wrapped = textwrap.wrap(text, width)
    if len(wrapped) > lines:
        wrapped = wrapped[:lines]
        wrapped[-1] = wrapped[-1][: width - 3] + "..."
    return "\n".join(wrapped)


def node(ax, key, body):
    from matplotlib.patches import FancyBboxPatch
    x, y, title, where = NODES[key]
    ax.add_patch(FancyBboxPatch((x - NODE_W / 2, y - NODE_H / 2), NODE_W, NODE_H,
                                boxstyle="round,pad=0.004,rounding_size=0.01",
                                facecolor=COLORS[key], alpha=0.18, edgecolor=COLORS[key], lw=1.4,
                                transform=ax.transAxes))
    ax.text(x, y + 0.045, title, ha="center", va="center", fontsize=10, fontweight="bold",
            transform=ax.transAxes)
    ax.text(x, y + 0.0, where, ha="center", va="center", fontsize=6.5, family="monospace",
            transform=ax.transAxes)
    ax.text(x, y - 0.045, body, ha="center", va="center", fontsize=8.5, transform=ax.transAxes)


def arrow(ax, start, end, count, largest, label, color):
    """An arrow from box `start` to box `end` (or to a point), as wide as its count."""
    (x0, y0), (x1, y1) = start, end
    width = 0.6 + 7.0 * count / max(largest, 1)
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), xycoords="axes fraction",
                arrowprops={"arrowstyle": "-|>", "color": color, "lw": width, "alpha": 0.65,
                            "mutation_scale": 12 + width})
    ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.025, label, ha="center", va="bottom", fontsize=8,
            transform=ax.transAxes, color="#222222",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.85})


def right_of(key):
    x, y = NODES[key][:2]
    return x + NODE_W / 2, y


def left_of(key):
    x, y = NODES[key][:2]
    return x - NODE_W / 2, y


def reason_list(ax, x, y_top, reasons, color, verb, width=52, indent=0.06):
    """The reasons for a skip or a native run, the largest count first, each with its count
    (beside it, or above it when indent is 0)."""
    rows = sorted(reasons.items(), key=lambda kv: -kv[1])
    y = y_top
    for why, count in rows:
        text = wrap(why, width, 5)
        ax.text(x, y, f"{count} {verb}", ha="left", va="top", fontsize=8.5, fontweight="bold",
                color=color, transform=ax.transAxes)
        if indent == 0:
            y -= 0.045
        ax.text(x + indent, y, text, ha="left", va="top", fontsize=7.5, transform=ax.transAxes)
        y -= 0.04 * (text.count("\n") + 1) + 0.03
    return y


def units_per_call(steps):
    """"step 0: 15 units, steps 1-7: 16 units each": the steps grouped by the units they ran."""
    groups = []
    for s in steps:
        if groups and groups[-1][2] == s["units_run"]:
            groups[-1][1] = s["step"]
        else:
            groups.append([s["step"], s["step"], s["units_run"]])
    return [f"step {a}: {n} units" if a == b else f"steps {a}-{b}: {n} units each"
            for a, b, n in groups]


def draw_path(ax, data):
    f, u = data["frames"], data["units"]
    largest = f["seen"]
    node(ax, "interpreter", f"{data['calls']} calls of train_step")
    node(ax, "hook", f"{f['seen']} frames seen")
    node(ax, "captured", f"{f['captured']} frames: {u['run']} units run")
    node(ax, "skipped", f"{f['skipped']} frames run by CPython")
    node(ax, "hit", f"{u['cache_hits']} unit runs")
    node(ax, "compile", f"{u['compiles']} units ({u['recompiles']} recompiles)")
    node(ax, "native", f"{u['run_natively']} unit runs")
    arrow(ax, right_of("interpreter"), left_of("hook"), f["seen"], largest,
          f"{f['seen']} frames\nstarted", COLORS["interpreter"])
    arrow(ax, right_of("hook"), left_of("captured"), f["captured"], largest,
          f"{f['captured']} frames", COLORS["captured"])
    arrow(ax, right_of("hook"), left_of("skipped"), f["skipped"], largest,
          f"{f['skipped']} frames", COLORS["skipped"])
    for key, count in (("hit", u["cache_hits"]), ("compile", u["compiles"]),
                       ("native", u["run_natively"])):
        arrow(ax, right_of("captured"), left_of(key), count, largest, f"{count} units",
              COLORS[key])
    x_reasons = NODES["native"][0] + NODE_W / 2 + 0.015
    ax.text(x_reasons, NODES["native"][1] + NODE_H / 2, "why run natively:", ha="left",
            va="bottom", fontsize=8.5, transform=ax.transAxes, style="italic")
    reason_list(ax, x_reasons, NODES["native"][1] + NODE_H / 2 - 0.01,
                u["run_natively_by_reason"], COLORS["native"], "unit runs", width=64, indent=0)
    x_skips = NODES["skipped"][0] + NODE_W / 2 + 0.04
    ax.text(x_skips, NODES["skipped"][1] + 0.1, "why skipped:", ha="left", va="bottom",
            fontsize=8.5, transform=ax.transAxes, style="italic")
    reason_list(ax, x_skips, NODES["skipped"][1] + 0.09, f["skipped_by_reason"],
                COLORS["skipped"], "frames")
    checks = (f"check: seen {f['seen']} = captured {f['captured']} + skipped {f['skipped']};  "
              f"units run {u['run']} = hits {u['cache_hits']} + compiles {u['compiles']} + "
              f"native {u['run_natively']}  ({data['calls']} calls: "
              + ", ".join(units_per_call(data["steps"])) + ")")
    ax.text(0.0, -0.03, checks, ha="left", va="top", fontsize=8.5, transform=ax.transAxes)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")


def draw_steps(ax, data):
    """Each step's unit runs, stacked by outcome: the compiles sit where the inputs changed."""
    steps = data["steps"]
    xs = [s["step"] for s in steps]
    bottom = [0] * len(steps)
    outcomes = (("hit", "cache_hits", "cache hit"), ("compile", "compiles", "compile"),
                ("native", None, "run natively"))
    for key, field, label in outcomes:
        values = [sum(s["run_natively"].values()) if field is None else s[field] for s in steps]
        ax.bar(xs, values, bottom=bottom, color=COLORS[key], label=label, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values)]
    for s in steps:
        if s["recompiles"]:
            ax.text(s["step"], bottom[s["step"]] + 0.2, f"{s['recompiles']}", ha="center",
                    va="bottom", fontsize=8, color=COLORS["compile"], fontweight="bold")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{s['step']}\n{s['rows']}" for s in steps], fontsize=8)
    ax.set_xlabel("step (top) and batch rows (bottom)")
    ax.set_ylabel("unit runs in the step")
    ax.set_ylim(0, max(bottom) * 1.35)
    from matplotlib.ticker import MaxNLocator
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=8, loc="upper right", ncol=3)
    ax.set_title("unit runs per step: a new batch size recompiles, then hits\n"
                 "(the number above a bar: that step's recompiles)", fontsize=9.5, loc="left")


def draw_functions(ax, data):
    """The program's functions: the resume units each holds and their entries."""
    ax.axis("off")
    ax.set_title("the guard caches after the run (mini.compiler.cache_entries)", fontsize=9.5,
                 loc="left")
    lines = []
    for row in data["functions"]:
        if not row["units"]:
            lines.append((row["function"], "no cache: every frame of it was skipped"))
            continue
        parts = []
        for unit in row["units"]:
            held = (f"{unit['entries']} entr{'ies' if unit['entries'] > 1 else 'y'}"
                    if unit["entries"]
                    else "no entry: runs natively")
            parts.append(f"@{unit['offset']}: {held}")
        count = len(row["units"])
        lines.append((row["function"], f"{count} unit{'s' if count > 1 else ''}: "
                      + "; ".join(parts)))
    y = 0.95
    for name, text in lines:
        text = wrap(text, 72, 2)
        ax.text(0.0, y, name, fontsize=8.5, fontweight="bold", va="top", family="monospace")
        ax.text(0.3, y, text, fontsize=8, va="top")
        y -= 0.075 + 0.045 * text.count("\n")
    ax.text(0.0, y - 0.02, "@N: a unit starts at bytecode offset N (0: the function's start; "
            "after a graph break: the instruction after it)", fontsize=7.5, va="top",
            color="#444444")


def draw(data, plt):
    fig = plt.figure(figsize=(15, 10.5))
    ax_path = fig.add_axes([0.01, 0.46, 0.98, 0.41])
    ax_steps = fig.add_axes([0.06, 0.1, 0.38, 0.25])
    ax_funcs = fig.add_axes([0.5, 0.08, 0.49, 0.3])
    draw_path(ax_path, data)
    ax_path.set_title(f"{data['program']}, {data['calls']} steps, backend={data['backend']!r}, "
                      f"device={data['device']!r}", fontsize=9.5, loc="left")
    draw_steps(ax_steps, data)
    draw_functions(ax_funcs, data)
    return fig
