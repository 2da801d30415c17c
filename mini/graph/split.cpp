// split.cpp — see split.h.
#include "graph/split.h"

#include <algorithm>
#include <map>

namespace mini::graph {

namespace {

// Builds the pieces node by node: what each piece has made of an original node, and which
// original values each piece hands on as outputs.
struct Splitter {
  const Graph& g;
  const std::vector<int>& piece_of;
  SplitGraph out;
  std::vector<std::map<int, int>> local;     // per piece: original node id -> its node there
  std::vector<std::map<int, int>> exported;  // per piece: original node id -> output index
  std::vector<int> input_position;           // original node id -> position in g.inputs, or -1

  Splitter(const Graph& graph, const std::vector<int>& pieces, int count)
      : g(graph), piece_of(pieces), local(count), exported(count), input_position(graph.nodes.size(), -1) {
    for (size_t i = 0; i < g.inputs.size(); i++) input_position[g.inputs[i]] = (int)i;
    out.pieces.resize(count);
    for (GraphPiece& piece : out.pieces) {
      piece.graph = std::make_shared<Graph>();
      piece.graph->device = g.device;
    }
  }

  // Original op node `id`'s value as an output of its piece (made one on first request).
  PieceValue exported_value(int id) {
    int p = piece_of[id];
    auto [it, added] = exported[p].try_emplace(id, (int)out.pieces[p].graph->outputs.size());
    if (added) out.pieces[p].graph->outputs.push_back(local[p].at(id));
    return {p, it->second};
  }

  // Original node `id` as a node of piece p: an op of p itself, a copied constant, or a new
  // input fed by the original graph or an earlier piece.
  int value_in(int p, int id) {
    auto found = local[p].find(id);
    if (found != local[p].end()) return found->second;
    const Node& node = g.nodes[id];
    Graph& piece = *out.pieces[p].graph;
    int made;
    if (node.kind == NodeKind::Constant) {
      made = piece.add_constant(node.value, node.meta.dtype);
    } else {
      bool input = node.kind == NodeKind::Input;
      PieceValue from = input ? PieceValue{-1, input_position[id]} : exported_value(id);
      made = piece.add_input(node.meta, input ? node.source : node.name);
      piece.nodes[made].wrapped_number = node.wrapped_number;
      out.pieces[p].inputs.push_back(from);
    }
    local[p][id] = made;
    return made;
  }

  void add_op(int id) {
    const Node& node = g.nodes[id];
    int p = piece_of[id];
    std::vector<int> inputs;
    for (int in : node.inputs) {
      if (g.nodes[in].kind == NodeKind::Op && piece_of[in] > p)
        fail("split_graph: ", node.name, " (piece ", p, ") reads ", g.nodes[in].name, " of the later piece ",
             piece_of[in], "; pieces must run in order");
      inputs.push_back(value_in(p, in));
    }
    Graph& piece = *out.pieces[p].graph;
    int made = piece.add_op(node.op, inputs, node.attrs, node.code);
    Node& copy = piece.nodes[made];
    copy.meta = node.meta;  // requires_grad, strides: as capture decided them
    copy.grad_mode = node.grad_mode;
    copy.symbolic_attrs = node.symbolic_attrs;
    local[p][id] = made;
    out.pieces[p].nodes.push_back(id);
  }

