// training.h — a backend's graph whose inputs require grad (AOTAutograd's role in a backend):
// the joint forward/backward graph, partitioned, each half compiled by the backend's compiler.
//
// In:  a captured graph, CompileOptions (training is set), the partition rule, and how the
//      backend compiles one half (interpret for aot_eager, inductor::compile_fx for inductor).
// Out: a Runner with the captured graph's calling convention that runs the forward half and
//      attaches the backward half for autograd (autograd::make_training_runner); or an empty
//      Runner, after logging why, when the graph cannot be differentiated as a graph: it then
//      runs with the eager kernels, which record autograd.
#pragma once
#include <memory>

#include "autograd/training.h"
#include "backends/backend.h"

namespace mini::backends {

// How a backend compiles one half (forward, backward, or a backward variant) of a trained
// graph; options.title names the half ("__compiled_fn_3_forward").
using HalfCompiler = std::function<Runner(std::shared_ptr<graph::Graph> half, const CompileOptions& options)>;

Runner compile_training(const graph::Graph& g, const CompileOptions& options, autograd::Partitioner partitioner,
                        const HalfCompiler& compile_half);

// backend="aot_eager": a trained graph's halves (the save-all partition) interpreted; any other
// graph runs with the eager kernels.
class AotEager : public Backend {
 public:
  Runner compile(const graph::Graph& g, const CompileOptions& options) override;
};

}  // namespace mini::backends
