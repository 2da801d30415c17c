// tensor_calls.cpp — the op table: tensor methods, operators and mini functions, traced as
// graph nodes (Dynamo's TorchInGraphFunctionVariable and TensorVariable.call_method).
//
// Each entry parses its arguments the way the eager function does (positional or keyword,
// with the same defaults) and appends one node; meta (shapes, dtypes) comes from
// graph::infer_meta, so a bad shape fails here with the eager op's message.
#include <algorithm>

#include "capture/compile_log.h"
#include "capture/config.h"
#include "capture/tensor_calls.h"
#include "tensor/autograd.h"

namespace mini::capture {


int64_t int_of(TraceContext& ctx, const VarRef& v_in, const std::string& what) {
  VarRef v = v_in ? specialize(ctx, v_in) : v_in;
  if (!v || !v->is(Var::Kind::Constant) || !PyLong_Check(v->obj))
    unsupported(what + " must be a Python int known while tracing, got " + (v ? v->describe() : "nothing"));
  return PyLong_AsLongLong(v->obj);
}

bool bool_of(const VarRef& v, bool dflt) {
  if (!v) return dflt;
  if (!v->is(Var::Kind::Constant)) unsupported("expected a bool constant, got " + v->describe());
  return PyObject_IsTrue(v->obj);
}

// A size argument: an int, or a SymInt as a graph symbol (resolved when the graph runs);
// arithmetic other than + - * on sizes is specialized (graph_size).
int64_t size_arg(TraceContext& ctx, const VarRef& v, const std::string& what) {
  int64_t code;
  if (v && (v->is(Var::Kind::SymInt) || is_dynamic_number(v)) && graph_size(ctx, v, &code)) return code;
  return int_of(ctx, specialize_number(ctx, v), what);
}

// Sizes given as f(2, 3), f((2, 3)) or f([2, 3]).
std::vector<int64_t> ints_of(TraceContext& ctx, const std::vector<VarRef>& args, size_t from, const std::string& what) {
  std::vector<int64_t> out;
  if (args.size() == from + 1 && (args[from]->is(Var::Kind::Tuple) || args[from]->is(Var::Kind::List))) {
    for (auto& v : args[from]->sequence()->items) out.push_back(size_arg(ctx, v, what));
    return out;
  }
  if (args.size() == from + 1 && args[from]->is(Var::Kind::Constant) && PyTuple_Check(args[from]->obj)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[from]->obj); i++)
      out.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(args[from]->obj, i)));
    return out;
  }
  for (size_t i = from; i < args.size(); i++) out.push_back(size_arg(ctx, args[i], what));
  return out;
}

std::vector<int64_t> dims_of(TraceContext& ctx, const VarRef& v) {
  if (!v || v->obj == Py_None) return {};
  if (v->is(Var::Kind::Tuple) || v->is(Var::Kind::List)) {
    std::vector<int64_t> out;
    for (auto& i : v->sequence()->items) out.push_back(int_of(ctx, i, "dim"));
    return out;
  }
  if (v->is(Var::Kind::Constant) && PyTuple_Check(v->obj)) {  // dim=(0, 1)
    std::vector<int64_t> out;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v->obj); i++) {
      PyObject* d = PyTuple_GET_ITEM(v->obj, i);
      if (!PyLong_Check(d)) unsupported("dims must be ints");
      out.push_back(PyLong_AsLongLong(d));
    }
    return out;
  }
  return {int_of(ctx, v, "dim")};
}


// A node for an operand: the tensor's node, or a constant node for a Python number.
int operand(TraceContext& ctx, const VarRef& v_in) {
  VarRef v = specialize(ctx, v_in);
  if (v->is(Var::Kind::Tensor)) return v->tensor().node;
  if (v->is(Var::Kind::Constant)) {
    PyObject* o = v->obj;
    if (PyBool_Check(o)) return ctx.graph().add_constant(o == Py_True, DType::Bool);
    if (PyLong_Check(o)) {
      int64_t i = python_int64(o);  // past int64: eager's error, raised while tracing
      if (i > kExactInDouble || i < -kExactInDouble)
        unsupported("the int " + std::to_string(i) + " as a tensor operand: mini's graph constants "
                    "are doubles, exact only up to 2**53");
      return ctx.graph().add_constant((double)i, DType::Int64);
    }
    if (PyFloat_Check(o)) return ctx.graph().add_constant(PyFloat_AS_DOUBLE(o), DType::Float64);
  }
  unsupported("a tensor op on " + v->describe() + ", which is neither a tensor nor a number");
}

