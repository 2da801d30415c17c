// cuda/optim.cu — the fused Adam/AdamW step (mini::adam_steps_, optim.cpp): one kernel for up
// to kAdamTensorsPerLaunch parameters (a multi-tensor kernel, as torch's multi_tensor_apply):
// each block takes a chunk of one parameter, found in the launch's table of where each
// parameter's blocks start, and each element is optim_math.h's adam_element. Compiled with
// --fmad=false (CMakeLists.txt), so that every product rounds before its sum as between two
// eager kernels, and the step equals mini.optim's op-by-op step (`fused=False`) bit for bit.
#include "common.cuh"
#include "kernels.h"
#include "tensor/optim_math.h"

namespace mini::cuda {

namespace {

constexpr int kTensors = kAdamTensorsPerLaunch;
constexpr int64_t kChunk = 4 * kThreads;  // the elements one block steps

// The launch's parameters, passed by value (about 1 KB of the kernel's 4 KB of arguments).
template <class T>
struct AdamBatch {
  T* p[kTensors];
  const T* g[kTensors];
  T* m[kTensors];
  T* v[kTensors];
  int64_t n[kTensors];
  int first_block[kTensors + 1];  // parameter t's chunks are blocks first_block[t] .. first_block[t + 1] - 1
  int count;
};

template <class T>
__global__ void adam_kernel(AdamBatch<T> b, AdamScalars<T> s) {
  int t = 0;
  while (t + 1 < b.count && (int)blockIdx.x >= b.first_block[t + 1]) t++;
  const int64_t begin = ((int64_t)blockIdx.x - b.first_block[t]) * kChunk;
  const int64_t end = begin + kChunk < b.n[t] ? begin + kChunk : b.n[t];
  T* __restrict__ p = b.p[t];
  const T* __restrict__ g = b.g[t];
  T* __restrict__ m = b.m[t];
  T* __restrict__ v = b.v[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    T pi = p[i], mi = m[i], vi = v[i];
    adam_element<T>(pi, g[i], mi, vi, s);
    p[i] = pi, m[i] = mi, v[i] = vi;
  }
}

template <class T>
int launch_adam(const std::vector<AdamOperands>& operands, const double* c, bool decoupled, bool coupled) {
  AdamScalars<T> s{T(c[0]), T(c[1]), T(c[2]), T(c[3]), T(c[4]), T(c[5]), T(c[6]), T(c[7]), T(c[8]), decoupled, coupled};
  int launches = 0;
  AdamBatch<T> b{};
  auto launch = [&] {
    if (b.count == 0) return;
    adam_kernel<T><<<(unsigned)b.first_block[b.count], kThreads, 0, current_stream()>>>(b, s);
    check_launch("adam_steps_");
    launches++;
    b = AdamBatch<T>{};
  };
  for (const AdamOperands& o : operands) {
    const int64_t n = o.param->numel();
    const int64_t blocks = (n + kChunk - 1) / kChunk;
    if (n == 0) continue;
    if (b.count == kTensors || (int64_t)b.first_block[b.count] + blocks > INT32_MAX) launch();
    if (blocks > INT32_MAX) fail("adam_steps_(): a parameter of ", n, " elements is too large for one launch");
    const int t = b.count++;
    b.p[t] = static_cast<T*>(o.param->device_raw());
    b.g[t] = static_cast<const T*>(o.grad->device_raw());
    b.m[t] = static_cast<T*>(o.exp_avg->device_raw());
    b.v[t] = static_cast<T*>(o.exp_avg_sq->device_raw());
    b.n[t] = n;
    b.first_block[t + 1] = b.first_block[t] + (int)blocks;
  }
  launch();
  return launches;
}

}  // namespace

int adam_steps(const std::vector<AdamOperands>& operands, const double scalars[9], bool decoupled, bool coupled) {
  if (operands.empty()) return 0;
  if (operands[0].param->dtype == DType::Float64) return launch_adam<double>(operands, scalars, decoupled, coupled);
  return launch_adam<float>(operands, scalars, decoupled, coupled);
}

}  // namespace mini::cuda
