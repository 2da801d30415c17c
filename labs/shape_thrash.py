"""Lab -- shape thrash: how many compiles a stream of batch sizes costs, per strategy.

A compiled graph assumes the sizes it was traced with (notes/dynamic_shapes.md). Feed it a
new batch size and its guards fail: capture compiles again. This lab feeds one function --
a two-layer MLP's masked squared error -- three streams of sizes:

    32 -> 64 -> 128              the article's example (3 calls)
    data loader, last batch      full batches of 64 and a short last one, two epochs
    variable sequence lengths    token counts between 16 and 512, as text batches have

under six strategies, and counts the compiles after every call and the time they took:

    static             mini.config.patch(automatic_dynamic_shapes=False): every size compiles
    dynamic=False      mini.compile(..., dynamic=False): the same, asked per function
    default            automatic dynamic: the first size is specialized, the second compile
                       makes the changed dim a symbol
    dynamic=True       every dim a symbol from the first compile
    mark_dynamic       mini.mark_dynamic(t, 0) on each batch before the call
    pad to 2^k         pad the batch to the next power of two with a 0/1 row mask,
                       compiled with dynamic=False: one compile per bucket

    PYTHONPATH=build/python .venv/bin/python labs/shape_thrash.py [--quick] [--out DIR]
        [--backend inductor|eager] [--device cpu|cuda]

--device cuda feeds the same batches as GPU tensors (made and padded in numpy, as a collate
function does, then moved) and compiles CUDA kernels under inductor; each call's time is read
after a synchronize. Without a usable GPU it says why in one line and exits 0.

Writes shape_thrash_compiles.png/.svg (compiles after each call), shape_thrash_time.png/.svg
(cumulative compile time) and shape_thrash.json into --out (default: figures/).
"""

import argparse
import sys
import time
import warnings

import numpy as np

import mini

import measure  # noqa: E402
from measure import (CountingBackend, Progress, add_common_arguments, cold_kernel_cache,
                     device_fields, device_title, finish_arguments, load_torch_expectations,
                     pyplot, save_figure, synchronizer, write_json)

FEATURES, HIDDEN, OUTPUTS = 16, 32, 4
SMALLEST_BUCKET = 16


# ---- the program ----------------------------------------------------------------------------


def masked_mlp_loss(x, target, mask, w1, w2):
    """Mean squared error of relu(x @ w1) @ w2 over the rows whose mask is 1 (mask is a
    [rows, 1] column of 0s and 1s)."""
    hidden = mini.relu(x @ w1)
    squared_error = (hidden @ w2 - target) ** 2
    return (squared_error * mask).sum() / (mask.sum() * OUTPUTS)


def times_two_plus_one(x):
    """The conformance program thrash_* (tests/conformance/cases.py) was measured on."""
    return x * 2 + 1


# ---- the streams of sizes -------------------------------------------------------------------


def loader_batches(dataset_size, batch_size, epochs):
    """Batch sizes a data loader without drop_last yields: full batches, then the rest."""
    full, rest = divmod(dataset_size, batch_size)
    return ([batch_size] * full + ([rest] if rest else [])) * epochs


def sequence_lengths(calls, low, high, seed):
    """Token counts of `calls` text batches, uniform in [low, high] (seeded)."""
    return [int(n) for n in np.random.default_rng(seed).integers(low, high + 1, size=calls)]


def size_streams(quick):
    if quick:
        loader = loader_batches(dataset_size=300, batch_size=64, epochs=2)
        lengths = sequence_lengths(calls=20, low=16, high=512, seed=0)
    else:
        loader = loader_batches(dataset_size=1000, batch_size=64, epochs=2)
        lengths = sequence_lengths(calls=32, low=16, high=512, seed=0)
    return [
        {"name": "32 -> 64 -> 128", "rows": [32, 64, 128]},
        {"name": f"data loader: batch 64, last batch {loader[len(loader) // 2 - 1]}, "
                 f"2 epochs", "rows": loader},
        {"name": "variable sequence lengths (16..512 tokens)", "rows": lengths},
    ]


# ---- the strategies -------------------------------------------------------------------------


def next_power_of_two(n):
    return max(SMALLEST_BUCKET, 1 << (n - 1).bit_length())


