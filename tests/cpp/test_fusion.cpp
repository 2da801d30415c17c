// Fusion's decisions (fusion/schedule.cpp): which nodes share a kernel, and the sentence each
// check writes where it decides (judge(): size, passes, loads, then the shape rules), on graphs
// built by hand. Tagged [A3], the greedy scheduler's assignment.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "fusion/schedule.h"

using namespace mini;

namespace {

graph::TensorMeta meta(const Shape& sizes) {
  graph::TensorMeta m;
  m.sizes = sizes;
  m.strides = contiguous_strides(sizes);
  return m;
}

// The decision that mentions `node` of g (by its name, as "name (op)": schedule() may reorder the
// nodes but keeps their names) and contains `text`.
bool decided(const fusion::Schedule& s, const graph::Graph& g, int node, const std::string& text) {
  const std::string who = g.nodes[node].name + " (";
  return std::any_of(s.decisions.begin(), s.decisions.end(), [&](const fusion::FusionDecision& d) {
    return d.text.find(who) != std::string::npos && d.text.find(text) != std::string::npos;
  });
}

std::string all_decisions(const fusion::Schedule& s) {
  std::string out;
  for (const auto& d : s.decisions) out += d.text + "\n";
  return out;
}

Attrs over_last(bool keepdim = true) {
  Attrs a;
  a.dims = {-1};
  a.keepdim = keepdim;
  return a;
}

}  // namespace

TEST_CASE("a pointwise chain and a softmax's two reductions are one kernel, each join naming its rule", "[A3]") {
  graph::Graph g;
  int x = g.add_input(meta({4, 8}), "L['x']");
  int b = g.add_input(meta({8}), "L['b']");
  int add = g.add_op(OpKind::Add, {x, b}, {});
  int relu = g.add_op(OpKind::Relu, {add}, {});
  int max = g.add_op(OpKind::Amax, {relu}, over_last());
  int sub = g.add_op(OpKind::Sub, {relu, max}, {});
  int exp = g.add_op(OpKind::Exp, {sub}, {});
  int sum = g.add_op(OpKind::Sum, {exp}, over_last());
  int div = g.add_op(OpKind::Div, {exp, sum}, {});
  g.outputs = {div};
  fusion::Schedule s = fusion::schedule(g);
  INFO(all_decisions(s));
  CHECK(s.groups.size() == 1);
  CHECK(decided(s, g, relu, "fuse"));
  CHECK(decided(s, g, relu, "same iteration space [4, 8]"));
  CHECK(decided(s, g, max, "reduction over [4, 8] absorbs its pointwise producers"));
  CHECK(decided(s, g, sub, "same iteration space [4, 8]"));
  CHECK(decided(s, g, sum, "another reduction over the same rows"));
  CHECK(decided(s, g, div, "same iteration space [4, 8]"));
  CHECK(!decided(s, g, exp, "cannot fuse"));
}

TEST_CASE("a node over another space starts a kernel and says whose space differs", "[A3]") {
  graph::Graph g;
  int x = g.add_input(meta({4, 8}), "L['x']");
  int y = g.add_input(meta({8}), "L['y']");
  int relu = g.add_op(OpKind::Relu, {x}, {});
  int neg = g.add_op(OpKind::Neg, {y}, {});
  g.outputs = {relu, neg};
  fusion::Schedule s = fusion::schedule(g);
  INFO(all_decisions(s));
  CHECK(s.groups.size() == 2);
  CHECK(decided(s, g, neg, "cannot fuse"));
  CHECK(decided(s, g, neg, "its iteration space [8] differs from the kernel's [4, 8]"));
}

TEST_CASE("a reduction over other dims than the kernel's rows is refused with both spaces", "[A3]") {
  graph::Graph g;
  int x = g.add_input(meta({4, 8}), "L['x']");
  int rows = g.add_op(OpKind::Sum, {x}, over_last());
  Attrs cols;
  cols.dims = {0};
  cols.keepdim = true;
  int down = g.add_op(OpKind::Sum, {x}, cols);
  g.outputs = {rows, down};
  fusion::Schedule s = fusion::schedule(g);
  INFO(all_decisions(s));
  CHECK(s.groups.size() == 2);
  CHECK(decided(s, g, down, "it reduces [4, 8] over other dims than the kernel's space [4, 8]"));
}

TEST_CASE("a kernel reads at most max_loads tensors", "[A3]") {
  graph::Graph g;
  int a = g.add_input(meta({16}), "L['a']");
  int b = g.add_input(meta({16}), "L['b']");
  int c = g.add_input(meta({16}), "L['c']");
  int ab = g.add_op(OpKind::Add, {a, b}, {});
  int abc = g.add_op(OpKind::Add, {ab, c}, {});
  g.outputs = {abc};
  CHECK(fusion::schedule(g).groups.size() == 1);  // no limit
  fusion::Schedule s = fusion::schedule(g, 2);
  INFO(all_decisions(s));
  CHECK(s.groups.size() == 2);
  CHECK(decided(s, g, abc, "the kernel would read 3 tensors (the target passes at most 2)"));
}

TEST_CASE("a long chain splits at max_fusion_size nodes", "[A3]") {
  graph::Graph g;
  int v = g.add_input(meta({32}), "L['x']");
  for (int i = 0; i < 70; i++) v = g.add_op(i % 2 ? OpKind::Neg : OpKind::Relu, {v}, {});
  g.outputs = {v};
  fusion::Schedule s = fusion::schedule(g);
  INFO(all_decisions(s));
  REQUIRE(s.groups.size() == 2);
  CHECK(s.groups[0].nodes.size() == 64);
  CHECK(decided(s, s.graph, s.groups[1].nodes[0], "the kernel holds 64 nodes (max_fusion_size)"));
}

TEST_CASE("a fifth reduction waiting on the four before it starts a kernel", "[A3]") {
  graph::Graph g;
  int v = g.add_input(meta({4, 8}), "L['x']");
  std::vector<int> reductions;
  for (int i = 0; i < 5; i++) {
    int r = g.add_op(OpKind::Sum, {v}, over_last());
    reductions.push_back(r);
    v = g.add_op(OpKind::Sub, {v, r}, {});  // each pass reads the rows the last one changed
  }
  g.outputs = {v};
  fusion::Schedule s = fusion::schedule(g);
  INFO(all_decisions(s));
  CHECK(s.groups.size() == 2);
  CHECK(decided(s, g, reductions[4], "it would be pass 5 over the kernel's rows"));
}

TEST_CASE("an extern call closes the open kernel and says so", "[A3]") {
  graph::Graph g;
  int x = g.add_input(meta({4, 8}), "L['x']");
  int w = g.add_input(meta({8, 3}), "L['w']");
  int relu = g.add_op(OpKind::Relu, {x}, {});
  int mm = g.add_op(OpKind::Matmul, {relu, w}, {});
  int out = g.add_op(OpKind::Neg, {mm}, {});
  g.outputs = {out};
  fusion::Schedule s = fusion::schedule(g);
  INFO(all_decisions(s));
  CHECK(s.groups.size() == 2);
  CHECK(decided(s, g, mm, "is an extern call"));
  REQUIRE(s.steps.size() == 3);
  CHECK(s.steps[1].kind == fusion::StepKind::Extern);
}
