// cpp_plan.cpp — the C++ planner (cpp_plan.h): one function per kernel form, each building the
// statements of stmt.h from the LoopKernel's data. Measurements behind each constant are in
// notes/inductor.md and notes/perf.md.
#include "codegen/cpp_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "codegen/c_style.h"

namespace mini::codegen {

using graph::Node;

namespace {

// Elements per tile of a staged pointwise loop: one stage's values of a tile (1 KiB of float)
// stay in L1 until the next stage reads them.
constexpr int kStageTile = 256;
constexpr int kMaxStages = 8;  // loops per pass over a tile or row chunk (cut_stages)
// A loop runs on threads only past this many elements (iterations times the row).
constexpr const char* kParallelMin = "131072";

// Past this many float sin/cos/exp/sigmoid ops in one source, each calls one out-of-line
// vector version (an OpenMP simd clone, cpp_kernel.cpp's kOutlinedMath) instead of inlining a
// copy of its own: the copies are what the C++ compiler spends its time on, and past GCC's
// inlining budget (about 100 copies) the rest became scalar calls that kept their loops from
// vectorizing.
constexpr int kInlineTranscendentals = 64;

// One pass over a row adds a float32 sum in float within chunks of kSumChunk elements (16
// vector lanes of 64 each), and the chunks' sums in double: float speed, and an error that does
// not grow with the row's length.
constexpr int kSumChunk = 1024;
constexpr int kSplitMin = 32768;  // a row shorter than this is not worth splitting over threads
// A row's values kept in stack arrays between passes, up to this many bytes (LoopKernel::plan_rows).
constexpr int64_t kScratchBytes = 64 * 1024;

// An outer reduction takes blocks of kOuterBlock outputs; where every reduction is a sum and
// there are few blocks, (block, chunk of kOuterSplit reduced rows) pairs go over the threads.
constexpr int kOuterBlock = 256;
constexpr int kOuterSplit = 128;      // rows of the reduced dims a split task sums
constexpr int kOuterSplitBlocks = 16;  // at most this many blocks of outputs to split

std::string name(char prefix, int id) { return prefix + std::to_string(id); }
std::string name(const std::string& prefix, int id) { return prefix + std::to_string(id); }

// The value of node `id` computed earlier: t<id> (full) or r<id> (a row value).
ExprPtr temp(const LoopKernel& L, int id, bool row) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::Temp;
  e->dtype = L.node(id).meta.dtype;
  e->node = id;
  e->row = row;
  return e;
}

Stmt index_values(std::vector<std::pair<std::string, std::string>> lets, DType dtype = DType::Int64) {
  Stmt s;
  s.kind = Stmt::Kind::Index;
  s.dtype = dtype;
  s.lets = std::move(lets);
  return s;
}
// end of the chunk of `size` from `start`: "<end> - <start> < size ? <end> : <start> + size"
std::string chunk_end(const std::string& start, const std::string& end, int size) {
  const std::string n = std::to_string(size);
  return end + " - " + start + " < " + n + " ? " + end + " : " + start + " + " + n;
}
Stmt unflatten_index(const std::string& flat, std::vector<int64_t> dims) {
  Stmt s;
  s.kind = Stmt::Kind::Unflatten;
  s.text = flat;
  s.dims = std::move(dims);
  return s;
}
Stmt array(std::string array_name, DType dtype, std::string length, std::string note = "") {
  Stmt s;
  s.kind = Stmt::Kind::Array;
  s.name = std::move(array_name);
  s.dtype = dtype;
  s.length = std::move(length);
  s.text = std::move(note);
  return s;
}
Stmt read_array(const LoopKernel& L, int id, const std::string& from, const std::string& at) {
  Stmt s = let(name('t', id), L.node(id).meta.dtype, nullptr);
  s.array = from;
  s.index = at;
  return s;
}
Stmt write_array(const LoopKernel& L, const std::string& to, const std::string& at, int id) {
  Stmt s = store(-1, at, temp(L, id, false));
  s.array = to;
  return s;
}
Stmt simple(Stmt::Kind kind, std::string what) {
  Stmt s;
  s.kind = kind;
  s.name = std::move(what);
  return s;
}
Stmt parallel(Stmt loop, std::string when, int collapse = 0) {
  loop.range = RangeKind::Parallel;
  loop.parallel_if = std::move(when);
  loop.collapse = collapse;
  return loop;
}
Stmt stepped(Stmt loop, int step) {
  loop.step = std::to_string(step);
  return loop;
}
// for (r = 0; r < r1 - r0; r++) <one statement>: over a block's outputs
Stmt over_block(Stmt one) {
  Stmt s = range(RangeKind::Serial, "r", "0", "r1 - r0", {std::move(one)});
  s.compact = true;
  return s;
}

bool is_sum(const Node& n) { return n.op == OpKind::Sum || n.op == OpKind::Mean; }
DType input_dtype(const LoopKernel& L, const Node& n) { return L.node(n.inputs[0]).meta.dtype; }
// What a reduction accumulates in: double (int64_t) for a sum of floats (integers), else its input's type.
DType accumulator_type(const LoopKernel& L, const Node& n) {
  DType d = input_dtype(L, n);
  if (is_sum(n)) return is_floating(d) ? DType::Float64 : DType::Int64;
  return d;
}
// What a sum adds in within one chunk: float for float32, else the accumulator's type.
DType part_type(const LoopKernel& L, const Node& n) {
  return input_dtype(L, n) == DType::Float32 ? DType::Float32 : accumulator_type(L, n);
}

// An accumulator of reduction `id`: a scalar, or (`length` set) an array over a block.
Stmt accumulator(const LoopKernel& L, int id, const std::string& length = "") {
  const Node& n = L.node(id);
  Stmt s = length.empty() ? Stmt() : array(name("acc", id), accumulator_type(L, n), length);
  if (length.empty()) {
    s.kind = Stmt::Kind::Declare;
    s.name = name("acc", id);
    s.dtype = accumulator_type(L, n);
  }
  s.op = n.op;
  if (!is_sum(n)) s.flag = name("nan", id);
  return s;
}
// One element's step of reduction `id`: a sum adds into its part, a max or min into its
// accumulator (and its NaN flag, for floats); `at`: the element of a block's arrays.
Stmt fold_step(const LoopKernel& L, int id, const std::string& at = "") {
  const Node& n = L.node(id);
  Stmt s;
  s.kind = Stmt::Kind::Fold;
  s.op = n.op;
  s.name = name(is_sum(n) ? "part" : "acc", id);
  s.index = at;
  s.value = L.reduction_input(id);
  if (!is_sum(n) && is_floating(input_dtype(L, n))) s.flag = name("nan", id);
  return s;
}
// <accumulator>[at] += <from>: partial sums added in order
Stmt add_partial(int id, const std::string& at, std::string from) {
  Stmt s;
  s.kind = Stmt::Kind::Fold;
  s.op = OpKind::Sum;
  s.name = name("acc", id);
  s.index = at;
  s.spelled = std::move(from);
  return s;
}
// const T r<id> = the value of reduction `id` from its accumulator (element `at` of a block's)
Stmt result(const LoopKernel& L, int id, const std::string& at = "") {
  const Node& n = L.node(id);
  Stmt s;
  s.kind = Stmt::Kind::Result;
  s.name = name('r', id);
  s.dtype = n.meta.dtype;
  s.op = n.op;
  s.array = name("acc", id);
  s.index = at;
  s.accumulator = accumulator_type(L, n);
  if (!is_sum(n)) s.flag = name("nan", id);
  if (n.op == OpKind::Mean) s.length = "rnumel";
  return s;
}
// The accumulators a range's iterations combine: `sums` names a sum's variable ("acc", "part").
std::vector<Reduction> reductions(const LoopKernel& L, const std::vector<int>& reds, const std::string& sums) {
  std::vector<Reduction> out;
  for (int id : reds) {
    const Node& n = L.node(id);
    if (is_sum(n)) out.push_back({OpKind::Sum, name(sums, id), ""});
    else out.push_back({n.op, name("acc", id), name("nan", id)});
  }
  return out;
}

// const T t<id> = ...; for each full value `targets` needs, in program order
void define_full(const LoopKernel& L, const std::set<int>& targets, bool flat_ok, Body* body) {
  for (int id : L.full_values_for(targets))
    body->push_back(let(name('t', id), L.node(id).meta.dtype, L.expr(id, flat_ok)));
}
void define_row(const LoopKernel& L, int id, Body* body) {
  body->push_back(let(name('r', id), L.node(id).meta.dtype, L.expr(id, false)));
}
std::string out_index_full(const LoopKernel& L) { return linear_full(L.group().space); }
std::string out_index_row(const LoopKernel& L) { return linear_index(L.group().space, L.kept_dims()); }

// Stage of each value, and the values read in a later stage than their own.
std::map<int, size_t> stage_of(const std::vector<std::vector<int>>& stages) {
  std::map<int, size_t> of;
  for (size_t k = 0; k < stages.size(); k++)
    for (int id : stages[k]) of[id] = k;
  return of;
}

}  // namespace

