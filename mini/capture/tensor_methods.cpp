// tensor_methods.cpp — the op table's tensor side (tensor_calls.h): attributes read while
// tracing (x.shape, x.dtype, x.T, ...) and methods (x.view(...), x.sum(dim), x.add_(y), ...,
// one handler per method in the table kMethods), each parsed as the eager method does; a
// method mini writes in Python is inlined. Indexing is tensor_indexing.cpp's.
#include <algorithm>

#include "capture/compile_log.h"
#include "capture/config.h"
#include "capture/tensor_calls.h"
#include "tensor/autograd.h"

namespace mini::capture {

VarRef tensor_attr(TraceContext& ctx, const VarRef& self, const std::string& name) {
  const graph::TensorMeta& m = meta_of(ctx, self);
  if (name == "shape") {
    std::vector<VarRef> dims;
    for (size_t d = 0; d < m.sizes.size(); d++) dims.push_back(size_var(ctx, self, (int64_t)d));
    Var::Tuple size{{std::move(dims)}};
    size.size = true;
    return std::make_shared<Var>(std::move(size));
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
    PyObject* module = PyImport_ImportModule("mini._types");
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
    return node(ctx, OpKind::Permute, {self->tensor().node}, a);
  }
  if (name == "mT") {
    Attrs a;
    a.dim = -2;
    a.dim2 = -1;
    return node(ctx, OpKind::Transpose, {self->tensor().node}, a);
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

namespace {

// One call of a tensor method: its name, the tensor, its arguments matched to parameter
// names, and the tensor's meta as the call found it (a copy: a handler that adds a node may
// move the graph's node list, where the meta lives).
struct MethodCall {
  TraceContext& ctx;
  const std::string& name;
  const VarRef& self;
  Args args;
  const graph::TensorMeta m;
};
// A method's handler: the method's result, as the eager method computes it.
using MethodHandler = VarRef (*)(MethodCall& c);

// A node of `op` on the tensor alone, with attributes `a`.
VarRef self_node(MethodCall& c, OpKind op, const Attrs& a = {}) {
  return node(c.ctx, op, {c.self->tensor().node}, a);
}

// The op a table of named ops gives `name`, or null.
template <size_t N>
const NamedOp* find_named(const NamedOp (&table)[N], const std::string& name) {
  for (const NamedOp& entry : table)
    if (name == entry.name) return &entry;
  return nullptr;
}

const NamedOp kReductions[] = {
    {"sum", OpKind::Sum}, {"mean", OpKind::Mean}, {"amax", OpKind::Amax}, {"amin", OpKind::Amin},
};

// x.float(), x.long(), ...: a cast to the dtype the method names.
const std::pair<const char*, DType> kCasts[] = {
    {"float", DType::Float32}, {"double", DType::Float64}, {"long", DType::Int64},
    {"bool", DType::Bool},     {"bfloat16", DType::BFloat16},
};

// x.mm(y), x.bmm(y): matmuls of two 2-D or 3-D tensors, with eager's checks.
VarRef method_mm(MethodCall& c) {
  VarRef other = c.args.get(0, "mat2");
  if (is_tensor(other)) {
    Tensor a = graph::meta_tensor(c.m), b = graph::meta_tensor(meta_of(c.ctx, other));
    c.name == "mm" ? check_mm(a, b) : check_bmm(a, b);
  }
  return tensor_binary(c.ctx, OpKind::Matmul, c.self, other);
}

// x.max() / x.min(): the whole tensor's; x.max(y) elementwise; x.max(dim) is refused.
VarRef method_extreme(MethodCall& c) {
  bool max = c.name == "max";
  VarRef dim = c.args.get(0, "dim", false);
  if (is_tensor(dim)) return tensor_binary(c.ctx, max ? OpKind::Maximum : OpKind::Minimum, c.self, dim);
  if (dim) unsupported(c.name + "(dim) returns (values, indices); mini's capture supports " + c.name + "() and a" + c.name + "(dim)");
  return self_node(c, max ? OpKind::Amax : OpKind::Amin);
}

// x.softmax(dim) / x.log_softmax(dim).
VarRef method_softmax(MethodCall& c) {
  Attrs a;
  a.dim = int_of(c.ctx, c.args.get(0, "dim"), "dim");
  return self_node(c, c.name == "softmax" ? OpKind::Softmax : OpKind::LogSoftmax, a);
}

// x.gelu(approximate): the mode as given, "none" by default.
VarRef method_gelu(MethodCall& c) {
  Attrs a;
  VarRef ap = c.args.get(0, "approximate", false);
  a.mode = ap && ap->obj && PyUnicode_Check(ap->obj) ? PyUnicode_AsUTF8(ap->obj) : "none";
  return self_node(c, OpKind::Gelu, a);
}

// x.reshape(shape) / x.view(shape): a view is a reshape that never copies, so eager's check
// runs where it would (known sizes only).
VarRef method_reshape(MethodCall& c) {
  std::vector<int64_t> shape = ints_of(c.ctx, c.args.pos, 0, "shape");
  bool known = std::all_of(c.m.sizes.begin(), c.m.sizes.end(), [](int64_t s) { return s >= 0; }) &&
               std::all_of(shape.begin(), shape.end(), [](int64_t s) { return s >= -1; });
  if (c.name == "view" && known) check_view(graph::meta_tensor(c.m), shape);
  return reshape(c.ctx, c.self, shape);
}

// x.split(size | sizes, dim) and x.chunk(n, dim): slices of x along dim (views), the pieces
// mini/_tensor.py's eager split and chunk make; the dim's length must be static (the number
// of pieces is the structure of the program).
VarRef split_views(MethodCall& c) {
  TraceContext& ctx = c.ctx;
  const std::string& name = c.name;
  const int64_t r = (int64_t)c.m.sizes.size();
  VarRef dim_var = c.args.get(1, "dim", false);
  const int64_t dim = dim_var ? int_of(ctx, dim_var, "dim") : 0;
  if (dim < -r || dim >= r)
    fail("Dimension out of range (expected to be in range of [", -r, ", ", r - 1, "], but got ", dim, ")");
  const int64_t d = (dim + r) % r, n = c.m.sizes[d];
  if (n < 0) unsupported(name + "() along a dynamic dim: the number of pieces would depend on its size");
  VarRef how = c.args.get(0, name == "split" ? "split_size_or_sections" : "chunks");
  std::vector<int64_t> sizes;
  if (how->is(Var::Kind::List) || how->is(Var::Kind::Tuple)) {
    int64_t total = 0;
    for (const VarRef& k : how->sequence()->items) total += sizes.emplace_back(int_of(ctx, k, "split size"));
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
    pieces.push_back(tensor_getitem(ctx, c.self, make_constant(index)));
    start += k;
  }
  return make_tuple_var(pieces);
}

// x.tril(diagonal) / x.triu(diagonal): x with the elements above (below) the diagonal of its
// last two dims set to 0, through the ops mini/_tensor.py's eager tril and triu use: two
// aranges on x's device, a comparison, masked_fill.
VarRef triangle(MethodCall& c) {
  TraceContext& ctx = c.ctx;
  const int64_t r = (int64_t)c.m.sizes.size();
  if (r < 2) fail(c.name, ": input tensor must have at least 2 dimensions, got ", r);
  VarRef diagonal = c.args.get(0, "diagonal", false);
  const int64_t k = diagonal ? int_of(ctx, diagonal, "diagonal") : 0;
  Kwargs on_device{{"device", make_constant(PyUnicode_FromString(ctx.graph().device.str().c_str()))}};
  auto index = [&](int64_t dim, int64_t unsqueeze_at) {
    VarRef a = call_graph_function(ctx, "arange", {size_var(ctx, c.self, dim)}, on_device);
    return call_tensor_method(ctx, "unsqueeze", a, {make_constant(PyLong_FromLongLong(unsqueeze_at))}, {});
  };
  VarRef i = index(r - 2, 1), j = index(r - 1, 0);
  VarRef shifted = tensor_binary(ctx, OpKind::Add, i, make_constant(PyLong_FromLongLong(k)));
  VarRef drop = tensor_binary(ctx, c.name == "tril" ? OpKind::Gt : OpKind::Lt, j, shifted);
  return masked_fill(ctx, c.self, drop, make_constant(PyLong_FromLong(0)));
}

// x.flatten(start_dim, end_dim): a reshape merging those dims (a 0-d tensor becomes 1-d).
VarRef method_flatten(MethodCall& c) {
  int64_t r = (int64_t)c.m.sizes.size();
  if (r == 0) return reshape(c.ctx, c.self, {1});
  VarRef sv = c.args.get(0, "start_dim", false) ? c.args.get(0, "start_dim") : make_constant(PyLong_FromLong(0));
  int64_t s = int_of(c.ctx, sv, "start_dim");
  VarRef ev = c.args.get(1, "end_dim", false);
  int64_t e = ev ? int_of(c.ctx, ev, "end_dim") : -1;
  s = wrap_dim(s, r);
  e = wrap_dim(e, r);
  std::vector<int64_t> shape(c.m.sizes.begin(), c.m.sizes.begin() + s);
  shape.push_back(-1);
  shape.insert(shape.end(), c.m.sizes.begin() + e + 1, c.m.sizes.end());
  return reshape(c.ctx, c.self, shape);
}

// x.expand(*size).
VarRef method_expand(MethodCall& c) {
  Attrs a;
  a.shape = ints_of(c.ctx, c.args.pos, 0, "size");
  return self_node(c, OpKind::Expand, a);
}

// x.permute(*dims).
VarRef method_permute(MethodCall& c) {
  Attrs a;
  a.dims = ints_of(c.ctx, c.args.pos, 0, "dims");
  return self_node(c, OpKind::Permute, a);
}

// A Transpose node swapping dims `d0` and `d1`.
VarRef transpose_node(MethodCall& c, int64_t d0, int64_t d1) {
  Attrs a;
  a.dim = d0;
  a.dim2 = d1;
  return self_node(c, OpKind::Transpose, a);
}

// x.transpose(dim0, dim1).
VarRef method_transpose(MethodCall& c) {
  int64_t d0 = int_of(c.ctx, c.args.get(0, "dim0"), "dim0");
  return transpose_node(c, d0, int_of(c.ctx, c.args.get(1, "dim1"), "dim1"));
}

// x.t(): a 0-d or 1-d tensor as it is, a 2-d one transposed; more dims are eager's error.
VarRef method_t(MethodCall& c) {
  if (c.m.sizes.size() < 2) return c.self;
  if (c.m.sizes.size() > 2) fail("t() expects a tensor with <= 2 dimensions, but self is ", c.m.sizes.size(), "D");
  return transpose_node(c, 0, 1);
}

// x.unsqueeze(dim).
VarRef method_unsqueeze(MethodCall& c) {
  Attrs a;
  a.dim = int_of(c.ctx, c.args.get(0, "dim"), "dim");
  return self_node(c, OpKind::Unsqueeze, a);
}

// x.squeeze(dim | dims | nothing).
VarRef method_squeeze(MethodCall& c) {
  Attrs a;
  a.dims = dims_of(c.ctx, c.args.get(0, "dim", false));
  return self_node(c, OpKind::Squeeze, a);
}

// x.contiguous(): x itself when its strides are contiguous, else a copy.
VarRef method_contiguous(MethodCall& c) {
  bool contiguous = c.m.strides == contiguous_strides(c.m.sizes);
  return contiguous ? c.self : self_node(c, OpKind::Clone);
}

// x.float(), x.long(), ...: the cast kCasts names.
VarRef method_cast(MethodCall& c) {
  for (const auto& [name, dtype] : kCasts)
    if (c.name == name) return cast_to(c.ctx, c.self, dtype);
  return nullptr;
}

// x.to(dtype), .to(tensor), .to(device), .to(device, dtype), .to(device=, dtype=), and
// x.type_as(tensor): a cast; a device other than the graph's ends the graph.
VarRef method_to(MethodCall& c) {
  const Args& args = c.args;
  VarRef d = args.keyword("device") ? args.keyword("device") : args.get(0, "dtype", false);
  VarRef dtype = args.keyword("device") ? args.get(0, "dtype", false) : args.get(1, "dtype", false);
  if (c.name == "to" && args.keyword("dtype")) dtype = args.keyword("dtype");
  if (d && is_tensor(d)) return cast_to(c.ctx, c.self, meta_of(c.ctx, d).dtype);
  Device target;
  const Device& here = c.ctx.graph().device;
  if (d && d->obj && d->obj != Py_None && device_from(d->obj, &target)) {
    if (target != here)  // a copy to another device: eager runs it, and what follows
      unsupported("Tensor.to(" + target.str() + ") inside a compiled function whose tensors are on " +
                  here.str() + ": mini compiles a graph for one device");
    return dtype && dtype->obj != Py_None ? cast_to(c.ctx, c.self, dtype_from(dtype)) : c.self;
  }
  if (!d || d->obj == Py_None)
    return dtype && dtype->obj != Py_None ? cast_to(c.ctx, c.self, dtype_from(dtype)) : c.self;
  return cast_to(c.ctx, c.self, dtype_from(d));
}

// x.cpu() / x.cuda(device): x itself on the graph's device; another device ends the graph.
VarRef method_device(MethodCall& c) {
  Device target = Device::cpu();
  if (c.name == "cuda") {
    VarRef d = c.args.get(0, "device", false);
    target = Device::cuda(0);
    if (d && d->obj != Py_None && !device_from(d->obj, &target))
      unsupported("Tensor.cuda(" + d->describe() + ")");
  }
  if (target != c.ctx.graph().device)
    unsupported("Tensor." + c.name + "() inside a compiled function whose tensors are on " +
                c.ctx.graph().device.str() + ": mini compiles a graph for one device");
  return c.self;
}

// x.detach().
VarRef method_detach(MethodCall& c) { return self_node(c, OpKind::Detach); }

// x.size(): the shape; x.size(dim): that dim's size (a dynamic size stays symbolic).
VarRef method_size(MethodCall& c) {
  VarRef d = c.args.get(0, "dim", false);
  if (!d) return tensor_attr(c.ctx, c.self, "shape");
  return size_var(c.ctx, c.self, wrap_dim(int_of(c.ctx, d, "dim"), (int64_t)c.m.sizes.size()));
}

// x.dim(): the rank, a constant.
VarRef method_dim(MethodCall& c) { return make_constant(PyLong_FromSize_t(c.m.sizes.size())); }

// x.numel(): the number of elements (symbolic where a size is).
VarRef method_numel(MethodCall& c) { return numel_var(c.ctx, c.self); }

// x.is_floating_point(): from the dtype, a constant.
VarRef method_is_floating_point(MethodCall& c) {
  return make_constant(PyBool_FromLong(is_floating(c.m.dtype)));
}

// x.is_contiguous(): of the layout eager sees. A written input keeps its own layout while its
// new value is contiguous: views of a written input that is not contiguous would show strides
// eager does not have.
VarRef method_is_contiguous(MethodCall& c) {
  const graph::Graph& g = c.ctx.graph();
  const Alias& a = alias_of(c.ctx, c.self->tensor().node);
  const graph::TensorMeta* own = &c.m;
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

// x.clamp(min, max).
VarRef method_clamp(MethodCall& c) {
  return clamp(c.ctx, c.self, c.args.get(0, "min", false), c.args.get(1, "max", false), "torch.clamp");
}

// x.masked_fill(mask, value).
VarRef method_masked_fill(MethodCall& c) {
  return masked_fill(c.ctx, c.self, c.args.get(0, "mask"), c.args.get(1, "value"));
}

// x.nonzero(): a node whose size is known only at run time.
VarRef method_nonzero(MethodCall& c) { return self_node(c, OpKind::Nonzero); }

// x.item(), x.tolist(), x.numpy(): a number the graph holds (item() under
// capture_scalar_outputs), else refused: the value is only known at run time.
VarRef method_item(MethodCall& c) {
  const graph::TensorMeta& m = c.m;  // MethodCall's own copy: stays valid as nodes are added
  if (c.name != "item" || !c.ctx.options.capture_scalar_outputs)
    unsupported("Unsupported Tensor." + c.name + "() call with capture_scalar_outputs=False: the value "
                "is only known at run time; keep it a tensor (e.g. mini.where) instead of a Python number");
  // the number stays in the graph: a 0-d value that promotes like a Python number
  if (numel_of(m.sizes) != 1 && std::all_of(m.sizes.begin(), m.sizes.end(), [](int64_t s) { return s >= 0; }))
    fail("a Tensor with ", numel_of(m.sizes), " elements cannot be converted to Scalar");
  Attrs a;
  a.shape = {};
  VarRef v = m.sizes.empty() ? c.self : self_node(c, OpKind::Reshape, a);
  // of the Python number's type (a float is a double), in a value of its own: it promotes
  // like a number where it meets tensors, and computes like one where it meets numbers
  a.dtype = is_floating(m.dtype) ? DType::Float64 : m.dtype;
  v = a.dtype != m.dtype ? node(c.ctx, OpKind::Cast, {v->tensor().node}, a) : node(c.ctx, OpKind::Clone, {v->tensor().node});
  c.ctx.graph().nodes[v->tensor().node].wrapped_number = true;
  v->tensor().number = true;
  return v;
}

// The methods capture records, by name (the named-op tables kBinary, kUnary, kReductions and
// the in-place methods aside).
const std::pair<const char*, MethodHandler> kMethods[] = {
    {"mm", method_mm},           {"bmm", method_mm},
    {"max", method_extreme},     {"min", method_extreme},
    {"softmax", method_softmax}, {"log_softmax", method_softmax},
    {"gelu", method_gelu},       {"reshape", method_reshape},     {"view", method_reshape},
    {"split", split_views},      {"chunk", split_views},
    {"tril", triangle},          {"triu", triangle},
    {"flatten", method_flatten}, {"expand", method_expand},       {"permute", method_permute},
    {"transpose", method_transpose}, {"t", method_t},
    {"unsqueeze", method_unsqueeze}, {"squeeze", method_squeeze},
    {"contiguous", method_contiguous},
    {"float", method_cast},      {"double", method_cast},         {"long", method_cast},
    {"bool", method_cast},       {"bfloat16", method_cast},
    {"to", method_to},           {"type_as", method_to},
    {"cpu", method_device},      {"cuda", method_device},
    {"detach", method_detach},   {"size", method_size},           {"dim", method_dim},
    {"numel", method_numel},     {"is_floating_point", method_is_floating_point},
    {"is_contiguous", method_is_contiguous},
    {"clamp", method_clamp},     {"masked_fill", method_masked_fill},
    {"nonzero", method_nonzero},
    {"item", method_item},       {"tolist", method_item},         {"numpy", method_item},
};

// A method no table names: a Tensor method mini writes in Python (mini/_tensor.py: argmax,
// ...) over ops capture records, inlined with self bound as a user's function would be; else
// refused, an in-place method with a hint to use the out-of-place form.
VarRef python_method_or_refuse(MethodCall& c) {
  const std::string& name = c.name;
  if (PyObject* fn = PyObject_GetAttrString(python_bridge().tensor_type, name.c_str())) {
    bool python = PyFunction_Check(fn);
    Py_DECREF(fn);  // the class keeps it alive
    if (python) {
      std::vector<VarRef> pos = c.args.pos;
      pos.insert(pos.begin(), c.self);
      return inline_function(c.ctx, fn, nullptr, std::move(pos), c.args.kw);
    }
  } else {
    PyErr_Clear();
  }
  if (name.back() == '_' || name == "copy_" || name == "zero_")
    unsupported("in-place Tensor." + name + "() inside a compiled function is not supported by mini's "
                "capture; use the out-of-place form");
  unsupported("Tensor." + name + "() is not supported by mini's capture");
}

}  // namespace

VarRef call_tensor_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                          std::vector<VarRef> pos, const Kwargs& kwargs) {
  MethodCall c{ctx, name, self, Args{std::move(pos), kwargs, name}, meta_of(ctx, self)};
  if (const NamedOp* b = find_named(kBinary, name))
    return tensor_binary(ctx, b->op, self, c.args.get(0, "other"));
  if (const NamedOp* u = find_named(kUnary, name)) return tensor_unary(ctx, u->op, self);
  if (const NamedOp* r = find_named(kReductions, name)) return reduction(ctx, r->op, self, c.args);
  for (const auto& [method, handler] : kMethods)
    if (name == method) return handler(c);
  if (VarRef r = inplace_method(ctx, name, self, c.args)) return r;
  return python_method_or_refuse(c);
}

VarRef call_tensor_method_as_found(TraceContext& ctx, const std::string& name, const VarRef& self,
                                   std::vector<VarRef> pos, const Kwargs& kwargs) {
  if (VarRef r = call_replaced_tensor_method(ctx, name, self, pos, kwargs)) return r;
  return call_tensor_method(ctx, name, self, std::move(pos), kwargs);
}

VarRef call_replaced_tensor_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                                   std::vector<VarRef> pos, const Kwargs& kwargs) {
  PyTypeObject* type = tensor_type_of(ctx, self);
  PyObject* found = is_dynamic_number(self) ? nullptr : PyObject_GetAttrString((PyObject*)type, name.c_str());
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

}  // namespace mini::capture
