"""Hand-edited variants of one generated CUDA kernel, timed side by side on the GPU.

    PYTHONPATH=build/python python labs/bench/cuda_kernel_variants.py [--program layernorm_decomp]
        [--variants base,lb2,...] [--repeats 100]

A question such as "would fewer blocks an SM, or a block of 1024 threads, make layer norm
faster?" is cheaper to answer by editing the generated source than by teaching the renderer a
new layout first. This script renders the program's fused kernel (the default layout, as
mini.compile would), applies each named edit to its text (VARIANTS below), compiles each with
NVRTC, checks each variant's output against the unedited kernel's, and times them all in one
process with CUDA events (median), beside torch.compile's kernel where torch imports. A
variant that wins is then written into the renderer (mini/codegen/cuda_kernel.cpp) and measured
again by bench_cuda_inductor.py.

Only static-shape kernels of one row reduction or pointwise group (the anchor programs) are
supported: the variants rewrite the kernel's launch bounds and loop bounds as text.
"""

import argparse
import re
import statistics
import sys
from pathlib import Path

import mini
import mini.inductor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/
from measure import cuda_ms, cuda_unavailable_reason  # noqa: E402
import programs  # noqa: E402
from bench_cuda_inductor import capture, torch_twin  # noqa: E402

SHAPES = {
    "layernorm_decomp": [(8192, 8192), (8192,), (8192,)],
    "softmax_decomp": [(8192, 8192)],
}


def launch_bounds(source, threads, min_blocks):
    return re.sub(r"__launch_bounds__\(\d+(, \d+)?\)",
                  f"__launch_bounds__({threads}{f', {min_blocks}' if min_blocks else ''})", source, count=1)


