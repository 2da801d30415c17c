// tensor_functions.cpp — the op table's mini.* functions (tensor_calls.h): factories
// (mini.zeros, mini.arange, mini.randn, ...: a node with no tensor input, on the graph's
// device) and the functions capture records by identity (mini.where, F.layer_norm, F.embedding,
// attention, grad-mode functions, ...), each parsing its arguments as the eager function does.
#include <algorithm>

#include "capture/compile_log.h"
#include "capture/config.h"
#include "capture/tensor_calls.h"
#include "tensor/autograd.h"

namespace mini::capture {

namespace {

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
  if ((v->is(Var::Kind::SymInt) || is_dynamic_number(v)) && graph_size(ctx, v, &code)) return code;
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
  for (auto& v : one_sequence ? pos[0]->sequence()->items : pos) shape.push_back(factory_size(ctx, v, fn));
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
    ctx.graph().nodes[v->tensor().node].meta.requires_grad = true;
  }
  return v;
}

// A mini function's handler: its node(s), parsing `args` (args.fn: the function's name) as the
// eager function does.
using FunctionHandler = VarRef (*)(TraceContext& ctx, const Args& args);

// mini.zeros, ones, empty, rand, randn: (*size, dtype=, requires_grad=, device=).
VarRef factory_sized(TraceContext& ctx, const Args& args) {
  const std::string& name = args.fn;
  check_kwargs(args, {"dtype", "requires_grad", "device"});
  Attrs a;
  a.device = factory_device(ctx, args.keyword("device"), name);
  a.shape = factory_shape(ctx, args.pos, name);
  a.dtype = dtype_or(args.keyword("dtype"), DType::Float32);
  a.value = name == "ones" ? 1 : 0;
  OpKind op = name == "empty" ? OpKind::Empty : name == "rand" ? OpKind::Rand
            : name == "randn" ? OpKind::Randn : OpKind::Full;
  return factory(ctx, op, a, args.keyword("requires_grad"));
}