  // The original graph's output `id`: an input passes straight through; anything else is
  // an output of the piece that made it (a constant: of the last piece).
  PieceValue final_output(int id) {
    const Node& node = g.nodes[id];
    if (node.kind == NodeKind::Input) return {-1, input_position[id]};
    if (node.kind == NodeKind::Constant) {
      int last = (int)out.pieces.size() - 1;
      int made = value_in(last, id);
      auto [it, added] = exported[last].try_emplace(id, (int)out.pieces[last].graph->outputs.size());
      if (added) out.pieces[last].graph->outputs.push_back(made);
      return {last, it->second};
    }
    return exported_value(id);
  }
};

}  // namespace

SplitGraph split_graph(const Graph& g, const std::vector<int>& piece_of_node) {
  if (!g.symbols.empty()) fail("split_graph: a graph with symbolic sizes is not split");
  int count = 0;
  for (size_t id = 0; id < g.nodes.size(); id++)
    if (g.nodes[id].kind == NodeKind::Op) count = std::max(count, piece_of_node.at(id) + 1);
  Splitter s(g, piece_of_node, std::max(count, 1));
  for (size_t id = 0; id < g.nodes.size(); id++)
    if (g.nodes[id].kind == NodeKind::Op) s.add_op((int)id);
  for (int id : g.outputs) s.out.outputs.push_back(s.final_output(id));
  return std::move(s.out);
}

namespace {

// For each parameter (an input with param_bytes > 0), the op node that uses it first.
std::map<int, std::vector<int>> first_uses(const Graph& g, const std::vector<int64_t>& param_bytes) {
  std::vector<int> position(g.nodes.size(), -1);
  for (size_t i = 0; i < g.inputs.size(); i++) position[g.inputs[i]] = (int)i;
  std::vector<bool> seen(g.inputs.size());
  std::map<int, std::vector<int>> uses;
  for (size_t id = 0; id < g.nodes.size(); id++) {
    if (g.nodes[id].kind != NodeKind::Op) continue;
    for (int in : g.nodes[id].inputs) {
      int p = position[in];
      if (p < 0 || p >= (int)param_bytes.size() || param_bytes[p] <= 0 || seen[p]) continue;
      seen[p] = true;
      uses[(int)id].push_back(p);
    }
  }
  return uses;
}

}  // namespace

std::vector<Bucket> plan_buckets(const Graph& g, const std::vector<int64_t>& param_bytes, BucketCaps caps) {
  std::map<int, std::vector<int>> first_use = first_uses(g, param_bytes);
  std::vector<std::vector<int>> users(g.nodes.size());
  for (size_t id = 0; id < g.nodes.size(); id++)
    for (int in : g.nodes[id].inputs) users[in].push_back((int)id);
  std::vector<bool> is_output(g.nodes.size());
  for (int id : g.outputs) is_output[id] = true;

  std::vector<Bucket> filled;             // in walk order: the graph's last bucket first
  Bucket current;
  bool read_outside = false;              // a value of `current` is read outside it
  std::vector<int> bucket_of(g.nodes.size(), -1);
  int previous = -1;                      // the op node walked before (the next one in graph order)
  for (int id = (int)g.nodes.size() - 1; id >= 0; id--) {
    const Node& node = g.nodes[id];
    if (node.kind != NodeKind::Op) continue;
    int64_t cap = filled.empty() ? caps.first_bucket_bytes : caps.bucket_bytes;
    bool one_call = previous >= 0 && same_call(node, g.nodes[previous]);  // never cut a call's outputs apart
    if (current.bytes >= cap && !one_call) {
      if (read_outside) {
        filled.push_back(std::move(current));
        current = Bucket{};
        read_outside = false;
      } else {
        current.extended++;
      }
    }
    for (int p : first_use[id]) {
      current.params.push_back(p);
      current.bytes += param_bytes[p];
    }
    current.nodes.push_back(id);
    bucket_of[id] = (int)filled.size();
    auto elsewhere = [&](int user) { return bucket_of[user] != bucket_of[id]; };
    read_outside = read_outside || is_output[id] || std::any_of(users[id].begin(), users[id].end(), elsewhere);
    previous = id;
  }
  filled.push_back(std::move(current));
  if (filled.size() > 1 && filled.back().params.empty()) {  // the ops before any parameter's use
    Bucket preamble = std::move(filled.back());
    filled.pop_back();
    filled.back().nodes.insert(filled.back().nodes.end(), preamble.nodes.begin(), preamble.nodes.end());
  }
  std::reverse(filled.begin(), filled.end());
  for (Bucket& b : filled) {
    std::reverse(b.nodes.begin(), b.nodes.end());
    std::reverse(b.params.begin(), b.params.end());
  }
  return filled;
}

std::vector<int> piece_of_nodes(const Graph& g, const std::vector<Bucket>& buckets) {
  std::vector<int> piece(g.nodes.size(), -1);
  for (size_t b = 0; b < buckets.size(); b++)
    for (int id : buckets[b].nodes) piece[id] = (int)b;
  return piece;
}

}  // namespace mini::graph
