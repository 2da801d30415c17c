// matmul.cpp — torch.matmul semantics on top of one batched GEMM kernel (OpenBLAS for
// float32/float64, and for bfloat16 widened to float32; a plain loop for int64). 1-D operands
// are unsqueezed to matrices and the extra dim squeezed away afterwards, so the core op and
// its derivative only ever see operands of rank >= 2. linear() is F.linear's eager form: on
// CUDA one GEMM with the bias in its epilogue, with a backward node of its own.
#include <cblas.h>

#include "autograd.h"
#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"

namespace mini {

namespace {

// How BLAS can read one matrix of an operand: row-major as is, or as the transpose of a
// column-major one. Anything else needs a contiguous copy first.
struct BlasView {
  bool trans = false;
  int64_t ld = 0;
};

bool blas_view(const Tensor& t, BlasView* v) {
  int64_t r = t->dim(), rows = t->sizes[r - 2], cols = t->sizes[r - 1];
  int64_t rs = t->strides[r - 2], cs = t->strides[r - 1];
  if ((cs == 1 || cols == 1) && rs >= std::max<int64_t>(cols, 1)) {
    *v = {false, std::max<int64_t>(rs, 1)};
    return true;
  }
  if ((rs == 1 || rows == 1) && cs >= std::max<int64_t>(rows, 1)) {
    *v = {true, std::max<int64_t>(cs, 1)};
    return true;
  }
  return false;
}

template <class T>
void gemm(const BlasView& va, const BlasView& vb, int64_t n, int64_t k, int64_t m, const T* a,
          const T* b, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, va.trans ? CblasTrans : CblasNoTrans, vb.trans ? CblasTrans : CblasNoTrans,
                n, m, k, 1.0f, a, va.ld, b, vb.ld, 0.0f, c, m);
  } else if constexpr (std::is_same_v<T, double>) {
    cblas_dgemm(CblasRowMajor, va.trans ? CblasTrans : CblasNoTrans, vb.trans ? CblasTrans : CblasNoTrans,
                n, m, k, 1.0, a, va.ld, b, vb.ld, 0.0, c, m);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    // OpenBLAS as built here has no bfloat16 GEMM (sbgemm): both operands are widened to
    // float32, sgemm accumulates in float32 (as torch's bfloat16 matmul does), and each
    // result is rounded once on store.
    std::vector<float> fa(n * k), fb(k * m), fc(n * m);
    for (int64_t i = 0; i < n; i++)
      for (int64_t p = 0; p < k; p++) fa[i * k + p] = va.trans ? a[p * va.ld + i] : a[i * va.ld + p];
    for (int64_t p = 0; p < k; p++)
      for (int64_t j = 0; j < m; j++) fb[p * m + j] = vb.trans ? b[j * vb.ld + p] : b[p * vb.ld + j];
    gemm<float>({false, k}, {false, std::max<int64_t>(m, 1)}, n, k, m, fa.data(), fb.data(), fc.data());
    for (int64_t i = 0; i < n * m; i++) c[i] = fc[i];
  } else {
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < m; j++) {
        T acc = 0;
        for (int64_t p = 0; p < k; p++) {
          T x = va.trans ? a[p * va.ld + i] : a[i * va.ld + p];
          T y = vb.trans ? b[j * vb.ld + p] : b[p * vb.ld + j];
          acc += x * y;
        }
        c[i * m + j] = acc;
      }
  }
}

struct Batch {
  int64_t count;
  const Shape& dims;        // the broadcast batch dims
  const Strides& contig;    // their contiguous strides (for unflattening an index)
  const Strides& a, & b;    // each operand's strides along them (0: broadcast)
};

// c[i] = a[i] @ b[i] for every batch index i, on the threads where `parallel` (each GEMM then
// runs on one thread: OpenBLAS on OpenMP does inside a parallel region).
template <class T>
void batched_gemm(const Batch& bt, bool parallel, const BlasView& va, const BlasView& vb, int64_t n,
                  int64_t k, int64_t m, const T* a, const T* b, T* out) {
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t bi = 0; bi < bt.count; bi++) {
    int64_t oa = 0, ob = 0, rem = bi;
    for (size_t d = 0; d < bt.dims.size(); d++) {
      int64_t idx = rem / bt.contig[d];
      rem %= bt.contig[d];
      oa += idx * bt.a[d];
      ob += idx * bt.b[d];
    }
    T* c = out + bi * n * m;
    if (k == 0) {
      for (int64_t i = 0; i < n * m; i++) c[i] = 0;
      continue;
    }
    gemm<T>(va, vb, n, k, m, a + oa, b + ob, c);
  }
}

