// cpp_kernel.cpp — the C++ renderer: a LoopKernel (loop_ir.h, lowered from a FusionGroup) as
// C++ loops. How each op and value is spelled is c_style.h's table (kCppTarget); the loop
// structure is one function per kernel kind (pointwise: a flat loop, staged tiles or a loop
// nest; reduction: a row loop holding one inner loop per reduction phase, then the stores;
// outer reduction: blocks of outputs), with OpenMP for threads and vectorization.
#include "codegen/cpp_kernel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "codegen/c_style.h"
#include "codegen/loop_ir.h"
#include "codegen/scalar_math_source.h"

namespace mini::codegen {

using fusion::FusionGroup;
using fusion::Schedule;
using graph::Node;
using graph::NodeKind;

namespace {

std::string ctype(DType d) { return kCppTarget.type(d); }

// Elements per tile of a staged pointwise loop (write_staged): one stage's values of a tile
// (1 KiB of float) stay in L1 until the next stage reads them.
constexpr int kStageTile = 256;
constexpr int kMaxStages = 8;  // loops per pass over a tile or row chunk (cut_stages)

// Past this many float sin/cos/exp/sigmoid ops in one source, each calls one out-of-line
// vector version (an OpenMP simd clone, kOutlinedMath) instead of inlining a copy of its own:
// the copies are what the C++ compiler spends its time on, and past GCC's inlining budget
// (about 100 copies) the rest became scalar calls that kept their loops from vectorizing.
constexpr int kInlineTranscendentals = 64;
constexpr const char* kOutlinedMath =
    "namespace mini {  // out-of-line vector versions: this source has many transcendental ops\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float sin_v(float x) { return sin_f32(x); }\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float cos_v(float x) { return cos_f32(x); }\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float exp_v(float x) { return exp_f32(x); }\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float sigmoid_v(float x) { return sigmoid_f32(x); }\n"
    "}  // namespace mini\n";

// The out-of-line vector version of a float op, or nullptr.
const char* outlined_math(OpKind op) {
  switch (op) {
    case OpKind::Sin: return "mini::sin_v";
    case OpKind::Cos: return "mini::cos_v";
    case OpKind::Exp: return "mini::exp_v";
    case OpKind::Sigmoid: return "mini::sigmoid_v";
    default: return nullptr;
  }
}

// Emits one kernel. Index variables x0..x{r-1} name a point of the kernel's space.
class KernelWriter {
 public:
  KernelWriter(const Schedule& s, const FusionGroup& k, bool outline)
      : L_(s, k), g_(s.graph), k_(k), cs_(kCppTarget), rank_((int)k.space.size()) {
    if (outline)
      cs_.special = [](const Expr& e, const std::vector<std::string>& a) {
        return e.compute == DType::Float32 && outlined_math(e.op) ? std::string(outlined_math(e.op)) + "(" + a[0] + ")"
                                                                  : std::string();
      };
  }

  std::string write() {
    std::ostringstream o;
    o << "// " << k_.name << ": graph nodes";
    for (int id : k_.nodes) o << " " << g_.nodes[id].name;
    o << "\n//   over " << space() << (k_.reduced.empty() ? "" : ", reducing dims" + list(k_.reduced)) << "\n";
    for (int id : k_.nodes)
      if (!g_.nodes[id].code.empty()) { o << "//   " << g_.nodes[id].code << "\n"; break; }
    o << "extern \"C\" void " << k_.name
      << "(char* const* buffers, const int64_t* const* strides, const int64_t* symbols) {\n";
    o << "  (void)strides; (void)symbols;\n";
    for (auto& [id, i] : L_.load_index()) {  // bool buffers as bytes: a load reads `in[j] != 0` (c_style.cpp)
      std::string T = g_.nodes[id].meta.dtype == DType::Bool ? "unsigned char" : ctype(g_.nodes[id].meta.dtype);
      o << "  const " << T << "* in" << i << " = (const " << T << "*)buffers[" << i << "];\n";
    }
    for (auto& [id, i] : L_.store_index())
      o << "  " << ctype(g_.nodes[id].meta.dtype) << "* out" << i << " = (" << ctype(g_.nodes[id].meta.dtype)
        << "*)buffers[" << i << "];\n";
    if (k_.reduced.empty()) write_pointwise(o);
    else if (L_.is_outer_reduction()) write_outer_reduction(o);
    else write_reduction(o);
    o << "}\n";
    return o.str();
  }

