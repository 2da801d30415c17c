// cuda_kernel.cpp — the CUDA renderer (cuda_kernel.h): the LoopKernel of each fused group as a
// __global__ function, spelled through c_style.h's tables (kCudaTarget). Every kernel shape is
// planned as statements (stmt.h) by the named planner of its file, which plan_cuda and write()
// choose alike; write() prints the kernel's signature and spells the plan (cuda_statements.cpp).
#include "codegen/cuda_kernel.h"

#include <algorithm>
#include <sstream>

#include "codegen/cpp_kernel.h"
#include "codegen/cuda_prelude_source.h"
#include "codegen/cuda_writer.h"

namespace mini::codegen {

namespace {

// What every generated CUDA source starts with. NVRTC compiles it without the C++ library:
// the types, then mini/tensor/scalar_math.h (sin, cos, sigmoid and gelu as eager mini and the
// C++ kernels compute them), then what only CUDA kernels need (cuda_prelude.cuh).
constexpr const char* kCudaPreludeTypes = R"(// ---- prelude: mini's CUDA kernels (mini/codegen/cuda_kernel.cpp) ----
typedef long long int64_t;
typedef unsigned int uint32_t;
typedef int int32_t;
)";

static_assert(kCudaMaxSymbols == 64 && kCudaMaxLoads == 16 && kCudaMaxRank == 8, "the prelude's mini::Sizes");

}  // namespace

CudaKernelWriter::CudaKernelWriter(const Schedule& s, const FusionGroup& k, const CudaLayout& layout)
    : L_(s, k, layout.online_softmax), s_(s), g_(s.graph), k_(k), cs_(kCudaTarget), rank_((int)k.space.size()),
      layout_(layout), warp_rows_(k.reduced.empty() ? 1 : cuda_rows_per_block(cuda_row_length(k), layout)),
      row_lanes_(k.reduced.empty() ? 0 : cuda_reduction_threads(cuda_row_length(k), layout)) {
  if (warp_rows_ > 1)
    lane_ = "lane", row_threads_ = std::to_string(row_lanes_), first_row_ = "first_row", row_step_ = "row_step";
}

// The row values (r<id>) that need no reduction of the row, as Lets in program order; each
// goes into *done.
void CudaKernelWriter::plan_unreduced_row_values(Body& body, std::set<int>* done) {
  for (int id : k_.nodes) {
    if (L_.is_full(id) || L_.is_reduction(id) || !L_.reductions_below(id).empty()) continue;
    body.push_back(let("r" + std::to_string(id), g_.nodes[id].meta.dtype, L_.expr(id, false)));
    done->insert(id);
  }
}

// The row values (r<id>) whose reductions are all in *done and that are not defined yet, as
// Lets in program order; each goes into *done.
void CudaKernelWriter::plan_ready_row_values(Body& body, std::set<int>* done) {
  for (int id : k_.nodes) {
    if (done->count(id) || L_.is_full(id) || L_.is_reduction(id)) continue;
    bool ready = true;
    for (int dep : L_.reductions_below(id)) ready = ready && done->count(dep);
    if (!ready) continue;
    body.push_back(let("r" + std::to_string(id), g_.nodes[id].meta.dtype, L_.expr(id, false)));
    done->insert(id);
  }
}

// Whether the kernel takes every pointer aligned to its Vec (cuda_assumes_aligned): the
// pointwise kernels in vectors and the looped vector rows, decided as write() decides.
bool CudaKernelWriter::assumes_aligned() {
  if (k_.reduced.empty()) return layout_.vector_pointwise;
  if (cuda_column_reduction(k_, layout_)) return column_vector() > 1;
  VectorRows rows;
  const bool looped = cuda_split_reductions(s_, k_, layout_) == 0 && vector_loop_shape(&rows);
  if (L_.has_online_pairs() && !looped) return CudaKernelWriter(s_, k_, without_online()).assumes_aligned();
  return looped;
}

