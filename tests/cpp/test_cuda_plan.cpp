// The CUDA planner (codegen/cuda_kernel.h plan_cuda): the statements (stmt.h) a kernel becomes
// under a layout — its ranges and how they share out the work, its vector loads and stores and
// their lanes, which loads a lane reads from a Vec — checked as data, never as generated text.
// The fusion groups are built by hand, as in test_cuda_launch.cpp. Every shape is planned as
// statements: the pointwise shape, one row split over blocks, the columns (one a thread, or in
// vectors) and the rows (held in registers, looped over, or looped over in vectors; a block, a
// warp or a few lanes a row).
#include <catch2/catch.hpp>

#include <functional>

#include "codegen/cuda_kernel.h"

using namespace mini;
using namespace mini::codegen;

namespace {

// out = a + b over `space`, a of `space` and b of `b_sizes` (broadcast along the leading dims
// where it has fewer), both of `dtype`.
fusion::Schedule add_kernel(const Shape& space, const Shape& b_sizes, DType dtype = DType::Float32) {
  fusion::Schedule s;
  graph::Graph& g = s.graph;
  auto input = [&](const Shape& sizes, const char* name) {
    graph::TensorMeta m;
    m.sizes = sizes;
    m.strides = contiguous_strides(sizes);
    m.dtype = dtype;
    return g.add_input(m, name);
  };
  const int a = input(space, "a"), b = input(b_sizes, "b");
  const int sum = g.add_op(OpKind::Add, {a, b}, Attrs());
  g.outputs = {sum};
  fusion::FusionGroup k;
  k.nodes = {sum};
  k.space = space;
  k.loads = {a, b};
  k.stores = {sum};
  k.name = "add";
  s.groups = {k};
  return s;
}

Plan plan_of(const fusion::Schedule& s, int layout) { return plan_cuda(s, s.groups[0], cuda_layout(layout)); }

// Every statement of `body` and of the bodies inside it, outermost first, that `pick` picks.
std::vector<const Stmt*> all(const Body& body, const std::function<bool(const Stmt&)>& pick) {
  std::vector<const Stmt*> found;
  for (const Stmt& s : body) {
    if (pick(s)) found.push_back(&s);
    for (const Stmt* inner : all(s.body, pick)) found.push_back(inner);
  }
  return found;
}
std::vector<const Stmt*> of_kind(const Body& body, Stmt::Kind kind) {
  return all(body, [&](const Stmt& s) { return s.kind == kind; });
}
std::vector<const Stmt*> ranges(const Body& body, RangeKind range) {
  return all(body, [&](const Stmt& s) { return s.kind == Stmt::Kind::Range && s.range == range; });
}

// The named compile-time constant `name`'s value in `body` ("" where there is none).
std::string constant(const Body& body, const std::string& name) {
  for (const Stmt* s : of_kind(body, Stmt::Kind::Index))
    if (s->constant && s->name == name) return s->index;
  return "";
}

}  // namespace

TEST_CASE("a pointwise kernel of whole float vectors: one grid-stride range over Vecs of 4, lanes unrolled") {
  const Plan plan = plan_of(add_kernel({64, 1000}, {64, 1000}), 9);
  CHECK(plan.shape == "pointwise");
  CHECK(constant(plan.body, "V") == "4");  // 16 bytes of float
  auto grid = ranges(plan.body, RangeKind::GridStride);
  REQUIRE(grid.size() == 1);  // 64000 elements, whole vectors: no tail
  CHECK(grid[0]->end == "nvec");
  auto loads = of_kind(grid[0]->body, Stmt::Kind::VectorLoad);
  REQUIRE(loads.size() == 2);  // a and b, both contiguous over the space
  CHECK(loads[0]->buffer == 0);
  CHECK(loads[1]->buffer == 1);
  CHECK(loads[0]->lanes == "V");
  auto lanes = ranges(grid[0]->body, RangeKind::Unrolled);
  REQUIRE(lanes.size() == 1);
  CHECK(lanes[0]->text == "lane");
  CHECK(of_kind(lanes[0]->body, Stmt::Kind::Unflatten).empty());  // contiguous loads read in[i]
  auto stores = of_kind(grid[0]->body, Stmt::Kind::VectorStore);
  REQUIRE(stores.size() == 1);
  CHECK(stores[0]->buffer == 2);  // the loads first, then the stores
  CHECK(of_kind(plan.body, Stmt::Kind::Store).empty());
}