 private:
  std::string list(const std::vector<int64_t>& v) {
    std::string s = " [";
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  }
  std::string space() {
    std::string s = "[";
    for (int d = 0; d < rank_; d++) s += (d ? ", " : "") + graph::size_str(k_.space[d]);
    return s + "]";
  }
  std::string product(const std::vector<int64_t>& dims) { return codegen::product(k_.space, dims); }
  std::string unflatten(const std::string& flat, const std::vector<int64_t>& dims, const std::string& pad) {
    return codegen::unflatten(k_.space, flat, dims, pad);
  }

  bool is_full(int id) const { return L_.is_full(id); }
  bool is_reduction(int id) const { return L_.is_reduction(id); }
  std::string out(int id) { return "out" + std::to_string(L_.buffer_of_store(id)); }
  // `const T t<id> = <its expression>;`
  std::string define(const std::string& pad, char prefix, int id, bool flat_ok) {
    return cs_.define(L_, pad, prefix, id, flat_ok);
  }

  // Full-space temporaries needed to compute `targets`, in program order.
  void emit_full(std::ostringstream& o, const std::set<int>& targets, bool flat_ok, const std::string& pad) {
    for (int id : L_.full_values_for(targets)) o << define(pad, 't', id, flat_ok);
  }

  std::string linear_full() { return codegen::linear_full(k_.space); }
  std::string linear_row() { return linear_index(k_.space, L_.kept_dims()); }

  // A pointwise kernel: one flat loop when every load is contiguous over the space (or a
  // scalar), else a loop nest (outer dims split over threads, the innermost one vectorized)
  // so that no element pays a division to find its index.
  void write_pointwise(std::ostringstream& o) {
    o << "  const int64_t numel = " << product(L_.kept_dims()) << ";\n";
    std::set<int> targets(k_.stores.begin(), k_.stores.end());
    std::ostringstream flat;
    emit_full(flat, targets, true, "    ");
    for (int id : k_.stores) flat << "    " << out(id) << "[i] = t" << id << ";\n";
    if (!L_.flat_uses_index() || rank_ < 2) {
      // The full-space values in program order, cut into stages of one transcendental each. One
      // loop over a long chain (chain8: sin, cos, exp and a division per element) is slow even
      // when vectorized: each iteration is one dependency chain hundreds of cycles long, and the
      // CPU's out-of-order window holds too few iterations to overlap them. A stage per
      // transcendental keeps each loop's chain short.
      std::vector<std::vector<int>> stages = L_.cut_stages(L_.full_values_for(targets), kMaxStages);
      if (stages.size() > 1) return write_staged(o, stages);
      // `if (parallel: ...)`: a bare `if` would also turn the simd part off
      o << "  #pragma omp parallel for simd if (parallel: numel >= 131072)\n";
      o << "  for (int64_t i = 0; i < numel; i++) {\n";
      if (L_.flat_uses_index()) o << unflatten("i", L_.kept_dims(), "    ");
      o << flat.str() << "  }\n";
      return;
    }
    std::ostringstream body;
    std::string pad(4 + 2 * rank_, ' ');
    emit_full(body, targets, false, pad);
    for (int id : k_.stores) body << pad << out(id) << "[" << linear_full() << "] = t" << id << ";\n";
    o << "  (void)numel;\n";
    o << "  #pragma omp parallel for collapse(" << std::max(1, rank_ - 1) << ") if (numel >= 131072)\n";
    for (int d = 0; d < rank_; d++) {
      std::string in(2 + 2 * d, ' ');
      if (d == rank_ - 1) o << in << "  #pragma omp simd\n";
      o << in << "  for (int64_t x" << d << " = 0; x" << d << " < " << size_expr(k_.space[d]) << "; x" << d << "++) {\n";
    }
    o << body.str();
    for (int d = rank_ - 1; d >= 0; d--) o << std::string(4 + 2 * d, ' ') << "}\n";
  }