std::string CudaKernelWriter::write() {
  // the kernel's shape, decided once: a full reduction in two stages, looped vector rows, or
  // the other row layouts
  const bool split = cuda_split_reductions(s_, k_, layout_) > 0;
  const bool columns = cuda_column_reduction(k_, layout_);
  const bool split_columns = columns && cuda_column_splits(s_, k_, layout_) > 0;
  VectorRows rows;
  const bool looped = !k_.reduced.empty() && !split && !columns && vector_loop_shape(&rows);
  if (L_.has_online_pairs() && !looped) return CudaKernelWriter(s_, k_, without_online()).write();
  std::ostringstream o;
  o << "// " << k_.name << ": graph nodes";
  for (int id : k_.nodes) o << " " << g_.nodes[id].name;
  o << "\n";
  for (int id : k_.nodes)
    if (!g_.nodes[id].code.empty()) { o << "//   " << g_.nodes[id].code << "\n"; break; }
  int threads = cuda_block(k_, layout_);
  o << "extern \"C\" __global__ void __launch_bounds__(" << threads;
  // lean persistent rows: at most row_max_registers a thread (65536 an SM), so that several
  // blocks of rows share an SM (while one waits at its block reduction, others' loads are in
  // flight)
  if (!k_.reduced.empty() && !columns && layout_.lean_rows && (persistent_rows() || layout_.vector_loop_rows))
    o << ", " << cuda_min_blocks_per_sm(threads, layout_);
  o << ") " << k_.name << "(";
  for (auto& [id, i] : L_.load_index())
    o << "const " << cuda_type(g_.nodes[id].meta.dtype) << "* __restrict__ in" << i << ", ";
  for (auto& [id, i] : L_.store_index())
    o << cuda_type(g_.nodes[id].meta.dtype) << "* __restrict__ out" << i << ", ";
  o << "mini::Sizes sizes";
  if (split || split_columns) o << ", unsigned long long* __restrict__ partials, unsigned* __restrict__ arrived";
  o << ") {\n";
  o << "  const int64_t* symbols = sizes.symbols;\n";
  o << "  const int64_t (*strides)[8] = sizes.strides;\n";
  o << "  (void)symbols; (void)strides;\n";
  o << spell_cuda(plan_shape(split, columns).body, cs_, k_.space, "  ");
  o << "}\n";
  return o.str();
}

// The kernel's statements, from the planner of its shape (as plan_cuda chooses it).
Plan CudaKernelWriter::plan_shape(bool split, bool columns) {
  if (k_.reduced.empty()) return plan_pointwise();
  if (split) return plan_split_reduction();
  if (columns) return column_vector() > 1 ? plan_vector_columns(column_vector()) : plan_column_reduction();
  return plan_row_kernel();
}

CudaLayout CudaKernelWriter::without_online() const {  // only the looped vector rows fold an online pair
  CudaLayout plain = layout_;
  plain.online_softmax = false;
  return plain;
}

ExprPtr Locals::apply(const ExprPtr& e) const {
  if (loads.empty() && row_values.empty()) return e;
  return substitute(e, [&](const Expr& node) -> ExprPtr {
    if (node.kind == Expr::Kind::Load) {
      auto it = loads.find(load_key(node));
      return it == loads.end() ? nullptr : local(it->second, node.dtype);
    }
    if (node.kind == Expr::Kind::Temp && node.row) {
      auto it = row_values.find(node.node);
      return it == row_values.end() ? nullptr : local(it->second, node.dtype);
    }
    return nullptr;
  });
}

// The expressions pass p of a row plan spells, in the order it spells them: the values it
// computes (in program order), then the reductions' inputs it folds.
std::vector<ExprPtr> CudaKernelWriter::pass_exprs(const RowPlan& plan, int p) const {
  std::vector<ExprPtr> exprs;
  std::vector<int> reds, stores;
  L_.phase_targets(p, &reds, &stores);
  for (int id : k_.nodes)
    if (plan.compute[p].count(id)) exprs.push_back(L_.expr(id, false));
  for (int id : reds) exprs.push_back(L_.reduction_input(id));
  return exprs;
}

int CudaKernelWriter::load_node(int buffer) const {
  for (auto& [id, b] : L_.load_index())
    if (b == buffer) return id;
  return -1;
}

// Every extent and stride static, and every element any load or store of the kernel can
// reach within 2^31 - 1 of its pointer: index arithmetic in int (cheaper division).
bool CudaKernelWriter::fits_int32() const {
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  int64_t numel = 1;
  for (int64_t s : k_.space) {
    if (s < 0) return false;
    numel *= s;
    if (numel > kMax) return false;
  }
  for (auto& [id, b] : L_.load_index()) {
    const graph::TensorMeta& m = g_.nodes[id].meta;
    int64_t reach = 0;
    for (size_t d = 0; d < m.sizes.size(); d++) {
      if (m.sizes[d] < 0 || m.strides[d] < 0) return false;
      if (m.sizes[d] > 0) reach += (m.sizes[d] - 1) * m.strides[d];
      if (reach > kMax) return false;
    }
  }
  return true;
}

