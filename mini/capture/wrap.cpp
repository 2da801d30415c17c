// wrap.cpp — turning a real object read from the frame into a Var, with the guards that make
// the graph valid only while that object stays what it was (Dynamo's VariableBuilder).
#include <algorithm>
#include <cstring>

#include "capture/compile_log.h"
#include "capture/config.h"
#include "capture/trace_context.h"
#include "capture/unit.h"

namespace mini::capture {

bool is_module(PyObject* value) {
  PyObject* cls = python_bridge().module_class;
  if (!cls) return false;
  int r = PyObject_IsInstance(value, cls);
  if (r < 0) PyErr_Clear();
  return r == 1;
}

static bool is_immutable_constant(PyObject* v) {
  return v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
         PyUnicode_CheckExact(v) || PyBytes_CheckExact(v) || PySlice_Check(v) || PyRange_Check(v) ||
         v == Py_Ellipsis || PyComplex_CheckExact(v);
}

static bool slice_of_ints(PyObject* v) {
  auto* s = (PySliceObject*)v;
  for (PyObject* part : {s->start, s->stop, s->step})
    if (part != Py_None && !PyLong_CheckExact(part)) return false;
  return true;
}

static VarRef object_var(Var::Data kind, PyObject* v, SourceRef source) {
  auto var = std::make_shared<Var>(std::move(kind));
  var->obj = v;
  Py_INCREF(v);
  var->source = std::move(source);
  return var;
}

// An instance of enum.Enum (torch guards these by ID_MATCH too, as EnumVariable).
static bool is_enum_member(PyObject* v) {
  // kept for the interpreter's life, as the enum module is; set under the GIL, not by a C++
  // static initializer, whose guard a second thread would wait on holding the GIL
  static PyObject* enum_class = nullptr;
  if (!enum_class) enum_class = [] {
    PyObject* module = PyImport_ImportModule("enum");
    PyObject* cls = module ? PyObject_GetAttrString(module, "Enum") : nullptr;
    Py_XDECREF(module);
    if (cls && !PyType_Check(cls)) Py_CLEAR(cls);
    if (!cls) PyErr_Clear();
    return cls;
  }();
  return enum_class && PyType_IsSubtype(Py_TYPE(v), (PyTypeObject*)enum_class);
}

static bool is_graph_function(PyObject* v) {
  PyObject* table = python_bridge().graph_functions;
  if (!table) return false;
  PyObject* name = PyDict_GetItemWithError(table, v);
  if (!name) PyErr_Clear();
  return name != nullptr;
}

// Which dims of an input tensor are symbolic: dynamic=True makes every dim of size >= 2
// symbolic; automatic dynamic those that changed between calls; mini.mark_dynamic those the
// user named. Sizes 0 and 1 always stay specialized (as torch).
static std::vector<bool> dynamic_dims_for(TraceContext& ctx, PyObject* v, TensorImpl* t, const SourceRef& src) {
  std::vector<bool> dyn(t->sizes.size(), false);
  // dynamic=True and automatic dynamic: every input's dims, but not a module's parameters (as
  // torch's force_parameter_static_shapes): two Linear sizes are two static graphs
  bool parameter = src->str().find("._parameters[") != std::string::npos;
  if (ctx.dynamic.all_dims && !parameter) dyn.assign(t->sizes.size(), true);
  if (ctx.dynamic.dims && !parameter) {
    auto it = ctx.dynamic.dims->find(src->str());
    if (it != ctx.dynamic.dims->end())
      for (size_t d = 0; d < dyn.size() && d < it->second.size(); d++) dyn[d] = dyn[d] || it->second[d];
  }
  PyObject* marked = PyObject_GetAttrString(v, "_mini_dynamic_dims");
  if (marked) {
    PyObject* it = PyObject_GetIter(marked);
    while (PyObject* d = it ? PyIter_Next(it) : nullptr) {
      long dim = PyLong_AsLong(d);
      if (dim >= 0 && dim < (long)dyn.size()) dyn[dim] = true;
      Py_DECREF(d);
    }
    Py_XDECREF(it);
    Py_DECREF(marked);
  }
  PyErr_Clear();
  for (size_t d = 0; d < dyn.size(); d++)
    if (t->sizes[d] < 2) dyn[d] = false;
  return dyn;
}

static bool str_keys_only(PyObject* dict) {
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value))
    if (!PyUnicode_CheckExact(key)) return false;
  return true;
}

