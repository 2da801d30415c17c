// tensor_methods.cpp — the op table's tensor side (tensor_calls.h): attributes read while
// tracing (x.shape, x.dtype, x.T, ...), indexing (x[i, 1:, None]), and methods (x.view(...),
// x.sum(dim), x.add_(y), ...), each parsed as the eager method does; a method mini writes in
// Python is inlined.
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

}  // namespace mini::capture