int mark_grad_mode(TraceContext& ctx, int id) {
  if (ctx.grad_enabled != ctx.entry_grad_enabled)  // inside a with mini.no_grad() block, say
    ctx.graph().nodes[id].grad_mode = ctx.grad_enabled ? graph::GradMode::On : graph::GradMode::Off;
  return id;
}

// Whether transpose node n swaps the last two dims of its operand (a Linear's W.t()).
bool swaps_last_two(const graph::Node& n) {
  const int64_t r = (int64_t)n.meta.sizes.size();
  int64_t d0 = n.attrs.dim < 0 ? n.attrs.dim + r : n.attrs.dim, d1 = n.attrs.dim2 < 0 ? n.attrs.dim2 + r : n.attrs.dim2;
  return r >= 2 && std::min(d0, d1) == r - 2 && std::max(d0, d1) == r - 1;
}

VarRef node(TraceContext& ctx, OpKind op, const std::vector<int>& inputs_in, const Attrs& attrs) {
  std::vector<int> inputs = inputs_in;
  DType to;
  if (autocast_target(op, ctx.graph().device, &to)) {  // the casts eager's op makes (autograd.h)
    graph::Graph& g = ctx.graph();
    for (int& in : inputs) {
      if (in < 0) continue;  // an absent operand (layer_norm without a bias)
      const graph::Node& n = g.nodes[in];  // Python numbers keep their type, as in eager
      if (n.kind == graph::NodeKind::Constant || n.wrapped_number || !autocast_casts(n.meta.dtype, to)) continue;
      Attrs a;
      a.dtype = to;
      // as eager's cast_keeping_layout: a contiguous matrix's transpose (of its last two dims)
      // is cast as that matrix, then transposed again
      if (n.kind == graph::NodeKind::Op && n.op == OpKind::Transpose && n.inputs[0] >= 0 &&
          swaps_last_two(n) && g.nodes[n.inputs[0]].meta.strides == contiguous_strides(g.nodes[n.inputs[0]].meta.sizes)) {
        Attrs view = n.attrs;
        int base = mark_grad_mode(ctx, add_tensor_op(ctx, OpKind::Cast, {n.inputs[0]}, a));
        in = mark_grad_mode(ctx, add_tensor_op(ctx, OpKind::Transpose, {base}, view));
        continue;
      }
      in = mark_grad_mode(ctx, add_tensor_op(ctx, OpKind::Cast, {in}, a));
    }
  }
  return tensor_var(ctx, mark_grad_mode(ctx, add_tensor_op(ctx, op, inputs, attrs)));
}

VarRef dtype_object(DType d) {
  PyObject* o = python_bridge().dtype_objects[(int)d];
  if (!o) unsupported("dtype objects are not registered");
  Py_INCREF(o);
  auto v = std::make_shared<Var>(Var::Object{});
  v->obj = o;
  return v;
}

DType dtype_from(const VarRef& v) {
  for (int i = 0; i < kNumDTypes; i++)
    if (v->obj && v->obj == python_bridge().dtype_objects[i]) return (DType)i;
  unsupported("expected a mini dtype, got " + v->describe());
}

VarRef cast_to(TraceContext& ctx, const VarRef& self, DType d) {
  if (meta_of(ctx, self).dtype == d) return self;
  Attrs a;
  a.dtype = d;
  return node(ctx, OpKind::Cast, {self->tensor().node}, a);
}

VarRef reshape(TraceContext& ctx, const VarRef& self, const std::vector<int64_t>& shape) {
  Attrs a;
  a.shape = shape;
  return node(ctx, OpKind::Reshape, {self->tensor().node}, a);
}

VarRef reduction(TraceContext& ctx, OpKind op, const VarRef& self, const Args& args) {
  args.at_most(2);
  Attrs a;
  a.dims = dims_of(ctx, args.get(0, "dim", false));
  a.keepdim = bool_of(args.get(1, "keepdim", false), false);
  return node(ctx, op, {self->tensor().node}, a);
}

// ---- in-place ops (written into the tensor's memory by functionalize.cpp) -----------------