Plan plan_cpp(const LoopKernel& L) {
  if (!L.group().reduced.empty()) return L.is_outer_reduction() ? plan_outer_reduction(L) : plan_row_reduction(L);
  if (L.flat_uses_index() && L.rank() >= 2) return plan_pointwise_nest(L);
  // The full-space values in program order, cut into stages of one transcendental each. One
  // loop over a long chain (chain8: sin, cos, exp and a division per element) is slow even when
  // vectorized: each iteration is one dependency chain hundreds of cycles long, and the CPU's
  // out-of-order window holds too few iterations to overlap them. A stage per transcendental
  // keeps each loop's chain short.
  const auto& stores = L.group().stores;
  auto stages = L.cut_stages(L.full_values_for(std::set<int>(stores.begin(), stores.end())), kMaxStages);
  return stages.size() > 1 ? plan_pointwise_staged(L, stages) : plan_pointwise_flat(L);
}

Plan plan_pointwise_flat(const LoopKernel& L) {
  const auto& stores = L.group().stores;
  Body body;
  if (L.flat_uses_index()) body.push_back(unflatten_index("i", L.kept_dims()));
  define_full(L, std::set<int>(stores.begin(), stores.end()), true, &body);
  for (int id : stores) body.push_back(store(L.buffer_of_store(id), "i", temp(L, id, false)));
  Stmt loop = range(RangeKind::ParallelSimd, "i", "0", "numel", std::move(body));
  loop.parallel_if = std::string("numel >= ") + kParallelMin;
  return {"pointwise", {index_values({{"numel", product(L.group().space, L.kept_dims())}}), loop}};
}

