"""Training steps: eager mini against the training graphs of "aot_eager" and "inductor".

    PYTHONPATH=build/python .venv/bin/python labs/bench/bench_training.py [--quick] [--json PATH]
        [--only REGEX] [--threads 1,2,4,8,16] [--profile] [--partitioner recompute|min-cut]

One step is a forward call that returns the loss and loss.backward(); gradients are checked
against eager's before anything is timed. For each workload it prints the time of a step
(the median of rounds that each time every backend once, after warm-up, and the spread), the kernels launched and the bytes they moved in
one step (mini.metrics), and the bytes the forward keeps alive for the backward (the
partitioner's saved intermediates, from MINI_LOGS=aot_graphs): save-all for aot_eager,
recompute for inductor, or min-cut with --partitioner min-cut (mini.config.partitioner).
aot_eager runs the same eager kernels as eager, op for op, through the interpreter, so its row
shows what the graphs cost; inductor's shows what fusion buys in the forward and the backward.
"""

import argparse
import io
import json
import re
import sys
import time
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np

import mini

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/, for programs.py and gpt.py
from programs import chain8, layernorm_decomp, softmax_decomp  # noqa: E402
from bench_inductor import describe_machine  # noqa: E402

BACKENDS = ("eager", "aot_eager", "inductor")


def chain8_loss(x, y):
    return chain8(x, y).sum()


def softmax_loss(x, w):
    return (softmax_decomp(x) * w).sum()


def layernorm_loss(x, w, b):
    return layernorm_decomp(x, w, b).sum()


def mlp_loss(x, w1, b1, w2, b2):
    return (mini.relu(x @ w1 + b1) @ w2 + b2).sum()