TEST_CASE("a lane reads a contiguous load from its Vec and a broadcast one from memory, the index split") {
  const Plan plan = plan_of(add_kernel({64, 1000}, {1000}), 9);
  auto loads = of_kind(plan.body, Stmt::Kind::VectorLoad);
  REQUIRE(loads.size() == 1);  // only a reads in vectors
  CHECK(loads[0]->buffer == 0);
  auto lanes = ranges(plan.body, RangeKind::Unrolled);
  REQUIRE(lanes.size() == 1);
  auto split = of_kind(lanes[0]->body, Stmt::Kind::Unflatten);
  REQUIRE(split.size() == 1);
  CHECK(split[0]->dims == std::vector<int64_t>{0, 1});
  auto lets = of_kind(lanes[0]->body, Stmt::Kind::Let);
  REQUIRE(lets.size() == 1);
  const Expr& sum = *lets[0]->value;
  REQUIRE(sum.kind == Expr::Kind::Op);
  std::vector<const Expr*> args;  // each converted to the compute type: a Cast around it
  for (const ExprPtr& arg : sum.args) args.push_back(arg->kind == Expr::Kind::Cast ? arg->args[0].get() : arg.get());
  REQUIRE(args.size() == 2);
  CHECK(args[0]->kind == Expr::Kind::Local);  // a from its Vec's lane
  CHECK(args[0]->name == "l0.v[lane]");
  CHECK(args[1]->kind == Expr::Kind::Load);  // b from memory, at its index
  CHECK(args[1]->buffer == 1);
  CHECK(!args[1]->index.flat);
}

TEST_CASE("an element count that is not whole vectors ends in a range of single elements") {
  const Plan plan = plan_of(add_kernel({3, 5}, {3, 5}), 9);
  auto grid = ranges(plan.body, RangeKind::GridStride);
  REQUIRE(grid.size() == 2);
  CHECK(grid[1]->begin == "nvec * V");  // from the first element no vector covers
  CHECK(of_kind(grid[1]->body, Stmt::Kind::Store).size() == 1);
  CHECK(of_kind(grid[1]->body, Stmt::Kind::VectorLoad).empty());
}

TEST_CASE("double vectors hold 2 lanes; layout 1 takes one element a thread, no vectors") {
  CHECK(constant(plan_of(add_kernel({64, 1000}, {64, 1000}, DType::Float64), 9).body, "V") == "2");
  const Plan one = plan_of(add_kernel({64, 1000}, {64, 1000}), 1);
  CHECK(ranges(one.body, RangeKind::GridStride).size() == 1);
  CHECK(ranges(one.body, RangeKind::Unrolled).empty());
  CHECK(of_kind(one.body, Stmt::Kind::VectorLoad).empty());
  CHECK(of_kind(one.body, Stmt::Kind::Store).size() == 1);
}

namespace {

// `reduction` (Sum, Mean, Amax) of x (an input of `space` and `dtype`) over `reduced`, kept
// dims: add_kernel's graph, its group now the reduction of its first input alone.
fusion::Schedule reduce_kernel(const Shape& space, const std::vector<int64_t>& reduced, OpKind reduction,
                               DType dtype = DType::Float32) {
  fusion::Schedule s = add_kernel(space, space, dtype);
  Attrs over;
  over.dims = reduced;
  over.keepdim = true;
  fusion::FusionGroup& k = s.groups[0];
  const int y = s.graph.add_op(reduction, {k.loads[0]}, over);
  s.graph.outputs = {y};
  k.nodes = {y};
  k.loads = {k.loads[0]};
  k.stores = {y};
  k.reduced = reduced;
  k.name = "reduce";
  return s;
}

}  // namespace