// Whether load e reads consecutive elements along the innermost dim (a term over it of
// stride 1, every stride static and every other one a multiple of cv): a Vec of cv elements
// at an aligned address when the innermost index is a multiple of cv.
bool CudaKernelWriter::runs_along_innermost(const Expr& e, int cv) const {
  bool along = false;
  // a padded load (slice_backward) whose slice starts and ends on vector boundaries: each
  // thread's cv columns lie wholly inside it or wholly outside (then the Vec is zeros)
  if (e.index.pad_dim >= 0 && (e.index.pad_dim != rank_ - 1 || e.index.pad_lo % cv || e.index.pad_len % cv))
    return false;
  for (const IndexTerm& t : e.index.terms) {
    if (t.axis >= 0) return false;
    if (t.dim == rank_ - 1 && t.stride == 1) along = true;
    else if (t.stride % cv) return false;
  }
  return along;
}

std::string render_cuda(const Schedule& s, const CudaLayout& layout) {
  return render_cuda(s, std::vector<CudaLayout>(s.groups.size(), layout));
}

std::string render_cuda(const Schedule& s, const std::vector<CudaLayout>& layouts) {
  return join_cuda(render_cuda_kernels(s, layouts), layouts);
}

std::string cuda_prelude() {
  return kCudaPreludeTypes + scalar_math_prelude() + "\n" + kCudaPreludeSource + "// ---- end of prelude ----\n";
}

std::vector<std::string> render_cuda_kernels(const Schedule& s, const std::vector<CudaLayout>& layouts) {
  if (layouts.size() != s.groups.size()) fail("render_cuda: ", layouts.size(), " layouts for ", s.groups.size(), " kernels");
  std::vector<std::string> kernels;
  for (size_t i = 0; i < s.groups.size(); i++) kernels.push_back(CudaKernelWriter(s, s.groups[i], layouts[i]).write());
  return kernels;
}

std::string join_cuda(const std::vector<std::string>& kernels, const std::vector<CudaLayout>& layouts) {
  std::ostringstream o;
  o << "// Generated by mini's inductor (mini/codegen/cuda_kernel.cpp) for NVRTC. Do not edit.\n";
  bool uniform = std::all_of(layouts.begin(), layouts.end(), [&](const CudaLayout& l) { return l.number == layouts[0].number; });
  if (uniform && !layouts.empty() && layouts[0].number != kCudaDefaultLayout)
    o << "// Kernel layout " << layouts[0].number << " (MINI_CODEGEN_LAYOUT)\n";
  if (!uniform) {
    o << "// Kernel layouts (max-autotune's choice, kernel by kernel):";
    for (const auto& l : layouts) o << " " << l.number;
    o << "\n";
  }
  o << cuda_prelude();
  for (const std::string& k : kernels) o << "\n" << k;
  return o.str();
}

int cuda_column_vector(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  return cuda_column_reduction(k, layout) ? CudaKernelWriter(s, k, layout).column_vector() : 1;
}

Plan plan_cuda(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty()) return CudaKernelWriter(s, k, layout).plan_pointwise();
  // one row (every kept dim of extent 1), split over the blocks: refused before any layout is
  // decided where there is more than one row
  bool one_row = true;
  for (size_t d = 0; d < k.space.size(); d++)
    if (std::find(k.reduced.begin(), k.reduced.end(), (int64_t)d) == k.reduced.end() && k.space[d] != 1) one_row = false;
  if (one_row && cuda_split_reductions(s, k, layout) > 0) return CudaKernelWriter(s, k, layout).plan_split_reduction();
  // columns, one a thread or CV in vectors, as write() decides (more than one row: no split row)
  if (!one_row && cuda_column_reduction(k, layout)) {
    CudaKernelWriter writer(s, k, layout);
    const int CV = writer.column_vector();
    return CV > 1 ? writer.plan_vector_columns(CV) : writer.plan_column_reduction();
  }
  // rows: a block, a warp or a few lanes each, held in registers or looped over (in vectors)
  return CudaKernelWriter(s, k, layout).plan_row_kernel();
}

bool cuda_assumes_aligned(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  return CudaKernelWriter(s, k, layout).assumes_aligned();
}

}  // namespace mini::codegen