def threads_per_row(source, threads):
    """The row loops rewritten for `threads` threads a row (the vector count is the same)."""
    old = int(re.search(r"__launch_bounds__\((\d+)", source).group(1))
    iters = {int(n) for n in re.findall(r"for \(int it = 0; it < (\d+); it\+\+\)", source)}
    if len(iters) != 1:
        raise SystemExit(f"threads_per_row: expected one loop bound, found {sorted(iters)}")
    (it,) = iters
    if (it * old) % threads:
        raise SystemExit(f"threads_per_row: {it * old} vectors do not split over {threads} threads")
    source = source.replace(f"it < {it}; it++", f"it < {it * old // threads}; it++")
    source = source.replace(f"threadIdx.x + it * {old}", f"threadIdx.x + it * {threads}")
    return launch_bounds(source, threads, max(1, 2048 // threads)), threads


def nth_unroll(source, n, pragma):
    """The n-th (from 0) `#pragma unroll` of a row loop replaced by `pragma`."""
    spots = [m.start() for m in re.finditer(r"#pragma unroll( \d+)?\n(\s*)for \(int it", source)]
    start = spots[n]
    end = source.index("\n", start)
    return source[:start] + pragma + source[end:]


def no_hidden_pointers(source):
    """Without the empty asm that hides a re-read row's pointer from the optimizer."""
    return re.sub(r"\n\s*asm volatile\(\"\" : \"\+l\"\(in\d+\)\);[^\n]*", "", source)


def no_restrict(source):
    return source.replace("* __restrict__ ", "* ")


# name -> (what it tries, edit(source, threads) -> (source, threads))
VARIANTS = {
    "base": ("the generated kernel, unedited", lambda s, t: (s, t)),
    "lb1": ("__launch_bounds__(threads): no minimum of blocks an SM (registers as needed)",
            lambda s, t: (launch_bounds(s, t, 0), t)),
    "lb2": ("at least 2 blocks an SM instead of 4", lambda s, t: (launch_bounds(s, t, 2048 // t // 2), t)),
    "lb3": ("at least 3 blocks an SM", lambda s, t: (launch_bounds(s, t, 3), t)),
    "t256": ("256 threads a row", lambda s, t: threads_per_row(s, 256)),
    "t1024": ("1024 threads a row", lambda s, t: threads_per_row(s, 1024)),
    "u2last": ("the last pass unrolled by 2, not fully", lambda s, t: (nth_unroll(s, -1, "#pragma unroll 2"), t)),
    "u1": ("no pass unrolled", lambda s, t: (re.sub(r"#pragma unroll( \d+)?\n(\s*)for \(int it",
                                                    r"#pragma unroll 1\n\2for (int it", s), t)),
    "nohide": ("no hidden pointers: the compiler may keep the first pass's loads",
               lambda s, t: (no_hidden_pointers(s), t)),
    "norestrict": ("the pointers not __restrict__", lambda s, t: (no_restrict(s), t)),
}


def strip_sizes(source):
    """A static-shape kernel never reads `sizes`: drop the parameter so that launch() needs only
    the tensors."""
    source = source.replace(", mini::Sizes sizes)", ")")
    return re.sub(r"\n\s*const int64_t\* symbols = sizes\.symbols;\n\s*const int64_t \(\*strides\)\[8\] = "
                  r"sizes\.strides;\n\s*\(void\)symbols; \(void\)strides;", "", source)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", default="layernorm_decomp", choices=sorted(SHAPES))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args(argv)
    reason = cuda_unavailable_reason()
    if reason:
        print(f"cuda_kernel_variants: {reason}")
        return 77
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    fn = getattr(programs, args.program)
    mini.manual_seed(0)
    cpu_args = [mini.randn(*s) for s in SHAPES[args.program]]
    gm, inputs = capture(fn, cpu_args)
    info = mini.inductor.compile_graph_cuda(gm)
    if len(info["kernels"]) != 1:
        raise SystemExit(f"{args.program}: {len(info['kernels'])} kernels; one is supported")
    kernel = info["kernels"][0]
    base = strip_sizes(info["source"])
    threads = int(re.search(r"__launch_bounds__\((\d+)", base).group(1))
    rows = SHAPES[args.program][0][0]
    cuda_inputs = [x.cuda() for x in inputs]
    out = info["run"](*cuda_inputs)
    out = out[0] if isinstance(out, (list, tuple)) else out
    expected = out.cpu().numpy()
    print(f"{args.program}: kernel {kernel}, {threads} threads a row, grid {rows}; "
          f"median of {args.repeats}, {mini.cuda.get_device_name()}")
    print(f"{'variant':9s}{'ms':>8s}{'GB/s':>8s}  max |diff|  what")
    nbytes = sum(x.numel() * 4 for x in inputs) + out.numel() * 4
    for name in names:
        what, edit = VARIANTS[name]
        source, t = edit(base, threads)
        if name != "base" and source == base:
            print(f"{name:9s}{'-':>8s}{'-':>8s}  {'-':>10s}  {what} (the edit changed nothing)")
            continue
        prog = mini.inductor.compile_cuda(source)
        result = mini.empty(*out.shape, device="cuda")
        run = lambda: prog.launch(kernel, (rows, 1, 1), (t, 1, 1), [*cuda_inputs, result])  # noqa: E731
        run()
        diff = float(abs(result.cpu().numpy() - expected).max())
        ms = cuda_ms(mini.cuda, run, args.repeats, 10, statistics.median)
        print(f"{name:9s}{ms:8.3f}{nbytes / ms / 1e6:8.0f}  {diff:10.2e}  {what}", flush=True)
    try:
        import torch
    except ImportError:
        return 0
    targs = [torch.from_numpy(a.numpy()).cuda() for a in cpu_args]
    compiled = torch.compile(torch_twin(torch, fn))
    compiled(*targs)
    ms = cuda_ms(torch.cuda, lambda: compiled(*targs), args.repeats, 10, statistics.median)
    print(f"{'torch.compile':9s}{ms:8.3f}{nbytes / ms / 1e6:8.0f}  {'':10s}  the same program under torch.compile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
