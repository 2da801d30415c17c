// The graph split (graph/split.h): DDPOptimizer's bucket plan on graphs built by hand, and the
// pieces split_graph cuts, which run one after another to the same outputs as the whole graph.
#include "helpers.h"

#include "graph/split.h"

using namespace mini;
using namespace mini_test;

namespace {

graph::TensorMeta meta(const Shape& sizes, bool requires_grad = false) {
  graph::TensorMeta m;
  m.sizes = sizes;
  m.strides = contiguous_strides(sizes);
  m.requires_grad = requires_grad;
  return m;
}

// x -> relu(x @ w_k + b_k), `layers` times, then the sum: an MLP of width 4, its parameters the
// graph's inputs after x (w_1, b_1, w_2, ...).
struct Mlp {
  graph::Graph g;
  std::vector<int> layer_ends;  // the relu of each layer
  explicit Mlp(int layers) {
    int h = g.add_input(meta({2, 4}), "L['x']");
    std::vector<int> params;
    for (int k = 1; k <= layers; k++) {
      params.push_back(g.add_input(meta({4, 4}, true), "L['self'].w" + std::to_string(k)));
      params.push_back(g.add_input(meta({4}, true), "L['self'].b" + std::to_string(k)));
    }
    for (int k = 0; k < layers; k++) {
      int mm = g.add_op(OpKind::Matmul, {h, params[2 * k]}, {});
      int add = g.add_op(OpKind::Add, {mm, params[2 * k + 1]}, {});
      h = g.add_op(OpKind::Relu, {add}, {});
      layer_ends.push_back(h);
    }
    g.outputs = {g.add_op(OpKind::Sum, {h}, {})};
  }
  // bytes of each input: 0 for x, a parameter's for the others
  std::vector<int64_t> param_bytes() const {
    std::vector<int64_t> bytes;
    for (int id : g.inputs) bytes.push_back(g.nodes[id].meta.requires_grad ? numel_of(g.nodes[id].meta.sizes) * 4 : 0);
    return bytes;
  }
};

}  // namespace

TEST_CASE("buckets of one layer each: a cut wherever a layer's parameters fill the cap", "[graph]") {
  Mlp m(3);
  // one layer's parameters: 16 + 4 floats = 80 bytes
  auto buckets = graph::plan_buckets(m.g, m.param_bytes(), {80, 80});
  REQUIRE(buckets.size() == 3);
  for (int k = 0; k < 3; k++) {
    INFO("bucket " << k);
    CHECK(buckets[k].bytes == 80);
    CHECK(buckets[k].params == std::vector<int>{1 + 2 * k, 2 + 2 * k});  // w_k, b_k (input positions)
    CHECK(buckets[k].extended == 0);
  }
  // the forward's first ops in the first bucket, the sum in the last
  CHECK(buckets[0].nodes.front() < buckets[1].nodes.front());
  CHECK(buckets[2].nodes.back() == m.g.outputs[0]);
}

TEST_CASE("a cap above every parameter's bytes is one bucket: no split", "[graph]") {
  Mlp m(3);
  auto buckets = graph::plan_buckets(m.g, m.param_bytes(), {25 << 20, 1 << 20});
  REQUIRE(buckets.size() == 1);
  CHECK(buckets[0].bytes == 240);
  CHECK(buckets[0].params.size() == 6);
}

TEST_CASE("the first bucket filled (all-reduced first) has its own, smaller cap", "[graph]") {
  Mlp m(4);
  // first cap 80: the last layer alone; then 160 per bucket: layers 2-3, then layer 1 alone
  auto buckets = graph::plan_buckets(m.g, m.param_bytes(), {160, 80});
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].bytes == 80);
  CHECK(buckets[1].bytes == 160);
  CHECK(buckets[2].bytes == 80);
}

TEST_CASE("a parameter used twice counts where it is first used, in the forward's order", "[graph]") {
  graph::Graph g;
  int x = g.add_input(meta({4, 4}), "L['x']");
  int w = g.add_input(meta({4, 4}, true), "L['w']");
  int v = g.add_input(meta({4, 4}, true), "L['v']");
  int a = g.add_op(OpKind::Matmul, {x, w}, {});      // w's first use
  int b = g.add_op(OpKind::Matmul, {a, v}, {});
  int c = g.add_op(OpKind::Matmul, {b, w}, {});      // w again (a tied weight)
  g.outputs = {g.add_op(OpKind::Sum, {c}, {})};
  auto buckets = graph::plan_buckets(g, {0, 64, 64}, {64, 64});
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].params == std::vector<int>{1});  // w, with its first use a
  CHECK(buckets[1].params == std::vector<int>{2});  // v
  CHECK(buckets[0].nodes == std::vector<int>{a});
}

TEST_CASE("split pieces run in order give the whole graph's outputs", "[graph]") {
  Mlp m(3);
  auto buckets = graph::plan_buckets(m.g, m.param_bytes(), {80, 80});
  graph::SplitGraph split = graph::split_graph(m.g, graph::piece_of_nodes(m.g, buckets));
  REQUIRE(split.pieces.size() == 3);
  // piece k reads the activation of piece k-1 and its own two parameters; piece 0 reads x too
  CHECK(split.pieces[0].inputs.size() == 3);
  CHECK(split.pieces[1].inputs.size() == 3);
  CHECK(split.pieces[1].inputs[0].piece == 0);
  CHECK(split.pieces[0].graph->outputs.size() == 1);
  CHECK(split.outputs.size() == 1);
  CHECK(split.outputs[0].piece == 2);
  // the activation handed on keeps its meta, requires_grad included
  const graph::Graph& second = *split.pieces[1].graph;
  CHECK(second.nodes[second.inputs[0]].meta.sizes == Shape{2, 4});

  std::vector<Tensor> inputs;
  for (int id : m.g.inputs) inputs.push_back(randn(m.g.nodes[id].meta.sizes));
  std::vector<Tensor> whole = graph::run_graph(m.g, inputs);
  std::vector<std::vector<Tensor>> outs;
  for (const graph::GraphPiece& piece : split.pieces) {
    std::vector<Tensor> in;
    for (graph::PieceValue v : piece.inputs) in.push_back(v.piece < 0 ? inputs[v.index] : outs[v.piece][v.index]);
    outs.push_back(graph::run_graph(*piece.graph, in));
  }
  check_values(outs[split.outputs[0].piece][split.outputs[0].index], values(whole[0]), 1e-6, 1e-5);
}

TEST_CASE("a value may not flow back to an earlier piece", "[graph]") {
  Mlp m(2);
  std::vector<int> piece(m.g.nodes.size(), 0);
  piece[m.layer_ends[0]] = 1;  // layer 1's relu in piece 1, read by layer 2's matmul in piece 0
  CHECK_MINI_ERROR(graph::split_graph(m.g, piece), Error::Kind::Runtime, "later piece");
}