TEST_CASE("a reduction of many rows is planned: looped over in vectors under layout 9, a block a row", "[A10]") {
  const Plan plan = plan_of(reduce_kernel({64, 1000}, {1}, OpKind::Sum), 9);
  CHECK(plan.shape == "vector rows");
  auto rows = ranges(plan.body, RangeKind::RowStride);
  REQUIRE(rows.size() == 1);  // the rows a block takes in turn
  CHECK((rows[0]->text == "r" && rows[0]->end == "rows"));
  auto reductions = of_kind(plan.body, Stmt::Kind::ThreadReduce);
  REQUIRE(reductions.size() == 1);
  CHECK((reductions[0]->scope == ThreadScope::Block && reductions[0]->text == "smem"));
  CHECK(of_kind(plan.body, Stmt::Kind::RowThread).empty());  // a block a row
}

TEST_CASE("one long row split over blocks: a grid-stride fold, a partial a block, the last block folds them",
          "[A10]") {
  const Plan plan = plan_of(reduce_kernel({1, 1 << 20}, {1}, OpKind::Sum), 9);  // split under layout 9
  CHECK(plan.shape == "split row");
  auto shared = of_kind(plan.body, Stmt::Kind::Shared);
  REQUIRE(shared.size() == 2);  // the block reduction's values, one a warp, and the last block's flag
  CHECK((shared[0]->dims == std::vector<int64_t>{32} && shared[1]->dims.empty()));
  // the block's share: a grid-stride range folding the element into acc<id>, float for float
  auto strided = ranges(plan.body, RangeKind::GridStride);
  REQUIRE(strided.size() == 1);
  auto folds = of_kind(strided[0]->body, Stmt::Kind::Fold);
  REQUIRE(folds.size() == 1);
  CHECK(folds[0]->op == OpKind::Sum);
  CHECK(folds[0]->dtype == DType::Float32);
  // every block reduces across its threads and writes partial slot 0, by its first thread
  auto partials = of_kind(plan.body, Stmt::Kind::Partial);
  REQUIRE(partials.size() == 1);
  CHECK((partials[0]->slot == 0 && partials[0]->first_thread));
  CHECK(of_kind(plan.body, Stmt::Kind::Arrive).size() == 1);
  CHECK(of_kind(plan.body, Stmt::Kind::Fence).size() == 2);  // before counting in; after, in the last
  // the last block folds every block's partial, a block a thread, then across the block again
  auto blocks = ranges(plan.body, RangeKind::GridBlocks);
  REQUIRE(blocks.size() == 1);
  REQUIRE(of_kind(blocks[0]->body, Stmt::Kind::FoldPartial).size() == 1);
  CHECK(of_kind(blocks[0]->body, Stmt::Kind::FoldPartial)[0]->slot == 0);
  CHECK(of_kind(plan.body, Stmt::Kind::ThreadReduce).size() == 2);
  CHECK(of_kind(plan.body, Stmt::Kind::ResetArrivals).size() == 1);
  CHECK(of_kind(plan.body, Stmt::Kind::Store).size() == 1);
}

TEST_CASE("a split row's accumulators: a bool's max in an int, a bfloat16 mean in float divided by rnumel",
          "[A10]") {
  const Plan any = plan_of(reduce_kernel({1, 1 << 20}, {1}, OpKind::Amax, DType::Bool), 9);
  auto accumulators = of_kind(any.body, Stmt::Kind::Accumulator);
  REQUIRE(accumulators.size() == 2);  // declared, then reset in the last block
  CHECK((accumulators[0]->int_accumulator && !accumulators[0]->assign && accumulators[1]->assign));
  const Plan mean = plan_of(reduce_kernel({1, 1 << 20}, {1}, OpKind::Mean, DType::BFloat16), 9);
  CHECK(of_kind(mean.body, Stmt::Kind::Fold)[0]->dtype == DType::Float32);
  auto results = of_kind(mean.body, Stmt::Kind::Result);
  REQUIRE(results.size() == 1);
  CHECK((results[0]->op == OpKind::Mean && results[0]->index == "rnumel" && results[0]->dtype == DType::BFloat16));
  // layout 1 takes a block a row: no split, the row looped over by the block's threads
  const Plan one = plan_of(reduce_kernel({1, 1 << 20}, {1}, OpKind::Sum), 1);
  CHECK(one.shape == "looped rows");
  CHECK(ranges(one.body, RangeKind::BlockStride).size() == 1);
  CHECK(of_kind(one.body, Stmt::Kind::Partial).empty());
}

