// autotune.h — mode="max-autotune" for CUDA graphs: each kernel's layout chosen by timing them
// all (Inductor's max-autotune, which benchmarks its choices at compile time).
//
// In:  a captured graph of CUDA tensors, and its first call's inputs.
// Out: run() of the graph compiled with each kernel in its fastest layout.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/compiled_cuda_graph.h"

namespace mini::inductor {

// mode="max-autotune": the graph compiled in every kernel layout (codegen/cuda_launch.h), and
// each kernel timed in each on the first call's inputs (the median of 5 runs, CUDA events
// around its launch); every kernel keeps its fastest layout, and a graph whose kernels chose
// differently is compiled once more with each kernel in its own. The choice is written beside
// the CUBINs (<cache>/<key of the default layout's source>.autotune: "layouts 9 7 ...", a
// kernel's number each), so that a later process compiles only it. Graphs are functional (a
// run writes only new tensors), so timing runs change nothing the caller sees.
class CudaAutotune {
 public:
  CudaAutotune(const graph::Graph& g, const std::string& arch, const std::string& cache_dir);
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  std::vector<int> layouts() const;   // per kernel, the layout chosen (the default until the first run tunes)
  std::vector<double> times_ms() const;  // per layout 1..: its kernels' times added; empty if read from the cache
  std::vector<std::vector<double>> kernel_times_ms() const;  // per layout 1.., per kernel
  std::string path() const { return path_; }

 private:
  void tune(const std::vector<Tensor>& inputs);
  graph::Graph graph_;
  std::string arch_, cache_dir_, path_;
  std::shared_ptr<runtime::CompiledCudaGraph> best_;
  std::vector<double> times_;
  std::vector<std::vector<double>> kernel_times_;
  bool tuned_ = false;
  mutable std::mutex mutex_;
};

}  // namespace mini::inductor