// `result` (an op on self, of a shape that broadcasting may not grow) stored into self, as
// the in-place op does: cast to self's dtype; `cast_allowed` is false for ops that refuse
// a result of a higher dtype category (add_ of a float into an int tensor).
VarRef write_result(TraceContext& ctx, const VarRef& self, const VarRef& result,
                    const std::string& op, bool cast_allowed) {
  const graph::TensorMeta& m = meta_of(ctx, self);
  const graph::TensorMeta& r = meta_of(ctx, result);
  if (r.sizes != m.sizes)
    fail("output with shape ", shape_str(m.sizes), " doesn't match the broadcast shape ",
         shape_str(r.sizes), " (in-place ", op, ")");
  if (!cast_allowed && category(r.dtype) > category(m.dtype))
    fail("result type ", dtype_name(r.dtype), " can't be cast to the desired output type ",
         dtype_name(m.dtype), " (in-place ", op, ")");
  DType dtype = m.dtype;  // a copy: cast_to grows the graph, moving `m`
  write_in_place(ctx, self, cast_to(ctx, result, dtype)->tensor().node, op);
  return self;  // x.add_(1) returns x itself
}

// where(True, value, self): value everywhere, broadcast to self's shape (fill_, copy_);
// self's gradient is zero, value's its sum over the broadcast.
VarRef overwrite(TraceContext& ctx, const VarRef& self, const VarRef& value) {
  int everywhere = ctx.graph().add_constant(true, DType::Bool);
  return node(ctx, OpKind::Where, {everywhere, operand(ctx, value), self->tensor().node});
}

bool is_number(const VarRef& v) {
  return v && v->is(Var::Kind::Constant) && (PyLong_Check(v->obj) || PyFloat_Check(v->obj));
}

// clamp(x, min, max) as eager computes it (pointwise.cpp): where(x < min, min, x), then
// where(r > max, max, r). None bounds are absent.
VarRef clamp(TraceContext& ctx, const VarRef& self, VarRef lo, VarRef hi, const std::string& fn) {
  if (lo && lo->obj == Py_None) lo = nullptr;
  if (hi && hi->obj == Py_None) hi = nullptr;
  if (!lo && !hi) fail(fn, ": At least one of 'min' or 'max' must not be None");
  VarRef r = self;
  if (lo) {
    int below = tensor_binary(ctx, OpKind::Lt, r, lo)->tensor().node;
    r = node(ctx, OpKind::Where, {below, operand(ctx, lo), r->tensor().node});
  }
  if (hi) {
    int above = tensor_binary(ctx, OpKind::Gt, r, hi)->tensor().node;
    r = node(ctx, OpKind::Where, {above, operand(ctx, hi), r->tensor().node});
  }
  return r;
}

// masked_fill(x, mask, value) as eager computes it: where(mask, value, x) in x's dtype.
VarRef masked_fill(TraceContext& ctx, const VarRef& self, const VarRef& mask, const VarRef& value) {
  if (!mask->is(Var::Kind::Tensor)) unsupported("masked_fill with a mask that is not a tensor");
  if (meta_of(ctx, mask).dtype != DType::Bool)
    fail("masked_fill_ only supports boolean masks, but got mask with dtype ",
         dtype_name(meta_of(ctx, mask).dtype));
  if (value->is(Var::Kind::Tensor) && !meta_of(ctx, value).sizes.empty())
    fail("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
         meta_of(ctx, value).sizes.size(), " dimension(s).");
  return cast_to(ctx, node(ctx, OpKind::Where, {mask->tensor().node, operand(ctx, value), self->tensor().node}),
                 meta_of(ctx, self).dtype);
}

static const NamedOp kInplaceBinary[] = {
    {"add_", OpKind::Add}, {"sub_", OpKind::Sub}, {"mul_", OpKind::Mul}, {"div_", OpKind::Div},
};