namespace {

// x - sum(x over dim 0): a column reduction whose full-size value is stored after the sums (two
// phases: no split among blocks in y).
fusion::Schedule centered_columns(const Shape& space) {
  fusion::Schedule s = reduce_kernel(space, {0}, OpKind::Sum);
  fusion::FusionGroup& k = s.groups[0];
  const int sum = k.nodes[0];
  const int centered = s.graph.add_op(OpKind::Sub, {k.loads[0], sum}, Attrs());
  s.graph.outputs = {centered};
  k.nodes = {sum, centered};
  k.stores = {centered};
  k.name = "centered";
  return s;
}

}  // namespace

TEST_CASE("columns: 32 lanes a column over the reduced elements, folded through a 2-D shared array",
          "[A10]") {
  const fusion::Schedule s = centered_columns({4096, 64});
  const Plan plan = plan_of(s, 9);
  const std::string sum = std::to_string(s.groups[0].nodes[0]);
  CHECK(plan.shape == "columns");
  CHECK(of_kind(plan.body, Stmt::Kind::Chunk).empty());
  auto shared = of_kind(plan.body, Stmt::Kind::Shared);
  REQUIRE(shared.size() == 1);  // fold[1][32][33]: one page (one sum), a lane's partial per column, padded
  CHECK((shared[0]->name == "fold" && shared[0]->dims == std::vector<int64_t>{1, 32, 33}));
  REQUIRE(of_kind(plan.body, Stmt::Kind::ColumnThread).size() == 1);
  // a pass a phase: the sums, then the centered values stored where the column is live
  auto passes = ranges(plan.body, RangeKind::Unrolled);
  REQUIRE(passes.size() == 2);
  for (const Stmt* pass : passes)
    CHECK((pass->begin == "lane" && pass->end == "rnumel" && pass->step == "32" && pass->unroll == 4));
  CHECK(of_kind(passes[0]->body, Stmt::Kind::Fold).size() == 1);
  auto stores = of_kind(passes[1]->body, Stmt::Kind::Store);
  REQUIRE(stores.size() == 1);
  CHECK(stores[0]->guard == "live");
  // the fold in its three steps (write, combine, read back), each followed by a barrier
  auto folds = of_kind(plan.body, Stmt::Kind::ThreadReduce);
  REQUIRE(folds.size() == 3);
  for (int step = 1; step <= 3; step++) {
    const Stmt* f = folds[step - 1];
    CHECK((f->scope == ThreadScope::Column && f->text == "fold" && f->name == "acc" + sum && f->slot == 0 &&
           f->fold_step == step));
  }
  CHECK(of_kind(plan.body, Stmt::Kind::Result).size() == 1);
  CHECK(of_kind(plan.body, Stmt::Kind::Partial).empty());  // one block a column strip
  CHECK(of_kind(plan.body, Stmt::Kind::Arrive).empty());
}

TEST_CASE("split columns: a chunk of rows a block in y, partials per column, the strip's last block folds them",
          "[A10]") {
  // 63 columns: no vector of columns divides them, one column a thread
  const Plan plan = plan_of(reduce_kernel({4096, 63}, {0}, OpKind::Mean), 9);
  CHECK(plan.shape == "split columns");
  auto chunks = of_kind(plan.body, Stmt::Kind::Chunk);
  REQUIRE(chunks.size() == 1);
  CHECK((chunks[0]->name == "j" && chunks[0]->end == "rnumel"));
  auto passes = ranges(plan.body, RangeKind::Unrolled);
  REQUIRE(passes.size() == 1);
  CHECK((passes[0]->begin == "j_begin + lane" && passes[0]->end == "j_end"));
  auto partials = of_kind(plan.body, Stmt::Kind::Partial);
  REQUIRE(partials.size() == 1);
  CHECK((partials[0]->slot == 0 && partials[0]->column == "col" && partials[0]->guard == "live && lane == 0"));
  auto arrivals = of_kind(plan.body, Stmt::Kind::Arrive);
  REQUIRE(arrivals.size() == 1);
  CHECK((arrivals[0]->per_strip && arrivals[0]->first_thread));
  CHECK(of_kind(plan.body, Stmt::Kind::ResetArrivals)[0]->per_strip);
  // the last block: every block's partial of its column, a block a lane, then the lanes again
  auto blocks = ranges(plan.body, RangeKind::StripBlocks);
  REQUIRE(blocks.size() == 1);
  CHECK((blocks[0]->begin == "lane" && blocks[0]->step == "32"));
  CHECK(of_kind(blocks[0]->body, Stmt::Kind::FoldPartial)[0]->column == "r");
  CHECK(of_kind(plan.body, Stmt::Kind::ThreadReduce).size() == 2 * 3);  // the block's fold and the last block's, three steps each
  auto results = of_kind(plan.body, Stmt::Kind::Result);
  REQUIRE(results.size() == 1);
  CHECK((results[0]->op == OpKind::Mean && results[0]->index == "rnumel"));
  auto stores = of_kind(plan.body, Stmt::Kind::Store);
  REQUIRE(stores.size() == 1);
  CHECK(stores[0]->guard == "live && lane == 0");
}

