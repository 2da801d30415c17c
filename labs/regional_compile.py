"""Lab -- regional compilation: compile one block, run it for every layer.

A model of N identical blocks compiled whole is one graph of N blocks: one compile, whose
time grows with N (capture traces every block, the backend compiles every op). Compiled
by region -- each block's forward, or one compiled function applied to each block -- it is
one graph of one block: capture guards a module by its structure, not its identity
(notes/guards.md, "modules by structure"), so block 2..N are other instances of the same
class and layout that hit the entry block 1 made, each reading its own weights as graph
inputs. One compile for any N, its time flat. The price is at run time: N guard checks and
N graph launches per forward, and no fusion across block boundaries.

The block is a residual MLP block, LayerNorm(x + GELU(Linear(x))), on [BATCH, WIDTH]; the
model is N of them in a Sequential, run in inference (weights without requires_grad).
Three ways to compile it, for N = 1, 2, 4, 8, 16, 32 (--quick: 1, 2, 4, 8):

    whole model         mini.compile(model)
    block.compile()     every block compiled in place (torch's Module.compile)
    one compiled fn     step = mini.compile(lambda block, x: block(x)), called per block

Counted and timed per strategy and N: compiles (graphs the backend was given), the ops in
those graphs (the work a compile does: N blocks' worth, or one block's), cold compile time
(the first call minus a cached call, on a fresh kernel cache), the backend's part of it, the
time of a cached call, and whether the result equals eager. Also the program of
issue 10 -- `def f(m, x): return m(x)` called with three Linear(8, 8) -- whose compiles
after each call torch 2.11 measured as [1, 1, 1].

    PYTHONPATH=build/python .venv/bin/python labs/regional_compile.py [--quick] [--out DIR]
        [--backend inductor|eager] [--device cpu|cuda]

--device cuda moves every model to the GPU (module.to) and feeds it GPU tensors; under
inductor the cold compile is then code generation and NVRTC, and every call's time is read
after a synchronize. Without a usable GPU it says why in one line and exits 0.

Writes regional_compile.png/.svg (compiles and cold compile time against N) and
regional_compile.json into --out (default: figures/).
"""

import argparse
import statistics
import sys
import time

import mini

from measure import (CountingBackend, Progress, add_common_arguments, cold_kernel_cache,
                     device_fields, device_title, finish_arguments, pyplot, save_figure,
                     synchronizer, write_json)

nn = mini.nn

WIDTH, BATCH = 64, 16
FULL_LAYERS = [1, 2, 4, 8, 16, 32]
QUICK_LAYERS = [1, 2, 4, 8]
CACHED_CALLS = 5
TORCH_THREE_LINEARS = [1, 1, 1]  # torch 2.11, compiles after each call (issue 10)


# ---- the model ------------------------------------------------------------------------------


class Block(nn.Module):
    """LayerNorm(x + GELU(Linear(x))): one residual block, the region compiled."""

    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.act(self.fc(x)))


def make_model(layers, device, seed=0):
    mini.manual_seed(seed)
    model = nn.Sequential(*[Block(WIDTH) for _ in range(layers)])
    return model.requires_grad_(False).to(device)


# ---- the strategies: each returns run(x) for a fresh model and its backend --------------------


def whole_model(model, backend):
    return mini.compile(model, backend=backend)


def block_compile(model, backend):
    for block in model:
        block.compile(backend=backend)
    return model


def one_compiled_fn(model, backend):
    step = mini.compile(lambda block, x: block(x), backend=backend)

    def run(x):
        for block in model:
            x = step(block, x)
        return x
    return run


STRATEGIES = {
    "whole model": whole_model,
    "block.compile()": block_compile,
    "one compiled fn": one_compiled_fn,
}


# ---- measuring ------------------------------------------------------------------------------


class OpCountingBackend(CountingBackend):
    """CountingBackend that also adds up the ops (call_function nodes) of the graphs."""

    def __init__(self, kind):
        super().__init__(kind)
        self.op_count = 0

    def __call__(self, graph_module, example_inputs):
        self.op_count += graph_module.op_count()
        return super().__call__(graph_module, example_inputs)