std::string mat_str(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

// The core op: a [..., n, k] @ b [..., k, m] with broadcast batch dims (check_matmul checked
// them).
Tensor matmul_nd(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  int64_t ra = a->dim(), rb = b->dim();
  int64_t n = a->sizes[ra - 2], k = a->sizes[ra - 1], m = b->sizes[rb - 1];
  Shape batch_a(a->sizes.begin(), a->sizes.end() - 2), batch_b(b->sizes.begin(), b->sizes.end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b);
  Shape out_shape = batch;
  out_shape.push_back(n);
  out_shape.push_back(m);
  Device device = common_device("matmul", {a, b});
  Tensor out = TensorImpl::empty(out_shape, a->dtype, device);
  metrics().matmuls[int(a->dtype)] += 1;
  if (device.is_cuda()) {  // cuBLAS, on [batch, n, k] x [batch, k, m] views (stride 0: broadcast)
    if (a->dtype == DType::Bool || a->dtype == DType::Int64)
      fail("matmul on CUDA is implemented for float32, float64 and bfloat16 (cuBLAS), not ",
           dtype_name(a->dtype), "; convert first, e.g. a.float() @ b.float()");
    auto as_3d = [&](const Tensor& t, const Shape& tb) {
      int64_t r = t->dim();
      Strides bs = broadcast_strides(tb, Strides(t->strides.begin(), t->strides.end() - 2), batch);
      Shape flat_batch = batch.empty() ? Shape{1} : batch;
      // batch dims flatten into one when their strides allow; otherwise copy first
      Shape sz = {numel_of(batch), t->sizes[r - 2], t->sizes[r - 1]};
      Strides one;
      if (!view_strides(flat_batch, batch.empty() ? Strides{0} : bs, {numel_of(batch)}, &one)) {
        Tensor c = contiguous(detach(expand(t, [&] { Shape s = batch; s.push_back(t->sizes[r - 2]); s.push_back(t->sizes[r - 1]); return s; }())));
        return TensorImpl::view_of(c, sz, {sz[1] * sz[2], sz[2], 1}, c->offset);
      }
      return TensorImpl::view_of(t, sz, {one[0], t->strides[r - 2], t->strides[r - 1]}, t->offset);
    };
    Tensor out3 = TensorImpl::view_of(out, {numel_of(batch), n, m}, {n * m, m, 1}, 0);
    cuda::matmul(out3, as_3d(a, batch_a), as_3d(b, batch_b));
    count_kernel(a_in->nbytes() + b_in->nbytes() + out->nbytes());
    record(OpKind::Matmul, {a_in, b_in}, out);
    return out;
  }
  BlasView va, vb;
  if (!blas_view(a, &va)) { a = contiguous(detach(a)); blas_view(a, &va); }
  if (!blas_view(b, &vb)) { b = contiguous(detach(b)); blas_view(b, &vb); }
  Strides sa = broadcast_strides(batch_a, Strides(a->strides.begin(), a->strides.end() - 2), batch);
  Strides sb = broadcast_strides(batch_b, Strides(b->strides.begin(), b->strides.end() - 2), batch);
  int64_t nbatch = numel_of(batch);
  Strides bc = contiguous_strides(batch);
  // A batch of a against one matrix b (x @ w of a linear layer on [B, T, C]) whose rows follow
  // each other at one stride is one GEMM of nbatch * n rows, as torch folds it: 16 GEMMs of 64
  // rows, each split over the threads by OpenBLAS, took the GPT's step 2.7 ms a matmul on 16 cores.
  bool fold = false;
  if (nbatch > 1 && batch_b.empty() && !va.trans && k > 0) {
    Strides rows;
    Shape a_rows(a->sizes.begin(), a->sizes.end() - 1);
    fold = view_strides(a_rows, Strides(a->strides.begin(), a->strides.end() - 1), {nbatch * n}, &rows) &&
           rows[0] == va.ld;
  }
  // Small matrices of a true batch (attention's [B, heads, T, T] x [B, heads, T, d]) run one
  // GEMM a thread, the batch split over the threads (OpenBLAS on OpenMP runs one thread inside a
  // parallel region); a large GEMM is split by OpenBLAS itself.
  const bool by_batch = nbatch > 1 && n * k * m <= (int64_t(1) << 18) &&
                        nbatch * n * k * m >= (int64_t(1) << 16) && omp_get_max_threads() > 1;
  MINI_DISPATCH(a->dtype, T, [&] {
    if constexpr (std::is_same_v<T, bool>) {
      fail("matmul is not implemented for bool tensors");  // check_matmul refused them
    } else if (fold) {
      gemm<T>(va, vb, nbatch * n, k, m, a->data<T>(), b->data<T>(), out->data<T>());
    } else {
      Batch bt{nbatch, batch, bc, sa, sb};
      batched_gemm<T>(bt, by_batch, va, vb, n, k, m, a->data<T>(), b->data<T>(), out->data<T>());
    }
  });
  count_kernel(a_in->nbytes() + b_in->nbytes() + out->nbytes());
  record(OpKind::Matmul, {a_in, b_in}, out);
  return out;
}

}  // namespace

