// cuda_kernel.cpp — the CUDA renderer (cuda_kernel.h): the LoopKernel of each fused group as a
// __global__ function, spelled through c_style.h's tables (kCudaTarget).
#include "codegen/cuda_kernel.h"

#include <algorithm>
#include <sstream>

#include "codegen/c_style.h"
#include "codegen/cpp_kernel.h"
#include "codegen/loop_ir.h"

namespace mini::codegen {

using fusion::FusionGroup;
using fusion::Schedule;
using graph::Node;

int64_t cuda_row_length(const FusionGroup& k) {
  int64_t R = 1;
  for (int64_t d : k.reduced) R = graph::is_symbol(k.space[d]) || R < 0 ? -1 : R * k.space[d];
  return R;
}

namespace {

// The most inlined copies of transcendental functions one unrolled row pass may hold (layouts
// 9 and 10): NVRTC's compile time, not the kernel's speed, is what more copies cost.
constexpr int kUnrolledTranscendentals = 8;

// What every generated CUDA source starts with. NVRTC compiles it without the C++ library:
// the types, then mini/tensor/scalar_math.h (sin, cos, sigmoid and gelu as eager mini and the
// C++ kernels compute them; render_cuda puts it between these two parts), then what only CUDA
// kernels need.
constexpr const char* kCudaPreludeTypes = R"(// ---- prelude: mini's CUDA kernels (mini/codegen/cuda_kernel.cpp) ----
typedef long long int64_t;
typedef unsigned int uint32_t;
typedef int int32_t;
)";
constexpr const char* kCudaPrelude = R"(
namespace mini {

// bfloat16 storage: widened to float when read, rounded to nearest even (the hardware's
// cvt.rn.bf16.f32) when made from a float; arithmetic on two of them is float arithmetic, so
// each op's result is rounded once, when it is stored in its temporary, as eager rounds it.
struct bf16 {
  unsigned short bits;
  bf16() = default;
  __device__ __forceinline__ bf16(float f) { asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f)); }
  __device__ __forceinline__ operator float() const { return __uint_as_float(unsigned(bits) << 16); }
};

// N consecutive elements moved by one load or store instruction (16 bytes at most): a
// pointwise kernel's contiguous loads and its stores, where each pointer is aligned to it.
template <class T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };
template <class T, int N> __device__ __forceinline__ bool aligned(const T* p) {
  return (reinterpret_cast<unsigned long long>(p) % sizeof(Vec<T, N>)) == 0;
}

struct Sizes {  // passed by value to every kernel (cuda_kernel.h: kCudaMax*)
  int64_t symbols[64];
  int64_t strides[16][8];
};