TEST_CASE("vector columns: 4 float columns a thread, a Vec load a row, each column's accumulator in registers",
          "[A10]") {
  const fusion::Schedule s = reduce_kernel({4096, 128}, {0}, OpKind::Sum);  // 128 columns: 32 vectors of 4
  const Plan plan = plan_of(s, 9);
  const std::string sum = std::to_string(s.groups[0].nodes[0]);
  CHECK(plan.shape == "vector columns");
  CHECK(constant(plan.body, "CV") == "4");  // 16 bytes of float
  auto registers = of_kind(plan.body, Stmt::Kind::Registers);
  REQUIRE(registers.size() == 1);  // the sum's accumulators, one a column
  CHECK((registers[0]->lanes == "CV" && registers[0]->dtype == DType::Float32));
  // the block's chunk of rows, unrolled by 2: one Vec load a row, then the columns unrolled
  auto passes = all(plan.body, [](const Stmt& s) { return s.kind == Stmt::Kind::Range && s.unroll == 2; });
  REQUIRE(passes.size() == 1);
  CHECK((passes[0]->begin == "j_begin + lane" && passes[0]->end == "j_end" && passes[0]->step == "32"));
  auto loads = of_kind(passes[0]->body, Stmt::Kind::VectorLoad);
  REQUIRE(loads.size() == 1);
  CHECK((loads[0]->lanes == "CV" && loads[0]->buffer == 0 && loads[0]->value));
  auto folds = of_kind(passes[0]->body, Stmt::Kind::Fold);
  REQUIRE(folds.size() == 1);
  CHECK(folds[0]->value->kind == Expr::Kind::Local);  // the row's element from its Vec's lane
  // each column's partial by lane 0 of a live thread, a column at a time, then the strip's arrival
  auto partials = of_kind(plan.body, Stmt::Kind::Partial);
  REQUIRE(partials.size() == 1);
  CHECK(partials[0]->column == "col0 + u");
  CHECK(of_kind(plan.body, Stmt::Kind::Arrive).size() == 1);
  CHECK(ranges(plan.body, RangeKind::StripBlocks).size() == 1);
  auto results = of_kind(plan.body, Stmt::Kind::Result);
  REQUIRE(results.size() == 1);
  CHECK(results[0]->text == "acc" + sum + "[u]");  // column u's result
}

