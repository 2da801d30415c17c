// cuda/reduce.cu — sum, mean, amax, amin over any dims; max/min along a dim with the first
// index; nonzero. The CUDA twin of reduce.cpp (same NaN and empty-reduction rules).
//
// The input is seen as [kept] x [reduced] (size-1 dims dropped, adjacent dims that are one
// run of memory merged). Two kernels cover every layout:
//   rows    — a warp (short rows) or a block (long rows) reduces one output's elements:
//             16-byte vector loads when the reduced elements are one contiguous run, a
//             StridedIndex walk otherwise; warp shuffles, then shared memory across warps.
//             Few long rows (a full reduction above all) are split over many blocks that
//             write partial results to a scratch buffer, and a second launch combines them:
//             two launches, one eager kernel to the caller (torch's reduce splits the same
//             way, with a semaphore instead of a second launch).
//   columns — a thread per output walks its reduced elements: neighbouring threads read
//             neighbouring addresses when the kept dims are the inner ones (x.sum(0)).
//             Long columns with too few outputs to fill the device split the same way.
// Accumulators: float for float32/bfloat16, double for float64, int64 for int64/bool.
#include <algorithm>
#include <optional>
#include <vector>

#include "block_reduce.cuh"
#include "common.cuh"
#include "kernels.h"

