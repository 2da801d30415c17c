// cuda/copy.cu — the kernels that move and convert elements without math (kernels.h): copy
// (cast, clone, contiguous, copy_, slice writes), where, fill and arange. One launch each.
//
// A copy between contiguous tensors of one dtype moves bytes: one kernel of 16-byte loads
// serves every dtype. A contiguous conversion has a flat kernel per (source, destination)
// pair; anything strided goes through one strided kernel per destination dtype, which reads
// the source as its own dtype.
#include "loops.cuh"

namespace mini::cuda {

namespace {

template <class S, class D>
struct ConvertOp {
  __device__ __forceinline__ D operator()(opmath_t<S> x) const { return convert<D>(x); }
};

template <class T>
struct WhereOp {
  using C = opmath_t<T>;
  __device__ __forceinline__ C operator()(bool c, C x, C y) const { return c ? x : y; }
};

// out = value everywhere (the flat or strided kernel with one input, that value).
template <class D>
void fill_value(const Tensor& out, D value, const char* op) {
  using Op = ConvertOp<D, D>;
  constexpr int kVec = 16 / sizeof(D);
  if (flat_out<D>(out, kVec)) {
    FlatMap<D, 1, D, D, D, Op> f{};
    f.out = static_cast<D*>(out->device_raw());
    f.a.value = opmath_t<D>(value);
    launch_flat<kVec>(op, out->numel(), f);
    return;
  }
  StridedMap<D, 1, D, D, D, Op> f{};
  f.calc = offset_calc<2>(out->sizes, {out->strides, Strides(out->sizes.size(), 0)},
                          {int64_t(sizeof(D)), 0});
  f.out = static_cast<char*>(out->device_raw());
  f.a.value = opmath_t<D>(value);
  launch_strided(op, out->numel(), f);
}

// out[i] = start + i * step, in double as the CPU's arange, then converted.
template <class T>
struct ArangeFlat {
  static constexpr int kInputs = 0;
  T* out;
  double start, step;

  template <int VEC>
  struct Loaded {};
  __device__ __forceinline__ void init() {}
  template <int VEC>
  __device__ __forceinline__ Loaded<VEC> load(int64_t) const {
    return {};
  }
  template <int VEC>
  __device__ __forceinline__ void store(int64_t i, const Loaded<VEC>&) const {
    Pack<T, VEC> p;
#pragma unroll
    for (int j = 0; j < VEC; j++) p.v[j] = convert<T>(start + double(i + j) * step);
    *reinterpret_cast<Pack<T, VEC>*>(out + i) = p;
  }
};

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  check_operand(src, "copy");
  MINI_CHECK(dst->is_cuda(), "internal error: the CUDA copy kernel needs a destination on the GPU");
  if (dst->numel() == 0) return;
  if (src->is_cuda() && src->dtype == dst->dtype && src->numel() == dst->numel() &&
      src->is_contiguous() && dst->is_contiguous() && aligned16(src->device_raw()) &&
      aligned16(dst->device_raw()) && dst->nbytes() % 16 == 0) {
    // 16-byte words, whatever the dtype (moved as bytes, the loads and stores would be
    // 16 one-byte moves each, which may alias everything: half the bandwidth)
    FlatMap<uint4, 1, uint4, uint4, uint4, ConvertOp<uint4, uint4>> f{};
    f.out = static_cast<uint4*>(dst->device_raw());
    f.a.ptr = static_cast<const uint4*>(src->device_raw());
    launch_flat<1>("copy", dst->nbytes() / 16, f);
    return;
  }
  MINI_DISPATCH(src->dtype, S, [&] {
    MINI_DISPATCH(dst->dtype, D, [&] {
      if (!try_flat<D, 1, S>("copy", dst, {src}, ConvertOp<S, D>{}))
        run_strided<D, 1, D>("copy", dst, {src}, ConvertOp<D, D>{});
    });
  });
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_operand(cond, "where");
  check_operand(a, "where");
  check_operand(b, "where");
  MINI_CHECK(out->is_cuda(), "internal error: the CUDA where kernel needs an output on the GPU");
  MINI_CHECK(cond->dtype == DType::Bool, "internal error: where's condition must be bool, got ",
             dtype_name(cond->dtype));
  if (out->numel() == 0) return;
  MINI_DISPATCH(out->dtype, T, [&] {
    if (!try_flat<T, 3, bool, T, T>("where", out, {cond, a, b}, WhereOp<T>{}))
      run_strided<T, 3, bool, T, T>("where", out, {cond, a, b}, WhereOp<T>{});
  });
}

void fill(const Tensor& out, double value) {
  MINI_CHECK(out->is_cuda(), "internal error: the CUDA fill kernel needs an output on the GPU");
  if (out->numel() == 0) return;
  MINI_DISPATCH(out->dtype, D, [&] { fill_value<D>(out, convert<D>(value), "fill"); });
}

void arange(const Tensor& out, double start, double step) {
  MINI_CHECK(out->is_cuda() && out->dim() == 1 && out->is_contiguous(),
             "internal error: the CUDA arange kernel needs a 1-d contiguous output on the GPU");
  int64_t n = out->numel();
  if (n == 0) return;
  MINI_DISPATCH(out->dtype, T, [&] {
    ArangeFlat<T> f{static_cast<T*>(out->device_raw()), start, step};
    if (aligned16(f.out)) launch_flat<16 / sizeof(T)>("arange", n, f);
    else launch_flat<1>("arange", n, f);
  });
}

}  // namespace mini::cuda