class Strategy:
    """How a stream of sizes is fed to the compiled function."""

    def __init__(self, name, dynamic=None, config=None, mark=False, pad=False, case=None):
        self.name, self.dynamic, self.config = name, dynamic, config or {}
        self.mark, self.pad, self.case = mark, pad, case

    def batch(self, x, target, device):
        """The arguments for one call: (x, target, mask) on `device`, padded or marked as the
        strategy says. Padding is done in numpy, as a collate function would."""
        rows = x.shape[0]
        size = next_power_of_two(rows) if self.pad else rows
        x_np = np.zeros((size, FEATURES), np.float32)
        target_np = np.zeros((size, OUTPUTS), np.float32)
        mask_np = np.zeros((size, 1), np.float32)
        x_np[:rows], target_np[:rows], mask_np[:rows] = x, target, 1.0
        tensors = [from_numpy(x_np, device), from_numpy(target_np, device),
                   from_numpy(mask_np, device)]
        if self.mark:
            for tensor in tensors:
                mini.mark_dynamic(tensor, 0)
        return tensors


STRATEGIES = [
    Strategy("static", config={"automatic_dynamic_shapes": False}, case="thrash_static"),
    Strategy("dynamic=False", dynamic=False),
    Strategy("default", case="thrash_auto"),
    Strategy("dynamic=True", dynamic=True, case="thrash_dynamic_true"),
    Strategy("mark_dynamic", mark=True),
    Strategy("pad to 2^k", dynamic=False, pad=True),
]


def from_numpy(array, device):
    """A tensor of the array's values on `device` (mini.from_numpy makes a CPU tensor)."""
    tensor = mini.from_numpy(array)
    return tensor if device == "cpu" else tensor.to(device)


# ---- measuring ------------------------------------------------------------------------------


def timed_call(compiled, arguments, sync):
    """(result, seconds); `sync` runs before the clock is read (measure.synchronizer)."""
    sync()
    start = time.perf_counter()
    result = compiled(*arguments)
    sync()
    return result, time.perf_counter() - start


def run_stream(strategy, rows_per_call, weights, backend_name, device):
    """Feeds every size of the stream to a freshly compiled function; one record per call."""
    mini.reset()
    sync = synchronizer(device)
    backend = CountingBackend(backend_name)
    rng = np.random.default_rng(1)
    calls = []
    with mini.config.patch(**strategy.config), cold_kernel_cache(backend_name), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = mini.compile(masked_mlp_loss, backend=backend, dynamic=strategy.dynamic)
        for rows in rows_per_call:
            x = rng.standard_normal((rows, FEATURES), dtype=np.float32)
            target = rng.standard_normal((rows, OUTPUTS), dtype=np.float32)
            arguments = strategy.batch(x, target, device) + list(weights)
            compiles_before, warnings_before = backend.frame_count, len(caught)
            result, seconds = timed_call(compiled, arguments, sync)
            compiled_now = backend.frame_count - compiles_before
            compile_seconds = 0.0
            if compiled_now:  # what compiling cost: this call against a cached one
                _, cached_seconds = timed_call(compiled, arguments, sync)
                compile_seconds = max(seconds - cached_seconds, 0.0)
            expected = masked_mlp_loss(from_numpy(x, device), from_numpy(target, device),
                                       mini.ones(rows, 1, device=device), *weights)
            calls.append({
                "rows": rows,
                "rows_fed": arguments[0].shape[0],
                "compiles": backend.frame_count,
                "compiled_graphs": compiled_now,
                "compile_seconds": compile_seconds,
                "backend_seconds": sum(backend.compile_seconds[compiles_before:]),
                "call_seconds": seconds,
                "cache_limit_warning": len(caught) > warnings_before,
                "matches_eager": bool(mini.allclose(result, expected, rtol=1e-4, atol=1e-4)),
            })
    return calls


def warm_up(weights, backend_name, device):
    """One compile before measuring, so the first strategy's first compile does not also
    pay for what happens once per process (and, for inductor, per compiler start-up)."""
    with cold_kernel_cache(backend_name):
        compiled = mini.compile(masked_mlp_loss, backend=CountingBackend(backend_name))
        compiled(mini.randn(3, FEATURES, device=device), mini.randn(3, OUTPUTS, device=device),
                 mini.ones(3, 1, device=device), *weights)
    mini.reset()


def run_conformance_program(strategy, rows_per_call, device):
    """Compiles after each call of times_two_plus_one, the program torch was measured on."""
    mini.reset()
    counter = CountingBackend("eager")
    with mini.config.patch(**strategy.config):
        compiled = mini.compile(times_two_plus_one, backend=counter, dynamic=strategy.dynamic)
        after = []
        for rows in rows_per_call:
            compiled(mini.randn(rows, device=device))
            after.append(counter.frame_count)
    return after


