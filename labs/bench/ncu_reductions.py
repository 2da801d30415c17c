"""The decomposed softmax and layer norm kernels (and, asked for, chain8's), mini's and
torch.compile's, for Nsight Compute.

    ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        -k regex:fused python labs/bench/ncu_reductions.py [--layouts 7,8] [--torch-code DIR] \
        [--programs softmax_decomp,layernorm_decomp,chain8]

Runs each program compiled by mini (mini.compile on CUDA tensors, 8192 x 8192 float32) under
each kernel layout asked for (MINI_CODEGEN_LAYOUT, codegen/cuda_launch.h; the default layout
when none is) and by torch.compile, twice each (the first call compiles), so that ncu profiles
the fused kernels of both side by side: registers, occupancy, achieved bandwidth, what the warps
wait on. --torch-code writes the Triton source torch.compile generated for each program into
DIR (torch_<program>.py), to read beside mini's kernels.
"""
import argparse
import os
import sys
from pathlib import Path

import mini

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/
from programs import chain8, layernorm_decomp, softmax_decomp  # noqa: E402
from bench_cuda_inductor import torch_twin  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="", help="comma-separated kernel layouts to run (default: the default)")
    parser.add_argument("--torch-code", default="", help="a folder for torch.compile's generated source")
    parser.add_argument("--programs", default="softmax_decomp,layernorm_decomp",
                        help="comma-separated, of softmax_decomp, layernorm_decomp, chain8")
    args = parser.parse_args()
    r = c = 8192
    shapes = {"softmax_decomp": ((r, c),), "layernorm_decomp": ((r, c), (c,), (c,)), "chain8": ((r, c), (r, c))}
    fns = {"softmax_decomp": softmax_decomp, "layernorm_decomp": layernorm_decomp, "chain8": chain8}
    names = [n for n in args.programs.split(",") if n]
    for n in names:
        if n not in fns:
            parser.error(f"unknown program {n!r}: choose from {', '.join(fns)}")
    made = {n: tuple(mini.randn(*s, device="cuda") for s in shapes[n]) for n in names}
    for layout in [int(v) for v in args.layouts.split(",") if v] or [None]:
        if layout is not None:
            os.environ["MINI_CODEGEN_LAYOUT"] = str(layout)  # read when a graph is rendered
        mini.reset()
        for n in names:
            fn, fargs = fns[n], made[n]
            f = mini.compile(fn, fullgraph=True, dynamic=False)
            for _ in range(2):
                f(*fargs)
        mini.cuda.synchronize()
    try:
        import torch
        from torch._inductor.utils import run_and_get_code
    except ImportError:
        return 0
    for n in names:
        fn, fargs = fns[n], tuple(torch.randn(*s, device="cuda") for s in shapes[n])
        torch._dynamo.reset()
        f = torch.compile(torch_twin(torch, fn))
        _, code = run_and_get_code(f, *fargs)
        if args.torch_code:
            Path(args.torch_code).mkdir(parents=True, exist_ok=True)
            Path(args.torch_code, f"torch_{fn.__name__}.py").write_text("\n\n".join(code))
        f(*fargs)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