VarRef dict_value(TraceContext& ctx, const VarRef& dict, size_t i) {
  Var::Dict& d = dict->get<Var::Dict>();
  VarRef& item = d.values[i];
  if (!item) {  // a value of a dict from the frame, read for the first time
    PyObject* key = d.keys[i]->obj;
    PyObject* value = PyDict_GetItemWithError(dict->obj, key);
    if (!value) { PyErr_Clear(); unsupported("a dict changed while tracing"); }
    item = wrap(ctx, value, guards::Source::dict_item(dict->source, PyUnicode_AsUTF8(key)));
  }
  return item;
}

void use_device(TraceContext& ctx, Device device, const std::string& what) {
  if (!ctx.device_fixed) {
    ctx.graph().device = device;
    ctx.device_fixed = true;
  } else if (ctx.graph().device != device) {
    unsupported(what + " is on " + device.str() + ", but this graph's tensors are on " + ctx.graph().device.str() +
                ": mini compiles a graph for one device, so the code from here runs eagerly (keep a "
                "compiled function's tensors on one device)");
  }
}

bool device_from(PyObject* obj, Device* out) {
  if (!obj) return false;
  if (PyLong_CheckExact(obj)) {  // torch: an int is a CUDA ordinal
    *out = Device::cuda((int)PyLong_AsLong(obj));
    return true;
  }
  PyObject* s = PyUnicode_Check(obj) ? (Py_INCREF(obj), obj) : nullptr;
  if (!s && std::string(Py_TYPE(obj)->tp_name) == "device") s = PyObject_Str(obj);  // mini.device
  if (!s) { PyErr_Clear(); return false; }
  std::string text = PyUnicode_AsUTF8(s) ? PyUnicode_AsUTF8(s) : "";
  Py_DECREF(s);
  PyErr_Clear();
  if (text == "cpu") { *out = Device::cpu(); return true; }
  if (text == "cuda") { *out = Device::cuda(0); return true; }
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.find_first_not_of("0123456789", 5) == std::string::npos) {
    *out = Device::cuda(std::stoi(text.substr(5)));
    return true;
  }
  return false;
}

// One tensor at two sources (a tied weight, a module used twice, f(x, x)): the graph has one
// input for both, valid only while both sources hold the same tensor. Null for a tensor this
// trace has not read yet.
static VarRef wrap_seen_tensor(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  auto found = ctx.tensor_node.find(v);
  if (found == ctx.tensor_node.end()) return nullptr;
  const auto& inputs = ctx.graph().inputs;
  size_t position = std::find(inputs.begin(), inputs.end(), found->second) - inputs.begin();
  const SourceRef& first = ctx.trace.input_sources[position];
  if (first->str() != src->str()) ctx.guards().add_duplicate_input(src, first, true);
  ctx.guards().add_tensor_match(src, v, ctx.tensor_dynamic[v]);
  return tensor_var(ctx, alias_of(ctx, found->second).storage->base);  // its value now
}

// A tensor sharing memory with an input this trace already wrote in place: what the graph
// would read is not its value now. The unit ends here (before anything about this input is
// recorded), and CPython reads it after the write-back.
static void refuse_written_storage(TraceContext& ctx, TensorImpl* t, const SourceRef& src) {
  for (const auto& s : ctx.input_storages) {
    TensorImpl* other = guards::unwrap_tensor(ctx.trace.example_inputs.at(s->input));
    if (s->mutated && other && other->storage == t->storage)
      unsupported("reading " + src->str() + ", which shares memory with " +
                  ctx.trace.input_sources[s->input]->str() + ", already written in place");
  }
}

// The meta of a new tensor input: its sizes, with a graph symbol for each dynamic dim.
static graph::TensorMeta input_meta(TraceContext& ctx, TensorImpl* t, const std::vector<bool>& dyn,
                                    const SourceRef& src) {
  graph::TensorMeta meta{t->sizes, t->strides, t->dtype, t->needs_grad()};
  int input_pos = (int)ctx.graph().inputs.size();
  for (size_t d = 0; d < dyn.size(); d++) {
    if (!dyn[d]) continue;
    int k = (int)ctx.graph().symbols.size();
    ctx.graph().symbols.push_back({input_pos, (int)d, t->sizes[d]});
    meta.sizes[d] = graph::symbol_code(k);
    // the strides left of it depend on it; its own stride depends only on the dims right of
    // it, and stays as guarded (the tensor guard checks it)
    for (size_t e = 0; e < d; e++) meta.strides[e] = -1;
    if (log_channels().dynamic)
      log_write("create_symbol s" + std::to_string(k) + " = " + std::to_string(t->sizes[d]) + " for " +
                src->str() + ".size()[" + std::to_string(d) + "]");
  }
  return meta;
}

