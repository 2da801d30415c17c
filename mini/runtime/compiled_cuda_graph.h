// compiled_cuda_graph.h — running a graph compiled for CUDA: its kernels loaded from their
// CUBINs (cuda_program.h) and launched, step by step, on CUDA tensors.
//
// In:  a CompiledCudaGraph as the inductor made it (mini/inductor/compile_fx.h: fused, rendered
//      by the CUDA renderer, compiled by NVRTC).
// Out: run() takes the graph's inputs on the GPU and returns its outputs there: one launch per
//      fused kernel, extern calls (matmul: cuBLAS) and views through the eager CUDA ops.
// Guarantees:
//  * compiling needs no GPU (the null device: CI renders and compiles every graph it tests);
//  * run() raises where there is no GPU, and for inputs that are not CUDA tensors, naming both;
//  * symbolic sizes are kernel arguments (mini::Sizes): one compiled graph serves every size;
//  * every launch counts in metrics, as the C++ kernels do.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fusion/schedule.h"
#include "codegen/cuda_kernel.h"
#include "runtime/cuda_program.h"

namespace mini::runtime {

struct CompiledCudaGraph {
  fusion::Schedule schedule;
  codegen::CudaLayout layout;  // MINI_CODEGEN_LAYOUT's when it was rendered (the first kernel's)
  std::vector<codegen::CudaLayout> layouts;  // per kernel: how it was rendered and is launched
  // for reading (MINI_LOGS=output_code, with functions()): every kernel under its own name,
  // with the graph nodes it serves; NVRTC compiles `compiled`'s programs, one per distinct body
  std::string source;
  // per kernel: its program and function (compile_cuda_kernels: kernels of one body, in this
  // graph or any other, share them); empty when not compiled or the graph has no kernel
  CudaKernels compiled;
  double schedule_seconds = 0, codegen_seconds = 0;
  std::vector<std::vector<int>> frees;   // per step: the buffers no later step reads
  std::vector<int> split;                // per kernel: reductions in two stages (0: not split)
  std::vector<int> column_split;         // per kernel: column sums shared among blocks in y (0: not)
  std::vector<int> column_vector;        // per kernel: kept elements a thread of a column kernel (1: one)
  // per kernel: it takes its pointers aligned (codegen::cuda_assumes_aligned, which lowers the
  // kernel to decide: once here, not at every launch)
  std::vector<char> aligned;

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // run() that keeps every value it makes in `kept` instead of freeing it (a CUDA graph's
  // recording: the graph replays writes into them).
  std::vector<Tensor> run_keeping(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept) const;
  // run() with each kernel timed (CUDA events around its launch): milliseconds per kernel.
  std::vector<double> kernel_ms(const std::vector<Tensor>& inputs) const;
  std::vector<int> layout_numbers() const;  // layouts' numbers, a kernel's each
  // A comment for the source's reader (output_code): each kernel's name and the function it
  // runs, which kernels of one body share. "" when not compiled.
  std::string functions() const;

 private:
  // Made once, at the first run (compiling needs no GPU, loading does): the kernel of each
  // group, and a device copy of each captured constant tensor.
  void load() const;
  std::vector<Tensor> run_timed(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept,
                                std::vector<double>* kernel_ms) const;
  struct Run;  // one call's values, sizes and launch arguments (compiled_cuda_graph.cpp)
  std::vector<Tensor> inputs_on_device(const std::vector<Tensor>& inputs) const;
  void launch(int group, Run& run, bool timed) const;
  const Tensor& value(const Run& run, int id) const;
  mutable std::once_flag loaded_;
  mutable std::vector<uintptr_t> kernels_;
  mutable std::vector<Tensor> device_constants_;  // per node; null where it has no constant
  // the split kernels' partials (a slot per reduction per block) and arrival counters (zeroed
  // once; each launch leaves its counter at 0)
  mutable Tensor partials_, arrived_;
  mutable std::vector<int64_t> partials_at_, arrived_at_;  // per kernel: its first slot and counter
  mutable std::vector<int64_t> resident_;  // per kernel: its blocks the GPU holds at once (split columns)
};

// A fresh CUDA tensor of t's sizes and strides from offset 0 of its own allocation (which
// mini's allocator aligns), holding what t holds where `copy` is set.
Tensor same_layout(const Tensor& t, bool copy);

// What to release after each step of `s`: the values no later step reads (not outputs, not
// inputs). Shared by the C++ and CUDA compiled graphs.
std::vector<std::vector<int>> plan_frees(const fusion::Schedule& s);

// The step helpers both compiled graphs share (the size symbols come from Graph::symbol_values): a
// shape with its symbols replaced, and an extern or view step (through the eager ops, on the
// device of its arguments).
// Raises, naming the input and both layouts, unless `inputs` match the graph's inputs in number,
// dtype, rank, sizes (a symbol: any size) and strides (of dims longer than 1, where the
// graph fixed them): generated kernels index inputs by the strides they were compiled for, so a
// compiled graph called directly with another layout would read the wrong elements. mini.compile's
// tensor guards check the same before a cached graph runs, so run() does not: the direct-call
// bindings (mini.inductor, mini._C._inductor_*) call this first.
void check_inputs(const graph::Graph& g, const std::vector<Tensor>& inputs);
Shape resolve_shape(Shape shape, const std::vector<int64_t>& symbols);
// Runs extern or view step `st` of graph `g` on `args` (its node's inputs), with this call's
// symbols: sets values[st.node], and the values of the call's other nodes (st.also).
void run_extern(const graph::Graph& g, const fusion::Step& st, const std::vector<Tensor>& args,
                const std::vector<int64_t>& symbols, std::vector<Tensor>& values);

// Raises, naming the node, when a size of `g` is known only at run time (graph::kUnbacked: a
// nonzero's length, or a size computed from one): generated code needs every size as a number or
// a size symbol. mini.compile runs such graphs with eager kernels and never gets here.
void require_known_sizes(const graph::Graph& g);

}  // namespace mini::runtime
