// cuda/kernels.h — the eager CUDA kernels, one launch per call: what mini/tensor's ops run
// when their operands live on a CUDA device.
//
// The ops in mini/tensor (pointwise.cpp, reduce.cpp, ...) do everything that does not touch
// memory — argument checks, broadcasting, type promotion, the result's shape, allocation,
// metrics, autograd — for both devices, and call one function of this file instead of their
// CPU kernel. So a function here:
//  * writes into `out`, a device tensor the caller allocated with the result's shape and
//    dtype (contiguous unless the function says otherwise);
//  * takes device tensors of any strides, and where it says "scalar-capable" also a CPU
//    tensor with one element (a Python number, or a 0-d CPU tensor as torch allows), which
//    it reads on the host and passes to the kernel by value;
//  * launches exactly one kernel (none when `out` is empty) and calls check_launch(op);
//  * neither counts metrics nor records autograd.
// With CUDA these are defined in pointwise.cu, random.cu, reduce.cu, nn.cu and matmul.cu;
// without, stub.cpp defines them to throw (they are never reached: factories refuse
// device="cuda" first).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/op.h"
#include "tensor/tensor.h"

namespace mini::cuda {

// ---- pointwise (pointwise.cu) ---------------------------------------------------------------
// out = k(a, b) over out's shape (a and b broadcast to it). a and b may be of any dtype and
// are converted to `compute` as they are loaded; out's dtype is `compute`, or bool for the
// comparisons. out may be any strided device tensor (in-place ops write into a view).
// a and b are scalar-capable. `mode` is GeluBackward's approximate ("none" | "tanh").
// Bool arithmetic is logic (+, max: or; *, min: and), as on the CPU.
void binary(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b, DType compute,
            const std::string& mode);
// out = k(a): Neg Abs Exp Log Sin Cos Tanh Sigmoid Relu Sqrt Rsqrt Sign Gelu (attrs.mode).
// a of any dtype, converted to out's dtype as loaded. out contiguous.
void unary(OpKind k, const Tensor& out, const Tensor& a, const Attrs& attrs);
// For the kernel sweep (tests/cuda/bench_cuda_sweep.cpp) only: the flat kernel of Pow, Mul,
// Add or Div (a, b) or Sigmoid, Sqrt, Log, Sin, Cos or Gelu (a; b unused) on float32 or
// bfloat16, with `unroll` (1, 2 or 4)
// 16-byte loads per operand in flight per thread instead of the production choice, and with
// `full_tiles` (unroll 2 or 4) no bounds check between the loads of a step whose vectors are
// all in range. Returns false, launching nothing, where the flat kernel does not apply.
bool sweep_flat(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b, int unroll,
                bool full_tiles);
// dst = src broadcast to dst's shape, converting dtype (to bool: != 0). dst any strides;
// src scalar-capable. What cast, clone, contiguous, copy_, fill_ and slice writes run.
void copy(const Tensor& dst, const Tensor& src);
// out = cond ? a : b (all broadcast to out's shape); a and b converted to out's dtype.
// cond, a and b are scalar-capable.
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// out (contiguous) filled with value converted to out's dtype.
void fill(const Tensor& out, double value);
// out[i] = start + i * step, converted to out's dtype (out 1-D contiguous).
void arange(const Tensor& out, double start, double step);

// ---- random numbers (random.cu) -------------------------------------------------------------
// Philox-4x32-10, counter-based: element i of a launch with (seed, offset) is a function of
// seed and (offset, i) alone, so results do not depend on the launch configuration. uniform
// in [0, 1) or standard normal (Box-Muller). out floating, contiguous. The caller advances
// the generator's offset by the number of 128-bit counters used: random_offset_increment().
void random(const Tensor& out, bool normal, uint64_t seed, uint64_t offset);
uint64_t random_offset_increment(int64_t numel);

// ---- reductions (reduce.cu) -------------------------------------------------------------------
// out = Sum | Mean | Amax | Amin of `a` over `dims` (sorted, unique, wrapped, non-empty:
// a full reduction lists every dim). out is contiguous with a's shape minus `dims`; its dtype
// is the op's result dtype (sum of bool/int64: int64; mean: a's floating dtype). Sums of
// float32 and bfloat16 accumulate in float32, float64 in float64. NaN propagates for
// amax/amin. Rows reduced by warp shuffles and a block reduction; long reductions in two
// passes (or atomics), still counted as one kernel by the caller.
void reduce(OpKind k, const Tensor& out, const Tensor& a, const std::vector<int64_t>& dims);
// For the kernel sweep only: reduce()'s Sum or Amax of a contiguous float32 or bfloat16
// [rows, n] over its last dim (2048 <= n < 16384: a block a row), with `threads` per block
// (0: the production rule) and `accs` (1 or 4) accumulators per thread in the vector loop
// (production: 4); `bounded`: the kernel compiled with __launch_bounds__(1024, 1)
// (production: none), with which ptxas issues the four 16-byte loads of a step before the
// first add (without: two).
void sweep_reduce_rows(OpKind k, const Tensor& out, const Tensor& a, int threads, int accs,
                       bool bounded);
// values/indices (int64) = max or min of `a` along `dim` and its first index, contiguous,
// with a's shape minus `dim`.
void max_min_dim(const Tensor& values, const Tensor& indices, const Tensor& a, int64_t dim,
                 bool is_max);
// The flat indices i (int64, ascending) where a[i] != 0 for contiguous `a`: synchronizes to
// learn the count; returns an int64 device tensor [count].
Tensor nonzero_flat(const Tensor& a);

// ---- fused nn kernels (nn.cu) -----------------------------------------------------------------
// Softmax or log-softmax of contiguous `a` over dim (a seen as [outer, n, inner]); out like a.
// One kernel: a row's max, its sum of exp and the outputs, the row kept on chip when it fits.
void softmax(const Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log);
// Layer norm of contiguous x seen as [rows, cols] over its last cols elements; w and b
// (contiguous [cols], either may be null) applied after. Mean and variance in float32
// (float64 for float64), Welford or two-pass in registers.
// layer_norm's backward over rows of `cols` (x, g contiguous, w [cols] or null): dx (or null),
// dw and db (each [cols], or null) in x's dtype, from x again (its mean and rstd recomputed).
void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& g, const Tensor& x,
                         const Tensor& w, int64_t rows, int64_t cols, double eps);
