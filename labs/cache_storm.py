"""Lab -- a recompile storm: more shapes than mini.config.cache_size_limit.

With automatic dynamic shapes off, every new size of x is a new specialization: the guard
`tensor 'x' size mismatch at index 0` fails and the frame is compiled again. mini keeps at
most mini.config.cache_size_limit (8) compiled entries per frame. The call that would compile
a ninth raises one UserWarning ("mini hit config.cache_size_limit (8)", with the last
recompile reason) and from then on the frame runs eagerly: new shapes get no compiled code,
while the eight shapes already compiled keep using their entries.

    fn(x) = x * 2 + 1

This lab calls fn with cache_size_limit + 4 distinct sizes and shows:

1. the compiles after each call (counted with mini.CompileCounter as the backend) against the
   limit, the recompile reasons (MINI_LOGS=recompiles, captured from sys.stderr) and the
   warning, beside torch 2.11's record of the same program
   (tests/conformance/expected_torch_2.11.jsonl, case cache_limit_storm);
2. what falling back costs per call, with backend="inductor": a shape with a cached compiled
   entry (one fused kernel), a shape past the limit (the eager ops, after a guard walk that
   misses all eight entries) and the plain uncompiled function, at a small size (where the
   per-call overhead shows) and a large one (where the lost fusion shows);
3. the cache's policies side by side (mini.config.cache_policy: "recent", torch's; "oldest";
   "yours", the course kit's A6) on four streams of sizes: a storm of 12 sizes in turn, one hot
   size among cold ones, a phase change, a drift to ever new sizes. Per stream and policy: the
   compiles, the entries evicted, the calls that ran compiled code and those that ran eagerly,
   the entries whose guards a call checked on average, and the stream's time with
   backend="eager" (capture and guards, no code generation).

    PYTHONPATH=build/python .venv/bin/python labs/cache_storm.py [--quick] [--out DIR]
        [--device cpu|cuda] [--stream SIZES]

--device cuda runs the storm on GPU tensors: "inductor" generates one CUDA kernel per compile
(NVRTC, or a CUBIN from mini's disk cache) and the times per call are read after a
synchronize. Without a usable GPU it says why in one line and exits 0.

Writes cache_storm.png / .svg (compiles against call index; time per call by regime),
cache_policies.png / .svg (the policies on the four streams) and cache_storm.json into --out
(default: figures/ at the repository root).
"""

import argparse
import contextlib
import io
import json
import os
import random
import re
import time
import warnings
from pathlib import Path

import mini

from measure import device_fields, device_title, save_figure, skip_without_cuda, synchronizer

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE_FILE = REPO_ROOT / "tests" / "conformance" / "expected_torch_2.11.jsonl"
CONFORMANCE_CASE = "cache_limit_storm"
EXPRESSION = "x * 2 + 1"
EXTRA_SHAPES = 4            # calls past the limit
LIMIT_WARNING = "mini hit config.cache_size_limit"
SMALL_BASE = 2              # the conformance case's sizes 2, 3, ...: a call is mostly overhead
FULL_LARGE_BASE = 2**22     # large tensors: a call is mostly memory traffic
QUICK_LARGE_BASE = 2**14
REGIMES = ["cached compiled", "past the limit (eager)", "plain eager"]
REGIME_COLORS = {"cached compiled": "#4C72B0", "past the limit (eager)": "#C44E52",
                 "plain eager": "#8C8C8C"}
POLICIES = ["recent", "oldest", "yours"]
POLICY_COLORS = {"recent": "#4C72B0", "oldest": "#8C8C8C", "yours": "#DD8452"}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the figure and the JSON (default: figures/)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a large size of {QUICK_LARGE_BASE} elements instead of "
                             f"{FULL_LARGE_BASE}, and fewer timed calls")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--stream", type=parse_stream, metavar="SIZES",
                        help="one more stream for the policies table, named 'extra': sizes in call "
                             "order, comma-separated; N, N-M (N to M), Nx K (N, K times), "
                             "e.g. 2-9,9x50,2x50")
    return parser.parse_args(argv)


