// op.h — the vocabulary of operations: one OpKind per eager kernel, with its attributes.
//
// This list is shared by every stage: eager autograd records an OpKind per node, the graph
// IR (mini/graph) stores one per node, derivative rules (derivatives.h) switch on it, and
// later the fusion stage classifies it (pointwise / reduction / view / extern).
// call_op(kind, inputs, attrs) in ops.h runs any of them eagerly.
#pragma once
#include <string>
#include <vector>

#include "device.h"
#include "dtype.h"
#include "shape.h"

namespace mini {

#define MINI_OP_LIST(X)                                                        \
  /* pointwise, two inputs (broadcast, promoted) */                           \
  X(Add, "add", Pointwise) X(Sub, "sub", Pointwise) X(Mul, "mul", Pointwise)   \
  X(Div, "div", Pointwise) X(Pow, "pow", Pointwise)                            \
  X(Maximum, "maximum", Pointwise) X(Minimum, "minimum", Pointwise)            \
  X(Eq, "eq", Pointwise) X(Ne, "ne", Pointwise) X(Lt, "lt", Pointwise)         \
  X(Le, "le", Pointwise) X(Gt, "gt", Pointwise) X(Ge, "ge", Pointwise)         \
  X(GeluBackward, "gelu_backward", Pointwise)                                  \
  /* pointwise, one input */                                                  \
  X(Neg, "neg", Pointwise) X(Abs, "abs", Pointwise) X(Exp, "exp", Pointwise)   \
  X(Log, "log", Pointwise) X(Sin, "sin", Pointwise) X(Cos, "cos", Pointwise)   \
  X(Tanh, "tanh", Pointwise) X(Sigmoid, "sigmoid", Pointwise)                  \
  X(Relu, "relu", Pointwise) X(Sqrt, "sqrt", Pointwise)                        \
  X(Rsqrt, "rsqrt", Pointwise) X(Sign, "sign", Pointwise)                      \
  X(Gelu, "gelu", Pointwise) X(Cast, "to", Pointwise) X(Clone, "clone", Pointwise) \
  /* pointwise, three inputs */                                               \
  X(Where, "where", Pointwise)                                                 \
  /* reductions */                                                            \
  X(Sum, "sum", Reduction) X(Mean, "mean", Reduction)                          \
  X(Amax, "amax", Reduction) X(Amin, "amin", Reduction)                        \
  /* views: no kernel, an index rewrite */                                    \
  X(Reshape, "reshape", View) X(Transpose, "transpose", View)                  \
  X(Permute, "permute", View) X(Unsqueeze, "unsqueeze", View)                  \
  X(Squeeze, "squeeze", View) X(Expand, "expand", View)                        \
  X(Slice, "slice", View) X(Select, "select", View)                            \
  X(Detach, "detach", View)                                                    \
  /* composite kernels */                                                     \
  X(Matmul, "matmul", Extern)                                                  \
  X(Attention, "attention", Extern)                                            \
  X(AttentionBackward, "attention_backward", Extern)                           \
  X(Softmax, "softmax", Composite) X(LogSoftmax, "log_softmax", Composite)      \
  X(LayerNorm, "layer_norm", Composite) X(MseLoss, "mse_loss", Composite)      \
  X(SliceBackward, "slice_backward", Composite)                                \
  X(SliceScatter, "slice_scatter", Composite)                                  \
  X(Nonzero, "nonzero", Composite)                                             \
  X(Embedding, "embedding", Composite)                                         \
  X(EmbeddingBackward, "embedding_backward", Composite)                        \
  /* factories: a new tensor from attributes alone (no inputs) */             \
  X(Full, "full", Factory) X(Empty, "empty", Factory)                          \
  X(Arange, "arange", Factory) X(Rand, "rand", Factory) X(Randn, "randn", Factory)

enum class OpKind {
#define MINI_OP_ENUM(name, str, cls) name,
  MINI_OP_LIST(MINI_OP_ENUM)
#undef MINI_OP_ENUM
};

enum class OpClass { Pointwise, Reduction, View, Extern, Composite, Factory };

const char* op_name(OpKind k);
OpClass op_class(OpKind k);
// Pointwise ops that evaluate a polynomial or call a math function (exp, sin, sigmoid, ...):
// tens of dependent instructions per element where plain arithmetic is one. Codegen stages
// loops at them; the recompute partitioner saves them rather than run them twice.
bool is_transcendental(OpKind k);
// Ops that draw from the random generator: a graph keeps them even when nothing reads them
// and never runs one twice, so the generator advances as it does in eager code.
bool is_random(OpKind k);
// How many tensors one call of the op computes (attention: its output and log-sum-exp; its
// backward: dq, dk, dv); 1 for every other op. A graph holds one node per output, told apart by
// attrs.index, and the executors run one call for all the nodes of a call (graph::same_call).
int op_outputs(OpKind k);

// Attributes of one op application. Each op reads only the fields it documents:
//   reductions: dims (empty = all), keepdim
//   Reshape/Expand: shape;  Permute: dims;  Transpose: dim, dim2;  Unsqueeze: dim
//   Squeeze: dims (empty = every size-1 dim);  Select: dim, index
//   Slice: dim, start, end, step;  SliceBackward: shape (of the base) + Slice's fields
//   SliceScatter (inputs base, src): Slice's fields;  Detach: none
//   Softmax/LogSoftmax: dim;  LayerNorm: dims = normalized trailing dim count in dim, eps
//   Gelu/GeluBackward: approximate ("none"|"tanh");  MseLoss: reduction
//   Cast: dtype
//   Embedding (inputs weight [V, D], indices int64): none;  EmbeddingBackward (inputs grad,
//   indices): shape (the weight's)
//   Attention (inputs q, k, v): mode ("causal" or ""), value (the scale), index (0: the output,
//   1: the log-sum-exp of each query row);  AttentionBackward (inputs q, k, v, out, lse,
//   grad_out): Attention's fields, index (0, 1, 2: dq, dk, dv)
//   Full: shape, value, dtype;  Empty/Rand/Randn: shape, dtype;  Arange: start, end, step, dtype
struct Attrs {
  std::vector<int64_t> dims;
  Shape shape;
  bool keepdim = false;
  int64_t dim = 0, dim2 = 0;
  int64_t index = 0, start = 0, end = 0, step = 1;
  double eps = 1e-5;
  double value = 0;
  DType dtype = DType::Float32;
  Device device;  // factories: where the new tensor lives
  std::string mode;
};

}  // namespace mini
