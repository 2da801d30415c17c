// backend.h — a compiler backend: what capture hands each captured graph to (the `backend=` of
// mini.compile, Dynamo's compiler_fn), and what it gets back.
//
// In:  a Graph (its inputs' metas describe the example inputs) and CompileOptions (the mode,
//      whether the graph is trained, the names its logs and debug files use).
// Out: a Runner (the graph's inputs to its outputs), or an empty Runner: run the graph with the
//      eager kernels (graph::run_graph), which record autograd as the code would.
//
// The built-in backends, by name (torch's):
//   eager      every graph interpreted by the eager kernels                  (backend.cpp)
//   aot_eager  a trained graph split into forward and backward graphs (save-all), each
//              interpreted; other graphs as eager                           (training.cpp)
//   inductor   every graph fused, rendered as C++ or CUDA and compiled (mini/inductor); a
//              trained graph's halves (the recompute or min-cut partition) each so
// A Python callable is a backend too: capture calls it with a GraphModule and the example
// inputs (capture/convert_frame.cpp), and runs what it returns with Python objects, not Tensors.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace mini::backends {

using Runner = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct CompileOptions {
  std::string title;      // the graph's name in logs: "__compiled_fn_3", "__compiled_fn_3_backward"
  std::string debug_dir;  // its MINI_COMPILE_DEBUG folder: the captured graph's title
  std::string mode = "default";  // "reduce-overhead": CUDA graphs; "max-autotune": layouts timed
  bool training = false;  // inputs require grad and grad is on: a forward and a backward graph
  std::string cache_dir;  // the code cache's folder (mini.config.cache_dir)
  std::string partitioner = "recompute";  // a trained graph's split under inductor: or "min-cut"
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The runner of `g`, or an empty one (run it with the eager kernels). Raises mini::Error
  // when the graph cannot be compiled; capture reports it (or, under suppress_errors, runs the
  // graph eagerly and warns).
  virtual Runner compile(const graph::Graph& g, const CompileOptions& options) = 0;
};

// The built-in backend `name` ("eager", "aot_eager", "inductor"), or null.
Backend* find_backend(const std::string& name);
// Adds (or replaces) a built-in backend; the Python module registers them at import.
void register_backend(const std::string& name, std::unique_ptr<Backend> backend);

// The graph interpreted by the eager kernels (backends "eager" and "aot_eager" without training).
Runner interpret(std::shared_ptr<graph::Graph> g);

}  // namespace mini::backends