// Records a graph input read from `src`: its source, example value and whether it is a
// Python number. Returns its node.
static int add_graph_input(TraceContext& ctx, PyObject* v, const SourceRef& src,
                           const graph::TensorMeta& meta, bool scalar) {
  int node = ctx.graph().add_input(meta, src->str());
  ctx.trace.input_sources.push_back(src);
  ctx.trace.example_inputs.push_back(v);
  ctx.trace.scalar_inputs.push_back(scalar);
  return node;
}

// A tensor from the frame: the graph input it already is, or a new one guarded by its
// metadata (symbolic where its dims are dynamic).
static VarRef wrap_tensor(TraceContext& ctx, PyObject* v, TensorImpl* t, const SourceRef& src) {
  use_device(ctx, t->device(), "tensor " + src->str());
  if (VarRef seen = wrap_seen_tensor(ctx, v, src)) return seen;
  refuse_written_storage(ctx, t, src);
  std::vector<bool> dyn = dynamic_dims_for(ctx, v, t, src);
  graph::TensorMeta meta = input_meta(ctx, t, dyn, src);
  ctx.guards().add_tensor_match(src, v, dyn);
  int node = add_graph_input(ctx, v, src, meta, false);
  ctx.tensor_node[v] = node;
  ctx.tensor_dynamic[v] = dyn;
  return tensor_var(ctx, node);
}

// Whether a Python number read from `src` is a graph input: one that changed between calls
// (automatic dynamic). As Dynamo, a number read from a global (a module's setting: SCALE = 2)
// is specialized, one graph per value, however often it changes.
static bool is_dynamic_number(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  bool number = (PyLong_CheckExact(v) || PyFloat_CheckExact(v));
  return number && !reads_a_global(*src) && ctx.dynamic.scalars && ctx.dynamic.scalars->count(src->str());
}

// A Python number that changed between calls: a graph input from now on (a 0-d tensor that
// promotes like the number), guarded by its type only.
static VarRef wrap_dynamic_number(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  ctx.guards().add_type_match(src, v);
  graph::TensorMeta meta{{}, {}, PyFloat_CheckExact(v) ? DType::Float64 : DType::Int64, false};
  int node = add_graph_input(ctx, v, src, meta, true);
  ctx.graph().nodes[node].wrapped_number = true;
  VarRef var = tensor_var(ctx, node);
  var->tensor().number = true;
  return var;
}

// A constant (None, a number, a string, a slice, a range, ...): guarded by value. Ranges and
// slices by value too: a loop unrolled over a range, or a slice applied, is only valid for
// that range or slice.
static VarRef wrap_constant(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  if (PySlice_Check(v) && !slice_of_ints(v))
    unsupported("a slice whose bounds are not ints or None, read from the frame");
  if (v == Py_Ellipsis) ctx.guards().add_type_match(src, v);
  else ctx.guards().add_constant_match(src, v);
  return object_var(Var::Constant{}, v, src);
}

// A tuple or list: guarded by its length, each item wrapped at its own source; a list read
// twice is one Var (the trace may change it).
static VarRef wrap_sequence(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  if (PyList_CheckExact(v))
    if (auto seen = ctx.containers.find(src->str()); seen != ctx.containers.end()) return seen->second;
  ctx.guards().add_length_check(src, v);
  std::vector<VarRef> items;
  for (Py_ssize_t i = 0; i < Py_SIZE(v); i++) {
    PyObject* item = PyTuple_Check(v) ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i);
    items.push_back(wrap(ctx, item, guards::Source::item(src, (int)i)));
  }
  VarRef var = make_tuple_var(items, PyList_Check(v));
  var->source = src;
  if (PyList_CheckExact(v)) ctx.containers[src->str()] = var;
  return var;
}

// Whether `v` is a dict capture holds: a dict of str keys, or an OrderedDict of str keys (a
// module's _modules, which ModuleDict.items() and len(ModuleList) read).
static bool is_str_keyed_dict(PyObject* v) {
  static PyObject* ordered = [] {
    PyObject* collections = PyImport_ImportModule("collections");
    PyObject* cls = collections ? PyObject_GetAttrString(collections, "OrderedDict") : nullptr;
    Py_XDECREF(collections);
    PyErr_Clear();
    return cls;
  }();
  return (PyDict_CheckExact(v) || (ordered && (PyObject*)Py_TYPE(v) == ordered)) && str_keys_only(v);
}