  // A flat pointwise kernel as tiles of kStageTile elements (split over threads), each tile
  // running one vectorized loop per stage; a value computed in one stage and read in a later
  // one goes through a small array (s<id>) that stays in L1.
  void write_staged(std::ostringstream& o, const std::vector<std::vector<int>>& stages) {
    std::map<int, size_t> stage_of;
    for (size_t k = 0; k < stages.size(); k++)
      for (int id : stages[k]) stage_of[id] = k;
    std::set<int> crossing;  // values read in a later stage than their own
    for (size_t k = 0; k < stages.size(); k++)
      for (int id : stages[k])
        for (int i : g_.nodes[id].inputs)
          if (stage_of.count(i) && stage_of[i] < k) crossing.insert(i);
    const std::string tile = std::to_string(kStageTile);
    o << "  // " << stages.size() << " stages per tile of " << tile
      << " elements, one per transcendental op: short loops overlap, one long chain does not\n";
    o << "  #pragma omp parallel for if (numel >= 131072)\n";
    o << "  for (int64_t i0 = 0; i0 < numel; i0 += " << tile << ") {\n";
    o << "    const int64_t i1 = numel - i0 < " << tile << " ? numel : i0 + " << tile << ";\n";
    for (int id : crossing) o << "    " << ctype(g_.nodes[id].meta.dtype) << " s" << id << "[" << tile << "];\n";
    for (size_t k = 0; k < stages.size(); k++) {
      o << "    #pragma omp simd\n";
      o << "    for (int64_t i = i0; i < i1; i++) {\n";
      if (L_.flat_uses_index()) o << unflatten("i", L_.kept_dims(), "      ");
      std::set<int> read;  // crossing values this stage reads
      for (int id : stages[k])
        for (int i : g_.nodes[id].inputs)
          if (crossing.count(i) && stage_of[i] < k) read.insert(i);
      for (int id : read)
        o << "      const " << ctype(g_.nodes[id].meta.dtype) << " t" << id << " = s" << id << "[i - i0];\n";
      for (int id : stages[k]) {
        o << define("      ", 't', id, true);
        if (crossing.count(id)) o << "      s" << id << "[i - i0] = t" << id << ";\n";
        if (L_.is_store(id)) o << "      " << out(id) << "[i] = t" << id << ";\n";
      }
      o << "    }\n";
    }
    o << "  }\n";
  }

  // An *outer* reduction reduces leading dims of a contiguous space (a bias gradient: sum
  // over the batch, dim 0 of [batch, features]). A row loop would walk each output's elements
  // with a stride of the row length: no vectorization, a cache line per element. Instead the
  // kernel takes blocks of kOuterBlock outputs, walks the reduced dims in the outer loop and
  // the block in the inner one, contiguous and vectorized, with one accumulator per output
  // (eager mini's reduce does the same). LoopKernel::is_outer_reduction says when it applies.
  // Few blocks (a bias of 128 or 512 features: 1 or 2) would leave most threads idle while the
  // whole reduction, often a fused gelu backward, runs on one or two: where every reduction is
  // a sum, the reduced dims are then cut into chunks of kOuterSplit too, each (block, chunk)
  // summed by one thread into a partial, and the partials added in order. Whether a kernel
  // splits depends on the shape only, so its result does not depend on the thread count.
  static constexpr int kOuterBlock = 256;
  static constexpr int kOuterSplit = 128;     // rows of the reduced dims a split task sums
  static constexpr int kOuterSplitBlocks = 16;  // at most this many blocks of outputs to split