def timed(run, x, sync):
    """(output, seconds); `sync` runs before the clock is read (measure.synchronizer)."""
    sync()
    start = time.perf_counter()
    out = run(x)
    sync()
    return out, time.perf_counter() - start


def measure_one(strategy, layers, backend_name, device):
    """Compiles and times one strategy on a fresh model of `layers` blocks, once."""
    mini.reset()
    sync = synchronizer(device)
    model = make_model(layers, device)
    x = mini.randn(BATCH, WIDTH, device=device)
    expected = model(x)
    backend = OpCountingBackend(backend_name)
    with cold_kernel_cache(backend_name):
        run = STRATEGIES[strategy](model, backend)
        out, first_seconds = timed(run, x, sync)
        cached = [timed(run, x, sync)[1] for _ in range(CACHED_CALLS)]
    cached_seconds = statistics.median(cached)
    return {
        "layers": layers,
        "compiles": backend.frame_count,
        "graph_ops": backend.op_count,
        "compile_seconds": max(first_seconds - cached_seconds, 0.0),
        "backend_seconds": sum(backend.compile_seconds),
        "first_call_seconds": first_seconds,
        "cached_call_seconds": cached_seconds,
        "matches_eager": bool(mini.allclose(out, expected, rtol=1e-4, atol=1e-5)),
    }


def measure(strategy, layers, backend_name, device, repeats):
    """The fastest of `repeats` cold compiles: the compile under the eager backend takes
    milliseconds, which another process on a busy machine can double."""
    return min((measure_one(strategy, layers, backend_name, device) for _ in range(repeats)),
               key=lambda point: point["compile_seconds"])


def three_linears(device):
    """Compiles after each call of f(m, x) = m(x) with three Linear(8, 8) instances."""
    mini.reset()
    counter = CountingBackend("eager")
    f = mini.compile(lambda m, x: m(x), backend=counter)
    x = mini.randn(2, 8, device=device)
    after = []
    for seed in range(3):
        mini.manual_seed(seed)
        f(nn.Linear(8, 8).to(device), x)
        after.append(counter.frame_count)
    return after


def warm_up(backend_name, device):
    """One compile before measuring, so the first measurement does not also pay for what
    happens once per process (and, for inductor, the compiler's start-up)."""
    with cold_kernel_cache(backend_name):
        model = mini.compile(make_model(1, device), backend=CountingBackend(backend_name))
        model(mini.randn(BATCH, WIDTH, device=device))
    mini.reset()


# ---- reporting ------------------------------------------------------------------------------


def print_table(results, backend, device):
    print(f"\ncompiles and cold compile time against the number of blocks on {device} "
          f"(backend={backend!r}; compile ms: the first call\nminus a cached one, on a fresh "
          "kernel cache; backend "
          f"ms: the backend's part of it; cached us: the median of {CACHED_CALLS} cached calls)\n")
    header = (f"{'strategy':<18}{'blocks':>7}{'compiles':>10}{'graph ops':>11}{'compile ms':>12}"
              f"{'backend ms':>12}{'cached us':>11}  {'equals eager':<12}")
    print(header)
    print("-" * len(header))
    for name, points in results.items():
        for p in points:
            print(f"{name:<18}{p['layers']:>7}{p['compiles']:>10}{p['graph_ops']:>11}"
                  f"{p['compile_seconds'] * 1e3:>12.1f}"
                  f"{p['backend_seconds'] * 1e3:>12.1f}{p['cached_call_seconds'] * 1e6:>11.1f}  "
                  f"{'yes' if p['matches_eager'] else 'NO':<12}")
        print()


def print_torch_comparison(mini_three):
    print("beside torch 2.11: f(m, x) = m(x) with three Linear(8, 8) instances, compiles after "
          "each call\n")
    print(f"{'torch 2.11':<12}{TORCH_THREE_LINEARS}")
    print(f"{'mini':<12}{mini_three}")


