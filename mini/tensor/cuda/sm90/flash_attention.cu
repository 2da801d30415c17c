// cuda/sm90/flash_attention.cu — mini's tensors into the wgmma FlashAttention kernels of
// flash_sm90.cuh. Built for sm_90a alone (CMake's mini_cuda_sm90a: the architecture-specific
// instructions run on compute capability 9.0 and nowhere else), so flash_attention.cu calls in
// here only where flash_sm90_runs() says the device is one (notes/attention.md).
#include <cuda_bf16.h>

#include <cstdlib>
#include <cstring>

#include "../kernels.h"
#include "flash_sm90.cuh"

namespace mini::cuda::flash {

namespace {

using bf16 = __nv_bfloat16;

// The forward at D = 64: two warpgroups (128 query rows), 64-key tiles.
void launch_fwd64(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Dims& s, bool causal, double scale) {
  using Sh = sm90::FwdShape<64, 64, 2>;
  launch_forward<bf16>(sm90::flash_fwd_kernel<64, 64, 2, false>, Sh::kThreads, Sh::kSmem, Sh::kBR, out, lse, q, k, v,
                       s, causal, scale);
}

template <int D>
void launch_bwd(const Tensor& dq_acc, const Tensor& dk, const Tensor& dv, const Tensor& q, const Tensor& k,
                const Tensor& v, const Tensor& dout, const Tensor& lse2, const Tensor& delta, const Dims& s,
                bool causal, double scale) {
  using Sh = sm90::BwdShape<D>;
  launch_backward<bf16>(sm90::flash_bwd_kernel<D>, Sh::kThreads, Sh::kSmem, Sh::kBC, dq_acc, dk, dv, q, k, v, dout,
                        lse2, delta, s, causal, scale);
}

}  // namespace

bool flash_sm90_runs() {
  static const bool yes = [] {
    const char* env = std::getenv("MINI_FLASH_SM90");  // "1": on; anything else: the mma.sync kernels
    return env && std::strcmp(env, "1") == 0 && device_arch(0) == "sm_90";
  }();
  return yes;
}

bool flash_attention_sm90(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                          bool causal, double scale) {
  const Dims s = dims_of(q, k);
  if (s.D != 64) return false;  // D = 128: the mma.sync forward
  launch_fwd64(out, lse, q, k, v, s, causal, scale);
  check_launch("scaled_dot_product_attention");
  return true;
}

void flash_attention_backward_sm90(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                                   const Tensor& lse, bool causal, double scale) {
  const Dims s = dims_of(q, k);
  run_backward<bf16>(dq, out, dout, lse, s, scale, [&](const Tensor& dq_acc, const Tensor& lse2, const Tensor& delta) {
    if (s.D == 64) launch_bwd<64>(dq_acc, dk, dv, q, k, v, dout, lse2, delta, s, causal, scale);
    else launch_bwd<128>(dq_acc, dk, dv, q, k, v, dout, lse2, delta, s, causal, scale);
  });
}

}  // namespace mini::cuda::flash
