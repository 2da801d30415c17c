// tensor_calls.h — what the op table's files share (internal to capture/): a call's
// arguments matched to parameter names (Args), and the helpers that parse them and append
// nodes. The table itself is split by what is called:
//   tensor_calls.cpp      the helpers; numbers, sizes and specialization; tensor operators
//   tensor_methods.cpp    tensor attributes and methods (x.view(...), x.add_(...))
//   tensor_indexing.cpp   indexing (x[i, 1:, None, ...])
//   tensor_functions.cpp  mini.* functions: factories (mini.zeros, arange, randn) and the
//                         functions recorded as graph functions (mini.where, F.layer_norm, ...)
#pragma once
#include <string>
#include <vector>

#include "capture/trace_context.h"

namespace mini::capture {

// The arguments of one call, matched to parameter names.
struct Args {
  std::vector<VarRef> pos;
  const Kwargs& kw;
  std::string fn;

  VarRef get(size_t i, const char* name, bool required = true) const {
    if (i < pos.size()) return pos[i];
    for (auto& [k, v] : kw)
      if (k == name) return v;
    if (required) unsupported(fn + "() missing argument '" + name + "'");
    return nullptr;
  }
  VarRef keyword(const char* name) const {  // a keyword-only argument, or nullptr
    for (auto& [k, v] : kw)
      if (k == name) return v;
    return nullptr;
  }
  void at_most(size_t n) const {
    if (pos.size() > n) unsupported(fn + "() takes at most " + std::to_string(n) + " positional arguments");
  }
};

// A name and the node it makes: the tables of binary and unary ops by name.
struct NamedOp {
  const char* name;
  OpKind op;
};
inline const NamedOp kBinary[] = {
    {"add", OpKind::Add}, {"sub", OpKind::Sub}, {"mul", OpKind::Mul}, {"div", OpKind::Div},
    {"pow", OpKind::Pow}, {"maximum", OpKind::Maximum}, {"minimum", OpKind::Minimum},
    {"eq", OpKind::Eq}, {"ne", OpKind::Ne}, {"lt", OpKind::Lt}, {"le", OpKind::Le},
    {"gt", OpKind::Gt}, {"ge", OpKind::Ge}, {"matmul", OpKind::Matmul},
};
inline const NamedOp kUnary[] = {
    {"neg", OpKind::Neg}, {"abs", OpKind::Abs}, {"exp", OpKind::Exp}, {"log", OpKind::Log},
    {"sin", OpKind::Sin}, {"cos", OpKind::Cos}, {"tanh", OpKind::Tanh}, {"sigmoid", OpKind::Sigmoid},
    {"relu", OpKind::Relu}, {"sqrt", OpKind::Sqrt}, {"rsqrt", OpKind::Rsqrt}, {"sign", OpKind::Sign},
    {"clone", OpKind::Clone},
};

constexpr int64_t kExactInDouble = int64_t(1) << 53;

int64_t int_of(TraceContext& ctx, const VarRef& v_in, const std::string& what);
bool bool_of(const VarRef& v, bool dflt);
// A size argument: an int, or a SymInt as a graph symbol (resolved when the graph runs);
// arithmetic other than + - * on sizes is specialized (graph_size).
int64_t size_arg(TraceContext& ctx, const VarRef& v, const std::string& what);
// Sizes given as f(2, 3), f((2, 3)) or f([2, 3]).
std::vector<int64_t> ints_of(TraceContext& ctx, const std::vector<VarRef>& args, size_t from, const std::string& what);
std::vector<int64_t> dims_of(TraceContext& ctx, const VarRef& v);

// A node for an operand: the tensor's node, or a constant node for a Python number.
int operand(TraceContext& ctx, const VarRef& v_in);
int mark_grad_mode(TraceContext& ctx, int id);
// Whether transpose node n swaps the last two dims of its operand (a Linear's W.t()).
bool swaps_last_two(const graph::Node& n);
VarRef node(TraceContext& ctx, OpKind op, const std::vector<int>& inputs_in, const Attrs& attrs = {});
VarRef dtype_object(DType d);
DType dtype_from(const VarRef& v);
VarRef cast_to(TraceContext& ctx, const VarRef& self, DType d);
VarRef reshape(TraceContext& ctx, const VarRef& self, const std::vector<int64_t>& shape);
VarRef reduction(TraceContext& ctx, OpKind op, const VarRef& self, const Args& args);
// `result` (an op on self, of a shape that broadcasting may not grow) stored into self, as
// the in-place op does: cast to self's dtype; `cast_allowed` is false for ops that refuse
// a result of a higher dtype category (add_ of a float into an int tensor).
VarRef write_result(TraceContext& ctx, const VarRef& self, const VarRef& result,
                    const std::string& op, bool cast_allowed);
// where(True, value, self): value everywhere, broadcast to self's shape (fill_, copy_);
// self's gradient is zero, value's its sum over the broadcast.
VarRef overwrite(TraceContext& ctx, const VarRef& self, const VarRef& value);
bool is_number(const VarRef& v);
// clamp(x, min, max) as eager computes it (pointwise.cpp): where(x < min, min, x), then
// where(r > max, max, r). None bounds are absent.
VarRef clamp(TraceContext& ctx, const VarRef& self, VarRef lo, VarRef hi, const std::string& fn);
// masked_fill(x, mask, value) as eager computes it: where(mask, value, x) in x's dtype.
VarRef masked_fill(TraceContext& ctx, const VarRef& self, const VarRef& mask, const VarRef& value);
// x.add_(y), x.zero_(), ...: the out-of-place op written into x's memory. Null for a name
// that is not an in-place method.
VarRef inplace_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                      const Args& args);
// mini.zeros(...) & co. as graph nodes (tensor_functions.cpp); nullptr if `name` is no factory.
VarRef call_factory(TraceContext& ctx, const std::string& name, std::vector<VarRef> pos, const Kwargs& kwargs);

}  // namespace mini::capture