// A value computed in one stage and read in a later one goes through a small array (s<id>) of
// the tile that stays in L1.
Plan plan_pointwise_staged(const LoopKernel& L, const std::vector<std::vector<int>>& stages) {
  std::map<int, size_t> of = stage_of(stages);
  std::set<int> crossing;  // values read in a later stage than their own
  for (size_t k = 0; k < stages.size(); k++)
    for (int id : stages[k])
      for (int i : L.node(id).inputs)
        if (of.count(i) && of[i] < k) crossing.insert(i);
  const std::string tile = std::to_string(kStageTile);
  Body tile_body{index_values({{"i1", chunk_end("i0", "numel", kStageTile)}})};
  for (int id : crossing) tile_body.push_back(array(name('s', id), L.node(id).meta.dtype, tile));
  for (size_t k = 0; k < stages.size(); k++) {
    Body body;
    if (L.flat_uses_index()) body.push_back(unflatten_index("i", L.kept_dims()));
    std::set<int> read;  // crossing values this stage reads
    for (int id : stages[k])
      for (int i : L.node(id).inputs)
        if (crossing.count(i) && of[i] < k) read.insert(i);
    for (int id : read) body.push_back(read_array(L, id, name('s', id), "i - i0"));
    for (int id : stages[k]) {
      body.push_back(let(name('t', id), L.node(id).meta.dtype, L.expr(id, true)));
      if (crossing.count(id)) body.push_back(write_array(L, name('s', id), "i - i0", id));
      if (L.is_store(id)) body.push_back(store(L.buffer_of_store(id), "i", temp(L, id, false)));
    }
    tile_body.push_back(range(RangeKind::Simd, "i", "i0", "i1", std::move(body)));
  }
  Stmt tiles = stepped(range(RangeKind::Serial, "i0", "0", "numel", std::move(tile_body)), kStageTile);
  return {"staged",
          {index_values({{"numel", product(L.group().space, L.kept_dims())}}),
           comment(std::to_string(stages.size()) + " stages per tile of " + tile +
                   " elements, one per transcendental op: short loops overlap, one long chain does not"),
           parallel(std::move(tiles), std::string("numel >= ") + kParallelMin)}};
}