void layer_norm(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows,
                int64_t cols, double eps);

// Cross-entropy of contiguous logits [rows, n] with int64 targets [rows], a block a row: lse
// [rows] and nll [rows] (lse - x[t]; 0 where t == ignore_index, NaN where t is outside [0, n))
// in float32 (float64 for float64). The backward: dx (logits' dtype) = g (exp(x - lse) - [j == t]),
// zero rows where t is ignored or out of range; g and lse as the forward's nll.
void cross_entropy(const Tensor& nll, const Tensor& lse, const Tensor& x, const Tensor& target, int64_t rows,
                   int64_t n, int64_t ignore_index);
void cross_entropy_backward(const Tensor& dx, const Tensor& g, const Tensor& x, const Tensor& target,
                            const Tensor& lse, int64_t rows, int64_t n, int64_t ignore_index);

// Embedding: out [n, d] = weight [rows, d] at the n int64 indices `index` (device, checked in
// range by the caller). Its backward, deterministic: `order` (device int64 [n]) lists the
// positions of `index` sorted by row, stably, and `starts` (device int64 [segments + 1]) where
// each row's run begins in it, `seg_rows` (device int64 [segments]) that row: each run's
// gradient rows added in position order into grad_weight (zeros, [rows, d]).
void embedding(const Tensor& out, const Tensor& weight, const Tensor& index);
// ---- attention (attention.cu) ---------------------------------------------------------------
// out [..., L, Ev] = softmax(q k^T * scale, keys j > i masked when causal) v, and lse [..., L]
// (float64 for float64 operands, else float32) each row's log-sum-exp of its scaled scores; q [..., L, E], k [..., S, E],
// v [..., S, Ev] contiguous, of out's dtype, S > 0. A warp per query row (attention.cu).
void attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
               bool causal, double scale);