def summarize(calls):
    fed = sum(call["rows_fed"] for call in calls)
    cached = [call["call_seconds"] for call in calls if not call["compiled_graphs"]]
    return {
        "median_cached_call_seconds": float(np.median(cached)) if cached else None,
        "compiles": calls[-1]["compiles"],
        "compiles_after_each_call": [call["compiles"] for call in calls],
        "cache_limit_warnings": sum(call["cache_limit_warning"] for call in calls),
        "compile_seconds": sum(call["compile_seconds"] for call in calls),
        "total_seconds": sum(call["call_seconds"] for call in calls),
        "padding_fraction": 1 - sum(call["rows"] for call in calls) / fed,
        "all_match_eager": all(call["matches_eager"] for call in calls),
    }


# ---- reporting ------------------------------------------------------------------------------


def short_list(values, limit=12):
    text = ", ".join(str(v) for v in values[:limit])
    return f"[{text}{', ...' if len(values) > limit else ''}]"


def runs(values):
    """[1, 1, 1, 2, 2] as '1 x3, 2 x2': each value and how many calls in a row had it."""
    groups = []
    for value in values:
        if groups and groups[-1][0] == value:
            groups[-1][1] += 1
        else:
            groups.append([value, 1])
    text = ", ".join(f"{value} x{count}" for value, count in groups[:8])
    return text + (", ..." if len(groups) > 8 else "")


def print_tables(streams, backend, device, cache_limit):
    print(f"\ncompiles and compile time per strategy on {device} (backend={backend!r}, "
          f"cache_size_limit {cache_limit})\ncompiles after each call: 'v xN' = N calls in a "
          "row with v compiles so far; compile ms: each compiling call\nminus the same call "
          "cached; cached call us: "
          "median of the calls that compiled nothing (past the\nlimit, those run eagerly); "
          "padding: fraction of the rows fed that were padding")
    for stream in streams:
        print(f"\n{stream['name']}: {len(stream['rows'])} calls, rows "
              f"{short_list(stream['rows'])}\n")
        header = (f"{'strategy':<15}{'compiles':>9}  {'compiles after each call':<44}"
                  f"{'limit hit':>10}{'compile ms':>12}{'cached call us':>16}{'padding':>9}")
        print(header)
        print("-" * len(header))
        for name, result in stream["strategies"].items():
            summary = result["summary"]
            limit = "yes" if summary["cache_limit_warnings"] else "no"
            wrong = "" if summary["all_match_eager"] else "  RESULT DIFFERS FROM EAGER"
            cached = summary["median_cached_call_seconds"]
            cached = f"{cached * 1e6:.1f}" if cached is not None else "-"
            print(f"{name:<15}{summary['compiles']:>9}  "
                  f"{runs(summary['compiles_after_each_call']):<44}{limit:>10}"
                  f"{summary['compile_seconds'] * 1e3:>12.1f}{cached:>16}"
                  f"{summary['padding_fraction']:>9.0%}{wrong}")


def print_torch_comparison(conformance, torch):
    measure.print_torch_comparison(
        conformance, torch, "each call of 32 -> 64 -> 128",
        [("strategy", 15), (22, "torch, x*2+1", 16), ("mini, x*2+1", "mini", 16),
         ("mini, the MLP", "mini_mlp", 16)])


# ---- figures --------------------------------------------------------------------------------

STYLES = {
    "static": dict(color="#C44E52", marker="o", linestyle="-"),
    "dynamic=False": dict(color="#8C8C8C", marker="x", linestyle=":"),
    "default": dict(color="#4C72B0", marker="s", linestyle="-"),
    "dynamic=True": dict(color="#55A868", marker="^", linestyle="-"),
    "mark_dynamic": dict(color="#8172B2", marker="v", linestyle="--"),
    "pad to 2^k": dict(color="#DD8452", marker="D", linestyle="-"),
}


