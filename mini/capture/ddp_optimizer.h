// ddp_optimizer.h — DDPOptimizer (torch/_dynamo/backends/distributed.py): a graph captured
// inside a DistributedDataParallel forward is cut at DDP's gradient-bucket boundaries, and
// each piece is compiled by the request's backend on its own. Internal to capture/.
//
// Why: DDP all-reduces a bucket of gradients from autograd hooks as soon as the bucket's last
// gradient is accumulated, so that communication overlaps the rest of the backward. A compiled
// graph's backward is one autograd node: every gradient comes out at its end, every hook fires
// then, and all communication waits for the whole backward. Cut in pieces, each piece's
// backward is its own node, and a bucket's gradients are final when its piece's backward ran.
//
// In:  ActiveDdp, set by mini.nn.parallel.DistributedDataParallel's forward (through
//      _C._set_active_ddp) while its inner module runs, so that the frame captured there is
//      known to be DDP's; a captured graph and the tensors seen while tracing it;
//      mini.config.optimize_ddp.
// Out: plan_ddp_split: the buckets and pieces (graph/split.h), or null where the graph is not
//      cut (why: MINI_LOGS=ddp). The cut is recorded for explain() as torch does, one graph
//      break per cut ("DDPOptimizer intentional graph-break"). compile_pieces: one Runner with
//      the whole graph's calling convention that runs each piece's runner in order.
#pragma once
#include <Python.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "backends/backend.h"
#include "graph/split.h"

namespace mini::capture {

struct ActiveDdp {
  bool active = false;
  graph::BucketCaps caps;
  std::unordered_set<const TensorImpl*> params;  // the DDP module's parameters (alive while active)
};
ActiveDdp& active_ddp();

struct DdpSplit {
  std::vector<graph::Bucket> buckets;
  graph::SplitGraph split;
};

// The split of graph `title` (`where`: the captured function, for explain), or null: no DDP
// forward is running, optimize_ddp is off, the graph has symbolic sizes, or its parameters fit
// one bucket. `example_inputs`: the tensors seen while tracing, one per graph input (Borrowed).
std::shared_ptr<const DdpSplit> plan_ddp_split(const graph::Graph& g, const std::vector<PyObject*>& example_inputs,
                                               const std::string& title, const std::string& where);

// The title of piece i of graph `title`: "__compiled_fn_3_submod_0" (torch's split_gm names
// its pieces submod_0, submod_1, ...).
std::string piece_title(const std::string& title, size_t i);

// How capture compiles one piece (the request's backend); an empty Runner runs the piece with
// the eager kernels.
using PieceCompiler = std::function<backends::Runner(const graph::GraphPiece& piece, const std::string& title)>;
backends::Runner compile_pieces(std::shared_ptr<const DdpSplit> ddp, const std::string& title,
                                const PieceCompiler& compile);

}  // namespace mini::capture
