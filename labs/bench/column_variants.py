"""GPT-2's column kernels (the layer norm's and the MLP's bias gradients) timed by split and bounds.

    PYTHONPATH=build/python python labs/bench/column_variants.py [--programs ln,gelu]
        [--splits 22,44,66,88,132] [--bounds 1,2] [--repeats 50] [--save DIR | --load DIR]

The backward of GPT-2's layer norm sums [8192, 768] columns (the weight's and the bias's
gradients) and the MLP's gelu backward sums [8192, 3072] (fc's bias gradient): generated
"col" kernels whose rows are shared among gridDim.y blocks of 1024 threads
(codegen/cuda_columns.cpp). How many blocks share a strip, and how many blocks an SM holds (the
kernel's registers decide that), set how long such a kernel takes. This script renders each
program's backward as mini.compile would, launches its column kernel at every split of
--splits (the runtime picks about one wave: cuda_column_split_grid over the blocks the GPU holds
at once) under each __launch_bounds__ minimum of --bounds, checks every result against the first, and prints the
median time with CUDA events, the bytes it moves and their rate. `--save DIR` writes the rendered
backward sources (rendering needs no GPU) and `--load DIR` times those instead of this build's:
two versions of the renderer compared in one GPU call.
"""

import argparse
import re
import statistics
import sys
from pathlib import Path

import mini
import mini.inductor
import mini.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/
from measure import cuda_ms, cuda_unavailable_reason  # noqa: E402

ROWS = 8 * 1024


def ln_block(x, w, b, W):
    """A GPT-2 block's first half: layer norm, then a projection, beside the residual."""
    return (x + F.linear(F.layer_norm(x, (x.shape[-1],), w, b), W)).sum()


def gelu_block(x, W1, b1, W2):
    """The MLP: fc with its bias, gelu, the projection back."""
    return F.linear(F.gelu(F.linear(x, W1, b1)), W2).sum()


def programs(width):
    return {
        "ln": (ln_block, [(8, 1024, width), (width,), (width,), (width, width)]),
        "gelu": (gelu_block, [(8, 1024, width), (4 * width, width), (4 * width,), (width, 4 * width)]),
    }


def backward_source(fn, shapes):
    """The program's backward graph rendered for sm_90 (H100, H200), in bfloat16 autocast (GPT-2's dtype)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    mini.reset()
    args = [mini.randn(*s, requires_grad=True) for s in shapes]
    with mini.autocast("cpu", dtype=mini.bfloat16):
        mini.compile(fn, backend=backend, fullgraph=True)(*args)
    info = mini._C._inductor_compile_training_cuda(graphs[0], "sm_90")
    return info["backward_source"], info["backward_kernels"]


def column_kernel(source, kernels):
    """The column kernel's name, its parameters (type, name) and its CV (columns a thread)."""
    (name,) = [k for k in kernels if k.startswith("cuda_col_")]
    head = source[source.index(f" {name}("):]
    params = re.findall(r"(?:const )?([\w:]+)\* __restrict__ (\w+)", head[:head.index(")")])
    cv = re.search(r"constexpr int CV = (\d+);", head)
    return name, params, int(cv.group(1)) if cv else 1


def strip_sizes(source, name):
    """The static kernel never reads `sizes`: drop that parameter, so launch() takes only pointers."""
    start = source.index(f" {name}(")
    end = source.index("{", start)
    head = source[start:end].replace(", mini::Sizes sizes,", ",")
    body = re.sub(r"\n\s*const int64_t\* symbols = sizes\.symbols;\n\s*const int64_t \(\*strides\)\[8\] = "
                  r"sizes\.strides;\n\s*\(void\)symbols; \(void\)strides;", "", source[end:], count=1)
    return source[:start] + head + body


def streaming_multiprocessors():
    """The GPU's SMs, as torch reports them (mini has no binding for it); 132 (an H100 or H200 SXM)
    where torch does not import."""
    try:
        import torch
        return torch.cuda.get_device_properties(0).multi_processor_count
    except ImportError:
        return 132


