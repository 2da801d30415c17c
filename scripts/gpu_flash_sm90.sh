#!/usr/bin/env bash
# gpu_flash_sm90.sh: run ON the GPU machine (an H100 or H200). Builds tests/cuda/flash_sm90_check.cu
# (the sm_90a FlashAttention kernels alone, without the rest of mini: about 10 s of nvcc), runs
# its checks against the float32 reference and its timings, then times torch's SDPA on the same
# shapes (heads as a GPT's transposed views), so that both sets of numbers come from one machine
# in one call. MINI_FLASH_NCU=1 adds Nsight Compute's summary of one causal forward and
# backward at GPT-2's shape. Output: stdout, and $OUT/flash_sm90.txt where OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
mkdir -p build-gpu
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  date -u '+%Y-%m-%d %H:%M UTC'
  nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I mini \
    tests/cuda/flash_sm90_check.cu -o build-gpu/flash_sm90_check || exit 1
  build-gpu/flash_sm90_check
  status=$?
  if [ -n "${MINI_FLASH_NCU:-}" ]; then  # Nsight Compute over one causal GPT-2 forward and backward
    ncu --kernel-name regex:'flash_(fwd|bwd)_kernel' --launch-count 2 --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis build-gpu/flash_sm90_check profile 2>&1 \
      | grep -v '^==PROF==' | grep -E 'flash_|Throughput|Pipe|Stall|Warp Cycles|Occupancy|Registers|Shared Memory|Bank|Eligible|Issued|Duration|Executed Ipc|No Eligible|Active Warps' | head -120
  fi
  python3 - <<'PY'
import torch, torch.nn.functional as F
def t(f, reps=20):
    for _ in range(3): f()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps): f()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / reps
for D in (64, 128):
    for causal in (True, False):
        B, H, L = 8, 12, 1024
        mk = lambda: torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
        q, k, v = mk(), mk(), mk()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        g = torch.randn_like(out)
        fwd = t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        both = t(lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), g))
        flops = 4 * B * H * L * L * D * (0.5 if causal else 1)
        print(f"torch (8, 12, 1024, {D}) {'causal' if causal else 'full':6s} gpt  : fwd {fwd:.3f} ms ({flops / fwd / 1e9:.0f} TFLOP/s)  "
              f"bwd {both - fwd:.3f} ms ({2.5 * flops / (both - fwd) / 1e9:.0f} TFLOP/s)  fwd+bwd {both:.3f} ms ({3.5 * flops / both / 1e9:.0f} TFLOP/s)")
PY
  exit $status
} 2>&1 | tee "$out/flash_sm90.txt"
exit "${PIPESTATUS[0]}"
