// cuda/loops.cuh — the two loops every pointwise kernel of pointwise.cu and copy.cu runs in
// (torch's TensorIterator + gpu_kernel, reduced to what mini needs).
//
//  * The flat loop: every operand is contiguous with out's layout (or one value for all
//    elements) and of the kernel's element type. Each thread moves 16 bytes per operand per
//    load (float4 for float32, 8 bfloat16s, ...) and keeps up to 4 loads in flight before it
//    computes, in a grid-stride loop; the last n % VEC elements are done one by one. Every
//    pointer must be 16-byte aligned (the host checks; a view at an odd offset takes the
//    strided loop).
//  * The strided loop: anything else (broadcasting, transposes, slices, mixed dtypes). Each
//    element's linear index is split into coordinates once, and every operand's byte offset
//    follows from its strides; operands are read as their own dtype and converted.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <climits>
#include <type_traits>

#include "common.cuh"
#include "kernels.h"

namespace mini::cuda {

// The flat loop's defaults (flat_kernel, launch_flat), from the kernel sweep on the H200
// (tests/cuda/bench_cuda_sweep.cpp; notes/perf.md has the tables):
//   unroll_for: 16-byte loads per operand each thread has in flight, 4, or 1 when a vector holds
//   16 elements (bool, int8).
//   full_tiles_for: whether a step whose vectors are all in range loads them with no bounds
//   check between the loads. Yes for 8-element vectors (bfloat16): with the checks ptxas widened
//   each vector before issuing the next load, one load in flight (x * 2.5: 0.278 ms without,
//   0.374 with, torch 0.254). No for 4 (float32): add and x * 2.5 ran 4% slower without them.
// Ops whose math is long take their own plan (pointwise.cu's flat_plan).
template <int VEC>
constexpr int unroll_for() {
  return VEC >= 16 ? 1 : 4;
}
template <int VEC>
constexpr bool full_tiles_for() {
  return VEC == 8;
}

// VEC elements moved by one load or store instruction.
template <class T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// x converted to D as a C++ cast would, with torch's rules: to bool is x != 0 (NaN is
// true); bfloat16 goes through float (also from double and int64, as c10::BFloat16). On the
// device, float -> bfloat16 is the hardware's conversion (one cvt.rn.bf16.f32 where
// bfloat16.h's portable rounding takes five instructions, which made bfloat16 kernels
// compute-bound); both round to nearest even.
template <class D, class S>
__host__ __device__ __forceinline__ D convert(S x) {
  using V = std::conditional_t<std::is_same_v<S, bfloat16>, float, S>;
  V v = static_cast<V>(x);
  if constexpr (std::is_same_v<D, bool>) {
    return v != V(0);
  } else if constexpr (std::is_same_v<D, bfloat16>) {
#if defined(__CUDA_ARCH__)
    return bfloat16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v))));
#else
    return bfloat16(static_cast<float>(v));
#endif
  } else {
    return static_cast<D>(v);
  }
}

