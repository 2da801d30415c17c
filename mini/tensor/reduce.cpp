// reduce.cpp — reduction kernels: sum, mean, amax, amin over any set of dims (keepdim or
// not), max/min along a dim with indices, and nonzero.
//
// The input is seen as [kept dims] x [reduced dims]. Three loop shapes cover it:
//   inner  — reduced dims are the contiguous tail: each output reduces one contiguous run;
//   outer  — reduced dims are the contiguous head: outputs accumulate row by row;
//   strided — anything else: per output, a strided walk over the reduced dims.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd.h"
#include "cuda/cuda.h"
#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"

namespace mini {

namespace {

enum class Combine { Sum, Max, Min };

template <class T> struct AccType { using type = T; };
template <> struct AccType<float> { using type = double; };
template <> struct AccType<bfloat16> { using type = double; };
template <> struct AccType<bool> { using type = int64_t; };

template <class A> A initial(Combine c) {
  if (c == Combine::Sum) return A(0);
  if (c == Combine::Max) return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                                     : std::numeric_limits<A>::lowest();
  return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                              : std::numeric_limits<A>::max();
}

template <class A> A combine(Combine c, A a, A x) {
  if (c == Combine::Sum) return a + x;
  if (x != x) return x;  // NaN wins, as torch
  if (c == Combine::Max) return (a != a || a >= x) ? a : x;
  return (a != a || a <= x) ? a : x;
}

// Reduces one contiguous run. Float and bfloat16 sums go through float blocks (vectorized)
// into a double total, which keeps 2^24-element sums accurate and fast.
template <class T, class A>
A reduce_run(Combine c, const T* p, int64_t n) {
  if (c == Combine::Sum) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>) {
      double total = 0;
      for (int64_t b = 0; b < n; b += 4096) {
        int64_t e = std::min(n, b + 4096);
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = b; i < e; i++) s += float(p[i]);
        total += s;
      }
      return A(total);
    } else {
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; i++) s += A(p[i]);
      return s;
    }
  }
  if constexpr (is_floating_v<T>) {
    // An OpenMP max/min reduction, with NaN tracked in a separate flag: a NaN-propagating
    // select would chain each element to the one before and keep the loop scalar. The flag
    // is an int, not a bool: GCC does not vectorize an OpenMP | reduction over bool.
    // bfloat16 elements are compared as floats (OpenMP reduces arithmetic types only).
    using M = opmath_t<T>;
    M m = initial<M>(c);
    int nan = 0;
    if (c == Combine::Max) {
#pragma omp simd reduction(max : m) reduction(| : nan)
      for (int64_t i = 0; i < n; i++) {
        M x = p[i];
        m = x > m ? x : m;
        nan |= x != x;
      }
    } else {
#pragma omp simd reduction(min : m) reduction(| : nan)
      for (int64_t i = 0; i < n; i++) {
        M x = p[i];
        m = x < m ? x : m;
        nan |= x != x;
      }
    }
    return nan ? A(std::numeric_limits<M>::quiet_NaN()) : A(m);
  } else {
    A m = initial<A>(c);
    for (int64_t i = 0; i < n; i++) m = combine<A>(c, m, A(p[i]));
    return m;
  }
}

struct Plan {
  Shape kept_sizes, red_sizes;
  Strides kept_strides, red_strides;
};

// The output value of a reduction's total: a mean divides by the count (NaN for none).
template <class A, class O> struct Finish {
  bool mean;
  int64_t n_red;
  O operator()(A acc) const {
    if (mean) acc = n_red ? A(acc / A(n_red)) : A(NAN);
    return O(acc);
  }
};

// inner: each output reduces one contiguous run of n_red elements (a full reduction's one run
// is split over threads).
template <class T, class O, class A>
void reduce_inner(Combine c, const T* src, O* dst, int64_t n_out, int64_t n_red, const Finish<A, O>& finish) {
  if (n_out == 1) {  // a full reduction: split the run over threads
    int threads = n_red >= kParallelGrain ? omp_get_max_threads() : 1;
    std::vector<A> part(threads, initial<A>(c));
    int64_t chunk = (n_red + threads - 1) / threads;
#pragma omp parallel for num_threads(threads) if (threads > 1)
    for (int t = 0; t < threads; t++) {
      int64_t b = t * chunk, e = std::min(n_red, b + chunk);
      if (b < e) part[t] = reduce_run<T, A>(c, src + b, e - b);
    }
    A acc = initial<A>(c);
    for (A v : part) acc = combine<A>(c, acc, v);
    dst[0] = finish(acc);
    return;
  }
#pragma omp parallel for if (n_out * n_red >= kParallelGrain)
  for (int64_t o = 0; o < n_out; o++) dst[o] = finish(reduce_run<T, A>(c, src + o * n_red, n_red));
}

