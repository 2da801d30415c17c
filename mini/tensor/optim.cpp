// optim.cpp — the fused optimizer step: one Adam or AdamW update of a parameter in one pass
// over its elements (one kernel on CUDA), for mini.optim's default (`fused=None` or True).
//
// The op-by-op step (`fused=False`, mini/python/mini/optim.py) launches 14 kernels a
// parameter: a 4-layer GPT's 52 parameters took 728 of the 1,224 kernels of its CUDA training
// step. This one launches one a parameter, and on CUDA one for up to 24 parameters (a
// multi-tensor kernel: the GPT's step is 3 launches, not 52), and computes the same bits
// (optim_math.h). Compiled with
// -ffp-contract=off (CMakeLists.txt): every product is rounded before its sum, as it is between
// two eager kernels.
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"
#include "optim_math.h"

namespace mini {

namespace {

// Why the fused step cannot take these operands, or "" where it can: adam_fusable asks, and
// adam_step_ raises it.
std::string adam_refusal(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  const Tensor* all[4] = {&param, &grad, &exp_avg, &exp_avg_sq};
  const char* names[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
  for (int i = 0; i < 4; i++) {
    const Tensor& t = *all[i];
    if (!t) return cat("adam_step_(): ", names[i], " is None");
    if (t->dtype != DType::Float32 && t->dtype != DType::Float64)
      return cat("adam_step_(): ", names[i], " is ", dtype_name(t->dtype),
                 "; the fused step takes float32 or float64 (pass fused=False for other dtypes)");
    if (t->dtype != param->dtype)
      return cat("adam_step_(): ", names[i], " is ", dtype_name(t->dtype), " but param is ", dtype_name(param->dtype),
                 "; every operand must share the parameter's dtype");
    if (t->device() != param->device())
      return cat("adam_step_(): ", names[i], " is on ", t->device().str(), " but param is on ", param->device().str(),
                 "; move the optimizer's state with the parameter");
    if (t->sizes != param->sizes)
      return cat("adam_step_(): ", names[i], " has shape ", shape_str(t->sizes), " but param has shape ",
                 shape_str(param->sizes));
    if (!t->is_contiguous())
      return cat("adam_step_(): ", names[i], " is not contiguous; the fused step reads every operand as one "
                 "flat array (pass fused=False, or make it contiguous)");
  }
  return "";
}

template <class T>
void adam_cpu(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
              const double* c, bool decoupled, bool coupled) {
  AdamScalars<T> s{T(c[0]), T(c[1]), T(c[2]), T(c[3]), T(c[4]), T(c[5]), T(c[6]), T(c[7]), T(c[8]), decoupled, coupled};
  T* p = static_cast<T*>(param->raw());
  const T* g = static_cast<const T*>(grad->raw());
  T* m = static_cast<T*>(exp_avg->raw());
  T* v = static_cast<T*>(exp_avg_sq->raw());
  parallel_chunks(param->numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) adam_element<T>(p[i], g[i], m[i], v[i], s);
  });
}

}  // namespace

bool adam_fusable(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  return adam_refusal(param, grad, exp_avg, exp_avg_sq).empty();
}

std::vector<bool> adam_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                              const std::vector<int64_t>& steps, const AdamHyper& h) {
  const size_t n = params.size();
  if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n || steps.size() != n)
    fail_value("adam_steps_(): params, grads, exp_avgs, exp_avg_sqs and steps must have one entry each");
  for (int64_t step : steps)
    if (step < 1) fail_value("adam_steps_(): step must be at least 1 (the step's number), got ", step);
  const bool decoupled = h.decoupled && h.weight_decay != 0, coupled = !h.decoupled && h.weight_decay != 0;
  std::vector<bool> done(n);
  // CUDA parameters of one dtype, device and step number share launches (cuda::adam_steps);
  // CPU parameters are a parallel loop each
  std::map<std::tuple<int, int, int64_t>, std::vector<size_t>> batches;
  for (size_t i = 0; i < n; i++) {
    done[i] = adam_fusable(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i]);
    if (done[i]) batches[{(int)params[i]->dtype, params[i]->is_cuda() ? params[i]->device().index : -1, steps[i]}].push_back(i);
  }
  for (const auto& [key, members] : batches) {
    const int64_t step = std::get<2>(key);
    // the scalars as the op-by-op step forms them in Python (float64), before an op rounds them
    const double scalars[9] = {1.0 - h.lr * h.weight_decay,
                               h.weight_decay,
                               h.beta1,
                               1.0 - h.beta1,
                               h.beta2,
                               1.0 - h.beta2,
                               1.0 / std::pow(1.0 - std::pow(h.beta2, (double)step), 0.5),  // as Python spells it
                               h.eps,
                               h.lr / (1.0 - std::pow(h.beta1, (double)step))};
    int64_t bytes = 0;
    std::vector<cuda::AdamOperands> operands;
    for (size_t i : members) {
      const Tensor &param = params[i], &grad = grads[i], &m = exp_avgs[i], &v = exp_avg_sqs[i];
      bytes += param->nbytes() * 2 + grad->nbytes() + m->nbytes() * 2 + v->nbytes() * 2;
      if (param->is_cuda()) {
        operands.push_back({param, grad, m, v});
      } else {
        if (param->dtype == DType::Float64) adam_cpu<double>(param, grad, m, v, scalars, decoupled, coupled);
        else adam_cpu<float>(param, grad, m, v, scalars, decoupled, coupled);
        count_kernel(param->nbytes() * 2 + grad->nbytes() + m->nbytes() * 2 + v->nbytes() * 2);
      }
      for (const Tensor* t : {&param, &m, &v}) (*t)->storage->version++;
    }
    if (!operands.empty()) {
      int launches = cuda::adam_steps(operands, scalars, decoupled, coupled);
      for (int l = 0; l < launches; l++) count_kernel(l == 0 ? bytes : 0);
    }
  }
  return done;
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamHyper& h) {
  if (std::string why = adam_refusal(param, grad, exp_avg, exp_avg_sq); !why.empty()) fail(why);
  adam_steps_({param}, {grad}, {exp_avg}, {exp_avg_sq}, {h.step}, h);
}

}  // namespace mini