// A host scalar (see is_host_scalar) read as its own dtype and converted to T: int64 values
// stay exact (host_scalar()'s double would round those past 2^53).
template <class T>
T host_value(const Tensor& t) {
  MINI_CHECK(is_host_scalar(t), "internal error: host_value() of a tensor on ", t->device().str());
  return MINI_DISPATCH(t->dtype, S, [&] { return convert<T>(*static_cast<const S*>(t->raw())); });
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- the flat loop -----------------------------------------------------------------------------
// One input of a flat kernel: contiguous elements of type T, or one value for every element
// (a host scalar, passed by value, or a one-element device tensor, read once per thread), or a
// contiguous operand broadcast along out's leading dims (a bias: element i reads i % period) or
// along its trailing dims (a row's mean [N, 1]: element i reads i / divisor), each a whole
// number of vectors, so that a vector still reads one Pack or one value.
template <class T>
struct FlatIn {
  using C = opmath_t<T>;
  const T* ptr = nullptr;         // contiguous, aligned; null: `value` everywhere
  const T* scalar_ptr = nullptr;  // a one-element device tensor
  C value{};
  int64_t period = 0, divisor = 0;  // broadcast: 0 where the operand has out's elements

  __device__ __forceinline__ void init() {
    if (scalar_ptr) value = C(*scalar_ptr);
  }
  template <int VEC>
  __device__ __forceinline__ void load(int64_t i, C (&r)[VEC]) const {
    if (ptr && divisor) {
      const C v = C(ptr[i / divisor]);
#pragma unroll
      for (int j = 0; j < VEC; j++) r[j] = v;
    } else if (ptr) {
      Pack<T, VEC> p = *reinterpret_cast<const Pack<T, VEC>*>(ptr + (period ? i % period : i));
#pragma unroll
      for (int j = 0; j < VEC; j++) r[j] = C(p.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; j++) r[j] = value;
    }
  }
};

// A host scalar's value in a kernel computing in T: rounded to T, as every operand is
// (where, copy); or, with opmath_scalar, kept at opmath precision, as torch's arithmetic
// does for bfloat16 (its original_scalar_value: bf16_tensor * 0.1 multiplies by 0.1f).
template <class T>
opmath_t<T> scalar_operand(const Tensor& t, bool opmath_scalar) {
  return opmath_scalar ? host_value<opmath_t<T>>(t) : opmath_t<T>(host_value<T>(t));
}

// Fills `in` for a flat kernel from operand `t` when it can take part: a host scalar, a
// one-element device tensor of type T, or a contiguous aligned device tensor of type T with
// out's element count (then out's shape up to size-1 dims: the caller broadcast t to it).
template <class T>
bool flat_operand(const Tensor& t, const Shape& out, int vec, FlatIn<T>* in, bool opmath_scalar = false) {
  const int64_t numel = numel_of(out);
  if (is_host_scalar(t)) {
    in->value = scalar_operand<T>(t, opmath_scalar);
    return true;
  }
  if (!t->is_cuda() || t->dtype != dtype_of<T>()) return false;
  if (t->numel() == 1) {
    in->scalar_ptr = static_cast<const T*>(t->device_raw());
    return true;
  }
  if (!t->is_contiguous() || !aligned16(t->device_raw())) return false;
  in->ptr = static_cast<const T*>(t->device_raw());
  if (t->numel() == numel) return true;
  // a broadcast operand: its sizes, right-aligned against out's, are out's trailing dims (1s
  // before them), or out's leading dims (1s after them)
  const size_t r = out.size(), tr = t->sizes.size();
  if (tr > r || t->numel() == 0) return false;
  size_t first = 0, last = tr;  // t's dims [first, last) that are not 1
  while (first < tr && t->sizes[first] == 1) first++;
  while (last > first && t->sizes[last - 1] == 1) last--;
  const size_t off = r - tr;  // t's dim d is out's dim off + d
  for (size_t d = first; d < last; d++)
    if (t->sizes[d] != out[off + d]) return false;
  int64_t lead = 1, trail = 1;  // out's elements before and after t's run of dims
  for (size_t d = 0; d < off + first; d++) lead *= out[d];
  for (size_t d = off + last; d < r; d++) trail *= out[d];
  if (trail == 1 && t->numel() % vec == 0) {
    in->period = t->numel();
    return true;
  }
  if (lead == 1 && trail % vec == 0) {
    in->divisor = trail;
    return true;
  }
  return false;
}

// out can be written by a flat kernel: contiguous, aligned for a VEC-element store.
template <class O>
bool flat_out(const Tensor& out, int vec) {
  return out->is_contiguous() &&
         reinterpret_cast<uintptr_t>(out->device_raw()) % (sizeof(O) * vec) == 0;
}

// fn provides init(), Loaded<VEC>, load<VEC>(i) and store<VEC>(i, loaded) for the elements
// [i, i + VEC). Loads of kUnroll vectors are issued before any is used: the bytes in flight
// per thread are what keeps HBM busy. kFullTiles: a step whose vectors are all in range loads
// them with no bounds check between the loads (see launch_flat).
template <int VEC, int kUnroll, bool kFullTiles, class Fn>
__global__ void __launch_bounds__(kThreads) flat_kernel(int64_t n, Fn fn) {
  fn.init();
  int64_t nvec = n / VEC;
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x;
       base < nvec; base += step) {
    typename Fn::template Loaded<VEC> v[kUnroll];
    if constexpr (kFullTiles) {
      if (base + (kUnroll - 1) * int64_t(blockDim.x) < nvec) {
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
          v[u] = fn.template load<VEC>((base + u * blockDim.x) * VEC);
#pragma unroll
        for (int u = 0; u < kUnroll; u++)
          fn.template store<VEC>((base + u * blockDim.x) * VEC, v[u]);
        continue;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      int64_t i = base + u * blockDim.x;
      if (i < nvec) v[u] = fn.template load<VEC>(i * VEC);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      int64_t i = base + u * blockDim.x;
      if (i < nvec) fn.template store<VEC>(i * VEC, v[u]);
    }
  }
  // the last n % VEC elements, one per thread (the grid has more than 16 threads)
  int64_t t = nvec * VEC + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n) fn.template store<1>(t, fn.template load<1>(t));
}