Plan plan_pointwise_nest(const LoopKernel& L) {
  const auto& stores = L.group().stores;
  const Shape& space = L.group().space;
  Body body;
  define_full(L, std::set<int>(stores.begin(), stores.end()), false, &body);
  for (int id : stores) body.push_back(store(L.buffer_of_store(id), out_index_full(L), temp(L, id, false)));
  const int rank = L.rank();
  for (int d = rank - 1; d >= 0; d--) {
    RangeKind kind = d == rank - 1 ? RangeKind::Simd : RangeKind::Serial;
    Stmt loop = range(kind, name('x', d), "0", size_expr(space[d]), std::move(body));
    body = {std::move(loop)};
  }
  // the outer dims over threads: the pragma stands above the whole nest, which sits one level in
  Stmt nest = parallel(std::move(body[0]), std::string("numel >= ") + kParallelMin, std::max(1, rank - 1));
  nest.nest_in = true;
  return {"nest",
          {index_values({{"numel", product(space, L.kept_dims())}}), simple(Stmt::Kind::Unused, "numel"), nest}};
}


namespace {

// One pass over the row (phase p): the chunks of kSumChunk elements, each chunk one loop per
// stage (as a staged pointwise kernel) whose last loop folds the reductions and writes the full
// stores; a value crossing stages goes through a chunk-long array c<id>, a value kept for a
// later phase into the row's scratch array s<id>, and a value kept by an earlier one is read back.
Stmt chunk_pass(const LoopKernel& L, const RowPlan& plan, int p, const std::vector<int>& reds,
                const std::vector<int>& stores) {
  std::vector<int> order;
  for (int id : L.group().nodes)
    if (plan.compute[p].count(id)) order.push_back(id);
  std::vector<std::vector<int>> stages = L.cut_stages(order, kMaxStages);
  std::map<int, size_t> of = stage_of(stages);
  std::vector<std::set<int>> uses(stages.size());  // values each stage reads
  for (size_t k = 0; k < stages.size(); k++)
    for (int id : stages[k])
      for (int i : L.node(id).inputs)
        if (i >= 0) uses[k].insert(i);
  for (int id : reds) uses.back().insert(L.node(id).inputs[0]);
  for (int id : stores) uses.back().insert(id);
  std::set<int> crossing;
  for (size_t k = 0; k < stages.size(); k++)
    for (int id : uses[k])
      if (of.count(id) && of[id] < k) crossing.insert(id);
  const std::string chunk = std::to_string(kSumChunk);
  Body body{index_values({{"j1", chunk_end("j0", "rnumel", kSumChunk)}})};
  for (int id : reds)
    if (is_sum(L.node(id))) {
      Stmt part;
      part.kind = Stmt::Kind::Declare;
      part.name = name("part", id);
      part.dtype = part_type(L, L.node(id));
      part.spelled = "0";
      body.push_back(part);
    }
  for (int id : crossing) body.push_back(array(name('c', id), L.node(id).meta.dtype, chunk));
  for (size_t k = 0; k < stages.size(); k++) {
    bool last = k + 1 == stages.size();
    Body pass{unflatten_index("j", L.red_dims())};
    for (int id : plan.read[p])
      if (uses[k].count(id)) pass.push_back(read_array(L, id, name('s', id), "j"));
    for (int id : crossing)
      if (uses[k].count(id) && of[id] < k) pass.push_back(read_array(L, id, name('c', id), "j - j0"));
    for (int id : stages[k]) {
      pass.push_back(let(name('t', id), L.node(id).meta.dtype, L.expr(id, false)));
      if (plan.scratch.count(id)) pass.push_back(write_array(L, name('s', id), "j", id));
      if (crossing.count(id)) pass.push_back(write_array(L, name('c', id), "j - j0", id));
    }
    if (last) {
      for (int id : reds) pass.push_back(fold_step(L, id));
      for (int id : stores) pass.push_back(store(L.buffer_of_store(id), out_index_full(L), temp(L, id, false)));
    }
    Stmt loop = range(RangeKind::Simd, "j", "j0", "j1", std::move(pass));
    if (last) loop.reductions = reductions(L, reds, "part");
    body.push_back(std::move(loop));
  }
  for (int id : reds)
    if (is_sum(L.node(id))) body.push_back(add_partial(id, "", name("part", id)));
  return stepped(range(RangeKind::Serial, "j0", "0", "rnumel", std::move(body)), kSumChunk);
}

// A phase's accumulators, its pass over the row and the reductions' values. Every reduction is
// an OpenMP reduction, so the loop vectorizes: sums with +, max/min with max/min and a separate
// NaN flag (a NaN-propagating select would chain each element to the one before and keep the
// loop scalar; an int flag, not a bool: GCC does not vectorize an OpenMP | reduction over bool).
void plan_phase(const LoopKernel& L, const RowPlan& plan, int p, const std::vector<int>& reds,
                const std::vector<int>& stores, std::set<int>* done, Body* body) {
  for (int id : reds) body->push_back(accumulator(L, id));
  Stmt pass = chunk_pass(L, plan, p, reds, stores);
  // A nested parallel region costs a team start even when it runs on one thread: only a split
  // row enters one. A row known to be shorter than kSplitMin never splits: no split copy of the
  // pass then (each copy costs the C++ compiler as much as the pass itself).
  int64_t rnumel = L.static_extent(L.red_dims());
  if (rnumel >= 0 && rnumel < kSplitMin) {
    body->push_back(std::move(pass));
  } else {
    Stmt split;
    split.kind = Stmt::Kind::If;
    split.text = "split";
    Stmt over_threads = parallel(pass, "");
    over_threads.reductions = reductions(L, reds, "acc");
    split.body = {std::move(over_threads)};
    split.orelse = {std::move(pass)};
    body->push_back(std::move(split));
  }
  for (int id : reds) {
    body->push_back(result(L, id));
    done->insert(id);
  }
}

}  // namespace

