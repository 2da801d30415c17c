"""The decomposed softmax and layer norm kernels, mini's and torch.compile's, for Nsight Compute.

    ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        -k regex:fused python labs/bench/ncu_reductions.py

Runs each program compiled by mini (mini.compile on CUDA tensors, 8192 x 8192 float32) and by
torch.compile, twice each (the first call compiles), so that ncu profiles the fused kernels of
both side by side: registers, occupancy, achieved bandwidth, what the warps wait on.
"""
import sys
from pathlib import Path

import mini

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # labs/
from programs import layernorm_decomp, softmax_decomp  # noqa: E402
from bench_cuda_inductor import torch_twin  # noqa: E402


def main():
    r = c = 8192
    x, w, b = mini.randn(r, c, device="cuda"), mini.randn(c, device="cuda"), mini.randn(c, device="cuda")
    for fn, args in ((softmax_decomp, (x,)), (layernorm_decomp, (x, w, b))):
        f = mini.compile(fn, fullgraph=True, dynamic=False)
        for _ in range(2):
            f(*args)
    mini.cuda.synchronize()
    try:
        import torch
    except ImportError:
        return 0
    tx, tw, tb = (torch.randn(*s, device="cuda") for s in ((r, c), (c,), (c,)))
    for fn, args in ((softmax_decomp, (tx,)), (layernorm_decomp, (tx, tw, tb))):
        torch._dynamo.reset()
        f = torch.compile(torch_twin(torch, fn))
        for _ in range(2):
            f(*args)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