// The grid. Measured on an H200 at 2^28 elements: a kernel streaming at most one input with
// 4 loads in flight (float32 unary ops, copies, casts, fills) ran 7% faster as one pass of
// blocks, each thread doing one step of the loop (torch's layout: blocks retire and new ones
// start in address order); kernels with two or more inputs, or 8 elements per vector, ran as
// fast or up to 10% faster in grid_for's capped grid-stride loop.
//
// kUnrollArg: loads in flight per operand, 0 for unroll_for's; kFullTilesArg: 0 or 1, -1 for
// full_tiles_for's.
template <int VEC, int kUnrollArg = 0, int kFullTilesArg = -1, class Fn>
void launch_flat(const char* op, int64_t n, const Fn& fn) {
  constexpr int kUnroll = kUnrollArg ? kUnrollArg : unroll_for<VEC>();
  constexpr bool kFullTiles = kUnroll > 1 && (kFullTilesArg < 0 ? full_tiles_for<VEC>()
                                                                : kFullTilesArg > 0);
  int64_t per_block = int64_t(kThreads) * VEC * kUnroll;
  int64_t blocks = Fn::kInputs <= 1 && kUnroll == 4
                       ? std::min<int64_t>((n + per_block - 1) / per_block, INT32_MAX)
                       : grid_for(n, VEC * kUnroll);
  flat_kernel<VEC, kUnroll, kFullTiles><<<blocks, kThreads, 0, ::mini::cuda::current_stream()>>>(n, fn);
  check_launch(op);
}

// The flat kernel's body for out[i] = op(inputs[i]...) over N inputs (1 to 3) of element
// types A, B, C3 (each read as its opmath type), stored as O.
template <class O, int N, class A, class B, class C3, class Op>
struct FlatMap {
  static constexpr int kInputs = N;
  O* out;
  Op op;
  FlatIn<A> a;
  FlatIn<B> b;
  FlatIn<C3> c;

  template <int VEC>
  struct Loaded {
    opmath_t<A> a[VEC];
    opmath_t<B> b[VEC];
    opmath_t<C3> c[VEC];
  };
  __device__ __forceinline__ void init() {
    a.init();
    if constexpr (N > 1) b.init();
    if constexpr (N > 2) c.init();
  }
  template <int VEC>
  __device__ __forceinline__ Loaded<VEC> load(int64_t i) const {
    Loaded<VEC> r;
    a.load(i, r.a);
    if constexpr (N > 1) b.load(i, r.b);
    if constexpr (N > 2) c.load(i, r.c);
    return r;
  }
  template <int VEC>
  __device__ __forceinline__ void store(int64_t i, const Loaded<VEC>& r) const {
    Pack<O, VEC> p;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
      if constexpr (N == 1) p.v[j] = convert<O>(op(r.a[j]));
      else if constexpr (N == 2) p.v[j] = convert<O>(op(r.a[j], r.b[j]));
      else p.v[j] = convert<O>(op(r.a[j], r.b[j], r.c[j]));
    }
    *reinterpret_cast<Pack<O, VEC>*>(out + i) = p;
  }
};