def parse_stream(text):
    """--stream's sizes: "2-9,9x50,2x50" -> [2, 3, ..., 9, 9 (50 times), 2 (50 times)]."""
    sizes = []
    for item in text.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)|x(\d+))?", item)
        if not m or int(m[1]) < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not a size (N >= 1), a range (N-M) or a repeat (NxK)")
        first = int(m[1])
        if m[2]:
            sizes += list(range(first, int(m[2]) + 1))
        else:
            sizes += [first] * (int(m[3]) if m[3] else 1)
    if not sizes or len(sizes) > 100_000:
        raise argparse.ArgumentTypeError(f"{len(sizes)} calls; give 1 to 100000")
    return sizes


def fn(x):
    return x * 2 + 1


# ---- the storm ------------------------------------------------------------------------------


def run_storm(compiled, sizes, device, before_call=None, after_call=None):
    """Calls compiled(randn(n)) for each n (on `device`), with recompiles logged and warnings
    caught.

    Returns one record per call: the size, the warnings it raised, what it logged, plus
    whatever after_call(record) adds. Logging is on only inside this function."""
    sync = synchronizer(device)
    calls = []
    mini.set_logs("recompiles")
    try:
        for index, n in enumerate(sizes, 1):
            x = mini.randn(n, device=device)
            if before_call:
                before_call()
            log = io.StringIO()
            with warnings.catch_warnings(record=True) as caught, \
                    contextlib.redirect_stderr(log):
                warnings.simplefilter("always")
                sync()
                start = time.perf_counter()
                compiled(x)
                sync()
                seconds = time.perf_counter() - start
            record = {
                "call": index,
                "n": n,
                "seconds": seconds,
                "limit_warnings": [str(w.message) for w in caught
                                   if issubclass(w.category, UserWarning)
                                   and LIMIT_WARNING in str(w.message)],
                "recompile_reasons": re.findall(r"^\s*- (.*)$", log.getvalue(), re.MULTILINE),
            }
            if after_call:
                after_call(record)
            calls.append(record)
    finally:
        mini.set_logs()
    return calls


def counting_storm(limit, device):
    """The storm under mini.CompileCounter, on the conformance case's sizes (2, 3, ...)."""
    mini.reset()
    counter = mini.CompileCounter()
    compiled = mini.compile(fn, backend=counter)
    sizes = list(range(2, 2 + limit + EXTRA_SHAPES))

    def after_call(record):
        record["compiles"] = counter.frame_count

    calls = run_storm(compiled, sizes, device, after_call=after_call)
    return sizes, calls


def inductor_storm(base, limit, device):
    """The same storm with backend="inductor", sizes base, base+1, ...: per call, the kernels
    generated (C++, or CUDA on the GPU: one per compile) and the kernels launched (1 fused, or
    the eager ops)."""
    mini.reset()
    compiled = mini.compile(fn, backend="inductor")
    sizes = [base + i for i in range(limit + EXTRA_SHAPES)]
    generated = {"total": 0}

    def before_call():
        mini.metrics.reset()

    def after_call(record):
        counts = mini.metrics.snapshot()
        generated["total"] += counts["generated_kernel_count"]
        record["compiles"] = generated["total"]
        record["kernel_launches"] = counts["kernel_launches"]

    calls = run_storm(compiled, sizes, device, before_call=before_call, after_call=after_call)
    return compiled, sizes, calls


# ---- the cache's policies -------------------------------------------------------------------


