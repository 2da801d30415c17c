"""Attention on the GPU: mini's eager F.scaled_dot_product_attention (FlashAttention-2 on the
tensor cores, head dim 64 or 128: mini/tensor/cuda/flash_attention.cu for bfloat16,
flash_attention_f32.cu for float32 as three TF32 products a product) against torch's
F.scaled_dot_product_attention (its flash or cuDNN kernel for bfloat16, its memory-efficient
kernel for float32), in one process on one GPU.

    PYTHONPATH=build/python python labs/bench/bench_attention.py [--out DIR] [--repeats N] [--dtypes ...]

Shapes (batch, heads, L, D) = (8, 12, 1024, 64) and (8, 12, 1024, 128), bfloat16 and float32
(--dtypes), causal and not; for each, the forward alone and the forward + backward (the gradient of q, k and v for a
fixed incoming gradient), each timed with CUDA events, the median of --repeats calls after
--warmup untimed ones; mini's and torch's timings alternate over --rounds rounds and each keeps
its best round (torch's own time moved by 15% between two runs on one machine otherwise). TFLOP/s counts the matrix products a causal-aware kernel must do:
forward 4 B H L S D (Q K^T and P V), halved when causal; backward 2.5 times the forward (five
products, as FlashAttention's papers count it). mini's output and gradients are checked against
torch's on the same values before timing (relative error, printed).

The bar (issue 32): forward + backward within 1.25x of torch's time on (8, 12, 1024, 64) causal.
Writes bench_attention.json and bench_attention.md (the table, with date and device) into --out
(default figures/cuda/). Without a GPU it prints "bench_attention: skipped: no CUDA device (...)"
and exits 0.
"""

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

import numpy as np

import mini
import mini.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/, for measure.py
from measure import REPO_ROOT, cuda_ms, cuda_torch, cuda_unavailable_reason  # noqa: E402

BAR = 1.25  # mini / torch, forward + backward, (8, 12, 1024, 64) causal
BAR_CASE = ((8, 12, 1024, 64), True)
SHAPES = [(8, 12, 1024, 64), (8, 12, 1024, 128)]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures" / "cuda",
                        help="folder for bench_attention.json / .md (default: figures/cuda/)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per case (median)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of mini and torch (best kept)")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float32"])
    return parser.parse_args(argv)


def flops(shape, causal, backward):
    b, h, n, d = shape
    fwd = 4 * b * h * n * n * d / (2 if causal else 1)
    return fwd * (3.5 if backward else 1.0)


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def torch_case(torch, arrays, causal, dtype):
    q, k, v, g = (torch.tensor(a, device="cuda").to(getattr(torch, dtype)) for a in arrays)
    qkv = [t.requires_grad_() for t in (q, k, v)]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fwd():
        with torch.no_grad():
            return sdpa(*qkv, is_causal=causal)

    def fwd_bwd():
        out = sdpa(*qkv, is_causal=causal)
        return torch.autograd.grad(out, qkv, g)

    out = sdpa(*qkv, is_causal=causal)
    grads = torch.autograd.grad(out, qkv, g)
    values = [t.float().cpu().numpy() for t in (out.detach(), *grads)]
    return fwd, fwd_bwd, values


