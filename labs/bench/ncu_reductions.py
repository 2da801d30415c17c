"""The decomposed softmax and layer norm kernels, mini's and torch.compile's, for Nsight Compute.

    ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        -k regex:fused python labs/bench/ncu_reductions.py [--layouts 7,8] [--torch-code DIR]

Runs each program compiled by mini (mini.compile on CUDA tensors, 8192 x 8192 float32) under
each kernel layout asked for (MINI_CODEGEN_LAYOUT, codegen/cuda_kernel.h; the default layout
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
from programs import layernorm_decomp, softmax_decomp  # noqa: E402
from bench_cuda_inductor import torch_twin  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="", help="comma-separated kernel layouts to run (default: the default)")
    parser.add_argument("--torch-code", default="", help="a folder for torch.compile's generated source")
    args = parser.parse_args()
    r = c = 8192
    x, w, b = mini.randn(r, c, device="cuda"), mini.randn(c, device="cuda"), mini.randn(c, device="cuda")
    for layout in [int(v) for v in args.layouts.split(",") if v] or [None]:
        if layout is not None:
            os.environ["MINI_CODEGEN_LAYOUT"] = str(layout)  # read when a graph is rendered
        mini.reset()
        for fn, fargs in ((softmax_decomp, (x,)), (layernorm_decomp, (x, w, b))):
            f = mini.compile(fn, fullgraph=True, dynamic=False)
            for _ in range(2):
                f(*fargs)
        mini.cuda.synchronize()
    try:
        import torch
        from torch._inductor.utils import run_and_get_code
    except ImportError:
        return 0
    tx, tw, tb = (torch.randn(*s, device="cuda") for s in ((r, c), (c,), (c,)))
    for fn, fargs in ((softmax_decomp, (tx,)), (layernorm_decomp, (tx, tw, tb))):
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