def policy_streams(seed=0):
    """The four streams of sizes (limit 8): name -> (what it is, the sizes in call order)."""
    rng = random.Random(seed)
    storm = [n for _ in range(5) for n in range(2, 14)]
    hot = [2 if rng.random() < 0.9 else rng.choice(range(3, 9)) for _ in range(60)]
    phases = [n for base in (2, 6, 10) for _ in range(10) for n in range(base, base + 4)]
    drift = [2 + i // 4 for i in range(64)]
    return {
        "storm": ("12 sizes in turn, 5 rounds", storm),
        "hot": ("size 2 nine calls in ten, else one of sizes 3 to 8", hot),
        "phases": ("4 sizes x 10 rounds, then 4 new, then 4 new", phases),
        "drift": ("a new size every 4 calls", drift),
    }


def run_policy(policy, sizes, device):
    """fn over `sizes` with backend="eager" under cache_policy `policy` (automatic dynamic off):
    mini.compiler.stats() counts compiles, hits, evictions and the entries checked."""
    mini.reset()
    xs = {n: mini.randn(n, device=device) for n in sorted(set(sizes))}
    sync = synchronizer(device)
    with mini.config.patch(cache_policy=policy), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the limit's warning: counted as eager calls below
        compiled = mini.compile(fn, backend="eager")
        mini.compiler.reset_stats()
        try:
            sync()
            start = time.perf_counter()
            for n in sizes:
                compiled(xs[n])
            sync()
            seconds = time.perf_counter() - start
        except Exception as error:  # noqa: BLE001  (a stub, or a broken contract: shown, not fatal)
            return {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
    units = mini.compiler.stats()["units"]
    eager = len(sizes) - units["cache_hits"] - units["compiles"]
    mini.reset()
    return {"compiles": units["compiles"], "evictions": units["evictions"],
            "compiled_calls": units["cache_hits"] + units["compiles"], "eager_calls": eager,
            "checked_per_call": units["entries_checked"] / len(sizes), "stream_ms": seconds * 1e3}


def compare_policies(device, extra=None):
    results = {}
    streams = policy_streams()
    if extra:
        streams["extra"] = ("given with --stream", extra)
    for name, (what, sizes) in streams.items():
        results[name] = {"what": what, "calls": len(sizes), "distinct_sizes": len(set(sizes)),
                         "policies": {policy: run_policy(policy, sizes, device) for policy in POLICIES}}
    return results


# ---- time per call, by regime ---------------------------------------------------------------


def per_call_us(run, calls, repeats, sync):
    """The fastest over `repeats` of the mean time of `calls` back-to-back calls, in us;
    `sync` runs before the clock is read (measure.synchronizer)."""
    run()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return min(samples)


def kernels_of_one_call(run):
    mini.metrics.reset()
    run()
    return mini.metrics.kernel_launches, mini.metrics.bytes_moved


def time_regimes(compiled, sizes, limit, calls, repeats, device):
    """Times the three regimes on the storm's function: a size compiled during the storm,
    a size past the limit, and the plain function on that size."""
    sync = synchronizer(device)
    cached_x = mini.randn(sizes[0], device=device)
    past_x = mini.randn(sizes[limit + 1], device=device)
    runs = {
        "cached compiled": (sizes[0], lambda: compiled(cached_x)),
        "past the limit (eager)": (sizes[limit + 1], lambda: compiled(past_x)),
        "plain eager": (sizes[limit + 1], lambda: fn(past_x)),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the limit warning must not fire again
        results = {}
        for regime, (n, run) in runs.items():
            kernels, moved = kernels_of_one_call(run)
            results[regime] = {"n": n, "kernel_launches": kernels, "bytes_moved": moved,
                               "us_per_call": per_call_us(run, calls, repeats, sync)}
    return results


def machine_state():
    """What the timings depend on: CPUs, the OpenMP thread setting, the load average (on the
    GPU too: every call is launched by the host, and a call past the limit walks the guards
    there)."""
    return {"cpus": os.cpu_count(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "load_average_1min": round(os.getloadavg()[0], 2)}


# ---- torch's record -------------------------------------------------------------------------


def torch_record():
    """torch 2.11's compiles after each call for this program, or None (with a message)."""
    if not CONFORMANCE_FILE.exists():
        print(f"note: {CONFORMANCE_FILE} is missing; torch 2.11's record is not shown")
        return None
    for line in CONFORMANCE_FILE.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("case") == CONFORMANCE_CASE:
                return record
    print(f"note: {CONFORMANCE_FILE} has no case '{CONFORMANCE_CASE}'; "
          "torch's record is not shown")
    return None


# ---- reporting ------------------------------------------------------------------------------


def print_storm(limit, count_calls, inductor_calls, torch_compiles, device):
    print(f"\nfn(x) = {EXPRESSION} on {device}, automatic_dynamic_shapes=False, "
          f"cache_size_limit={limit}: {len(count_calls)} sizes\n")
    header = (f"{'call':>4} {'n':>4} {'compiles':>9} {'torch':>6}  {'inductor':>9} "
              f"{'kernels':>8} {'call ms':>9}  what happened")
    print(header)
    print("-" * (len(header) + 40))
    for i, (counted, timed) in enumerate(zip(count_calls, inductor_calls)):
        torch_text = str(torch_compiles[i]) if torch_compiles and i < len(torch_compiles) else "-"
        if counted["limit_warnings"]:
            what = "UserWarning: " + counted["limit_warnings"][0].splitlines()[0] + " -> eager"
        elif counted["recompile_reasons"]:
            what = "recompile: " + counted["recompile_reasons"][0]
        elif i == 0:
            what = "first compile"
        else:
            what = "runs eagerly (no warning again)"
        print(f"{counted['call']:>4} {counted['n']:>4} {counted['compiles']:>9} {torch_text:>6}  "
              f"{timed['compiles']:>9} {timed['kernel_launches']:>8} "
              f"{timed['seconds'] * 1e3:>9.2f}  {what}")
    language, compiler = ("CUDA", "NVRTC") if device == "cuda" else ("C++", "a C++ compile")
    print("\ncompiles: mini.CompileCounter().frame_count after the call (sizes n); torch: "
          f"torch 2.11's record.\ninductor: {language} kernels generated so far in the same "
          "storm with backend='inductor';\nkernels: kernels that call launched "
          "(1 = the fused kernel, 2 = the eager mul and add);\ncall ms: the whole call, "
          f"with its compile ({compiler}, or a load from mini's disk cache).")
    for record in count_calls:
        for message in record["limit_warnings"]:
            print("\nthe warning, in full:\n  " + message.replace("\n", "\n  "))


def print_regimes(limit, regimes_by_size, device):
    synchronized = ", the clock read after a synchronize" if device == "cuda" else ""
    print(f"\ntime per call of fn(x) = {EXPRESSION} on {device}, by regime "
          f"(backend='inductor'{synchronized})\n")
    header = (f"{'size':<7}{'regime':<26}{'n':>10}{'kernels':>9}{'moved (KB)':>12}"
              f"{'us/call':>11}{'vs plain':>10}")
    print(header)
    print("-" * len(header))
    for size_label, regimes in regimes_by_size.items():
        plain = regimes["plain eager"]["us_per_call"]
        for regime in REGIMES:
            r = regimes[regime]
            print(f"{size_label:<7}{regime:<26}{r['n']:>10,}{r['kernel_launches']:>9}"
                  f"{r['bytes_moved'] / 1e3:>12.1f}{r['us_per_call']:>11.2f}"
                  f"{r['us_per_call'] / plain:>9.2f}x")
    small = regimes_by_size["small"]
    past, plain = small["past the limit (eager)"], small["plain eager"]
    miss_cost = past["us_per_call"] - plain["us_per_call"]
    print(f"\npast the limit, each call first checks the guards of all {limit} cached entries "
          f"and misses them all:\n{miss_cost:+.2f} us over the plain call at the small size; "
          "then it runs the eager ops, so it also\nloses the fusion (the eager kernels instead "
          "of one fused kernel).")


def print_policies(limit, policies):
    print(f"\nthe cache's policies (mini.config.cache_policy), fn(x) = {EXPRESSION}, backend='eager', "
          f"cache_size_limit={limit}:\n")
    width = max(8, *(len(name) + 2 for name in policies))
    header = (f"{'stream':<{width}}{'policy':<8}{'compiles':>9}{'evicted':>8}{'compiled':>9}{'eager':>6}"
              f"{'checked':>8}{'ms':>8}")
    print(header)
    print("-" * len(header))
    for name, stream in policies.items():
        for policy in POLICIES:
            r = stream["policies"][policy]
            if "error" in r:
                print(f"{name:<{width}}{policy:<8}  {r['error']}")
                continue
            print(f"{name:<{width}}{policy:<8}{r['compiles']:>9}{r['evictions']:>8}{r['compiled_calls']:>9}"
                  f"{r['eager_calls']:>6}{r['checked_per_call']:>8.2f}{r['stream_ms']:>8.1f}")
    print("\nstreams: " + "; ".join(f"{name}: {s['what']} ({s['calls']} calls, {s['distinct_sizes']} sizes)"
                                  for name, s in policies.items()))
    print("compiled: calls that ran compiled code (hits and compiles); eager: calls past the limit;\n"
          "checked: entries whose guards a call checked, on average (a hit at depth d checks d, a miss\n"
          "every entry); ms: the whole stream, its captures included.")


def format_us(us):
    if us >= 100:
        return f"{us:,.0f}"
    return f"{us:.1f}" if us >= 10 else f"{us:.2f}"


def plot(limit, count_calls, torch_compiles, regimes_by_size, device, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2),
                             gridspec_kw={"width_ratios": [1.5, 1, 1]})
    ax = axes[0]
    calls = [c["call"] for c in count_calls]
    compiles = [c["compiles"] for c in count_calls]
    warned_at = next((c["call"] for c in count_calls if c["limit_warnings"]), None)
    if warned_at is not None:
        ax.axvspan(warned_at - 0.5, calls[-1] + 0.5, color="#C44E52", alpha=0.10)
        ax.text((warned_at + calls[-1]) / 2, 1.0, "runs eagerly:\nno compiled code\nfor new sizes",
                ha="center", va="bottom", fontsize=9, color="#8B1A1A")
        ax.annotate(f"UserWarning at call {warned_at}:\n\"{LIMIT_WARNING} ({limit})\"",
                    xy=(warned_at, compiles[warned_at - 1]),
                    xytext=((warned_at + calls[-1]) / 2, limit + 2.3), ha="center", fontsize=9,
                    arrowprops={"arrowstyle": "->", "color": "black", "relpos": (0.5, 0.0)})
    ax.step(calls, compiles, where="mid", color="#4C72B0", linewidth=2)
    ax.plot(calls, compiles, "o", color="#4C72B0", markersize=10, markerfacecolor="white",
            markeredgewidth=1.5, label="mini (CompileCounter.frame_count)")
    if torch_compiles:
        ax.plot(calls[:len(torch_compiles)], torch_compiles[:len(calls)], "x", color="black",
                markersize=6, label="torch 2.11 (conformance record)")
    ax.axhline(limit, color="#C44E52", linestyle="--", linewidth=1)
    ax.text(0.7, limit + 0.15, f"cache_size_limit = {limit}", color="#C44E52", fontsize=9,
            va="bottom")
    ax.set_xlabel("call index (each call a new size of x)")
    ax.set_ylabel("compiles so far")
    ax.set_xticks(calls)
    ax.set_ylim(0, limit + 3.6)
    ax.set_xlim(0.5, calls[-1] + 0.5)
    ax.set_title(f"fn(x) = {EXPRESSION}, automatic dynamic off{device_title(device)}")
    ax.legend(loc="upper left", fontsize=8)

    for ax, (size_label, regimes) in zip(axes[1:], regimes_by_size.items()):
        values = [regimes[r]["us_per_call"] for r in REGIMES]
        bars = ax.bar(range(len(REGIMES)), values, color=[REGIME_COLORS[r] for r in REGIMES],
                      width=0.65)
        for bar, regime in zip(bars, REGIMES):
            r = regimes[regime]
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                    f"{format_us(r['us_per_call'])} us\n{r['kernel_launches']} kernel"
                    f"{'s' if r['kernel_launches'] != 1 else ''}",
                    ha="center", va="bottom", fontsize=9)
        ax.set_xticks(range(len(REGIMES)))
        ax.set_xticklabels(["cached\ncompiled", "past the limit\n(eager fallback)",
                            "plain eager\n(not compiled)"], fontsize=9)
        ax.set_ylim(0, max(values) * 1.3)
        ax.set_ylabel("time per call (us)")
        cached_n = regimes["cached compiled"]["n"]
        past_n = regimes["past the limit (eager)"]["n"]
        on_gpu = ", on cuda" if device == "cuda" else ""  # the GPU's name: the left title
        ax.set_title(f"{size_label} x, float32{on_gpu}, backend='inductor'\n"
                     f"n = {cached_n:,} (cached), {past_n:,} (the other two)", fontsize=10)

    fig.tight_layout()
    paths = save_figure(fig, out_dir, "cache_storm")
    plt.close(fig)
    return paths


def plot_policies(limit, policies, device, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(policies)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    panels = [("compiles", "compiles (the storm's cost)"),
              ("eager_calls", "calls run eagerly (past the limit)"),
              ("checked_per_call", "entries checked per call")]
    width = 0.8 / len(POLICIES)
    for ax, (key, title) in zip(axes, panels):
        for k, policy in enumerate(POLICIES):
            values = [policies[n]["policies"][policy].get(key, 0) for n in names]
            xs = [i + (k - (len(POLICIES) - 1) / 2) * width for i in range(len(names))]
            bars = ax.bar(xs, values, width, color=POLICY_COLORS[policy], label=policy)
            for bar, name in zip(bars, names):
                r = policies[name]["policies"][policy]
                label = "stub" if "error" in r else (f"{r[key]:.1f}" if key == "checked_per_call" else str(r[key]))
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), label,
                        ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([f"{n}\n({policies[n]['distinct_sizes']} sizes)" for n in names], fontsize=9)
        ax.set_title(title, fontsize=10)
        if key == "compiles":
            ax.axhline(limit, color="#C44E52", linestyle="--", linewidth=1)
            ax.text(-0.45, limit, f"limit {limit}", color="#C44E52", fontsize=8, va="bottom")
    axes[0].legend(title="cache_policy", fontsize=8)
    fig.suptitle(f"fn(x) = {EXPRESSION}, automatic dynamic off: the guard cache's policies"
                 f"{device_title(device)}", fontsize=11)
    fig.tight_layout()
    paths = save_figure(fig, out_dir, "cache_policies")
    plt.close(fig)
    return paths


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda":
        skip_without_cuda("cache_storm")
    large_base = QUICK_LARGE_BASE if args.quick else FULL_LARGE_BASE
    timing = {"small": (2000, 5), "large": (20, 5)} if args.quick else \
        {"small": (20000, 7), "large": (20, 7)}
    limit = mini.config.cache_size_limit
    state = machine_state()
    mini.manual_seed(0)

    with mini.config.patch(automatic_dynamic_shapes=False):
        count_sizes, count_calls = counting_storm(limit, args.device)
        storms, regimes_by_size = {}, {}
        for size_label, base in (("small", SMALL_BASE), ("large", large_base)):
            compiled, sizes, calls = inductor_storm(base, limit, args.device)
            storms[size_label] = {"sizes": sizes, "calls": calls}
            calls_per_sample, repeats = timing[size_label]
            regimes_by_size[size_label] = time_regimes(compiled, sizes, limit,
                                                       calls_per_sample, repeats, args.device)
        mini.reset()
        policies = compare_policies(args.device, args.stream)

    record = torch_record()
    torch_compiles = record["compiles_after_each_call"] if record else None
    print_storm(limit, count_calls, storms["small"]["calls"], torch_compiles, args.device)
    print_regimes(limit, regimes_by_size, args.device)
    print_policies(limit, policies)
    mini_compiles = [c["compiles"] for c in count_calls]
    if torch_compiles is not None:
        verdict = "the same" if mini_compiles == torch_compiles else "DIFFERENT"
        print(f"\ncompiles after each call: mini {mini_compiles}\n"
              f"                          torch 2.11 {torch_compiles}  ({verdict})")

    threads = state["OMP_NUM_THREADS"] or "unset"
    print(f"\nmachine: {state['cpus']} CPUs, OMP_NUM_THREADS {threads}, load average "
          f"{state['load_average_1min']} at the start (timings are noisy on a busy machine)")

    args.out.mkdir(parents=True, exist_ok=True)
    figure_paths = plot(limit, count_calls, torch_compiles, regimes_by_size, args.device,
                        args.out)
    figure_paths += plot_policies(limit, policies, args.device, args.out)
    warned_calls = [c["call"] for c in count_calls if c["limit_warnings"]]
    results = {
        "expression": EXPRESSION,
        **device_fields(args.device),
        "quick": args.quick,
        "cache_size_limit": limit,
        "automatic_dynamic_shapes": False,
        "counting_storm": {"backend": "mini.CompileCounter", "sizes": count_sizes,
                           "calls": count_calls},
        "compiles_after_each_call": mini_compiles,
        "warning_calls": warned_calls,
        "recompile_reasons": [reason for c in count_calls for reason in c["recompile_reasons"]],
        "inductor_storms": storms,
        "regimes": regimes_by_size,
        "policies": policies,
        "timing": "us per call: fastest of several runs of many back-to-back calls"
                  + (", each read after mini.cuda.synchronize()" if args.device == "cuda" else ""),
        "machine": state,
        "torch_2_11": ({"source": str(CONFORMANCE_FILE), **record} if record else None),
    }
    json_path = args.out / "cache_storm.json"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    print("\nwrote " + ", ".join(str(path) for path in figure_paths + [json_path]))


if __name__ == "__main__":
    main()