  void write_outer_reduction(std::ostringstream& o) {
    const std::string block = std::to_string(kOuterBlock), chunk = std::to_string(kSumChunk);
    std::vector<int> reds;
    for (int id : k_.nodes)
      if (is_reduction(id)) reds.push_back(id);
    bool all_sums = true;
    for (int id : reds) all_sums = all_sums && is_sum(g_.nodes[id]);
    std::set<int> targets(reds.begin(), reds.end());
    for (int id : k_.stores)
      if (is_full(id)) targets.insert(id);
    // the block's elements of reduced index j: full values, reduction updates, full stores
    auto block_body = [&](const std::string& pad) {
      o << pad << "for (int64_t j = j0; j < j1; j++) {\n";
      o << unflatten("j", L_.red_dims(), pad + "  ");
      o << pad << "  #pragma omp simd\n";
      o << pad << "  for (int64_t r = r0; r < r1; r++) {\n";
      o << unflatten("r", L_.kept_dims(), pad + "    ");
      emit_full(o, targets, false, pad + "    ");
      for (int id : reds) o << pad << "    " << update(g_.nodes[id], id, "[r - r0]") << "\n";
      for (int id : k_.stores)  // full-space values this kernel also stores (read by a later one)
        if (is_full(id)) o << pad << "    " << out(id) << "[" << linear_full() << "] = t" << id << ";\n";
      o << pad << "  }\n" << pad << "}\n";
    };
    auto accumulators = [&](const std::string& pad) {
      for (int id : reds) {
        const Node& n = g_.nodes[id];
        std::string A = accumulator_type(n), I = std::to_string(id);
        o << pad << A << " acc" << I << "[" << block << "];\n";
        if (!is_sum(n)) o << pad << "int nan" << I << "[" << block << "];\n";
        o << pad << "for (int64_t r = 0; r < r1 - r0; r++) acc" << I << "[r] = " << initial(n, A)
          << (is_sum(n) ? "" : ", nan" + I + "[r] = 0") << ";\n";
      }
    };
    // the block's results, from acc<id>[r - r0]: row values and row stores
    auto epilogue = [&](const std::string& pad) {
      o << pad << "for (int64_t r = r0; r < r1; r++) {\n";
      o << unflatten("r", L_.kept_dims(), pad + "  ");
      for (int id : reds) {
        const Node& n = g_.nodes[id];
        std::string I = std::to_string(id), fin = "acc" + I + "[r - r0]";
        if (!is_sum(n))
          fin = "(nan" + I + "[r - r0] ? std::numeric_limits<" + accumulator_type(n) + ">::quiet_NaN() : " + fin + ")";
        if (n.op == OpKind::Mean) fin = "(" + fin + " / double(rnumel))";
        o << pad << "  const " << ctype(n.meta.dtype) << " r" << id << " = " << ctype(n.meta.dtype) << "(" << fin << ");\n";
      }
      for (int id : k_.nodes) {  // row values after the reductions
        if (is_full(id) || is_reduction(id)) continue;
        o << define(pad + "  ", 'r', id, false);
      }
      for (int id : k_.stores)
        if (!is_full(id)) o << pad << "  " << out(id) << "[" << linear_row() << "] = r" << id << ";\n";
      o << pad << "}\n";
    };

    o << "  const int64_t rows = " << product(L_.kept_dims()) << ", rnumel = " << product(L_.red_dims()) << ";\n";
    o << "  // an outer reduction: blocks of " << block << " outputs, the reduced dims in the outer loop,\n"
      << "  // the block's outputs in the inner (contiguous, vectorized) one\n";
    std::string pad = "  ";
    if (all_sums) {
      const std::string split = std::to_string(kOuterSplit);
      o << "  const int64_t blocks = (rows + " << block << " - 1) / " << block << ", chunks = (rnumel + " << split
        << " - 1) / " << split << ";\n";
      o << "  if (blocks <= " << kOuterSplitBlocks << " && chunks >= 2 && rows * rnumel >= 131072) {\n";
      o << "    // few blocks of outputs: (block, chunk of " << split << " reduced rows) pairs over the threads,\n"
        << "    // each into its partial; then each block adds its partials in order\n";
      for (int id : reds)
        o << "    " << part_type(g_.nodes[id]) << "* partial" << id << " = static_cast<" << part_type(g_.nodes[id])
          << "*>(std::malloc(sizeof(" << part_type(g_.nodes[id]) << ") * blocks * chunks * " << block << "));\n";
      o << "    #pragma omp parallel for collapse(2)\n";
      o << "    for (int64_t b = 0; b < blocks; b++) {\n";
      o << "      for (int64_t c = 0; c < chunks; c++) {\n";
      o << "        const int64_t r0 = b * " << block << ", r1 = rows - r0 < " << block << " ? rows : r0 + " << block << ";\n";
      o << "        const int64_t j0 = c * " << split << ", j1 = rnumel - j0 < " << split << " ? rnumel : j0 + " << split << ";\n";
      for (int id : reds) o << "        " << part_type(g_.nodes[id]) << " part" << id << "[" << block << "] = {};\n";
      block_body("        ");
      for (int id : reds)
        o << "        for (int64_t r = 0; r < r1 - r0; r++) partial" << id << "[(b * chunks + c) * " << block
          << " + r] = part" << id << "[r];\n";
      o << "      }\n    }\n";
      o << "    #pragma omp parallel for\n";
      o << "    for (int64_t b = 0; b < blocks; b++) {\n";
      o << "      const int64_t r0 = b * " << block << ", r1 = rows - r0 < " << block << " ? rows : r0 + " << block << ";\n";
      accumulators("      ");
      for (int id : reds)
        o << "      for (int64_t c = 0; c < chunks; c++)\n"
          << "        for (int64_t r = 0; r < r1 - r0; r++) acc" << id << "[r] += partial" << id << "[(b * chunks + c) * "
          << block << " + r];\n";
      epilogue("      ");
      o << "    }\n";
      for (int id : reds) o << "    std::free(partial" << id << ");\n";
      o << "    return;\n  }\n";
    }
    o << pad << "#pragma omp parallel for if (rows * rnumel >= 131072)\n";
    o << pad << "for (int64_t r0 = 0; r0 < rows; r0 += " << block << ") {\n";
    o << pad << "  const int64_t r1 = rows - r0 < " << block << " ? rows : r0 + " << block << ";\n";
    accumulators(pad + "  ");
    o << pad << "  for (int64_t j0 = 0; j0 < rnumel; j0 += " << chunk << ") {\n";
    o << pad << "    const int64_t j1 = rnumel - j0 < " << chunk << " ? rnumel : j0 + " << chunk << ";\n";
    for (int id : reds)
      if (is_sum(g_.nodes[id]))
        o << pad << "    " << part_type(g_.nodes[id]) << " part" << id << "[" << block << "] = {};\n";
    block_body(pad + "    ");
    for (int id : reds)
      if (is_sum(g_.nodes[id]))
        o << pad << "    for (int64_t r = 0; r < r1 - r0; r++) acc" << id << "[r] += part" << id << "[r];\n";
    o << pad << "  }\n";
    epilogue(pad + "  ");
    o << pad << "}\n";
  }

