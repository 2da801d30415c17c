// The C++ planner (codegen/cpp_plan.h): which loops, OpenMP kinds, accumulators, folds and
// stages each kernel form gets, checked on its plan (stmt.h), not on the text it becomes. The
// fusion groups are built by hand (not by the scheduler), so these need no assignment done.
#include <catch2/catch.hpp>

#include <functional>

#include "codegen/cpp_plan.h"

using namespace mini;
using namespace mini::codegen;

namespace {

// A contiguous input of g.
int input(graph::Graph& g, const Shape& sizes, const char* name) {
  graph::TensorMeta contiguous;
  contiguous.sizes = sizes;
  contiguous.strides = contiguous_strides(sizes);
  return g.add_input(contiguous, name);
}

Attrs over(std::vector<int64_t> dims) {
  Attrs a;
  a.dims = std::move(dims);
  a.keepdim = true;
  return a;
}

// One kernel of `nodes` (program order) over `space`, loading `loads` and storing `stores`.
void one_kernel(fusion::Schedule& s, std::vector<int> nodes, const Shape& space, std::vector<int64_t> reduced,
                std::vector<int> loads, std::vector<int> stores) {
  fusion::FusionGroup k;
  k.nodes = std::move(nodes);
  k.space = space;
  k.reduced = std::move(reduced);
  k.loads = std::move(loads);
  k.stores = std::move(stores);
  k.name = "k";
  s.groups = {k};
  s.graph.outputs = k.stores;
}

// Every statement of `body`, nested ones included, in order.
std::vector<const Stmt*> all(const Body& body) {
  std::vector<const Stmt*> out;
  std::function<void(const Body&)> walk = [&](const Body& b) {
    for (const Stmt& s : b) {
      out.push_back(&s);
      walk(s.body);
      walk(s.orelse);
    }
  };
  walk(body);
  return out;
}

std::vector<const Stmt*> of_kind(const Body& body, Stmt::Kind kind) {
  std::vector<const Stmt*> out;
  for (const Stmt* s : all(body))
    if (s->kind == kind) out.push_back(s);
  return out;
}

std::vector<const Stmt*> ranges(const Body& body, RangeKind kind) {
  std::vector<const Stmt*> out;
  for (const Stmt* s : of_kind(body, Stmt::Kind::Range))
    if (s->range == kind) out.push_back(s);
  return out;
}

// A softmax over the last dim of x [rows, cols]: amax, sub, exp, sum, div in one kernel.
struct Softmax {
  fusion::Schedule s;
  int amax, exp, sum, div;
  explicit Softmax(int64_t rows, int64_t cols) {
    graph::Graph& g = s.graph;
    int x = input(g, {rows, cols}, "x");
    amax = g.add_op(OpKind::Amax, {x}, over({1}));
    int sub = g.add_op(OpKind::Sub, {x, amax}, {});
    exp = g.add_op(OpKind::Exp, {sub}, {});
    sum = g.add_op(OpKind::Sum, {exp}, over({1}));
    div = g.add_op(OpKind::Div, {exp, sum}, {});
    one_kernel(s, {amax, sub, exp, sum, div}, {rows, cols}, {1}, {x}, {div});
  }
};

}  // namespace

TEST_CASE("a pointwise chain of contiguous loads is one flat loop over threads and vector lanes", "[codegen]") {
  fusion::Schedule s;
  int x = input(s.graph, {64, 64}, "x");
  int y = input(s.graph, {64, 64}, "y");
  int add = s.graph.add_op(OpKind::Add, {x, y}, {});
  int relu = s.graph.add_op(OpKind::Relu, {add}, {});
  one_kernel(s, {add, relu}, {64, 64}, {}, {x, y}, {relu});
  LoopKernel L(s, s.groups[0]);
  Plan plan = plan_cpp(L);
  CHECK(plan.shape == "pointwise");
  REQUIRE(plan.body.size() == 2);
  CHECK(plan.body[0].kind == Stmt::Kind::Index);  // numel
  const Stmt& loop = plan.body[1];
  REQUIRE(loop.kind == Stmt::Kind::Range);
  CHECK(loop.range == RangeKind::ParallelSimd);
  CHECK(loop.text == "i");
  CHECK_FALSE(loop.parallel_if.empty());  // a small tensor stays on one thread
  REQUIRE(loop.body.size() == 3);         // t<add>, t<relu>, the store
  CHECK(loop.body[0].kind == Stmt::Kind::Let);
  CHECK(loop.body[1].kind == Stmt::Kind::Let);
  CHECK(loop.body[2].kind == Stmt::Kind::Store);
  CHECK(loop.body[2].buffer == 2);  // the loads are buffers 0 and 1
  CHECK(of_kind(plan.body, Stmt::Kind::Unflatten).empty());  // every load reads in[i]
}