// mini.full(size, fill_value, dtype, requires_grad, device) and mini.full_like(t, fill_value,
// dtype, requires_grad): the fill value a number known while tracing, the dtype by default
// t's or the fill value's.
VarRef factory_full(TraceContext& ctx, const Args& args) {
  const std::string& name = args.fn;
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
  Attrs a;
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

// mini.zeros_like, ones_like, empty_like: (t, dtype, requires_grad), on t's device.
VarRef factory_like(TraceContext& ctx, const Args& args) {
  const std::string& name = args.fn;
  check_kwargs(args, {"t", "dtype", "requires_grad"});
  args.at_most(3);
  VarRef t = args.get(0, "t");
  Attrs a;
  a.shape = like_shape(ctx, t, name);
  a.dtype = dtype_or(args.get(1, "dtype", false), meta_of(ctx, t).dtype);
  a.value = name == "ones_like" ? 1 : 0;
  a.device = ctx.graph().device;  // t's: every tensor of the graph is on it
  OpKind op = name == "empty_like" ? OpKind::Empty : OpKind::Full;
  return factory(ctx, op, a, args.get(2, "requires_grad", false));
}

// mini.randn_like, rand_like: (t, dtype, device, requires_grad), on t's device.
VarRef factory_random_like(TraceContext& ctx, const Args& args) {
  const std::string& name = args.fn;
  check_kwargs(args, {"t", "dtype", "device", "requires_grad"});
  args.at_most(4);
  VarRef device = args.get(2, "device", false);
  if (device && device->obj != Py_None)
    unsupported(name + "() with device= inside a compiled function (a graph runs on one device)");
  VarRef t = args.get(0, "t");
  Attrs a;
  a.shape = like_shape(ctx, t, name);
  a.dtype = dtype_or(args.get(1, "dtype", false), meta_of(ctx, t).dtype);
  a.device = ctx.graph().device;
  return factory(ctx, name == "rand_like" ? OpKind::Rand : OpKind::Randn, a,
                 args.get(3, "requires_grad", false));
}

// A bound of mini.randint: an int known while tracing.
int64_t randint_bound(TraceContext& ctx, const VarRef& v_in) {
  VarRef v = specialize(ctx, v_in);
  if (!v->is(Var::Kind::Constant) || !PyLong_Check(v->obj) || PyBool_Check(v->obj))
    unsupported("mini.randint() with a bound " + v_in->describe() + " (an int known while tracing)");
  return python_int64(v->obj);
}

// mini.randint([low,] high, size, *, generator, dtype, device, requires_grad), as
// mini/_random.py composes it: float64 uniforms scaled by the span, truncated, shifted by low.
// What eager refuses (bounds, generator=, requires_grad=) is left to eager: a graph break.
VarRef factory_randint(TraceContext& ctx, const Args& args) {
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
  const int64_t low = bounds.size() == 2 ? randint_bound(ctx, bounds[0]) : 0;
  const int64_t high = randint_bound(ctx, bounds.back());
  const DType out = dtype_or(args.keyword("dtype"), DType::Int64);
  if (low >= high || high - low > (int64_t(1) << 52) || out == DType::Bool)
    unsupported("mini.randint() over [" + std::to_string(low) + ", " + std::to_string(high) + ") as " +
                dtype_name(out) + " (eager says why)");
  Attrs a;
  a.device = factory_device(ctx, args.keyword("device"), args.fn);
  a.shape = factory_shape(ctx, {size}, args.fn);
  a.dtype = DType::Float64;
  graph::Graph& g = ctx.graph();
  VarRef u = factory(ctx, OpKind::Rand, a, nullptr);
  VarRef scaled = node(ctx, OpKind::Mul, {u->tensor().node, g.add_constant(double(high - low), DType::Float64)});
  VarRef ints = node(ctx, OpKind::Add, {cast_to(ctx, scaled, DType::Int64)->tensor().node,
                                        g.add_constant(double(low), DType::Int64)});
  return cast_to(ctx, ints, out);
}

// Whether `v` is an int (or a dynamic size) arange takes.
bool arange_int(const VarRef& v) {
  bool number = v->is(Var::Kind::Constant) && PyLong_Check(v->obj) && !PyBool_Check(v->obj);
  return number || v->is(Var::Kind::SymInt);
}

// mini.arange(start, end=None, step=1, dtype=None, requires_grad=False, device=None), of ints.
VarRef factory_arange(TraceContext& ctx, const Args& args) {
  check_kwargs(args, {"start", "end", "step", "dtype", "requires_grad", "device"});
  args.at_most(6);
  Attrs a;
  a.device = factory_device(ctx, args.get(5, "device", false), args.fn);
  VarRef start = args.get(0, "start"), end = args.get(1, "end", false), step = args.get(2, "step", false);
  if (!end || end->obj == Py_None) {
    end = start;
    start = make_constant(PyLong_FromLong(0));
  }
  if (!step) step = make_constant(PyLong_FromLong(1));
  if (!arange_int(start) || !arange_int(end) || !arange_int(step))
    unsupported("mini.arange(" + start->describe() + ", " + end->describe() + ", " + step->describe() +
                "): mini captures arange of ints only");
  a.start = int_of(ctx, start, "start");
  a.step = int_of(ctx, step, "step");
  // arange(x.shape[0]) keeps the size symbolic; any other symbolic bound (x.shape[0] * 2: no one
  // input dim stands for it, symbol 0) is specialized to its value under a guard
  bool symbolic_end = end->is(Var::Kind::SymInt) && end->get<Var::SymInt>().symbol != 0 && a.start == 0 && a.step == 1;
  a.end = symbolic_end ? end->get<Var::SymInt>().symbol : int_of(ctx, end, "end");
  a.dtype = dtype_or(args.get(3, "dtype", false), DType::Int64);
  return factory(ctx, OpKind::Arange, a, args.get(4, "requires_grad", false));
}

// The factories, by name.
const std::pair<const char*, FunctionHandler> kFactories[] = {
    {"zeros", factory_sized},       {"ones", factory_sized},      {"empty", factory_sized},
    {"rand", factory_sized},        {"randn", factory_sized},
    {"full", factory_full},         {"full_like", factory_full},
    {"zeros_like", factory_like},   {"ones_like", factory_like},  {"empty_like", factory_like},
    {"randn_like", factory_random_like}, {"rand_like", factory_random_like},
    {"randint", factory_randint},   {"arange", factory_arange},
};

// ---- graph functions: mini.where, F.layer_norm, attention, ... ---------------------------------

// mini.where(condition, input, other): the condition a tensor, the others tensors or numbers.
VarRef function_where(TraceContext& ctx, const Args& args) {
  VarRef c = args.get(0, "condition"), a = args.get(1, "input"), b = args.get(2, "other");
  if (!c->is(Var::Kind::Tensor)) unsupported("where() with a condition that is not a tensor");
  return node(ctx, OpKind::Where, {c->tensor().node, operand(ctx, a), operand(ctx, b)});
}

// Eager's check of layer_norm, on the operands as eager sees them: this call's sizes (a
// symbol's value seen), cast where autocast casts them (node() adds those casts to the graph).
// Appends the weight's and bias's nodes (-1: none) to `in`.
void check_layer_norm_operands(TraceContext& ctx, const VarRef& x, const VarRef& w, const VarRef& b,
                               const std::vector<int64_t>& shape, std::vector<int>& in) {
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
    in.push_back(given ? t->tensor().node : -1);
    metas.push_back(given ? meta(t) : nullptr);
  }
  check_layer_norm(meta(x), shape, metas[0], metas[1]);
}