void check_matmul(const Tensor& a, const Tensor& b) {
  if (a->dim() == 0 || b->dim() == 0)
    fail("both arguments to matmul need to be at least 1D, but they are ", a->dim(), "D and ",
         b->dim(), "D");
  if (a->dtype != b->dtype)
    fail("expected m1 and m2 to have the same dtype, but got: ", dtype_name(a->dtype), " != ",
         dtype_name(b->dtype));
  if (a->dtype == DType::Bool)
    fail("matmul is not implemented for bool tensors; convert first, e.g. a.float() @ b.float()");
  if (a->dim() == 1 && b->dim() == 1) {
    if (a->sizes[0] >= 0 && b->sizes[0] >= 0 && a->sizes[0] != b->sizes[0])
      fail("inconsistent tensor size, expected tensor [", a->sizes[0], "] and src [",
           b->sizes[0], "] to have the same number of elements, but got ", a->sizes[0],
           " and ", b->sizes[0], " elements respectively");
    return;
  }
  // the core op's operands: a 1-D operand as a matrix of one row (a) or one column (b)
  Shape x = a->dim() == 1 ? Shape{1, a->sizes[0]} : a->sizes, y = b->dim() == 1 ? Shape{b->sizes[0], 1} : b->sizes;
  int64_t k = x.back(), k2 = y[y.size() - 2];
  if (k >= 0 && k2 >= 0 && k != k2)
    fail("mat1 and mat2 shapes cannot be multiplied (", mat_str(x), " and ", mat_str(y),
         "): the inner dimensions ", k, " and ", k2, " must be equal");
}

void check_mm(const Tensor& a, const Tensor& b) {
  if (a->dim() != 2 || b->dim() != 2)
    fail("mm: expected 2-D tensors, got ", a->dim(), "-D and ", b->dim(), "-D; use matmul for other ranks");
}