namespace mini::cuda {

namespace {

template <class T> struct AccOf { using type = opmath_t<T>; };
template <> struct AccOf<bool> { using type = int64_t; };
template <class T> using acc_t = typename AccOf<T>::type;

template <class Op, class A>
__device__ __forceinline__ A identity() {
  if constexpr (std::is_same_v<Op, SumOp>) {
    return A(0);
  } else if constexpr (std::is_floating_point_v<A>) {
    return std::is_same_v<Op, MaxOp> ? A(-INFINITY) : A(INFINITY);
  } else {
    return std::is_same_v<Op, MaxOp> ? A(INT64_MIN) : A(INT64_MAX);
  }
}

template <class A, class T>
__device__ __forceinline__ A to_acc(T x) {
  return A(opmath_t<T>(x));
}

// Mean divides by the reduced count (0/0 is NaN: the mean of nothing, as torch).
struct Finish {
  bool mean = false;
  int64_t count = 0;
  template <class O, class A> __device__ __forceinline__ O operator()(A acc) const {
    if constexpr (std::is_floating_point_v<A>) {
      if (mean) acc = acc / A(count);
    }
    if constexpr (std::is_same_v<O, bfloat16>) return O(float(acc));
    else return O(acc);
  }
};

struct RowArgs {
  StridedIndex kept;    // output index -> offset of its first element
  StridedIndex red;     // reduced index -> offset (unused when the run is contiguous)
  int64_t rows = 0;     // outputs
  int64_t n = 0;        // elements reduced per output
  int64_t splits = 1;   // blocks per output (> 1: partial results to scratch)
  int64_t chunk = 0;    // elements per split
  int group = kWarp;    // threads per (output, split): 32 or blockDim.x
  Finish finish;
};

// Reduces p[0, len) (contiguous) in the `lanes` threads of a group, this thread being `lane`:
// scalar head up to 16-byte alignment, vectors (four loads in flight, each folded into its own
// accumulator so that the four dependency chains of adds or compare-selects overlap), scalar
// tail. kAccs 1 (every load folded into one accumulator): a variant for the sweep
// (tests/cuda/bench_cuda_sweep.cpp).
template <class Op, int kAccs, class A, class T>
__device__ __forceinline__ A reduce_run(const T* p, int64_t len, int lane, int lanes, A acc) {
  static_assert(kAccs == 1 || kAccs == 4);
  using V = Vec<T>;
  constexpr int N = V::kSize;
  int64_t head = (16 - reinterpret_cast<uintptr_t>(p) % 16) % 16 / sizeof(T);
  head = head < len ? head : len;
  for (int64_t j = lane; j < head; j += lanes) acc = Op::apply(acc, to_acc<A>(p[j]));
  const V* vp = reinterpret_cast<const V*>(p + head);
  int64_t nvec = (len - head) / N;
  int64_t i = lane;
  A accs[4] = {acc, identity<Op, A>(), identity<Op, A>(), identity<Op, A>()};  // kAccs used
  for (; i + 3 * lanes < nvec; i += 4 * lanes) {
    V v[4];
#pragma unroll
    for (int u = 0; u < 4; u++) v[u] = vp[i + u * lanes];
#pragma unroll
    for (int u = 0; u < 4; u++)
#pragma unroll
      for (int e = 0; e < N; e++)
        accs[u % kAccs] = Op::apply(accs[u % kAccs], to_acc<A>(v[u].v[e]));
  }
  for (; i < nvec; i += lanes) {
    V v = vp[i];
#pragma unroll
    for (int e = 0; e < N; e++) accs[0] = Op::apply(accs[0], to_acc<A>(v.v[e]));
  }
  if constexpr (kAccs == 4)
    acc = Op::apply(Op::apply(accs[0], accs[1]), Op::apply(accs[2], accs[3]));
  else
    acc = accs[0];
  for (int64_t j = head + nvec * N + lane; j < len; j += lanes) acc = Op::apply(acc, to_acc<A>(p[j]));
  return acc;
}

// A group of `args.group` threads per (output, split) pair; the pair loop is uniform across a
// group, so the warp or block reduction below is reached by all of its threads.
template <class T, class O, class A, class Op, bool kContiguous, int kAccs>
__device__ __forceinline__ void reduce_rows(const T* in, O* out, A* partial, const RowArgs& args) {
  __shared__ A shared[kWarp];
  int group = args.group, lane = threadIdx.x % group;
  int64_t groups_per_block = blockDim.x / group;
  int64_t pairs = args.rows * args.splits;
  for (int64_t pair = blockIdx.x * groups_per_block + threadIdx.x / group; pair < pairs;
       pair += int64_t(gridDim.x) * groups_per_block) {
    int64_t row = pair / args.splits, split = pair % args.splits;
    int64_t begin = split * args.chunk;
    int64_t end = begin + args.chunk < args.n ? begin + args.chunk : args.n;
    int64_t base = args.kept.offset(row);
    A acc = identity<Op, A>();
    if constexpr (kContiguous) {
      if (begin < end)
        acc = reduce_run<Op, kAccs>(in + base + begin, end - begin, lane, group, acc);
    } else {
      for (int64_t j = begin + lane; j < end; j += group)
        acc = Op::apply(acc, to_acc<A>(in[base + args.red.offset(j)]));
    }
    acc = group == kWarp ? warp_reduce<Op>(acc) : block_reduce<Op>(acc, shared);
    if (lane == 0) {
      if (args.splits == 1) out[row] = args.finish.template operator()<O>(acc);
      else partial[pair] = acc;
    }
  }
}

template <class T, class O, class A, class Op, bool kContiguous, int kAccs = 4>
__global__ void reduce_rows_kernel(const T* in, O* out, A* partial, RowArgs args) {
  reduce_rows<T, O, A, Op, kContiguous, kAccs>(in, out, partial, args);
}

// The same kernel with launch bounds that limit nothing (1024 threads, a block an SM), for
// contiguous rows of a block each (launch_reduce), with which ptxas (CUDA 13.0, sm_90) issues reduce_run's four loads before the
// first add, in 56 registers; without bounds, or with a thread count alone, it issues two,
// then adds, in 40-42.
template <class T, class O, class A, class Op, bool kContiguous, int kAccs>
__global__ void __launch_bounds__(1024, 1)
    reduce_rows_bounded_kernel(const T* in, O* out, A* partial, RowArgs args) {
  reduce_rows<T, O, A, Op, kContiguous, kAccs>(in, out, partial, args);
}

// The second launch of a split reduction: a block combines one output's partial results.
template <class O, class A, class Op>
__global__ void reduce_partials_kernel(const A* partial, O* out, int64_t splits, Finish finish) {
  __shared__ A shared[kWarp];
  const A* p = partial + int64_t(blockIdx.x) * splits;
  A acc = identity<Op, A>();
  for (int64_t j = threadIdx.x; j < splits; j += blockDim.x) acc = Op::apply(acc, p[j]);
  acc = block_reduce<Op>(acc, shared);
  if (threadIdx.x == 0) out[blockIdx.x] = finish.template operator()<O>(acc);
}

// A thread per output; blockIdx.y splits long columns (partial results to scratch, as the
// row kernel's splits). kOneDim: the reduced elements are `step` apart.
template <class T, class O, class A, class Op, bool kOneDim>
__global__ void reduce_columns_kernel(const T* in, O* out, A* partial, StridedIndex kept,
                                      StridedIndex red, int64_t rows, int64_t n, int64_t step,
                                      int64_t chunk, Finish finish) {
  int64_t begin = blockIdx.y * chunk, end = begin + chunk < n ? begin + chunk : n;
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * blockDim.x) {
    const T* p = in + kept.offset(row);
    A acc = identity<Op, A>();
    for (int64_t j = begin; j < end; j++)
      acc = Op::apply(acc, to_acc<A>(p[kOneDim ? j * step : red.offset(j)]));
    if (gridDim.y == 1) out[row] = finish.template operator()<O>(acc);
    else partial[row * gridDim.y + blockIdx.y] = acc;
  }
}

// ---- host side: the [kept] x [reduced] plan ----------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

unsigned blocks_for(int64_t work_items, int64_t per_block) {
  return (unsigned)std::min<int64_t>(std::max<int64_t>(ceil_div(work_items, per_block), 1), INT32_MAX);
}

// Frees a scratch buffer at scope exit. The caching allocator hands blocks out again in
// stream order, so releasing right after the launches that use it is safe.
struct Scratch {
  void* ptr;
  explicit Scratch(size_t nbytes) : ptr(allocate(nbytes)) {}
  ~Scratch() { release(ptr); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

template <class O, class A, class Op>
void launch_partials(const A* partial, O* dst, int64_t rows, int64_t splits, Finish finish,
                     const char* op) {
  if (rows > INT32_MAX) fail(op, "(): too many outputs for a split CUDA reduction: ", rows);
  reduce_partials_kernel<O, A, Op><<<(unsigned)rows, kThreads, 0, ::mini::cuda::current_stream()>>>(partial, dst, splits, finish);
  check_launch(op);
}

// Size-1 dims dropped; neighbours that are one run of memory merged (strided_index does both).
struct Plan {
  StridedIndex kept;            // output index -> offset of its first element
  StridedIndex red;             // reduced index -> offset from there
  int64_t rows = 1, n = 1;
  bool contiguous_run = false;  // the reduced elements are one run of stride 1
  bool reduced_innermost = false;  // the smallest stride belongs to a reduced dim
};

Plan make_plan(const Tensor& a, const std::vector<int64_t>& dims) {
  Plan p;
  std::vector<bool> is_red(a->dim(), false);
  for (int64_t d : dims) is_red[d] = true;
  Shape kept_sizes;
  Strides kept_strides;
  std::vector<std::pair<int64_t, int64_t>> red;  // (stride, size)
  int64_t min_stride = INT64_MAX;
  for (int64_t d = 0; d < a->dim(); d++) {
    if (is_red[d]) {
      p.n *= a->sizes[d];
      red.push_back({a->strides[d], a->sizes[d]});
    } else {
      p.rows *= a->sizes[d];
      kept_sizes.push_back(a->sizes[d]);
      kept_strides.push_back(a->strides[d]);
    }
    if (a->sizes[d] != 1 && a->strides[d] < min_stride) {
      min_stride = a->strides[d];
      p.reduced_innermost = is_red[d];
    }
  }
  // The order of reduced elements does not matter: largest stride first merges the most.
  std::stable_sort(red.begin(), red.end(), [](auto x, auto y) { return x.first > y.first; });
  Shape red_sizes;
  Strides red_strides;
  for (auto [stride, size] : red) {
    red_sizes.push_back(size);
    red_strides.push_back(stride);
  }
  p.kept = strided_index(kept_sizes, kept_strides);
  p.red = strided_index(red_sizes, red_strides);
  p.contiguous_run = p.red.rank == 1 && p.red.strides[0] == 1;
  return p;
}

// Short rows, or outer reduced dims with a warp's worth of outputs at least: a thread each
// (a warp's loads are then neighbouring addresses); long columns split when the outputs
// alone leave threads idle. (A bias gradient, [8192, 768] summed over dim 0, went to the
// rows while fewer than 4096 outputs: a block a column, its loads 768 elements apart, 131 us
// a call in GPT-2's step on an H100.)
template <class T, class O, class Op>
void launch_reduce_columns(const char* op, const T* in, O* dst, const Plan& plan, Finish finish) {
  using A = acc_t<T>;
  const StridedIndex& kept = plan.kept;
  const StridedIndex& red = plan.red;
  int sms = sm_count();
  int64_t chunk = std::max<int64_t>(plan.n, 1), splits = 1;
  int64_t resident_threads = int64_t(sms) * 2048;
  if (plan.n >= 128 && plan.rows < resident_threads) {
    splits = std::min({ceil_div(resident_threads, plan.rows), plan.n / 64, int64_t(65535)});
    chunk = ceil_div(plan.n, splits);
    splits = ceil_div(plan.n, chunk);
  }
  std::optional<Scratch> scratch;
  if (splits > 1) scratch.emplace(sizeof(A) * plan.rows * splits);
  A* partial = scratch ? static_cast<A*>(scratch->ptr) : nullptr;
  dim3 grid(blocks_for(plan.rows, kThreads), (unsigned)splits);
  if (red.rank <= 1) {
    int64_t step = red.rank == 0 ? 0 : red.strides[0];
    reduce_columns_kernel<T, O, A, Op, true>
        <<<grid, kThreads, 0, ::mini::cuda::current_stream()>>>(in, dst, partial, kept, red, plan.rows, plan.n, step, chunk, finish);
  } else {
    reduce_columns_kernel<T, O, A, Op, false>
        <<<grid, kThreads, 0, ::mini::cuda::current_stream()>>>(in, dst, partial, kept, red, plan.rows, plan.n, 0, chunk, finish);
  }
  check_launch(op);
  if (splits > 1) launch_partials<O, A, Op>(partial, dst, plan.rows, splits, finish, op);
}

// kAccs, kBounded, block_threads: the sweep's variants (reduce_run's accumulators; whether a
// contiguous row of 2048 to 16383 elements gets the kernel with launch bounds; threads per
// block for such a row, 0 for the rule below). The defaults are the production choices.
template <class T, class O, class Op, int kAccs = 4, bool kBounded = true>
void launch_reduce(const char* op, const Tensor& out, const Tensor& a, const Plan& plan, bool mean,
                   int block_threads = 0) {
  using A = acc_t<T>;
  const T* in = static_cast<const T*>(a->device_raw());
  O* dst = static_cast<O*>(out->device_raw());
  Finish finish{mean, plan.n};
  const StridedIndex& kept = plan.kept;
  const StridedIndex& red = plan.red;
  int sms = sm_count();

  if (plan.n <= 16 || (!plan.reduced_innermost && plan.rows >= kWarp))
    return launch_reduce_columns<T, O, Op>(op, in, dst, plan, finish);

  RowArgs args;
  args.kept = kept;
  args.red = red;
  args.rows = plan.rows;
  args.n = plan.n;
  args.finish = finish;
  int threads = 256;
  args.group = plan.n < 2048 ? kWarp : threads;
  if (plan.n >= 16384) threads = args.group = 512;
  // Contiguous rows of 2048 to 16383 elements, a block each: 64 threads, and the kernel
  // compiled with launch bounds (1024, 1), with which ptxas issues reduce_run's four 16-byte
  // loads before the first add (56 registers; without bounds it issues two, then adds, in
  // 40-42). The kernel sweep on the H200 (tests/cuda/bench_cuda_sweep.cpp, notes/perf.md),
  // rows of 4096: float32 0.240 ms with 64 or 128 threads and bounds against 0.305 ms for the
  // former rule (256 threads, no bounds) and torch's 0.246; bfloat16 0.124 ms against 0.159
  // (128 threads) and torch's 0.132. More threads a row lose: fewer rows in flight an SM.
  bool block_a_row = plan.contiguous_run && args.group == threads && plan.n < 16384;
  if (block_a_row) threads = args.group = block_threads ? block_threads : 64;
  auto kernel = plan.contiguous_run ? reduce_rows_kernel<T, O, A, Op, true, kAccs>
                                    : reduce_rows_kernel<T, O, A, Op, false>;
  if constexpr (kBounded)
    if (block_a_row) kernel = reduce_rows_bounded_kernel<T, O, A, Op, true, kAccs>;
  // Too few outputs to fill the device with a block each: split rows over as many blocks as
  // the device holds at once (one wave, every block the same share of the work).
  int64_t blocks_of_work = args.group == kWarp ? ceil_div(plan.rows, threads / kWarp) : plan.rows;
  if (blocks_of_work < 2 * sms && plan.n >= 16384) {
    threads = args.group = 512;
    const int64_t resident = resident_blocks(reinterpret_cast<uintptr_t>(kernel), threads);
    args.splits = std::min(ceil_div(resident, plan.rows), ceil_div(plan.n, 8192));
  }
  args.chunk = ceil_div(ceil_div(plan.n, args.splits), 16) * 16;  // splits start 16-aligned
  args.splits = ceil_div(plan.n, args.chunk);
  unsigned blocks = blocks_for(args.rows * args.splits, threads / args.group);

  if (args.splits == 1) {
    kernel<<<blocks, threads, 0, ::mini::cuda::current_stream()>>>(in, dst, nullptr, args);
    check_launch(op);
    return;
  }
  Scratch scratch(sizeof(A) * args.rows * args.splits);
  A* partial = static_cast<A*>(scratch.ptr);
  kernel<<<blocks, threads, 0, ::mini::cuda::current_stream()>>>(in, dst, partial, args);
  check_launch(op);
  launch_partials<O, A, Op>(partial, dst, args.rows, args.splits, finish, op);
}

// ---- max/min along a dim with the first index ------------------------------------------

// Does (x, xi) replace (best, bi)? NaN beats every number; ties go to the smaller index.
template <class V>
__device__ __forceinline__ bool replaces(V x, int64_t xi, V best, int64_t bi, bool is_max) {
  bool x_nan = x != x, best_nan = best != best;
  if (best_nan) return x_nan && xi < bi;
  if (x_nan) return true;
  if (x == best) return xi < bi;
  return is_max ? x > best : x < best;
}

// kWarpPerRow: a warp per output (lanes stride along the dim), else a thread per output.
template <class T, bool kWarpPerRow>
__global__ void max_min_kernel(const T* in, T* values, int64_t* indices, StridedIndex kept,
                               int64_t rows, int64_t n, int64_t step, bool is_max) {
  using V = std::conditional_t<std::is_same_v<T, bool>, int, opmath_t<T>>;  // shuffles take no bool
  int lanes = kWarpPerRow ? kWarp : 1;
  int lane = kWarpPerRow ? threadIdx.x % kWarp : 0;
  int64_t per_block = blockDim.x / lanes;
  for (int64_t row = blockIdx.x * per_block + threadIdx.x / lanes; row < rows;
       row += int64_t(gridDim.x) * per_block) {
    const T* p = in + kept.offset(row);
    V best = V(p[0]);
    int64_t bi = 0;
    for (int64_t i = lane; i < n; i += lanes) {
      V x = V(p[i * step]);
      if (replaces(x, i, best, bi, is_max)) {
        best = x;
        bi = i;
      }
    }
    if constexpr (kWarpPerRow) {
#pragma unroll
      for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        V x = __shfl_xor_sync(0xffffffffu, best, offset);
        int64_t xi = __shfl_xor_sync(0xffffffffu, bi, offset);
        if (replaces(x, xi, best, bi, is_max)) {
          best = x;
          bi = xi;
        }
      }
    }
    if (lane == 0) {
      values[row] = T(best);
      indices[row] = bi;
    }
  }
}

// ---- nonzero ----------------------------------------------------------------------------------

template <class T>
__device__ __forceinline__ bool is_nonzero(T x) {
  return opmath_t<T>(x) != opmath_t<T>(0);
}

// Pass 1: the number of nonzero elements in each block's chunk.
template <class T>
__global__ void count_nonzero_kernel(const T* in, int64_t n, int64_t chunk, int64_t* counts) {
  __shared__ int64_t shared[kWarp];
  int64_t begin = blockIdx.x * chunk, end = begin + chunk < n ? begin + chunk : n;
  int64_t c = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) c += is_nonzero(in[i]);
  c = block_reduce<SumOp>(c, shared);
  if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

// Pass 2: each block writes its chunk's indices from its offset on, a tile of blockDim.x
// elements at a time: a ballot per warp, then the warps' counts in order.
template <class T>
__global__ void write_nonzero_kernel(const T* in, int64_t n, int64_t chunk, const int64_t* offsets,
                                     int64_t* out) {
  __shared__ int warp_counts[kWarp];
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  int64_t begin = blockIdx.x * chunk, end = begin + chunk < n ? begin + chunk : n;
  int64_t next = offsets[blockIdx.x];
  for (int64_t tile = begin; tile < end; tile += blockDim.x) {
    int64_t i = tile + threadIdx.x;
    bool hit = i < end && is_nonzero(in[i]);
    unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = next;
    int tile_total = 0;
    for (int w = 0; w < warps; w++) {
      if (w < warp) before += warp_counts[w];
      tile_total += warp_counts[w];
    }
    if (hit) out[before + __popc(ballot & ((1u << lane) - 1u))] = i;
    next += tile_total;
    __syncthreads();
  }
}

}  // namespace

void reduce(OpKind k, const Tensor& out, const Tensor& a, const std::vector<int64_t>& dims) {
  if (out->numel() == 0) return;
  const char* op = op_name(k);
  Plan plan = make_plan(a, dims);
  bool mean = k == OpKind::Mean;
  MINI_DISPATCH(a->dtype, T, [&] {
    if (k == OpKind::Amax || k == OpKind::Amin) {
      if (k == OpKind::Amax) launch_reduce<T, T, MaxOp>(op, out, a, plan, false);
      else launch_reduce<T, T, MinOp>(op, out, a, plan, false);
    } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int64_t>) {
      if (mean) fail("mean(): not defined for ", dtype_name(a->dtype), " on CUDA");
      launch_reduce<T, int64_t, SumOp>(op, out, a, plan, false);
    } else {
      launch_reduce<T, T, SumOp>(op, out, a, plan, mean);
    }
  });
}

