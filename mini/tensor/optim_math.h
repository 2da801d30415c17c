// optim_math.h — one element of an Adam or AdamW step, shared by the CPU loop (optim.cpp) and
// the CUDA kernel (cuda/optim.cu), so that the fused step is written once.
//
// The element is computed as mini.optim's op-by-op step computes it (mini/python/mini/optim.py,
// `fused=False`): the same operations in the same order, each rounded to T, every scalar
// rounded to T first (as a Python number is when an op mixes it with a float tensor). Both
// files that include this one are compiled without contraction into fused multiply-adds
// (-ffp-contract=off, nvcc --fmad=false), so the fused step equals the op-by-op step bit for
// bit on either device; tests/python/test_optim.py checks it.
#pragma once
#include "scalar_math.h"

namespace mini {

// The step's scalars, computed once a step on the host (in double, then rounded to T).
template <class T>
struct AdamScalars {
  T decay;            // AdamW: p *= 1 - lr * weight_decay (decoupled)
  T weight_decay;     // Adam: g += p * weight_decay (coupled)
  T beta1, one_minus_beta1, beta2, one_minus_beta2;
  T inv_sqrt_bias2;   // 1 / sqrt(1 - beta2^t)
  T eps;
  T step_size;        // lr / (1 - beta1^t)
  bool decoupled, coupled;
};

// p, m (exp_avg) and v (exp_avg_sq) updated in place from the gradient g:
//   p = p * (1 - lr wd)                                   (AdamW)      g = g + p wd   (Adam)
//   m = m b1 + g (1 - b1)        v = v b2 + g g (1 - b2)
//   p = p - m / (sqrt(v) / sqrt(1 - b2^t) + eps) * lr / (1 - b1^t)
template <class T>
MINI_MATH_FN void adam_element(T& p, T g, T& m, T& v, const AdamScalars<T>& s) {
  if (s.decoupled) p = p * s.decay;
  else if (s.coupled) g = g + p * s.weight_decay;
  m = m * s.beta1 + g * s.one_minus_beta1;
  v = v * s.beta2 + g * g * s.one_minus_beta2;
  const T denom = MINI_LIBM(sqrt)(v) * s.inv_sqrt_bias2 + s.eps;
  p = p - m / denom * s.step_size;
}

}  // namespace mini