void check_bmm(const Tensor& a, const Tensor& b) {
  if (a->dim() != 3) fail("batch1 must be a 3D tensor");
  if (b->dim() != 3) fail("batch2 must be a 3D tensor");
  auto differ = [](int64_t x, int64_t y) { return x >= 0 && y >= 0 && x != y; };  // a size < 0: symbolic
  if (differ(a->sizes[0], b->sizes[0]) || differ(a->sizes[2], b->sizes[1]))
    fail("Expected size for first two dimensions of batch2 tensor to be: [", a->sizes[0], ", ", a->sizes[2],
         "] but got: [", b->sizes[0], ", ", b->sizes[1], "].");
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (!a || !b) fail_type("matmul(): arguments must be Tensors, not None");
  if (autocast_state().on(a->device())) {  // in the lower precision (autograd.h)
    std::vector<Tensor> in = autocast_inputs(OpKind::Matmul, {a, b});
    if (in[0] != a || in[1] != b) return matmul(in[0], in[1]);
  }
  check_matmul(a, b);
  if (a->dim() == 1 && b->dim() == 1) return reshape(matmul_nd(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  if (a->dim() == 1) return squeeze(matmul_nd(unsqueeze(a, 0), b), {-2});
  if (b->dim() == 1) return squeeze(matmul_nd(a, unsqueeze(b, 1)), {-1});
  return matmul_nd(a, b);
}

namespace {

// The backward of linear's one-GEMM forward: the gradients of x @ w^T + b, as eager ops (two
// GEMMs and a column sum), each only where its input needs one.
struct LinearBackward : CustomBackward {
  SavedTensor x, w;  // x as its [n, k] rows
  Shape x_sizes;
  bool need_x = false, need_w = false, need_b = false;

  const char* name() const override { return "Linear"; }

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    Tensor g = grad_outputs.empty() ? nullptr : grad_outputs[0];
    if (!g) return {nullptr, nullptr, nullptr};
    const Tensor& X = x.unpack(name());
    const Tensor& W = w.unpack(name());
    Tensor g2 = reshape(g, {X->sizes[0], W->sizes[0]});
    return {need_x ? reshape(matmul(g2, W), x_sizes) : nullptr,
            need_w ? matmul(transpose(g2, 0, 1), X) : nullptr,  // [m, k], contiguous: a leaf takes it as is
            need_b ? reduce(OpKind::Sum, g2, {0}, false) : nullptr};
  }

  void release() override { x = w = SavedTensor{}; }
};

// x [..., k] as [n, k] rows: a view where the leading dims fold into one, else a copy.
Tensor as_rows(const Tensor& x) {
  const int64_t k = x->sizes.back();
  Shape lead(x->sizes.begin(), x->sizes.end() - 1);
  Strides rows;
  if (view_strides(lead, Strides(x->strides.begin(), x->strides.end() - 1), {numel_of(lead)}, &rows))
    return TensorImpl::view_of(x, {numel_of(lead), k}, {rows[0], x->strides.back()}, x->offset);
  return reshape(contiguous(detach(x)), {numel_of(lead), k});
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  if (!x_in || !w_in) fail_type("linear(): input and weight must be Tensors, not None");
  Tensor x = x_in, w = w_in, b = b_in;
  if (autocast_state().on(x->device())) {  // torch's autocast casts all three to the lower precision
    std::vector<Tensor> in = autocast_inputs(OpKind::Matmul, {x, w, b});
    x = in[0], w = in[1], b = in[2];
  }
  auto by_ops = [&] {  // a GEMM, then the bias's broadcast add
    Tensor out = matmul(x, w->dim() == 2 ? transpose(w, 0, 1) : w);
    return b ? binary(OpKind::Add, out, b) : out;
  };
  const DType dtype = x->dtype;
  if (!b || !x->is_cuda() || x->dim() < 2 || w->dim() != 2 || b->dim() != 1 || w->dtype != dtype ||
      b->dtype != dtype || (dtype != DType::Float32 && dtype != DType::BFloat16) || w->device() != x->device() ||
      b->device() != x->device() || x->sizes.back() != w->sizes[1] || b->sizes[0] != w->sizes[0] || x->numel() == 0)
    return by_ops();
  Tensor x2 = as_rows(x);
  const int64_t n = x2->sizes[0], m = w->sizes[0];
  Shape out_sizes(x->sizes.begin(), x->sizes.end() - 1);
  out_sizes.push_back(m);
  Tensor out = TensorImpl::empty(out_sizes, dtype, x->device());
  if (!cuda::linear(TensorImpl::view_of(out, {n, m}, {m, 1}, 0), x2, w, b)) return by_ops();
  metrics().matmuls[int(dtype)] += 1;
  count_kernel(x2->nbytes() + w->nbytes() + b->nbytes() + out->nbytes());
  if (should_record({x, w, b})) {
    auto bw = std::make_shared<LinearBackward>();
    bw->x.save(detach(x2));
    bw->w.save(detach(w));
    bw->x_sizes = x->sizes;
    bw->need_x = x->needs_grad(), bw->need_w = w->needs_grad(), bw->need_b = b->needs_grad();
    attach_custom_backward(out, bw, {x, w, b});
  }
  return out;
}

}  // namespace mini