  // How a reduction kernel's row loop is laid out (LoopKernel::plan_rows): for each phase (one
  // pass over the row), the full-space values it computes and those it reads back from a row
  // scratch array. A transcendental value needed again in a later phase (softmax's
  // exp(x - max), summed in one pass and divided in the next) is kept in a per-row array
  // instead of computed twice, when the row is short enough for the arrays to sit on the
  // stack (kScratchBytes).
  static constexpr int64_t kScratchBytes = 64 * 1024;

  void write_reduction(std::ostringstream& o) {
    o << "  const int64_t rows = " << product(L_.kept_dims()) << ", rnumel = " << product(L_.red_dims()) << ";\n";
    RowPlan plan = L_.plan_rows(kScratchBytes);
    // Fewer rows than threads (a loss: everything summed to one number): split each row's
    // passes over the threads instead, each thread reducing a range of chunks.
    o << "  const bool split = rows < omp_get_max_threads() && rnumel >= " << kSplitMin << ";\n";
    o << "  #pragma omp parallel for if (!split && rows > 1 && rows * rnumel >= 131072)\n";
    o << "  for (int64_t r = 0; r < rows; r++) {\n";
    o << unflatten("r", L_.kept_dims(), "    ");
    for (int id : plan.scratch)
      o << "    " << ctype(g_.nodes[id].meta.dtype) << " s" << id << "[" << product(L_.red_dims())
        << "];  // " << g_.nodes[id].name << " of this row, computed once\n";
    std::set<int> done;  // row values computed so far
    for (int id : k_.nodes) {  // row values that need no reduction: before any loop reads them
      if (is_full(id) || is_reduction(id) || !L_.reductions_below(id).empty()) continue;
      o << define("    ", 'r', id, false);
      done.insert(id);
    }
    for (int p = 0; p <= L_.phases(); p++) {
      std::vector<int> reds, stores;
      L_.phase_targets(p, &reds, &stores);
      if (!reds.empty() || !stores.empty()) write_phase(o, plan, p, reds, stores, &done);
      // row values whose reductions are all done, then row stores
      for (int id : k_.nodes) {
        if (done.count(id) || is_full(id) || is_reduction(id)) continue;
        bool ready = true;
        for (int dep : L_.reductions_below(id)) ready = ready && done.count(dep);
        if (!ready) continue;
        o << define("    ", 'r', id, false);
        done.insert(id);
      }
    }
    for (int id : k_.stores)
      if (!is_full(id)) o << "    " << out(id) << "[" << linear_row() << "] = r" << id << ";\n";
    o << "  }\n";
  }

