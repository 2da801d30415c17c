"""Lab -- scalar guards: a learning rate that changes every step, as a float or a tensor.

A compiled graph assumes the Python numbers it read: a float argument is a constant of the
graph, guarded by its value (notes/dynamic_shapes.md). A learning-rate schedule changes that
float every step, so every step misses the cache. Automatic dynamic rescues it after one
recompile (the float becomes a graph input); with automatic dynamic off, every step
compiles until the cache limit, and then the function runs eagerly. A 0-d tensor learning
rate is an input from the start: it never recompiles.

The lab trains a small MLP regression with mini.optim.SGD and a warm-up + cosine schedule
that edits `param_groups[0]["lr"]` every step. Forward and loss are one compiled function;
the update SGD.step makes, p - lr * g for every parameter, is another, called with the lr
from the optimizer's param group (mini's capture does not trace mini.optim's own frames, and
an in-place update inside a compiled function is a graph break, so the update returns new
values that are copied into the parameters). Four variants:

    float lr            the schedule writes a Python float            automatic dynamic on
    float lr, auto off  the same, mini.config.automatic_dynamic_shapes = False
    tensor lr           the schedule writes into a 0-d tensor         automatic dynamic on
    tensor lr, auto off the same, automatic dynamic off

    PYTHONPATH=build/python .venv/bin/python labs/scalar_guards.py [--quick] [--out DIR]
        [--backend inductor|eager] [--device cpu|cuda]

--device cuda trains the same model on the same data (made on the CPU from the same seed,
then moved) on the GPU, the tensor learning rate a 0-d GPU tensor; each step's time is read
after a synchronize. Without a usable GPU it says why in one line and exits 0.

Writes scalar_guards.png/.svg (cumulative compiles and step time per step) and
scalar_guards.json into --out (default: figures/).
"""

import argparse
import math
import sys
import time
import warnings

import numpy as np

import mini

import measure  # noqa: E402
from measure import (CountingBackend, Progress, add_common_arguments, cold_kernel_cache,
                     device_fields, device_title, finish_arguments, load_torch_expectations,
                     pyplot, save_figure, synchronizer, write_json)

FEATURES, HIDDEN, BATCH = 16, 32, 64
BASE_LR = 0.05


# ---- the training loop ----------------------------------------------------------------------


def learning_rate(step, steps, warmup):
    """Linear warm-up to BASE_LR over `warmup` steps, then a cosine decay: a new value at
    every step, as most schedules give."""
    if step < warmup:
        return BASE_LR * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return BASE_LR * 0.5 * (1 + math.cos(math.pi * progress))


def sgd_update(params, grads, lr):
    """The update SGD.step makes (no momentum): p - lr * g, for every parameter."""
    updated = []
    for param, grad in zip(params, grads):
        updated.append(param - lr * grad)
    return updated


def conformance_program(x, lr):
    """The program scalar_float_lr / scalar_tensor_lr were measured on in torch 2.11."""
    return x - lr * x


def make_problem(device):
    """The same model, data and optimizer for every variant (seeded), on `device`. Made on
    the CPU and moved, so that both devices train on the same numbers (the CPU's and the
    GPU's random generators differ)."""
    mini.manual_seed(0)
    model = mini.nn.Sequential(mini.nn.Linear(FEATURES, HIDDEN), mini.nn.ReLU(),
                               mini.nn.Linear(HIDDEN, 1))
    x = mini.randn(BATCH, FEATURES)
    y = (x @ mini.randn(FEATURES, 1)) * 0.5 + mini.randn(BATCH, 1) * 0.1
    if device != "cpu":
        model, x, y = model.to(device), x.to(device), y.to(device)
    optimizer = mini.optim.SGD(model.parameters(), lr=BASE_LR)
    return model, x, y, optimizer


class Variant:
    def __init__(self, name, lr_kind, automatic_dynamic, case=None):
        self.name, self.lr_kind = name, lr_kind
        self.automatic_dynamic, self.case = automatic_dynamic, case


VARIANTS = [
    Variant("float lr", "float", True, case="scalar_float_lr"),
    Variant("float lr, auto off", "float", False),
    Variant("tensor lr", "tensor", True, case="scalar_tensor_lr"),
    Variant("tensor lr, auto off", "tensor", False),
]