// How a reduction kernel's row loop is laid out (LoopKernel::plan_rows): for each phase (one
// pass over the row), the full-space values it computes and those it reads back from a row
// scratch array. A transcendental value needed again in a later phase (softmax's exp(x - max),
// summed in one pass and divided in the next) is kept in a per-row array instead of computed
// twice, when the row is short enough for the arrays to sit on the stack (kScratchBytes).
// Fewer rows than threads (a loss: everything summed to one number): each row's passes are
// split over the threads instead, each thread reducing a range of chunks.
Plan plan_row_reduction(const LoopKernel& L) {
  const Shape& space = L.group().space;
  RowPlan plan = L.plan_rows(kScratchBytes);
  Body row{unflatten_index("r", L.kept_dims())};
  for (int id : plan.scratch)
    row.push_back(array(name('s', id), L.node(id).meta.dtype, product(space, L.red_dims()),
                        L.node(id).name + " of this row, computed once"));
  std::set<int> done;  // row values computed so far
  for (int id : L.group().nodes) {  // row values that need no reduction: before any loop reads them
    if (L.is_full(id) || L.is_reduction(id) || !L.reductions_below(id).empty()) continue;
    define_row(L, id, &row);
    done.insert(id);
  }
  for (int p = 0; p <= L.phases(); p++) {
    std::vector<int> reds, stores;
    L.phase_targets(p, &reds, &stores);
    if (!reds.empty() || !stores.empty()) plan_phase(L, plan, p, reds, stores, &done, &row);
    for (int id : L.group().nodes) {  // row values whose reductions are all done
      if (done.count(id) || L.is_full(id) || L.is_reduction(id)) continue;
      bool ready = true;
      for (int dep : L.reductions_below(id)) ready = ready && done.count(dep);
      if (!ready) continue;
      define_row(L, id, &row);
      done.insert(id);
    }
  }
  for (int id : L.group().stores)
    if (!L.is_full(id)) row.push_back(store(L.buffer_of_store(id), out_index_row(L), temp(L, id, true)));
  std::string when = std::string("!split && rows > 1 && rows * rnumel >= ") + kParallelMin;
  return {"rows",
          {index_values({{"rows", product(space, L.kept_dims())}, {"rnumel", product(space, L.red_dims())}}),
           index_values({{"split", "rows < omp_get_max_threads() && rnumel >= " + std::to_string(kSplitMin)}},
                        DType::Bool),
           parallel(range(RangeKind::Serial, "r", "0", "rows", std::move(row)), when)}};
}