def full_size(source, name, buffer, cols):
    """Whether the kernel reads or writes `buffer` as a whole [rows, cols] tensor (not a row's
    statistic, not a column's)."""
    body = source[source.index(f" {name}("):]
    return re.search(rf"{buffer}\[x0 \* {1024 * cols} \+ x1|{buffer}\[x0 \* 1024LL \* {cols}LL", body) is not None


DTYPES = {"float": mini.float32, "mini::bf16": mini.bfloat16}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="ln,gelu")
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--splits", default="22,44,66,88,132")
    parser.add_argument("--bounds", default="1,2")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--save", type=Path, help="write the rendered sources here and stop (no GPU needed)")
    parser.add_argument("--load", type=Path, help="time the sources --save wrote, not this build's")
    args = parser.parse_args(argv)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        for prog in args.programs.split(","):
            fn, shapes = programs(args.width)[prog]
            source, kernels = backward_source(fn, shapes)
            (args.save / f"{prog}.cu").write_text(source)
            (args.save / f"{prog}.kernels").write_text("\n".join(kernels))
        print(f"column_variants: sources written to {args.save}")
        return 0
    reason = cuda_unavailable_reason()
    if reason:
        print(f"column_variants: {reason}")
        return 77
    sms = streaming_multiprocessors()
    print(f"column kernels of GPT-2's backward on {mini.cuda.get_device_name()} ({sms} SMs); median of {args.repeats}")
    print(f"{'program':8s}{'bounds':>7s}{'split':>6s}{'blocks':>7s}{'ms':>8s}{'GB/s':>7s}  max rel diff")
    for prog in args.programs.split(","):
        fn, shapes = programs(args.width)[prog]
        if args.load:
            source = (args.load / f"{prog}.cu").read_text()
            kernels = (args.load / f"{prog}.kernels").read_text().split("\n")
        else:
            source, kernels = backward_source(fn, shapes)
        name, params, cv = column_kernel(source, kernels)
        source = strip_sizes(source, name)
        buffers = [(t, n) for t, n in params if n.startswith(("in", "out"))]
        largest = max(ROWS * s[-1] for s in shapes)
        cols = int(re.search(r"const int64_t cols = (\d+)LL", source[source.index(f" {name}("):]).group(1))
        tensors = [mini.randn(largest).to(DTYPES[t]).cuda() for t, _ in buffers]
        reductions = source[source.index(f" {name}("):].count("partials[(") // 2
        nbytes = sum(ROWS * cols * (4 if t == "float" else 2) for t, n in buffers if full_size(source, name, n, cols))
        strips = (cols // cv + 31) // 32
        first = None
        for bound in [int(b) for b in args.bounds.split(",")]:
            edited = re.sub(rf"__launch_bounds__\(1024(, \d+)?\) {name}", f"__launch_bounds__(1024, {bound}) {name}",
                            source)
            program = mini.inductor.compile_cuda(edited)
            for split in [int(s) for s in args.splits.split(",")]:
                ys = split
                partials = mini.zeros(max(1, reductions) * ys * cols, dtype=mini.int64).cuda()
                arrived = mini.zeros(strips, dtype=mini.int64).cuda()  # 32-bit zeros, twice over
                run = lambda: program.launch(name, (strips, ys, 1), (1024, 1, 1), [*tensors, partials, arrived])  # noqa: E731
                run()
                outs = [tensors[i].float().cpu().numpy() for i, (_, n) in enumerate(buffers) if n.startswith("out")]
                if first is None:
                    first = outs
                diff = max(float(abs(a - b).max() / max(abs(b).max(), 1e-30)) for a, b in zip(outs, first))
                ms = cuda_ms(mini.cuda, run, args.repeats, 5, statistics.median)
                print(f"{prog:8s}{bound:7d}{ys:6d}{strips * ys:7d}{ms:8.4f}{nbytes / ms / 1e6:7.0f}  {diff:.1e}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
