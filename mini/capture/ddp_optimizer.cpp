// ddp_optimizer.cpp — see ddp_optimizer.h.
#include "capture/ddp_optimizer.h"

#include <cstdio>

#include "capture/compile_log.h"
#include "capture/config.h"
#include "guards/guards.h"

namespace mini::capture {

ActiveDdp& active_ddp() {
  static ActiveDdp a;
  return a;
}

std::string piece_title(const std::string& title, size_t i) { return title + "_submod_" + std::to_string(i); }

namespace {

std::string bytes_str(int64_t bytes) {
  char s[32];
  if (bytes < 1 << 20) std::snprintf(s, sizeof s, "%lld B", (long long)bytes);
  else std::snprintf(s, sizeof s, "%.1f MB", bytes / double(1 << 20));
  return s;
}

// Each graph input's bytes if it is one of the DDP module's parameters, else 0.
std::vector<int64_t> parameter_bytes(const graph::Graph& g, const std::vector<PyObject*>& examples) {
  std::vector<int64_t> bytes(g.inputs.size(), 0);
  for (size_t i = 0; i < g.inputs.size() && i < examples.size(); i++) {
    TensorImpl* t = examples[i] ? guards::unwrap_tensor(examples[i]) : nullptr;
    if (t && t->requires_grad && active_ddp().params.count(t)) bytes[i] = t->nbytes();
  }
  return bytes;
}

// MINI_LOGS=ddp: the buckets in graph order, each a piece, with its parameters (pytorch's
// pretty_print_buckets).
void log_buckets(const graph::Graph& g, const std::vector<graph::Bucket>& buckets, const std::string& title) {
  const graph::BucketCaps& caps = active_ddp().caps;
  std::string made = buckets.size() == 1 ? " bucket" : " buckets, one graph each";
  std::string text = "DDPOptimizer: " + title + " used bucket cap " + bytes_str(caps.bucket_bytes) +
                     " (the bucket all-reduced first: " + bytes_str(caps.first_bucket_bytes) + ") and made " +
                     std::to_string(buckets.size()) + made + "; the last is all-reduced first\n";
  for (size_t b = 0; b < buckets.size(); b++) {
    const graph::Bucket& bucket = buckets[b];
    text += "  submod_" + std::to_string(b) + ": " + std::to_string(bucket.nodes.size()) + " ops, " +
            std::to_string(bucket.params.size()) + " parameters (" + bytes_str(bucket.bytes) + ")";
    for (size_t k = 0; k < bucket.params.size(); k++)
      text += (k ? ", " : ": ") + g.nodes[g.inputs[bucket.params[k]]].source;
    if (bucket.extended)
      text += "\n    extended by " + std::to_string(bucket.extended) +
              " ops past its cap, to reach a value read outside it (a graph must have an output)";
    text += "\n";
  }
  log_write(text);
}

// explain() lists each cut as a graph break, as torch's explain shows DDPOptimizer's
// compile_subgraph_reason, at the user's line of the piece's first op ("File: <where>, code:
// <line>", as capture records it), else at the captured function.
void record_cuts(const graph::Graph& g, const DdpSplit& ddp, const std::string& where) {
  for (size_t b = 1; b < ddp.buckets.size(); b++) {
    const std::string& code = g.nodes[ddp.buckets[b].nodes.front()].code;
    size_t at = code.find(", code: ");
    bool located = code.rfind("File: ", 0) == 0 && at != std::string::npos;
    record_break(BreakEvent{"DDPOptimizer intentional graph-break: submod_" + std::to_string(b) +
                                " starts a new DDP bucket (" + bytes_str(ddp.buckets[b].bytes) +
                                " of parameters), so that its gradients' all-reduce can start while the "
                                "backward of the graphs before it runs. Set mini.config.optimize_ddp = "
                                "False to disable.",
                            located ? code.substr(6, at - 6) : where, located ? code.substr(at + 8) : ""});
  }
}

std::nullptr_t not_split(const std::string& title, const std::string& why) {
  if (log_channels().ddp) log_write("DDPOptimizer: " + title + " is not split: " + why);
  return nullptr;
}

}  // namespace

std::shared_ptr<const DdpSplit> plan_ddp_split(const graph::Graph& g, const std::vector<PyObject*>& example_inputs,
                                               const std::string& title, const std::string& where) {
  if (!active_ddp().active) return nullptr;
  if (!compile_config().optimize_ddp)
    return not_split(title, "mini.config.optimize_ddp is False: its backward is one autograd node, and every "
                            "bucket's all-reduce waits for its end");
  if (!g.symbols.empty())
    return not_split(title, "it has symbolic sizes (dynamic shapes), which the split keeps whole");
  auto ddp = std::make_shared<DdpSplit>();
  ddp->buckets = graph::plan_buckets(g, parameter_bytes(g, example_inputs), active_ddp().caps);
  if (log_channels().ddp) log_buckets(g, ddp->buckets, title);
  if (ddp->buckets.size() < 2)
    return not_split(title, ddp->buckets[0].params.empty() ? "it reads none of the DDP module's parameters"
                                                           : "its parameters fit one bucket");
  ddp->split = graph::split_graph(g, graph::piece_of_nodes(g, ddp->buckets));
  if (compile_debug())
    for (size_t i = 0; i < ddp->split.pieces.size(); i++)
      debug_write(title, "ddp_submod_" + std::to_string(i) + ".txt",
                  ddp->split.pieces[i].graph->print(piece_title(title, i)));
  record_cuts(g, *ddp, where);
  return ddp;
}

backends::Runner compile_pieces(std::shared_ptr<const DdpSplit> ddp, const std::string& title,
                                const PieceCompiler& compile) {
  std::vector<backends::Runner> runners;
  for (size_t i = 0; i < ddp->split.pieces.size(); i++)
    runners.push_back(compile(ddp->split.pieces[i], piece_title(title, i)));
  // Each piece's runner attaches its own autograd node to its outputs (a trained piece's
  // CompiledFunctionBackward), and the next piece's node has an edge to it: the backward runs
  // the pieces' backwards from the last to the first, and the parameters of a piece have their
  // gradients, and their hooks fire, as soon as that piece's backward ran.
  return [ddp, runners](const std::vector<Tensor>& inputs) {
    const graph::SplitGraph& s = ddp->split;
    std::vector<std::vector<Tensor>> outs(s.pieces.size());
    auto value = [&](graph::PieceValue v) { return v.piece < 0 ? inputs.at(v.index) : outs[v.piece].at(v.index); };
    for (size_t i = 0; i < s.pieces.size(); i++) {
      std::vector<Tensor> in;
      for (graph::PieceValue v : s.pieces[i].inputs) in.push_back(value(v));
      outs[i] = runners[i] ? runners[i](in) : graph::run_graph(*s.pieces[i].graph, in);
    }
    std::vector<Tensor> result;
    for (graph::PieceValue v : s.outputs) result.push_back(value(v));
    return result;
  };
}

}  // namespace mini::capture