TEST_CASE("a chain of three transcendental ops runs in three vector loops per tile, values crossing in arrays",
          "[codegen]") {
  fusion::Schedule s;
  int x = input(s.graph, {1000, 100}, "x");
  int sin = s.graph.add_op(OpKind::Sin, {x}, {});
  int cos = s.graph.add_op(OpKind::Cos, {sin}, {});
  int exp = s.graph.add_op(OpKind::Exp, {cos}, {});
  int add = s.graph.add_op(OpKind::Add, {exp, sin}, {});
  one_kernel(s, {sin, cos, exp, add}, {1000, 100}, {}, {x}, {add});
  Plan plan = plan_cpp(LoopKernel(s, s.groups[0]));
  CHECK(plan.shape == "staged");
  auto tiles = ranges(plan.body, RangeKind::Parallel);
  REQUIRE(tiles.size() == 1);
  CHECK(tiles[0]->step == "256");
  CHECK(ranges(plan.body, RangeKind::Simd).size() == 3);  // a stage per transcendental
  // sin is read by the last stage, cos by the second: each crosses in an array of the tile
  auto arrays = of_kind(plan.body, Stmt::Kind::Array);
  REQUIRE(arrays.size() == 2);
  CHECK(arrays[0]->name == "s" + std::to_string(sin));
  CHECK(arrays[1]->name == "s" + std::to_string(cos));
}

TEST_CASE("a broadcast load makes a loop nest: the outer dims over threads, the innermost in vector lanes",
          "[codegen]") {
  fusion::Schedule s;
  int x = input(s.graph, {4, 8, 16}, "x");
  int b = input(s.graph, {16}, "b");
  int add = s.graph.add_op(OpKind::Add, {x, b}, {});
  one_kernel(s, {add}, {4, 8, 16}, {}, {x, b}, {add});
  Plan plan = plan_cpp(LoopKernel(s, s.groups[0]));
  CHECK(plan.shape == "nest");
  auto outer = ranges(plan.body, RangeKind::Parallel);
  REQUIRE(outer.size() == 1);
  CHECK(outer[0]->text == "x0");
  CHECK(outer[0]->collapse == 2);  // x0 and x1 shared out
  auto inner = ranges(plan.body, RangeKind::Simd);
  REQUIRE(inner.size() == 1);
  CHECK(inner[0]->text == "x2");
  CHECK(ranges(plan.body, RangeKind::Serial).size() == 1);  // x1
}

TEST_CASE("a softmax's row loop: a pass per phase, max with a NaN flag, the sum in chunk parts, exp kept",
          "[codegen]") {
  Softmax sm(16, 100);
  Plan plan = plan_cpp(LoopKernel(sm.s, sm.s.groups[0]));
  CHECK(plan.shape == "rows");
  auto rows = ranges(plan.body, RangeKind::Parallel);
  REQUIRE(rows.size() == 1);  // a row of 100 never splits: no parallel copy of a pass
  CHECK(rows[0]->text == "r");
  CHECK(of_kind(plan.body, Stmt::Kind::If).empty());
  auto accumulators = of_kind(plan.body, Stmt::Kind::Declare);
  REQUIRE(accumulators.size() == 3);  // acc<amax>, acc<sum>, part<sum>
  CHECK(accumulators[0]->op == OpKind::Amax);
  CHECK(accumulators[0]->flag == "nan" + std::to_string(sm.amax));
  CHECK(accumulators[1]->op == OpKind::Sum);
  CHECK(accumulators[1]->dtype == DType::Float64);  // a float sum's chunks add in double
  CHECK(accumulators[2]->dtype == DType::Float32);  // ... within a chunk, in float
  auto passes = ranges(plan.body, RangeKind::Simd);
  REQUIRE(passes.size() == 3);  // max, sum, divide
  REQUIRE(passes[0]->reductions.size() == 1);
  CHECK(passes[0]->reductions[0].op == OpKind::Amax);
  CHECK(passes[0]->reductions[0].flag == "nan" + std::to_string(sm.amax));
  REQUIRE(passes[1]->reductions.size() == 1);
  CHECK(passes[1]->reductions[0].name == "part" + std::to_string(sm.sum));
  CHECK(passes[2]->reductions.empty());
  auto folds = of_kind(plan.body, Stmt::Kind::Fold);
  REQUIRE(folds.size() == 3);  // the max, the part's sum, the part into the accumulator
  CHECK(folds[0]->op == OpKind::Amax);
  CHECK(folds[1]->name == "part" + std::to_string(sm.sum));
  CHECK(folds[2]->name == "acc" + std::to_string(sm.sum));
  CHECK(of_kind(plan.body, Stmt::Kind::Result).size() == 2);
  // exp is computed in the sum's pass and read back in the division's, from the row's array
  auto scratch = of_kind(plan.body, Stmt::Kind::Array);
  REQUIRE(scratch.size() == 1);
  CHECK(scratch[0]->name == "s" + std::to_string(sm.exp));
}