// Reductions: the identity and the combine of sum, max and min (NaN propagates, as eager).
template <class T> __device__ __forceinline__ T sum_of(T a, T b) { return a + b; }
template <class T> __device__ __forceinline__ T max_of(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> __device__ __forceinline__ T min_of(T a, T b) { return (a != a || a < b) ? a : b; }
template <class T> __device__ __forceinline__ T highest() { return T(__longlong_as_double(0x7ff0000000000000LL)); }
template <> __device__ __forceinline__ int64_t highest<int64_t>() { return 0x7fffffffffffffffLL; }
template <> __device__ __forceinline__ int highest<int>() { return 0x7fffffff; }
template <class T> __device__ __forceinline__ T lowest() { return -highest<T>(); }
template <> __device__ __forceinline__ int64_t lowest<int64_t>() { return -0x7fffffffffffffffLL - 1; }
template <> __device__ __forceinline__ int lowest<int>() { return -0x7fffffff - 1; }
// The online softmax's rescale: a running sum of exp(x - m) becomes one of exp(x - m2) when the
// running max rises from m to m2 (1 where it did not, also where both are -inf; 0 from -inf).
template <class T> __device__ __forceinline__ T online_scale(T m, T m2) { return m == m2 ? T(1) : T(::exp(m - m2)); }
// The running max as the pair's exp reads it: 0 while it is -inf (every element so far -inf,
// whose exp(-inf - 0) is the 0 it is after any finite max); the row's sum where its max is
// -inf is NaN, as eager's exp(-inf - -inf).
template <class T> __device__ __forceinline__ T online_shift(T m) { return m == -highest<T>() ? T(0) : m; }
template <class T> __device__ __forceinline__ T online_finish(T sum, T m) { return m == -highest<T>() ? T(m - m) : sum; }

// v combined over the block's threads (every thread gets the result): shuffles within each
// warp, then the warps' values through `smem` (one per warp), which each warp reads back one a
// lane and combines with shuffles again (a loop over the warps' values in every thread read
// shared memory four times as often as the kernel read global memory: Nsight Compute, H200,
// 2026-12-02). Every thread must call it. The block's warps a power of two (every block mini
// launches): each aligned group of that many lanes holds every warp's value once.
template <class T, T (*Op)(T, T)> __device__ __forceinline__ T block_reduce(T v, T* smem) {
  for (int offset = 16; offset > 0; offset >>= 1) v = Op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warps = int(blockDim.x >> 5), lane = int(threadIdx.x & 31);
  if (warps <= 1) return v;
  __syncthreads();  // the previous call's readers are done with smem
  if (lane == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  if (warps & (warps - 1)) {  // not a power of two: one warp's value after another
    T r = smem[0];
    for (int w = 1; w < warps; w++) r = Op(r, smem[w]);
    return r;
  }
  T r = smem[lane & (warps - 1)];
  for (int offset = warps >> 1; offset > 0; offset >>= 1) r = Op(r, __shfl_xor_sync(0xffffffffu, r, offset));
  return r;
}

// v combined over each aligned group of Lanes lanes of this warp (every lane gets its group's
// result): a row a warp, or Lanes lanes a row (codegen::cuda_rows_per_block > 1), each group
// reducing its own row, never waiting for the others. Every lane of the warp must call it.
template <class T, T (*Op)(T, T), int Lanes = 32> __device__ __forceinline__ T warp_reduce(T v) {
  for (int offset = Lanes / 2; offset > 0; offset >>= 1) v = Op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

}  // namespace mini
// ---- end of prelude ----
)";

static_assert(kCudaMaxSymbols == 64 && kCudaMaxLoads == 16 && kCudaMaxRank == 8, "the prelude's mini::Sizes");

std::string cuda_type(DType d) { return kCudaTarget.type(d); }

class CudaKernelWriter {
 public:
  CudaKernelWriter(const Schedule& s, const FusionGroup& k, const CudaLayout& layout)
      : L_(s, k, layout.online_softmax), s_(s), g_(s.graph), k_(k), cs_(kCudaTarget), rank_((int)k.space.size()),
        layout_(layout), warp_rows_(k.reduced.empty() ? 1 : cuda_rows_per_block(cuda_row_length(k), layout)),
        row_lanes_(k.reduced.empty() ? 0 : cuda_reduction_threads(cuda_row_length(k), layout)) {
    if (warp_rows_ > 1)
      lane_ = "lane", row_threads_ = std::to_string(row_lanes_), first_row_ = "first_row", row_step_ = "row_step";
  }

  // Whether the kernel takes every pointer aligned to its Vec (cuda_assumes_aligned): the
  // pointwise kernels in vectors and the looped vector rows, decided as write() decides.
  bool assumes_aligned() {
    if (k_.reduced.empty()) return layout_.vector_pointwise;
    if (cuda_column_reduction(k_, layout_)) return column_vector() > 1;
    VectorRows rows;
    const bool looped = cuda_split_reductions(s_, k_, layout_) == 0 && vector_loop_shape(&rows);
    if (L_.has_online_pairs() && !looped) return CudaKernelWriter(s_, k_, without_online()).assumes_aligned();
    return looped;
  }

  // Vector columns (layouts 2 and up, split columns only: one pass, no full value after the
  // sums): as write_column_reduction, but each thread takes CV consecutive kept elements, so
  // that a warp's load of a row is 32 x 16 bytes (bfloat16 columns read 64 bytes a warp
  // load one at a time: GPT-2's MLP bias gradient ran at 0.75 TB/s). A load running along the
  // innermost dim with stride 1 (and every other stride a multiple of CV) is one Vec a row;
  // any other load is read per element. Each of the CV columns keeps its own accumulators, and
  // a full value the kernel stores is stored as one Vec. CV: 16 bytes of the widest such load
  // or store, halved until the innermost dim divides by it and 32 threads have columns.
  int column_vector() {
    if (column_vector_ >= 0) return column_vector_;
    column_vector_ = 1;
    if (!layout_.vector_pointwise || !cuda_column_reduction(k_, layout_) || cuda_column_splits(s_, k_, layout_) == 0)
      return 1;
    size_t widest = 0;
    cs_.load_hook = [&](const Expr& e, const std::string&) {
      if (runs_along_innermost(e, 1)) widest = std::max(widest, itemsize(e.dtype));
      return std::string();
    };
    row_pass_source("");  // a dry run: which loads run along the columns
    cs_.load_hook = nullptr;
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

  std::string write() {
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
    if (k_.reduced.empty()) write_pointwise(o);
    else if (split) write_split_reduction(o);
    else if (columns && column_vector() > 1) write_vector_columns(o, column_vector());
    else if (columns) write_column_reduction(o, split_columns);
    else if (looped) write_vector_loop_reduction(o, rows);
    else write_reduction(o);
    o << "}\n";
    return o.str();
  }

 private:
  CudaLayout without_online() const {  // only the looped vector rows fold an online pair
    CudaLayout plain = layout_;
    plain.online_softmax = false;
    return plain;
  }
  std::string define(const std::string& pad, char prefix, int id, bool flat_ok) {
    return cs_.define(L_, pad, prefix, id, flat_ok);
  }
  std::string out(int id) { return "out" + std::to_string(L_.buffer_of_store(id)); }
  std::string linear_full() { return codegen::linear_full(k_.space); }

  // Pointwise: a grid-stride loop over vectors of V elements (V: 16 bytes of the widest
  // contiguous load or store), each contiguous load and each store one Vec instruction and
  // the rest per lane, the lanes unrolled; then, where the element count is not a static
  // multiple of V, the last few elements one at a time. Every pointer is aligned
  // (cuda_assumes_aligned: the runtime copies a misaligned input first), so there is no
  // element-by-element path for another address: a second copy of the expressions cost chain8
  // 26% of its NVRTC time (sin, cos and exp inlined again). (One loop with lane-by-lane edges
  // wrote the expressions once, compiled 15% faster, and ran chain8 11% slower on the H200: the
  // predicates cost the fast path.) The index is split into x0, x1, ... only where a load needs
  // it (a load contiguous over the whole space reads in[i]); 32-bit index arithmetic where
  // every offset fits.
  void write_pointwise(std::ostringstream& o) {
    std::set<int> targets(k_.stores.begin(), k_.stores.end());
    std::vector<int> full = L_.full_values_for(targets);
    if (!layout_.vector_pointwise) {
      o << "  const int64_t numel = " << product(k_.space, L_.kept_dims()) << ";\n";
      write_elements(o, "", full);
      return;
    }
    std::map<int, std::string> flat;  // buffer -> its element type, for contiguous loads
    std::map<std::string, Expr> padded;  // padded loads (slice_backward), by spelling
    cs_.load_hook = [&](const Expr& e, const std::string& spelled) {
      if (e.index.flat) flat[e.buffer] = cuda_type(e.dtype);
      if (e.index.pad_dim >= 0) padded.emplace(spelled, e);
      return std::string();
    };
    for (int id : full) define("", 't', id, true);  // a dry run: which loads are contiguous
    cs_.load_hook = nullptr;
    size_t widest = 1;
    for (auto& [b, T] : flat) widest = std::max(widest, (size_t)itemsize(g_.nodes[load_node(b)].meta.dtype));
    for (int id : k_.stores) widest = std::max(widest, (size_t)itemsize(g_.nodes[id].meta.dtype));
    const int V = (int)(16 / widest);
    // A padded load reads a Vec too where every vector lies in one row of the innermost dim and
    // wholly inside or outside its slice: from where lane 0 reads, or zeros.
    std::map<std::string, std::string> pad_vectors;
    const int64_t last = k_.space.empty() ? -1 : k_.space.back();
    for (auto& [spelled, e] : padded)
      if (last > 0 && last % V == 0 && itemsize(e.dtype) * V <= 16 && runs_along_innermost(e, V))
        pad_vectors[spelled] = "p" + std::to_string(pad_vectors.size());
    const std::string index_type = fits_int32() ? "int" : "int64_t";

    o << "  const int64_t numel = " << product(k_.space, L_.kept_dims()) << ";\n";
    o << "  constexpr int V = " << V << ";\n";
    o << "  const int64_t nvec = numel / V;  // every pointer aligned to its Vec (cuda_assumes_aligned)\n";
    o << "  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {\n";
    o << "    const int64_t i = v * V;\n";
    for (auto& [b, T] : flat)
      o << "    const mini::Vec<" << T << ", V> l" << b << " = *reinterpret_cast<const mini::Vec<" << T << ", V>*>(in" << b
        << " + i);\n";
    if (!pad_vectors.empty()) {  // at lane 0's index: the vector's row and first column
      for (auto& [spelled, name] : pad_vectors)
        o << "    mini::Vec<" << cuda_type(padded.at(spelled).dtype) << ", V> " << name << ";\n";
      o << "    {\n";
      o << "      const " << index_type << " il = " << index_type << "(i);\n";
      o << unflatten(k_.space, "il", L_.kept_dims(), "      ", index_type);
      for (auto& [spelled, name] : pad_vectors)
        o << "      " << name << " = " << vector_read(padded.at(spelled), spelled, "V")
          << ";  // a slice's gradient, or the zeros around it\n";
      o << "    }\n";
    }
    for (int id : k_.stores) o << "    mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", V> s" << id << ";\n";
    o << "    #pragma unroll\n";
    o << "    for (int lane = 0; lane < V; lane++) {\n";
    if (L_.flat_uses_index()) {
      o << "      const " << index_type << " il = " << index_type << "(i + lane);\n";
      o << unflatten(k_.space, "il", L_.kept_dims(), "      ", index_type);
    }
    cs_.load_hook = [&](const Expr& e, const std::string& spelled) {
      if (e.index.flat) return "l" + std::to_string(e.buffer) + ".v[lane]";
      auto p = pad_vectors.find(spelled);
      return p == pad_vectors.end() ? std::string() : p->second + ".v[lane]";
    };
    for (int id : full) o << define("      ", 't', id, true);
    cs_.load_hook = nullptr;
    for (int id : k_.stores) o << "      s" << id << ".v[lane] = t" << id << ";\n";
    o << "    }\n";
    for (int id : k_.stores)
      o << "    *reinterpret_cast<mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", V>*>(" << out(id) << " + i) = s" << id
        << ";\n";
    o << "  }\n";
    int64_t numel = 1;
    for (int64_t d : L_.kept_dims()) numel = graph::is_symbol(k_.space[d]) || numel < 0 ? -1 : numel * k_.space[d];
    if (numel < 0 || numel % V) write_elements(o, "nvec * V + ", full);
  }

  // One element a thread, grid-strided from `first` (the vector loop's tail, or every element).
  void write_elements(std::ostringstream& o, const std::string& first, const std::vector<int>& full) {
    o << "  for (int64_t i = " << first << "blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < numel;\n"
      << "       i += (int64_t)gridDim.x * blockDim.x) {\n";
    if (L_.flat_uses_index()) o << unflatten(k_.space, "i", L_.kept_dims(), "    ");
    for (int id : full) o << define("    ", 't', id, true);
    for (int id : k_.stores) o << "    " << out(id) << "[i] = t" << id << ";\n";
    o << "  }\n";
  }

  int load_node(int buffer) const {
    for (auto& [id, b] : L_.load_index())
      if (b == buffer) return id;
    return -1;
  }

  // Every extent and stride static, and every element any load or store of the kernel can
  // reach within 2^31 - 1 of its pointer: index arithmetic in int (cheaper division).
  bool fits_int32() const {
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

  // The accumulator of a reduction: float for float32 and bfloat16 (as eager CUDA), double,
  // int64 for integer and bool sums, int for bool max/min.
  std::string acc_type(const Node& n) {
    DType d = g_.nodes[n.inputs[0]].meta.dtype;
    if (d == DType::Bool) return is_sum(n) ? "int64_t" : "int";
    if (d == DType::BFloat16) return "float";  // as eager: opmath
    if (is_sum(n) && d == DType::Int64) return "int64_t";
    return cuda_type(d);
  }
  static bool is_sum(const Node& n) { return n.op == OpKind::Sum || n.op == OpKind::Mean; }
  std::string combine(const Node& n) {
    return is_sum(n) ? "mini::sum_of" : n.op == OpKind::Amax ? "mini::max_of" : "mini::min_of";
  }
  std::string identity(const Node& n, const std::string& A) {
    if (is_sum(n)) return A + "(0)";
    return n.op == OpKind::Amax ? "mini::lowest<" + A + ">()" : "mini::highest<" + A + ">()";
  }

  // A block per row. Each phase: the block's threads stride over the row, computing the full
  // values the phase needs (a value needed again by a later phase is computed again: no row
  // scratch on the GPU yet) and folding them into per-thread accumulators, then one block
  // reduction per accumulator; the row values that became ready are computed by every thread.
  // A full reduction in two stages, one launch: every block folds its grid-strided share of
  // the row into a partial per reduction (partials[r * gridDim.x + block]); the block that
  // arrives last (an atomic count after a __threadfence: CUDA's threadFenceReduction) folds the
  // partials, resets the count for the next launch, and computes and stores the results.
  void write_split_reduction(std::ostringstream& o) {
    std::vector<int> reds, stores;
    L_.phase_targets(0, &reds, &stores);
    RowPlan plan = L_.plan_rows(0);
    o << "  const int64_t rnumel = " << product(k_.space, L_.red_dims()) << ";\n";
    for (int64_t d : L_.kept_dims()) o << "  const int64_t x" << d << " = 0;  (void)x" << d << ";  // the one row\n";
    o << "  __shared__ double smem[32];  // block reductions: one value per warp\n";
    o << "  __shared__ bool last;\n";
    for (int id : reds) {
      std::string A = acc_type(g_.nodes[id]);
      o << "  " << A << " acc" << id << " = " << identity(g_.nodes[id], A) << ";\n";
    }
    o << "  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < rnumel; j += (int64_t)gridDim.x * blockDim.x) {\n";
    o << unflatten(k_.space, "j", L_.red_dims(), "    ");
    for (int id : k_.nodes)
      if (plan.compute[0].count(id)) o << define("    ", 't', id, false);
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      std::string A = acc_type(n);
      o << "    acc" << id << " = " << combine(n) << "<" << A << ">(acc" << id << ", " << A << "("
        << cs_.expr(L_.reduction_input(id)) << "));\n";
    }
    o << "  }\n";
    for (size_t r = 0; r < reds.size(); r++) {
      const Node& n = g_.nodes[reds[r]];
      std::string A = acc_type(n), I = std::to_string(reds[r]);
      o << "  acc" << I << " = mini::block_reduce<" << A << ", " << combine(n) << "<" << A << ">>(acc" << I
        << ", reinterpret_cast<" << A << "*>(smem));\n";
      o << "  if (threadIdx.x == 0) reinterpret_cast<" << A << "*>(&partials[" << r << " * gridDim.x + blockIdx.x])[0] = acc"
        << I << ";\n";
    }
    o << "  if (threadIdx.x == 0) {\n";
    o << "    __threadfence();  // this block's partials are visible before it counts itself\n";
    o << "    last = atomicAdd(arrived, 1u) == gridDim.x - 1;\n";
    o << "  }\n";
    o << "  __syncthreads();\n";
    o << "  if (!last) return;\n";
    o << "  __threadfence();\n";
    for (size_t r = 0; r < reds.size(); r++) {
      const Node& n = g_.nodes[reds[r]];
      std::string A = acc_type(n), I = std::to_string(reds[r]);
      o << "  acc" << I << " = " << identity(n, A) << ";\n";
      o << "  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {\n";
      o << "    const unsigned long long bits = __ldcg(&partials[" << r << " * gridDim.x + b]);\n";
      o << "    acc" << I << " = " << combine(n) << "<" << A << ">(acc" << I << ", reinterpret_cast<const " << A
        << "*>(&bits)[0]);\n";
      o << "  }\n";
      o << "  acc" << I << " = mini::block_reduce<" << A << ", " << combine(n) << "<" << A << ">>(acc" << I
        << ", reinterpret_cast<" << A << "*>(smem));\n";
      std::string fin = "acc" + I;
      if (n.op == OpKind::Mean) fin = "(" + fin + " / double(rnumel))";
      o << "  const " << cuda_type(n.meta.dtype) << " r" << I << " = " << cuda_type(n.meta.dtype) << "(" << fin << ");\n";
    }
    o << "  if (threadIdx.x != 0) return;\n";
    o << "  *arrived = 0;  // for the next launch\n";
    std::set<int> done(reds.begin(), reds.end());
    for (int id : k_.nodes) {  // the row values: what the results feed
      if (done.count(id) || L_.is_full(id) || L_.is_reduction(id)) continue;
      o << define("  ", 'r', id, false);
      done.insert(id);
    }
    for (int id : k_.stores) o << "  " << out(id) << "[" << linear_index(k_.space, L_.kept_dims()) << "] = r" << id << ";\n";
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
  void write_column_reduction(std::ostringstream& o, bool split) {
    o << "  // columns: 32 kept elements a block (threadIdx.x & 31), 32 lanes over the reduced ones (threadIdx.x >> 5)"
      << (split ? ",\n  // the reduced ones shared in chunks among gridDim.y blocks" : "") << "\n";
    o << "  const int64_t cols = " << product(k_.space, L_.kept_dims()) << ", rnumel = " << product(k_.space, L_.red_dims())
      << ";\n";
    if (split) {
      o << "  const int64_t chunk = (rnumel + gridDim.y - 1) / gridDim.y;\n";
      o << "  const int64_t j_begin = blockIdx.y * chunk, j_end = min(rnumel, j_begin + chunk);\n";
      o << "  __shared__ bool last;\n";
    }
    o << "  const int64_t col = int64_t(blockIdx.x) * 32 + (threadIdx.x & 31);\n";
    o << "  const bool live = col < cols;\n";
    o << "  const int64_t r = live ? col : cols - 1;\n";
    o << "  const int lane = threadIdx.x >> 5, c = threadIdx.x & 31;\n";
    o << "  __shared__ double fold[32][33];  // a lane's partial per column (padded: no bank conflicts)\n";
    o << unflatten(k_.space, "r", L_.kept_dims(), "  ");
    RowPlan plan = L_.plan_rows(0);
    std::set<int> done;
    for (int id : k_.nodes) {  // values of the column that need no reduction
      if (L_.is_full(id) || L_.is_reduction(id) || !L_.reductions_below(id).empty()) continue;
      o << define("  ", 'r', id, false);
      done.insert(id);
    }
    for (int p = 0; p <= L_.phases(); p++) {
      std::vector<int> reds, stores;
      L_.phase_targets(p, &reds, &stores);
      if (reds.empty() && stores.empty()) continue;
      for (int id : reds) {
        const Node& n = g_.nodes[id];
        std::string A = acc_type(n);
        o << "  " << A << " acc" << id << " = " << identity(n, A) << ";\n";
      }
      o << "  #pragma unroll 4\n";
      if (split) o << "  for (int64_t j = j_begin + lane; j < j_end; j += 32) {\n";
      else o << "  for (int64_t j = lane; j < rnumel; j += 32) {\n";
      o << unflatten(k_.space, "j", L_.red_dims(), "    ");
      for (int id : k_.nodes)
        if (plan.compute[p].count(id)) o << define("    ", 't', id, false);
      for (int id : reds) {
        const Node& n = g_.nodes[id];
        std::string A = acc_type(n);
        o << "    acc" << id << " = " << combine(n) << "<" << A << ">(acc" << id << ", " << A << "("
          << cs_.expr(L_.reduction_input(id)) << "));\n";
      }
      for (int id : stores) o << "    if (live) " << out(id) << "[" << linear_full() << "] = t" << id << ";\n";
      o << "  }\n";
      for (int id : reds) write_column_fold(o, id);
      if (split && !reds.empty()) {
        for (size_t ri = 0; ri < reds.size(); ri++) {  // this block's partials, then count it in
          std::string A = acc_type(g_.nodes[reds[ri]]), N = std::to_string(reds[ri]);
          o << "  if (live && lane == 0) reinterpret_cast<" << A << "*>(&partials[(" << ri
            << " * gridDim.y + blockIdx.y) * cols + col])[0] = acc" << N << ";\n";
        }
        write_strip_arrival(o);
        for (size_t ri = 0; ri < reds.size(); ri++) write_partials_fold(o, ri, reds[ri], "acc" + std::to_string(reds[ri]), "r");
      }
      for (int id : reds) {
        const Node& n = g_.nodes[id];
        std::string fin = "acc" + std::to_string(id);
        if (n.op == OpKind::Mean) fin = "(" + fin + " / double(rnumel))";
        o << "  const " << cuda_type(n.meta.dtype) << " r" << id << " = " << cuda_type(n.meta.dtype) << "(" << fin << ");\n";
        done.insert(id);
      }
      for (int id : k_.nodes) {  // column values whose reductions are all done
        if (done.count(id) || L_.is_full(id) || L_.is_reduction(id)) continue;
        bool ready = true;
        for (int dep : L_.reductions_below(id)) ready = ready && done.count(dep);
        if (!ready) continue;
        o << define("  ", 'r', id, false);
        done.insert(id);
      }
    }
    for (int id : k_.stores)
      if (!L_.is_full(id))
        o << "  if (live && lane == 0) " << out(id) << "[" << linear_index(k_.space, L_.kept_dims()) << "] = r" << id << ";\n";
  }

  // `text` with every line indented two more spaces (a block written for the body of a loop).
  static std::string indented(const std::string& text) {
    std::string o;
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find('\n', at);
      end = end == std::string::npos ? text.size() : end + 1;
      o += "  " + text.substr(at, end - at);
      at = end;
    }
    return o;
  }

  // A Vec of `width` elements of load e from where `spelled` points; for a padded load, zeros
  // where the vector lies outside its slice (runs_along_innermost: wholly in or out).
  std::string vector_read(const Expr& e, const std::string& spelled, const std::string& width) const {
    const std::string V = "mini::Vec<" + cuda_type(e.dtype) + ", " + width + ">";
    const std::string read = "*reinterpret_cast<const " + V + "*>(&" + spelled + ")";
    if (e.index.pad_dim < 0) return read;
    const std::string x = "x" + std::to_string(e.index.pad_dim);
    return "(" + x + " >= " + std::to_string(e.index.pad_lo) + " && " + x + " < " +
           std::to_string(e.index.pad_lo + e.index.pad_len) + ") ? " + read + " : " + V + "{}";
  }

  // Whether load e reads consecutive elements along the innermost dim (a term over it of
  // stride 1, every stride static and every other one a multiple of cv): a Vec of cv elements
  // at an aligned address when the innermost index is a multiple of cv.
  bool runs_along_innermost(const Expr& e, int cv) const {
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

  // The definitions and folds of one row of the (one) pass of vector columns, as
  // write_column_reduction writes them, each accumulator acc<id><index>.
  std::string row_pass_source(const std::string& index) {
    std::vector<int> reds, stores;
    L_.phase_targets(0, &reds, &stores);
    RowPlan plan = L_.plan_rows(0);
    std::string o;
    for (int id : k_.nodes)
      if (plan.compute[0].count(id)) o += define("      ", 't', id, false);
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      std::string A = acc_type(n);
      o += "      acc" + std::to_string(id) + index + " = " + combine(n) + "<" + A + ">(acc" + std::to_string(id) + index +
           ", " + A + "(" + cs_.expr(L_.reduction_input(id)) + "));\n";
    }
    return o;
  }

  void write_vector_columns(std::ostringstream& o, int CV) {
    const std::string X = "x" + std::to_string(rank_ - 1);  // the innermost (kept) dim's index
    std::vector<int> reds, stores;
    L_.phase_targets(0, &reds, &stores);
    o << "  // columns in vectors: " << CV << " consecutive kept elements a thread, 32 threads a strip (threadIdx.x & 31),\n"
      << "  // 32 lanes over the reduced ones (threadIdx.x >> 5), shared in chunks among gridDim.y blocks\n";
    o << "  constexpr int CV = " << CV << ";\n";
    o << "  const int64_t cols = " << product(k_.space, L_.kept_dims()) << ", rnumel = " << product(k_.space, L_.red_dims())
      << ";\n";
    o << "  const int64_t chunk = (rnumel + gridDim.y - 1) / gridDim.y;\n";
    o << "  const int64_t j_begin = blockIdx.y * chunk, j_end = min(rnumel, j_begin + chunk);\n";
    o << "  __shared__ bool last;\n";
    o << "  const int64_t col0 = (int64_t(blockIdx.x) * 32 + (threadIdx.x & 31)) * CV;\n";
    o << "  const bool live = col0 < cols;\n";
    o << "  const int64_t r = live ? col0 : cols - CV;  // a thread past the end computes the last columns, stores nothing\n";
    o << "  const int lane = threadIdx.x >> 5, c = threadIdx.x & 31;\n";
    o << "  __shared__ double fold[32][33];  // a lane's partial per column, and each column's sum (padded)\n";
    o << unflatten(k_.space, "r", L_.kept_dims(), "  ");
    o << "  const int64_t " << X << "_0 = " << X << ";  // the thread's first column; column u is " << X << "_0 + u\n";
    // values of the columns that need no reduction, one a column
    std::vector<int> column_values;
    for (int id : k_.nodes)
      if (!L_.is_full(id) && !L_.is_reduction(id) && L_.reductions_below(id).empty()) column_values.push_back(id);
    for (int id : column_values) o << "  " << cuda_type(g_.nodes[id].meta.dtype) << " rv" << id << "[CV];\n";
    for (int id : reds) {
      std::string A = acc_type(g_.nodes[id]);
      o << "  " << A << " acc" << id << "[CV];\n";
    }
    o << "  #pragma unroll\n";
    o << "  for (int u = 0; u < CV; u++) {\n";
    if (!column_values.empty()) o << "    const int64_t " << X << " = " << X << "_0 + u;\n";
    for (int id : column_values) {
      o << define("    ", 'r', id, false);
      o << "    rv" << id << "[u] = r" << id << ";\n";
    }
    for (int id : reds) o << "    acc" << id << "[u] = " << identity(g_.nodes[id], acc_type(g_.nodes[id])) << ";\n";
    o << "  }\n";

    // the pass over this block's chunk of rows: vector loads at the first column, the CV
    // columns unrolled
    std::map<std::string, std::string> vectors;  // a load's spelling -> its Vec register
    std::map<std::string, Expr> vector_loads;    // ... and the load
    cs_.load_hook = [&](const Expr& e, const std::string& spelled) {
      if (runs_along_innermost(e, CV) && !vectors.count(spelled)) {
        vectors[spelled] = "v" + std::to_string(vectors.size());
        vector_loads.emplace(spelled, e);
      }
      return std::string();
    };
    row_pass_source("[u]");  // a dry run: the vector loads
    o << "  #pragma unroll 2\n";
    o << "  for (int64_t j = j_begin + lane; j < j_end; j += 32) {\n";
    o << unflatten(k_.space, "j", L_.red_dims(), "    ");
    for (auto& [spelled, name] : vectors) {
      const Expr& e = vector_loads.at(spelled);
      o << "    const mini::Vec<" << cuda_type(e.dtype) << ", CV> " << name << " = " << vector_read(e, spelled, "CV") << ";\n";
    }
    std::vector<int> full_stores;
    for (int id : k_.stores)
      if (L_.is_full(id)) full_stores.push_back(id);
    for (int id : full_stores) o << "    mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", CV> s" << id << ";\n";
    o << "    #pragma unroll\n";
    o << "    for (int u = 0; u < CV; u++) {\n";
    o << "      const int64_t " << X << " = " << X << "_0 + u;\n";
    for (int id : column_values) o << "      const " << cuda_type(g_.nodes[id].meta.dtype) << " r" << id << " = rv" << id << "[u];\n";
    cs_.load_hook = [&](const Expr&, const std::string& spelled) {
      auto it = vectors.find(spelled);
      return it == vectors.end() ? std::string() : it->second + ".v[u]";
    };
    o << row_pass_source("[u]");
    cs_.load_hook = nullptr;
    for (int id : full_stores) o << "      s" << id << ".v[u] = t" << id << ";\n";
    o << "    }\n";
    for (int id : full_stores)
      o << "    if (live) *reinterpret_cast<mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", CV>*>(&" << out(id) << "["
        << linear_full() << "]) = s" << id << ";\n";
    o << "  }\n";

    // fold each column's lanes, then the blocks' partials (the strip's last block, in order)
    o << "  #pragma unroll\n";
    o << "  for (int u = 0; u < CV; u++) {\n";
    for (int id : reds) {
      std::ostringstream fold;
      write_column_fold(fold, id, "acc" + std::to_string(id) + "[u]");
      o << indented(fold.str());
    }
    o << "  }\n";
    for (size_t ri = 0; ri < reds.size(); ri++) {
      std::string A = acc_type(g_.nodes[reds[ri]]), N = std::to_string(reds[ri]);
      o << "  if (live && lane == 0)\n";
      o << "    for (int u = 0; u < CV; u++)\n";
      o << "      reinterpret_cast<" << A << "*>(&partials[(" << ri << " * gridDim.y + blockIdx.y) * cols + col0 + u])[0] = acc" << N
        << "[u];\n";
    }
    write_strip_arrival(o);
    o << "  #pragma unroll\n";
    o << "  for (int u = 0; u < CV; u++) {\n";
    for (size_t ri = 0; ri < reds.size(); ri++) {
      std::ostringstream fold;
      write_partials_fold(fold, ri, reds[ri], "acc" + std::to_string(reds[ri]) + "[u]", "r + u");
      o << indented(fold.str());
    }
    o << "  }\n";
    // the column values, a column at a time: the sums, then what they feed; stored by lane 0
    o << "  if (!live || lane != 0) return;\n";
    o << "  #pragma unroll\n";
    o << "  for (int u = 0; u < CV; u++) {\n";
    o << "    const int64_t " << X << " = " << X << "_0 + u;\n";
    std::set<int> done;
    for (int id : column_values) {
      o << "    const " << cuda_type(g_.nodes[id].meta.dtype) << " r" << id << " = rv" << id << "[u];\n";
      done.insert(id);
    }
    for (int id : reds) {
      const Node& n = g_.nodes[id];
      std::string fin = "acc" + std::to_string(id) + "[u]";
      if (n.op == OpKind::Mean) fin = "(" + fin + " / double(rnumel))";
      o << "    const " << cuda_type(n.meta.dtype) << " r" << id << " = " << cuda_type(n.meta.dtype) << "(" << fin << ");\n";
      done.insert(id);
    }
    for (int id : k_.nodes) {
      if (done.count(id) || L_.is_full(id) || L_.is_reduction(id)) continue;
      o << define("    ", 'r', id, false);
      done.insert(id);
    }
    for (int id : k_.stores)
      if (!L_.is_full(id)) o << "    " << out(id) << "[" << linear_index(k_.space, L_.kept_dims()) << "] = r" << id << ";\n";
    o << "  }\n";
  }

  // Split columns: the block counts itself in once its partials are visible; all but the
  // strip's last block to arrive are done, and that one resets the counter for the next launch.
  void write_strip_arrival(std::ostringstream& o) {
    o << "  __threadfence();  // the partials are visible before the block counts itself\n";
    o << "  __syncthreads();\n";
    o << "  if (threadIdx.x == 0) last = atomicAdd(&arrived[blockIdx.x], 1u) == gridDim.y - 1;\n";
    o << "  __syncthreads();\n";
    o << "  if (!last) return;  // the strip's last block folds every block's partials\n";
    o << "  __threadfence();\n";
    o << "  if (threadIdx.x == 0) arrived[blockIdx.x] = 0;  // for the next launch\n";
  }

  // The strip's last block: accumulator `acc` of reduction `id` (the ri-th of the pass) folded
  // from every block's partial of column `col`, in y order (the same sum every launch), then
  // over the lanes.
  void write_partials_fold(std::ostringstream& o, size_t ri, int id, const std::string& acc, const std::string& col) {
    const Node& n = g_.nodes[id];
    const std::string A = acc_type(n);
    o << "  " << acc << " = " << identity(n, A) << ";\n";
    o << "  for (unsigned y = lane; y < gridDim.y; y += 32) {\n";
    o << "    const unsigned long long bits = __ldcg(&partials[(" << ri << " * gridDim.y + y) * cols + " << col << "]);\n";
    o << "    " << acc << " = " << combine(n) << "<" << A << ">(" << acc << ", reinterpret_cast<const " << A << "*>(&bits)[0]);\n";
    o << "  }\n";
    write_column_fold(o, id, acc);
  }

  // The 32 lanes of each column fold their accumulators of reduction `id` (`acc`, by default
  // acc<id>) through shared memory: each lane writes its partial, then warp w reads column w's
  // 32 partials (a thread each, the padded row spares bank conflicts), folds them with five
  // shuffles and leaves the result in the spare 33rd slot of fold[w], where every lane of the
  // column reads it. (Lane 0 folding the 31 others in turn was 31 dependent shared loads.)
  void write_column_fold(std::ostringstream& o, int id, std::string acc = "") {
    const Node& n = g_.nodes[id];
    std::string A = acc_type(n);
    if (acc.empty()) acc = "acc" + std::to_string(id);
    o << "  reinterpret_cast<" << A << "*>(&fold[lane][c])[0] = " << acc << ";\n";
    o << "  __syncthreads();\n";
    o << "  {\n";
    o << "    const " << A << " v = mini::warp_reduce<" << A << ", " << combine(n) << "<" << A
      << ">>(reinterpret_cast<" << A << "*>(&fold[c][lane])[0]);\n";
    o << "    if (c == 0) reinterpret_cast<" << A << "*>(&fold[lane][32])[0] = v;\n";
    o << "  }\n";
    o << "  __syncthreads();\n";
    o << "  " << acc << " = reinterpret_cast<" << A << "*>(&fold[c][32])[0];\n";
    o << "  __syncthreads();  // fold is written again by the next reduction\n";
  }

  // A persistent row (a static row of at most layout.row_registers elements a thread): each
  // thread reads its `per_thread` elements of every load that runs along the row once, into
  // registers, and each phase's pass reads them there (softmax and layer norm read the row from
  // memory once, not 3 times). With vector rows a thread's elements come in runs of `vector`
  // consecutive ones (16 bytes of the widest kept load), read as one Vec where every kept load
  // runs contiguously along the row from an aligned start: element u of a thread is
  // j = (threadIdx.x + u / vector * threads) * vector + u % vector. per_thread 0: a looped row.
  struct PersistentRow {
    int threads = 0, per_thread = 0, vector = 1;
    std::map<std::string, std::string> kept;  // a load's spelling -> its register array
    std::map<std::string, DType> types;       // ... and its element type
  };

  // Whether rows of this kernel can be persistent (static, within the layout's registers).
  bool persistent_rows() { return cuda_kernel_shape(k_, layout_) == "per"; }

  // A load that runs along the row (an index term over a reduced dim), as a dry run of every
  // pass's definitions finds it: its spelling, index terms, element type, the passes reading it.
  struct RowLoad {
    std::string spelled;  // in0[x0 * 8192 + x1 * 1]
    std::string pointer;  // in0
    std::vector<IndexTerm> terms;
    DType dtype = DType::Float32;
    std::set<int> passes;
    bool padded = false;  // a slice_backward's read (Index::pad_dim): element by element, masked
  };

  std::vector<RowLoad> row_loads(const RowPlan& plan) {  // in the order first read
    std::set<int64_t> red(L_.red_dims().begin(), L_.red_dims().end());
    std::vector<RowLoad> loads;
    std::map<std::string, size_t> at;
    int pass = 0;
    cs_.load_hook = [&](const Expr& e, const std::string& spelled) {
      bool along_row = false;
      for (const IndexTerm& t : e.index.terms) along_row = along_row || red.count(t.dim);
      if (!along_row) return std::string();
      auto [it, fresh] = at.emplace(spelled, loads.size());
      if (fresh)
        loads.push_back({spelled, spelled.substr(0, spelled.find('[')), e.index.terms, e.dtype, {}, e.index.pad_dim >= 0});
      loads[it->second].passes.insert(pass);
      return std::string();
    };
    for (pass = 0; pass <= L_.phases(); pass++) {
      std::vector<int> reds, stores;
      L_.phase_targets(pass, &reds, &stores);
      for (int id : k_.nodes)
        if (plan.compute[pass].count(id)) define("", 't', id, false);
      for (int id : reds) cs_.expr(L_.reduction_input(id));
    }
    cs_.load_hook = nullptr;
    return loads;
  }

  // Whether each load runs with unit stride along the row and static strides elsewhere, each
  // a multiple of V: every row's run then starts V-aligned where the pointer is.
  bool runs_in_vectors(const std::vector<const RowLoad*>& loads, int V) const {
    std::set<int64_t> red(L_.red_dims().begin(), L_.red_dims().end());
    for (const RowLoad* l : loads)
      for (const IndexTerm& t : l->terms)
        if (t.axis >= 0 || (red.count(t.dim) ? t.stride != 1 : t.stride % V != 0)) return false;
    return true;
  }

  PersistentRow plan_persistent_row(const RowPlan& plan) {
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
      if (l.padded || (layout_.lean_rows && l.passes.size() < 2)) continue;
      row.kept[l.spelled] = "k" + std::to_string(row.kept.size());
      row.types[l.spelled] = l.dtype;
      kept.push_back(&l);
      widest = std::max(widest, (size_t)itemsize(l.dtype));
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
  void write_row_reads(std::ostringstream& o, const PersistentRow& row, const std::string& I, Begin pass_begin,
                       End pass_end) {
    const std::string LL = I == "int" ? "" : "LL";
    const int T = row.threads, U = row.per_thread, V = row.vector;
    for (auto& [spelled, name] : row.kept)
      o << "    " << cuda_type(row.types.at(spelled)) << " " << name << "[" << U << "];  // " << spelled << " along the row\n";
    auto scalar_reads = [&](const std::string& pad) {
      pass_begin(pad);
      o << unflatten(k_.space, "j", L_.red_dims(), pad + "  ", I);
      for (auto& [spelled, name] : row.kept) o << pad << "  " << name << "[u] = " << spelled << ";\n";
      pass_end(pad);
    };
    if (V == 1) {
      scalar_reads("    ");
      return;
    }
    o << "    if (true";
    for (auto& [spelled, name] : row.kept)
      o << " && mini::aligned<" << cuda_type(row.types.at(spelled)) << ", " << V << ">(&" << spelled.substr(0, spelled.find('['))
        << "[0])";
    o << ") {  // the row in " << V << "-element vectors\n";
    o << "      #pragma unroll\n      for (int v = 0; v < " << U / V << "; v++) {\n";
    o << "        const " << I << " j = (" << lane_ << " + v * " << T << LL << ") * " << V << ";\n";
    o << "        if (j >= rnumel) continue;\n";
    o << unflatten(k_.space, "j", L_.red_dims(), "        ", I);
    for (auto& [spelled, name] : row.kept) {
      std::string T0 = cuda_type(row.types.at(spelled));
      o << "        const mini::Vec<" << T0 << ", " << V << "> " << name << "v = *reinterpret_cast<const mini::Vec<" << T0 << ", "
        << V << ">*>(&" << spelled << ");\n";
      o << "        #pragma unroll\n        for (int l = 0; l < " << V << "; l++) " << name << "[v * " << V << " + l] = " << name
        << "v.v[l];\n";
    }
    o << "      }\n    } else {\n";
    scalar_reads("      ");
    o << "    }\n";
  }

  // The maxes of the online pairs among `reds` (LoopKernel::online_max).
  std::set<int> running_maxes(const std::vector<int>& reds) const {
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
  void write_block_reductions(std::ostringstream& o, const std::vector<int>& reds, std::set<int>* done) {
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

  // The looped vector rows' plan: the loads along the row (each read as Vec k<n>), V lanes.
  struct VectorRows {
    RowPlan plan;
    std::vector<RowLoad> loads;
    std::map<std::string, std::string> names;  // a load's spelling -> its Vec variable
    int V = 0;
  };

  // Whether the kernel is of the looped vector rows' shape (the layout's, the row the
  // innermost dim, static, whole vectors, every load along it contiguous); its plan in *rows.
  bool vector_loop_shape(VectorRows* rows) {
    *rows = VectorRows();
    if (!layout_.vector_loop_rows || L_.red_dims().size() != 1 || L_.red_dims()[0] != rank_ - 1) return false;
    const int64_t R = L_.static_extent(L_.red_dims());
    if (R <= 0) return false;
    rows->plan = L_.plan_rows(0);
    rows->loads = row_loads(rows->plan);
    std::vector<const RowLoad*> all;
    size_t widest = 1;
    for (const RowLoad& l : rows->loads) {
      if (l.padded) return false;  // read in vectors, a padded load would not be masked
      all.push_back(&l);
      rows->names[l.spelled] = "k" + std::to_string(rows->names.size());
      widest = std::max(widest, (size_t)itemsize(l.dtype));
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
  void write_vector_loop_reduction(std::ostringstream& o, const VectorRows& rows) {
    const RowPlan& plan = rows.plan;
    const std::vector<RowLoad>& loads = rows.loads;
    const std::map<std::string, std::string>& names = rows.names;
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
    auto ready_row_values = [&](const std::string& pad) {  // row values whose reductions are done
      for (int id : k_.nodes) {
        if (done.count(id) || L_.is_full(id) || L_.is_reduction(id)) continue;
        bool ready = true;
        for (int dep : L_.reductions_below(id)) ready = ready && done.count(dep);
        if (!ready) continue;
        o << define(pad, 'r', id, false);
        done.insert(id);
      }
    };
    ready_row_values("    ");
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
      // An online pair's running max m<id> (its sum's exp reads it): the max over the vector's
      // lanes first, then the sum rescaled once a vector.
      auto rescale = [&](const std::string& pad) {
        for (int id : reds)
          if (int m = L_.online_max(id); m >= 0) {
            std::string A = acc_type(g_.nodes[id]), M = std::to_string(m);
            o << pad << "acc" << id << " *= mini::online_scale<" << A << ">(" << A << "(acc" << M << "), " << A << "(m" << M << "));\n";
          }
        for (int id : running) o << pad << "acc" << id << " = m" << id << ";\n";
      };
      // `target` = the max of `base` and this element's input to max `id`
      auto running_max = [&](const std::string& pad, int id, const std::string& target, const std::string& base) {
        std::string A = acc_type(g_.nodes[id]);
        o << pad << target << " = " << combine(g_.nodes[id]) << "<" << A << ">(" << base << ", " << A << "("
          << cs_.expr(L_.reduction_input(id)) << "));\n";
      };
      auto body = [&](const std::string& pad) {  // one lane's values, folded, stored
        for (int id : k_.nodes)
          if (plan.compute[p].count(id)) o << define(pad, 't', id, false);
        for (int id : reds) {
          if (running.count(id)) continue;
          const Node& n = g_.nodes[id];
          std::string A = acc_type(n);
          o << pad << "acc" << id << " = " << combine(n) << "<" << A << ">(acc" << id << ", " << A << "("
            << cs_.expr(L_.reduction_input(id)) << "));\n";
        }
        for (int id : stores) o << pad << "w" << id << ".v[l] = t" << id << ";\n";
      };
      cs_.temp_hook = [&](const Expr& e) {  // -inf, while every element so far is -inf, reads as 0
        return e.row && running.count(e.node) ? "mini::online_shift(m" + std::to_string(e.node) + ")" : std::string();
      };
      bool reads = false;
      for (const RowLoad& l : loads) reads = reads || l.passes.count(p);
      const bool again = reread && reads;
      if (again) {
        // A pass that reads the row again. Unrolled, every pass is straight-line code, and the
        // compiler keeps the first pass's loads in registers for this one (the input is const
        // __restrict__): layer norm's three passes of 8 vectors spilled 168 bytes a thread
        // under __launch_bounds__ and ran 3x slower (0.42 against 0.14 ms on the H200). An empty
        // asm that "changes" each pointer the pass reads hides from the optimizer that its
        // addresses are the earlier pass's, so the pass loads again (from L1/L2). The pointers,
        // not the index: a zero added to the index cost layer norm address registers (12 bytes
        // of spill a thread, 0.144 ms against 0.136 with the pointers hidden; H200, 2026-12-02,
        // labs/bench/cuda_kernel_variants.py).
        std::set<std::string> hidden;
        for (const RowLoad& l : loads)
          if (l.passes.count(p) && *l.passes.begin() < p && hidden.insert(l.pointer).second)
            o << "    asm volatile(\"\" : \"+l\"(" << l.pointer << "));  // read the row again, not kept\n";
      }
      reread = reread || reads;
      if (unrolled) {
        int by = layout_.unroll_rows ? layout_.unroll_rows : trips > 8 ? 4 : 0;  // 0: all of it
        // NVRTC's time grows with the inlined copies of the math: each unrolled iteration holds
        // V lanes of every transcendental of the pass. At most kUnrolledTranscendentals copies:
        // softmax's passes (an exp a lane) unroll by 2, layer norm's (none) fully; the full unroll
        // took softmax's compile to 0.2 s, by 2 0.12 s, at the same speed (notes/perf.md).
        int heavy = 0;
        for (int id : k_.nodes) heavy += plan.compute[p].count(id) && CStyle::calls_math(*L_.expr(id, false));
        if (heavy) {
          int most = std::max(1, kUnrolledTranscendentals / (V * heavy)), eff = by ? by : trips;
          while (eff > most) eff /= 2;
          by = std::max(1, eff) == trips ? 0 : std::max(1, eff);
        }
        o << "    #pragma unroll" << (by && by < trips ? " " + std::to_string(by) : std::string()) << "\n";
        o << "    for (int it = 0; it < " << trips << "; it++) {  // " << vectors << " vectors, " << T << " threads\n";
        o << "      const " << I << " jv = " << lane_ << " + it * " << T << ";\n";
      } else {
        o << "    for (" << I << " jv = " << lane_ << "; jv < rnumel / " << V << "; jv += " << row_threads_ << ") {\n";
      }
      o << "      const " << I << " j0 = jv * " << V << ";\n";
      for (const RowLoad& l : loads) {
        if (!l.passes.count(p)) continue;
        const std::string& spelled = l.spelled;
        std::string vec = "mini::Vec<" + cuda_type(l.dtype) + ", " + std::to_string(V) + ">";
        o << "      " << vec << " " << names.at(spelled) << ";\n";
        o << "      {\n" << unflatten(k_.space, "j0", L_.red_dims(), "        ", I);
        o << "        " << names.at(spelled) << " = *reinterpret_cast<const " << vec << "*>(&" << spelled << ");\n";
        o << "      }\n";
      }
      for (int id : stores)
        o << "      mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", " << V << "> w" << id << ";\n";
      cs_.load_hook = [&](const Expr&, const std::string& spelled) {  // every load along the row is in `names`
        auto it = names.find(spelled);
        return it == names.end() ? std::string() : it->second + ".v[l]";
      };
      for (int id : running) {
        o << "      " << acc_type(g_.nodes[id]) << " m" << id << " = acc" << id << ";\n";
        o << "      #pragma unroll\n      for (int l = 0; l < " << V << "; l++) {\n";
        o << "        const " << I << " j = j0 + l;\n";
        o << unflatten(k_.space, "j", L_.red_dims(), "        ", I);
        for (int v : L_.full_values_for({id})) o << define("        ", 't', v, false);  // what the max reads
        running_max("        ", id, "m" + std::to_string(id), "m" + std::to_string(id));
        o << "      }\n";
      }
      rescale("      ");
      o << "      #pragma unroll\n      for (int l = 0; l < " << V << "; l++) {\n";
      o << "        const " << I << " j = j0 + l;\n";
      o << unflatten(k_.space, "j", L_.red_dims(), "        ", I);
      body("        ");
      cs_.load_hook = nullptr;
      o << "      }\n";
      if (!stores.empty()) {
        o << "      {\n" << unflatten(k_.space, "j0", L_.red_dims(), "        ", I);
        for (int id : stores)
          o << "        *reinterpret_cast<mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", " << V << ">*>(&" << out(id)
            << "[" << linear_full() << "]) = w" << id << ";\n";
        o << "      }\n";
      }
      o << "    }\n";
      cs_.temp_hook = nullptr;
      write_block_reductions(o, reds, &done);
      ready_row_values("    ");
    }
    bool row_stores = false;
    for (int id : k_.stores) row_stores = row_stores || !L_.is_full(id);
    if (row_stores) {
      o << "    if (" << lane_ << " == 0) {\n";
      for (int id : k_.stores)
        if (!L_.is_full(id)) o << "      " << out(id) << "[" << linear_index(k_.space, L_.kept_dims()) << "] = r" << id << ";\n";
      o << "    }\n";
    }
    o << "  }\n";
  }

  void write_reduction(std::ostringstream& o) {
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
    if (U) {
      write_row_reads(o, row, I, pass_begin, pass_end);
      cs_.load_hook = [&](const Expr&, const std::string& spelled) {  // each pass reads the registers
        auto it = row.kept.find(spelled);
        return it == row.kept.end() ? std::string() : it->second + "[u]";
      };
    }
    std::set<int> done;
    for (int id : k_.nodes) {  // row values that need no reduction
      if (L_.is_full(id) || L_.is_reduction(id) || !L_.reductions_below(id).empty()) continue;
      o << define("    ", 'r', id, false);
      done.insert(id);
    }
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
          o << define("      ", 't', id, false);
          if (plan.scratch.count(id)) o << "      s" << id << "[u] = t" << id << ";\n";
        }
        for (int id : reds) {
          const Node& n = g_.nodes[id];
          std::string A = acc_type(n);
          o << "      acc" << id << " = " << combine(n) << "<" << A << ">(acc" << id << ", " << A << "("
            << cs_.expr(L_.reduction_input(id)) << "));\n";
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
        if (vector_stores && !stores.empty()) {
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
            o << "      else\n        #pragma unroll\n        for (int l = 0; l < " << V << "; l++) (&" << out(id) << "[" << linear_full() << "])[l] = w" << id
              << "v.v[l];\n";
          }
          o << "    }\n";
        }
        write_block_reductions(o, reds, &done);
      }
      for (int id : k_.nodes) {  // row values whose reductions are all done
        if (done.count(id) || L_.is_full(id) || L_.is_reduction(id)) continue;
        bool ready = true;
        for (int dep : L_.reductions_below(id)) ready = ready && done.count(dep);
        if (!ready) continue;
        o << define("    ", 'r', id, false);
        done.insert(id);
      }
    }
    bool row_stores = false;
    for (int id : k_.stores) row_stores = row_stores || !L_.is_full(id);
    if (row_stores) {
      o << "    if (" << lane_ << " == 0) {\n";
      for (int id : k_.stores)
        if (!L_.is_full(id))
          o << "      " << out(id) << "[" << linear_index(k_.space, L_.kept_dims()) << "] = r" << id << ";\n";
      o << "    }\n";
    }
    o << "  }\n";
    cs_.load_hook = nullptr;
  }

  const LoopKernel L_;
  const Schedule& s_;
  const graph::Graph& g_;
  const FusionGroup& k_;
  CStyle cs_;
  const int rank_;
  const CudaLayout layout_;
  // A warp per row (warp_rows_ rows a block, cuda_rows_per_block) or a block per row: how the
  // row writers spell a thread's place in its row, the threads of a row, and the rows a block
  // takes in turn.
  const int warp_rows_;
  int column_vector_ = -1;  // column_vector(), once decided
  const int row_lanes_;  // a reduction's threads per row (cuda_reduction_threads)
  std::string lane_ = "threadIdx.x", row_threads_ = "blockDim.x", first_row_ = "blockIdx.x", row_step_ = "gridDim.x";

  // Rows shared out within a block: each thread's lane (its place in its row) and its warp's
  // first row, defined at the kernel's top.
  void define_warp_rows(std::ostringstream& o) const {
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
  std::string row_loop(const std::string& I) const {
    std::ostringstream o;
    if (warp_rows_ > 1 && row_lanes_ < 32) {
      o << "  for (int64_t r_warp = first_row; r_warp < rows; r_warp += row_step) {\n";
      o << "    const " << I << " r = " << I << "(r_warp + sub_row < rows ? r_warp + sub_row : rows - 1);\n";
    } else {
      o << "  for (" << I << " r = " << first_row_ << "; r < rows; r += " << row_step_ << ") {\n";
    }
    return o.str();
  }
};

}  // namespace

std::string render_cuda(const Schedule& s, const CudaLayout& layout) {
  return render_cuda(s, std::vector<CudaLayout>(s.groups.size(), layout));
}

std::string render_cuda(const Schedule& s, const std::vector<CudaLayout>& layouts) {
  return join_cuda(render_cuda_kernels(s, layouts), layouts);
}

std::string cuda_prelude() { return kCudaPreludeTypes + scalar_math_prelude() + kCudaPrelude; }

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

CudaLayout cuda_layout(int number) {
  if (number < 1 || number > kCudaLayouts)
    fail("MINI_CODEGEN_LAYOUT=", number, ": the CUDA kernel layouts are 1 (naive) to ", kCudaLayouts,
         " (codegen/cuda_kernel.h lists them)");
  CudaLayout l;
  l.number = number;
  l.vector_pointwise = number >= 2;
  l.row_registers = number == 1 ? 0 : number == 2 || number == 6 ? 8 : number == 4 ? 32 : 16;
  l.vector_rows = number >= 3;
  l.lean_rows = number >= 5;
  l.row_max_registers = number >= 6 ? 32 : 64;
  l.vector_loop_rows = number >= 7;
  if (number >= 7) l.row_registers = 0;
  l.online_softmax = number >= 8;
  l.unroll_rows = number >= 9 ? (number == 10 ? 2 : 0) : -1;
  l.pointwise_one_pass = number == 11;
  l.warp_rows = number == 1 ? 1 : 8;
  return l;
}

CudaLayout cuda_layout_from_env() {
  const char* v = std::getenv("MINI_CODEGEN_LAYOUT");
  if (!v || !*v) return cuda_layout(kCudaDefaultLayout);
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end) fail("MINI_CODEGEN_LAYOUT='", v, "': give a layout number, 1 to ", kCudaLayouts);
  return cuda_layout((int)n);
}

// ---- a reduction kernel's layout (A10) ----------------------------------------------------------
// How a reduction kernel's threads meet its rows. A block per row: a row of up to 32 x (the
// elements a thread holds) gets one warp, whose combine is five shuffles (block_reduce stops
// there); a longer row, more warps, up to 1024 threads, whose combine adds a round through
// shared memory. A row held in registers ("per") is read from memory once; a looped row
// ("red") is read again by each pass. One long row alone (a full reduction) is split over many
// blocks, each folding a share, the last one to arrive folding the partials.

int cuda_reduction_threads(int64_t rnumel, const CudaLayout& layout) {
  // Contract: the threads that reduce one row of `rnumel` elements (-1: a size known only at
  // run time), under `layout`. A power of two, at most 1024; at least 32 where the layout puts
  // one row in a block (layout.warp_rows == 1: block_reduce needs whole warps), else at least 1
  // (rows of 32 threads or fewer share a block: cuda_rows_per_block).
  //  - layout.vector_loop_rows (looped rows read in vectors, layouts 7 and up) and a known
  //    length: the fewest threads that give each thread at most 4 elements, but never more
  //    than 512;
  //  - a symbolic length, or a layout that holds no row in registers (row_registers == 0): a
  //    looped row of kCudaThreads;
  //  - else the row is to be held in registers, about row_registers elements a thread: the
  //    fewest threads with threads x row_registers >= rnumel, 1024 at most.
  // A10 BEGIN: a CUDA reduction's layout
  const int fewest = layout.warp_rows > 1 ? 1 : 32;
  if (layout.vector_loop_rows && rnumel > 0) {  // looped rows: up to 512, 4 elements a thread at least
    int threads = fewest;
    while (threads < 512 && int64_t(threads) * 4 < rnumel) threads *= 2;
    return threads;
  }
  if (rnumel < 0 || layout.row_registers == 0) return kCudaThreads;  // a looped row
  int threads = fewest;  // about row_registers elements a thread, 1024 at most
  while (threads < 1024 && int64_t(threads) * layout.row_registers < rnumel) threads *= 2;
  return threads;
  // A10 END
}

bool cuda_column_reduction(const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty() || layout.number == 1) return false;
  const int64_t last = (int64_t)k.space.size() - 1;
  if (std::count(k.reduced.begin(), k.reduced.end(), last)) return false;  // the innermost dim is reduced: rows
  int64_t cols = 1, rnumel = 1;
  for (int64_t d = 0; d <= last; d++) {
    if (k.space[d] < 0) return false;  // a symbolic size: the row layouts take any
    (std::count(k.reduced.begin(), k.reduced.end(), d) ? rnumel : cols) *= k.space[d];
  }
  return cols >= 32 && rnumel >= 32;
}

int cuda_column_splits(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  if (!cuda_column_reduction(k, layout)) return 0;
  LoopKernel L(s, k);
  if (L.phases() != 1) return 0;  // one pass: no reduction of a reduction's result
  std::vector<int> reds, stores, later_reds, later_stores;
  L.phase_targets(0, &reds, &stores);
  L.phase_targets(1, &later_reds, &later_stores);
  return later_stores.empty() ? (int)reds.size() : 0;  // a full value stored after the column sums needs all of them
}

int cuda_column_vector(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  return cuda_column_reduction(k, layout) ? CudaKernelWriter(s, k, layout).column_vector() : 1;
}

int64_t cuda_column_split_grid(int64_t cols, int64_t rnumel, int sms, int vector) {
  const int64_t strips = (cols / vector + 31) / 32;
  // blocks of 1024 threads, two an SM: fill the GPU twice over, each lane folding 8 rows at least
  // (4 rows of `vector` elements in vector columns: layer norm's 768 float32 columns are 6
  // strips, which 8 rows a lane left at 192 blocks)
  const int64_t rows_a_lane = vector > 1 ? 4 : 8;
  const int64_t want = (2 * int64_t(sms) + strips - 1) / strips, most = std::max<int64_t>(1, rnumel / (32 * rows_a_lane));
  return std::max<int64_t>(1, std::min({want, most, cuda_column_max_splits()}));
}

std::string cuda_kernel_shape(const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty()) return "poi";
  if (cuda_column_reduction(k, layout)) return "col";
  // Contract: "per" where each row is held in registers — its length R is known, the layout
  // holds rows (row_registers > 0) and the threads cuda_reduction_threads gives such a row hold
  // all of it at row_registers elements a thread — else "red" (the row looped over, any length).
  // A10 BEGIN: a CUDA reduction's layout
  const int64_t R = cuda_row_length(k);  // -1 where a size is symbolic
  bool held = R > 0 && layout.row_registers && R <= int64_t(cuda_reduction_threads(R, layout)) * layout.row_registers;
  return held ? "per" : "red";
  // A10 END
}

int cuda_rows_per_block(int64_t rnumel, const CudaLayout& layout) {
  // Contract: the rows one block reduces at once. Where a row's threads
  // (cuda_reduction_threads) are a warp or fewer, the rows of layout.warp_rows warps: a warp
  // per row, or 32 / threads rows a warp (a thread per row at the least), each row's lanes
  // combining it with shuffles alone (warp_reduce); else 1, a block per row (block_reduce:
  // shuffles, then the warps' values through shared memory).
  // A10 BEGIN: a CUDA reduction's layout
  const int threads = cuda_reduction_threads(rnumel, layout);
  return threads <= 32 ? layout.warp_rows * (32 / threads) : 1;
  // A10 END
}

int cuda_block(const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty()) return kCudaThreads;
  if (cuda_column_reduction(k, layout)) return 1024;  // 32 kept elements x 32 lanes
  const int64_t R = cuda_row_length(k);
  return cuda_reduction_threads(R, layout) * cuda_rows_per_block(R, layout);
}

int cuda_min_blocks_per_sm(int threads, const CudaLayout& layout) {
  // Contract: the blocks of `threads` threads that must fit on one SM at once (the second
  // number of __launch_bounds__, which caps each thread's registers for it): as many as the
  // SM's 65536 registers allow at layout.row_max_registers a thread, and its limits of 2048
  // threads and 32 blocks; at least 1.
  // A10 BEGIN: a CUDA reduction's layout
  return std::max(1, std::min({65536 / layout.row_max_registers / threads, 2048 / threads, 32}));
  // A10 END
}

int cuda_split_reductions(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty() || layout.number == 1) return 0;
  // Contract: where kernel k is one row (every kept dim is 1) reduced in one pass (one phase:
  // no reduction of a reduction's result) and stores no full-size value (every store is a
  // reduction's result), the reductions of that pass (the partials each block writes); else 0
  // (a block per row). LoopKernel(s, k) knows the phases (phases(), phase_targets) and which
  // stores are full (is_full).
  // A10 BEGIN: a CUDA reduction's layout
  for (int64_t d = 0; d < (int64_t)k.space.size(); d++)  // one row: every kept dim is 1
    if (!std::count(k.reduced.begin(), k.reduced.end(), d) && k.space[d] != 1) return 0;
  LoopKernel L(s, k);
  if (L.phases() != 1) return 0;  // one pass: no reduction of a reduction's result
  std::vector<int> reds, stores;
  L.phase_targets(0, &reds, &stores);
  for (int id : k.stores)
    if (L.is_full(id)) return 0;
  return (int)reds.size();
  // A10 END
}

bool cuda_assumes_aligned(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  return CudaKernelWriter(s, k, layout).assumes_aligned();
}

int64_t cuda_grid(const Schedule& s, const FusionGroup& k, const CudaLayout& layout, const std::vector<int64_t>& symbols,
                  int sms, int column_vector) {
  auto extent = [&](const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= graph::is_symbol(k.space[d]) ? symbols[graph::symbol_index(k.space[d])] : k.space[d];
    return n;
  };
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < (int64_t)k.space.size(); d++)
    if (!std::count(k.reduced.begin(), k.reduced.end(), d)) kept.push_back(d);
  if (cuda_column_reduction(k, layout))  // 32 x column_vector kept elements a block
    return std::max<int64_t>(1, (extent(kept) / column_vector + 31) / 32);
  const int rows_a_block = k.reduced.empty() ? 1 : cuda_rows_per_block(cuda_row_length(k), layout);
  int64_t work = k.reduced.empty() ? (extent(kept) + kCudaThreads - 1) / kCudaThreads
                                   : (extent(kept) + rows_a_block - 1) / rows_a_block;
  if (k.reduced.empty() && layout.pointwise_one_pass && layout.vector_pointwise) {
    // a thread a vector: V from the widest of every load and store (the writer's V counts only
    // contiguous loads, so it is at least this one: never fewer threads than vectors)
    size_t widest = 1;
    for (int id : k.loads) widest = std::max(widest, itemsize(s.graph.nodes[id].meta.dtype));
    for (int id : k.stores) widest = std::max(widest, itemsize(s.graph.nodes[id].meta.dtype));
    int64_t threads = kCudaThreads * int64_t(16 / widest);
    return std::max<int64_t>(1, std::min<int64_t>((extent(kept) + threads - 1) / threads, 0x7fffffff));
  }
  // enough blocks to fill the GPU many times over; grid-stride loops take the rest
  return std::max<int64_t>(1, std::min<int64_t>(work, int64_t(sms) * 64));
}

int64_t cuda_split_grid(int64_t rnumel, int threads, int sms) {
  // Contract: the blocks a split row of `rnumel` elements is shared among, in blocks of
  // `threads`: enough that each thread folds at least 16 elements (fewer blocks for a short
  // row: each block's partial and the last block's fold cost more than they save), at least 1
  // and at most cuda_split_max_grid(sms) (the partials hold that many a reduction).
  // A10 BEGIN: a CUDA reduction's layout
  int64_t want = (rnumel + int64_t(threads) * 16 - 1) / (int64_t(threads) * 16);  // 16 elements a thread at least
  return std::max<int64_t>(1, std::min<int64_t>(want, cuda_split_max_grid(sms)));
  // A10 END
}

int64_t cuda_split_max_grid(int sms) { return int64_t(sms) * 2; }

}  // namespace mini::codegen
