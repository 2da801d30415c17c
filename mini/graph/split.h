// split.h — a graph cut into pieces that run one after another (torch.fx's split_module), and
// the cut DDP wants: pieces whose parameters fill gradient buckets (DDPOptimizer's plan).
//
// In:  a Graph without symbolic sizes, and a piece number per op node that never decreases
//      along an edge (a value flows from a piece to the same or a later one).
// Out: SplitGraph: one ordinary Graph per piece, whose inputs are the original graph's inputs
//      or earlier pieces' outputs, and whose outputs are what later pieces or the original
//      graph's outputs read; running the pieces in order computes the original graph's outputs.
// Guarantees: every op node lands in exactly one piece, with its attributes, meta, grad mode and
//      source line; a constant is copied into every piece that reads it; an input appears once
//      in each piece that reads it (a parameter used by two pieces is an input of both, and
//      its gradient is the sum of theirs, as in the whole graph).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace mini::graph {

// Where a piece's input (or the split graph's output) comes from: input `index` of the original
// graph (piece == -1), or output `index` of piece `piece`.
struct PieceValue {
  int piece = -1;
  int index = 0;
};

struct GraphPiece {
  std::shared_ptr<Graph> graph;
  std::vector<PieceValue> inputs;  // one per graph->inputs
  std::vector<int> nodes;          // the original graph's op nodes it holds
};

struct SplitGraph {
  std::vector<GraphPiece> pieces;   // in the order they run
  std::vector<PieceValue> outputs;  // one per original graph output
};

// The pieces of `g`; piece_of_node[id] numbers op node id's piece (other entries are ignored).
// Throws mini::Error when g has symbolic sizes or a value would flow to an earlier piece.
SplitGraph split_graph(const Graph& g, const std::vector<int>& piece_of_node);

// ---- DDPOptimizer's buckets ----------------------------------------------------------------
// A stretch of the graph's op nodes whose parameters' gradients DDP all-reduces together.
struct Bucket {
  std::vector<int> nodes;   // op node ids, in graph order
  std::vector<int> params;  // graph input positions of the parameters first used in it
  int64_t bytes = 0;        // those parameters' bytes
  int extended = 0;         // ops taken in past the cap to reach one whose value leaves the
                            // bucket (torch's opcount_increased_to_capture_external_output)
};

struct BucketCaps {
  int64_t bucket_bytes = 25 << 20;      // DDP's bucket_cap_mb (25 MB)
  int64_t first_bucket_bytes = 1 << 20; // the bucket all-reduced first (torch's 1 MB)
};

// DDPOptimizer's plan, in graph order (the first bucket holds the forward's first ops; its
// all-reduce starts last). The op nodes are walked from the last to the first, the way the
// backward reaches them; a parameter (param_bytes[input position] > 0) is counted where the
// walk meets its first use in the forward, the point where its gradient is complete. When the
// bucket being filled holds at least its cap (first_bucket_bytes for the first one filled,
// which is all-reduced first), a new bucket starts, but only where one of its values is read
// outside it (else the piece would compute nothing anyone reads: the bucket goes on,
// `extended`). A last bucket without parameters (ops before the first parameter's use) joins
// the next one. One bucket means: no split.
std::vector<Bucket> plan_buckets(const Graph& g, const std::vector<int64_t>& param_bytes, BucketCaps caps);

// piece_of_node for split_graph from a bucket plan.
std::vector<int> piece_of_nodes(const Graph& g, const std::vector<Bucket>& buckets);

}  // namespace mini::graph
