// cuda_columns.cpp — the CUDA writer's column reductions (cuda_writer.h): a block per 32 kept
// elements, 32 lanes each over the reduced ones, the reduced elements shared among blocks in y
// where one pass suffices; and one long row split over many blocks (a full reduction), the
// block that arrives last folding the partials. Each shape is a named planner returning its
// statements (stmt.h), which cuda_statements.cpp spells: plan_split_reduction (the split row),
// plan_column_reduction (columns one a thread) and plan_vector_columns (CV columns a thread).
#include "codegen/cuda_writer.h"

#include <algorithm>

namespace mini::codegen {

// The most column folds that share one round of barriers (plan_column_folds): pages of
// fold[32][33] doubles, 8.4 KB each, 33 KB for four.
constexpr int64_t kFoldPages = 4;

// The shared array the column folds go through: pages of [32][33] slots, as many as `folds`
// (at most kFoldPages), each slot wide enough for any accumulator.
static Stmt fold_pages(size_t folds, const std::string& note) {
  const int64_t pages = std::max<int64_t>(1, std::min<int64_t>(int64_t(folds), kFoldPages));
  return shared("fold", DType::Float64, {pages, 32, 33}, note);
}

// Vector columns (layouts 2 and up, split columns only: one pass, no full value after the
// sums): as plan_column_reduction, but each thread takes CV consecutive kept elements, so
// that a warp's load of a row is 32 x 16 bytes (bfloat16 columns read 64 bytes a warp
// load one at a time: GPT-2's MLP bias gradient ran at 0.75 TB/s). A load running along the
// innermost dim with stride 1 (and every other stride a multiple of CV) is one Vec a row;
// any other load is read per element. Each of the CV columns keeps its own accumulators, and
// a full value the kernel stores is stored as one Vec. CV: 16 bytes of the widest such load
// or store, halved until the innermost dim divides by it and 32 threads have columns.
int CudaKernelWriter::column_vector() {
  if (column_vector_ >= 0) return column_vector_;
  column_vector_ = 1;
  if (!layout_.vector_pointwise || !cuda_column_reduction(k_, layout_) || cuda_column_splits(s_, k_, layout_) == 0)
    return 1;
  size_t widest = 0;
  for (const ExprPtr& e : pass_exprs(L_.plan_rows(0), 0))  // which loads run along the columns
    for_each_load(e, [&](const Expr& load) {
      if (runs_along_innermost(load, 1)) widest = std::max(widest, itemsize(load.dtype));
    });
  for (int id : k_.stores)
    if (L_.is_full(id)) widest = std::max(widest, itemsize(g_.nodes[id].meta.dtype));
  if (widest == 0) return 1;
  const int64_t last = k_.space.back();
  int64_t cols = 1;
  for (int64_t d : L_.kept_dims()) cols *= k_.space[d];
  int cv = (int)(16 / widest);
  while (cv > 1 && (last % cv || cols / cv < 32)) cv /= 2;
  return column_vector_ = cv;
}

// Columns (cuda_column_reduction): a block of 32 kept elements, consecutive in the innermost dim,
// by 32 lanes over the reduced elements. A warp's 32 threads are one kept element each, so
// that each of its loads is one line of memory (a block per kept element, as rows have, reads a
// bias gradient's column 32 times over); each lane folds every 32nd reduced element of its
// column, and the block folds the 32 lanes through shared memory, whose result every lane then
// reads (a later phase uses it). A kept element past the end computes the last one again and
// stores nothing: every thread reaches every __syncthreads.
//
// Split columns (cuda_column_splits): a few kept elements have too few blocks to fill the GPU
// (768 columns are 24 blocks), so the reduced elements are also shared among gridDim.y blocks,
// each a contiguous chunk of them. Each block folds its chunk and writes one partial per column
// and reduction (partials[(reduction * gridDim.y + blockIdx.y) * cols + col]); the block of
// that column strip that arrives last (a counter per strip, as write_split_reduction's) folds
// the gridDim.y partials in order (the same sum every run), then computes and stores the column
// values. The full-size values each block stores are its chunk's.
Plan CudaKernelWriter::plan_column_reduction() {
  const bool split = cuda_column_splits(s_, k_, layout_) > 0;
  Plan plan;
  plan.shape = split ? "split columns" : "columns";
  Body& body = plan.body;
  Stmt threads = statement(Stmt::Kind::ColumnComment);
  threads.chunked = split;
  body.push_back(threads);
  Stmt counts = index_let("cols", product(k_.space, L_.kept_dims()), false);
  counts.body.push_back(index_let("rnumel", product(k_.space, L_.red_dims()), false));
  body.push_back(counts);
  if (split) {
    Stmt chunk = statement(Stmt::Kind::Chunk, "j");
    chunk.end = "rnumel";
    body.push_back(chunk);
    body.push_back(shared("last", DType::Bool, {}));
  }
  Stmt thread = statement(Stmt::Kind::ColumnThread, "col");
  thread.index = "cols";
  body.push_back(thread);
  size_t most = 0;  // the most reductions a phase folds at once
  for (int p = 0; p <= L_.phases(); p++) {
    std::vector<int> reds, stores;
    L_.phase_targets(p, &reds, &stores);
    most = std::max(most, reds.size());
  }
  body.push_back(fold_pages(most, "a lane's partial per column (padded: no bank conflicts)"));
  body.push_back(unflatten_index("r", L_.kept_dims(), false));
  std::set<int> done;
  plan_unreduced_row_values(body, &done);  // values of the column that need no reduction
  for (int p = 0; p <= L_.phases(); p++) plan_column_phase(body, p, split, &done);
  for (int id : k_.stores)
    if (!L_.is_full(id)) {
      body.push_back(store(L_.buffer_of_store(id), linear_index(k_.space, L_.kept_dims()),
                           temp(id, g_.nodes[id].meta.dtype, true)));
      body.back().guard = "live && lane == 0";
    }
  return plan;
}

// Phase p of the columns: its accumulators, the lanes' pass over the reduced elements (or this
// block's chunk of them), the folds over the lanes (and, split, over the strip's blocks), the
// results and the column values they make ready.
void CudaKernelWriter::plan_column_phase(Body& body, int p, bool split, std::set<int>* done) {
  std::vector<int> reds, stores;
  L_.phase_targets(p, &reds, &stores);
  if (reds.empty() && stores.empty()) return;
  RowPlan rows = L_.plan_rows(0);
  for (int id : reds) body.push_back(accumulator(id, false));
  Body pass = {unflatten_index("j", L_.red_dims(), false)};
  for (int id : k_.nodes)
    if (rows.compute[p].count(id)) pass.push_back(let("t" + std::to_string(id), g_.nodes[id].meta.dtype, L_.expr(id, false)));
  for (int id : reds) pass.push_back(fold(id, L_.reduction_input(id)));
  for (int id : stores) {
    pass.push_back(store(L_.buffer_of_store(id), linear_full(), temp(id, g_.nodes[id].meta.dtype, false)));
    pass.back().guard = "live";
  }
  Stmt lanes = range(RangeKind::Unrolled, "j", split ? "j_begin + lane" : "lane", split ? "j_end" : "rnumel", pass);
  lanes.step = "32";
  lanes.unroll = 4;
  body.push_back(lanes);
  std::vector<std::pair<int, std::string>> accs;
  for (int id : reds) accs.push_back({id, "acc" + std::to_string(id)});
  plan_column_folds(body, accs);
  if (split && !reds.empty()) {
    for (size_t r = 0; r < reds.size(); r++) {  // this block's partials, then count it in
      Stmt partial = as_accumulator(statement(Stmt::Kind::Partial, "acc" + std::to_string(reds[r])), reds[r]);
      partial.slot = (int)r;
      partial.column = "col";
      partial.index = "cols";
      partial.guard = "live && lane == 0";
      body.push_back(partial);
    }
    plan_strip_arrival(body);
    for (size_t r = 0; r < reds.size(); r++) plan_strip_partials(body, r, reds[r], accs[r].second, "r");
    plan_column_folds(body, accs);
  }
  for (int id : reds) {
    body.push_back(result(id, "acc" + std::to_string(id)));
    done->insert(id);
  }
  plan_ready_row_values(body, done);  // column values whose reductions are all done
}

Plan CudaKernelWriter::plan_vector_columns(int CV) {
  Plan plan;
  plan.shape = "vector columns";
  const std::string X = "x" + std::to_string(rank_ - 1);  // the innermost (kept) dim's index
  std::vector<int> reds, stores;
  L_.phase_targets(0, &reds, &stores);
  // values of the columns that need no reduction, one a column
  std::vector<int> column_values;
  for (int id : k_.nodes)
    if (!L_.is_full(id) && !L_.is_reduction(id) && L_.reductions_below(id).empty()) column_values.push_back(id);
  plan_vector_columns_start(plan.body, CV, X, reds, column_values);
  plan_vector_columns_pass(plan.body, CV, X, column_values);
  plan_vector_columns_fold(plan.body, CV, reds);
  plan_vector_columns_results(plan.body, X, reds, column_values);
  return plan;
}

// A range over a thread's CV columns, unrolled.
static Stmt each_column(Body body) {
  Stmt columns = range(RangeKind::Unrolled, "u", "0", "CV", std::move(body));
  columns.int32 = true;
  return columns;
}
// const int64_t <X> = <X>_0 + u: column u of the thread's
static Stmt column_u(const std::string& X) { return index_let(X, X + "_0 + u", false); }

// The kernel's indices and, for each of a thread's CV columns, its values that need no
// reduction (rv<id>) and its accumulators (acc<id>), at their identities.
void CudaKernelWriter::plan_vector_columns_start(Body& body, int CV, const std::string& X, const std::vector<int>& reds,
                                                 const std::vector<int>& column_values) {
  Stmt threads = statement(Stmt::Kind::ColumnComment);
  threads.chunked = true;
  threads.width = CV;
  body.push_back(threads);
  Stmt lanes = index_let("CV", std::to_string(CV), true);
  lanes.constant = true;
  body.push_back(lanes);
  Stmt counts = index_let("cols", product(k_.space, L_.kept_dims()), false);
  counts.body.push_back(index_let("rnumel", product(k_.space, L_.red_dims()), false));
  body.push_back(counts);
  Stmt chunk = statement(Stmt::Kind::Chunk, "j");
  chunk.end = "rnumel";
  body.push_back(chunk);
  body.push_back(shared("last", DType::Bool, {}));
  Stmt thread = statement(Stmt::Kind::ColumnThread, "col0", "a thread past the end computes the last columns, stores nothing");
  thread.index = "cols";
  thread.lanes = "CV";
  body.push_back(thread);
  body.push_back(fold_pages(size_t(CV) * reds.size(), "a lane's partial per column, and each column's sum (padded)"));
  body.push_back(unflatten_index("r", L_.kept_dims(), false));
  body.push_back(index_let(X + "_0", X, false, "the thread's first column; column u is " + X + "_0 + u"));
  for (int id : column_values) {
    Stmt values = statement(Stmt::Kind::Registers, "rv" + std::to_string(id));
    values.dtype = g_.nodes[id].meta.dtype;
    values.lanes = "CV";
    body.push_back(values);
  }
  for (int id : reds) {
    Stmt accumulators = as_accumulator(statement(Stmt::Kind::Registers, "acc" + std::to_string(id)), id);
    accumulators.lanes = "CV";
    body.push_back(accumulators);
  }
  Body column;
  if (!column_values.empty()) column.push_back(column_u(X));
  for (int id : column_values) {
    const std::string r = "r" + std::to_string(id);
    column.push_back(let(r, g_.nodes[id].meta.dtype, L_.expr(id, false)));
    column.push_back(assign("rv" + std::to_string(id) + "[u]", local(r, g_.nodes[id].meta.dtype)));
  }
  for (int id : reds) {
    Stmt identity = accumulator(id, true);
    identity.name += "[u]";
    column.push_back(identity);
  }
  body.push_back(each_column(column));
}

// The pass over this block's chunk of rows: vector loads at the first column, the CV columns
// unrolled, each vector load read lane by lane; the full values stored as one Vec.
void CudaKernelWriter::plan_vector_columns_pass(Body& body, int CV, const std::string& X,
                                                const std::vector<int>& column_values) {
  std::map<LoadKey, std::string> vectors;  // a load -> its Vec register
  std::map<LoadKey, Expr> vector_loads;    // ... and the load
  for (const ExprPtr& e : pass_exprs(L_.plan_rows(0), 0))
    for_each_load(e, [&](const Expr& load) {
      if (runs_along_innermost(load, CV) && !vectors.count(load_key(load))) {
        vectors[load_key(load)] = "v" + std::to_string(vectors.size());
        vector_loads.emplace(load_key(load), load);
      }
    });
  Body pass = {unflatten_index("j", L_.red_dims(), false)};
  for (auto& [key, name] : vectors) {
    const Expr& e = vector_loads.at(key);
    Stmt read = vector_load(name, e.dtype, key.buffer, "", "CV");
    read.value = std::make_shared<const Expr>(e);
    pass.push_back(read);
  }
  std::vector<int> full_stores;
  for (int id : k_.stores)
    if (L_.is_full(id)) full_stores.push_back(id);
  for (int id : full_stores) pass.push_back(declare_vector("s" + std::to_string(id), g_.nodes[id].meta.dtype, "CV"));
  Locals lanes;  // each vector load read lane by lane
  for (auto& [key, name] : vectors) lanes.loads[key] = name + ".v[u]";
  Body column = {column_u(X)};
  for (int id : column_values)
    column.push_back(let("r" + std::to_string(id), g_.nodes[id].meta.dtype,
                         local("rv" + std::to_string(id) + "[u]", g_.nodes[id].meta.dtype)));
  RowPlan rows = L_.plan_rows(0);
  for (int id : k_.nodes)
    if (rows.compute[0].count(id))
      column.push_back(let("t" + std::to_string(id), g_.nodes[id].meta.dtype, lanes.apply(L_.expr(id, false))));
  std::vector<int> reds, stores;
  L_.phase_targets(0, &reds, &stores);
  for (int id : reds) {
    column.push_back(fold(id, lanes.apply(L_.reduction_input(id))));
    column.back().name += "[u]";
  }
  for (int id : full_stores)
    column.push_back(vector_lane("s" + std::to_string(id), "u", temp(id, g_.nodes[id].meta.dtype, false)));
  pass.push_back(each_column(column));
  for (int id : full_stores) {
    pass.push_back(vector_store("s" + std::to_string(id), g_.nodes[id].meta.dtype, L_.buffer_of_store(id), linear_full(), "CV"));
    pass.back().guard = "live";
    pass.back().at_element = true;
  }
  Stmt chunk = range(RangeKind::Unrolled, "j", "j_begin + lane", "j_end", pass);
  chunk.step = "32";
  chunk.unroll = 2;
  body.push_back(chunk);
}

// Each column's lanes folded, then the blocks' partials (the strip's last block, in order).
void CudaKernelWriter::plan_vector_columns_fold(Body& body, int CV, const std::vector<int>& reds) {
  std::vector<std::pair<int, std::string>> accs;  // a thread's CV columns of every reduction
  for (int u = 0; u < CV; u++)
    for (int id : reds) accs.push_back({id, "acc" + std::to_string(id) + "[" + std::to_string(u) + "]"});
  plan_column_folds(body, accs);
  for (size_t r = 0; r < reds.size(); r++) {
    Stmt partial = as_accumulator(statement(Stmt::Kind::Partial, "acc" + std::to_string(reds[r]) + "[u]"), reds[r]);
    partial.slot = (int)r;
    partial.column = "col0 + u";
    partial.index = "cols";
    Stmt columns = range(RangeKind::Serial, "u", "0", "CV", {partial});
    columns.int32 = columns.unbraced = true;
    columns.guard = "live && lane == 0";
    body.push_back(columns);
  }
  plan_strip_arrival(body);
  Body partials;
  for (size_t r = 0; r < reds.size(); r++)
    plan_strip_partials(partials, r, reds[r], "acc" + std::to_string(reds[r]) + "[u]", "r + u");
  body.push_back(each_column(partials));
  plan_column_folds(body, accs);
}

// The column values, a column at a time: the sums, then what they feed; stored by lane 0.
void CudaKernelWriter::plan_vector_columns_results(Body& body, const std::string& X, const std::vector<int>& reds,
                                                   const std::vector<int>& column_values) {
  Stmt done_here = statement(Stmt::Kind::Return);
  done_here.guard = "!live || lane != 0";
  body.push_back(done_here);
  Body column = {column_u(X)};
  std::set<int> done;
  for (int id : column_values) {
    column.push_back(let("r" + std::to_string(id), g_.nodes[id].meta.dtype,
                         local("rv" + std::to_string(id) + "[u]", g_.nodes[id].meta.dtype)));
    done.insert(id);
  }
  for (int id : reds) {
    column.push_back(result(id, "acc" + std::to_string(id) + "[u]"));
    done.insert(id);
  }
  plan_ready_row_values(column, &done);
  for (int id : k_.stores)
    if (!L_.is_full(id))
      column.push_back(store(L_.buffer_of_store(id), linear_index(k_.space, L_.kept_dims()),
                             temp(id, g_.nodes[id].meta.dtype, true)));
  body.push_back(each_column(column));
}

// Split columns: the block counts itself in once its partials are visible; all but the
// strip's last block to arrive are done, and that one resets the counter for the next launch.
void CudaKernelWriter::plan_strip_arrival(Body& body) {
  body.push_back(statement(Stmt::Kind::Fence, "", "the partials are visible before the block counts itself"));
  body.push_back(statement(Stmt::Kind::Barrier));
  Stmt arrive = statement(Stmt::Kind::Arrive, "last");
  arrive.per_strip = arrive.first_thread = true;
  body.push_back(arrive);
  body.push_back(statement(Stmt::Kind::Barrier));
  Stmt not_last = statement(Stmt::Kind::Return, "", "the strip's last block folds every block's partials");
  not_last.text = "last";
  body.push_back(not_last);
  body.push_back(statement(Stmt::Kind::Fence));
  Stmt reset = statement(Stmt::Kind::ResetArrivals, "", "for the next launch");
  reset.per_strip = reset.first_thread = true;
  body.push_back(reset);
}

// The strip's last block: accumulator `acc` of reduction `id` (the r-th of the pass) folded
// from every block's partial of column `col`, in y order (the same sum every launch), a block
// a lane; plan_column_folds then folds the lanes.
void CudaKernelWriter::plan_strip_partials(Body& body, size_t r, int id, const std::string& acc, const std::string& col) {
  Stmt identity = accumulator(id, true);
  identity.name = acc;
  body.push_back(identity);
  Stmt partial = as_accumulator(statement(Stmt::Kind::FoldPartial, acc), id);
  partial.slot = (int)r;
  partial.text = "y";
  partial.column = col;
  partial.index = "cols";
  Stmt blocks = range(RangeKind::StripBlocks, "y", "lane", "", {partial});
  blocks.step = "32";
  body.push_back(blocks);
}

// The 32 lanes of each column fold accumulators `accs` (reduction id, name) through shared
// memory (fold[page][32][33]), kFoldPages at once: each lane writes its partials, a page each;
// a barrier; warp w reads column w's 32 partials of each page (a thread each, the padded row
// spares bank conflicts), folds them with five shuffles and leaves the result in the spare
// 33rd slot of the page's row w; a barrier; every lane of the column reads its results; a
// barrier before the pages are written again. Three barriers for up to kFoldPages folds, where
// a fold at a time took three each (a layer norm's two gradients, 4 columns a thread: 24).
// (Lane 0 folding the 31 others in turn was 31 dependent shared loads.)
void CudaKernelWriter::plan_column_folds(Body& body, const std::vector<std::pair<int, std::string>>& accs) {
  for (size_t first = 0; first < accs.size(); first += kFoldPages) {
    const size_t end = std::min(accs.size(), first + kFoldPages);
    for (int step = 1; step <= 3; step++) {
      for (size_t i = first; i < end; i++) {
        Stmt s = as_accumulator(statement(Stmt::Kind::ThreadReduce, accs[i].second), accs[i].first);
        s.scope = ThreadScope::Column;
        s.text = "fold";
        s.slot = int(i - first);
        s.fold_step = step;
        body.push_back(s);
      }
      body.push_back(statement(Stmt::Kind::Barrier));
    }
  }
}

// const <dtype> r<id> = reduction `id`'s accumulator `acc` as its dtype (a Mean's: over rnumel).
Stmt CudaKernelWriter::result(int id, const std::string& acc) {
  const Node& n = g_.nodes[id];
  Stmt s = statement(Stmt::Kind::Result, "r" + std::to_string(id));
  s.dtype = n.meta.dtype;
  s.op = n.op;
  s.text = acc;
  s.index = "rnumel";
  return s;
}

// A full reduction in two stages, one launch: every block folds its grid-strided share of
// the row into a partial per reduction (partials[r * gridDim.x + block]); the block that
// arrives last (an atomic count after a __threadfence: CUDA's threadFenceReduction) folds the
// partials, resets the count for the next launch, and computes and stores the results.
Plan CudaKernelWriter::plan_split_reduction() {
  if (L_.has_online_pairs()) return CudaKernelWriter(s_, k_, without_online()).plan_split_reduction();
  Plan plan;
  plan.shape = "split row";
  std::vector<int> reds, stores;
  L_.phase_targets(0, &reds, &stores);
  RowPlan rows = L_.plan_rows(0);
  Body& body = plan.body;
  body.push_back(index_let("rnumel", product(k_.space, L_.red_dims()), false));
  for (int64_t d : L_.kept_dims()) {
    body.push_back(index_let("x" + std::to_string(d), "0", false, "the one row"));
    body.back().unused_ok = true;
  }
  body.push_back(shared("smem", DType::Float64, {32}, "block reductions: one value per warp"));
  body.push_back(shared("last", DType::Bool, {}));
  for (int id : reds) body.push_back(accumulator(id, false));
  Body share = {unflatten_index("j", L_.red_dims(), false)};
  for (int id : k_.nodes)
    if (rows.compute[0].count(id))
      share.push_back(let("t" + std::to_string(id), g_.nodes[id].meta.dtype, L_.expr(id, false)));
  for (int id : reds) share.push_back(fold(id, L_.reduction_input(id)));
  body.push_back(range(RangeKind::GridStride, "j", "", "rnumel", share));
  for (size_t r = 0; r < reds.size(); r++) {
    body.push_back(block_reduce(reds[r]));
    Stmt partial = as_accumulator(statement(Stmt::Kind::Partial, "acc" + std::to_string(reds[r])), reds[r]);
    partial.slot = (int)r;
    partial.first_thread = true;
    body.push_back(partial);
  }
  Stmt arrival = scope({statement(Stmt::Kind::Fence, "", "this block's partials are visible before it counts itself"),
                        statement(Stmt::Kind::Arrive, "last")});
  arrival.first_thread = true;
  body.push_back(arrival);
  body.push_back(statement(Stmt::Kind::Barrier));
  Stmt not_last = statement(Stmt::Kind::Return);
  not_last.text = "last";
  body.push_back(not_last);
  body.push_back(statement(Stmt::Kind::Fence));
  for (size_t r = 0; r < reds.size(); r++) plan_partials_fold(body, r, reds[r]);
  Stmt first_only = statement(Stmt::Kind::Return);
  first_only.first_thread = true;
  body.push_back(first_only);
  body.push_back(statement(Stmt::Kind::ResetArrivals, "", "for the next launch"));
  std::set<int> done(reds.begin(), reds.end());
  for (int id : k_.nodes) {  // the row values: what the results feed
    if (done.count(id) || L_.is_full(id) || L_.is_reduction(id)) continue;
    body.push_back(let("r" + std::to_string(id), g_.nodes[id].meta.dtype, L_.expr(id, false)));
    done.insert(id);
  }
  for (int id : k_.stores)
    body.push_back(store(L_.buffer_of_store(id), linear_index(k_.space, L_.kept_dims()),
                         temp(id, g_.nodes[id].meta.dtype, true)));
  return plan;
}

// The last block: reduction `id`'s accumulator (the r-th of the pass) folded again from every
// block's partial, a block a thread, then over the block; its result r<id>.
void CudaKernelWriter::plan_partials_fold(Body& body, size_t r, int id) {
  body.push_back(accumulator(id, true));
  Stmt partial = as_accumulator(statement(Stmt::Kind::FoldPartial, "acc" + std::to_string(id)), id);
  partial.slot = (int)r;
  partial.text = "b";
  body.push_back(range(RangeKind::GridBlocks, "b", "", "", {partial}));
  body.push_back(block_reduce(id));
  body.push_back(result(id, "acc" + std::to_string(id)));
}

// `s` given reduction `id`'s accumulator: its type (as acc_type) and how values combine.
Stmt CudaKernelWriter::as_accumulator(Stmt s, int id) {
  const Node& n = g_.nodes[id];
  const DType d = g_.nodes[n.inputs[0]].meta.dtype;
  s.op = n.op;
  s.dtype = d == DType::BFloat16 ? DType::Float32 : d == DType::Bool && is_sum(n) ? DType::Int64 : d;
  s.int_accumulator = d == DType::Bool && !is_sum(n);
  return s;
}
// acc<id> = the identity of reduction `id` (declared here, or assigned: declared before).
Stmt CudaKernelWriter::accumulator(int id, bool assign) {
  Stmt s = as_accumulator(statement(Stmt::Kind::Accumulator, "acc" + std::to_string(id)), id);
  s.assign = assign;
  return s;
}
// acc<id> = combine(acc<id>, value)
Stmt CudaKernelWriter::fold(int id, ExprPtr value) {
  Stmt s = as_accumulator(statement(Stmt::Kind::Fold, "acc" + std::to_string(id)), id);
  s.value = std::move(value);
  return s;
}
// acc<id> combined across the block, through the shared array smem
Stmt CudaKernelWriter::block_reduce(int id) {
  Stmt s = as_accumulator(statement(Stmt::Kind::ThreadReduce, "acc" + std::to_string(id)), id);
  s.scope = ThreadScope::Block;
  s.text = "smem";
  return s;
}

}  // namespace mini::codegen
