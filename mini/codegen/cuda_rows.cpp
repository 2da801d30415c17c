// cuda_rows.cpp — the CUDA writer's row reductions (cuda_writer.h): a block, a warp or a few
// lanes per row; each row held in registers ("per") or looped over, in 16-byte vectors from
// layout 7 on ("red"); block and warp reductions between the passes; the online softmax.
#include "codegen/cuda_writer.h"

#include <algorithm>

namespace mini::codegen {

// Rows shared out within a block: each thread's lane (its place in its row) and its warp's
// first row, defined at the kernel's top.
void CudaKernelWriter::define_warp_rows(std::ostringstream& o) const {
  if (warp_rows_ == 1) return;
  const int per_warp = 32 / row_lanes_;
  if (row_lanes_ == 32)
    o << "  // a warp per row: " << warp_rows_ << " rows a block, each warp its own (lane: the thread's place in it)\n";
  else if (row_lanes_ == 1)
    o << "  // a thread per row: " << warp_rows_ << " rows a block\n";
  else
    o << "  // " << row_lanes_ << " lanes per row: " << per_warp << " rows a warp, " << warp_rows_
      << " a block (lane: the thread's place in its row)\n";
  o << "  const int lane = " << (row_lanes_ == 1 ? std::string("0") : "threadIdx.x & " + std::to_string(row_lanes_ - 1)) << ";\n";
  o << "  const int64_t first_row = int64_t(blockIdx.x) * " << warp_rows_ << " + (threadIdx.x >> 5) * " << per_warp
    << ", row_step = int64_t(gridDim.x) * " << warp_rows_ << ";\n";
  if (per_warp > 1) o << "  const int sub_row = (threadIdx.x & 31) / " << row_lanes_ << ";  // this thread's row in its warp's\n";
}

// The loop over the rows a thread takes in turn. Several rows a warp: the loop runs over the
// warp's rows together (every lane stays for the shuffles), and a lane past the last row
// computes the last row again (its stores write the values already there).
std::string CudaKernelWriter::row_loop(const std::string& I) const {
  std::ostringstream o;
  if (warp_rows_ > 1 && row_lanes_ < 32) {
    o << "  for (int64_t r_warp = first_row; r_warp < rows; r_warp += row_step) {\n";
    o << "    const " << I << " r = " << I << "(r_warp + sub_row < rows ? r_warp + sub_row : rows - 1);\n";
  } else {
    o << "  for (" << I << " r = " << first_row_ << "; r < rows; r += " << row_step_ << ") {\n";
  }
  return o.str();
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

// The register arrays of a persistent row, filled: in vectors where every kept load's start is
// aligned (checked at run time), else element by element.
template <class Begin, class End>
void CudaKernelWriter::write_row_reads(std::ostringstream& o, const PersistentRow& row, const std::string& I,
                                       Begin pass_begin, End pass_end) {
  const std::string LL = I == "int" ? "" : "LL";
  const int T = row.threads, U = row.per_thread, V = row.vector;
  for (auto& [key, k] : row.kept)
    o << "    " << cuda_type(k.load.dtype) << " " << k.name << "[" << U << "];  // " << cs_.element(k.load)
      << " along the row\n";
  auto scalar_reads = [&](const std::string& pad) {
    pass_begin(pad);
    o << unflatten(k_.space, "j", L_.red_dims(), pad + "  ", I);
    for (auto& [key, k] : row.kept) o << pad << "  " << k.name << "[u] = " << cs_.element(k.load) << ";\n";
    pass_end(pad);
  };
  if (V == 1) {
    scalar_reads("    ");
    return;
  }
  o << "    if (true";
  for (auto& [key, k] : row.kept)
    o << " && mini::aligned<" << cuda_type(k.load.dtype) << ", " << V << ">(&in" << k.load.buffer << "[0])";
  o << ") {  // the row in " << V << "-element vectors\n";
  o << "      #pragma unroll\n      for (int v = 0; v < " << U / V << "; v++) {\n";
  o << "        const " << I << " j = (" << lane_ << " + v * " << T << LL << ") * " << V << ";\n";
  o << "        if (j >= rnumel) continue;\n";
  o << unflatten(k_.space, "j", L_.red_dims(), "        ", I);
  for (auto& [key, k] : row.kept) {
    std::string T0 = cuda_type(k.load.dtype);
    o << "        const mini::Vec<" << T0 << ", " << V << "> " << k.name << "v = *reinterpret_cast<const mini::Vec<" << T0
      << ", " << V << ">*>(&" << cs_.element(k.load) << ");\n";
    o << "        #pragma unroll\n        for (int l = 0; l < " << V << "; l++) " << k.name << "[v * " << V << " + l] = "
      << k.name << "v.v[l];\n";
  }
  o << "      }\n    } else {\n";
  scalar_reads("      ");
  o << "    }\n";
}

// The maxes of the online pairs among `reds` (LoopKernel::online_max).
std::set<int> CudaKernelWriter::running_maxes(const std::vector<int>& reds) const {
  std::set<int> maxes;
  for (int id : reds)
    if (int m = L_.online_max(id); m >= 0) maxes.insert(m);
  return maxes;
}

// Each reduction's accumulators combined over the block, and its row value r<id> (a mean
// divided by the row's length).
// An online pair's max is reduced first (it comes first in program order), its thread's
// value kept as m<id>; the pair's sum is rescaled from it to the block's max before its own
// block reduction.
void CudaKernelWriter::write_block_reductions(std::ostringstream& o, const std::vector<int>& reds, std::set<int>* done) {
  const std::set<int> running = running_maxes(reds);
  for (int id : reds) {
    const Node& n = g_.nodes[id];
    std::string A = acc_type(n), N = std::to_string(id);
    if (running.count(id)) o << "    const " << A << " m" << N << " = acc" << N << ";  // this thread's max\n";
    if (int m = L_.online_max(id); m >= 0) {  // then NaN where the max is -inf, as eager's exp(x - max)
      const std::string M = std::to_string(m);
      o << "    acc" << N << " *= mini::online_scale<" << A << ">(" << A << "(m" << M << "), " << A << "(acc" << M << "));\n";
      o << "    acc" << N << " = mini::online_finish<" << A << ">(acc" << N << ", " << A << "(acc" << M << "));\n";
    }
    if (warp_rows_ > 1 && row_lanes_ == 1)
      o << "    // a thread per row: nothing to combine\n";
    else if (warp_rows_ > 1)
      o << "    acc" << N << " = mini::warp_reduce<" << A << ", " << combine(n) << "<" << A << ">"
        << (row_lanes_ < 32 ? ", " + std::to_string(row_lanes_) : std::string()) << ">(acc" << N << ");\n";
    else
      o << "    acc" << N << " = mini::block_reduce<" << A << ", " << combine(n) << "<" << A << ">>(acc" << N
        << ", reinterpret_cast<" << A << "*>(smem));\n";
    std::string fin = "acc" + N;
    if (n.op == OpKind::Mean) fin = "(" + fin + " / double(rnumel))";
    o << "    const " << cuda_type(n.meta.dtype) << " r" << N << " = " << cuda_type(n.meta.dtype) << "(" << fin << ");\n";
    done->insert(id);
  }
}

// A block per row. Each phase: the block's threads stride over the row, computing the full
// values the phase needs (a value needed again by a later phase is computed again: no row
// scratch on the GPU yet) and folding them into per-thread accumulators, then one block
// reduction per accumulator; the row values that became ready are computed by every thread.
void CudaKernelWriter::write_reduction(std::ostringstream& o) {
  o << "  const int64_t rows = " << product(k_.space, L_.kept_dims())
    << ", rnumel = " << product(k_.space, L_.red_dims()) << ";\n";
  define_warp_rows(o);
  if (warp_rows_ == 1) o << "  __shared__ double smem[32];  // block reductions: one value per warp\n";
  // lean persistent rows: 32-bit indices where every offset fits, and a transcendental value a
  // later pass needs again kept in a register array of the row (one array's worth at most)
  const bool lean = layout_.lean_rows && persistent_rows();
  const std::string I = lean && fits_int32() ? "int" : "int64_t", LL = I == "int" ? "" : "LL";
  o << row_loop(I);
  o << unflatten(k_.space, "r", L_.kept_dims(), "    ", I);
  RowPlan plan = L_.plan_rows(lean ? L_.static_extent(L_.red_dims()) * 4 : 0);
  const PersistentRow row = plan_persistent_row(plan);
  const int T = row.threads, U = row.per_thread, V = row.vector;
  for (int id : plan.scratch)
    o << "    " << cuda_type(g_.nodes[id].meta.dtype) << " s" << id << "[" << U << "];  // " << g_.nodes[id].name
      << ", computed once for the passes after\n";
  auto pass_begin = [&](const std::string& pad) {
    if (U) {
      o << pad << "#pragma unroll\n" << pad << "for (int u = 0; u < " << U << "; u++) {\n";
      if (V > 1) o << pad << "  const " << I << " j = (" << lane_ << " + u / " << V << " * " << T << LL << ") * " << V << " + u % " << V << ";\n";
      else o << pad << "  const " << I << " j = " << lane_ << " + u * " << T << LL << ";\n";
      o << pad << "  if (j >= rnumel) continue;\n";
    } else {
      o << pad << "for (int64_t j = " << lane_ << "; j < rnumel; j += " << row_threads_ << ") {\n";
    }
  };
  auto pass_end = [&](const std::string& pad) { o << pad << "}\n"; };
  if (U) write_row_reads(o, row, I, pass_begin, pass_end);
  const Locals registers = row.locals();  // each pass reads the kept loads from the registers
  std::set<int> done;
  define_unreduced_row_values(o, "    ", &done);
  for (int p = 0; p <= L_.phases(); p++) {
    std::vector<int> reds, stores;
    L_.phase_targets(p, &reds, &stores);
    if (!reds.empty() || !stores.empty()) {
      for (int id : reds) {
        const Node& n = g_.nodes[id];
        std::string A = acc_type(n);
        o << "    " << A << " acc" << id << " = " << identity(n, A) << ";\n";
      }
      if (V > 1 && L_.red_dims().back() == rank_ - 1)
        for (int id : stores) o << "    " << cuda_type(g_.nodes[id].meta.dtype) << " w" << id << "[" << U << "];\n";
      pass_begin("    ");
      o << unflatten(k_.space, "j", L_.red_dims(), "      ", U ? I : "int64_t");
      for (int id : plan.read[p]) o << "      const " << cuda_type(g_.nodes[id].meta.dtype) << " t" << id << " = s" << id << "[u];\n";
      for (int id : k_.nodes) {
        if (!plan.compute[p].count(id)) continue;
        o << define("      ", 't', id, false, registers);
        if (plan.scratch.count(id)) o << "      s" << id << "[u] = t" << id << ";\n";
      }
      for (int id : reds) {
        const Node& n = g_.nodes[id];
        std::string A = acc_type(n);
        o << "      acc" << id << " = " << combine(n) << "<" << A << ">(acc" << id << ", " << A << "("
          << spell(L_.reduction_input(id), registers) << "));\n";
      }
      // a row stored in vectors (the row the kernel's innermost dim, read in vectors too):
      // each element to a register array, then one Vec store per run
      const bool vector_stores = V > 1 && L_.red_dims().back() == rank_ - 1;
      if (vector_stores) {
        for (int id : stores) o << "      w" << id << "[u] = t" << id << ";\n";
      } else {
        for (int id : stores) o << "      " << out(id) << "[" << linear_full() << "] = t" << id << ";\n";
      }
      pass_end("    ");
      if (vector_stores && !stores.empty()) write_vector_row_stores(o, row, stores, I);
      write_block_reductions(o, reds, &done);
    }
    define_ready_row_values(o, "    ", &done);
  }
  write_row_value_stores(o);
  o << "  }\n";
}

Locals CudaKernelWriter::PersistentRow::locals() const {
  Locals registers;
  for (auto& [key, k] : kept) registers.loads[key] = k.name + "[u]";
  return registers;
}

// A row stored in vectors: each store's register array w<id> (a thread's U elements), one Vec
// store per run of V where the output is aligned, element by element where it is not.
void CudaKernelWriter::write_vector_row_stores(std::ostringstream& o, const PersistentRow& row,
                                               const std::vector<int>& stores, const std::string& I) {
  const int T = row.threads, U = row.per_thread, V = row.vector;
  const std::string LL = I == "int" ? "" : "LL";
  o << "    #pragma unroll\n    for (int v = 0; v < " << U / V << "; v++) {\n";
  o << "      const " << I << " j = (" << lane_ << " + v * " << T << LL << ") * " << V << ";\n";
  o << "      if (j >= rnumel) continue;\n";
  o << unflatten(k_.space, "j", L_.red_dims(), "      ", I);
  for (int id : stores) {
    std::string T0 = cuda_type(g_.nodes[id].meta.dtype), vec = "mini::Vec<" + T0 + ", " + std::to_string(V) + ">";
    o << "      " << vec << " w" << id << "v;\n";
    o << "      #pragma unroll\n      for (int l = 0; l < " << V << "; l++) w" << id << "v.v[l] = w" << id << "[v * " << V
      << " + l];\n";
    o << "      if (mini::aligned<" << T0 << ", " << V << ">(" << out(id) << ")) *reinterpret_cast<" << vec << "*>(&"
      << out(id) << "[" << linear_full() << "]) = w" << id << "v;\n";
    o << "      else\n        #pragma unroll\n        for (int l = 0; l < " << V << "; l++) (&" << out(id) << "["
      << linear_full() << "])[l] = w" << id << "v.v[l];\n";
  }
  o << "    }\n";
}

// The row values the kernel stores (a reduction's result, or a value of them), by the row's
// first thread.
void CudaKernelWriter::write_row_value_stores(std::ostringstream& o) {
  bool row_stores = false;
  for (int id : k_.stores) row_stores = row_stores || !L_.is_full(id);
  if (!row_stores) return;
  o << "    if (" << lane_ << " == 0) {\n";
  for (int id : k_.stores)
    if (!L_.is_full(id)) o << "      " << out(id) << "[" << linear_index(k_.space, L_.kept_dims()) << "] = r" << id << ";\n";
  o << "    }\n";
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
void CudaKernelWriter::write_vector_loop_reduction(std::ostringstream& o, const VectorRows& rows) {
  const RowPlan& plan = rows.plan;
  const std::vector<RowLoad>& loads = rows.loads;
  const int V = rows.V;
  const int64_t R = L_.static_extent(L_.red_dims());
  const int T = cuda_reduction_threads(R, layout_);  // a row's (the block has warp_rows_ rows)
  const int64_t vectors = R / V, trips = (vectors + T - 1) / T;
  const bool unrolled = layout_.unroll_rows >= 0 && vectors % T == 0;

  const std::string I = fits_int32() ? "int" : "int64_t";
  o << "  const int64_t rows = " << product(k_.space, L_.kept_dims()) << ", rnumel = " << R << ";\n";
  define_warp_rows(o);
  if (warp_rows_ == 1) o << "  __shared__ double smem[32];  // block reductions: one value per warp\n";
  o << row_loop(I);
  o << unflatten(k_.space, "r", L_.kept_dims(), "    ", I);
  std::set<int> done;
  define_ready_row_values(o, "    ", &done);
  bool reread = false;  // a pass before this one loaded from the row
  for (int p = 0; p <= L_.phases(); p++) {
    std::vector<int> reds, stores;
    L_.phase_targets(p, &reds, &stores);
    if (reds.empty() && stores.empty()) continue;
    const std::set<int> running = running_maxes(reds);
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      std::string A = acc_type(n);
      o << "    " << A << " acc" << id << " = " << identity(n, A) << ";\n";
    }
    // each load along the row from its Vec's lane; a running max, -inf while every element so
    // far is -inf, read as 0
    Locals lanes;
    for (auto& [key, name] : rows.names) lanes.loads[key] = name + ".v[l]";
    for (int m : running) lanes.row_values[m] = "mini::online_shift(m" + std::to_string(m) + ")";
    bool reads = false;
    for (const RowLoad& l : loads) reads = reads || l.passes.count(p);
    const bool again = reread && reads;
    if (again) write_reread(o, loads, p);
    reread = reread || reads;
    if (unrolled) {
      const int by = row_unroll(plan, p, trips, V);
      o << "    #pragma unroll" << (by && by < trips ? " " + std::to_string(by) : std::string()) << "\n";
      o << "    for (int it = 0; it < " << trips << "; it++) {  // " << vectors << " vectors, " << T << " threads\n";
      o << "      const " << I << " jv = " << lane_ << " + it * " << T << ";\n";
    } else {
      o << "    for (" << I << " jv = " << lane_ << "; jv < rnumel / " << V << "; jv += " << row_threads_ << ") {\n";
    }
    o << "      const " << I << " j0 = jv * " << V << ";\n";
    write_vector_pass_loads(o, rows, p, I);
    for (int id : stores)
      o << "      mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", " << V << "> w" << id << ";\n";
    write_running_maxes(o, reds, running, V, I, lanes);
    o << "      #pragma unroll\n      for (int l = 0; l < " << V << "; l++) {\n";
    o << "        const " << I << " j = j0 + l;\n";
    o << unflatten(k_.space, "j", L_.red_dims(), "        ", I);
    write_lane_fold(o, "        ", plan.compute[p], reds, running, stores, lanes);
    o << "      }\n";
    if (!stores.empty()) {
      o << "      {\n" << unflatten(k_.space, "j0", L_.red_dims(), "        ", I);
      for (int id : stores)
        o << "        *reinterpret_cast<mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", " << V << ">*>(&" << out(id)
          << "[" << linear_full() << "]) = w" << id << ";\n";
      o << "      }\n";
    }
    o << "    }\n";
    write_block_reductions(o, reds, &done);
    define_ready_row_values(o, "    ", &done);
  }
  write_row_value_stores(o);
  o << "  }\n";
}

// A pass that reads the row again. Unrolled, every pass is straight-line code, and the
// compiler keeps the first pass's loads in registers for this one (the input is const
// __restrict__): layer norm's three passes of 8 vectors spilled 168 bytes a thread under
// __launch_bounds__ and ran 3x slower (0.42 against 0.14 ms on the H200). An empty asm that
// "changes" each pointer pass p reads hides from the optimizer that its addresses are the
// earlier pass's, so the pass loads again (from L1/L2). The pointers, not the index: a zero
// added to the index cost layer norm address registers (12 bytes of spill a thread, 0.144 ms
// against 0.136 with the pointers hidden; H200, 2026-12-02, labs/bench/cuda_kernel_variants.py).
void CudaKernelWriter::write_reread(std::ostringstream& o, const std::vector<RowLoad>& loads, int p) {
  std::set<int> hidden;  // buffers
  for (const RowLoad& l : loads)
    if (l.passes.count(p) && *l.passes.begin() < p && hidden.insert(l.load.buffer).second)
      o << "    asm volatile(\"\" : \"+l\"(in" << l.load.buffer << "));  // read the row again, not kept\n";
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
void CudaKernelWriter::write_vector_pass_loads(std::ostringstream& o, const VectorRows& rows, int p,
                                               const std::string& I) {
  for (const RowLoad& l : rows.loads) {
    if (!l.passes.count(p)) continue;
    const std::string& name = rows.names.at(load_key(l.load));
    std::string vec = "mini::Vec<" + cuda_type(l.load.dtype) + ", " + std::to_string(rows.V) + ">";
    o << "      " << vec << " " << name << ";\n";
    o << "      {\n" << unflatten(k_.space, "j0", L_.red_dims(), "        ", I);
    o << "        " << name << " = *reinterpret_cast<const " << vec << "*>(&" << cs_.element(l.load) << ");\n";
    o << "      }\n";
  }
}

// An online pair's running max m<id> (its sum's exp reads it): the max over the vector's lanes
// first, then each sum rescaled once a vector to the new max, and the max kept.
void CudaKernelWriter::write_running_maxes(std::ostringstream& o, const std::vector<int>& reds,
                                           const std::set<int>& running, int V, const std::string& I,
                                           const Locals& lanes) {
  for (int id : running) {
    std::string A = acc_type(g_.nodes[id]), m = "m" + std::to_string(id);
    o << "      " << A << " " << m << " = acc" << id << ";\n";
    o << "      #pragma unroll\n      for (int l = 0; l < " << V << "; l++) {\n";
    o << "        const " << I << " j = j0 + l;\n";
    o << unflatten(k_.space, "j", L_.red_dims(), "        ", I);
    for (int v : L_.full_values_for({id})) o << define("        ", 't', v, false, lanes);  // what the max reads
    o << "        " << m << " = " << combine(g_.nodes[id]) << "<" << A << ">(" << m << ", " << A << "("
      << spell(L_.reduction_input(id), lanes) << "));\n";
    o << "      }\n";
  }
  for (int id : reds)
    if (int m = L_.online_max(id); m >= 0) {
      std::string A = acc_type(g_.nodes[id]), M = std::to_string(m);
      o << "      acc" << id << " *= mini::online_scale<" << A << ">(" << A << "(acc" << M << "), " << A << "(m" << M
        << "));\n";
    }
  for (int id : running) o << "      acc" << id << " = m" << id << ";\n";
}

// One lane's values of the pass (`compute`), folded into the accumulators of `reds` (not the
// running maxes, folded before) and written to the stores' Vec registers w<id>.
void CudaKernelWriter::write_lane_fold(std::ostringstream& o, const std::string& pad, const std::set<int>& compute,
                                       const std::vector<int>& reds, const std::set<int>& running,
                                       const std::vector<int>& stores, const Locals& lanes) {
  for (int id : k_.nodes)
    if (compute.count(id)) o << define(pad, 't', id, false, lanes);
  for (int id : reds) {
    if (running.count(id)) continue;
    const Node& n = g_.nodes[id];
    std::string A = acc_type(n);
    o << pad << "acc" << id << " = " << combine(n) << "<" << A << ">(acc" << id << ", " << A << "("
      << spell(L_.reduction_input(id), lanes) << "));\n";
  }
  for (int id : stores) o << pad << "w" << id << ".v[l] = t" << id << ";\n";
}

}  // namespace mini::codegen