template <class T, class... Ts>
constexpr size_t max_size() {
  if constexpr (sizeof...(Ts) == 0) return sizeof(T);
  else return sizeof(T) > max_size<Ts...>() ? sizeof(T) : max_size<Ts...>();
}

// Launches the flat kernel of op on `inputs` if out and every input allow it (see
// flat_operand and flat_out); returns false, launching nothing, otherwise. VEC: 16 bytes of
// the widest element type per load or store. kOpmathScalars: see scalar_operand. kUnroll,
// kFullTiles: see launch_flat (the defaults are the production choices; others, the sweep's
// variants).
template <class O, int N, class A, class B = A, class C3 = A, bool kOpmathScalars = false,
          int kUnroll = 0, int kFullTiles = -1, class Op>
bool try_flat(const char* name, const Tensor& out, const std::array<Tensor, N>& inputs, Op op) {
  constexpr int kVec = int(16 / max_size<O, A, B, C3>());
  FlatMap<O, N, A, B, C3, Op> f{};
  int64_t n = out->numel();
  if (!flat_out<O>(out, kVec) || !flat_operand(inputs[0], out->sizes, kVec, &f.a, kOpmathScalars)) return false;
  if constexpr (N > 1)
    if (!flat_operand(inputs[1], out->sizes, kVec, &f.b, kOpmathScalars)) return false;
  if constexpr (N > 2)
    if (!flat_operand(inputs[2], out->sizes, kVec, &f.c, kOpmathScalars)) return false;
  f.out = static_cast<O*>(out->device_raw());
  f.op = op;
  launch_flat<kVec, kUnroll, kFullTiles>(name, n, f);
  return true;
}

// ---- the strided loop --------------------------------------------------------------------------
// Byte offsets of N operands (out first) for a linear index of out's shape. Dims innermost
// first, size-1 dims dropped, and neighbours merged where every operand steps over them as
// one dim (a contiguous [64, 128] is one dim of 8192).
template <int N>
struct OffsetCalc {
  int rank = 0;
  bool narrow = false;  // every size and the element count fit 32 bits: cheaper division
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][N];  // bytes

  __device__ __forceinline__ void offsets(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; d++) {
      if (d == rank) break;
      int64_t idx;
      if (d == rank - 1) {
        idx = linear;  // the outermost dim: no division left to do
      } else if (narrow) {
        uint32_t l = static_cast<uint32_t>(linear), s = static_cast<uint32_t>(sizes[d]);
        idx = l % s;
        linear = l / s;
      } else {
        idx = linear % sizes[d];
        linear /= sizes[d];
      }
#pragma unroll
      for (int k = 0; k < N; k++) off[k] += idx * strides[d][k];
    }
  }
};

// strides[k]: operand k's strides in elements over `shape` (0 on broadcast dims; all 0 for
// a host scalar), itemsizes[k] its element size.
template <int N>
OffsetCalc<N> offset_calc(const Shape& shape, const std::array<Strides, N>& strides,
                          const std::array<int64_t, N>& itemsizes) {
  OffsetCalc<N> c;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (c.rank > 0) {
      bool merge = true;
      for (int k = 0; k < N; k++)
        merge = merge && strides[k][i] * itemsizes[k] ==
                             c.strides[c.rank - 1][k] * c.sizes[c.rank - 1];
      if (merge) {
        c.sizes[c.rank - 1] *= shape[i];
        continue;
      }
    }
    if (c.rank == kMaxDims)
      fail("a CUDA kernel indexes at most ", kMaxDims, " dims that cannot be merged, but shape ",
           shape_str(shape), " has more; call .contiguous() on the operands first");
    c.sizes[c.rank] = shape[i];
    for (int k = 0; k < N; k++) c.strides[c.rank][k] = strides[k][i] * itemsizes[k];
    c.rank++;
  }
  c.narrow = numel_of(shape) <= int64_t(UINT32_MAX);
  return c;
}