namespace {

Attrs kept_over(const std::vector<int64_t>& dims) {
  Attrs over;
  over.dims = dims;
  over.keepdim = true;
  return over;
}

// A softmax over the last dim of x (amax, sub, exp, sum, div), one kernel of rows.
struct Softmax {
  fusion::Schedule s;
  int amax, sum;
  explicit Softmax(const Shape& space) : s(reduce_kernel(space, {1}, OpKind::Amax)) {
    graph::Graph& g = s.graph;
    fusion::FusionGroup& k = s.groups[0];
    const int x = k.loads[0];
    amax = k.nodes[0];
    const int sub = g.add_op(OpKind::Sub, {x, amax}, Attrs());
    const int exp = g.add_op(OpKind::Exp, {sub}, Attrs());
    sum = g.add_op(OpKind::Sum, {exp}, kept_over({1}));
    const int div = g.add_op(OpKind::Div, {exp, sum}, Attrs());
    g.outputs = {div};
    k.nodes = {amax, sub, exp, sum, div};
    k.stores = {div};
    k.name = "softmax";
  }
};

// A layer norm without its affine part or epsilon over the last dim of x: (x - mean) times the
// rsqrt of the mean of its squares, one kernel of rows.
fusion::Schedule layer_norm_kernel(const Shape& space) {
  fusion::Schedule s = reduce_kernel(space, {1}, OpKind::Mean);
  graph::Graph& g = s.graph;
  fusion::FusionGroup& k = s.groups[0];
  const int x = k.loads[0], mean = k.nodes[0];
  const int centered = g.add_op(OpKind::Sub, {x, mean}, Attrs());
  const int square = g.add_op(OpKind::Mul, {centered, centered}, Attrs());
  const int variance = g.add_op(OpKind::Mean, {square}, kept_over({1}));
  const int scale = g.add_op(OpKind::Rsqrt, {variance}, Attrs());
  const int y = g.add_op(OpKind::Mul, {centered, scale}, Attrs());
  g.outputs = {y};
  k.nodes = {mean, centered, square, variance, scale, y};
  k.stores = {y};
  k.name = "layer_norm";
  return s;
}

}  // namespace

TEST_CASE("a softmax row in registers: the kept load in a register array, read in Vecs where aligned, "
          "a pass a phase unrolled over a thread's elements", "[A10]") {
  const Softmax softmax({64, 1024});  // layout 3: 64 threads a row, 16 elements each, Vecs of 4
  const Plan plan = plan_of(softmax.s, 3);
  CHECK(plan.shape == "persistent rows");
  auto registers = of_kind(plan.body, Stmt::Kind::Registers);
  REQUIRE(registers.size() == 2);  // x kept, and the softmax's values stored in vectors
  CHECK((registers[0]->name == "k0" && registers[0]->lanes == "16" && registers[0]->value));
  CHECK(registers[0]->value->buffer == 0);
  CHECK(registers[1]->lanes == "16");
  // the row's reads: one Vec of 4 a run where x is aligned, else element by element
  auto aligned = all(plan.body, [](const Stmt& s) { return s.kind == Stmt::Kind::If && !s.aligned.empty(); });
  REQUIRE(aligned.size() == 1);
  CHECK((aligned[0]->width == 4 && aligned[0]->aligned[0].first == 0));
  CHECK(of_kind(aligned[0]->body, Stmt::Kind::VectorLoad).size() == 1);
  CHECK(ranges(aligned[0]->orelse, RangeKind::Unrolled).size() == 1);
  // a pass a phase (the max, the sum, the stores), each over a thread's 16 elements, unrolled,
  // reading x from its registers
  auto passes = all(plan.body, [](const Stmt& s) {
    return s.kind == Stmt::Kind::Range && s.range == RangeKind::Unrolled && s.text == "u" && s.end == "16";
  });
  REQUIRE(passes.size() == 3);  // the orelse's element by element read is not in `all`'s walk
  auto folds = of_kind(passes[0]->body, Stmt::Kind::Fold);
  REQUIRE(folds.size() == 1);
  CHECK(folds[0]->op == OpKind::Amax);
  CHECK(of_kind(passes[1]->body, Stmt::Kind::Fold)[0]->op == OpKind::Sum);
  // a reduction across the block a reduction, then the stores as one Vec a run where aligned
  auto reductions = of_kind(plan.body, Stmt::Kind::ThreadReduce);
  REQUIRE(reductions.size() == 2);
  CHECK((reductions[0]->scope == ThreadScope::Block && reductions[0]->op == OpKind::Amax));
  CHECK(reductions[1]->op == OpKind::Sum);
  auto stores = of_kind(plan.body, Stmt::Kind::VectorStore);
  REQUIRE(stores.size() == 1);
  CHECK((stores[0]->checked && stores[0]->buffer == 1));
  CHECK(of_kind(plan.body, Stmt::Kind::OnlineScale).empty());  // no online pair held in registers
}