namespace {

// Over one block's outputs [r0, r1) and the reduced rows [j0, j1): the full values, each
// reduction's step into its element of the block's arrays, the full stores.
Stmt block_pass(const LoopKernel& L, const std::vector<int>& reds) {
  std::set<int> targets(reds.begin(), reds.end());
  for (int id : L.group().stores)
    if (L.is_full(id)) targets.insert(id);
  Body lanes{unflatten_index("r", L.kept_dims())};
  define_full(L, targets, false, &lanes);
  for (int id : reds) lanes.push_back(fold_step(L, id, "r - r0"));
  for (int id : L.group().stores)  // full-space values this kernel also stores (read by a later one)
    if (L.is_full(id)) lanes.push_back(store(L.buffer_of_store(id), out_index_full(L), temp(L, id, false)));
  return range(RangeKind::Serial, "j", "j0", "j1",
               {unflatten_index("j", L.red_dims()), range(RangeKind::Simd, "r", "r0", "r1", std::move(lanes))});
}

// The block's accumulator arrays, each element set to its reduction's identity.
void block_accumulators(const LoopKernel& L, const std::vector<int>& reds, Body* body) {
  for (int id : reds) {
    Stmt acc = accumulator(L, id, std::to_string(kOuterBlock));
    Stmt reset = acc;
    reset.kind = Stmt::Kind::Reset;
    reset.index = "r";
    body->push_back(std::move(acc));
    body->push_back(over_block(std::move(reset)));
  }
}

// The block's results, from acc<id>[r - r0]: row values and row stores.
Stmt block_results(const LoopKernel& L, const std::vector<int>& reds) {
  Body body{unflatten_index("r", L.kept_dims())};
  for (int id : reds) body.push_back(result(L, id, "r - r0"));
  for (int id : L.group().nodes)  // row values after the reductions
    if (!L.is_full(id) && !L.is_reduction(id)) define_row(L, id, &body);
  for (int id : L.group().stores)
    if (!L.is_full(id)) body.push_back(store(L.buffer_of_store(id), out_index_row(L), temp(L, id, true)));
  return range(RangeKind::Serial, "r", "r0", "r1", std::move(body));
}

Stmt part_array(const LoopKernel& L, int id) {
  Stmt part = array(name("part", id), part_type(L, L.node(id)), std::to_string(kOuterBlock));
  part.zeroed = true;
  return part;
}

// Few blocks: (block, chunk) pairs over the threads, each summed into its partial; then each
// block adds its partials in order. Only where every reduction is a sum.
Stmt split_blocks(const LoopKernel& L, const std::vector<int>& reds) {
  const std::string block = std::to_string(kOuterBlock), split = std::to_string(kOuterSplit);
  const std::string at = "(b * chunks + c) * " + block + " + r";
  Body body{comment("few blocks of outputs: (block, chunk of " + split + " reduced rows) pairs over the threads,\n"
                    "each into its partial; then each block adds its partials in order")};
  for (int id : reds) {
    Stmt partial = simple(Stmt::Kind::Alloc, name("partial", id));
    partial.dtype = part_type(L, L.node(id));
    partial.length = "blocks * chunks * " + block;
    body.push_back(partial);
  }
  Body pair{index_values({{"r0", "b * " + block}, {"r1", chunk_end("r0", "rows", kOuterBlock)}}),
            index_values({{"j0", "c * " + split}, {"j1", chunk_end("j0", "rnumel", kOuterSplit)}})};
  for (int id : reds) pair.push_back(part_array(L, id));
  pair.push_back(block_pass(L, reds));
  for (int id : reds) {
    Stmt keep = store(-1, at, nullptr);
    keep.array = name("partial", id);
    keep.spelled = name("part", id) + "[r]";
    pair.push_back(over_block(std::move(keep)));
  }
  Stmt chunks = range(RangeKind::Serial, "c", "0", "chunks", std::move(pair));
  body.push_back(parallel(range(RangeKind::Serial, "b", "0", "blocks", {std::move(chunks)}), "", 2));
  Body sum{index_values({{"r0", "b * " + block}, {"r1", chunk_end("r0", "rows", kOuterBlock)}})};
  block_accumulators(L, reds, &sum);
  for (int id : reds) {
    Stmt add = add_partial(id, "r", name("partial", id) + "[" + at + "]");
    Stmt over_chunks = range(RangeKind::Serial, "c", "0", "chunks", {over_block(std::move(add))});
    over_chunks.compact = true;
    sum.push_back(std::move(over_chunks));
  }
  sum.push_back(block_results(L, reds));
  body.push_back(parallel(range(RangeKind::Serial, "b", "0", "blocks", std::move(sum)), ""));
  for (int id : reds) body.push_back(simple(Stmt::Kind::Free, name("partial", id)));
  body.push_back(simple(Stmt::Kind::Return, ""));
  Stmt few;
  few.kind = Stmt::Kind::If;
  few.text = "blocks <= " + std::to_string(kOuterSplitBlocks) + " && chunks >= 2 && rows * rnumel >= " + kParallelMin;
  few.body = std::move(body);
  return few;
}

}  // namespace