  // One pass over the row. Every reduction is an OpenMP reduction, so the loop vectorizes:
  // sums with +, max/min with max/min and a separate NaN flag (a NaN-propagating select would
  // chain each element to the one before and keep the loop scalar). A float32 sum adds in
  // float within chunks of kSumChunk elements (16 vector lanes of 64 each), and the chunks'
  // sums in double: float speed, and an error that does not grow with the row's length.
  static constexpr int kSumChunk = 1024;
  static constexpr int kSplitMin = 32768;  // a row shorter than this is not worth splitting

  void write_phase(std::ostringstream& o, const RowPlan& plan, int p, const std::vector<int>& reds,
                   const std::vector<int>& stores, std::set<int>* done) {
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      std::string A = accumulator_type(n);
      o << "    " << A << " acc" << id << " = " << initial(n, A) << ";\n";
      // an int, not a bool: GCC does not vectorize an OpenMP | reduction over bool
      if (!is_sum(n)) o << "    int nan" << id << " = 0;  // max/min propagate NaN, as eager\n";
    }
    // chunks of kSumChunk: what float sums add in float, and what a split row divides over threads
    const std::string chunk = std::to_string(kSumChunk), pad = "      ";
    std::ostringstream split_pragma;
    split_pragma << "#pragma omp parallel for";
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      if (is_sum(n)) split_pragma << " reduction(+ : acc" << id << ")";
      else split_pragma << " reduction(" << (n.op == OpKind::Amax ? "max" : "min") << " : acc" << id << ") reduction(| : nan" << id << ")";
    }
    std::ostringstream o_main;
    {
    std::ostringstream& o = o_main;  // the chunk loop, written once, emitted in two places below
    o << "    for (int64_t j0 = 0; j0 < rnumel; j0 += " << chunk << ") {\n";
    o << "      const int64_t j1 = rnumel - j0 < " << chunk << " ? rnumel : j0 + " << chunk << ";\n";
    for (int id : reds)
      if (is_sum(g_.nodes[id])) o << "      " << part_type(g_.nodes[id]) << " part" << id << " = 0;\n";
    std::ostringstream simd;  // the pragma of the loop that updates the accumulators
    simd << "#pragma omp simd";
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      if (is_sum(n)) {
        simd << " reduction(+ : part" << id << ")";
        continue;
      }
      simd << " reduction(" << (n.op == OpKind::Amax ? "max" : "min") << " : acc" << id << ")";
      simd << " reduction(| : nan" << id << ")";
    }
    // The pass over a chunk, in stages when it holds several transcendental ops (as pointwise
    // kernels, write_staged): a value crossing stages goes through a chunk-long array c<id>.
    std::vector<int> order;
    for (int id : k_.nodes)
      if (plan.compute[p].count(id)) order.push_back(id);
    std::vector<std::vector<int>> stages = L_.cut_stages(order, kMaxStages);
    std::map<int, size_t> stage_of;
    for (size_t k = 0; k < stages.size(); k++)
      for (int id : stages[k]) stage_of[id] = k;
    std::vector<std::set<int>> uses(stages.size());  // values each stage reads
    for (size_t k = 0; k < stages.size(); k++)
      for (int id : stages[k])
        for (int i : g_.nodes[id].inputs)
          if (i >= 0) uses[k].insert(i);
    for (int id : reds) uses.back().insert(g_.nodes[id].inputs[0]);
    for (int id : stores) uses.back().insert(id);
    std::set<int> crossing;
    for (size_t k = 0; k < stages.size(); k++)
      for (int id : uses[k])
        if (stage_of.count(id) && stage_of[id] < k) crossing.insert(id);
    std::string in = pad + "  ";
    for (int id : crossing) o << pad << ctype(g_.nodes[id].meta.dtype) << " c" << id << "[" << chunk << "];\n";
    for (size_t k = 0; k < stages.size(); k++) {
      bool last = k + 1 == stages.size();
      o << pad << (last ? simd.str() : "#pragma omp simd") << "\n";
      o << pad << "for (int64_t j = j0; j < j1; j++) {\n";
      o << unflatten("j", L_.red_dims(), in);
      for (int id : plan.read[p])
        if (uses[k].count(id)) o << in << "const " << ctype(g_.nodes[id].meta.dtype) << " t" << id << " = s" << id << "[j];\n";
      for (int id : crossing)
        if (uses[k].count(id) && stage_of[id] < k)
          o << in << "const " << ctype(g_.nodes[id].meta.dtype) << " t" << id << " = c" << id << "[j - j0];\n";
      for (int id : stages[k]) {
        o << define(in, 't', id, false);
        if (plan.scratch.count(id)) o << in << "s" << id << "[j] = t" << id << ";\n";
        if (crossing.count(id)) o << in << "c" << id << "[j - j0] = t" << id << ";\n";
      }
      if (last) {
        for (int id : reds) o << in << update(g_.nodes[id], id) << "\n";
        for (int id : stores) o << in << out(id) << "[" << linear_full() << "] = t" << id << ";\n";
      }
      o << pad << "}\n";
    }
    for (int id : reds)
      if (is_sum(g_.nodes[id])) o << "      acc" << id << " += part" << id << ";\n";
    o << "    }\n";
    }
    // A nested parallel region costs a team start even when it runs on one thread: only a
    // split row enters one. A row known to be shorter than kSplitMin never splits: no split
    // copy of the pass then (each copy costs the C++ compiler as much as the pass itself).
    int64_t rnumel = L_.static_extent(L_.red_dims());
    std::string loop = indent(o_main.str(), "  ");
    if (rnumel >= 0 && rnumel < kSplitMin) o << o_main.str();
    else o << "    if (split) {\n      " << split_pragma.str() << "\n" << loop << "    } else {\n" << loop << "    }\n";
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      std::string fin = "acc" + std::to_string(id);
      if (!is_sum(n)) fin = "(nan" + std::to_string(id) + " ? std::numeric_limits<" + accumulator_type(n) +
                            ">::quiet_NaN() : " + fin + ")";
      if (n.op == OpKind::Mean) fin = "(" + fin + " / double(rnumel))";
      o << "    const " << ctype(n.meta.dtype) << " r" << id << " = " << ctype(n.meta.dtype) << "(" << fin << ");\n";
      done->insert(id);
    }
  }

  std::string accumulator_type(const Node& n) {
    DType d = g_.nodes[n.inputs[0]].meta.dtype;
    if (n.op == OpKind::Sum || n.op == OpKind::Mean) return is_floating(d) ? "double" : "int64_t";
    return ctype(d);
  }
  // The type a sum adds in within one chunk: float for float32, else the accumulator's.
  std::string part_type(const Node& n) {
    return g_.nodes[n.inputs[0]].meta.dtype == DType::Float32 ? "float" : accumulator_type(n);
  }
  std::string initial(const Node& n, const std::string& A) {
    if (n.op == OpKind::Sum || n.op == OpKind::Mean) return A + "(0)";
    bool mx = n.op == OpKind::Amax;
    if (A == "float" || A == "double") return std::string(mx ? "-" : "") + "std::numeric_limits<" + A + ">::infinity()";
    return "std::numeric_limits<" + A + ">::" + (mx ? "lowest()" : "max()");
  }
  // `at`: "" for the scalar accumulators of a row loop, "[r - r0]" for the per-column arrays of
  // an outer reduction.
  std::string update(const Node& n, int id, const std::string& at = "") {
    std::string acc = "acc" + std::to_string(id) + at, v = cs_.expr(L_.reduction_input(id));
    if (is_sum(n)) return "part" + std::to_string(id) + at + " += " + v + ";";
    std::string cmp = n.op == OpKind::Amax ? " > " : " < ";
    std::string nan = "nan" + std::to_string(id) + at;
    if (!is_floating(g_.nodes[n.inputs[0]].meta.dtype)) return acc + " = " + v + cmp + acc + " ? " + v + " : " + acc + ";";
    return acc + " = " + v + cmp + acc + " ? " + v + " : " + acc + "; " + nan + " |= " + v + " != " + v + ";";
  }
  static bool is_sum(const Node& n) { return n.op == OpKind::Sum || n.op == OpKind::Mean; }

  const LoopKernel L_;
  const graph::Graph& g_;
  const FusionGroup& k_;
  CStyle cs_;
  const int rank_;
};

}  // namespace

