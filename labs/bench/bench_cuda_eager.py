"""Eager CUDA: mini's eager kernels against torch's eager kernels, in one run on one GPU.

    PYTHONPATH=build/python python labs/bench/bench_cuda_eager.py [--quick] [--out DIR]

Times, with CUDA events (median of --repeats timed calls after --warmup untimed ones), every
pointwise op (unary, binary with comparisons, a scalar operand, where), sum / amax / mean over
rows and over all elements, softmax, log_softmax and layer_norm on 2^28 float32 and bfloat16
elements (--quick: 2^20), a clone (the copy ceiling: bytes read + written / time, the faster of
mini's and torch's clone, measured in the same run), matmul 4096^3 in bfloat16 and float32
(TFLOP/s), and the host overhead of a 1-element add (wall time per op over many calls, one
synchronize at the end). torch runs the same ops on the same values beside mini where it
imports; each row also checks that the two results agree (on a strided sample).

The bars (issue 12): each pointwise op at >= 85% of the copy ceiling and within 1.1x of torch;
reductions, softmax, log_softmax, layer_norm within 1.1x of torch; matmul within 1.05x (both
call cuBLAS); the host overhead per op no more than torch's. GB/s counts the least a kernel
must move: each input read once, the output written once.

Writes bench_cuda_eager.json and bench_cuda_eager.md (the table, with date and device, for
notes/perf.md) into --out (default: figures/). Exit status 0 when the run completed: the
table and its last line ("bars: N of M PASS") say which bars hold. Without a GPU (or with
a mini built without CUDA) it prints "bench_cuda_eager: skipped: no CUDA device (...)" and
exits 0, so that labs/run_all-style loops and CPU-only CI treat it as a skip, not a failure;
scripts/gpu_cuda.sh checks for a GPU before it runs it.
"""

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mini

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/, for measure.py
from measure import REPO_ROOT, cuda_ms, cuda_torch, cuda_unavailable_reason  # noqa: E402

POINTWISE_COPY_BAR = 0.85   # of the copy ceiling
POINTWISE_TORCH_BAR = 1.10  # mini / torch
REDUCTION_TORCH_BAR = 1.10
MATMUL_TORCH_BAR = 1.05
OVERHEAD_TORCH_BAR = 1.00
BYTES = {"float32": 4, "bfloat16": 2, "bool": 1}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2^20 elements and 512^3 matmuls instead of 2^28 and 4096^3")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for bench_cuda_eager.json / .md (default: figures/)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per op (median)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing")
    parser.add_argument("--no-torch", action="store_true", help="time mini alone")
    return parser.parse_args(argv)


def sizes(quick):
    if quick:
        return {"numel": 2**20, "cols": 1024, "matmul": 512, "overhead_calls": 2000}
    return {"numel": 2**28, "cols": 4096, "matmul": 4096, "overhead_calls": 20000}


# ---- timing ---------------------------------------------------------------------------------


def median_ms(cuda, run, warmup, repeats):
    """Median GPU time of run() in ms (CUDA events; `cuda` is mini.cuda or torch.cuda)."""
    return cuda_ms(cuda, run, repeats, warmup=warmup, reduce=statistics.median)


def host_us_per_op(cuda, run, calls, samples=5):
    """Wall time per call of run() over `calls` back-to-back calls and one synchronize at the
    end (the launch overhead when the kernel itself is tiny), median of `samples`, in µs."""
    for _ in range(100):
        run()
    cuda.synchronize()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        cuda.synchronize()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


# ---- the ops --------------------------------------------------------------------------------
# Each op is (name, kind, run(lib, inputs), bytes(numel, rows, cols, itemsize)); lib is mini or
# torch, inputs the same-valued tensors of that library (Inputs below).

UNARY = ["neg", "abs", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "sqrt", "rsqrt"]
POSITIVE = {"log", "sqrt", "rsqrt"}  # run on x.abs() + 0.5
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]


def gelu(lib, x):
    return mini.gelu(x) if lib is mini else lib.nn.functional.gelu(x)


def layer_norm(lib, x, w, b):
    cols = x.shape[-1]
    if lib is mini:
        return mini.layer_norm(x, (cols,), w, b)
    return lib.nn.functional.layer_norm(x, (cols,), w, b)


