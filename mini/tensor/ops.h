// ops.h — the eager operations: the interface of mini/tensor to every other stage.
//
// In: Tensors (std::shared_ptr<TensorImpl>) and attributes.  Out: new Tensors.
// Guarantees:
//  * each compute op runs exactly one kernel (counted in metrics()); views run none; an op
//    whose kernel needs a contiguous input (softmax, layer_norm, a matmul operand BLAS
//    cannot read as is) first copies a non-contiguous one, counted as a kernel of its own,
//    as torch does;
//  * broadcasting and type promotion follow torch for float32/float64/int64/bool;
//  * when grad mode is on and an input needs grad, the result gets a GradNode whose
//    derivative rule is the op's rule in derivatives.h;
//  * bad input throws mini::Error (see errors.h), never crashes.
// call_op() runs any OpKind by value, which is how graphs are interpreted.
#pragma once
#include <optional>
#include <vector>

#include "op.h"
#include "tensor.h"

namespace mini {

// ---- devices ----------------------------------------------------------------------------
// The device an op on `operands` runs on. All must be on one device, except that a CPU
// tensor with one element and no dims (a Python number, or a 0-d CPU tensor, as torch
// allows) may meet tensors of any device. Otherwise throws torch's "Expected all tensors to
// be on the same device, but found at least two devices, cuda:0 and cpu!" naming `op`.
Device common_device(const char* op, const std::vector<Tensor>& operands);
// A copy of `t` on `device` (t itself when it is there already): one copy, counted as a
// kernel; contiguous when it moves.
Tensor to_device(const Tensor& t, Device device);

// ---- factories ------------------------------------------------------------------------
// `device` CUDA: checked available first (an Error with the reason and the fix otherwise).
Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = {});
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32, Device device = {});
Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = {});
Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = {});
Tensor arange(double start, double end, double step, DType dtype, Device device = {});
Tensor scalar_tensor(double value, DType dtype, bool wrapped_number = false);
// A 0-d int64 tensor holding `value` exactly (a double holds ints exactly only to 2**53).
Tensor int_scalar_tensor(int64_t value, bool wrapped_number = false);
Tensor randn(const Shape& shape, DType dtype = DType::Float32, Device device = {});
Tensor rand(const Shape& shape, DType dtype = DType::Float32, Device device = {});
// Seeds the CPU generator and the CUDA one (a Philox seed whose offset restarts at 0).
void manual_seed(uint64_t seed);

// ---- argument checks ------------------------------------------------------------------
// The errors an op raises from its operands' sizes and dtypes alone, before it computes. The
// eager op calls its check first; graph::infer_meta calls the same function on data-less
// tensors, and so does capture for the calls it records as another op (mm as matmul, view as
// reshape, x[i, j] as selects): compiled code refuses what eager refuses, word for word, on
// every backend. Sizes < 0 (graph meta's symbols) are unknown there and pass: the kernel
// checks them when it runs.
void check_unary(OpKind kind, const Tensor& a);
void check_binary(OpKind kind, const Tensor& a, const Tensor& b);
void check_where(const Tensor& cond);
void check_matmul(const Tensor& a, const Tensor& b);
void check_mm(const Tensor& a, const Tensor& b);  // Tensor.mm: matmul of two 2-D tensors only
void check_bmm(const Tensor& a, const Tensor& b);  // Tensor.bmm: two 3-D tensors, batch and inner sizes equal
void check_view(const Tensor& a, const Shape& shape);  // view: where reshape would copy
void check_softmax(const Tensor& a, int64_t dim, bool log);
void check_mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction);
void check_layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias);
void check_reduce(OpKind kind, const Tensor& a, const std::vector<int64_t>& dims);
// x[i, j, ...]: an IndexError when more indices (ints and slices) than dims are given.
void check_index_count(int64_t indices, int64_t rank);