void sweep_reduce_rows(OpKind k, const Tensor& out, const Tensor& a, int threads, int accs,
                       bool bounded) {
  MINI_CHECK((k == OpKind::Sum || k == OpKind::Amax) &&
                 (a->dtype == DType::Float32 || a->dtype == DType::BFloat16) && a->dim() == 2 &&
                 a->is_contiguous() && a->sizes[1] >= 2048 && a->sizes[1] < 16384 &&
                 (accs == 1 || accs == 4),
             "internal error: sweep_reduce_rows() takes sum or amax of contiguous float32 or "
             "bfloat16 rows of 2048 to 16383 elements (a block each)");
  Plan plan = make_plan(a, {1});
  auto run = [&](auto zero, auto op) {
    using T = decltype(zero);
    using Op = decltype(op);
    const char* name = op_name(k);
    switch (accs * 2 + bounded) {
      case 2: return launch_reduce<T, T, Op, 1, false>(name, out, a, plan, false, threads);
      case 3: return launch_reduce<T, T, Op, 1, true>(name, out, a, plan, false, threads);
      case 8: return launch_reduce<T, T, Op, 4, false>(name, out, a, plan, false, threads);
      default: return launch_reduce<T, T, Op, 4, true>(name, out, a, plan, false, threads);
    }
  };
  bool f32 = a->dtype == DType::Float32;
  if (k == OpKind::Sum) f32 ? run(float(), SumOp()) : run(bfloat16(), SumOp());
  else f32 ? run(float(), MaxOp()) : run(bfloat16(), MaxOp());
}

