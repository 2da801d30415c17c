"""Lab -- the article's six figures, each drawn from a run of mini, not by hand.

The article's playground draws its figures as static pictures with hand-placed boxes and
hand-written labels. Here each one is measured: change a program in labs/article/ and the
figure changes with it.

    compile_pipeline   the stages a first call goes through (mini's folder for each) and the
                       time each took for a real function, beside the disk-cache hit path
    frame_hook         the frames the hook saw in a real run: compiled, skipped (why), run
                       natively (why), hit in the cache
    guard_runtime      the cost of a cache hit, of a guard failure that finds the next entry,
                       of a recompile; the cache's entries in most-recently-hit order
    graph_breaks       a real program's compiled regions and eager islands (from explain),
                       with the time spent in each
    fusion_bandwidth   eager's kernels and the bytes they move against the fused kernel
                       (its generated name, its loads and stores), measured bytes and time
    debug_order        the four questions (breaks, recompiles, weak fusion or launch gaps,
                       wrong mode), each with the mini command that answers it and what that
                       command printed for a slow example program

    PYTHONPATH=build/python .venv/bin/python labs/article_figures.py [--quick] [--out DIR]
        [--device cpu|cuda] [--only NAME[,NAME...]]

Each figure is labs/article/<name>.py: measure(args) returns its numbers (JSON), draw(data,
plt) its matplotlib figure; this file titles it with the claim it supports, adds the one-line
caption and the device and date it was measured on, and writes article_<name>.png/.svg/.json
into --out (default figures/). On the GPU machine (--device cuda) the measurements are CUDA's,
with torch's beside them where torch imports.
"""

import argparse
import importlib
import platform
import sys
import time
import traceback
from pathlib import Path

import mini

from measure import REPO_ROOT, cuda_unavailable_reason, pyplot, save_figure, write_json

FIGURES = ["compile_pipeline", "frame_hook", "guard_runtime", "graph_breaks", "fusion_bandwidth", "debug_order"]


def measured_on(device):
    name = mini.cuda.get_device_name(0) if device == "cuda" else (platform.processor() or platform.machine())
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": device, "on": name}


def make_figure(name, args, plt):
    """Measures, draws and writes one figure; returns its JSON."""
    module = importlib.import_module(f"article.{name}")
    start = time.perf_counter()
    data = module.measure(args)
    data["measured"] = measured_on(args.device)
    data["measured"]["command"] = "python labs/article_figures.py " + " ".join(args.argv)
    data["title"], data["caption"] = module.TITLE, module.CAPTION
    fig = module.draw(data, plt)
    m = data["measured"]
    fig.suptitle(module.TITLE, fontsize=12, fontweight="bold")
    fig.text(0.01, 0.01, f"{module.CAPTION}\nmini, {m['device']} ({m['on']}), {m['date']}",
             fontsize=8, color="#444444", va="bottom", ha="left", wrap=True)
    save_figure(fig, args.out, f"article_{name}")
    plt.close(fig)
    write_json(args.out, f"article_{name}", data)
    print(f"  {name}: {time.perf_counter() - start:.1f} s -> article_{name}.png/.svg/.json", flush=True)
    return data


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures")
    parser.add_argument("--quick", action="store_true", help="smaller programs and fewer repeats (CI size)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--only", default="", help="comma-separated figure names (default: all six)")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.device == "cuda":
        why = cuda_unavailable_reason()
        if why:
            print(f"article_figures: skipped on cuda: {why}")
            return 0
    names = [n for n in args.only.split(",") if n] or FIGURES
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    print(f"article_figures: {len(names)} figure(s) on {args.device} into {args.out}")
    failed = []
    for name in names:
        try:
            make_figure(name, args, plt)
        except Exception:  # one figure's failure must not lose the others: say which and why
            traceback.print_exc()
            failed.append(name)
    if failed:
        print(f"article_figures: FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