def op_table():
    ops = []
    for name in UNARY:
        source = "positive" if name in POSITIVE else "x"
        ops.append((name, "pointwise",
                    lambda lib, t, name=name, source=source: getattr(lib, name)(t[source]),
                    lambda n, r, c, s: 2 * n * s))
    ops.append(("gelu", "pointwise", lambda lib, t: gelu(lib, t["x"]),
                lambda n, r, c, s: 2 * n * s))
    for name in BINARY:
        source = "positive" if name == "pow" else "x"
        ops.append((name, "pointwise",
                    lambda lib, t, name=name, source=source: getattr(lib, name)(t[source], t["y"]),
                    lambda n, r, c, s: 3 * n * s))
    for name in COMPARISONS:
        ops.append((name, "pointwise", lambda lib, t, name=name: getattr(lib, name)(t["x"], t["y"]),
                    lambda n, r, c, s: 2 * n * s + n))
    ops += [
        ("mul scalar 2.5", "pointwise", lambda lib, t: t["x"] * 2.5,
         lambda n, r, c, s: 2 * n * s),
        ("where", "pointwise", lambda lib, t: lib.where(t["cond"], t["x"], t["y"]),
         lambda n, r, c, s: n + 3 * n * s),
    ]
    for name in ("sum", "amax", "mean"):
        ops.append((f"{name} rows", "reduction",
                    lambda lib, t, name=name: getattr(t["rows"], name)(-1),
                    lambda n, r, c, s: n * s + r * s))
        ops.append((f"{name} all", "reduction", lambda lib, t, name=name: getattr(t["x"], name)(),
                    lambda n, r, c, s: n * s + s))
    ops += [
        ("softmax", "reduction", lambda lib, t: t["rows"].softmax(-1),
         lambda n, r, c, s: 2 * n * s),
        ("log_softmax", "reduction", lambda lib, t: t["rows"].log_softmax(-1),
         lambda n, r, c, s: 2 * n * s),
        ("layer_norm", "reduction", lambda lib, t: layer_norm(lib, t["rows"], t["w"], t["b"]),
         lambda n, r, c, s: 2 * n * s + 2 * c * s),
    ]
    return ops


class Inputs(dict):
    """x, y (standard normal), positive (|x| + 0.5), cond (x > 0), rows (x as [rows, cols]),
    w, b ([cols]) of one library and dtype."""


