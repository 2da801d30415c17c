// tensor_calls.cpp — the op table: tensor methods, operators and mini functions, traced as
// graph nodes (Dynamo's TorchInGraphFunctionVariable and TensorVariable.call_method).
//
// Each entry parses its arguments the way the eager function does (positional or keyword,
// with the same defaults) and appends one node; meta (shapes, dtypes) comes from
// graph::infer_meta, so a bad shape fails here with the eager op's message.
#include <algorithm>

#include "capture/compile_log.h"
#include "capture/config.h"
#include "capture/trace_context.h"
#include "tensor/autograd.h"

namespace mini::capture {

namespace {

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
  if (v && (v->is(Var::Kind::SymInt) || v->number) && graph_size(ctx, v, &code)) return code;
  return int_of(ctx, specialize_number(ctx, v), what);
}

// Sizes given as f(2, 3), f((2, 3)) or f([2, 3]).
std::vector<int64_t> ints_of(TraceContext& ctx, const std::vector<VarRef>& args, size_t from, const std::string& what) {
  std::vector<int64_t> out;
  if (args.size() == from + 1 && (args[from]->is(Var::Kind::Tuple) || args[from]->is(Var::Kind::List))) {
    for (auto& v : args[from]->items) out.push_back(size_arg(ctx, v, what));
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
    for (auto& i : v->items) out.push_back(int_of(ctx, i, "dim"));
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

constexpr int64_t kExactInDouble = int64_t(1) << 53;

// A tensor of the user's code (not a dynamic Python number, which the graph also holds).
bool is_tensor(const VarRef& v) { return v && v->is(Var::Kind::Tensor) && !v->number; }

// A node for an operand: the tensor's node, or a constant node for a Python number.
int operand(TraceContext& ctx, const VarRef& v_in) {
  VarRef v = specialize(ctx, v_in);
  if (v->is(Var::Kind::Tensor)) return v->node;
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

VarRef node(TraceContext& ctx, OpKind op, const std::vector<int>& inputs_in, const Attrs& attrs = {}) {
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
  auto v = std::make_shared<Var>(Var::Kind::Object);
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
  return node(ctx, OpKind::Cast, {self->node}, a);
}

VarRef reshape(TraceContext& ctx, const VarRef& self, const std::vector<int64_t>& shape) {
  Attrs a;
  a.shape = shape;
  return node(ctx, OpKind::Reshape, {self->node}, a);
}

VarRef reduction(TraceContext& ctx, OpKind op, const VarRef& self, const Args& args) {
  args.at_most(2);
  Attrs a;
  a.dims = dims_of(ctx, args.get(0, "dim", false));
  a.keepdim = bool_of(args.get(1, "keepdim", false), false);
  return node(ctx, op, {self->node}, a);
}

const struct { const char* name; OpKind op; } kBinary[] = {
    {"add", OpKind::Add}, {"sub", OpKind::Sub}, {"mul", OpKind::Mul}, {"div", OpKind::Div},
    {"pow", OpKind::Pow}, {"maximum", OpKind::Maximum}, {"minimum", OpKind::Minimum},
    {"eq", OpKind::Eq}, {"ne", OpKind::Ne}, {"lt", OpKind::Lt}, {"le", OpKind::Le},
    {"gt", OpKind::Gt}, {"ge", OpKind::Ge}, {"matmul", OpKind::Matmul},
};
const struct { const char* name; OpKind op; } kUnary[] = {
    {"neg", OpKind::Neg}, {"abs", OpKind::Abs}, {"exp", OpKind::Exp}, {"log", OpKind::Log},
    {"sin", OpKind::Sin}, {"cos", OpKind::Cos}, {"tanh", OpKind::Tanh}, {"sigmoid", OpKind::Sigmoid},
    {"relu", OpKind::Relu}, {"sqrt", OpKind::Sqrt}, {"rsqrt", OpKind::Rsqrt}, {"sign", OpKind::Sign},
    {"clone", OpKind::Clone},
};

// ---- factories: mini.zeros(...), mini.arange(...), mini.randn(...) --------------------------

// The keyword arguments a factory accepts besides its sizes; anything else runs eagerly
// (where it raises the eager error).
void check_kwargs(const Args& args, std::initializer_list<const char*> names) {
  for (auto& [k, v] : args.kw) {
    bool known = false;
    for (const char* n : names) known = known || k == n;
    if (!known) unsupported("mini." + args.fn + "() got an unexpected keyword argument '" + k + "'");
  }
}

// A factory's device= (none: the CPU, as torch's default device): the graph's device, or the
// graph ends before the factory (use_device).
Device factory_device(TraceContext& ctx, const VarRef& v, const std::string& name) {
  Device d;
  if (v && v->obj != Py_None && !device_from(v->obj, &d))
    unsupported("mini." + name + "() with device=" + v->describe() + " (give 'cpu', 'cuda' or 'cuda:N')");
  use_device(ctx, d, "the result of mini." + name + "()");
  return d;
}

DType dtype_or(const VarRef& v, DType dflt) { return !v || v->obj == Py_None ? dflt : dtype_from(v); }

// One size of a factory: an int, or a dynamic size (a symbol resolved when the graph runs).
int64_t factory_size(TraceContext& ctx, const VarRef& v, const std::string& fn) {
  int64_t code;
  if ((v->is(Var::Kind::SymInt) || v->number) && graph_size(ctx, v, &code)) return code;
  if (v->is(Var::Kind::SymInt) || number_input(ctx, v, true) >= 0)
    return int_of(ctx, specialize_number(ctx, v), "a size of mini." + fn + "()");
  if (!v->is(Var::Kind::Constant) || !PyLong_Check(v->obj) || PyBool_Check(v->obj))
    unsupported("mini." + fn + "() with a size " + v->describe() + " (mini takes ints or x.shape's sizes)");
  return PyLong_AsLongLong(v->obj);
}

// Sizes given as f(2, 3), f((2, 3)), f([2, 3]) or f(x.shape).
Shape factory_shape(TraceContext& ctx, const std::vector<VarRef>& pos, const std::string& fn) {
  Shape shape;
  if (pos.size() == 1 && pos[0]->is(Var::Kind::Constant) && PyTuple_Check(pos[0]->obj)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pos[0]->obj); i++) {
      PyObject* item = PyTuple_GET_ITEM(pos[0]->obj, i);
      Py_INCREF(item);
      shape.push_back(factory_size(ctx, make_constant(item), fn));
    }
    return shape;
  }
  bool one_sequence = pos.size() == 1 && (pos[0]->is(Var::Kind::Tuple) || pos[0]->is(Var::Kind::List));
  for (auto& v : one_sequence ? pos[0]->items : pos) shape.push_back(factory_size(ctx, v, fn));
  return shape;
}

// The sizes of `t` for a *_like factory.
Shape like_shape(TraceContext& ctx, const VarRef& t, const std::string& fn) {
  if (!t->is(Var::Kind::Tensor)) unsupported("mini." + fn + "() of " + t->describe());
  const Shape& s = meta_of(ctx, t).sizes;
  for (int64_t v : s)
    if (v == graph::kUnbacked)
      unsupported("mini." + fn + "() of a tensor whose size is known only at run time (nonzero's)");
  return s;
}

VarRef factory(TraceContext& ctx, OpKind op, const Attrs& a, const VarRef& requires_grad) {
  VarRef v = node(ctx, op, {}, a);
  if (bool_of(requires_grad, false)) {  // a new autograd leaf (compile_unit runs it eagerly)
    if (!is_floating(a.dtype))
      fail("only Tensors of floating point dtype can require gradients (got ", dtype_name(a.dtype), ")");
    ctx.graph().nodes[v->node].meta.requires_grad = true;
  }
  return v;
}

// mini.zeros(...) & co. as graph nodes, parsing arguments as mini/_tensor.py does; nullptr
// if `name` is no factory.
VarRef call_factory(TraceContext& ctx, const std::string& name, std::vector<VarRef> pos,
                    const Kwargs& kwargs) {
  Args args{std::move(pos), kwargs, name};
  Attrs a;
  if (name == "zeros" || name == "ones" || name == "empty" || name == "rand" || name == "randn") {
    check_kwargs(args, {"dtype", "requires_grad", "device"});  // (*size, dtype=, requires_grad=, device=)
    a.device = factory_device(ctx, args.keyword("device"), name);
    a.shape = factory_shape(ctx, args.pos, name);
    a.dtype = dtype_or(args.keyword("dtype"), DType::Float32);
    a.value = name == "ones" ? 1 : 0;
    OpKind op = name == "empty" ? OpKind::Empty : name == "rand" ? OpKind::Rand
              : name == "randn" ? OpKind::Randn : OpKind::Full;
    return factory(ctx, op, a, args.keyword("requires_grad"));
  }
  if (name == "full" || name == "full_like") {  // (size | t, fill_value, dtype, requires_grad[, device])
    bool like = name == "full_like";
    check_kwargs(args, {like ? "t" : "size", "fill_value", "dtype", "requires_grad", "device"});
    args.at_most(like ? 4 : 5);
    if (like && args.keyword("device"))
      unsupported("full_like() got an unexpected keyword argument 'device'");
    VarRef first = args.get(0, like ? "t" : "size");
    VarRef fill = specialize(ctx, args.get(1, "fill_value"));
    if (!fill->is(Var::Kind::Constant) || !(PyLong_Check(fill->obj) || PyFloat_Check(fill->obj)))
      unsupported("mini." + name + "() with fill value " + fill->describe() +
                  " (a number known while tracing)");
    a.value = PyFloat_AsDouble(fill->obj);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      unsupported("mini." + name + "() with fill value " + fill->describe());
    }
    a.shape = like ? like_shape(ctx, first, name) : factory_shape(ctx, {first}, name);
    a.device = like ? ctx.graph().device : factory_device(ctx, args.get(4, "device", false), name);
    DType dflt = like                      ? meta_of(ctx, first).dtype
                 : PyBool_Check(fill->obj) ? DType::Bool
                 : PyLong_Check(fill->obj) ? DType::Int64
                                           : DType::Float32;
    a.dtype = dtype_or(args.get(2, "dtype", false), dflt);
    return factory(ctx, OpKind::Full, a, args.get(3, "requires_grad", false));
  }
  if (name == "zeros_like" || name == "ones_like" || name == "empty_like") {  // (t, dtype, requires_grad)
    check_kwargs(args, {"t", "dtype", "requires_grad"});
    args.at_most(3);
    VarRef t = args.get(0, "t");
    a.shape = like_shape(ctx, t, name);
    a.dtype = dtype_or(args.get(1, "dtype", false), meta_of(ctx, t).dtype);
    a.value = name == "ones_like" ? 1 : 0;
    a.device = ctx.graph().device;  // t's: every tensor of the graph is on it
    OpKind op = name == "empty_like" ? OpKind::Empty : OpKind::Full;
    return factory(ctx, op, a, args.get(2, "requires_grad", false));
  }
  if (name == "randn_like" || name == "rand_like") {  // (t, dtype, device, requires_grad)
    check_kwargs(args, {"t", "dtype", "device", "requires_grad"});
    args.at_most(4);
    VarRef device = args.get(2, "device", false);
    if (device && device->obj != Py_None)
      unsupported(name + "() with device= inside a compiled function (a graph runs on one device)");
    VarRef t = args.get(0, "t");
    a.shape = like_shape(ctx, t, name);
    a.dtype = dtype_or(args.get(1, "dtype", false), meta_of(ctx, t).dtype);
    a.device = ctx.graph().device;
    return factory(ctx, name == "rand_like" ? OpKind::Rand : OpKind::Randn, a,
                   args.get(3, "requires_grad", false));
  }
  if (name == "randint") {  // ([low,] high, size, *, generator, dtype, device, requires_grad)
    // as _tensor.py composes it: float64 uniforms scaled by the span, truncated, shifted by low.
    // What eager refuses (bounds, generator=, requires_grad=) is left to eager: a graph break.
    check_kwargs(args, {"size", "generator", "dtype", "device", "requires_grad"});
    for (const char* kw : {"generator", "requires_grad"})
      if (VarRef v = args.keyword(kw); v && v->obj != Py_None && v->obj != Py_False)
        unsupported(std::string("mini.randint() with ") + kw + "=");
    std::vector<VarRef> bounds = args.pos;
    VarRef size = args.keyword("size");
    if (!size && !bounds.empty()) {
      size = bounds.back();
      bounds.pop_back();
    }
    if (!size || bounds.empty() || bounds.size() > 2)
      unsupported("mini.randint() without (high, size) or (low, high, size)");
    auto bound = [&](const VarRef& v_in) {
      VarRef v = specialize(ctx, v_in);
      if (!v->is(Var::Kind::Constant) || !PyLong_Check(v->obj) || PyBool_Check(v->obj))
        unsupported("mini.randint() with a bound " + v_in->describe() + " (an int known while tracing)");
      return python_int64(v->obj);
    };
    const int64_t low = bounds.size() == 2 ? bound(bounds[0]) : 0, high = bound(bounds.back());
    const DType out = dtype_or(args.keyword("dtype"), DType::Int64);
    if (low >= high || high - low > (int64_t(1) << 52) || out == DType::Bool)
      unsupported("mini.randint() over [" + std::to_string(low) + ", " + std::to_string(high) + ") as " +
                  dtype_name(out) + " (eager says why)");
    a.device = factory_device(ctx, args.keyword("device"), name);
    a.shape = factory_shape(ctx, {size}, name);
    a.dtype = DType::Float64;
    graph::Graph& g = ctx.graph();
    VarRef u = factory(ctx, OpKind::Rand, a, nullptr);
    VarRef scaled = node(ctx, OpKind::Mul, {u->node, g.add_constant(double(high - low), DType::Float64)});
    VarRef ints = node(ctx, OpKind::Add, {cast_to(ctx, scaled, DType::Int64)->node,
                                          g.add_constant(double(low), DType::Int64)});
    return cast_to(ctx, ints, out);
  }
  if (name == "arange") {  // (start, end=None, step=1, dtype=None, requires_grad=False, device=None)
    check_kwargs(args, {"start", "end", "step", "dtype", "requires_grad", "device"});
    args.at_most(6);
    a.device = factory_device(ctx, args.get(5, "device", false), name);
    VarRef start = args.get(0, "start"), end = args.get(1, "end", false), step = args.get(2, "step", false);
    if (!end || end->obj == Py_None) {
      end = start;
      start = make_constant(PyLong_FromLong(0));
    }
    if (!step) step = make_constant(PyLong_FromLong(1));
    auto is_int = [](const VarRef& v) {
      bool number = v->is(Var::Kind::Constant) && PyLong_Check(v->obj) && !PyBool_Check(v->obj);
      return number || v->is(Var::Kind::SymInt);
    };
    if (!is_int(start) || !is_int(end) || !is_int(step))
      unsupported("mini.arange(" + start->describe() + ", " + end->describe() + ", " + step->describe() +
                  "): mini captures arange of ints only");
    a.start = int_of(ctx, start, "start");
    a.step = int_of(ctx, step, "step");
    // arange(x.shape[0]) keeps the size symbolic; any other symbolic bound is specialized
    a.end = end->is(Var::Kind::SymInt) && a.start == 0 && a.step == 1 ? end->node : int_of(ctx, end, "end");
    a.dtype = dtype_or(args.get(3, "dtype", false), DType::Int64);
    return factory(ctx, OpKind::Arange, a, args.get(4, "requires_grad", false));
  }
  return nullptr;
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
  write_in_place(ctx, self, cast_to(ctx, result, dtype)->node, op);
  return self;  // x.add_(1) returns x itself
}

// where(True, value, self): value everywhere, broadcast to self's shape (fill_, copy_);
// self's gradient is zero, value's its sum over the broadcast.
VarRef overwrite(TraceContext& ctx, const VarRef& self, const VarRef& value) {
  int everywhere = ctx.graph().add_constant(true, DType::Bool);
  return node(ctx, OpKind::Where, {everywhere, operand(ctx, value), self->node});
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
    int below = tensor_binary(ctx, OpKind::Lt, r, lo)->node;
    r = node(ctx, OpKind::Where, {below, operand(ctx, lo), r->node});
  }
  if (hi) {
    int above = tensor_binary(ctx, OpKind::Gt, r, hi)->node;
    r = node(ctx, OpKind::Where, {above, operand(ctx, hi), r->node});
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
  return cast_to(ctx, node(ctx, OpKind::Where, {mask->node, operand(ctx, value), self->node}),
                 meta_of(ctx, self).dtype);
}

const struct { const char* name; OpKind op; } kInplaceBinary[] = {
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
    result = node(ctx, OpKind::Relu, {self->node});
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

}  // namespace

VarRef tensor_inplace_binary(TraceContext& ctx, OpKind op, const VarRef& self,
                             const VarRef& other) {
  std::string name = std::string(op_name(op)) + "_";
  check_writable(ctx, self, name);
  return write_result(ctx, self, tensor_binary(ctx, op, self, other), name, false);
}

const graph::TensorMeta& meta_of(TraceContext& ctx, const VarRef& t) {
  return ctx.graph().nodes[t->node].meta;
}

VarRef size_var(TraceContext& ctx, const VarRef& tensor, int64_t dim) {
  int64_t s = meta_of(ctx, tensor).sizes.at(dim);
  if (s >= 0) return make_constant(PyLong_FromLongLong(s));
  if (!graph::is_symbol(s))
    unsupported("reading a data-dependent size (the length of a nonzero() result) in Python");
  const graph::Symbol& sym = ctx.graph().symbols[graph::symbol_index(s)];
  auto v = std::make_shared<Var>(Var::Kind::SymInt);
  v->node = s;
  v->expr = size_expr_of(ctx, s);  // an input's dim, or a size derived from them
  v->obj = PyLong_FromLongLong(sym.hint);
  return v;
}

VarRef as_constant(TraceContext& ctx, const VarRef& v_in) {
  VarRef v = specialize(ctx, v_in);
  if (v->is(Var::Kind::Constant)) return v;
  if (!v->is(Var::Kind::Tuple) && !v->is(Var::Kind::List)) return nullptr;
  std::vector<VarRef> items;
  for (auto& item : v->items) {
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
  if (v->size) Py_SETREF(r, PyObject_CallOneArg(python_bridge().size_type, r));  // str(x.shape)
  if (!r) {
    PyErr_Clear();
    unsupported("internal: cannot make a mini.Size");
  }
  return make_constant(r);
}

VarRef specialize(TraceContext& ctx, const VarRef& v) {
  if (is_sym_slice(v)) {  // each bound to its value: a constant slice
    auto value = [&](const VarRef& part) { return specialize_number(ctx, specialize(ctx, part)); };
    VarRef start = value(v->items[0]), stop = value(v->items[1]), step = value(v->items[2]);
    PyObject* slice = PySlice_New(start->obj, stop->obj, step->obj);
    if (!slice) { PyErr_Clear(); unsupported("slice(): out of memory"); }
    return make_constant(slice);
  }
  if (!v || !v->is(Var::Kind::SymInt)) return v;
  // Only the value is baked in, so the guard is on the expression: x.numel() == 12 also
  // admits 4x3 for 3x4, which computes the same
  int64_t value = PyLong_AsLongLong(v->obj);
  ctx.guards().add_size_compare(
      guards::SizeExpr::apply(guards::SizeTerm::Op::Eq, v->expr, guards::SizeExpr::constant(value)));
  Py_INCREF(v->obj);
  return make_constant(v->obj);
}

// The graph input position of v if it is a Python number's 0-d input (of the frame's, or a
// size's value: Source::Size), else -1.
static int scalar_input(TraceContext& ctx, const VarRef& v) {
  if (!v || !v->number || v->node < 0 || ctx.graph().nodes[v->node].kind != graph::NodeKind::Input) return -1;
  const auto& inputs = ctx.graph().inputs;
  size_t pos = std::find(inputs.begin(), inputs.end(), v->node) - inputs.begin();
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
  if (ctx.trace.input_sources[pos]->kind == guards::Source::Kind::Size) return -1;  // a size's value
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

VarRef tensor_unary(TraceContext& ctx, OpKind op, const VarRef& a) { return node(ctx, op, {a->node}); }

VarRef tensor_attr(TraceContext& ctx, const VarRef& self, const std::string& name) {
  const graph::TensorMeta& m = meta_of(ctx, self);
  if (name == "shape") {
    std::vector<VarRef> dims;
    for (size_t d = 0; d < m.sizes.size(); d++) dims.push_back(size_var(ctx, self, (int64_t)d));
    VarRef size = make_tuple_var(dims);
    size->size = true;
    return size;
  }
  if (name == "ndim") return make_constant(PyLong_FromSize_t(m.sizes.size()));
  if (name == "dtype") return dtype_object(m.dtype);
  if (name == "requires_grad")
    return make_constant(PyBool_FromLong(tensor_requires_grad(ctx, self)));
  // A result without a gradient history is a leaf with grad_fn None; one with a history has
  // a grad_fn only once the graph runs (Dynamo breaks on it too). An input's leafness is
  // not guarded when it requires grad.
  if (name == "is_leaf" || name == "grad_fn") {
    bool requires_grad = tensor_requires_grad(ctx, self);
    int input = input_itself(ctx, self);
    const graph::Graph& g = ctx.graph();
    bool input_requires_grad = input >= 0 && g.nodes[g.inputs[input]].meta.requires_grad;
    if (name == "is_leaf" && !input_requires_grad)
      return make_constant(PyBool_FromLong(!requires_grad));
    if (name == "grad_fn" && !requires_grad) return make_constant((Py_INCREF(Py_None), Py_None));
    unsupported("reading Tensor." + name + " of a tensor that requires grad inside a compiled "
                "function is not supported by mini's capture");
  }
  if (name == "device") {  // the graph's: every tensor of a graph is on it
    PyObject* module = PyImport_ImportModule("mini._tensor");
    PyObject* type = module ? PyObject_GetAttrString(module, "device") : nullptr;
    PyObject* d = type ? PyObject_CallFunction(type, "s", ctx.graph().device.str().c_str()) : nullptr;
    Py_XDECREF(type);
    Py_XDECREF(module);
    if (!d) {
      PyErr_Clear();
      unsupported("mini's device object is not available");
    }
    VarRef v = wrap_untracked(ctx, d);
    Py_DECREF(d);
    return v;
  }
  if (name == "is_cuda") return make_constant(PyBool_FromLong(ctx.graph().device.is_cuda()));
  if (name == "__class__") return wrap_untracked(ctx, (PyObject*)tensor_type_of(ctx, self));
  if (name == "T") {
    Attrs a;
    for (int64_t d = (int64_t)m.sizes.size() - 1; d >= 0; d--) a.dims.push_back(d);
    return node(ctx, OpKind::Permute, {self->node}, a);
  }
  if (name == "mT") {
    Attrs a;
    a.dim = -2;
    a.dim2 = -1;
    return node(ctx, OpKind::Transpose, {self->node}, a);
  }
  if (name == "grad" || name == "data" || name == "grad_fn")
    unsupported("reading Tensor." + name + " inside a compiled function is not supported by mini's capture");
  PyObject* attr = PyObject_GetAttrString(python_bridge().tensor_type, name.c_str());
  if (!attr) {  // let CPython raise the AttributeError (a try block may expect it)
    PyErr_Clear();
    unsupported("Tensor has no attribute '" + name + "'");
  }
  Py_DECREF(attr);
  return make_method(self, name);  // a method, bound to the tensor; called later
}

// A slice whose bounds are dynamic sizes (sym_slice), as graph size codes where graph_size
// takes each (None: 0 and an open end), each >= 0 by a size fact; false where one is not (a
// negative int, an expression graph sizes cannot hold): the caller specializes the slice.
static bool symbolic_slice_bounds(TraceContext& ctx, const VarRef& slice, int64_t* start, int64_t* end) {
  int64_t* bounds[2] = {start, end};
  for (int k = 0; k < 2; k++) {
    const VarRef& b = slice->items[k];
    if (b->obj == Py_None && b->is(Var::Kind::Constant)) *bounds[k] = k == 0 ? 0 : PY_SSIZE_T_MAX;
    else if (!graph_size(ctx, b, bounds[k])) return false;
  }
  for (int64_t code : {*start, *end})
    if (graph::is_symbol(code)) ctx.graph().assume(0, '<', code);  // Python would count from the end
  return true;
}

VarRef tensor_getitem(TraceContext& ctx, const VarRef& t, const VarRef& index) {
  std::vector<VarRef> items = index->is(Var::Kind::Tuple) && !is_sym_slice(index) ? index->items : std::vector<VarRef>{index};
  if (index->is(Var::Kind::Constant) && PyTuple_Check(index->obj)) {  // x[..., 1]: a constant tuple
    items.clear();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(index->obj); i++) {
      PyObject* o = PyTuple_GET_ITEM(index->obj, i);
      Py_INCREF(o);
      items.push_back(make_constant(o));
    }
  }
  int64_t rank = (int64_t)meta_of(ctx, t).sizes.size(), consuming = 0;
  struct Bounds { int64_t start = 0, end = 0, step = 1; };
  std::vector<Bounds> sym_bounds(items.size());  // each symbolic slice's, as graph size codes
  for (size_t i = 0; i < items.size(); i++) {
    VarRef& it = items[i];
    if (is_sym_slice(it)) {
      Bounds& b = sym_bounds[i];
      VarRef step = specialize(ctx, it->items[2]);
      if (step->obj != Py_None) b.step = PyLong_Check(step->obj) ? PyLong_AsLongLong(step->obj) : 0;
      if (b.step < 1 || !symbolic_slice_bounds(ctx, it, &b.start, &b.end))
        it = specialize(ctx, it);  // eager's step check, or bounds graph sizes cannot hold
    } else {
      it = specialize(ctx, it);
    }
    if (is_sym_slice(it)) {
      consuming++;
      continue;
    }
    PyObject* o = it->obj;
    bool basic = it->is(Var::Kind::Constant) && !PyBool_Check(o) &&
                 (PyLong_Check(o) || PySlice_Check(o) || o == Py_None || o == Py_Ellipsis);
    if (!basic)
      unsupported("indexing a tensor with " + it->describe() + " (mini supports ints, slices, None and ...)");
    if (PyLong_Check(it->obj) || PySlice_Check(it->obj)) consuming++;
  }
  check_index_count(consuming, rank);
  VarRef r = t;
  int64_t dim = 0;
  for (size_t i = 0; i < items.size(); i++) {
    const VarRef& it = items[i];
    PyObject* o = it->obj;
    Attrs a;
    if (is_sym_slice(it)) {  // bounds that are graph symbols, resolved when the graph runs
      a.dim = dim++;
      a.start = sym_bounds[i].start;
      a.end = sym_bounds[i].end;
      a.step = sym_bounds[i].step;
      r = node(ctx, OpKind::Slice, {r->node}, a);
    } else if (o == Py_None) {
      a.dim = dim++;
      r = node(ctx, OpKind::Unsqueeze, {r->node}, a);
    } else if (o == Py_Ellipsis) {
      dim += rank - consuming;
    } else if (PyLong_Check(o)) {
      a.dim = dim;
      a.index = PyLong_AsLongLong(o);
      int64_t n = meta_of(ctx, r).sizes.at(dim);
      if (n < 0 && a.index < 0) n = PyLong_AsLongLong(specialize(ctx, size_var(ctx, r, dim))->obj);
      if (n < 0) {  // a dynamic size: meta inference keeps the bound as a fact (guarded)
        r = node(ctx, OpKind::Select, {r->node}, a);
        continue;
      }
      if (a.index < -n || a.index >= n)
        fail_index("index ", a.index, " is out of bounds for dimension ", dim, " with size ", n);
      if (a.index < 0) a.index += n;
      r = node(ctx, OpKind::Select, {r->node}, a);
    } else {
      Py_ssize_t start, stop, step;
      PySlice_Unpack(o, &start, &stop, &step);
      if (step <= 0) fail_value("step must be greater than zero");
      int64_t n = meta_of(ctx, r).sizes.at(dim);
      if (n < 0 && (start < 0 || stop < 0)) n = PyLong_AsLongLong(specialize(ctx, size_var(ctx, r, dim))->obj);
      if (n < 0) {  // a dynamic size: bounds are clamped when the kernel runs
        a.dim = dim++;
        a.start = start;
        a.end = stop;  // PY_SSIZE_T_MAX for an open end
        a.step = step;
        r = node(ctx, OpKind::Slice, {r->node}, a);
        continue;
      }
      PySlice_AdjustIndices(n, &start, &stop, step);
      a.dim = dim++;
      a.start = start;
      a.end = std::max<Py_ssize_t>(stop, start);
      a.step = step;
      r = node(ctx, OpKind::Slice, {r->node}, a);
    }
  }
  return r;
}

// x.split(size | sizes, dim) and x.chunk(n, dim): slices of x along dim (views), the pieces
// mini/_tensor.py's eager split and chunk make; the dim's length must be static (the number
// of pieces is the structure of the program).
static VarRef split_views(TraceContext& ctx, const std::string& name, const VarRef& self, const Args& args) {
  const graph::TensorMeta& m = meta_of(ctx, self);
  const int64_t r = (int64_t)m.sizes.size();
  VarRef dim_var = args.get(1, "dim", false);
  const int64_t dim = dim_var ? int_of(ctx, dim_var, "dim") : 0;
  if (dim < -r || dim >= r)
    fail("Dimension out of range (expected to be in range of [", -r, ", ", r - 1, "], but got ", dim, ")");
  const int64_t d = (dim + r) % r, n = m.sizes[d];
  if (n < 0) unsupported(name + "() along a dynamic dim: the number of pieces would depend on its size");
  VarRef how = args.get(0, name == "split" ? "split_size_or_sections" : "chunks");
  std::vector<int64_t> sizes;
  if (how->is(Var::Kind::List) || how->is(Var::Kind::Tuple)) {
    int64_t total = 0;
    for (const VarRef& k : how->items) total += sizes.emplace_back(int_of(ctx, k, "split size"));
    if (total != n) fail("split_with_sizes expects split_sizes to sum exactly to ", n, " (input tensor's size at dimension ", dim, ")");
  } else {
    int64_t k = int_of(ctx, how, name == "split" ? "split_size" : "chunks");
    if (k <= 0) fail(name, "() expects a positive ", name == "split" ? "split_size" : "number of chunks", ", got ", k);
    if (name == "chunk") k = std::max<int64_t>(1, (n + k - 1) / k);
    for (int64_t start = 0; start < n; start += k) sizes.push_back(std::min(k, n - start));
    if (sizes.empty()) sizes.push_back(0);
  }
  std::vector<VarRef> pieces;
  int64_t start = 0;
  for (int64_t k : sizes) {
    PyObject* index = PyTuple_New(d + 1);
    for (int64_t i = 0; i < d; i++) PyTuple_SET_ITEM(index, i, PySlice_New(nullptr, nullptr, nullptr));
    PyObject *lo = PyLong_FromLongLong(start), *hi = PyLong_FromLongLong(start + k);
    PyTuple_SET_ITEM(index, d, PySlice_New(lo, hi, nullptr));
    Py_DECREF(lo);
    Py_DECREF(hi);
    pieces.push_back(tensor_getitem(ctx, self, make_constant(index)));
    start += k;
  }
  return make_tuple_var(pieces);
}

// x.tril(diagonal) / x.triu(diagonal): x with the elements above (below) the diagonal of its
// last two dims set to 0, through the ops mini/_tensor.py's eager tril and triu use: two
// aranges on x's device, a comparison, masked_fill.
static VarRef triangle(TraceContext& ctx, const std::string& name, const VarRef& self, const Args& args) {
  const int64_t r = (int64_t)meta_of(ctx, self).sizes.size();
  if (r < 2) fail(name, ": input tensor must have at least 2 dimensions, got ", r);
  VarRef diagonal = args.get(0, "diagonal", false);
  const int64_t k = diagonal ? int_of(ctx, diagonal, "diagonal") : 0;
  Kwargs on_device{{"device", make_constant(PyUnicode_FromString(ctx.graph().device.str().c_str()))}};
  auto index = [&](int64_t dim, int64_t unsqueeze_at) {
    VarRef a = call_graph_function(ctx, "arange", {size_var(ctx, self, dim)}, on_device);
    return call_tensor_method(ctx, "unsqueeze", a, {make_constant(PyLong_FromLongLong(unsqueeze_at))}, {});
  };
  VarRef i = index(r - 2, 1), j = index(r - 1, 0);
  VarRef shifted = tensor_binary(ctx, OpKind::Add, i, make_constant(PyLong_FromLongLong(k)));
  VarRef drop = tensor_binary(ctx, name == "tril" ? OpKind::Gt : OpKind::Lt, j, shifted);
  return masked_fill(ctx, self, drop, make_constant(PyLong_FromLong(0)));
}

VarRef call_tensor_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                          std::vector<VarRef> pos, const Kwargs& kwargs) {
  Args args{std::move(pos), kwargs, name};
  const graph::TensorMeta& m = meta_of(ctx, self);
  for (auto& b : kBinary)
    if (name == b.name) return tensor_binary(ctx, b.op, self, args.get(0, "other"));
  if (name == "mm" || name == "bmm") {  // matmuls of two 2-D or 3-D tensors, with eager's checks
    VarRef other = args.get(0, "mat2");
    if (is_tensor(other)) {
      Tensor a = graph::meta_tensor(m), b = graph::meta_tensor(meta_of(ctx, other));
      name == "mm" ? check_mm(a, b) : check_bmm(a, b);
    }
    return tensor_binary(ctx, OpKind::Matmul, self, other);
  }
  for (auto& u : kUnary)
    if (name == u.name) return tensor_unary(ctx, u.op, self);
  if (name == "sum") return reduction(ctx, OpKind::Sum, self, args);
  if (name == "mean") return reduction(ctx, OpKind::Mean, self, args);
  if (name == "amax") return reduction(ctx, OpKind::Amax, self, args);
  if (name == "amin") return reduction(ctx, OpKind::Amin, self, args);
  if (name == "max" || name == "min") {
    VarRef dim = args.get(0, "dim", false);
    if (is_tensor(dim))
      return tensor_binary(ctx, name == "max" ? OpKind::Maximum : OpKind::Minimum, self, dim);
    if (dim) unsupported(name + "(dim) returns (values, indices); mini's capture supports " + name + "() and a" + name + "(dim)");
    return node(ctx, name == "max" ? OpKind::Amax : OpKind::Amin, {self->node});
  }
  if (name == "softmax" || name == "log_softmax") {
    Attrs a;
    a.dim = int_of(ctx, args.get(0, "dim"), "dim");
    return node(ctx, name == "softmax" ? OpKind::Softmax : OpKind::LogSoftmax, {self->node}, a);
  }
  if (name == "gelu") {
    Attrs a;
    VarRef ap = args.get(0, "approximate", false);
    a.mode = ap && ap->obj && PyUnicode_Check(ap->obj) ? PyUnicode_AsUTF8(ap->obj) : "none";
    return node(ctx, OpKind::Gelu, {self->node}, a);
  }
  if (name == "reshape" || name == "view") {
    std::vector<int64_t> shape = ints_of(ctx, args.pos, 0, "shape");
    // a view is a reshape that never copies: eager's check where it would (known sizes only)
    bool known = std::all_of(m.sizes.begin(), m.sizes.end(), [](int64_t s) { return s >= 0; }) &&
                 std::all_of(shape.begin(), shape.end(), [](int64_t s) { return s >= -1; });
    if (name == "view" && known) check_view(graph::meta_tensor(m), shape);
    return reshape(ctx, self, shape);
  }
  if (name == "split" || name == "chunk") return split_views(ctx, name, self, args);
  if (name == "tril" || name == "triu") return triangle(ctx, name, self, args);
  if (name == "flatten") {
    int64_t r = (int64_t)m.sizes.size();
    if (r == 0) return reshape(ctx, self, {1});
    int64_t s = int_of(ctx, args.get(0, "start_dim", false) ? args.get(0, "start_dim") : make_constant(PyLong_FromLong(0)), "start_dim");
    VarRef ev = args.get(1, "end_dim", false);
    int64_t e = ev ? int_of(ctx, ev, "end_dim") : -1;
    s = wrap_dim(s, r);
    e = wrap_dim(e, r);
    std::vector<int64_t> shape(m.sizes.begin(), m.sizes.begin() + s);
    shape.push_back(-1);
    shape.insert(shape.end(), m.sizes.begin() + e + 1, m.sizes.end());
    return reshape(ctx, self, shape);
  }
  if (name == "expand") {
    Attrs a;
    a.shape = ints_of(ctx, args.pos, 0, "size");
    return node(ctx, OpKind::Expand, {self->node}, a);
  }
  if (name == "permute") {
    Attrs a;
    a.dims = ints_of(ctx, args.pos, 0, "dims");
    return node(ctx, OpKind::Permute, {self->node}, a);
  }
  if (name == "transpose") {
    Attrs a;
    a.dim = int_of(ctx, args.get(0, "dim0"), "dim0");
    a.dim2 = int_of(ctx, args.get(1, "dim1"), "dim1");
    return node(ctx, OpKind::Transpose, {self->node}, a);
  }
  if (name == "t") {
    if (m.sizes.size() < 2) return self;
    if (m.sizes.size() > 2) fail("t() expects a tensor with <= 2 dimensions, but self is ", m.sizes.size(), "D");
    Attrs a;
    a.dim = 0;
    a.dim2 = 1;
    return node(ctx, OpKind::Transpose, {self->node}, a);
  }
  if (name == "unsqueeze") {
    Attrs a;
    a.dim = int_of(ctx, args.get(0, "dim"), "dim");
    return node(ctx, OpKind::Unsqueeze, {self->node}, a);
  }
  if (name == "squeeze") {
    Attrs a;
    a.dims = dims_of(ctx, args.get(0, "dim", false));
    return node(ctx, OpKind::Squeeze, {self->node}, a);
  }
  if (name == "contiguous") {
    bool contiguous = m.strides == contiguous_strides(m.sizes);
    return contiguous ? self : node(ctx, OpKind::Clone, {self->node});
  }
  if (name == "float") return cast_to(ctx, self, DType::Float32);
  if (name == "double") return cast_to(ctx, self, DType::Float64);
  if (name == "long") return cast_to(ctx, self, DType::Int64);
  if (name == "bool") return cast_to(ctx, self, DType::Bool);
  if (name == "bfloat16") return cast_to(ctx, self, DType::BFloat16);
  if (name == "to" || name == "type_as") {
    // .to(dtype), .to(tensor), .to(device), .to(device, dtype), .to(device=, dtype=)
    VarRef d = args.keyword("device") ? args.keyword("device") : args.get(0, "dtype", false);
    VarRef dtype = args.keyword("device") ? args.get(0, "dtype", false) : args.get(1, "dtype", false);
    if (name == "to" && args.keyword("dtype")) dtype = args.keyword("dtype");
    if (d && is_tensor(d)) return cast_to(ctx, self, meta_of(ctx, d).dtype);
    Device target;
    if (d && d->obj && d->obj != Py_None && device_from(d->obj, &target)) {
      if (target != ctx.graph().device)  // a copy to another device: eager runs it, and what follows
        unsupported("Tensor.to(" + target.str() + ") inside a compiled function whose tensors are on " +
                    ctx.graph().device.str() + ": mini compiles a graph for one device");
      return dtype && dtype->obj != Py_None ? cast_to(ctx, self, dtype_from(dtype)) : self;
    }
    if (!d || d->obj == Py_None) return dtype && dtype->obj != Py_None ? cast_to(ctx, self, dtype_from(dtype)) : self;
    return cast_to(ctx, self, dtype_from(d));
  }
  if (name == "cpu" || name == "cuda") {
    Device target = Device::cpu();
    if (name == "cuda") {
      VarRef d = args.get(0, "device", false);
      target = Device::cuda(0);
      if (d && d->obj != Py_None && !device_from(d->obj, &target))
        unsupported("Tensor.cuda(" + d->describe() + ")");
    }
    if (target != ctx.graph().device)
      unsupported("Tensor." + name + "() inside a compiled function whose tensors are on " +
                  ctx.graph().device.str() + ": mini compiles a graph for one device");
    return self;
  }
  if (name == "detach") return node(ctx, OpKind::Detach, {self->node});
  if (name == "size") {
    VarRef d = args.get(0, "dim", false);
    if (!d) return tensor_attr(ctx, self, "shape");
    return size_var(ctx, self, wrap_dim(int_of(ctx, d, "dim"), (int64_t)m.sizes.size()));
  }
  if (name == "dim") return make_constant(PyLong_FromSize_t(m.sizes.size()));
  if (name == "numel") return numel_var(ctx, self);
  if (name == "is_floating_point") return make_constant(PyBool_FromLong(is_floating(m.dtype)));
  if (name == "is_contiguous") {
    // A written input keeps its own layout while its new value is contiguous: views of a
    // written input that is not contiguous would show strides eager does not have.
    const graph::Graph& g = ctx.graph();
    const Alias& a = alias_of(ctx, self->node);
    const graph::TensorMeta* own = &m;
    if (a.storage->input >= 0 && a.storage->mutated) {
      const graph::TensorMeta& input = g.nodes[g.inputs[a.storage->input]].meta;
      if (a.views.empty()) own = &input;
      else if (!is_contiguous(input))
        unsupported("is_contiguous() of a view of a non-contiguous input written in place");
    }
    if (std::any_of(own->sizes.begin(), own->sizes.end(), [](int64_t s) { return s < 0; }))
      unsupported("is_contiguous() of a tensor with dynamic sizes");
    return make_constant(PyBool_FromLong(is_contiguous(*own)));
  }
  if (name == "clamp")
    return clamp(ctx, self, args.get(0, "min", false), args.get(1, "max", false), "torch.clamp");
  if (name == "masked_fill") return masked_fill(ctx, self, args.get(0, "mask"), args.get(1, "value"));
  if (VarRef r = inplace_method(ctx, name, self, args)) return r;
  if (name == "nonzero") return node(ctx, OpKind::Nonzero, {self->node});
  if (name == "item" && ctx.options.capture_scalar_outputs) {
    // the number stays in the graph: a 0-d value that promotes like a Python number
    if (numel_of(m.sizes) != 1 && std::all_of(m.sizes.begin(), m.sizes.end(), [](int64_t s) { return s >= 0; }))
      fail("a Tensor with ", numel_of(m.sizes), " elements cannot be converted to Scalar");
    Attrs a;
    a.shape = {};
    VarRef v = m.sizes.empty() ? self : node(ctx, OpKind::Reshape, {self->node}, a);
    // of the Python number's type (a float is a double), in a value of its own: it promotes
    // like a number where it meets tensors, and computes like one where it meets numbers
    a.dtype = is_floating(m.dtype) ? DType::Float64 : m.dtype;
    v = a.dtype != m.dtype ? node(ctx, OpKind::Cast, {v->node}, a) : node(ctx, OpKind::Clone, {v->node});
    ctx.graph().nodes[v->node].wrapped_number = true;
    v->number = true;
    return v;
  }
  if (name == "item" || name == "tolist" || name == "numpy")
    unsupported("Unsupported Tensor." + name + "() call with capture_scalar_outputs=False: the value "
                "is only known at run time; keep it a tensor (e.g. mini.where) instead of a Python number");
  // a Tensor method mini writes in Python (mini/_tensor.py: argmax, tril, ...) over ops capture
  // records: inlined with self bound, as a user's function would be
  if (PyObject* fn = PyObject_GetAttrString(python_bridge().tensor_type, name.c_str())) {
    bool python = PyFunction_Check(fn);
    Py_DECREF(fn);  // the class keeps it alive
    if (python) {
      std::vector<VarRef> pos = args.pos;
      pos.insert(pos.begin(), self);
      return inline_function(ctx, fn, nullptr, std::move(pos), kwargs);
    }
  } else {
    PyErr_Clear();
  }
  if (name.back() == '_' || name == "copy_" || name == "zero_")
    unsupported("in-place Tensor." + name + "() inside a compiled function is not supported by mini's "
                "capture; use the out-of-place form");
  unsupported("Tensor." + name + "() is not supported by mini's capture");
}

VarRef call_tensor_method_as_found(TraceContext& ctx, const std::string& name, const VarRef& self,
                                   std::vector<VarRef> pos, const Kwargs& kwargs) {
  if (VarRef r = call_replaced_tensor_method(ctx, name, self, pos, kwargs)) return r;
  return call_tensor_method(ctx, name, self, std::move(pos), kwargs);
}

VarRef call_replaced_tensor_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                                   std::vector<VarRef> pos, const Kwargs& kwargs) {
  PyTypeObject* type = tensor_type_of(ctx, self);
  PyObject* found = self->number ? nullptr : PyObject_GetAttrString((PyObject*)type, name.c_str());
  if (!found) {  // a dynamic number's method, or no such method: the op table says what it is
    PyErr_Clear();
    return nullptr;
  }
  int input = input_itself(ctx, self);
  SourceRef cls = type == (PyTypeObject*)python_bridge().tensor_type
                      ? guards::Source::tensor_class()
                      : guards::Source::attr(ctx.trace.input_sources.at(input), "__class__");
  SourceRef fsrc = guards::Source::attr(cls, name);
  ctx.guards().add_id_match(fsrc, found);
  PyObject* own = PyDict_GetItemString(python_bridge().tensor_methods, name.c_str());
  bool mini_function = PyFunction_Check(found) && is_mini_library(PyFunction_GET_GLOBALS(found));
  if (found == own || mini_function) {
    Py_DECREF(found);
    return nullptr;
  }
  if (!PyFunction_Check(found)) {
    Py_DECREF(found);
    unsupported("Tensor." + name + ", replaced by an object that is not a Python function");
  }
  pos.insert(pos.begin(), self);
  Py_DECREF(found);  // the class keeps it alive
  return inline_function(ctx, found, fsrc, std::move(pos), kwargs);
}