void max_min_dim(const Tensor& values, const Tensor& indices, const Tensor& a, int64_t dim,
                 bool is_max) {
  if (values->numel() == 0) return;
  const char* op = is_max ? "max" : "min";
  Shape kept_sizes = a->sizes;
  Strides kept_strides = a->strides;
  int64_t n = 1, step = 0;  // a 0-d tensor is its own max, at index 0
  if (a->dim() > 0) {
    n = a->sizes[dim];
    step = a->strides[dim];
    kept_sizes.erase(kept_sizes.begin() + dim);
    kept_strides.erase(kept_strides.begin() + dim);
  }
  StridedIndex kept_index = strided_index(kept_sizes, kept_strides);
  int64_t rows = values->numel();
  MINI_DISPATCH(a->dtype, T, [&] {
    const T* in = static_cast<const T*>(a->device_raw());
    T* v = static_cast<T*>(values->device_raw());
    int64_t* idx = static_cast<int64_t*>(indices->device_raw());
    if (step == 1 && n >= 64) {
      max_min_kernel<T, true><<<blocks_for(rows, kThreads / kWarp), kThreads, 0, ::mini::cuda::current_stream()>>>(
          in, v, idx, kept_index, rows, n, step, is_max);
    } else {
      max_min_kernel<T, false><<<blocks_for(rows, kThreads), kThreads, 0, ::mini::cuda::current_stream()>>>(
          in, v, idx, kept_index, rows, n, step, is_max);
    }
  });
  check_launch(op);
}