def train(variant, steps, warmup, backend_name, device, compiled=True):
    """Runs the loop on `device`; one record per step. compiled=False runs everything eagerly
    (the reference the compiled variants' losses are checked against)."""
    mini.reset()
    sync = synchronizer(device)
    model, x, y, optimizer = make_problem(device)
    group = optimizer.param_groups[0]
    if variant.lr_kind == "tensor":
        group["lr"] = mini.tensor(float(group["lr"]), device=device)

    def loss_of(inputs, targets):
        return mini.mse_loss(model(inputs), targets)

    update_backend = CountingBackend(backend_name)
    forward = mini.compile(loss_of, backend=backend_name) if compiled else loss_of
    update = mini.compile(sgd_update, backend=update_backend) if compiled else sgd_update
    records = []
    with mini.config.patch(automatic_dynamic_shapes=variant.automatic_dynamic), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(steps):
            lr = learning_rate(step, steps, warmup)
            warnings_before = len(caught)
            sync()
            start = time.perf_counter()
            if variant.lr_kind == "tensor":
                group["lr"].copy_(mini.tensor(lr, device=device))  # the schedule writes into it
            else:
                group["lr"] = lr
            loss = forward(x, y)
            loss.backward()
            params = group["params"]
            with mini.no_grad():
                new_values = update(params, [param.grad for param in params], group["lr"])
                for param, value in zip(params, new_values):
                    param.copy_(value)
            optimizer.zero_grad()
            sync()
            seconds = time.perf_counter() - start
            records.append({
                "step": step,
                "lr": lr,
                "loss": loss.item(),
                "update_compiles": update_backend.frame_count,
                "step_seconds": seconds,
                "cache_limit_warning": len(caught) > warnings_before,
            })
    return records


def warm_up(backend_name, device):
    """One compile of the update before measuring, so the first variant does not also pay
    for what happens once per process."""
    with cold_kernel_cache(backend_name):
        train(VARIANTS[2], 2, 1, backend_name, device)
    mini.reset()


def run_conformance_program(lr_kind, device):
    """Compiles after each of four calls, lr 0.01 .. 0.04, as the conformance case runs."""
    mini.reset()
    counter = CountingBackend("eager")
    compiled = mini.compile(conformance_program, backend=counter)
    mini.manual_seed(0)
    x = mini.randn(16, device=device)
    after = []
    for lr in (0.01, 0.02, 0.03, 0.04):
        compiled(x, mini.tensor(lr, device=device) if lr_kind == "tensor" else lr)
        after.append(counter.frame_count)
    return after


def summarize(records, reference):
    steady = [r["step_seconds"] for r in records[2:]] or [records[-1]["step_seconds"]]
    loss_difference = max(abs(r["loss"] - e["loss"]) for r, e in zip(records, reference))
    return {
        "update_compiles": records[-1]["update_compiles"],
        "compiles_after_each_step": [r["update_compiles"] for r in records],
        "cache_limit_warnings": sum(r["cache_limit_warning"] for r in records),
        "first_step_seconds": records[0]["step_seconds"],
        "total_seconds": sum(r["step_seconds"] for r in records),
        "median_step_seconds_from_step_2": float(np.median(steady)),
        "final_loss": records[-1]["loss"],
        "max_loss_difference_from_eager": loss_difference,
        "matches_eager": loss_difference <= 1e-3 * max(1.0, abs(reference[0]["loss"])),
    }


# ---- reporting ------------------------------------------------------------------------------


def runs(values):
    """[1, 1, 1, 2, 2] as '1 x3, 2 x2': each value and how many steps in a row had it."""
    groups = []
    for value in values:
        if groups and groups[-1][0] == value:
            groups[-1][1] += 1
        else:
            groups.append([value, 1])
    text = ", ".join(f"{value} x{count}" for value, count in groups[:9])
    return text + (", ..." if len(groups) > 9 else "")


def print_table(results, steps, backend, device, cache_limit):
    print(f"\n{steps} SGD steps on {device}, lr from a warm-up + cosine schedule, a new value "
          f"every step (backend={backend!r}, cache_size_limit {cache_limit})")
    print("compiles of the update p - lr * g after each step ('v xN' = N steps in a row with "
          "v compiles so far);\nstep times in milliseconds: forward, backward and update\n")
    header = (f"{'variant':<21}{'compiles':>9}  {'after each step':<50}{'limit hit':>10}"
              f"{'step 1 ms':>11}{'median ms':>11}{'total ms':>10}{'final loss':>12}")
    print(header)
    print("-" * len(header))
    for name, result in results.items():
        s = result["summary"]
        wrong = "" if s["matches_eager"] else "  LOSS DIFFERS FROM EAGER"
        print(f"{name:<21}{s['update_compiles']:>9}  {runs(s['compiles_after_each_step']):<50}"
              f"{'yes' if s['cache_limit_warnings'] else 'no':>10}"
              f"{s['first_step_seconds'] * 1e3:>11.1f}"
              f"{s['median_step_seconds_from_step_2'] * 1e3:>11.2f}"
              f"{s['total_seconds'] * 1e3:>10.0f}{s['final_loss']:>12.5f}{wrong}")
    print("(median ms: steps 3 onwards; final loss: every variant trains the same model, and "
          "each step's loss is\n checked against an eager run of the same loop)")


def print_torch_comparison(conformance, torch):
    measure.print_torch_comparison(
        conformance, torch, "each of four calls",
        [("variant", 12), (19, "torch, x - lr*x", 17), ("mini, x - lr*x", "mini", 17),
         ("mini, the update (first 4 steps)", "mini_update", 30)])