std::string scalar_math_prelude() {
  std::string text = kScalarMathSource;  // a header's text: its include guard has no use here
  size_t guard = text.find("#pragma once");
  if (guard != std::string::npos) text.erase(guard, std::string("#pragma once").size());
  return text;
}

std::string render_cpp(const Schedule& s, std::vector<std::string>* functions) {
  std::ostringstream o;
  o << "// Generated by mini's inductor (mini/codegen/cpp_kernel.cpp). Do not edit.\n";
  o << "#include <omp.h>\n\n#include <cmath>\n#include <cstdint>\n#include <cstdlib>\n#include <cstring>\n#include <limits>\n\n";
  o << kPreludeBegin << "\n" << scalar_math_prelude() << kPreludeEnd << "\n";
  int transcendentals = 0;
  for (const auto& k : s.groups)
    for (int id : k.nodes)
      transcendentals += outlined_math(s.graph.nodes[id].op) && s.graph.nodes[id].meta.dtype == DType::Float32;
  bool outline = transcendentals > kInlineTranscendentals;
  if (outline) o << "\n" << kOutlinedMath;
  std::map<std::string, std::string> first_of;  // a body -> the kernel that holds it
  for (const auto& k : s.groups) {
    std::string text = KernelWriter(s, k, outline).write();
    auto [first, fresh] = first_of.emplace(kernel_body(text, k.name), k.name);
    if (functions) functions->push_back(first->second);
    if (fresh) o << "\n" << text;
    else o << "\n" << text.substr(0, text.find('\n') + 1) << "//   runs " << first->second << " (the same body, compiled once)\n";
  }
  return o.str();
}