// F.layer_norm(input, normalized_shape, weight, bias, eps): one LayerNorm node.
VarRef function_layer_norm(TraceContext& ctx, const Args& args) {
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
  std::vector<int> in{x->tensor().node};
  check_layer_norm_operands(ctx, x, w, b, shape, in);
  // equal on this call's sizes: a dynamic dim among x's normalized ones is a fact the graph
  // relies on, guarded (the weight's and bias's: infer_meta's)
  const Shape& xs = meta_of(ctx, x).sizes;
  for (size_t i = 0; i < shape.size(); i++)
    if (int64_t have = xs[xs.size() - shape.size() + i]; have != graph::kUnbacked) ctx.graph().assume(have, '=', shape[i]);
  return node(ctx, OpKind::LayerNorm, in, a);
}

// F.scaled_dot_product_attention while compiling (mini._functional.attention_node): one
// Attention node, an extern call to the fused kernel (FlashAttention on CUDA), where
// mini.config.fused_attention takes these operands as eager would see them (autocast's casts
// applied); else None, and the function goes on to its matmuls and softmax.
VarRef function_attention_node(TraceContext& ctx, const Args& args) {
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
  return node(ctx, OpKind::Attention, {q->tensor().node, k->tensor().node, v->tensor().node}, a);
}

// mini.nn.functional.embedding(input, weight): weight's rows by index.
VarRef function_embedding(TraceContext& ctx, const Args& args) {
  VarRef idx = args.get(0, "input"), w = args.get(1, "weight");
  if (!is_tensor(idx) || !is_tensor(w)) unsupported("embedding() of " + idx->describe() + " and " + w->describe());
  return node(ctx, OpKind::Embedding, {w->tensor().node, idx->tensor().node});
}

// mini.slice_scatter(input, src, dim, start, end, step): input, with src in a slice. Bounds
// of a dynamic slice (a cat's) stay symbols; a negative one counts from a static end.
VarRef function_slice_scatter(TraceContext& ctx, const Args& args) {
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
  a.start = start ? size_arg(ctx, start, "start") : 0;
  a.end = end ? size_arg(ctx, end, "end") : n;
  if (n >= 0 && !graph::is_symbol(a.start) && a.start < 0) a.start += n;
  if (n >= 0 && !graph::is_symbol(a.end) && a.end < 0) a.end += n;
  if (n >= 0 && !graph::is_symbol(a.end)) a.end = std::min(a.end, n);
  a.step = step ? int_of(ctx, step, "step") : 1;
  return node(ctx, OpKind::SliceScatter, {base->tensor().node, src->tensor().node}, a);
}

// F.mse_loss(input, target, reduction): one MseLoss node ("mean" by default).
VarRef function_mse_loss(TraceContext& ctx, const Args& args) {
  VarRef a = args.get(0, "input"), b = args.get(1, "target"), r = args.get(2, "reduction", false);
  if (!is_tensor(a) || !is_tensor(b))
    unsupported("mse_loss() of " + a->describe() + " and " + b->describe());
  Attrs at;
  at.mode = r && r->obj && PyUnicode_Check(r->obj) ? PyUnicode_AsUTF8(r->obj) : "mean";
  return node(ctx, OpKind::MseLoss, {a->tensor().node, b->tensor().node}, at);
}

// The functions capture records by identity, by name (the grad-mode ones aside).
const std::pair<const char*, FunctionHandler> kGraphFunctions[] = {
    {"where", function_where},           {"layer_norm", function_layer_norm},
    {"attention_node", function_attention_node}, {"embedding", function_embedding},
    {"slice_scatter", function_slice_scatter},   {"mse_loss", function_mse_loss},
};

// The handler `table` gives `name`, or null.
template <size_t N>
FunctionHandler handler_of(const std::pair<const char*, FunctionHandler> (&table)[N], const std::string& name) {
  for (const auto& [entry, handler] : table)
    if (name == entry) return handler;
  return nullptr;
}

// mini.<method>(tensor, ...): the method form on the first argument; mini.add(2, x) as 2 + x.
VarRef method_form(TraceContext& ctx, const std::string& name, std::vector<VarRef> pos, const Kwargs& kwargs) {
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

}  // namespace

// mini.zeros(...) & co. as graph nodes, parsing arguments as mini/_factories.py does; nullptr
// if `name` is no factory.
VarRef call_factory(TraceContext& ctx, const std::string& name, std::vector<VarRef> pos,
                    const Kwargs& kwargs) {
  FunctionHandler handler = handler_of(kFactories, name);
  return handler ? handler(ctx, Args{std::move(pos), kwargs, name}) : nullptr;
}

VarRef call_graph_function(TraceContext& ctx, const std::string& name, std::vector<VarRef> pos,
                           const Kwargs& kwargs) {
  if (VarRef r = call_grad_mode_function(ctx, name, pos, kwargs)) return r;
  if (VarRef r = call_factory(ctx, name, pos, kwargs)) return r;
  if (name == "is_compiling" && pos.empty() && kwargs.empty())  // mini.compiler.is_compiling()
    return make_constant((Py_INCREF(Py_True), Py_True));
  if (FunctionHandler handler = handler_of(kGraphFunctions, name))
    return handler(ctx, Args{std::move(pos), kwargs, name});
  return method_form(ctx, name, std::move(pos), kwargs);
}

}  // namespace mini::capture
