// cuda/optim.cu — the fused Adam/AdamW step (mini::adam_step_, optim.cpp): one kernel a
// parameter, a grid-stride loop over its elements, each optim_math.h's adam_element. Compiled
// with --fmad=false (CMakeLists.txt), so that every product rounds before its sum as between
// two eager kernels, and the step equals mini.optim's op-by-op step (`fused=False`) bit for bit.
#include "common.cuh"
#include "kernels.h"
#include "tensor/optim_math.h"

namespace mini::cuda {

namespace {

template <class T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                            int64_t n, AdamScalars<T> s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    T pi = p[i], mi = m[i], vi = v[i];
    adam_element<T>(pi, g[i], mi, vi, s);
    p[i] = pi, m[i] = mi, v[i] = vi;
  }
}

template <class T>
void launch_adam(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const double* c, bool decoupled, bool coupled) {
  const int64_t n = param->numel();
  AdamScalars<T> s{T(c[0]), T(c[1]), T(c[2]), T(c[3]), T(c[4]), T(c[5]), T(c[6]), T(c[7]), T(c[8]), decoupled, coupled};
  adam_kernel<T><<<(unsigned)grid_for(n), kThreads, 0, current_stream()>>>(
      static_cast<T*>(param->device_raw()), static_cast<const T*>(grad->device_raw()),
      static_cast<T*>(exp_avg->device_raw()), static_cast<T*>(exp_avg_sq->device_raw()), n, s);
}

}  // namespace

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const double scalars[9], bool decoupled, bool coupled) {
  if (param->numel() == 0) return;
  if (param->dtype == DType::Float64) launch_adam<double>(param, grad, exp_avg, exp_avg_sq, scalars, decoupled, coupled);
  else launch_adam<float>(param, grad, exp_avg, exp_avg_sq, scalars, decoupled, coupled);
  check_launch("adam_step_");
}

}  // namespace mini::cuda
