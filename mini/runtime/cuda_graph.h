// cuda_graph.h — a captured graph compiled for CUDA: fused, rendered by the CUDA renderer,
// compiled by NVRTC (cuda_program.h) and run on CUDA tensors.
//
// In:  a captured graph (mini/graph).
// Out: a CompiledCudaGraph whose run() takes the graph's inputs on the GPU and returns its
//      outputs there: one launch per fused kernel, extern calls (matmul: cuBLAS) and views
//      through the eager CUDA ops.
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
  mutable std::once_flag loaded_;
  mutable std::vector<uintptr_t> kernels_;
  mutable std::vector<Tensor> device_constants_;  // per node; null where it has no constant
  // the split kernels' partials (a slot per reduction per block) and arrival counters (zeroed
  // once; each launch leaves its counter at 0)
  mutable Tensor partials_, arrived_;
  mutable std::vector<int64_t> partials_at_, arrived_at_;  // per kernel: its first slot and counter
};

// mode="reduce-overhead": a compiled graph's launches recorded into a CUDA graph, one per
// input layout, and replayed: one launch a call instead of one per kernel (torch's
// cudagraphs). The first call of a layout runs as usual (a warm-up: kernels load, cuBLAS
// makes its workspace); the second records. Inputs that require grad (parameters) are read
// where they are, and a new address records again; the others are copied into the recording's
// own buffers before each replay. Outputs are copies (a replay overwrites the recording's own):
// a later call never changes a tensor an earlier one returned. Graphs with random ops (a
// replay would repeat their numbers) are refused by why_not; a recording that meets work a
// graph cannot replay (a copy from the host) is dropped, and those inputs run in default mode.
class CudaGraphReplay {
 public:
  explicit CudaGraphReplay(std::shared_ptr<CompiledCudaGraph> cg) : cg_(std::move(cg)) {}
  ~CudaGraphReplay();
  CudaGraphReplay(const CudaGraphReplay&) = delete;
  CudaGraphReplay& operator=(const CudaGraphReplay&) = delete;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  int recordings() const;  // CUDA graphs recorded so far
  // "" if `cg` can be replayed, else why not (a random op, a copy to the host).
  static std::string why_not(const CompiledCudaGraph& cg);

 private:
  struct Recording {
    std::vector<Tensor> inputs, outputs, values;  // the graph's own buffers, kept while it lives
    std::vector<void*> freed;                     // blocks freed while recording (capture_graph)
    uintptr_t exec = 0;
    bool warmed = false;
    std::string why_not;  // why these inputs cannot be recorded (they run in default mode)
  };
  std::shared_ptr<CompiledCudaGraph> cg_;
  std::map<std::string, Recording> recordings_;  // by the inputs' layouts and static addresses
  mutable std::mutex mutex_;
};

// Lowers, fuses, renders for CUDA and compiles `g` for `arch` ("": the GPU's, else sm_90).
// `layout`: the kernel layout (null: MINI_CODEGEN_LAYOUT's, else the default); `per_kernel`,
// where given, one layout number per kernel instead (fusion's kernels do not depend on it).
// `nvrtc` false: rendered only (no program: run() cannot), where no CUDA toolkit is needed.
std::shared_ptr<CompiledCudaGraph> compile_cuda_graph(const graph::Graph& g, const std::string& arch,
                                                      const std::string& cache_dir,
                                                      const codegen::CudaLayout* layout = nullptr,
                                                      const std::vector<int>* per_kernel = nullptr,
                                                      bool nvrtc = true);

// mode="max-autotune": the graph compiled in every kernel layout (codegen/cuda_kernel.h), and
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
  std::shared_ptr<CompiledCudaGraph> best_;
  std::vector<double> times_;
  std::vector<std::vector<double>> kernel_times_;
  bool tuned_ = false;
  mutable std::mutex mutex_;
};

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
