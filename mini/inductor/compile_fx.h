// compile_fx.h — the inductor: a captured graph into generated, compiled kernels (Inductor's
// compile_fx). It runs the stages below it in order: decompose and fuse (mini/fusion), lower
// and render (mini/codegen), compile and load through the kernel code cache (mini/runtime).
//
// In:  a graph (mini/graph) whose sizes are numbers or size symbols.
// Out: a CompiledGraph (C++: one shared object) or a CompiledCudaGraph (CUDA: a CUBIN per
//      kernel body), ready to run; or, for mini.compile, a backends::Runner over one of them,
//      with what happened told to MINI_LOGS and MINI_COMPILE_DEBUG (compile_fx).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "runtime/compiled_cuda_graph.h"
#include "runtime/compiled_graph.h"

namespace mini::inductor {

// Lowers, fuses, renders for the CPU, compiles (or loads from the code cache) and links `g`.
std::shared_ptr<runtime::CompiledGraph> compile_cpp_graph(const graph::Graph& g, const std::string& cache_dir);

// Lowers, fuses, renders for CUDA and compiles `g` for `arch` ("": the GPU's, else sm_90).
// `layout`: the kernel layout (null: MINI_CODEGEN_LAYOUT's, else the default); `per_kernel`,
// where given, one layout number per kernel instead (fusion's kernels do not depend on it).
// `nvrtc` false: rendered only (no program: run() cannot), where no CUDA toolkit is needed.
std::shared_ptr<runtime::CompiledCudaGraph> compile_cuda_graph(const graph::Graph& g, const std::string& arch,
                                                               const std::string& cache_dir,
                                                               const codegen::CudaLayout* layout = nullptr,
                                                               const std::vector<int>* per_kernel = nullptr,
                                                               bool nvrtc = true);

// The inductor backend on a graph that is not trained (backends/training.h prepares those):
// the graph compiled for its device (compile_cpp_graph or compile_cuda_graph; a bfloat16 graph
// on the CPU runs with eager kernels), in options.mode ("reduce-overhead": replayed as a CUDA
// graph; "max-autotune": every kernel's layout timed at the first call). MINI_LOGS=fusion and
// output_code show the fusion decisions and the source; compile times go to
// mini.compiler.stats().
backends::Runner compile_fx(const graph::Graph& g, const backends::CompileOptions& options);

// Registers the built-in backends beside "eager": "aot_eager" (backends/training.h) and
// "inductor" (compile_fx, and for a trained graph its halves each). The Python module calls it
// at import.
void register_backends();

}  // namespace mini::inductor