// ---- the generic entry point ----------------------------------------------------------
Tensor call_op(OpKind kind, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
// Every output of one call (op_outputs(kind) of them; attrs.index ignored): what an executor
// runs once for the nodes of a multi-output op (graph::same_call).
std::vector<Tensor> call_op_outputs(OpKind kind, const std::vector<Tensor>& inputs, const Attrs& attrs = {});

// ---- pointwise ------------------------------------------------------------------------
Tensor binary(OpKind kind, const Tensor& a, const Tensor& b);
// The kernel of binary() writing into `out` (already of the broadcast shape): no counting,
// no autograd. `compute` is the promoted type; out's dtype is compute (or bool for compares).
void binary_out(OpKind kind, const Tensor& out, const Tensor& a, const Tensor& b, DType compute);
Tensor unary(OpKind kind, const Tensor& a, const Attrs& attrs = {});
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& a, const Tensor& min, const Tensor& max);  // min or max may be null
Tensor masked_fill(const Tensor& a, const Tensor& mask, const Tensor& value);  // value: 0-d
Tensor cast(const Tensor& a, DType dtype);  // no kernel when dtype already matches
Tensor clone(const Tensor& a);
Tensor contiguous(const Tensor& a);          // no kernel when already contiguous
DType result_type(const std::vector<Tensor>& operands);

// ---- reductions -----------------------------------------------------------------------
Tensor reduce(OpKind kind, const Tensor& a, const std::vector<int64_t>& dims, bool keepdim);
// max/min along one dim: values and int64 indices from one kernel.
std::pair<Tensor, Tensor> max_min_dim(const Tensor& a, int64_t dim, bool keepdim, bool is_max);

// ---- views ----------------------------------------------------------------------------
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor view(const Tensor& a, const Shape& shape);  // errors where reshape would copy
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor permute(const Tensor& a, const std::vector<int64_t>& perm);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a, const std::vector<int64_t>& dims);  // empty: all size-1
Tensor expand(const Tensor& a, const Shape& shape);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step);
// A copy of base with src (broadcast) written into base's slice: the functional form of an
// in-place write through a slice (torch.slice_scatter).
Tensor slice_scatter(const Tensor& base, const Tensor& src, int64_t dim, int64_t start,
                     int64_t end, int64_t step);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
Tensor detach(const Tensor& a);  // shares storage, no autograd history