// **kwargs, a dict argument: its keys guarded in order, each value read (and guarded) through
// its own source when the code first uses it, as Dynamo's lazy dict values.
static VarRef wrap_dict(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  if (auto seen = ctx.containers.find(src->str()); seen != ctx.containers.end()) return seen->second;
  ctx.guards().add_type_match(src, v);
  ctx.guards().add_dict_keys_match(src, v);
  std::vector<VarRef> keys;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(v, &pos, &key, &value)) keys.push_back(object_var(Var::Constant{}, key, nullptr));
  VarRef var = make_dict(std::move(keys), std::vector<VarRef>(PyDict_GET_SIZE(v)));
  var->obj = v;
  Py_INCREF(v);
  var->source = src;
  ctx.containers[src->str()] = var;
  return var;
}

// A module, by structure, not identity (torch's UnspecializedNNModuleVariable): its class and
// training flag here; what forward reads (parameters, submodules, attributes) is guarded as
// it is read, so any instance of the same structure reuses the graph.
static VarRef wrap_module(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  ctx.guards().add_type_match(src, v);
  PyObject* training = PyObject_GetAttrString(v, "training");
  if (training && PyBool_Check(training))
    ctx.guards().add_constant_match(guards::Source::attr(src, "training"), training);
  Py_XDECREF(training);
  PyErr_Clear();
  return object_var(Var::Module{}, v, src);
}

// A for loop's tuple iterator handed to a resume unit: guarded on what it has left, read
// without consuming it.
static VarRef wrap_tuple_iterator(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  ctx.guards().add_type_match(src, v);
  SourceRef items_src = guards::Source::iter_items(src);
  PyObject* rest = guards::fetch(*items_src, ctx.root);
  if (!rest) unsupported("cannot read the items left in an iterator");
  VarRef items = wrap(ctx, rest, items_src);
  Py_DECREF(rest);
  return std::make_shared<Var>(Var::Iterator{items->get<Var::Tuple>().items});
}

// A Python function: a graph function (mini.where) by identity; any other, as Dynamo, by its
// code, not its identity: a new closure or lambda of the same code each call reuses the
// graph. What inlining reads of it — its closure cells' contents, defaults, globals — is
// guarded where it is read.
static VarRef wrap_function(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  bool graph_function = is_graph_function(v);
  VarRef var = object_var(Var::Function{graph_function}, v, src);
  if (graph_function) {
    ctx.guards().add_id_match(src, v);
  } else {
    ctx.guards().add_type_match(src, v);
    ctx.guards().add_id_match(guards::Source::attr(src, "__code__"), PyFunction_GET_CODE(v));
  }
  return var;
}

// The __exit__ of a with mini.no_grad() block open at the break before this unit, as a method
// of the block; null for anything else (a grad-mode object's other methods are guarded by
// type here, and wrapped as objects).
static VarRef wrap_grad_mode_exit(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  PyObject* grad_mode = python_bridge().grad_mode_type;
  if (!PyMethod_Check(v) || !grad_mode || !PyObject_TypeCheck(PyMethod_GET_SELF(v), (PyTypeObject*)grad_mode))
    return nullptr;
  ctx.guards().add_type_match(src, v);
  PyObject* name = PyObject_GetAttrString(PyMethod_GET_FUNCTION(v), "__name__");
  bool exit = name && PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__exit__") == 0;
  Py_XDECREF(name);
  PyErr_Clear();
  if (!exit) return nullptr;
  return make_method(wrap(ctx, PyMethod_GET_SELF(v), guards::Source::attr(src, "__self__")), "__exit__");
}

// Whether `v` is a builtin function (len, math.sqrt) or a builtin type (int, range).
static bool is_builtin(PyObject* v) {
  return PyCFunction_Check(v) || (PyType_Check(v) && PyDict_GetItemString(PyEval_GetBuiltins(),
                                                                          ((PyTypeObject*)v)->tp_name) == v);
}