TEST_CASE("a row long enough to split has each pass twice: over threads, reducing the accumulators, or not",
          "[codegen]") {
  Softmax sm(2, 65536);
  Plan plan = plan_cpp(LoopKernel(sm.s, sm.s.groups[0]));
  auto splits = of_kind(plan.body, Stmt::Kind::If);
  REQUIRE(splits.size() == 3);  // the max's pass, the sum's and the division's
  const Stmt& first = *splits[0];
  CHECK(first.text == "split");
  REQUIRE(first.body.size() == 1);
  REQUIRE(first.orelse.size() == 1);
  CHECK(first.body[0].range == RangeKind::Parallel);
  REQUIRE(first.body[0].reductions.size() == 1);
  CHECK(first.body[0].reductions[0].name == "acc" + std::to_string(sm.amax));
  CHECK(first.orelse[0].range == RangeKind::Serial);
  CHECK(first.orelse[0].reductions.empty());
  // a row of 65536 floats is past the scratch budget: exp is computed again
  CHECK(of_kind(plan.body, Stmt::Kind::Array).empty());
}

TEST_CASE("an outer sum goes in blocks of outputs and, with few blocks, in (block, chunk) pairs over threads",
          "[codegen]") {
  fusion::Schedule s;
  int x = input(s.graph, {4096, 128}, "x");
  int sum = s.graph.add_op(OpKind::Sum, {x}, over({0}));
  one_kernel(s, {sum}, {4096, 128}, {0}, {x}, {sum});
  LoopKernel L(s, s.groups[0]);
  REQUIRE(L.is_outer_reduction());
  Plan plan = plan_cpp(L);
  CHECK(plan.shape == "outer");
  auto few = of_kind(plan.body, Stmt::Kind::If);
  REQUIRE(few.size() == 1);
  CHECK(of_kind(few[0]->body, Stmt::Kind::Alloc).size() == 1);
  CHECK(of_kind(few[0]->body, Stmt::Kind::Free).size() == 1);
  CHECK(few[0]->body.back().kind == Stmt::Kind::Return);
  auto pairs = ranges(few[0]->body, RangeKind::Parallel);
  REQUIRE(pairs.size() == 2);
  CHECK(pairs[0]->collapse == 2);  // (block, chunk)
  CHECK(pairs[1]->collapse == 0);  // each block adds its partials
  const Stmt& blocks = plan.body.back();
  CHECK(blocks.range == RangeKind::Parallel);
  CHECK(blocks.step == "256");
  auto lanes = ranges(blocks.body, RangeKind::Simd);
  REQUIRE(lanes.size() == 1);  // the block's outputs, contiguous
  REQUIRE(lanes[0]->body.size() >= 1);
  const Stmt& step = lanes[0]->body.back();
  CHECK(step.kind == Stmt::Kind::Fold);
  CHECK(step.index == "r - r0");
}

TEST_CASE("an outer max never splits: one accumulator and NaN flag per output of a block", "[codegen]") {
  fusion::Schedule s;
  int x = input(s.graph, {512, 300}, "x");
  int amax = s.graph.add_op(OpKind::Amax, {x}, over({0}));
  one_kernel(s, {amax}, {512, 300}, {0}, {x}, {amax});
  Plan plan = plan_cpp(LoopKernel(s, s.groups[0]));
  CHECK(plan.shape == "outer");
  CHECK(of_kind(plan.body, Stmt::Kind::If).empty());
  auto arrays = of_kind(plan.body, Stmt::Kind::Array);
  REQUIRE(arrays.size() == 1);
  CHECK(arrays[0]->flag == "nan" + std::to_string(amax));
  CHECK(of_kind(plan.body, Stmt::Kind::Reset).size() == 1);
}