// ---- matmul and composite kernels -----------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul: 1-D, 2-D, batched
// F.linear eagerly: x @ w^T + b (b may be null; autocast casts all three). On CUDA, float32 or
// bfloat16, one cuBLASLt GEMM that adds b in its epilogue (cuda::linear), with a custom
// backward node; elsewhere matmul then a broadcast add, recorded as those ops.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);
Tensor softmax(const Tensor& a, int64_t dim, bool log);
// The gradients of layer_norm's recorded inputs {x, weight, bias} (weight, bias null when absent)
// for the output's gradient g, on CUDA by one fused kernel over the rows (dx) and one over the
// columns (dweight, dbias), as torch's eager does; {} on the CPU (derivatives.h's rule runs).
std::vector<Tensor> layer_norm_backward(const Tensor& g, const std::vector<Tensor>& in, const Attrs& attrs,
                                        const std::vector<bool>& need);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps);
Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction);
// Eager cross-entropy's per-row loss: logits [N, C] (floating), target [N] int64 -> nll [N]
// (lse - logits[target]; 0 where target == ignore_index, NaN where it is outside [0, C)), in
// one kernel, with a backward of one more (nn_kernels.cpp). Its dtype is log_softmax's.
Tensor cross_entropy_nll(const Tensor& logits, const Tensor& target, int64_t ignore_index);
// weight[indices]: rows of weight [V, D] picked by int64 indices of any shape -> [*indices, D].
// An index outside [0, V) raises IndexError.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// The gradient of embedding for the weight: zeros of weight_shape, each row i the sum of the
// rows of grad [*indices, D] whose index is i.
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, const Shape& weight_shape);
// softmax(q k^T * scale [masked j > i when causal]) v as one kernel (attention.cpp): q [..., L, E],
// k [..., S, E], v [..., S, Ev] of one dtype, batch dims equal (no broadcasting). Under autocast
// q, k and v compute in its lower precision. Gradients for all three (a custom autograd node).
// `lse`, where given, receives the rows' log-sum-exp of their scaled scores ([..., L], float32;
// float64 for float64 operands): what the backward rebuilds the softmax from.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                    Tensor* lse = nullptr);
// Whether the fused kernel takes these operands; if not, *why says what it lacks.
bool fused_attention_supports(const Tensor& q, const Tensor& k, const Tensor& v, std::string* why);
// The graph ops Attention and AttentionBackward (no autograd recorded, no autocast: a graph
// holds its casts): {out, lse} of the fused forward, and {dq, dk, dv} from its saved inputs,
// output and lse and the output's gradient (FlashAttention-2's backward on CUDA where it takes
// the operands, else the same formulas as eager ops).
std::vector<Tensor> attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale);
// attention_forward, and the output's autograd node where q, k or v require grad (what
// scaled_dot_product_attention runs after autocast's casts; the Attention op's eager form).
std::vector<Tensor> attention_with_grad(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale);
std::vector<Tensor> attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                       const Tensor& lse, const Tensor& grad_out, bool causal, double scale);
// The strides attention writes a result of `sizes` in (its output after q, each gradient after
// its operand), from that operand's sizes and strides: where the operand's heads (dim r - 3) lie
// inside its rows (dim r - 2) in memory, as a GPT's heads [B, H, T, D], transposed views of a
// [B, T, H, D] projection, do, a dense [..., T, H, D] buffer seen as [..., H, T, D] (as torch's
// flash attention writes it: the model's transpose back is then free); else contiguous. Graph
// meta and the kernels use this one rule.
Strides attention_out_strides(const Shape& sizes, const Shape& like_sizes, const Strides& like_strides);
// Whether a compiled graph should hold attention as one Attention node (an extern call to the
// tiled kernel) rather than its matmuls and softmax: `policy` "auto" takes it where the
// FlashAttention kernels run (CUDA, bfloat16 or float32, head dim 64 or 128), "always" wherever
// the fused kernel takes the operands (the CPU too), "never" nowhere. Metas: sizes, dtype, device only.
bool attention_node_fits(const Tensor& q, const Tensor& k, const Tensor& v, const std::string& policy);

// ---- optimizers ---------------------------------------------------------------------------
// One Adam (decoupled false) or AdamW (decoupled true) step of one parameter, in place, in one
// pass over its elements (one kernel on CUDA; optim_math.h says what each element computes):
// `step` is the step's number t >= 1 (the bias corrections' exponent). param, grad, exp_avg
// and exp_avg_sq: one device, one floating dtype (float32 or float64), one shape, contiguous.
// Bumps the versions of param, exp_avg and exp_avg_sq; records no autograd.
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  int64_t step;
};
void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamHyper& h);
// adam_step_ for each parameter i that adam_fusable takes, at step number steps[i] (h.step is
// ignored), the others left alone: returns which it stepped. The CUDA parameters of one dtype
// and step share launches (up to cuda::kAdamTensorsPerLaunch parameters each), each computing
// what adam_step_ computes.
std::vector<bool> adam_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                              const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                              const std::vector<int64_t>& steps, const AdamHyper& h);
// Whether adam_step_ takes these operands (the conditions above), without raising.
bool adam_fusable(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq);
Tensor nonzero(const Tensor& a);
Tensor sum_to(const Tensor& a, const Shape& shape);  // reduces broadcast dims away

// ---- in place (bump the storage version; autograd-checked) ----------------------------
void copy_(const Tensor& dst, const Tensor& src);
void inplace_binary(OpKind kind, const Tensor& self, const Tensor& other);
void fill_(const Tensor& self, double value);
void relu_(const Tensor& self);
void clamp_(const Tensor& self, const Tensor& min, const Tensor& max);
void masked_fill_(const Tensor& self, const Tensor& mask, const Tensor& value);
// The error of an in-place op on a leaf that requires grad (or a view of one) while grad
// mode is on; capture raises it too.
[[noreturn]] void fail_inplace_on_leaf(const char* op, bool view);

}  // namespace mini