// outer: out[j] = reduce_i in[i, j], the outputs accumulated row by row.
template <class T, class O, class A>
void reduce_outer(Combine c, const T* src, O* dst, int64_t n_out, int64_t n_red, const Finish<A, O>& finish) {
  parallel_chunks(n_out, [&](int64_t b, int64_t e) {
    std::vector<A> acc(e - b, initial<A>(c));
    for (int64_t i = 0; i < n_red; i++) {
      const T* row = src + i * n_out;
      if (c == Combine::Sum) {
#pragma omp simd
        for (int64_t j = b; j < e; j++) acc[j - b] += A(row[j]);
      } else {
        for (int64_t j = b; j < e; j++) acc[j - b] = combine<A>(c, acc[j - b], A(row[j]));
      }
    }
    for (int64_t j = b; j < e; j++) dst[j] = finish(acc[j - b]);
  });
}

// strided: per output, a walk over the reduced index space at the input's strides.
template <class T, class O, class A>
void reduce_strided(Combine c, const T* src, O* dst, const Plan& plan, int64_t n_out, int64_t n_red,
                    const Finish<A, O>& finish) {
  Strides kept_c = contiguous_strides(plan.kept_sizes);
  int64_t rr = plan.red_sizes.size();
#pragma omp parallel for if (n_out * n_red >= kParallelGrain)
  for (int64_t o = 0; o < n_out; o++) {
    int64_t base = 0, rem = o;
    for (size_t d = 0; d < plan.kept_sizes.size(); d++) {
      base += (rem / kept_c[d]) * plan.kept_strides[d];
      rem %= kept_c[d];
    }
    A acc = initial<A>(c);
    std::vector<int64_t> idx(rr, 0);
    for (int64_t r = 0; r < n_red; r++) {
      int64_t off = base;
      for (int64_t d = 0; d < rr; d++) off += idx[d] * plan.red_strides[d];
      acc = combine<A>(c, acc, A(src[off]));
      for (int64_t d = rr - 1; d >= 0; d--) {
        if (++idx[d] < plan.red_sizes[d]) break;
        idx[d] = 0;
      }
    }
    dst[o] = finish(acc);
  }
}

// Reduces `in` over `dims` into `out`, choosing the loop shape (inner, outer or strided).
template <class T, class O>
void reduce_kernel(Combine c, bool mean, const Tensor& in, const Tensor& out,
                   const std::vector<int64_t>& dims) {
  using A = typename AccType<T>::type;
  Plan plan;
  std::vector<bool> is_red(in->dim(), false);
  for (int64_t d : dims) is_red[d] = true;
  for (int64_t d = 0; d < in->dim(); d++) {
    (is_red[d] ? plan.red_sizes : plan.kept_sizes).push_back(in->sizes[d]);
    (is_red[d] ? plan.red_strides : plan.kept_strides).push_back(in->strides[d]);
  }
  int64_t n_out = numel_of(plan.kept_sizes), n_red = numel_of(plan.red_sizes);
  const T* src = in->data<T>();
  O* dst = out->data<O>();
  Finish<A, O> finish{mean, n_red};
  bool contiguous = in->is_contiguous();
  bool red_is_tail = true, red_is_head = true;
  for (int64_t d = 0; d < in->dim(); d++) {
    if (is_red[d] && d < in->dim() - (int64_t)dims.size()) red_is_tail = false;
    if (is_red[d] && d >= (int64_t)dims.size()) red_is_head = false;
  }
  if (contiguous && red_is_tail) reduce_inner(c, src, dst, n_out, n_red, finish);
  else if (contiguous && red_is_head) reduce_outer(c, src, dst, n_out, n_red, finish);
  else reduce_strided(c, src, dst, plan, n_out, n_red, finish);
}