# ---- figures --------------------------------------------------------------------------------

STYLES = {
    "float lr": dict(color="#4C72B0", marker="o", linestyle="-"),
    "float lr, auto off": dict(color="#C44E52", marker="s", linestyle="-"),
    "tensor lr": dict(color="#55A868", marker="^", linestyle="-"),
    "tensor lr, auto off": dict(color="#8172B2", marker="v", linestyle="--"),
}


def plot(results, backend, device, cache_limit, out_dir):
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    fig, (compiles_ax, time_ax) = plt.subplots(1, 2, figsize=(13, 5.0))
    names = list(results)
    offsets = {name: (i - (len(names) - 1) / 2) * 0.07 for i, name in enumerate(names)}
    for name, result in results.items():
        records = result["steps"]
        steps = [r["step"] + 1 for r in records]
        compiles = np.array([r["update_compiles"] for r in records]) + offsets[name]
        compiles_ax.plot(steps, compiles, label=name, drawstyle="steps-post", markersize=3.5,
                         **STYLES[name])
        time_ax.plot(steps, [r["step_seconds"] * 1e3 for r in records], label=name,
                     markersize=3.5, linewidth=1.0, **STYLES[name])
    compiles_ax.axhline(cache_limit, color="black", linewidth=0.8, linestyle="--")
    compiles_ax.text(0.02, cache_limit + 0.15, f"cache_size_limit ({cache_limit}): past it, "
                     "the update runs eagerly", fontsize=8,
                     transform=compiles_ax.get_yaxis_transform())
    compiles_ax.set_ylim(0, cache_limit + 1.5)
    compiles_ax.set_xlabel("training step")
    compiles_ax.set_ylabel("compiles of the update so far")
    compiles_ax.set_title("Compiles after each step (lines nudged apart where equal)",
                          fontsize=10)
    time_ax.set_yscale("log")
    time_ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    time_ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    time_ax.yaxis.set_minor_formatter(NullFormatter())
    time_ax.set_xlabel("training step")
    time_ax.set_ylabel("step time (ms, log scale)")
    time_ax.set_title("Time per step: forward, backward, update", fontsize=10)
    for ax in (compiles_ax, time_ax):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=8, loc="center right")
    fig.suptitle(f"A learning rate that changes every step: Python float or 0-d tensor, "
                 f"automatic dynamic on or off (backend={backend!r}){device_title(device)}",
                 fontsize=11)
    fig.tight_layout()
    paths = save_figure(fig, out_dir, "scalar_guards")
    plt.close(fig)
    return paths


# ---- main -----------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(parser, "CI-sized: 12 steps instead of 40")
    return finish_arguments(parser.parse_args(argv), "scalar_guards")


def main(argv=None):
    args = parse_args(argv)
    progress = Progress("scalar_guards")
    torch = load_torch_expectations()
    cache_limit = mini.config.cache_size_limit
    steps, warmup = (12, 3) if args.quick else (40, 5)

    warm_up(args.backend, args.device)
    reference = train(VARIANTS[0], steps, warmup, args.backend, args.device, compiled=False)
    progress.say("eager reference trained")
    results = {}
    for variant in VARIANTS:
        with cold_kernel_cache(args.backend):
            records = train(variant, steps, warmup, args.backend, args.device)
        results[variant.name] = {"steps": records, "summary": summarize(records, reference)}
        progress.say(f"{variant.name}: {records[-1]['update_compiles']} compiles of the update")

    conformance = {}
    for variant in VARIANTS:
        if variant.case:
            conformance[variant.name] = {
                "case": variant.case,
                "mini": run_conformance_program(variant.lr_kind, args.device),
                "mini_update": results[variant.name]["summary"]["compiles_after_each_step"][:4],
            }

    print_table(results, steps, args.backend, args.device, cache_limit)
    print_torch_comparison(conformance, torch)

    paths = plot(results, args.backend, args.device, cache_limit, args.out)
    output = {
        "backend": args.backend,
        **device_fields(args.device),
        "quick": args.quick,
        "cache_size_limit": cache_limit,
        "steps": steps,
        "schedule": f"linear warm-up to {BASE_LR} over {warmup} steps, then cosine decay",
        "model": f"Linear({FEATURES}, {HIDDEN}), ReLU, Linear({HIDDEN}, 1); batch {BATCH}",
        "variants": results,
        "eager_reference_losses": [r["loss"] for r in reference],
        "conformance": conformance,
        "torch_2_11": {record["case"]: torch[record["case"]] for record in conformance.values()
                       if record["case"] in torch},
    }
    paths.append(write_json(args.out, "scalar_guards", output))
    print("\nwrote " + ", ".join(str(path) for path in paths))


if __name__ == "__main__":
    sys.exit(main())