def make_inputs(torch, dtype, numel, cols):
    """(mini inputs, torch inputs or None) holding the same values. torch makes the random
    values where it runs (fast), and they reach mini through the host; both sides convert
    float32 to bfloat16 the same way (nearest, ties to even)."""
    if torch is not None:
        torch.manual_seed(0)
        made = {k: torch.randn(shape, device="cuda")
                for k, shape in (("x", numel), ("y", numel), ("w", cols), ("b", cols))}
        as_mini = {k: mini.from_numpy(v.cpu().numpy()).cuda() for k, v in made.items()}
    else:
        mini.manual_seed(0)
        as_mini = {k: mini.randn(shape, device="cuda")
                   for k, shape in (("x", numel), ("y", numel), ("w", cols), ("b", cols))}
        made = None
    sides = [(mini, as_mini)] + ([(torch, made)] if made is not None else [])
    result = []
    for lib, tensors in sides:
        if dtype == "bfloat16":
            tensors = {k: v.to(lib.bfloat16) for k, v in tensors.items()}
        t = Inputs(tensors)
        t["positive"] = t["x"].abs() + 0.5
        t["cond"] = t["x"] > 0
        t["rows"] = t["x"].view(numel // cols, cols)
        result.append(t)
    return result[0], (result[1] if len(result) > 1 else None)


def sample(out, count=4096):
    """A strided sample of a result (mini or torch) as a numpy array on the host: floating
    results as float32, bool as bool."""
    flat = out.reshape(-1)
    part = flat[::max(1, flat.shape[0] // count)]
    if part.is_floating_point():
        part = part.float()
    return part.cpu().numpy()


def agree(row, out_mini, out_torch, dtype, kind):
    """Whether the two results agree on a strided sample; None (and the row's check_error)
    when the check itself fails, so that the timing is still reported."""
    try:
        return _agree(out_mini, out_torch, dtype, kind)
    except Exception as error:  # noqa: BLE001 - any failure of the check is reported, not fatal
        row["check_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:150]}"
        return None


def _agree(out_mini, out_torch, dtype, kind):
    got, want = sample(out_mini), sample(out_torch)
    if got.shape != want.shape:
        return False
    if got.dtype == np.bool_ or want.dtype == np.bool_:
        return bool(np.mean(got != want) < 1e-4)  # ties of x == y are rare but allowed
    rtol = 2e-2 if dtype == "bfloat16" else (1e-3 if kind == "reduction" else 1e-4)
    return bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                            atol=rtol, equal_nan=True))


# ---- measuring ------------------------------------------------------------------------------


def measure_copy(torch, mini_inputs, torch_inputs, dtype, numel, args):
    moved = 2 * numel * BYTES[dtype]
    row = {"op": "clone (copy ceiling)", "kind": "copy", "dtype": dtype, "bytes": moved}
    row["mini_ms"] = median_ms(mini.cuda, mini_inputs["x"].clone, args.warmup, args.repeats)
    row["mini_GBps"] = moved / (row["mini_ms"] * 1e-3) / 1e9
    ceiling = row["mini_GBps"]
    if torch_inputs is not None:
        row["torch_ms"] = median_ms(torch.cuda, torch_inputs["x"].clone, args.warmup,
                                    args.repeats)
        row["torch_GBps"] = moved / (row["torch_ms"] * 1e-3) / 1e9
        ceiling = max(ceiling, row["torch_GBps"])
    row["ceiling_GBps"] = ceiling
    return row


def verdict(row, has_torch):
    if row.get("error"):
        return "FAIL (mini raised)"
    if row.get("same_result") is False:
        return "FAIL (result differs from torch)"
    ratio = row.get("ratio")
    kind = row["kind"]
    if kind == "pointwise":
        ok = row["copy_fraction"] >= POINTWISE_COPY_BAR
        if has_torch:
            ok = ok and ratio <= POINTWISE_TORCH_BAR
        return "PASS" if ok else "FAIL"
    if not has_torch:
        return "n/a (no torch)"
    bar = {"reduction": REDUCTION_TORCH_BAR, "matmul": MATMUL_TORCH_BAR,
           "overhead": OVERHEAD_TORCH_BAR}[kind]
    return "PASS" if ratio <= bar else "FAIL"


def bar_text(kind, has_torch):
    if kind == "pointwise":
        return (f">={POINTWISE_COPY_BAR:.0%} copy" +
                (f", <={POINTWISE_TORCH_BAR}x" if has_torch else ""))
    return {"reduction": f"<={REDUCTION_TORCH_BAR}x", "matmul": f"<={MATMUL_TORCH_BAR}x",
            "overhead": "<=torch", "copy": "-"}[kind]


def measure_op(torch, op, mini_inputs, torch_inputs, dtype, shape, ceiling, args):
    name, kind, run, nbytes = op
    numel, rows, cols = shape
    size = BYTES[dtype]
    row = {"op": name, "kind": kind, "dtype": dtype, "bytes": nbytes(numel, rows, cols, size)}
    try:
        out_mini = run(mini, mini_inputs)
        row["mini_ms"] = median_ms(mini.cuda, lambda: run(mini, mini_inputs), args.warmup,
                                   args.repeats)
    except RuntimeError as error:  # an op mini cannot run on CUDA yet: the row says so
        row["error"] = str(error).split("\n")[0][:200]
        return row
    row["GBps"] = row["bytes"] / (row["mini_ms"] * 1e-3) / 1e9
    row["copy_fraction"] = row["GBps"] / ceiling
    if torch_inputs is not None:
        out_torch = run(torch, torch_inputs)
        row["same_result"] = agree(row, out_mini, out_torch, dtype, kind)
        row["torch_ms"] = median_ms(torch.cuda, lambda: run(torch, torch_inputs), args.warmup,
                                    args.repeats)
        row["torch_GBps"] = row["bytes"] / (row["torch_ms"] * 1e-3) / 1e9
        row["ratio"] = row["mini_ms"] / row["torch_ms"]
    return row


def measure_matmul(torch, dtype, k, args):
    row = {"op": f"matmul {k}^3", "kind": "matmul", "dtype": dtype, "flops": 2 * k**3}
    try:
        mini.manual_seed(0)
        a = mini.randn(k, k, device="cuda").to(getattr(mini, dtype))
        b = mini.randn(k, k, device="cuda").to(getattr(mini, dtype))
        out_mini = a @ b
        row["mini_ms"] = median_ms(mini.cuda, lambda: a @ b, args.warmup, args.repeats)
    except RuntimeError as error:
        row["error"] = str(error).split("\n")[0][:200]
        return row
    row["TFLOPs"] = row["flops"] / (row["mini_ms"] * 1e-3) / 1e12
    if torch is not None:
        ta = torch.from_numpy(a.float().cpu().numpy()).cuda().to(getattr(torch, dtype))
        tb = torch.from_numpy(b.float().cpu().numpy()).cuda().to(getattr(torch, dtype))
        row["same_result"] = agree(row, out_mini, ta @ tb, dtype, "reduction")
        row["torch_ms"] = median_ms(torch.cuda, lambda: ta @ tb, args.warmup, args.repeats)
        row["torch_TFLOPs"] = row["flops"] / (row["torch_ms"] * 1e-3) / 1e12
        row["ratio"] = row["mini_ms"] / row["torch_ms"]
    return row


def measure_overhead(torch, calls):
    row = {"op": "add [1] (host overhead)", "kind": "overhead", "dtype": "float32"}
    a = mini.ones(1, device="cuda")
    row["mini_us"] = host_us_per_op(mini.cuda, lambda: a + a, calls)
    if torch is not None:
        t = torch.ones(1, device="cuda")
        row["torch_us"] = host_us_per_op(torch.cuda, lambda: t + t, calls)
        row["ratio"] = row["mini_us"] / row["torch_us"]
    return row


def measure_allocator(torch, calls):
    """What the caching allocator saves: a 4 MiB device tensor made and dropped, served from
    the cache, against the same with the cache emptied after each drop (so each one is a
    cudaMalloc and a cudaFree, as without a caching allocator). Host µs per tensor; torch's
    allocator measured the same way beside it."""
    rows = []
    n = 1 << 20  # float32: 4 MiB, a large-pool block
    for label, empty_after in (("cached", False), ("cudaMalloc+cudaFree", True)):
        row = {"op": f"empty 4 MiB, {label}", "kind": "alloc", "dtype": "float32"}
        count = calls if not empty_after else max(50, calls // 100)

        def run(lib, empty_after=empty_after):
            t = lib.empty(n, device="cuda")
            del t
            if empty_after:
                lib.cuda.empty_cache()
        row["mini_us"] = host_us_per_op(mini.cuda, lambda: run(mini), count)
        if torch is not None:
            row["torch_us"] = host_us_per_op(torch.cuda, lambda: run(torch), count)
            row["ratio"] = row["mini_us"] / row["torch_us"]
        rows.append(row)
    return rows


def empty_caches(torch):
    mini.cuda.synchronize()
    mini.cuda.empty_cache()
    if torch is not None:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def device_name(torch):
    if torch is not None:
        return torch.cuda.get_device_name(0)
    name = getattr(mini.cuda, "get_device_name", None)
    return name(0) if name else "cuda:0"


# ---- reporting ------------------------------------------------------------------------------


def cells(row):
    """(mini, torch, ratio, rate, % copy) as text for one row."""
    def ms(key):
        return f"{row[key]:.3f}" if key in row else "-"
    ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "-"
    if row["kind"] in ("overhead", "alloc"):
        mini_text = f"{row['mini_us']:.2f} us"
        torch_text = f"{row['torch_us']:.2f} us" if "torch_us" in row else "-"
        return mini_text, torch_text, ratio, "-", "-"
    if row["kind"] == "matmul":
        rate = f"{row['TFLOPs']:.1f} TFLOP/s" if "TFLOPs" in row else "-"
        return ms("mini_ms"), ms("torch_ms"), ratio, rate, "-"
    if row["kind"] == "copy":
        return (ms("mini_ms"), ms("torch_ms"), "-", f"{row['ceiling_GBps']:.0f} GB/s", "100%")
    rate = f"{row['GBps']:.0f} GB/s" if "GBps" in row else "-"
    copy = f"{100 * row['copy_fraction']:.0f}%" if "copy_fraction" in row else "-"
    return ms("mini_ms"), ms("torch_ms"), ratio, rate, copy


HEADER = ["op", "dtype", "mini ms", "torch ms", "mini/torch", "rate", "% copy", "bar", "verdict"]


def table_rows(rows):
    return [[row["op"], row["dtype"], *cells(row), row["bar"], row["verdict"]] for row in rows]


def print_table(rows):
    body = table_rows(rows)
    widths = [max(len(str(r[i])) for r in body + [HEADER]) for i in range(len(HEADER))]
    line = "  ".join(f"{h:<{w}}" for h, w in zip(HEADER, widths))
    print(line)
    print("-" * len(line))
    for r in body:
        print("  ".join(f"{str(c):<{w}}" for c, w in zip(r, widths)))
    for row in rows:
        for key in ("error", "check_error"):
            if row.get(key):
                print(f"  {row['op']} {row['dtype']}: {key}: {row[key]}")


def markdown(report):
    lines = [f"bench_cuda_eager, {report['date']}, {report['device']}, "
             f"{report['numel']:,} elements, torch {report['torch'] or '(not run)'}; "
             f"median of {report['repeats']} calls (CUDA events)", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in table_rows(report["rows"])]
    lines += ["", report["summary"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    reason = cuda_unavailable_reason()
    if reason:
        print(f"bench_cuda_eager: skipped: no CUDA device ({reason})")
        return 0
    torch, why_not = cuda_torch(not args.no_torch)
    if torch is None:
        print(f"note: torch is not run beside mini: {why_not}; only the copy-ceiling bars apply")
    size = sizes(args.quick)
    numel, cols = size["numel"], size["cols"]
    shape = (numel, numel // cols, cols)
    print(f"device {device_name(torch)}, {numel:,} elements ([{numel // cols}, {cols}] for the "
          f"row ops), median of {args.repeats} calls after {args.warmup} warm-up calls\n",
          flush=True)

    rows = []
    ceilings = {}
    for dtype in ("float32", "bfloat16"):
        if dtype == "bfloat16" and getattr(mini, "bfloat16", None) is None:
            print("note: mini has no bfloat16: its rows are skipped")
            continue
        mini_inputs, torch_inputs = make_inputs(torch, dtype, numel, cols)
        copy = measure_copy(torch, mini_inputs, torch_inputs, dtype, numel, args)
        ceilings[dtype] = copy["ceiling_GBps"]
        rows.append(copy)
        for op in op_table():
            rows.append(measure_op(torch, op, mini_inputs, torch_inputs, dtype, shape,
                                   copy["ceiling_GBps"], args))
            print(f"  {rows[-1]['op']} {dtype}: "
                  f"{rows[-1].get('mini_ms', float('nan')):.3f} ms", flush=True)
        del mini_inputs, torch_inputs
        empty_caches(torch)
        rows.append(measure_matmul(torch, dtype, size["matmul"], args))
        empty_caches(torch)
    rows.append(measure_overhead(torch, size["overhead_calls"]))
    empty_caches(torch)
    allocator_rows = measure_allocator(torch, size["overhead_calls"])

    for row in rows:
        row["bar"] = bar_text(row["kind"], torch is not None)
        row["verdict"] = "-" if row["kind"] == "copy" else verdict(row, torch is not None)
    for row in allocator_rows:  # no bar: what the cache is for
        row["bar"], row["verdict"] = "-", "-"
    rows += allocator_rows
    print()
    print_table(rows)
    judged = [row for row in rows if row["verdict"] in ("PASS",) or
              row["verdict"].startswith("FAIL")]
    passed = sum(row["verdict"] == "PASS" for row in judged)
    summary = f"bars: {passed} of {len(judged)} PASS"
    print(f"\n{summary}")

    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": device_name(torch),
        "python": platform.python_version(),
        "torch": torch.__version__ if torch is not None else None,
        "quick": args.quick, "numel": numel, "cols": cols, "repeats": args.repeats,
        "warmup": args.warmup, "copy_ceiling_GBps": ceilings,
        "bars": {"pointwise_copy": POINTWISE_COPY_BAR, "pointwise_torch": POINTWISE_TORCH_BAR,
                 "reduction_torch": REDUCTION_TORCH_BAR, "matmul_torch": MATMUL_TORCH_BAR,
                 "overhead_torch": OVERHEAD_TORCH_BAR},
        "summary": summary, "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_cuda_eager.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "bench_cuda_eager.md").write_text(markdown(report))
    print(f"wrote {args.out / 'bench_cuda_eager.json'}, {args.out / 'bench_cuda_eager.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