// Whether the kernel holds head dims E and Ev (it keeps a row of each in registers).
bool attention_supports(int64_t E, int64_t Ev);
// FlashAttention-2 on the tensor cores (flash_attention.cu; float32 in flash_attention_f32.cu),
// which attention() runs where flash_attention_supports(dtype, E, Ev): bfloat16 or float32,
// E == Ev, 64 or 128. Its backward takes the forward's q, k, v, out and lse and the incoming
// gradient dout (q's dtype but lse, float32) and writes dq, dk, dv (of q's, k's and v's shapes),
// recomputing the scores. Every operand, outputs included, is in any layout
// flash_attention_reads takes (contiguous ones always are).
bool flash_attention_supports(DType dtype, int64_t E, int64_t Ev);
// Whether the flash kernels read (or write) `t` where it is: [..., rows, D] with D dense, the
// batch dims folding into a batch and a head dim each at one stride, strides multiples of 16
// bytes, its start 16-byte aligned (not checked for a meta tensor, which has no data).
bool flash_attention_reads(const Tensor& t);
void flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                     bool causal, double scale);
void flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                              const Tensor& lse, bool causal, double scale);
// grad_weight (zeros, [rows, d]) gets each picked row's gradient rows summed in position order:
// `positions` (int64 0, 1, ..., n - 1) sorted by `index` on the device (no host sync); indices
// outside [0, rows) skipped.
void embedding_backward(const Tensor& grad_weight, const Tensor& grad, const Tensor& index, const Tensor& positions);

// ---- optimizers (optim.cu) --------------------------------------------------------------------
// One Adam/AdamW step of several parameters: for each (param, grad, exp_avg, exp_avg_sq), all
// contiguous, of one shape, optim_math.h's adam_element over its elements, with the step's
// scalars (mini::adam_steps_ computes them) in float64, rounded to the dtype on the host. Every
// operand of every parameter has one dtype (float32 or float64) and the parameters one step
// number. Up to kAdamTensorsPerLaunch parameters share a launch (a multi-tensor kernel, as
// torch's fused AdamW's multi_tensor_apply): a GPT's 50 parameters are 3 launches, not 50.
// Returns the launches made.
constexpr int kAdamTensorsPerLaunch = 24;
struct AdamOperands {
  Tensor param, grad, exp_avg, exp_avg_sq;
};
int adam_steps(const std::vector<AdamOperands>& operands, const double scalars[9], bool decoupled, bool coupled);

// ---- matmul (matmul.cu, cuBLAS) ---------------------------------------------------------------
// out [batch, n, m] (contiguous) = a [batch, n, k] @ b [batch, k, m], where a and b are device
// tensors of out's dtype (float32, float64 or bfloat16) whose strides may be anything
// (stride 0 on broadcast batch dims); copies an operand cuBLAS cannot read as it is. float32
// without TF32 unless allow_tf32(); bfloat16 accumulates in float32. k == 0 gives zeros.
void matmul(const Tensor& out, const Tensor& a, const Tensor& b);
// out [n, m] (contiguous) = x [n, k] @ w [m, k]^T + bias [m], one cuBLASLt GEMM that adds the
// bias in its epilogue; x and w row- or column-major 2-D views, all four of one dtype (float32
// or bfloat16). Returns false, having launched nothing, where cuBLASLt has no kernel for these
// operands (an empty size, a bias not 16-byte aligned, another dtype): the caller adds the bias.
bool linear(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias);

}  // namespace mini::cuda