// An input of a strided kernel read as T (the kernel's storage type) from its own dtype,
// then widened to T's opmath type; or one value (a host scalar).
template <class T>
struct StridedIn {
  using C = opmath_t<T>;
  const char* ptr = nullptr;  // null: `value`
  DType dtype = DType::Float32;
  C value{};
  __device__ __forceinline__ C at(int64_t offset) const {
    return ptr ? C(load_as<T>(ptr + offset, dtype)) : value;
  }
};

template <class T>
StridedIn<T> strided_operand(const Tensor& t, bool opmath_scalar = false) {
  StridedIn<T> in;
  if (is_host_scalar(t)) {
    in.value = scalar_operand<T>(t, opmath_scalar);
  } else {
    in.ptr = static_cast<const char*>(t->device_raw());
    in.dtype = t->dtype;
  }
  return in;
}

// t's strides broadcast to `shape` (all 0 for a host scalar, whose pointer is never read).
inline Strides operand_strides(const Tensor& t, const Shape& shape) {
  if (is_host_scalar(t)) return Strides(shape.size(), 0);
  return broadcast_strides(t->sizes, t->strides, shape);
}

template <class Fn>
__global__ void __launch_bounds__(kThreads) strided_kernel(int64_t n, Fn fn) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    fn(i);
}

template <class Fn>
void launch_strided(const char* op, int64_t n, const Fn& fn) {
  strided_kernel<<<grid_for(n), kThreads, 0, ::mini::cuda::current_stream()>>>(n, fn);
  check_launch(op);
}

// The strided kernel's body: out[i] = op(inputs[i]...), each input read from its own dtype
// as A, B, C3 and widened to opmath; out's element type O.
template <class O, int N, class A, class B, class C3, class Op>
struct StridedMap {
  OffsetCalc<N + 1> calc;  // out, then the inputs
  char* out;
  Op op;
  StridedIn<A> a;
  StridedIn<B> b;
  StridedIn<C3> c;
  __device__ __forceinline__ void operator()(int64_t i) const {
    int64_t off[N + 1];
    calc.offsets(i, off);
    O* o = reinterpret_cast<O*>(out + off[0]);
    if constexpr (N == 1) *o = convert<O>(op(a.at(off[1])));
    else if constexpr (N == 2) *o = convert<O>(op(a.at(off[1]), b.at(off[2])));
    else *o = convert<O>(op(a.at(off[1]), b.at(off[2]), c.at(off[3])));
  }
};

// Launches the strided kernel of op: out of any strides, inputs broadcast to out's shape,
// of any dtype, or host scalars (kOpmathScalars: see scalar_operand).
template <class O, int N, class A, class B = A, class C3 = A, bool kOpmathScalars = false, class Op>
void run_strided(const char* name, const Tensor& out, const std::array<Tensor, N>& inputs, Op op) {
  StridedMap<O, N, A, B, C3, Op> f{};
  std::array<Strides, N + 1> strides;
  std::array<int64_t, N + 1> itemsizes;
  strides[0] = out->strides;
  itemsizes[0] = int64_t(itemsize(out->dtype));
  for (int k = 0; k < N; k++) {
    strides[k + 1] = operand_strides(inputs[k], out->sizes);
    itemsizes[k + 1] = int64_t(itemsize(inputs[k]->dtype));
  }
  f.calc = offset_calc<N + 1>(out->sizes, strides, itemsizes);
  f.out = static_cast<char*>(out->device_raw());
  f.op = op;
  f.a = strided_operand<A>(inputs[0], kOpmathScalars);
  if constexpr (N > 1) f.b = strided_operand<B>(inputs[1], kOpmathScalars);
  if constexpr (N > 2) f.c = strided_operand<C3>(inputs[2], kOpmathScalars);
  launch_strided(name, out->numel(), f);
}

// Operands must be device tensors or host scalars: a CPU tensor of several elements here
// is a missing device check in the caller.
inline void check_operand(const Tensor& t, const char* op) {
  if (!t->is_cuda() && !is_host_scalar(t))
    fail("internal error: the CUDA ", op, " kernel was given a CPU tensor of shape ",
         shape_str(t->sizes), "; move it to the GPU first (.cuda()) and please report it");
}

}  // namespace mini::cuda