// An *outer* reduction reduces leading dims of a contiguous space (a bias gradient: sum over the
// batch, dim 0 of [batch, features]). A row loop would walk each output's elements with a stride
// of the row length: no vectorization, a cache line per element. Instead the kernel takes blocks
// of kOuterBlock outputs, walks the reduced dims in the outer loop and the block in the inner
// one, contiguous and vectorized, with one accumulator per output (eager mini's reduce does the
// same). LoopKernel::is_outer_reduction says when it applies. Few blocks (a bias of 128 or 512
// features: 1 or 2) would leave most threads idle while the whole reduction, often a fused gelu
// backward, runs on one or two: where every reduction is a sum, the reduced dims are then cut
// into chunks of kOuterSplit too (split_blocks). Whether a kernel splits depends on the shape
// only, so its result does not depend on the thread count.
Plan plan_outer_reduction(const LoopKernel& L) {
  const Shape& space = L.group().space;
  const std::string block = std::to_string(kOuterBlock);
  std::vector<int> reds;
  for (int id : L.group().nodes)
    if (L.is_reduction(id)) reds.push_back(id);
  bool all_sums = true;
  for (int id : reds) all_sums = all_sums && is_sum(L.node(id));
  Plan plan{"outer",
            {index_values({{"rows", product(space, L.kept_dims())}, {"rnumel", product(space, L.red_dims())}}),
             comment("an outer reduction: blocks of " + block + " outputs, the reduced dims in the outer loop,\n"
                     "the block's outputs in the inner (contiguous, vectorized) one")}};
  if (all_sums) {
    const std::string split = std::to_string(kOuterSplit);
    plan.body.push_back(index_values({{"blocks", "(rows + " + block + " - 1) / " + block},
                                      {"chunks", "(rnumel + " + split + " - 1) / " + split}}));
    plan.body.push_back(split_blocks(L, reds));
  }
  Body chunk{index_values({{"j1", chunk_end("j0", "rnumel", kSumChunk)}})};
  for (int id : reds)
    if (is_sum(L.node(id))) chunk.push_back(part_array(L, id));
  chunk.push_back(block_pass(L, reds));
  for (int id : reds)
    if (is_sum(L.node(id))) chunk.push_back(over_block(add_partial(id, "r", name("part", id) + "[r]")));
  Body blocks{index_values({{"r1", chunk_end("r0", "rows", kOuterBlock)}})};
  block_accumulators(L, reds, &blocks);
  blocks.push_back(stepped(range(RangeKind::Serial, "j0", "0", "rnumel", std::move(chunk)), kSumChunk));
  blocks.push_back(block_results(L, reds));
  Stmt over_blocks = stepped(range(RangeKind::Serial, "r0", "0", "rows", std::move(blocks)), kOuterBlock);
  plan.body.push_back(parallel(std::move(over_blocks), std::string("rows * rnumel >= ") + kParallelMin));
  return plan;
}

bool cpp_outlines_math(const fusion::Schedule& s) {
  int transcendentals = 0;
  for (const auto& k : s.groups)
    for (int id : k.nodes)
      transcendentals += cpp_outlined_math().count(s.graph.nodes[id].op) &&
                         s.graph.nodes[id].meta.dtype == DType::Float32;
  return transcendentals > kInlineTranscendentals;
}

const std::map<OpKind, std::string>& cpp_outlined_math() {
  static const std::map<OpKind, std::string> table = {
      {OpKind::Sin, "mini::sin_v"}, {OpKind::Cos, "mini::cos_v"}, {OpKind::Exp, "mini::exp_v"},
      {OpKind::Sigmoid, "mini::sigmoid_v"}};
  return table;
}

}  // namespace mini::codegen