def mini_case(arrays, causal, dtype):
    q, k, v, g = (mini.tensor(a, dtype=getattr(mini, dtype), device="cuda") for a in arrays)
    qkv = [t.requires_grad_() for t in (q, k, v)]

    def fwd():
        with mini.no_grad():
            return F.scaled_dot_product_attention(*qkv, is_causal=causal)

    def fwd_bwd():
        for t in qkv:
            t.grad = None
        F.scaled_dot_product_attention(*qkv, is_causal=causal).backward(g)

    out = F.scaled_dot_product_attention(*qkv, is_causal=causal)
    out.backward(g)
    values = [np.array(t.float().tolist(), np.float32) for t in (out.detach(), *(t.grad for t in qkv))]
    return fwd, fwd_bwd, values


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    reason = cuda_unavailable_reason()
    if reason:
        print(f"bench_attention: skipped: no CUDA device ({reason})", flush=True)
        return 0
    torch, why = cuda_torch()
    if torch is None:
        print(f"bench_attention: torch is not here ({why}): mini alone", flush=True)
    rows = []
    for dtype, shape, causal in ((d, s, c) for d in args.dtypes for s in SHAPES for c in (False, True)):
        rng = np.random.default_rng(len(rows))
        arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
        m_fwd, m_both, m_vals = mini_case(arrays, causal, dtype)
        runs = {"mini": (mini.cuda, m_fwd, m_both)}
        errors = {}
        if torch is not None:
            t_fwd, t_both, t_vals = torch_case(torch, arrays, causal, dtype)
            runs["torch"] = (torch.cuda, t_fwd, t_both)
            errors = {name: rel_err(a, b) for name, a, b in zip(("out", "dq", "dk", "dv"), m_vals, t_vals)}
        times = {who: (float("inf"), float("inf")) for who in runs}
        for _ in range(args.rounds):
            for who, (cuda, fwd, both) in runs.items():
                f_ms = cuda_ms(cuda, fwd, args.repeats, args.warmup, statistics.median)
                fb_ms = cuda_ms(cuda, both, args.repeats, args.warmup, statistics.median)
                times[who] = (min(times[who][0], f_ms), min(times[who][1], fb_ms))
        row = {"dtype": dtype, "shape": list(shape), "causal": causal, "errors_vs_torch": errors}
        for who, (f_ms, fb_ms) in times.items():
            row[who] = {"fwd_ms": f_ms, "fwd_bwd_ms": fb_ms,
                        "fwd_tflops": flops(shape, causal, False) / f_ms / 1e9,
                        "fwd_bwd_tflops": flops(shape, causal, True) / fb_ms / 1e9}
        rows.append(row)
        print_row(row, flush=True)
    device = mini.cuda.get_device_name(0)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    bar = verdict(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_attention.json").write_text(json.dumps(
        {"device": device, "date": date, "repeats": args.repeats, "rows": rows, "bar": bar}, indent=1))
    table = markdown(rows, device, date)
    (args.out / "bench_attention.md").write_text(table + f"\n{bar}\n")
    print(table)
    print(bar)
    return 0


def label(row):
    return f"{row['dtype']:8} {tuple(row['shape'])} {'causal' if row['causal'] else 'full  '}"


def print_row(row, flush=False):
    parts = [label(row)]
    for who in ("mini", "torch"):
        if who in row:
            r = row[who]
            parts.append(f"{who} fwd {r['fwd_ms']:.3f} ms {r['fwd_tflops']:.0f} TFLOP/s, "
                         f"fwd+bwd {r['fwd_bwd_ms']:.3f} ms {r['fwd_bwd_tflops']:.0f} TFLOP/s")
    if row["errors_vs_torch"]:
        parts.append("rel err vs torch " + " ".join(f"{k} {v:.1e}" for k, v in row["errors_vs_torch"].items()))
    print(" | ".join(parts), flush=flush)


def markdown(rows, device, date):
    lines = [f"Attention, {device}, {date} (TFLOP/s; time in ms; mini / torch: time ratio)", "",
             "| dtype | shape (B, H, L, D) | mask | mini fwd | torch fwd | fwd ratio | mini fwd+bwd | torch fwd+bwd | fwd+bwd ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        m, t = row["mini"], row.get("torch")

        def cell(r, key):
            return f"{r[key + '_tflops']:.0f} ({r[key + '_ms']:.3f})" if r else "-"

        def ratio(key):
            return f"{m[key + '_ms'] / t[key + '_ms']:.2f}x" if t else "-"
        lines.append(f"| {row['dtype']} | {tuple(row['shape'])} | {'causal' if row['causal'] else 'none'} | {cell(m, 'fwd')} | "
                     f"{cell(t, 'fwd')} | {ratio('fwd')} | {cell(m, 'fwd_bwd')} | {cell(t, 'fwd_bwd')} | "
                     f"{ratio('fwd_bwd')} |")
    return "\n".join(lines)


def verdict(rows):
    for row in rows:
        if (tuple(row["shape"]), row["causal"]) == BAR_CASE and row["dtype"] == "bfloat16" and "torch" in row:
            r = row["mini"]["fwd_bwd_ms"] / row["torch"]["fwd_bwd_ms"]
            return (f"bar: forward+backward (8, 12, 1024, 64) causal at {r:.2f}x torch's time "
                    f"({'PASS' if r <= BAR else 'FAIL'}, bar {BAR}x)")
    return "bar: not measured (no torch)"


if __name__ == "__main__":
    sys.exit(main())