std::vector<std::string> split_source(const std::string& source, const Schedule& s, int n) {
  std::vector<size_t> starts;  // where each kernel's text begins: its comment line
  for (const auto& k : s.groups) {
    size_t at = source.find("\n// " + k.name + ":", starts.empty() ? 0 : starts.back());
    if (at == std::string::npos) return {source};  // not render_cpp's text: one unit
    starts.push_back(at + 1);
  }
  if (starts.empty() || n <= 1) return {source};
  std::string header = source.substr(0, starts[0]);
  starts.push_back(source.size());
  size_t target = (source.size() - starts[0]) / (size_t)std::min<int>(n, (int)s.groups.size()) + 1;
  std::vector<std::string> units;
  for (size_t k = 0, begin = starts[0]; k + 1 < starts.size(); k++) {
    bool last = k + 2 == starts.size();
    if (last || starts[k + 1] - begin >= target) {  // close the unit after kernel k
      units.push_back(header + source.substr(begin, starts[k + 1] - begin));
      begin = starts[k + 1];
    }
  }
  return units;
}

std::string without_prelude(const std::string& source) {
  size_t begin = source.find(kPreludeBegin), end = source.find(kPreludeEnd);
  if (begin == std::string::npos || end == std::string::npos) return source;
  end += std::string(kPreludeEnd).size();
  int64_t lines = std::count(source.begin() + begin, source.begin() + end, '\n');
  return source.substr(0, begin) + "// (the prelude, mini/tensor/scalar_math.h: " + std::to_string(lines) +
         " lines, omitted here; MINI_COMPILE_DEBUG=1 writes the whole source)" + source.substr(end);
}

}  // namespace mini::codegen