VarRef call_graph_function(TraceContext& ctx, const std::string& name, std::vector<VarRef> pos,
                           const Kwargs& kwargs) {
  if (VarRef r = call_grad_mode_function(ctx, name, pos, kwargs)) return r;
  if (VarRef r = call_factory(ctx, name, pos, kwargs)) return r;
  if (name == "is_compiling" && pos.empty() && kwargs.empty())  // mini.compiler.is_compiling()
    return make_constant((Py_INCREF(Py_True), Py_True));
  if (name == "where") {
    Args args{std::move(pos), kwargs, name};
    VarRef c = args.get(0, "condition"), a = args.get(1, "input"), b = args.get(2, "other");
    if (!c->is(Var::Kind::Tensor)) unsupported("where() with a condition that is not a tensor");
    return node(ctx, OpKind::Where, {c->node, operand(ctx, a), operand(ctx, b)});
  }
  if (name == "layer_norm") {
    Args args{std::move(pos), kwargs, name};
    VarRef x = args.get(0, "input");
    std::vector<int64_t> shape = ints_of(ctx, {args.get(1, "normalized_shape")}, 0, "normalized_shape");
    VarRef w = args.get(2, "weight", false), b = args.get(3, "bias", false), e = args.get(4, "eps", false);
    Attrs a;
    a.dim = (int64_t)shape.size();
    // eps is an attribute of the kernel: a number known while tracing (a module's eps that
    // changed between calls becomes a graph input, which the kernel cannot read)
    if (e && !(e->is(Var::Kind::Constant) && (PyFloat_Check(e->obj) || PyLong_CheckExact(e->obj))))
      unsupported("layer_norm's eps must be a Python number known while tracing, got " + e->describe());
    a.eps = e ? PyFloat_AsDouble(e->obj) : 1e-5;
    if (!is_tensor(x)) unsupported("layer_norm() of " + x->describe());
    std::vector<int> in{x->node};
    // eager's check, on the operands as eager sees them: this call's sizes (a symbol's value
    // seen), cast where autocast casts them (node() adds those casts to the graph)
    DType autocast_to;
    bool autocast = autocast_target(OpKind::LayerNorm, ctx.graph().device, &autocast_to);
    auto meta = [&](const VarRef& t) {
      Tensor m = graph::meta_tensor(meta_of(ctx, t));
      m->sizes = ctx.graph().hints(m->sizes);
      if (autocast && autocast_casts(m->dtype, autocast_to)) m->dtype = autocast_to;
      return m;
    };
    std::vector<Tensor> metas;
    for (const VarRef& t : {w, b}) {
      bool given = t && t->obj != Py_None;
      if (given && !is_tensor(t)) unsupported("layer_norm() with a weight or bias that is not a tensor");
      in.push_back(given ? t->node : -1);
      metas.push_back(given ? meta(t) : nullptr);
    }
    check_layer_norm(meta(x), shape, metas[0], metas[1]);
    // equal on this call's sizes: a dynamic dim among x's normalized ones is a fact the graph
    // relies on, guarded (the weight's and bias's: infer_meta's)
    const Shape& xs = meta_of(ctx, x).sizes;
    for (size_t i = 0; i < shape.size(); i++)
      if (int64_t have = xs[xs.size() - shape.size() + i]; have != graph::kUnbacked) ctx.graph().assume(have, '=', shape[i]);
    return node(ctx, OpKind::LayerNorm, in, a);
  }
  if (name == "attention_node") {
    // F.scaled_dot_product_attention while compiling (mini._tensor.attention_node): one
    // Attention node, an extern call to the fused kernel (FlashAttention on CUDA), where
    // mini.config.fused_attention takes these operands as eager would see them (autocast's casts
    // applied); else None, and the function goes on to its matmuls and softmax.
    Args args{std::move(pos), kwargs, name};
    VarRef q = args.get(0, "query"), k = args.get(1, "key"), v = args.get(2, "value");
    VarRef causal = args.get(3, "is_causal"), scale = args.get(4, "scale");
    auto none = [] { return make_constant((Py_INCREF(Py_None), Py_None)); };
    if (!is_tensor(q) || !is_tensor(k) || !is_tensor(v) || !causal->is(Var::Kind::Constant) ||
        !scale->is(Var::Kind::Constant) || !(PyFloat_Check(scale->obj) || PyLong_CheckExact(scale->obj)))
      return none();
    DType autocast_to;
    bool autocast = autocast_target(OpKind::Attention, ctx.graph().device, &autocast_to);
    auto meta = [&](const VarRef& t) {
      Tensor m = graph::meta_tensor(meta_of(ctx, t));
      m->storage->device = ctx.graph().device;
      if (autocast && autocast_casts(m->dtype, autocast_to)) m->dtype = autocast_to;
      return m;
    };
    if (!attention_node_fits(meta(q), meta(k), meta(v), compile_config().fused_attention)) return none();
    Attrs a;
    a.mode = PyObject_IsTrue(causal->obj) ? "causal" : "";
    a.value = PyFloat_AsDouble(scale->obj);
    a.index = 0;
    return node(ctx, OpKind::Attention, {q->node, k->node, v->node}, a);
  }
  if (name == "embedding") {  // mini.nn.functional.embedding(input, weight): weight's rows by index
    Args args{std::move(pos), kwargs, name};
    VarRef idx = args.get(0, "input"), w = args.get(1, "weight");
    if (!is_tensor(idx) || !is_tensor(w)) unsupported("embedding() of " + idx->describe() + " and " + w->describe());
    return node(ctx, OpKind::Embedding, {w->node, idx->node});
  }
  if (name == "slice_scatter") {  // mini.slice_scatter(input, src, dim, start, end, step): input, src in a slice
    Args args{std::move(pos), kwargs, name};
    VarRef base = args.get(0, "input"), src = args.get(1, "src");
    if (!is_tensor(base) || !is_tensor(src))
      unsupported("slice_scatter() of " + base->describe() + " and " + src->describe());
    const auto& m = meta_of(ctx, base);
    const int64_t rank = (int64_t)m.sizes.size();
    auto given = [&](size_t i, const char* what) {
      VarRef v = args.get(i, what, false);
      return v && v->obj != Py_None ? v : VarRef();
    };
    Attrs a;
    VarRef dim = given(2, "dim"), start = given(3, "start"), end = given(4, "end"), step = given(5, "step");
    a.dim = dim ? int_of(ctx, dim, "dim") : 0;
    if (a.dim < -rank || a.dim >= rank) fail("slice_scatter(): dim ", a.dim, " is out of range for ", rank, " dims");
    if (a.dim < 0) a.dim += rank;
    const int64_t n = m.sizes[a.dim];
    if (n < 0 && (!end || !start)) unsupported("slice_scatter() along a dynamic dim without start and end");
    // bounds of a dynamic slice (a cat's) stay symbols; a negative one counts from a static end
    a.start = start ? size_arg(ctx, start, "start") : 0;
    a.end = end ? size_arg(ctx, end, "end") : n;
    if (n >= 0 && !graph::is_symbol(a.start) && a.start < 0) a.start += n;
    if (n >= 0 && !graph::is_symbol(a.end) && a.end < 0) a.end += n;
    if (n >= 0 && !graph::is_symbol(a.end)) a.end = std::min(a.end, n);
    a.step = step ? int_of(ctx, step, "step") : 1;
    return node(ctx, OpKind::SliceScatter, {base->node, src->node}, a);
  }
  if (name == "mse_loss") {
    Args args{std::move(pos), kwargs, name};
    VarRef a = args.get(0, "input"), b = args.get(1, "target"), r = args.get(2, "reduction", false);
    if (!is_tensor(a) || !is_tensor(b))
      unsupported("mse_loss() of " + a->describe() + " and " + b->describe());
    Attrs at;
    at.mode = r && r->obj && PyUnicode_Check(r->obj) ? PyUnicode_AsUTF8(r->obj) : "mean";
    return node(ctx, OpKind::MseLoss, {a->node, b->node}, at);
  }
  // mini.<method>(tensor, ...): the method form on the first argument
  if (pos.empty()) unsupported("mini." + name + "() without arguments");
  VarRef self = pos[0];
  pos.erase(pos.begin());
  if (!self->is(Var::Kind::Tensor)) {
    if (pos.size() == 1 && pos[0]->is(Var::Kind::Tensor))  // mini.add(2, x)
      for (auto& b : kBinary)
        if (name == b.name) return tensor_binary(ctx, b.op, self, pos[0]);
    unsupported("mini." + name + "() on " + self->describe());
  }
  return call_tensor_method(ctx, name, self, std::move(pos), kwargs);
}

}  // namespace mini::capture