# ---- figures --------------------------------------------------------------------------------

STYLES = {
    "whole model": dict(color="#C44E52", marker="o", linestyle="-"),
    "block.compile()": dict(color="#4C72B0", marker="s", linestyle="-"),
    "one compiled fn": dict(color="#55A868", marker="^", linestyle="--"),
}


def plot(results, backend, device, out_dir):
    plt = pyplot()
    from matplotlib.ticker import ScalarFormatter

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.2))
    # equal compile counts would hide each other: each strategy is drawn a little apart
    nudge = {name: (i - 1) * 0.04 for i, name in enumerate(results)}
    panels = [
        (axes[0][0], "compiles (graphs given to the backend; lines nudged apart)",
         lambda p, name: p["compiles"] + nudge[name]),
        (axes[0][1], "ops in the compiled graphs (what a compile works through)",
         lambda p, name: p["graph_ops"]),
        (axes[1][0], "cold compile time (ms): the first call minus a cached call",
         lambda p, name: p["compile_seconds"] * 1e3),
        (axes[1][1], "cached call (us): the run-time price of regions",
         lambda p, name: p["cached_call_seconds"] * 1e6),
    ]
    layers = [p["layers"] for p in next(iter(results.values()))]
    for ax, title, value in panels:
        for name, points in results.items():
            ax.plot(layers, [value(p, name) for p in points], label=name, markersize=5,
                    **STYLES[name])
        ax.set_title(title, fontsize=10)
        ax.set_xscale("log", base=2)
        ax.set_xticks(layers)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("blocks in the model (N)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_ylim(0, max(p["compiles"] for points in results.values() for p in points) + 1)
    fig.suptitle(f"Regional compilation: N blocks LayerNorm(x + GELU(Linear(x))) on "
                 f"[{BATCH}, {WIDTH}], backend={backend!r}{device_title(device)}\n"
                 "whole model: one graph of N blocks; "
                 "regional: one graph of one block, which every other block hits", fontsize=10.5)
    fig.tight_layout()
    paths = save_figure(fig, out_dir, "regional_compile")
    plt.close(fig)
    return paths


# ---- main -----------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(parser, f"CI-sized: N up to {QUICK_LAYERS[-1]}")
    return finish_arguments(parser.parse_args(argv), "regional_compile")


def main(argv=None):
    args = parse_args(argv)
    progress = Progress("regional_compile")
    layer_counts = QUICK_LAYERS if args.quick else FULL_LAYERS
    repeats = 3 if args.backend == "eager" else 1  # an inductor compile takes seconds
    warm_up(args.backend, args.device)
    results = {}
    for name in STRATEGIES:
        results[name] = []
        for layers in layer_counts:
            point = measure(name, layers, args.backend, args.device, repeats)
            results[name].append(point)
            progress.say(f"{name}, {layers} blocks: {point['compiles']} compile(s), "
                         f"{point['compile_seconds'] * 1e3:.0f} ms")
    mini_three = three_linears(args.device)

    print_table(results, args.backend, args.device)
    print_torch_comparison(mini_three)

    paths = plot(results, args.backend, args.device, args.out)
    output = {
        "backend": args.backend,
        **device_fields(args.device),
        "quick": args.quick,
        "model": f"nn.Sequential of N Block(width={WIDTH}): LayerNorm(x + GELU(Linear(x))); "
                 f"input [{BATCH}, {WIDTH}]; weights without requires_grad",
        "compile_seconds": "the first call minus the median of the cached calls, on a fresh "
                           "kernel cache; the fastest of 3 compiles under the eager backend",
        "layers": layer_counts,
        "strategies": results,
        "three_linears": mini_three,
        "torch_2_11": {"three_linears": TORCH_THREE_LINEARS},
    }
    paths.append(write_json(args.out, "regional_compile", output))
    print("\nwrote " + ", ".join(str(path) for path in paths))


if __name__ == "__main__":
    sys.exit(main())
