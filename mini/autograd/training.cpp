// training.cpp — the training graphs of a captured graph (make_training_graphs: the joint
// trace, the partition, the backward's build, one file each: training_steps.h), and the
// runner that calls them as one autograd node (make_training_runner).
#include "autograd/training.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "autograd/training_steps.h"
#include "tensor/autograd.h"
#include "tensor/errors.h"
#include "tensor/ops.h"

namespace mini::autograd {

bool needs_training_graphs(const Graph& g) {
  for (int i : g.inputs)
    if (g.nodes[i].meta.requires_grad) return true;
  return false;
}

// The three steps: trace the joint graph (joint.cpp), give each forward value the backward
// reads its fate (partition.cpp), build the backward graph (backward_graph.cpp); the forward
// graph is the captured one returning the saved values too.
TrainingGraphs make_training_graphs(const Graph& traced, Partitioner partitioner) {
  if (!traced.symbols.empty())
    fail("training graphs need static sizes (this graph has symbolic sizes)");
  Graph fwd = traced;
  add_other_outputs(fwd);
  TrainingGraphs tg;
  tg.partitioner = partitioner;
  tg.joint = std::make_shared<Graph>(fwd);
  const Graph& J = *tg.joint;
  const int first_backward = trace_joint(fwd, *tg.joint, tg);
  PartitionWalk walk = partition_walk(J, first_backward, tg);  // Recompute where the min-cut is a stub

  auto bwd = std::make_shared<Graph>();
  bwd->device = fwd.device;
  std::vector<int> saved = build_backward(J, first_backward, walk, *bwd, tg);
  tg.backward = bwd;

  tg.forward = std::make_shared<Graph>(fwd);
  for (int id : saved) tg.forward->outputs.push_back(id);
  // The runner runs the forward graph with grad off and attaches the backward itself: no op
  // of it may record autograd (an enable_grad() block's ops included).
  for (Node& n : tg.forward->nodes) n.grad_mode = graph::GradMode::Ambient;
  return tg;
}

namespace {

// The backward graphs of calls that miss some tangents (backward_for_given), compiled once for
// each set of missing tangents and shared by every call of the compiled function.
struct BackwardVariants {
  BackwardCompiler compile;
  std::mutex mutex;
  std::map<std::vector<bool>, Runner> runners;  // an empty runner: the graph could not be built
};

// The autograd node of one compiled call: runs the backward graph on the saved values and
// the incoming gradients.
struct CompiledBackward : CustomBackward {
  std::shared_ptr<const TrainingGraphs> tg;
  Runner backward;
  std::shared_ptr<BackwardVariants> variants;
  std::vector<SavedTensor> saved;

  // The runner for a call with these tangents given: the backward graph's own when all are,
  // else its variant without the missing ones (empty if there is none: zeros stand in).
  Runner runner_for(const std::vector<bool>& given) {
    if (std::all_of(given.begin(), given.end(), [](bool g) { return g; })) return backward;
    if (!variants || !variants->compile) return {};
    std::lock_guard<std::mutex> lock(variants->mutex);
    auto it = variants->runners.find(given);
    if (it != variants->runners.end()) return it->second;
    std::string which = "missing tangents";
    for (size_t t = 0; t < given.size(); t++)
      if (!given[t]) which += " " + std::to_string(t + 1);
    Runner r;
    try {
      r = variants->compile(backward_for_given(*tg, given), which);
    } catch (const Error&) {
      r = nullptr;  // zeros stand in, as they always can
    }
    return variants->runners[given] = r;
  }

  const char* name() const override { return "CompiledFunction"; }  // shown as CompiledFunctionBackward

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    std::vector<Tensor> inputs;
    for (const SavedTensor& s : saved) inputs.push_back(s.unpack(name()));
    std::vector<bool> given(tg->tangents.size());
    for (size_t t = 0; t < tg->tangents.size(); t++) given[t] = t < grad_outputs.size() && grad_outputs[t];
    Runner run = runner_for(given);
    for (size_t t = 0; t < tg->tangents.size(); t++) {
      const TensorMeta& m = tg->tangents[t];
      Tensor g = given[t] ? grad_outputs[t] : nullptr;
      if (!g) {
        if (run) continue;  // the variant graph has no input for it
        g = zeros(m.sizes, m.dtype, tg->backward->device);  // an output that got no gradient (logits beside a loss)
      } else {
        if (g->dtype != m.dtype) g = cast(g, m.dtype);
        // The backward graph was compiled for contiguous tangents; an incoming gradient can be
        // a broadcast (sum's backward) or a transpose.
        if (!g->is_contiguous()) g = contiguous(g);
      }
      inputs.push_back(g);
    }
    std::vector<Tensor> grads = run ? run(inputs) : backward(inputs);
    // An input reached only through outputs that got no gradient: none, not the zeros the
    // backward graph computed from zero tangents (eager leaves such a leaf's .grad None).
    for (size_t k = 0; k < grads.size() && k < tg->tangents_of_grad.size(); k++) {
      const std::vector<int>& reads = tg->tangents_of_grad[k];
      bool reached = reads.empty();  // a gradient that reads no tangent: kept as it is
      for (int t : reads) reached = reached || given[t];
      if (!reached) grads[k] = nullptr;
    }
    return grads;
  }

  void release() override { saved.clear(); }
};

}  // namespace

Runner make_training_runner(std::shared_ptr<const TrainingGraphs> tg, Runner forward, Runner backward,
                            BackwardCompiler compile_backward) {
  auto variants = std::make_shared<BackwardVariants>();
  variants->compile = std::move(compile_backward);
  return [tg, forward, backward, variants](const std::vector<Tensor>& inputs) {
    std::vector<Tensor> outs;
    {
      NoGradGuard no_grad;
      outs = forward(inputs);
    }
    std::vector<Tensor> user(outs.begin(), outs.begin() + tg->num_user_outputs);
    bool record = grad_enabled();
    bool any = false;
    for (int p : tg->grad_inputs) any = any || inputs[p]->needs_grad();
    if (!record || !any || tg->tangents.empty()) return user;

    auto node = std::make_shared<GradNode>();
    auto bw = std::make_shared<CompiledBackward>();
    bw->tg = tg;
    bw->backward = backward;
    bw->variants = variants;
    for (size_t i = tg->num_user_outputs; i < outs.size(); i++) {
      bw->saved.emplace_back();
      bw->saved.back().save(outs[i]);
    }
    node->custom = bw;
    node->num_outputs = (int)tg->tangents.size();
    for (int p : tg->grad_inputs) node->next.push_back(edge_of(inputs[p]));
    std::set<TensorImpl*> graph_inputs;
    for (const Tensor& t : inputs) graph_inputs.insert(t.get());
    for (int k = 0; k < tg->num_user_outputs; k++) {
      int t = tg->tangent_of_output[k];
      // An output that is an input itself keeps its own autograd history; its tangent stays
      // zero and the gradient reaches it directly.
      if (t < 0 || graph_inputs.count(user[k].get())) continue;
      user[k]->grad_fn = node;
      user[k]->output_nr = t;
    }
    return user;
  };
}

}  // namespace mini::autograd