def mlp2_loss(x, y, w1, b1, w2, b2):
    """Issue 15's 2-layer MLP: 1024-wide layers, ReLU, a mean squared error."""
    return ((mini.relu(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()


def gpt_workload(quick):
    """labs/train_gpt.py's model (labs/gpt.py, written for torch) on a batch of tokens: a step is
    its forward (logits and the cross-entropy loss) and the loss's backward."""
    from gpt import GPT, Config
    if quick:
        config, batch = Config(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=32), 4
    else:
        config, batch = Config(block_size=64, vocab_size=106, n_layer=4, n_head=4, n_embd=128), 16
    mini.manual_seed(0)
    model = GPT(config)
    rng = np.random.default_rng(13)
    idx, targets = (mini.from_numpy(rng.integers(0, config.vocab_size, size=(batch, config.block_size)))
                    for _ in range(2))

    def loss(idx, targets, *params):  # the parameters are arguments: step_fn clears their grads
        return model(idx, targets)[1]
    shape = f"[{batch}, {config.block_size}] {config.n_layer}x{config.n_embd}"
    return ("gpt (labs/gpt.py)", shape, loss, lambda: (idx, targets, *model.parameters()))


def workloads(quick):
    rows, cols = (256, 256) if quick else (2048, 2048)
    batch, width = (64, 128) if quick else (512, 1024)

    def t(*shape, seed, grad=True):
        x = mini.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
        return x.requires_grad_() if grad else x

    return [
        ("chain8", f"[{rows}, {cols}]", chain8_loss,
         lambda: (t(rows, cols, seed=1), t(rows, cols, seed=2))),
        ("softmax (decomposed)", f"[{rows}, {cols}]", softmax_loss,
         lambda: (t(rows, cols, seed=3), t(rows, cols, seed=4, grad=False))),
        ("layer norm (decomposed)", f"[{rows}, {cols}]", layernorm_loss,
         lambda: (t(rows, cols, seed=5), t(cols, seed=6), t(cols, seed=7))),
        ("mlp relu(x@w1+b1)@w2+b2", f"[{batch}, {width}] x 2 layers", mlp_loss,
         lambda: (t(batch, width, seed=8, grad=False), t(width, width, seed=9), t(width, seed=10),
                  t(width, 1, seed=11), t(1, seed=12))),
        ("mlp 2 layers, MSE", f"[{batch // 2}, {width}] x {width} x {width}", mlp2_loss,
         lambda: (t(batch // 2, width, seed=13, grad=False), t(batch // 2, width, seed=14, grad=False),
                  scaled(t(width, width, seed=15, grad=False), width), t(width, seed=16),
                  scaled(t(width, width, seed=17, grad=False), width), t(width, seed=18))),
        gpt_workload(quick),
    ]


def scaled(w, fan_in):
    """w / sqrt(fan_in), a leaf that requires grad (an initialised layer's weight)."""
    return (w * fan_in ** -0.5).requires_grad_()


def step_fn(fn, inputs):
    def step():
        for a in inputs:
            if a.requires_grad:
                a.grad = None
        fn(*inputs).backward()
    return step


def grads_of(inputs):
    return [None if a.grad is None else a.grad.numpy().copy() for a in inputs]


def saved_bytes(fn, inputs, backend):
    """The partitioner's saved intermediates, read from its MINI_LOGS=aot_graphs line."""
    mini.reset()
    mini.set_logs("aot_graphs")
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            mini.compile(fn, backend=backend)(*inputs)
    finally:
        mini.set_logs()
        mini.reset()
    m = re.search(r"partitioner: (\S+), (\d+) values saved for backward \((\d+) bytes", err.getvalue())
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else (None, 0, 0)


def interleaved_ms(steps, rounds, warmup=2):
    """{name: (median, 25th, 75th percentile)} of one call of each step, in ms, sampled in rounds:
    each round times every step once, the order rotating from round to round. A machine that
    slows down or speeds up while it measures (another process, the clock, the OS moving threads)
    then weighs on every backend alike, not on whichever ran during that stretch: timed one
    backend after the other, two runs of the same eager kernels (eager and aot_eager on a
    matmul-bound MLP) differed by 13% on 2 cores and by 35% on 16."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    names = list(steps)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            steps[name]()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: tuple(float(np.percentile(t, q)) for q in (50, 25, 75)) for name, t in times.items()}


def measure(name, shape, fn, make, samples, backends=BACKENDS):
    inputs = make()
    step_fn(fn, inputs)()
    expected = grads_of(inputs)
    row = {"workload": name, "shape": shape, "backends": {}}
    steps = {}
    for backend in backends:
        run = fn if backend == "eager" else mini.compile(fn, backend=backend)
        step = steps[backend] = step_fn(run, inputs)
        step()
        for e, g in zip(expected, grads_of(inputs)):
            if e is not None and not np.allclose(g, e, rtol=1e-4, atol=1e-4):
                raise SystemExit(f"{name}: {backend} gradient differs from eager (max |diff| "
                                 f"{np.max(np.abs(g - e)):.3g}); not timing a wrong result")
    timed = interleaved_ms(steps, samples)
    for backend in backends:
        mini.metrics.reset()
        steps[backend]()
        ms, p25, p75 = timed[backend]
        entry = {"ms": ms, "ms_p25": p25, "ms_p75": p75, "launches": mini.metrics.kernel_launches,
                 "bytes": mini.metrics.bytes_moved}
        row["backends"][backend] = entry
    if backends == BACKENDS:
        for backend in backends[1:]:
            entry = row["backends"][backend]
            entry["partitioner"], entry["saved_values"], entry["saved_bytes"] = saved_bytes(fn, inputs, backend)
    eager = row["backends"]["eager"]["ms"]
    for entry in row["backends"].values():
        entry["speedup"] = eager / entry["ms"]
    return row


GPT_BAR = 1.3  # the GPT step compiled against eager, on the CPU


def check_bars(rows):
    """(description, holds) for each bar: the inductor training step at least as fast as eager on
    every workload, and the GPT's at least GPT_BAR times as fast."""
    bars = []
    for row in rows:
        speedup = row["backends"]["inductor"]["speedup"]
        need = GPT_BAR if row["workload"].startswith("gpt") else 1.0
        bars.append((f"{row['workload']}: compiled step >= {need:.1f}x eager (measured {speedup:.2f}x)", speedup >= need))
    return bars


def thread_sweep(selected, counts, samples):
    """Each selected workload's eager and inductor step at each thread count (mini.set_num_threads:
    mini's kernels, the generated ones and OpenBLAS share libgomp's pool), in this process."""
    print(f"{'workload':26s}{'threads':>8s}{'eager ms':>10s}{'compiled ms':>13s}{'speedup':>9s}")
    sweep = []
    start = mini.get_num_threads()
    try:
        for name, shape, fn, make in selected:
            for n in counts:
                mini.set_num_threads(n)
                mini.reset()
                row = measure(name, shape, fn, make, samples, backends=("eager", "inductor"))
                e, c = row["backends"]["eager"]["ms"], row["backends"]["inductor"]["ms"]
                print(f"{name:26s}{n:8d}{e:10.2f}{c:13.2f}{e / c:8.2f}x", flush=True)
                sweep.append({"workload": name, "shape": shape, "threads": n, "eager_ms": e, "inductor_ms": c})
    finally:
        mini.set_num_threads(start)
    return sweep


def profile_compiled(selected, steps=3):
    """mini.profiler's table of each selected workload's inductor step (after a warm-up step)."""
    for name, shape, fn, make in selected:
        inputs = make()
        mini.reset()
        step = step_fn(mini.compile(fn, backend="inductor"), inputs)
        step()
        with mini.profiler.profile() as prof:
            for _ in range(steps):
                step()
        print(f"\n{name} {shape}, inductor, {steps} steps, {mini.get_num_threads()} threads:")
        print(prof.table(limit=12))


def spread(entry):
    """The interquartile range of a backend's step times, as a share of their median."""
    return f"{(entry['ms_p75'] - entry['ms_p25']) / entry['ms']:.0%}"


def mib(n):
    return f"{n / 2**20:.1f} MiB"


def main(argv=None):
    parser = argparse.ArgumentParser(description="training steps: eager vs aot_eager vs inductor")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--only", metavar="REGEX", help="only the workloads whose name matches (re.search)")
    parser.add_argument("--profile", action="store_true",
                        help="also print where the compiled step's time goes (mini.profiler), step by step")
    parser.add_argument("--partitioner", choices=("recompute", "min-cut"), default=mini.config.partitioner,
                        help="how inductor splits the training graphs (mini.config.partitioner)")
    parser.add_argument("--threads", metavar="N,N,...",
                        help="instead of the table: eager and inductor at each of these thread counts")
    args = parser.parse_args(argv)
    mini.config.partitioner = args.partitioner
    samples = 3 if args.quick else 15
    selected = [w for w in workloads(args.quick) if args.only is None or re.search(args.only, w[0])]
    if not selected:
        parser.error(f"--only {args.only!r} matches no workload (they are: "
                     f"{', '.join(w[0] for w in workloads(True))})")
    machine = describe_machine()
    print(f"{machine['cpu']}, {machine['cpu_count']} CPUs, Python {machine['python']}, "
          f"OpenBLAS core {machine['openblas_core']}, load average {machine['loadavg_start'][0]:.2f}")
    print(f"one step = forward (returns the loss) + loss.backward(); float32; median of {samples} "
          f"rounds, each timing every backend once (the order rotating)\n")
    if args.threads:
        try:
            counts = [int(n) for n in args.threads.split(",")]
        except ValueError:
            parser.error(f"--threads expects comma-separated counts such as 1,2,4, got {args.threads!r}")
        sweep = thread_sweep(selected, counts, samples)
        if args.profile:
            profile_compiled(selected)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"machine": machine, "quick": args.quick, "thread_sweep": sweep},
                                            indent=2) + "\n")
            print(f"wrote {args.json}")
        return 0
    rows = [measure(name, shape, fn, make, samples) for name, shape, fn, make in selected]

    header = f"{'workload':26s}{'shape':27s}{'backend':11s}{'step ms':>9s}{'IQR':>7s}{'speedup':>9s}{'kernels':>9s}" \
             f"{'bytes moved':>13s}   saved for backward"
    print(header)
    print("-" * len(header))
    for row in rows:
        for i, (backend, e) in enumerate(row["backends"].items()):
            saved = "-" if backend == "eager" else f"{e['saved_values']} values, {mib(e['saved_bytes'])} ({e['partitioner']})"
            print(f"{row['workload'] if i == 0 else '':26s}{row['shape'] if i == 0 else '':27s}{backend:11s}"
                  f"{e['ms']:9.3f}{spread(e):>7s}{e['speedup']:8.2f}x{e['launches']:9d}{mib(e['bytes']):>13s}   {saved}")
    print("\nIQR: the middle half of the rounds' times, as a share of the median (the noise to read a"
          "\nspeedup against);"
          "\nkernels and bytes: one step, as mini.metrics counts them (extern matmuls included);"
          "\nsaved: intermediates the forward keeps for the backward (inputs excluded: they are alive anyway).")
    if args.profile:
        profile_compiled(selected)
    print(f"\nbars (issue 15, this run, {machine['cpu_count']} CPUs):")
    bars = check_bars(rows)
    for what, ok in bars:
        print(f"  {'PASS' if ok else 'FAIL'}  {what}")
    print(f"{sum(ok for _, ok in bars)} of {len(bars)} bars hold")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine, "quick": args.quick, "rows": rows,
                                         "bars": [{"bar": w, "pass": ok} for w, ok in bars]}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
