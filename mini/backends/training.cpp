// training.cpp — see training.h.
#include "backends/training.h"

#include <algorithm>
#include <set>

#include "capture/compile_log.h"
#include "capture/compile_stats.h"

namespace mini::backends {

namespace cap = mini::capture;
namespace ag = mini::autograd;

namespace {

// MINI_LOGS=aot_graphs and MINI_COMPILE_DEBUG: the joint, forward and backward graphs, and what
// the partition saved for the backward. `n`: the graph's number ("3" of "__compiled_fn_3").
void report_partition(const ag::TrainingGraphs& tg, const CompileOptions& options, const std::string& n) {
  if (!cap::log_channels().aot_graphs && !cap::compile_debug()) return;
  std::string forward = tg.forward->print("Forward graph " + n), backward = tg.backward->print("Backward graph " + n);
  const char* name = tg.partitioner == ag::Partitioner::SaveAll ? "save-all"
                     : tg.partitioner == ag::Partitioner::MinCut  ? "min-cut"
                                                                  : "recompute";
  std::string saved = std::string("partitioner: ") + name + ", " +
                      std::to_string(tg.forward->outputs.size() - tg.num_user_outputs) + " values saved for backward (" +
                      std::to_string(tg.saved_bytes) + " bytes of intermediates, the rest are inputs)\n";
  if (cap::log_channels().aot_graphs) cap::log_write("TRACED GRAPH\n" + forward + "TRACED GRAPH\n" + backward + saved);
  if (cap::compile_debug()) {
    cap::debug_write(options.title, "aot_joint_graph.txt", tg.joint->print("Joint graph " + n));
    cap::debug_write(options.title, "aot_forward_graph.txt", forward);
    cap::debug_write(options.title, "aot_backward_graph.txt", backward + saved);
  }
}

// options for the half of the captured graph called `suffix` ("_forward", "_backward", ...)
CompileOptions half(const CompileOptions& options, const std::string& suffix) {
  CompileOptions o = options;
  o.title = options.title + suffix;
  o.debug_dir = options.title;
  o.training = false;
  o.mode = "default";
  return o;
}

}  // namespace

Runner compile_training(const graph::Graph& g, const CompileOptions& options, ag::Partitioner partitioner,
                        const HalfCompiler& compile_half) {
  std::shared_ptr<ag::TrainingGraphs> tg;
  cap::StageTimer joint_time(cap::Stage::JointGraph);
  try {
    tg = std::make_shared<ag::TrainingGraphs>(ag::make_training_graphs(g, partitioner));
  } catch (const Error& e) {
    if (cap::log_channels().aot_graphs || cap::log_channels().fusion)
      cap::log_write("aot: " + options.title + " runs with eager kernels (which record autograd): " + e.what());
    return {};
  }
  joint_time.stop();
  for (const std::string& w : tg->warnings) {  // the min-cut still a stub: the greedy rule stood in
    if (cap::log_channels().aot_graphs) cap::log_write("aot: " + options.title + ": " + w);
    static std::set<std::string> told;  // once per process
    if (told.insert(w).second) cap::warn_user(w);
  }
  std::string n = options.title.substr(options.title.rfind('_') + 1);  // "__compiled_fn_3" -> "3"
  report_partition(*tg, options, n);
  Runner fwd = compile_half(tg->forward, half(options, "_forward"));
  Runner bwd = compile_half(tg->backward, half(options, "_backward"));
  // the backward's first call is mini.compiler.stats()' "first run" too (it runs inside
  // backward(), after the unit's forward was counted); under the GIL, as backward() is
  auto first = std::make_shared<bool>(true);
  Runner counted_bwd = [bwd, first](const std::vector<Tensor>& inputs) {
    if (!*first) return bwd(inputs);
    *first = false;
    cap::StageTimer timer(cap::Stage::FirstRun);
    return bwd(inputs);
  };
  // a call whose loss did not read every output (the logits beside it): the backward without
  // the missing tangents, compiled at its first such call (ag::backward_for_given)
  ag::BackwardCompiler compile_variant = [options, n, compile_half](std::shared_ptr<graph::Graph> variant,
                                                                    const std::string& which) -> Runner {
    if (cap::log_channels().aot_graphs)
      cap::log_write("TRACED GRAPH\n" + variant->print("Backward graph " + n + " (" + which + ")"));
    std::string name = which;
    std::replace(name.begin(), name.end(), ' ', '_');
    return compile_half(variant, half(options, "_backward_" + name));
  };
  return ag::make_training_runner(tg, fwd, counted_bwd, compile_variant);
}

Runner AotEager::compile(const graph::Graph& g, const CompileOptions& options) {
  if (!options.training) return {};
  return compile_training(g, options, ag::Partitioner::SaveAll,
                          [](std::shared_ptr<graph::Graph> half, const CompileOptions&) { return interpret(half); });
}

}  // namespace mini::backends