// x.add_(y), x.zero_(), ...: the out-of-place op written into x's memory. Null for a name
// that is not an in-place method.
VarRef inplace_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                      const Args& args) {
  static const char* kWrites[] = {"relu_", "zero_", "fill_", "copy_", "masked_fill_", "clamp_"};
  for (const char* w : kWrites)
    if (name == w) check_writable(ctx, self, name);
  for (auto& b : kInplaceBinary)
    if (name == b.name) return tensor_inplace_binary(ctx, b.op, self, args.get(0, "other"));
  VarRef result;
  bool cast_allowed = true;  // fill_, copy_ and masked_fill_ convert to self's dtype
  if (name == "relu_") {
    result = node(ctx, OpKind::Relu, {self->tensor().node});
    cast_allowed = false;
  } else if (name == "zero_" || name == "fill_") {
    VarRef v = name == "zero_" ? make_constant(PyFloat_FromDouble(0)) : args.get(0, "value");
    if (!is_number(v)) unsupported("fill_() with " + v->describe() + " (mini's fill_ takes a number)");
    result = overwrite(ctx, self, v);
  } else if (name == "copy_") {
    VarRef src = args.get(0, "src");
    if (!src->is(Var::Kind::Tensor)) unsupported("copy_() from " + src->describe() + ", not a tensor");
    result = overwrite(ctx, self, src);
  } else if (name == "masked_fill_") {
    result = masked_fill(ctx, self, args.get(0, "mask"), args.get(1, "value"));
  } else if (name == "clamp_") {
    result = clamp(ctx, self, args.get(0, "min", false), args.get(1, "max", false), name);
    cast_allowed = false;
  } else {
    return nullptr;
  }
  return write_result(ctx, self, result, name, cast_allowed);
}


VarRef tensor_inplace_binary(TraceContext& ctx, OpKind op, const VarRef& self,
                             const VarRef& other) {
  std::string name = std::string(op_name(op)) + "_";
  check_writable(ctx, self, name);
  return write_result(ctx, self, tensor_binary(ctx, op, self, other), name, false);
}

const graph::TensorMeta& meta_of(TraceContext& ctx, const VarRef& t) {
  return ctx.graph().nodes[t->tensor().node].meta;
}

VarRef size_var(TraceContext& ctx, const VarRef& tensor, int64_t dim) {
  int64_t s = meta_of(ctx, tensor).sizes.at(dim);
  if (s >= 0) return make_constant(PyLong_FromLongLong(s));
  if (!graph::is_symbol(s))
    unsupported("reading a data-dependent size (the length of a nonzero() result) in Python");
  const graph::Symbol& sym = ctx.graph().symbols[graph::symbol_index(s)];
  // an input's dim, or a size derived from them
  auto v = std::make_shared<Var>(Var::SymInt{size_expr_of(ctx, s), static_cast<int>(s)});
  v->obj = PyLong_FromLongLong(sym.hint);
  return v;
}

VarRef as_constant(TraceContext& ctx, const VarRef& v_in) {
  VarRef v = specialize(ctx, v_in);
  if (v->is(Var::Kind::Constant)) return v;
  if (!v->is(Var::Kind::Tuple) && !v->is(Var::Kind::List)) return nullptr;
  std::vector<VarRef> items;
  for (auto& item : v->sequence()->items) {
    items.push_back(as_constant(ctx, item));
    if (!items.back()) return nullptr;
  }
  bool list = v->is(Var::Kind::List);
  PyObject* r = list ? PyList_New((Py_ssize_t)items.size()) : PyTuple_New((Py_ssize_t)items.size());
  for (size_t i = 0; i < items.size(); i++) {
    Py_INCREF(items[i]->obj);
    if (list) PyList_SET_ITEM(r, i, items[i]->obj);
    else PyTuple_SET_ITEM(r, i, items[i]->obj);
  }
  if (v->is(Var::Kind::Tuple) && v->get<Var::Tuple>().size) Py_SETREF(r, PyObject_CallOneArg(python_bridge().size_type, r));  // str(x.shape)
  if (!r) {
    PyErr_Clear();
    unsupported("internal: cannot make a mini.Size");
  }
  return make_constant(r);
}

VarRef specialize(TraceContext& ctx, const VarRef& v) {
  if (is_sym_slice(v)) {  // each bound to its value: a constant slice
    auto value = [&](const VarRef& part) { return specialize_number(ctx, specialize(ctx, part)); };
    const std::vector<VarRef>& bounds = v->get<Var::Tuple>().items;
    VarRef start = value(bounds[0]), stop = value(bounds[1]), step = value(bounds[2]);
    PyObject* slice = PySlice_New(start->obj, stop->obj, step->obj);
    if (!slice) { PyErr_Clear(); unsupported("slice(): out of memory"); }
    return make_constant(slice);
  }
  if (!v || !v->is(Var::Kind::SymInt)) return v;
  // Only the value is baked in, so the guard is on the expression: x.numel() == 12 also
  // admits 4x3 for 3x4, which computes the same
  int64_t value = PyLong_AsLongLong(v->obj);
  ctx.guards().add_size_compare(
      guards::SizeExpr::apply(guards::SizeTerm::Op::Eq, v->get<Var::SymInt>().expr, guards::SizeExpr::constant(value)));
  Py_INCREF(v->obj);
  return make_constant(v->obj);
}