// Two launches and a synchronization in between (the count decides the output's size), as
// torch's nonzero synchronizes: pass 1 counts per block, the host turns the counts into
// offsets, pass 2 writes each block's indices in ascending order.
Tensor nonzero_flat(const Tensor& a) {
  int64_t n = a->numel();
  int64_t blocks = std::max<int64_t>(std::min<int64_t>(ceil_div(n, 16 * kThreads), 1024), 1);
  int64_t chunk = std::max<int64_t>(ceil_div(n, blocks), 1);
  Scratch scratch(sizeof(int64_t) * blocks);
  int64_t* counts = static_cast<int64_t*>(scratch.ptr);
  MINI_DISPATCH(a->dtype, T, [&] {
    count_nonzero_kernel<T><<<(unsigned)blocks, kThreads, 0, ::mini::cuda::current_stream()>>>(static_cast<const T*>(a->device_raw()),
                                                             n, chunk, counts);
  });
  check_launch("nonzero");
  std::vector<int64_t> host(blocks);
  copy_bytes(host.data(), Device::cpu(), counts, Device::cuda(), sizeof(int64_t) * blocks);
  int64_t total = 0;
  for (int64_t& c : host) {  // counts -> exclusive offsets
    int64_t count = c;
    c = total;
    total += count;
  }
  Tensor out = TensorImpl::empty({total}, DType::Int64, Device::cuda());
  if (total == 0) return out;
  copy_bytes(counts, Device::cuda(), host.data(), Device::cpu(), sizeof(int64_t) * blocks);
  MINI_DISPATCH(a->dtype, T, [&] {
    write_nonzero_kernel<T><<<(unsigned)blocks, kThreads, 0, ::mini::cuda::current_stream()>>>(
        static_cast<const T*>(a->device_raw()), n, chunk, counts,
        static_cast<int64_t*>(out->device_raw()));
  });
  check_launch("nonzero");
  return out;
}

}  // namespace mini::cuda