// Any other object. A bound method (deque.append, obj.method: made anew by each getattr) by its
// type; a builtin by identity. Python modules, classes, mini's dtypes and enum members are
// guarded by identity (an enum member is compared by identity: `mode is Mode.A` decided while
// tracing); any other object (a numpy array, a user object) by its type: a new one each call
// is fine.
static VarRef wrap_object(TraceContext& ctx, PyObject* v, const SourceRef& src) {
  guards::GuardSet& g = ctx.guards();
  bool bound_builtin = PyCFunction_Check(v) && PyCFunction_GET_SELF(v) && !PyModule_Check(PyCFunction_GET_SELF(v));
  if (bound_builtin || PyMethod_Check(v)) {
    g.add_type_match(src, v);
    return object_var(Var::Object{}, v, src);
  }
  if (is_builtin(v)) {
    g.add_id_match(src, v);
    return object_var(Var::Builtin{}, v, src);
  }
  bool dtype = false;
  for (PyObject* d : python_bridge().dtype_objects) dtype = dtype || d == v;
  if (PyModule_Check(v) || PyType_Check(v) || dtype || is_enum_member(v)) g.add_id_match(src, v);
  else g.add_type_match(src, v);
  return object_var(Var::Object{}, v, src);
}

// Which kind of Var an object of the frame becomes, and which guards make the graph valid
// while it stays what it was.
VarRef wrap(TraceContext& ctx, PyObject* v, SourceRef src) {
  if (TensorImpl* t = guards::unwrap_tensor(v)) return wrap_tensor(ctx, v, t, src);
  if (is_dynamic_number(ctx, v, src)) return wrap_dynamic_number(ctx, v, src);
  if (is_immutable_constant(v)) return wrap_constant(ctx, v, src);
  if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) return wrap_sequence(ctx, v, src);
  if (is_str_keyed_dict(v)) return wrap_dict(ctx, v, src);
  if (is_module(v)) return wrap_module(ctx, v, src);
  if (strcmp(Py_TYPE(v)->tp_name, "tuple_iterator") == 0) return wrap_tuple_iterator(ctx, v, src);
  if (PyFunction_Check(v)) return wrap_function(ctx, v, src);
  if (VarRef exit = wrap_grad_mode_exit(ctx, v, src)) return exit;
  return wrap_object(ctx, v, src);
}

static bool all_constant_items(PyObject* v) {
  if (!PyTuple_CheckExact(v)) return is_immutable_constant(v);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
    if (!all_constant_items(PyTuple_GET_ITEM(v, i))) return false;
  return true;
}

VarRef wrap_untracked(TraceContext& ctx, PyObject* v) {
  if (PyTuple_CheckExact(v) && all_constant_items(v))  // ("a", "b"), names of CALL_KW
    return object_var(Var::Constant{}, v, nullptr);
  if (guards::unwrap_tensor(v))
    unsupported("a tensor that does not come from the frame's arguments, globals or closure "
                "(e.g. a default argument or a tensor stored on a plain object)");
  if (is_immutable_constant(v)) return object_var(Var::Constant{}, v, nullptr);
  if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
    std::vector<VarRef> items;
    for (Py_ssize_t i = 0; i < Py_SIZE(v); i++)
      items.push_back(wrap_untracked(ctx, PyTuple_Check(v) ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i)));
    VarRef var = make_tuple_var(items, PyList_Check(v));
    if (PyList_Check(v)) {  // a real list (a default argument, say): not one the trace may change
      var->obj = v;
      Py_INCREF(v);
    }
    return var;
  }
  if (is_module(v)) return object_var(Var::Module{}, v, nullptr);
  if (PyFunction_Check(v)) {
    return object_var(Var::Function{is_graph_function(v)}, v, nullptr);
  }
  if (is_builtin(v))  // len, range, int: as wrap() makes them
    return object_var(Var::Builtin{}, v, nullptr);
  return object_var(Var::Object{}, v, nullptr);
}

int64_t python_int64(PyObject* number) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(number, &overflow);
  if (!overflow) return v;
  PyObject* r = PyObject_Repr(number);
  std::string digits = r ? PyUnicode_AsUTF8(r) : "?";
  Py_XDECREF(r);
  if (digits.size() > 40) digits = digits.substr(0, 20) + "..." + digits.substr(digits.size() - 10);
  fail("Overflow when unpacking long: the Python int ", digits, " is outside int64, the range "
       "a number must fit in to meet a tensor (write it as a float to compute in floating point)");
}

Tensor wrapped_number_tensor(PyObject* number) {
  if (PyBool_Check(number)) return scalar_tensor(number == Py_True, DType::Bool, true);
  if (PyLong_Check(number)) return int_scalar_tensor(python_int64(number), true);
  return scalar_tensor(PyFloat_AsDouble(number), DType::Float64, true);
}

}  // namespace mini::capture