// The graph input position of v if it is a Python number's 0-d input (of the frame's, or a
// size's value: Source::Size), else -1.
static int scalar_input(TraceContext& ctx, const VarRef& v) {
  if (!v || !is_dynamic_number(v)) return -1;
  int node = v->tensor().node;
  if (node < 0 || ctx.graph().nodes[node].kind != graph::NodeKind::Input) return -1;
  const auto& inputs = ctx.graph().inputs;
  size_t pos = std::find(inputs.begin(), inputs.end(), node) - inputs.begin();
  if (pos >= ctx.trace.input_sources.size() || !ctx.trace.scalar_inputs[pos]) return -1;
  return (int)pos;
}

VarRef specialize_number(TraceContext& ctx, const VarRef& v) {
  int pos = scalar_input(ctx, v);
  if (pos < 0) return v;
  PyObject* value = ctx.trace.example_inputs[pos];
  ctx.guards().add_constant_match(ctx.trace.input_sources[pos], value);
  Py_INCREF(value);
  return make_constant(value);
}

int number_input(TraceContext& ctx, const VarRef& v, bool ints_only) {
  int pos = scalar_input(ctx, v);
  if (pos < 0) return -1;
  PyObject* example = ctx.trace.example_inputs[pos];
  if (!PyLong_CheckExact(example) && (ints_only || !PyFloat_CheckExact(example))) return -1;  // a bool
  if (ctx.trace.input_sources[pos]->as<guards::Source::Size>()) return -1;  // a size's value
  return pos;
}

VarRef number_compare(TraceContext& ctx, int richcmp, const VarRef& a, const VarRef& b) {
  auto is_plain_constant = [](const VarRef& v) {  // an int that fits int64, or a float
    if (!v->is(Var::Kind::Constant) || !(PyFloat_CheckExact(v->obj) || PyLong_CheckExact(v->obj))) return false;
    int overflow = 0;
    if (PyLong_CheckExact(v->obj)) PyLong_AsLongLongAndOverflow(v->obj, &overflow);
    return overflow == 0;
  };
  auto input_position = [&](const VarRef& v) { return number_input(ctx, v, false); };
  static const int reflected[] = {Py_GT, Py_GE, Py_EQ, Py_NE, Py_LT, Py_LE};
  int pos = input_position(a), op = richcmp;
  const VarRef* constant = &b;
  if (pos < 0 || !is_plain_constant(b)) {
    pos = input_position(b), op = reflected[richcmp], constant = &a;
    if (pos < 0 || !is_plain_constant(a)) return nullptr;
  }
  PyObject* value = ctx.trace.example_inputs[pos];
  int outcome = PyObject_RichCompareBool(value, (*constant)->obj, op);
  if (outcome < 0) { PyErr_Clear(); return nullptr; }
  static const int negated[] = {Py_GE, Py_GT, Py_NE, Py_EQ, Py_LE, Py_LT};
  ctx.guards().add_number_compare(ctx.trace.input_sources[pos], outcome ? op : negated[op], (*constant)->obj);
  if (log_channels().dynamic)
    log_write("guard on a dynamic number: " + ctx.trace.input_sources[pos]->str() + " was " +
              (outcome ? "True" : "False") + " against the constant");
  return make_constant(PyBool_FromLong(outcome));
}

VarRef tensor_binary(TraceContext& ctx, OpKind op, const VarRef& a, const VarRef& b) {
  if (op == OpKind::Matmul && !(is_tensor(a) && is_tensor(b)))
    unsupported("matmul of " + a->describe() + " and " + b->describe());
  return node(ctx, op, {operand(ctx, a), operand(ctx, b)});
}

VarRef tensor_unary(TraceContext& ctx, OpKind op, const VarRef& a) { return node(ctx, op, {a->tensor().node}); }

}  // namespace mini::capture
