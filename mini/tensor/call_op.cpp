// call_op.cpp — runs any OpKind by value: the bridge from a recorded op (a graph node, a
// derivative rule) back to the eager kernels.
#include "autograd.h"
#include "ops.h"

namespace mini {

Tensor gelu_backward(const Tensor& g, const Tensor& x, const std::string& mode);
Tensor slice_backward(const Tensor& g, const Attrs& a);

const char* op_name(OpKind k) {
  switch (k) {
#define MINI_OP_NAME(name, str, cls) case OpKind::name: return str;
    MINI_OP_LIST(MINI_OP_NAME)
#undef MINI_OP_NAME
  }
  return "?";
}

bool is_transcendental(OpKind k) {
  switch (k) {
    case OpKind::Exp: case OpKind::Log: case OpKind::Sin: case OpKind::Cos: case OpKind::Tanh:
    case OpKind::Sigmoid: case OpKind::Gelu: case OpKind::GeluBackward: case OpKind::Pow:
      return true;
    default: return false;
  }
}

bool is_random(OpKind k) { return k == OpKind::Rand || k == OpKind::Randn; }

int op_outputs(OpKind k) {
  switch (k) {
    case OpKind::Attention: return 2;
    case OpKind::AttentionBackward: return 3;
    default: return 1;
  }
}

OpClass op_class(OpKind k) {
  switch (k) {
#define MINI_OP_CLASS(name, str, cls) case OpKind::name: return OpClass::cls;
    MINI_OP_LIST(MINI_OP_CLASS)
#undef MINI_OP_CLASS
  }
  return OpClass::Composite;
}

namespace {
void expect_inputs(OpKind k, const std::vector<Tensor>& in, size_t n) {
  if (in.size() != n)
    fail(op_name(k), " takes ", n, " input(s) but was given ", in.size());
}
}  // namespace

std::vector<Tensor> call_op_outputs(OpKind k, const std::vector<Tensor>& in, const Attrs& a) {
  const bool causal = a.mode == "causal";
  switch (k) {
    case OpKind::Attention: expect_inputs(k, in, 3); return attention_with_grad(in[0], in[1], in[2], causal, a.value);
    case OpKind::AttentionBackward:
      expect_inputs(k, in, 6);
      return attention_backward(in[0], in[1], in[2], in[3], in[4], in[5], causal, a.value);
    default: return {call_op(k, in, a)};
  }
}

Tensor call_op(OpKind k, const std::vector<Tensor>& in, const Attrs& a) {
  switch (k) {
    case OpKind::Attention: case OpKind::AttentionBackward: {
      if (a.index < 0 || a.index >= op_outputs(k)) fail(op_name(k), ": no output ", a.index);
      return call_op_outputs(k, in, a)[a.index];
    }
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Pow:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq: case OpKind::Ne:
    case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
      expect_inputs(k, in, 2);
      return binary(k, in[0], in[1]);
    case OpKind::GeluBackward:
      expect_inputs(k, in, 2);
      return gelu_backward(in[0], in[1], a.mode);
    case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log: case OpKind::Sin:
    case OpKind::Cos: case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Relu:
    case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Sign: case OpKind::Gelu:
      expect_inputs(k, in, 1);
      return unary(k, in[0], a);
    case OpKind::Cast: expect_inputs(k, in, 1); return cast(in[0], a.dtype);
    case OpKind::Clone: expect_inputs(k, in, 1); return clone(in[0]);
    case OpKind::Where: expect_inputs(k, in, 3); return where(in[0], in[1], in[2]);
    case OpKind::Sum: case OpKind::Mean: case OpKind::Amax: case OpKind::Amin:
      expect_inputs(k, in, 1);
      return reduce(k, in[0], a.dims, a.keepdim);
    case OpKind::Reshape: expect_inputs(k, in, 1); return reshape(in[0], a.shape);
    case OpKind::Transpose: expect_inputs(k, in, 1); return transpose(in[0], a.dim, a.dim2);
    case OpKind::Permute: expect_inputs(k, in, 1); return permute(in[0], a.dims);
    case OpKind::Unsqueeze: expect_inputs(k, in, 1); return unsqueeze(in[0], a.dim);
    case OpKind::Squeeze: expect_inputs(k, in, 1); return squeeze(in[0], a.dims);
    case OpKind::Expand: expect_inputs(k, in, 1); return expand(in[0], a.shape);
    case OpKind::Slice:
      expect_inputs(k, in, 1);
      return slice(in[0], a.dim, a.start, a.end, a.step);
    case OpKind::Select: expect_inputs(k, in, 1); return select(in[0], a.dim, a.index);
    case OpKind::Detach: expect_inputs(k, in, 1); return detach(in[0]);
    case OpKind::Matmul:
      // a third input: a bias along the last dim, folded into the GEMM by fusion's decompose
      if (in.size() == 3 && in[1] && in[1]->dim() == 2) return linear(in[0], transpose(in[1], 0, 1), in[2]);
      expect_inputs(k, in, 2);
      return matmul(in[0], in[1]);
    case OpKind::Softmax: expect_inputs(k, in, 1); return softmax(in[0], a.dim, false);
    case OpKind::LogSoftmax: expect_inputs(k, in, 1); return softmax(in[0], a.dim, true);
    case OpKind::LayerNorm: {
      if (in.empty() || in.size() > 3) fail("layer_norm takes 1 to 3 inputs");
      Shape normalized(in[0]->sizes.end() - a.dim, in[0]->sizes.end());
      return layer_norm(in[0], normalized, in.size() > 1 ? in[1] : nullptr,
                        in.size() > 2 ? in[2] : nullptr, a.eps);
    }
    case OpKind::MseLoss: expect_inputs(k, in, 2); return mse_loss(in[0], in[1], a.mode);
    case OpKind::Embedding: expect_inputs(k, in, 2); return embedding(in[0], in[1]);
    case OpKind::EmbeddingBackward: expect_inputs(k, in, 2); return embedding_backward(in[0], in[1], a.shape);
    case OpKind::SliceBackward: expect_inputs(k, in, 1); return slice_backward(in[0], a);
    case OpKind::SliceScatter:
      expect_inputs(k, in, 2);
      return slice_scatter(in[0], in[1], a.dim, a.start, a.end, a.step);
    case OpKind::Nonzero: expect_inputs(k, in, 1); return nonzero(in[0]);
    case OpKind::Full: expect_inputs(k, in, 0); return full(a.shape, a.value, a.dtype, a.device);
    case OpKind::Empty: expect_inputs(k, in, 0); return empty(a.shape, a.dtype, a.device);
    case OpKind::Arange:
      expect_inputs(k, in, 0);
      return arange((double)a.start, (double)a.end, (double)a.step, a.dtype, a.device);
    case OpKind::Rand: expect_inputs(k, in, 0); return rand(a.shape, a.dtype, a.device);
    case OpKind::Randn: expect_inputs(k, in, 0); return randn(a.shape, a.dtype, a.device);
  }
  fail("unknown op");
}

}  // namespace mini