Shape reduced_shape(const Shape& in, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < (int64_t)in.size(); d++) {
    bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!red) out.push_back(in[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

template <class T>
void max_min_kernel(const Tensor& a, const Tensor& values, const Tensor& indices,
                    const Shape& kept, const Strides& kept_strides, const Strides& kc,
                    int64_t n_out, int64_t n, int64_t step, bool is_max) {
  const T* src = a->data<T>();
  T* vd = values->data<T>();
  int64_t* id = indices->data<int64_t>();
#pragma omp parallel for if (n_out * n >= kParallelGrain)
  for (int64_t o = 0; o < n_out; o++) {
    int64_t base = 0, rem = o;
    for (size_t d = 0; d < kept.size(); d++) {
      base += (rem / kc[d]) * kept_strides[d];
      rem %= kc[d];
    }
    T best = src[base];
    int64_t best_i = 0;
    for (int64_t i = 1; i < n && best == best; i++) {
      T x = src[base + i * step];
      if (x != x || (is_max ? x > best : x < best)) { best = x; best_i = i; }
    }
    vd[o] = best;
    id[o] = best_i;
  }
}

}  // namespace

// amax/amin have no identity: torch's errors for an empty reduced dim, or for no dim given on
// an empty input.
void check_reduce(OpKind k, const Tensor& a, const std::vector<int64_t>& dims) {
  wrap_dims(dims, a->dim());
  if (k == OpKind::Mean && !is_floating(a->dtype))
    fail("mean(): could not infer output dtype. Input dtype must be either a floating point "
         "or complex dtype. Got: ", dtype_name(a->dtype), ". Convert first, e.g. x.float().mean()");
  const Shape& sizes = a->sizes;
  bool empty = std::find(sizes.begin(), sizes.end(), 0) != sizes.end();
  if ((k != OpKind::Amax && k != OpKind::Amin) || !empty) return;
  if (dims.empty())
    fail(op_name(k), "(): Expected reduction dim to be specified for input.numel() == 0. "
         "Specify the reduction dim with the 'dim' argument.");
  for (int64_t d : dims)  // as torch, the dim as the caller wrote it
    if (sizes[wrap_dim(d, (int64_t)sizes.size())] == 0)
      fail_index(op_name(k), "(): Expected reduction dim ", d, " to have non-zero size.");
}

Tensor reduce(OpKind k, const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim) {
  if (!a) fail_type(op_name(k), "(): argument 'input' must be a Tensor, not None");
  check_reduce(k, a, dims_in);
  std::vector<int64_t> dims = wrap_dims(dims_in, a->dim());
  if (dims.empty())
    for (int64_t d = 0; d < a->dim(); d++) dims.push_back(d);
  DType out_dtype = a->dtype;
  if (k == OpKind::Sum && !is_floating(a->dtype)) out_dtype = DType::Int64;
  Shape out_shape = reduced_shape(a->sizes, dims, keepdim);
  Tensor out = TensorImpl::empty(out_shape, out_dtype, a->device());
  Combine c = k == OpKind::Amax ? Combine::Max : k == OpKind::Amin ? Combine::Min : Combine::Sum;
  if (out->is_cuda()) {  // the kernel writes the result without the kept size-1 dims
    Tensor flat = keepdim ? TensorImpl::view_of(out, reduced_shape(a->sizes, dims, false),
                                                contiguous_strides(reduced_shape(a->sizes, dims, false)), 0)
                          : out;
    if (a->dim() == 0) cuda::copy(out, a);  // a 0-d tensor reduces to itself
    else cuda::reduce(k, flat, a, dims);
  } else {
    MINI_DISPATCH(a->dtype, T, [&] {
      MINI_DISPATCH(out_dtype, O, [&] { reduce_kernel<T, O>(c, k == OpKind::Mean, a, out, dims); });
    });
  }
  count_kernel(a->nbytes() + out->nbytes());
  Attrs at;
  at.dims = dims_in;
  at.keepdim = keepdim;
  if (is_floating(out_dtype)) record(k, {a}, out, at);
  return out;
}

std::pair<Tensor, Tensor> max_min_dim(const Tensor& a, int64_t dim_in, bool keepdim, bool is_max) {
  int64_t dim = wrap_dim(dim_in, a->dim());
  if (a->dim() == 0) {  // torch: a 0-d tensor reduces to itself, index 0
    Tensor v = clone(a);  // the one kernel; the index of a 0-d tensor is 0
    Tensor i = TensorImpl::empty({}, DType::Int64);
    *i->data<int64_t>() = 0;
    return {v, to_device(i, a->device())};
  }
  int64_t n = a->sizes[dim];
  if (n == 0) fail_index(is_max ? "max" : "min", "(): Expected reduction dim ", dim, " to have non-zero size.");
  Shape out_shape = reduced_shape(a->sizes, {dim}, keepdim);
  Tensor values = TensorImpl::empty(out_shape, a->dtype, a->device());
  Tensor indices = TensorImpl::empty(out_shape, DType::Int64, a->device());
  Shape kept = a->sizes;
  kept.erase(kept.begin() + dim);
  Strides kept_strides = a->strides;
  kept_strides.erase(kept_strides.begin() + dim);
  Strides kc = contiguous_strides(kept);
  int64_t n_out = numel_of(kept), step = a->strides[dim];
  if (a->is_cuda()) {
    cuda::max_min_dim(TensorImpl::view_of(values, kept, kc, 0), TensorImpl::view_of(indices, kept, kc, 0),
                      a, dim, is_max);
  } else {
    MINI_DISPATCH(a->dtype, T, [&] {
      max_min_kernel<T>(a, values, indices, kept, kept_strides, kc, n_out, n, step, is_max);
    });
  }
  count_kernel(a->nbytes() + values->nbytes() + indices->nbytes());
  Attrs at;
  at.dims = {dim};
  at.keepdim = keepdim;
  if (is_floating(a->dtype)) record(is_max ? OpKind::Amax : OpKind::Amin, {a}, values, at);
  return {values, indices};
}

namespace {
// On CUDA: the flat indices come from one kernel (which synchronizes to learn their count, as
// torch's nonzero does); turning them into coordinates happens on the host, where the count
// already had to go, and the result goes back in one copy.
Tensor nonzero_cuda(const Tensor& a) {
  Tensor flat = cuda::nonzero_flat(contiguous(detach(a)));
  std::vector<int64_t> hits(flat->numel());
  cuda::copy_bytes(hits.data(), Device::cpu(), flat->device_raw(), flat->device(), hits.size() * 8);
  int64_t rank = a->dim();
  Strides cs = contiguous_strides(a->sizes);
  std::vector<int64_t> coords(hits.size() * rank);
  for (size_t h = 0; h < hits.size(); h++) {
    int64_t rem = hits[h];
    for (int64_t d = 0; d < rank; d++) {
      coords[h * rank + d] = rem / cs[d];
      rem %= cs[d];
    }
  }
  Tensor out = TensorImpl::empty({(int64_t)hits.size(), rank}, DType::Int64, a->device());
  if (!coords.empty())
    cuda::copy_bytes(out->device_raw(), out->device(), coords.data(), Device::cpu(), coords.size() * 8);
  count_kernel(a->nbytes() + out->nbytes());
  return out;
}
}  // namespace

Tensor nonzero(const Tensor& a) {
  if (a->is_cuda()) return nonzero_cuda(a);
  std::vector<int64_t> hits;
  Strides cs = contiguous_strides(a->sizes);
  MINI_DISPATCH(a->dtype, T, [&] {
    std::array<char*, 1> base{(char*)a->raw()};
    std::array<Strides, 1> st{a->strides};
    int64_t i = 0;
    strided_loop<1>(a->sizes, base, st, {(int64_t)sizeof(T)}, [&](std::array<char*, 1> p) {
      if (*(T*)p[0] != T(0)) hits.push_back(i);
      i++;
    }, /*allow_parallel=*/false);
  });
  int64_t rank = a->dim();
  Tensor out = TensorImpl::empty({(int64_t)hits.size(), rank}, DType::Int64);
  int64_t* o = out->data<int64_t>();
  for (size_t h = 0; h < hits.size(); h++) {
    int64_t rem = hits[h];
    for (int64_t d = 0; d < rank; d++) {
      o[h * rank + d] = rem / cs[d];
      rem %= cs[d];
    }
  }
  count_kernel(a->nbytes() + out->nbytes());
  return out;
}

}  // namespace mini
