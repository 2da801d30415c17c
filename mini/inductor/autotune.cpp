// autotune.cpp — see autotune.h.
#include "inductor/autotune.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "inductor/compile_fx.h"
#include "runtime/code_cache.h"

namespace mini::inductor {

CudaAutotune::CudaAutotune(const graph::Graph& g, const std::string& arch, const std::string& cache_dir)
    : graph_(g), arch_(arch), cache_dir_(cache_dir) {
  codegen::CudaLayout dflt = codegen::cuda_layout(codegen::kCudaDefaultLayout);
  best_ = compile_cuda_graph(graph_, arch_, cache_dir_, &dflt);
  std::vector<std::string> ignored;
  path_ = runtime::usable_cache_dir(cache_dir_, &ignored) + "/" + runtime::hex_hash(best_->source + "|" + arch_) + ".autotune";
  // "layouts N N ...\n", a number per kernel, written by an earlier tuning
  std::istringstream saved(runtime::read_file(path_));
  std::string word;
  std::vector<int> chosen;
  if (saved >> word && word == "layouts")
    for (int n; saved >> n;) chosen.push_back(n);
  bool valid = chosen.size() == best_->schedule.groups.size();
  for (int n : chosen) valid = valid && n >= 1 && n <= codegen::kCudaLayouts;
  if (valid) {
    tuned_ = true;
    if (chosen != best_->layout_numbers()) best_ = compile_cuda_graph(graph_, arch_, cache_dir_, &dflt, &chosen);
  }
}

std::vector<int> CudaAutotune::layouts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return best_->layout_numbers();
}

std::vector<double> CudaAutotune::times_ms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return times_;
}

std::vector<std::vector<double>> CudaAutotune::kernel_times_ms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kernel_times_;
}

std::vector<Tensor> CudaAutotune::run(const std::vector<Tensor>& inputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!tuned_) tune(inputs);
  return best_->run(inputs);
}

void CudaAutotune::tune(const std::vector<Tensor>& inputs) {
  tuned_ = true;  // once, even if timing fails below: the default layout then stays
  const size_t kernels = best_->schedule.groups.size();
  std::vector<std::shared_ptr<runtime::CompiledCudaGraph>> compiled;
  for (int n = 1; n <= codegen::kCudaLayouts; n++) {
    codegen::CudaLayout l = codegen::cuda_layout(n);
    auto cg = n == best_->layout.number ? best_ : compile_cuda_graph(graph_, arch_, cache_dir_, &l);
    if (cg->schedule.groups.size() != kernels) fail("max-autotune: layout ", n, " fused the graph differently");
    cg->run(inputs);  // loads it, warms the caches
    std::vector<std::vector<double>> reps;
    for (int rep = 0; rep < 5; rep++) reps.push_back(cg->kernel_ms(inputs));
    std::vector<double> medians;
    for (size_t k = 0; k < kernels; k++) {
      std::vector<double> ms;
      for (const auto& r : reps) ms.push_back(r[k]);
      std::sort(ms.begin(), ms.end());
      medians.push_back(ms[ms.size() / 2]);
    }
    kernel_times_.push_back(medians);
    times_.push_back(std::accumulate(medians.begin(), medians.end(), 0.0));
    compiled.push_back(cg);
  }
  std::vector<int> chosen;  // per kernel, its fastest layout (the lowest number on a tie)
  for (size_t k = 0; k < kernels; k++) {
    int best = 0;
    for (int n = 1; n < codegen::kCudaLayouts; n++)
      if (kernel_times_[n][k] < kernel_times_[best][k]) best = n;
    chosen.push_back(best + 1);
  }
  bool uniform = std::all_of(chosen.begin(), chosen.end(), [&](int n) { return n == chosen.front(); });
  if (kernels == 0) {
    best_ = compiled[best_->layout.number - 1];
  } else if (uniform) {
    best_ = compiled[chosen.front() - 1];
  } else {
    codegen::CudaLayout dflt = codegen::cuda_layout(codegen::kCudaDefaultLayout);
    best_ = compile_cuda_graph(graph_, arch_, cache_dir_, &dflt, &chosen);
  }
  std::string tmp = cat(path_, ".", getpid(), ".tmp");
  {
    std::ofstream out(tmp);
    out << "layouts";
    for (int n : best_->layout_numbers()) out << " " << n;
    out << "\n";
  }
  std::rename(tmp.c_str(), path_.c_str());  // a reader sees the old file or the new one, whole
}

}  // namespace mini::inductor