def plot_compiles(streams, backend, device, cache_limit, out_dir):
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, len(streams), figsize=(5.6 * len(streams), 7.6),
                             gridspec_kw={"height_ratios": [1, 2.2]}, squeeze=False)
    names = list(STYLES)
    # identical lines would hide each other: each strategy is drawn a little above or below
    offsets = {name: (i - (len(names) - 1) / 2) * 0.07 for i, name in enumerate(names)}
    for column, stream in enumerate(streams):
        calls = np.arange(1, len(stream["rows"]) + 1)
        top, bottom = axes[0][column], axes[1][column]
        padded = [next_power_of_two(n) for n in stream["rows"]]
        top.bar(calls, padded, color="#DD8452", alpha=0.35, label="padded to 2^k")
        top.bar(calls, stream["rows"], color="#4C72B0", label="rows in the batch")
        top.set_title(stream["name"], fontsize=10)
        top.set_ylabel("batch rows")
        top.legend(fontsize=7, loc="upper left", ncol=2)
        top.set_ylim(0, max(padded) * 1.45)
        for name, result in stream["strategies"].items():
            compiles = np.array(result["summary"]["compiles_after_each_call"]) + offsets[name]
            bottom.plot(calls, compiles, label=name, drawstyle="steps-post", markersize=4,
                        **STYLES[name])
        bottom.axhline(cache_limit, color="black", linewidth=0.8, linestyle="--")
        bottom.text(0.02, cache_limit + 0.15, f"cache_size_limit ({cache_limit}): past it, "
                    "the function runs eagerly", fontsize=7,
                    transform=bottom.get_yaxis_transform())
        bottom.set_xlabel("call")
        bottom.set_ylabel("compiles so far")
        bottom.set_ylim(0, cache_limit + 1.5)
        bottom.grid(alpha=0.3)
        for ax in (top, bottom):
            ax.set_xlim(0.4, len(stream["rows"]) + 0.6)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, labels = axes[1][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9,
               frameon=False)
    fig.suptitle(f"Shape thrash{device_title(device)}: compiles after each call, per strategy "
                 f"(masked MLP loss, backend={backend!r}; lines nudged up or down so equal ones "
                 "stay visible)", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    paths = save_figure(fig, out_dir, "shape_thrash_compiles")
    plt.close(fig)
    return paths


def plot_compile_time(streams, backend, device, out_dir):
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(streams), figsize=(5.6 * len(streams), 4.4), squeeze=False)
    for ax, stream in zip(axes[0], streams):
        calls = range(1, len(stream["rows"]) + 1)
        for name, result in stream["strategies"].items():
            cumulative = np.cumsum([call["compile_seconds"] for call in result["calls"]])
            ax.plot(calls, cumulative * 1e3, label=name, drawstyle="steps-post",
                    markersize=4, **STYLES[name])
        ax.set_title(stream["name"], fontsize=10)
        ax.set_xlabel("call")
        ax.set_ylabel("cumulative compile time (ms)")
        ax.set_ylim(bottom=0)
        ax.set_xlim(0.4, len(stream["rows"]) + 0.6)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9,
               frameon=False)
    fig.suptitle(f"Shape thrash{device_title(device)}: time spent compiling, per strategy "
                 f"(backend={backend!r}; a call that compiled minus the same call cached)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    paths = save_figure(fig, out_dir, "shape_thrash_time")
    plt.close(fig)
    return paths


# ---- main -----------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(parser, "CI-sized: shorter streams")
    return finish_arguments(parser.parse_args(argv), "shape_thrash")


def main(argv=None):
    args = parse_args(argv)
    progress = Progress("shape_thrash")
    torch = load_torch_expectations()
    cache_limit = mini.config.cache_size_limit
    mini.manual_seed(0)
    weights = (mini.randn(FEATURES, HIDDEN, device=args.device) * 0.3,
               mini.randn(HIDDEN, OUTPUTS, device=args.device) * 0.3)

    warm_up(weights, args.backend, args.device)
    streams = size_streams(args.quick)
    for stream in streams:
        stream["strategies"] = {}
        for strategy in STRATEGIES:
            calls = run_stream(strategy, stream["rows"], weights, args.backend, args.device)
            stream["strategies"][strategy.name] = {"calls": calls, "summary": summarize(calls)}
            progress.say(f"{stream['name']}: {strategy.name}: "
                         f"{calls[-1]['compiles']} compiles")

    conformance = {}
    for strategy in STRATEGIES:
        if strategy.case:
            conformance[strategy.name] = {
                "case": strategy.case,
                "mini": run_conformance_program(strategy, [32, 64, 128], args.device),
                "mini_mlp": streams[0]["strategies"][strategy.name]["summary"][
                    "compiles_after_each_call"],
            }

    print_tables(streams, args.backend, args.device, cache_limit)
    print_torch_comparison(conformance, torch)

    paths = (plot_compiles(streams, args.backend, args.device, cache_limit, args.out)
             + plot_compile_time(streams, args.backend, args.device, args.out))
    results = {
        "backend": args.backend,
        **device_fields(args.device),
        "quick": args.quick,
        "cache_size_limit": cache_limit,
        "program": "masked_mlp_loss: relu(x @ w1) @ w2, squared error, mean over masked rows; "
                   f"x [rows, {FEATURES}], mask [rows, 1], w1 [{FEATURES}, {HIDDEN}], "
                   f"w2 [{HIDDEN}, {OUTPUTS}]",
        "compile_seconds": "a call that compiled minus the same call again (cached)",
        "streams": streams,
        "conformance": conformance,
        "torch_2_11": {record["case"]: torch[record["case"]] for record in conformance.values()
                       if record["case"] in torch},
    }
    paths.append(write_json(args.out, "shape_thrash", results))
    print("\nwrote " + ", ".join(str(path) for path in paths))


if __name__ == "__main__":
    sys.exit(main())
