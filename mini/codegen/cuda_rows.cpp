// cuda_rows.cpp — the CUDA writer's row reductions (cuda_writer.h): a block, a warp or a few
// lanes per row; each row held in registers ("per") or looped over, in 16-byte vectors from
// layout 7 on ("red"); block and warp reductions between the passes; the online softmax. Each
// shape is a named planner returning its statements (stmt.h), which cuda_statements.cpp spells:
// plan_row_reduction (a row held in registers, or looped over element by element) and
// plan_vector_rows (looped over in vectors), plan_row_kernel choosing between them.
#include "codegen/cuda_writer.h"

#include <algorithm>

namespace mini::codegen {

// A kernel of rows: looped in vectors where that shape holds, else held in registers or looped
// over element by element; only the looped vector rows fold an online pair.
Plan CudaKernelWriter::plan_row_kernel() {
  VectorRows rows;
  if (vector_loop_shape(&rows)) return plan_vector_rows(rows);
  if (L_.has_online_pairs()) return CudaKernelWriter(s_, k_, without_online()).plan_row_kernel();
  return plan_row_reduction();
}

// What a kernel of rows starts with: the rows and their length (`rnumel`), this thread's place
// among the rows of its block where a block holds several (a warp or a few lanes a row), and
// else the shared memory of the block reductions.
void CudaKernelWriter::plan_row_start(Body& body, const std::string& rnumel) const {
  Stmt counts = index_let("rows", product(k_.space, L_.kept_dims()), false);
  counts.body.push_back(index_let("rnumel", rnumel, false));
  body.push_back(counts);
  if (warp_rows_ == 1) {
    body.push_back(shared("smem", DType::Float64, {32}, "block reductions: one value per warp"));
    return;
  }
  Stmt thread = statement(Stmt::Kind::RowThread);
  thread.width = row_lanes_;
  thread.block_rows = warp_rows_;
  body.push_back(thread);
}

// The loop over the rows a thread takes in turn. Several rows a warp: the loop runs over the
// warp's rows together (every lane stays for the shuffles), and a lane past the last row
// computes the last row again (its stores write the values already there).
Stmt CudaKernelWriter::plan_row_loop(bool int32) const {
  if (warp_rows_ > 1 && row_lanes_ < 32) {
    const std::string I = int32 ? "int" : "int64_t";
    Stmt rows = range(RangeKind::RowStride, "r_warp", "first_row", "rows",
                      {index_let("r", I + "(r_warp + sub_row < rows ? r_warp + sub_row : rows - 1)", int32)});
    rows.step = "row_step";
    return rows;
  }
  Stmt rows = range(RangeKind::RowStride, "r", first_row_, "rows", {});
  rows.step = row_step_;
  rows.int32 = int32;
  return rows;
}

std::vector<CudaKernelWriter::RowLoad> CudaKernelWriter::row_loads(const RowPlan& plan) {  // in the order first read
  std::set<int64_t> red(L_.red_dims().begin(), L_.red_dims().end());
  std::vector<RowLoad> loads;
  std::map<LoadKey, size_t> at;
  for (int pass = 0; pass <= L_.phases(); pass++)
    for (const ExprPtr& e : pass_exprs(plan, pass))
      for_each_load(e, [&](const Expr& load) {
        bool along_row = false;
        for (const IndexTerm& t : load.index.terms) along_row = along_row || red.count(t.dim);
        if (!along_row) return;
        auto [it, fresh] = at.emplace(load_key(load), loads.size());
        if (fresh) loads.push_back({load, {}});
        loads[it->second].passes.insert(pass);
      });
  return loads;
}

// Whether each load runs with unit stride along the row and static strides elsewhere, each
// a multiple of V: every row's run then starts V-aligned where the pointer is.
bool CudaKernelWriter::runs_in_vectors(const std::vector<const RowLoad*>& loads, int V) const {
  std::set<int64_t> red(L_.red_dims().begin(), L_.red_dims().end());
  for (const RowLoad* l : loads)
    for (const IndexTerm& t : l->load.index.terms)
      if (t.axis >= 0 || (red.count(t.dim) ? t.stride != 1 : t.stride % V != 0)) return false;
  return true;
}

CudaKernelWriter::PersistentRow CudaKernelWriter::plan_persistent_row(const RowPlan& plan) {
  PersistentRow row;
  const int64_t R = L_.static_extent(L_.red_dims());
  row.threads = cuda_reduction_threads(R, layout_);
  const int T = row.threads;
  if (!persistent_rows()) return row;
  row.per_thread = (int)((R + T - 1) / T);
  // lean rows keep in registers only what two passes read; the others read memory in their pass
  std::vector<RowLoad> loads = row_loads(plan);
  std::vector<const RowLoad*> kept;
  size_t widest = 1;
  for (const RowLoad& l : loads) {
    if (l.padded() || (layout_.lean_rows && l.passes.size() < 2)) continue;
    row.kept[load_key(l.load)] = {l.load, "k" + std::to_string(row.kept.size())};
    kept.push_back(&l);
    widest = std::max(widest, (size_t)itemsize(l.load.dtype));
  }
  const int RV = (int)(16 / widest);
  bool vectors = layout_.vector_rows && L_.red_dims().size() == 1 && !kept.empty() && RV > 1 && R % RV == 0;
  row.vector = vectors && runs_in_vectors(kept, RV) ? RV : 1;
  row.per_thread = (row.per_thread + row.vector - 1) / row.vector * row.vector;
  return row;
}

// The rest of an element's iteration skipped past the row's end (the last thread's last run).
static Stmt past_row_end() {
  Stmt skip = statement(Stmt::Kind::Continue);
  skip.guard = "j >= rnumel";
  return skip;
}

// The loop over a thread's elements of the row: the `per_thread` of a persistent row, unrolled
// (element u at j; with vector rows in runs of `vector`), or the row strided by its threads.
Stmt CudaKernelWriter::each_row_element(const PersistentRow& row, bool int32) const {
  if (!row.per_thread) {
    Stmt strided = range(RangeKind::BlockStride, "j", lane_, "rnumel", {});
    strided.step = row_threads_;
    return strided;
  }
  const std::string T = std::to_string(row.threads) + (int32 ? "" : "LL"), V = std::to_string(row.vector);
  const std::string j = row.vector > 1 ? "(" + lane_ + " + u / " + V + " * " + T + ") * " + V + " + u % " + V
                                       : lane_ + " + u * " + T;
  Stmt elements = range(RangeKind::Unrolled, "u", "0", std::to_string(row.per_thread),
                        {index_let("j", j, int32), past_row_end()});
  elements.int32 = true;
  return elements;
}

// The loop over a thread's runs of `vector` elements of a persistent row, unrolled (run v from
// j), the index split.
Stmt CudaKernelWriter::each_row_vector(const PersistentRow& row, bool int32) const {
  const std::string V = std::to_string(row.vector);
  const std::string j = "(" + lane_ + " + v * " + std::to_string(row.threads) + (int32 ? "" : "LL") + ") * " + V;
  Stmt runs = range(RangeKind::Unrolled, "v", "0", std::to_string(row.per_thread / row.vector),
                    {index_let("j", j, int32), past_row_end(), unflatten_index("j", L_.red_dims(), int32)});
  runs.int32 = true;
  return runs;
}

// <dtype> <name>[per_thread]: a register array, an element a thread's element of the row.
static Stmt row_registers(std::string name, DType dtype, int per_thread, std::string note = "") {
  Stmt registers = statement(Stmt::Kind::Registers, std::move(name), std::move(note));
  registers.dtype = dtype;
  registers.lanes = std::to_string(per_thread);
  return registers;
}

// The lanes of a Vec, unrolled, one statement on the loop's line.
static Stmt each_lane_of(int V, Stmt s) {
  Stmt lanes = range(RangeKind::Unrolled, "l", "0", std::to_string(V), {std::move(s)});
  lanes.int32 = lanes.compact = true;
  return lanes;
}

// The register arrays of a persistent row, filled: in vectors where every kept load's start is
// aligned (checked at run time), else element by element.
void CudaKernelWriter::plan_row_reads(Body& body, const PersistentRow& row, bool int32) {
  const int V = row.vector;
  Stmt scalar = each_row_element(row, int32);
  scalar.body.push_back(unflatten_index("j", L_.red_dims(), int32));
  Stmt runs = each_row_vector(row, int32);
  Stmt in_vectors = statement(Stmt::Kind::If, "", "the row in " + std::to_string(V) + "-element vectors");
  in_vectors.width = V;
  for (auto& [key, k] : row.kept) {
    const ExprPtr load = std::make_shared<const Expr>(k.load);
    Stmt kept = row_registers(k.name, k.load.dtype, row.per_thread);
    kept.value = load;  // its comment names the element
    body.push_back(kept);
    scalar.body.push_back(assign(k.name + "[u]", load));
    Stmt read = vector_load(k.name + "v", k.load.dtype, k.load.buffer, "", std::to_string(V));
    read.value = load;
    runs.body.push_back(read);
    const std::string element = k.name + "[v * " + std::to_string(V) + " + l]";
    runs.body.push_back(each_lane_of(V, assign(element, local(k.name + "v.v[l]", k.load.dtype))));
    in_vectors.aligned.push_back({k.load.buffer, k.load.dtype});
  }
  if (V == 1) {
    body.push_back(scalar);
    return;
  }
  in_vectors.body = {runs};
  in_vectors.orelse = {scalar};
  body.push_back(in_vectors);
}

// The maxes of the online pairs among `reds` (LoopKernel::online_max).
std::set<int> CudaKernelWriter::running_maxes(const std::vector<int>& reds) const {
  std::set<int> maxes;
  for (int id : reds)
    if (int m = L_.online_max(id); m >= 0) maxes.insert(m);
  return maxes;
}

// Each reduction's accumulators combined over the row's threads (a block's, through smem; a
// warp's or a few lanes', with shuffles; a thread's alone, nothing), and its row value r<id> (a
// mean divided by the row's length).
// An online pair's max is reduced first (it comes first in program order), its thread's
// value kept as m<id>; the pair's sum is rescaled from it to the block's max before its own
// block reduction.
void CudaKernelWriter::plan_block_reductions(Body& body, const std::vector<int>& reds, std::set<int>* done) {
  const std::set<int> running = running_maxes(reds);
  for (int id : reds) {
    const std::string N = std::to_string(id), acc = "acc" + N;
    if (running.count(id)) {
      Stmt thread_max = as_accumulator(statement(Stmt::Kind::Let, "m" + N, "this thread's max"), id);
      thread_max.value = local(acc, thread_max.dtype);
      body.push_back(thread_max);
    }
    if (int m = L_.online_max(id); m >= 0) {  // then NaN where the max is -inf, as eager's exp(x - max)
      const std::string M = std::to_string(m);
      Stmt scale = as_accumulator(statement(Stmt::Kind::OnlineScale, acc), id);
      scale.text = "m" + M;
      scale.to = "acc" + M;
      body.push_back(scale);
      Stmt finish = as_accumulator(statement(Stmt::Kind::OnlineFinish, acc), id);
      finish.text = "acc" + M;
      body.push_back(finish);
    }
    if (warp_rows_ > 1 && row_lanes_ == 1) {
      body.push_back(comment("a thread per row: nothing to combine"));
    } else if (warp_rows_ > 1) {
      Stmt lanes = as_accumulator(statement(Stmt::Kind::ThreadReduce, acc), id);
      lanes.scope = ThreadScope::Warp;
      lanes.width = row_lanes_;
      body.push_back(lanes);
    } else {
      body.push_back(block_reduce(id));
    }
    body.push_back(result(id, acc));
    done->insert(id);
  }
}

// A block (or a warp, or a few lanes) per row. Each phase: the row's threads stride over the
// row, computing the full values the phase needs (a value needed again by a later phase is
// computed again, or, lean, kept in a register array s<id>) and folding them into per-thread
// accumulators, then one reduction over the row's threads per accumulator; the row values that
// became ready are computed by every thread.
Plan CudaKernelWriter::plan_row_reduction() {
  // lean persistent rows: 32-bit indices where every offset fits, and a transcendental value a
  // later pass needs again kept in a register array of the row (one array's worth at most)
  const bool lean = layout_.lean_rows && persistent_rows();
  const bool int32 = lean && fits_int32();
  const RowPlan rows = L_.plan_rows(lean ? L_.static_extent(L_.red_dims()) * 4 : 0);
  const PersistentRow row = plan_persistent_row(rows);
  Plan plan;
  plan.shape = row.per_thread ? "persistent rows" : "looped rows";
  plan_row_start(plan.body, product(k_.space, L_.red_dims()));
  Stmt each_row = plan_row_loop(int32);
  Body& body = each_row.body;
  body.push_back(unflatten_index("r", L_.kept_dims(), int32));
  for (int id : rows.scratch)
    body.push_back(row_registers("s" + std::to_string(id), g_.nodes[id].meta.dtype, row.per_thread,
                                 g_.nodes[id].name + ", computed once for the passes after"));
  if (row.per_thread) plan_row_reads(body, row, int32);
  std::set<int> done;
  plan_unreduced_row_values(body, &done);
  for (int p = 0; p <= L_.phases(); p++) {
    plan_row_phase(body, rows, row, p, int32, &done);
    plan_ready_row_values(body, &done);
  }
  plan_row_value_stores(body);
  plan.body.push_back(each_row);
  return plan;
}

// Phase p of the rows: its accumulators, the pass over the row (the kept loads read from their
// registers), the stores in vectors after it where the row is stored so, and the reductions.
void CudaKernelWriter::plan_row_phase(Body& body, const RowPlan& plan, const PersistentRow& row, int p, bool int32,
                                      std::set<int>* done) {
  std::vector<int> reds, stores;
  L_.phase_targets(p, &reds, &stores);
  if (reds.empty() && stores.empty()) return;
  const Locals registers = row.locals();  // each pass reads the kept loads from the registers
  // a row stored in vectors (the row the kernel's innermost dim, read in vectors too): each
  // element to a register array w<id>, then one Vec store per run
  const bool vector_stores = row.vector > 1 && L_.red_dims().back() == rank_ - 1;
  for (int id : reds) body.push_back(accumulator(id, false));
  if (vector_stores)
    for (int id : stores)
      body.push_back(row_registers("w" + std::to_string(id), g_.nodes[id].meta.dtype, row.per_thread));
  Stmt pass = each_row_element(row, int32);
  Body& each = pass.body;
  each.push_back(unflatten_index("j", L_.red_dims(), row.per_thread && int32));
  for (int id : plan.read[p])
    each.push_back(let("t" + std::to_string(id), g_.nodes[id].meta.dtype,
                       local("s" + std::to_string(id) + "[u]", g_.nodes[id].meta.dtype)));
  for (int id : k_.nodes) {
    if (!plan.compute[p].count(id)) continue;
    const DType dtype = g_.nodes[id].meta.dtype;
    each.push_back(let("t" + std::to_string(id), dtype, registers.apply(L_.expr(id, false))));
    if (plan.scratch.count(id)) each.push_back(assign("s" + std::to_string(id) + "[u]", temp(id, dtype, false)));
  }
  for (int id : reds) each.push_back(fold(id, registers.apply(L_.reduction_input(id))));
  for (int id : stores) {
    const ExprPtr value = temp(id, g_.nodes[id].meta.dtype, false);
    each.push_back(vector_stores ? assign("w" + std::to_string(id) + "[u]", value)
                                 : store(L_.buffer_of_store(id), linear_full(), value));
  }
  body.push_back(pass);
  if (vector_stores && !stores.empty()) plan_vector_row_stores(body, row, stores, int32);
  plan_block_reductions(body, reds, done);
}

Locals CudaKernelWriter::PersistentRow::locals() const {
  Locals registers;
  for (auto& [key, k] : kept) registers.loads[key] = k.name + "[u]";
  return registers;
}

// A row stored in vectors: each store's register array w<id> (a thread's U elements), one Vec
// store per run of V where the output is aligned, element by element where it is not.
void CudaKernelWriter::plan_vector_row_stores(Body& body, const PersistentRow& row, const std::vector<int>& stores,
                                              bool int32) {
  const int V = row.vector;
  Stmt runs = each_row_vector(row, int32);
  for (int id : stores) {
    const DType dtype = g_.nodes[id].meta.dtype;
    const std::string w = "w" + std::to_string(id);
    runs.body.push_back(declare_vector(w + "v", dtype, std::to_string(V)));
    const std::string element = w + "[v * " + std::to_string(V) + " + l]";
    runs.body.push_back(each_lane_of(V, vector_lane(w + "v", "l", local(element, dtype))));
    Stmt run = vector_store(w + "v", dtype, L_.buffer_of_store(id), linear_full(), std::to_string(V));
    run.at_element = run.checked = true;
    runs.body.push_back(run);
  }
  body.push_back(runs);
}

// The row values the kernel stores (a reduction's result, or a value of them), by the row's
// first thread.
void CudaKernelWriter::plan_row_value_stores(Body& body) {
  Stmt first = statement(Stmt::Kind::If);
  first.text = lane_ + " == 0";
  for (int id : k_.stores)
    if (!L_.is_full(id))
      first.body.push_back(store(L_.buffer_of_store(id), linear_index(k_.space, L_.kept_dims()),
                                 temp(id, g_.nodes[id].meta.dtype, true)));
  if (!first.body.empty()) body.push_back(first);
}

// Whether the kernel is of the looped vector rows' shape (the layout's, the row the
// innermost dim, static, whole vectors, every load along it contiguous); its plan in *rows.
bool CudaKernelWriter::vector_loop_shape(VectorRows* rows) {
  *rows = VectorRows();
  if (!layout_.vector_loop_rows || L_.red_dims().size() != 1 || L_.red_dims()[0] != rank_ - 1) return false;
  const int64_t R = L_.static_extent(L_.red_dims());
  if (R <= 0) return false;
  rows->plan = L_.plan_rows(0);
  rows->loads = row_loads(rows->plan);
  std::vector<const RowLoad*> all;
  size_t widest = 1;
  for (const RowLoad& l : rows->loads) {
    if (l.padded()) return false;  // read in vectors, a padded load would not be masked
    all.push_back(&l);
    rows->names[load_key(l.load)] = "k" + std::to_string(rows->names.size());
    widest = std::max(widest, (size_t)itemsize(l.load.dtype));
  }
  for (int id : k_.stores)
    if (L_.is_full(id)) widest = std::max(widest, (size_t)itemsize(g_.nodes[id].meta.dtype));
  rows->V = (int)(16 / widest);
  return rows->V >= 2 && R % rows->V == 0 && runs_in_vectors(all, rows->V);
}

// Looped rows in vectors (layout 7 on: the shape of Inductor's looped `triton_red_` kernels).
// Each pass strides the block's threads over the row V elements at a time: one Vec load per
// load along the row, the lanes unrolled, one Vec store per stored value; every pass reads
// the row from memory again (L2 holds a block's row between its passes), and registers stay
// few, so that a full SM of threads keeps loads in flight. Every pointer is aligned to its Vec
// (cuda_assumes_aligned: the runtime copies a misaligned input first), so there is no
// element-by-element path: its second copy of the pass's expressions cost softmax a quarter of
// its NVRTC time (notes/perf.md). With unrolled passes (layout 9) the block is
// the one compiled for, and a pass whose vectors divide evenly among its threads is a loop of
// constant trip count, unrolled, so that a thread's loads of several vectors are in flight at
// once. An online softmax pair (LoopKernel::online_max; layout 8 on) folds in one pass: the
// max's running value m<id> over a vector's lanes, the sum rescaled once a vector by
// mini::online_scale when it rises, and the threads' sums rescaled to the block's max before
// their block reduction.
Plan CudaKernelWriter::plan_vector_rows(const VectorRows& rows) {
  Plan plan;
  plan.shape = "vector rows";
  const bool int32 = fits_int32();
  plan_row_start(plan.body, std::to_string(L_.static_extent(L_.red_dims())));
  Stmt each_row = plan_row_loop(int32);
  each_row.body.push_back(unflatten_index("r", L_.kept_dims(), int32));
  std::set<int> done;
  plan_ready_row_values(each_row.body, &done);
  bool reread = false;  // a pass before this one loaded from the row
  for (int p = 0; p <= L_.phases(); p++) plan_vector_rows_pass(each_row.body, rows, p, &reread, &done);
  plan_row_value_stores(each_row.body);
  plan.body.push_back(each_row);
  return plan;
}

// The lanes of the vector at j0, unrolled, each lane's index split (j = j0 + l).
static Stmt each_lane(int V, const std::vector<int64_t>& red_dims, bool int32) {
  Stmt lanes = range(RangeKind::Unrolled, "l", "0", std::to_string(V),
                     {index_let("j", "j0 + l", int32), unflatten_index("j", red_dims, int32)});
  lanes.int32 = true;
  return lanes;
}

// Pass p of the looped vector rows: its accumulators, the row read again where an earlier pass
// read it, the loop over the row's vectors (the Vec loads, the running maxes, the lanes' values
// and folds, the Vec stores), then the reductions and the row values they make ready.
void CudaKernelWriter::plan_vector_rows_pass(Body& body, const VectorRows& rows, int p, bool* reread,
                                             std::set<int>* done) {
  std::vector<int> reds, stores;
  L_.phase_targets(p, &reds, &stores);
  if (reds.empty() && stores.empty()) return;
  const int V = rows.V;
  const bool int32 = fits_int32();
  const std::set<int> running = running_maxes(reds);
  for (int id : reds) body.push_back(accumulator(id, false));
  // each load along the row from its Vec's lane; a running max, -inf while every element so
  // far is -inf, read as 0
  Locals lanes;
  for (auto& [key, name] : rows.names) lanes.loads[key] = name + ".v[l]";
  for (int m : running) lanes.row_values[m] = "mini::online_shift(m" + std::to_string(m) + ")";
  bool reads = false;
  for (const RowLoad& l : rows.loads) reads = reads || l.passes.count(p);
  if (*reread && reads) plan_reread(body, rows.loads, p);
  *reread = *reread || reads;
  Stmt pass = vector_pass_loop(rows, p, int32);
  pass.body.push_back(index_let("j0", "jv * " + std::to_string(V), int32));
  plan_vector_pass_loads(pass.body, rows, p, int32);
  for (int id : stores)
    pass.body.push_back(declare_vector("w" + std::to_string(id), g_.nodes[id].meta.dtype, std::to_string(V)));
  plan_running_maxes(pass.body, reds, running, V, int32, lanes);
  Stmt lane = each_lane(V, L_.red_dims(), int32);
  plan_lane_fold(lane.body, rows.plan.compute[p], reds, running, stores, lanes);
  pass.body.push_back(lane);
  if (!stores.empty()) {
    Body at_j0 = {unflatten_index("j0", L_.red_dims(), int32)};
    for (int id : stores) {
      at_j0.push_back(vector_store("w" + std::to_string(id), g_.nodes[id].meta.dtype, L_.buffer_of_store(id),
                                   linear_full(), std::to_string(V)));
      at_j0.back().at_element = true;
    }
    pass.body.push_back(scope(at_j0));
  }
  body.push_back(pass);
  plan_block_reductions(body, reds, done);
  plan_ready_row_values(body, done);
}

// The loop of pass p over the row's vectors (jv: a vector's number): unrolled where the
// vectors divide evenly among the row's threads (layout 9 on), else strided by them.
Stmt CudaKernelWriter::vector_pass_loop(const VectorRows& rows, int p, bool int32) {
  const int V = rows.V;
  const int64_t R = L_.static_extent(L_.red_dims());
  const int T = cuda_reduction_threads(R, layout_);  // a row's (the block has warp_rows_ rows)
  const int64_t vectors = R / V, trips = (vectors + T - 1) / T;
  if (layout_.unroll_rows < 0 || vectors % T != 0) {
    Stmt strided = range(RangeKind::BlockStride, "jv", lane_, "rnumel / " + std::to_string(V), {});
    strided.step = row_threads_;
    strided.int32 = int32;
    return strided;
  }
  const int by = row_unroll(rows.plan, p, trips, V);
  Stmt unrolled = range(RangeKind::Unrolled, "it", "0", std::to_string(trips),
                        {index_let("jv", lane_ + " + it * " + std::to_string(T), int32)});
  unrolled.int32 = true;
  unrolled.unroll = by && by < trips ? by : 0;
  unrolled.note = std::to_string(vectors) + " vectors, " + std::to_string(T) + " threads";
  return unrolled;
}

// A pass that reads the row again. Unrolled, every pass is straight-line code, and the
// compiler keeps the first pass's loads in registers for this one (the input is const
// __restrict__): layer norm's three passes of 8 vectors spilled 168 bytes a thread under
// __launch_bounds__ and ran 3x slower (0.42 against 0.14 ms on the H200). An empty asm that
// "changes" each pointer pass p reads hides from the optimizer that its addresses are the
// earlier pass's, so the pass loads again (from L1/L2). The pointers, not the index: a zero
// added to the index cost layer norm address registers (12 bytes of spill a thread, 0.144 ms
// against 0.136 with the pointers hidden; H200, 2026-12-02, labs/bench/cuda_kernel_variants.py).
void CudaKernelWriter::plan_reread(Body& body, const std::vector<RowLoad>& loads, int p) {
  std::set<int> hidden;  // buffers
  for (const RowLoad& l : loads)
    if (l.passes.count(p) && *l.passes.begin() < p && hidden.insert(l.load.buffer).second) {
      Stmt again = statement(Stmt::Kind::Reread, "", "read the row again, not kept");
      again.buffer = l.load.buffer;
      body.push_back(again);
    }
}

// How far pass p's loop of `trips` is unrolled (0: all of it). NVRTC's time grows with the
// inlined copies of the math: each unrolled iteration holds V lanes of every transcendental of
// the pass. At most kUnrolledTranscendentals copies: softmax's passes (an exp a lane) unroll by
// 2, layer norm's (none) fully; the full unroll took softmax's compile to 0.2 s, by 2 0.12 s,
// at the same speed (notes/perf.md).
int CudaKernelWriter::row_unroll(const RowPlan& plan, int p, int64_t trips, int V) const {
  int by = layout_.unroll_rows ? layout_.unroll_rows : trips > 8 ? 4 : 0;
  int heavy = 0;
  for (int id : k_.nodes) heavy += plan.compute[p].count(id) && CStyle::calls_math(*L_.expr(id, false));
  if (heavy) {
    int most = std::max(1, kUnrolledTranscendentals / (V * heavy)), eff = by ? by : (int)trips;
    while (eff > most) eff /= 2;
    by = std::max(1, eff) == trips ? 0 : std::max(1, eff);
  }
  return by;
}

// Each load pass p reads along the row, one Vec of V from the vector at j0 (named in rows.names).
void CudaKernelWriter::plan_vector_pass_loads(Body& body, const VectorRows& rows, int p, bool int32) {
  for (const RowLoad& l : rows.loads) {
    if (!l.passes.count(p)) continue;
    const std::string& name = rows.names.at(load_key(l.load));
    body.push_back(declare_vector(name, l.load.dtype, std::to_string(rows.V)));
    Stmt read = vector_load(name, l.load.dtype, l.load.buffer, "", std::to_string(rows.V));
    read.value = std::make_shared<const Expr>(l.load);
    read.assign = true;
    body.push_back(scope({unflatten_index("j0", L_.red_dims(), int32), read}));
  }
}

// An online pair's running max m<id> (its sum's exp reads it): the max over the vector's lanes
// first, then each sum rescaled once a vector to the new max, and the max kept.
void CudaKernelWriter::plan_running_maxes(Body& body, const std::vector<int>& reds, const std::set<int>& running,
                                          int V, bool int32, const Locals& lanes) {
  for (int id : running) {
    const std::string m = "m" + std::to_string(id);
    Stmt max = as_accumulator(statement(Stmt::Kind::Declare, m), id);
    max.value = local("acc" + std::to_string(id), max.dtype);
    body.push_back(max);
    Stmt lane = each_lane(V, L_.red_dims(), int32);
    for (int v : L_.full_values_for({id}))  // what the max reads
      lane.body.push_back(let("t" + std::to_string(v), g_.nodes[v].meta.dtype, lanes.apply(L_.expr(v, false))));
    lane.body.push_back(fold(id, lanes.apply(L_.reduction_input(id))));
    lane.body.back().name = m;
    body.push_back(lane);
  }
  for (int id : reds)
    if (int m = L_.online_max(id); m >= 0) {
      Stmt scale = as_accumulator(statement(Stmt::Kind::OnlineScale, "acc" + std::to_string(id)), id);
      scale.text = "acc" + std::to_string(m);
      scale.to = "m" + std::to_string(m);
      body.push_back(scale);
    }
  for (int id : running) {  // the running max kept
    Stmt keep = as_accumulator(assign("acc" + std::to_string(id), nullptr), id);
    keep.value = local("m" + std::to_string(id), keep.dtype);
    body.push_back(keep);
  }
}

// One lane's values of the pass (`compute`), folded into the accumulators of `reds` (not the
// running maxes, folded before) and written to the stores' Vec registers w<id>.
void CudaKernelWriter::plan_lane_fold(Body& body, const std::set<int>& compute, const std::vector<int>& reds,
                                      const std::set<int>& running, const std::vector<int>& stores,
                                      const Locals& lanes) {
  for (int id : k_.nodes)
    if (compute.count(id))
      body.push_back(let("t" + std::to_string(id), g_.nodes[id].meta.dtype, lanes.apply(L_.expr(id, false))));
  for (int id : reds)
    if (!running.count(id)) body.push_back(fold(id, lanes.apply(L_.reduction_input(id))));
  for (int id : stores)
    body.push_back(vector_lane("w" + std::to_string(id), "l", temp(id, g_.nodes[id].meta.dtype, false)));
}

}  // namespace mini::codegen