TEST_CASE("a softmax row looped over in vectors: the online max pair in one pass, the row read again after",
          "[A10]") {
  const Softmax softmax({64, 8192});  // layout 9: 512 threads a row, 2048 Vecs of 4, 4 trips each
  const Plan plan = plan_of(softmax.s, 9);
  const std::string amax = std::to_string(softmax.amax), sum = std::to_string(softmax.sum);
  CHECK(plan.shape == "vector rows");
  auto passes = all(plan.body, [](const Stmt& s) { return s.kind == Stmt::Kind::Range && s.text == "it"; });
  REQUIRE(passes.size() == 2);  // the max and the sum together, then the stores
  CHECK((passes[0]->range == RangeKind::Unrolled && passes[0]->end == "4"));
  // the running max over a vector's lanes, the sum rescaled to it, the max kept
  auto maxes = all(passes[0]->body, [](const Stmt& s) { return s.kind == Stmt::Kind::Declare && s.lanes.empty(); });
  REQUIRE(maxes.size() == 1);
  CHECK(maxes[0]->name == "m" + amax);
  auto scales = of_kind(passes[0]->body, Stmt::Kind::OnlineScale);
  REQUIRE(scales.size() == 1);
  CHECK((scales[0]->name == "acc" + sum && scales[0]->text == "acc" + amax && scales[0]->to == "m" + amax));
  // then the thread's sum rescaled to the block's max, and NaN where that is -inf
  auto finishes = of_kind(plan.body, Stmt::Kind::OnlineFinish);
  REQUIRE(finishes.size() == 1);
  CHECK((finishes[0]->name == "acc" + sum && finishes[0]->text == "acc" + amax));
  CHECK(of_kind(plan.body, Stmt::Kind::OnlineScale).size() == 2);
  // the store pass reads x again from memory, its pointer hidden from the optimizer
  auto rereads = of_kind(plan.body, Stmt::Kind::Reread);
  REQUIRE(rereads.size() == 1);
  CHECK(rereads[0]->buffer == 0);
  CHECK(of_kind(passes[1]->body, Stmt::Kind::VectorLoad).size() == 1);
  CHECK(of_kind(passes[1]->body, Stmt::Kind::VectorStore).size() == 1);
  CHECK(of_kind(plan.body, Stmt::Kind::ThreadReduce).size() == 2);
}

TEST_CASE("a layer norm of short rows: a warp a row, reduced with shuffles; two rows a warp at 64", "[A10]") {
  // rows of 128 under layout 9: 32 lanes of 4 elements, a warp a row, 8 rows a block
  const Plan plan = plan_of(layer_norm_kernel({1000, 128}), 9);
  CHECK(plan.shape == "vector rows");
  auto threads = of_kind(plan.body, Stmt::Kind::RowThread);
  REQUIRE(threads.size() == 1);
  CHECK((threads[0]->width == 32 && threads[0]->block_rows == 8));
  CHECK(of_kind(plan.body, Stmt::Kind::Shared).empty());  // no block reduction
  auto reductions = of_kind(plan.body, Stmt::Kind::ThreadReduce);
  REQUIRE(reductions.size() == 2);  // the mean, then the mean of the squares
  for (const Stmt* r : reductions) CHECK((r->scope == ThreadScope::Warp && r->width == 32 && r->op == OpKind::Mean));
  auto results = of_kind(plan.body, Stmt::Kind::Result);
  REQUIRE(results.size() == 2);
  CHECK(results[0]->index == "rnumel");  // a mean divides by the row's length
  auto rows = ranges(plan.body, RangeKind::RowStride);
  REQUIRE(rows.size() == 1);
  CHECK((rows[0]->begin == "first_row" && rows[0]->step == "row_step"));
  // rows of 64: 16 lanes a row, two rows a warp, the warp's rows looped over together
  const Plan halves = plan_of(layer_norm_kernel({1000, 64}), 9);
  auto half = of_kind(halves.body, Stmt::Kind::RowThread);
  REQUIRE(half.size() == 1);
  CHECK((half[0]->width == 16 && half[0]->block_rows == 16));
  CHECK(ranges(halves.body, RangeKind::RowStride)[0]->text == "r_warp");
  CHECK(of_kind(halves.body, Stmt::Kind::ThreadReduce)[0]->width == 16);
}
