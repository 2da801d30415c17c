// calls.cpp — what calling a Var means while tracing: inlining Python functions and
// nn.Module.forward, the builtins that are pure on constants, and attribute reads.
#include "capture/trace_context.h"

namespace mini::capture {

namespace {

bool all_constant(const std::vector<VarRef>& args, const Kwargs& kwargs) {
  for (auto& a : args)
    if (!a->is(Var::Kind::Constant)) return false;
  for (auto& [k, v] : kwargs)
    if (!v->is(Var::Kind::Constant)) return false;
  return true;
}

// Calls a real callable on constant arguments; the result is untracked (a constant).
VarRef call_on_constants(TraceContext& ctx, PyObject* fn, const std::vector<VarRef>& args,
                         const Kwargs& kwargs, const std::string& what) {
  PyObject* tuple = PyTuple_New((Py_ssize_t)args.size());
  for (size_t i = 0; i < args.size(); i++) {
    Py_INCREF(args[i]->obj);
    PyTuple_SET_ITEM(tuple, i, args[i]->obj);
  }
  PyObject* kw = kwargs.empty() ? nullptr : PyDict_New();
  for (auto& [k, v] : kwargs) PyDict_SetItemString(kw, k.c_str(), v->obj);
  PyObject* r = PyObject_Call(fn, tuple, kw);
  Py_DECREF(tuple);
  Py_XDECREF(kw);
  if (!r) {
    PyErr_Clear();
    unsupported(what + " raised an error on constant arguments");
  }
  VarRef v = wrap_untracked(ctx, r);
  Py_DECREF(r);
  return v;
}

std::string builtin_name(PyObject* fn) {
  PyObject* n = PyObject_GetAttrString(fn, "__name__");
  std::string s = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : "?";
  Py_XDECREF(n);
  PyErr_Clear();
  return s;
}

}  // namespace

std::vector<VarRef> items_of(TraceContext& ctx, const VarRef& v) {
  if (is_object_record(v)) unsupported("iterating over a " + v->self->describe() + " (not a sequence)");
  if (v->is(Var::Kind::Tuple) || v->is(Var::Kind::List)) return v->items;
  if (v->is(Var::Kind::Iterator)) return {v->items.begin() + v->position, v->items.end()};
  if (v->is(Var::Kind::Dict)) return v->keys;
  if (v->is(Var::Kind::DictView)) {
    const VarRef& d = v->self;
    if (v->name == "keys") return d->keys;
    std::vector<VarRef> out;
    for (size_t i = 0; i < d->keys.size(); i++)
      out.push_back(v->name == "values" ? dict_value(ctx, d, i) : make_tuple_var({d->keys[i], dict_value(ctx, d, i)}));
    return out;
  }
  unsupported("expected a tuple, list, dict or iterator, got " + v->describe());
}

namespace {

VarRef call_module_method(TraceContext& ctx, const VarRef& module, const std::string& name,
                          std::vector<VarRef> args, Kwargs kwargs);

bool sequence_or_dict(const std::vector<VarRef>& args) {
  if (args.empty()) return false;
  const VarRef& a = args[0];
  return a->is(Var::Kind::Iterator) || a->is(Var::Kind::Tuple) || a->is(Var::Kind::List) || a->is(Var::Kind::Dict) ||
         a->is(Var::Kind::DictView);
}

VarRef call_builtin(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, const Kwargs& kwargs_in) {
  std::string name = builtin_name(callee->obj);
  if (name == "int" && args.size() == 1 && kwargs_in.empty() && args[0]->is(Var::Kind::SymInt))
    return args[0];  // a dynamic size is an int already
  if ((name == "max" || name == "min") && args.size() >= 2 && kwargs_in.empty())
    if (VarRef r = sym_extreme(ctx, name == "max", args)) return r;  // max(x.shape[0], y.shape[0])
  for (auto& a : args) a = specialize(ctx, a);
  Kwargs kwargs = kwargs_in;
  for (auto& kv : kwargs) kv.second = specialize(ctx, kv.second);
  if (name == "print")
    unsupported("Failed to trace builtin operator `print`: printing is a side effect that must run "
                "in Python; move the print out of the compiled function");
  if (name == "len" && args.size() == 1) {
    const VarRef& a = args[0];
    if (a->is(Var::Kind::Tuple) || a->is(Var::Kind::List)) return make_constant(PyLong_FromSize_t(a->items.size()));
    if (a->is(Var::Kind::Dict)) return make_constant(PyLong_FromSize_t(a->keys.size()));
    if (a->is(Var::Kind::DictView)) return make_constant(PyLong_FromSize_t(a->self->keys.size()));
    if (a->is(Var::Kind::Tensor)) {
      const auto& m = meta_of(ctx, a);
      if (m.sizes.empty()) unsupported("len() of a 0-d tensor");
      return size_var(ctx, a, 0);
    }
    if (a->is(Var::Kind::Module)) return call_module_method(ctx, a, "__len__", {}, {});  // ModuleList's: inlined
  }
  if (name == "hasattr" && args.size() == 2 && args[0]->is(Var::Kind::Module) && args[1]->obj &&
      PyUnicode_Check(args[1]->obj)) {
    // a module's attribute lives in one of its dicts (or its class, which its type guard
    // fixes): the answer is guarded on each dict holding the name or not
    const char* attr = PyUnicode_AsUTF8(args[1]->obj);
    int r = PyObject_HasAttr(args[0]->obj, args[1]->obj);
    if (args[0]->source) {
      for (const char* d : {"__dict__", "_parameters", "_buffers", "_modules"}) {
        PyObject* dict = PyObject_GetAttrString(args[0]->obj, d);
        if (dict && PyDict_Check(dict))
          ctx.guards().add_dict_contains(guards::Source::attr(args[0]->source, d), attr,
                                         PyDict_GetItemString(dict, attr) != nullptr);
        Py_XDECREF(dict);
        PyErr_Clear();
      }
    }
    return make_constant(PyBool_FromLong(r));
  }
  if (name == "isinstance" && args.size() == 2 && args[1]->is(Var::Kind::Tuple)) {
    // isinstance(x, (A, B)) with the tuple built in the traced code: a tuple of its classes
    PyObject* classes = PyTuple_New((Py_ssize_t)args[1]->items.size());
    for (size_t i = 0; i < args[1]->items.size(); i++) {
      PyObject* c = args[1]->items[i]->obj;
      if (!c || !PyType_Check(c)) {  // a class read from a global or builtin (guarded there)
        Py_DECREF(classes);
        unsupported("isinstance with a tuple holding " + args[1]->items[i]->describe());
      }
      Py_INCREF(c);
      PyTuple_SET_ITEM(classes, (Py_ssize_t)i, c);
    }
    args[1] = make_constant(classes);
  }
  if (name == "isinstance" && args.size() == 2 && args[1]->obj) {
    if (args[0]->is(Var::Kind::Tensor)) {
      PyObject* cls = (PyObject*)tensor_type_of(ctx, args[0]);
      if (args[0]->number) {  // a dynamic Python number: its dtype says int, float or bool
        DType d = meta_of(ctx, args[0]).dtype;
        cls = d == DType::Bool ? (PyObject*)&PyBool_Type : is_floating(d) ? (PyObject*)&PyFloat_Type
                                                                            : (PyObject*)&PyLong_Type;
      }
      int r = PyObject_IsSubclass(cls, args[1]->obj);
      if (r < 0) { PyErr_Clear(); unsupported("isinstance on a tensor"); }
      return make_constant(PyBool_FromLong(r));
    }
    if (args[0]->is(Var::Kind::Tuple) || args[0]->is(Var::Kind::List) || args[0]->is(Var::Kind::Dict)) {
      PyObject* cls = args[0]->is(Var::Kind::Tuple) && args[0]->self ? args[0]->self->obj  // a record: its class
                      : args[0]->is(Var::Kind::Tuple) ? (PyObject*)&PyTuple_Type
                      : args[0]->is(Var::Kind::List) ? (PyObject*)&PyList_Type : (PyObject*)&PyDict_Type;
      int r = PyObject_IsSubclass(cls, args[1]->obj);
      if (r < 0) { PyErr_Clear(); unsupported("isinstance"); }
      return make_constant(PyBool_FromLong(r));
    }
    if (args[0]->obj) {
      int r = PyObject_IsInstance(args[0]->obj, args[1]->obj);
      if (r < 0) { PyErr_Clear(); unsupported("isinstance"); }
      return make_constant(PyBool_FromLong(r));
    }
  }
  if ((name == "tuple" || name == "list") && args.size() == 1 && !args[0]->is(Var::Kind::Constant))
    return make_tuple_var(items_of(ctx, args[0]), name == "list");
  if (name == "dict" && args.size() <= 1) {  // dict(), dict(d), dict(pairs), dict(a=1, ...)
    VarRef d = make_dict({}, {});
    if (!args.empty() && args[0]->is(Var::Kind::Dict)) {
      for (size_t i = 0; i < args[0]->keys.size(); i++) dict_set(ctx, d, args[0]->keys[i], dict_value(ctx, args[0], i));
    } else if (!args.empty()) {
      for (auto& pair : items_of(ctx, args[0])) {
        std::vector<VarRef> kv = items_of(ctx, pair);
        if (kv.size() != 2) unsupported("dict() of a sequence whose items are not pairs");
        dict_set(ctx, d, kv[0], kv[1]);
      }
    }
    for (auto& [k, v] : kwargs_in) dict_set(ctx, d, make_constant(PyUnicode_FromString(k.c_str())), v);
    return d;
  }
  if (name == "enumerate" && !args.empty()) {
    std::vector<VarRef> out;
    if (args.size() > 1 && !(args[1]->is(Var::Kind::Constant) && PyLong_Check(args[1]->obj)))
      unsupported("enumerate() with a start that is not an int constant");
    long start = args.size() > 1 ? PyLong_AsLong(args[1]->obj) : 0;
    auto items = items_of(ctx, args[0]);
    for (size_t i = 0; i < items.size(); i++)
      out.push_back(make_tuple_var({make_constant(PyLong_FromLong(start + (long)i)), items[i]}));
    return make_tuple_var(out);
  }
  if (name == "zip") {
    std::vector<std::vector<VarRef>> lists;
    for (auto& a : args) lists.push_back(items_of(ctx, a));
    size_t n = lists.empty() ? 0 : lists[0].size();
    for (auto& l : lists) n = std::min(n, l.size());
    std::vector<VarRef> out;
    for (size_t i = 0; i < n; i++) {
      std::vector<VarRef> row;
      for (auto& l : lists) row.push_back(l[i]);
      out.push_back(make_tuple_var(row));
    }
    return make_tuple_var(out);
  }
  if (name == "abs" && args.size() == 1 && args[0]->is(Var::Kind::Tensor)) {
    VarRef r = tensor_unary(ctx, OpKind::Abs, args[0]);
    r->number = args[0]->number;
    return r;
  }
  if (name == "getattr" && args.size() == 2 && args[1]->obj && PyUnicode_Check(args[1]->obj))
    return get_attr(ctx, args[0], PyUnicode_AsUTF8(args[1]->obj));
  bool sequence = !args.empty() && (args[0]->is(Var::Kind::Iterator) || args[0]->is(Var::Kind::Tuple) ||
                                    args[0]->is(Var::Kind::List));
  if (name == "sum" && sequence && args.size() <= 2 && kwargs_in.size() <= 1) {
    // sum(t * w for t in xs): Python's left fold from `start` (0), tensors added in the graph
    VarRef acc = args.size() > 1 ? args[1] : make_constant(PyLong_FromLong(0));
    for (auto& [k, v] : kwargs_in) {
      if (k != "start") unsupported("sum() got an unexpected keyword argument '" + k + "'");
      acc = v;
    }
    for (const VarRef& item : items_of(ctx, args[0])) {
      VarRef a = as_constant(ctx, acc), b = as_constant(ctx, item);
      if (a && b) {
        PyObject* r = PyNumber_Add(a->obj, b->obj);
        if (!r) { PyErr_Clear(); unsupported("sum() adding " + a->describe() + " and " + b->describe()); }
        acc = make_constant(r);
      } else if (acc->is(Var::Kind::Tensor) || item->is(Var::Kind::Tensor)) acc = tensor_binary(ctx, OpKind::Add, acc, item);
      else unsupported("sum() adding " + acc->describe() + " and " + item->describe());
    }
    return acc;
  }
  if (name == "map" && args.size() >= 2 && kwargs_in.empty()) {  // map(f, xs, ...): f called per item, now
    std::vector<std::vector<VarRef>> lists;
    for (size_t i = 1; i < args.size(); i++) lists.push_back(items_of(ctx, args[i]));
    size_t n = lists[0].size();
    for (auto& l : lists) n = std::min(n, l.size());
    auto it = std::make_shared<Var>(Var::Kind::Iterator);
    for (size_t i = 0; i < n; i++) {
      std::vector<VarRef> call_args;
      for (auto& l : lists) call_args.push_back(l[i]);
      it->items.push_back(call_var(ctx, args[0], std::move(call_args), {}));
    }
    return it;
  }
  if (name == "reduce" && (args.size() == 2 || args.size() == 3) && kwargs_in.empty()) {
    // functools.reduce(f, xs[, initial]): the left fold, f inlined per item
    std::vector<VarRef> items = items_of(ctx, args[1]);
    if (args.size() == 2 && items.empty()) unsupported("reduce() of an empty iterable with no initial value");
    size_t first = args.size() == 3 ? 0 : 1;
    VarRef acc = args.size() == 3 ? args[2] : items[0];
    for (size_t i = first; i < items.size(); i++) acc = call_var(ctx, args[0], {acc, items[i]}, {});
    return acc;
  }
  if ((name == "sorted" || name == "reversed") && sequence_or_dict(args) && args.size() == 1) {
    std::vector<VarRef> items = items_of(ctx, args[0]);
    if (name == "reversed") return make_tuple_var(std::vector<VarRef>(items.rbegin(), items.rend()), true);
    // sorted(): of values known while tracing (a dict's keys, sizes), with its key= and reverse=
    PyObject* list = PyList_New(0);
    for (const VarRef& item : items) {
      VarRef c = as_constant(ctx, item);
      if (!c) { Py_DECREF(list); unsupported("sorted() of " + item->describe()); }
      PyList_Append(list, c->obj);
    }
    VarRef sorted_list = call_on_constants(ctx, callee->obj, {make_constant(list)}, kwargs_in, "sorted()");
    std::vector<VarRef> out;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sorted_list->obj); i++) {
      PyObject* v = PyList_GET_ITEM(sorted_list->obj, i);
      // the item itself where it is one of the inputs (a dict key keeps its Var)
      VarRef found;
      for (const VarRef& item : items)
        if (VarRef c = as_constant(ctx, item); c && c->obj == v) found = item;
      out.push_back(found ? found : make_constant((Py_INCREF(v), v)));
    }
    return make_tuple_var(out, true);
  }
  if ((name == "all" || name == "any") && sequence && args.size() == 1) {
    // each item's truth known while tracing (constants, static sizes); stops where Python does
    for (const VarRef& item : items_of(ctx, args[0])) {
      VarRef c = as_constant(ctx, item);
      if (!c) unsupported(name + "() of " + item->describe() + ", whose truth is known only when the graph runs");
      int t = PyObject_IsTrue(c->obj);
      if (t < 0) { PyErr_Clear(); unsupported(name + "() of " + item->describe()); }
      if ((name == "all") != (t != 0)) return make_constant(PyBool_FromLong(name == "any"));
    }
    return make_constant(PyBool_FromLong(name == "all"));
  }
  // (an exception made of constants is a constant too: what a raise statement raises)
  static const char* pure[] = {"range", "int", "float", "bool", "abs", "min", "max", "round", "str",
                               "tuple", "list", "divmod", "pow", "sum", "len", "isinstance", "slice",
                               "RuntimeError", "TypeError", "ValueError", "IndexError"};
  // the math module's functions are pure too: math.sqrt(head_dim) of a model's attention scale
  PyObject* owner = PyCFunction_Check(callee->obj) ? PyCFunction_GET_SELF(callee->obj) : nullptr;
  const char* module = owner && PyModule_Check(owner) ? PyModule_GetName(owner) : nullptr;
  if (!module) PyErr_Clear();
  bool is_pure = module && (std::string(module) == "math" || std::string(module) == "_operator");
  if (module && std::string(module) == "_operator" && args.size() == 2 && kwargs.empty() &&
      (args[0]->is(Var::Kind::Tensor) || args[1]->is(Var::Kind::Tensor))) {
    // operator.mul(a, b) on tensors is a * b (functools.reduce(operator.mul, xs))
    static const std::pair<const char*, OpKind> ops[] = {{"add", OpKind::Add}, {"sub", OpKind::Sub},
                                                         {"mul", OpKind::Mul}, {"truediv", OpKind::Div},
                                                         {"matmul", OpKind::Matmul}, {"pow", OpKind::Pow}};
    for (const auto& [op, kind] : ops)
      if (name == op) return tensor_binary(ctx, kind, args[0], args[1]);
  }
  for (const char* p : pure) is_pure = is_pure || name == p;
  if (is_pure) {
    std::vector<VarRef> constants;  // tuples of numbers too: max(x.shape)
    for (auto& a : args) {
      // range() of a Python number made dynamic (automatic dynamic) takes its value and guards
      // it, as Dynamo's guard_if_dyn: a loop is unrolled for one trip count
      VarRef c = name == "range" ? specialize_number(ctx, a) : a;
      if ((c = as_constant(ctx, c))) constants.push_back(c);
    }
    if (constants.size() == args.size() && all_constant(constants, kwargs))
      return call_on_constants(ctx, callee->obj, constants, kwargs, name + "()");
  }
  bool dynamic_number = false;
  for (auto& a : args) dynamic_number = dynamic_number || (a->is(Var::Kind::Tensor) && a->number);
  unsupported("Failed to trace builtin operator `" + name + "` with arguments (" +
              [&] { std::string s; for (auto& a : args) s += (s.empty() ? "" : ", ") + a->describe(); return s; }() +
              "); mini's capture only evaluates builtins on constants" +
              (dynamic_number ? std::string("; a number made dynamic is known only when the graph runs: compute with it "
                                            "as a tensor (mini.clamp(x, max=1.0) for min), or compile with dynamic=False "
                                            "to guard its value")
                              : std::string()));
}

// Calls `module.name(*args)` as Python would: the function found by getattr, usually the
// class's, but an instance may have its own (a monkeypatched forward). The function is
// guarded by identity through the instance, L['m'].forward.__func__, so every instance of the
// class shares the graph while a patched instance, or a patched class, misses (torch guards
// `forward` not being in the instance's __dict__ and trusts the class).
VarRef call_module_method(TraceContext& ctx, const VarRef& module, const std::string& name,
                          std::vector<VarRef> args, Kwargs kwargs) {
  PyObject* found = PyObject_GetAttrString(module->obj, name.c_str());
  if (!found) {
    PyErr_Clear();
    unsupported(std::string(Py_TYPE(module->obj)->tp_name) + " has no method " + name);
  }
  SourceRef src = module->source ? guards::Source::attr(module->source, name) : nullptr;
  if (!PyMethod_Check(found) || !PyFunction_Check(PyMethod_GET_FUNCTION(found))) {
    // a function or callable object stored on the instance: called without self
    VarRef callee = src ? wrap(ctx, found, src) : wrap_untracked(ctx, found);
    Py_DECREF(found);
    return call_var(ctx, callee, std::move(args), std::move(kwargs));
  }
  PyObject* fn = PyMethod_GET_FUNCTION(found);
  PyObject* bound_self = PyMethod_GET_SELF(found);
  SourceRef fsrc = src ? guards::Source::attr(src, "__func__") : nullptr;
  if (fsrc) ctx.guards().add_id_match(fsrc, fn);
  VarRef self = module;
  if (bound_self != module->obj) {  // a method of another object, set on this module
    self = src ? wrap(ctx, bound_self, guards::Source::attr(src, "__self__"))
               : wrap_untracked(ctx, bound_self);
  }
  args.insert(args.begin(), self);
  Py_INCREF(fn);  // the bound method may be the only owner
  Py_DECREF(found);
  VarRef result;
  try {
    result = inline_function(ctx, fn, fsrc, std::move(args), std::move(kwargs));
  } catch (...) {
    Py_DECREF(fn);
    throw;
  }
  Py_DECREF(fn);
  return result;
}

// d.get(k[, default]), d.items() / keys() / values(), d.copy(); on a dict made while
// tracing also d.update(other), d.pop(k[, default]), d.setdefault(k[, default]).
VarRef call_dict_method(TraceContext& ctx, const VarRef& callee, const std::vector<VarRef>& args) {
  const VarRef& d = callee->self;
  const std::string& name = callee->name;
  auto none = [] { return make_constant((Py_INCREF(Py_None), Py_None)); };
  if (d->is(Var::Kind::Dict)) {
    if ((name == "keys" || name == "values" || name == "items") && args.empty()) {
      auto view = std::make_shared<Var>(Var::Kind::DictView);
      view->self = d;
      view->name = name;
      return view;
    }
    if (name == "get" && (args.size() == 1 || args.size() == 2)) {
      int i = dict_find(d, specialize(ctx, args[0]));
      return i >= 0 ? dict_value(ctx, d, i) : args.size() == 2 ? args[1] : none();
    }
    if (name == "copy" && args.empty()) {
      VarRef copy = make_dict({}, {});
      for (size_t i = 0; i < d->keys.size(); i++) dict_set(ctx, copy, d->keys[i], dict_value(ctx, d, i));
      return copy;
    }
    if (name == "update" && args.size() == 1 && args[0]->is(Var::Kind::Dict)) {
      for (size_t i = 0; i < args[0]->keys.size(); i++) dict_set(ctx, d, args[0]->keys[i], dict_value(ctx, args[0], i));
      return none();
    }
    if ((name == "pop" || name == "setdefault") && (args.size() == 1 || args.size() == 2) && made_in_trace(d)) {
      VarRef key = specialize(ctx, args[0]);
      int i = dict_find(d, key);
      if (i >= 0) {
        VarRef v = d->items[i];
        if (name == "pop") {
          d->keys.erase(d->keys.begin() + i);
          d->items.erase(d->items.begin() + i);
          ctx.mutations++;
        }
        return v;
      }
      if (name == "pop" && args.size() == 1) unsupported("KeyError: " + key->describe());
      VarRef fallback = args.size() == 2 ? args[1] : none();
      if (name == "setdefault") dict_set(ctx, d, key, fallback);
      return fallback;
    }
  }
  unsupported("calling " + d->describe() + "." + name + "() is not supported by mini's capture");
}

// Code of the Python standard library (logging, ...), which Dynamo's skip rules do not trace:
// a call of its methods is a graph break at the caller's line.
bool in_stdlib(PyObject* fn) {
  // set under the GIL, not by a C++ static initializer: its guard, held across the import,
  // would be waited on by a second thread holding the GIL (a deadlock)
  static std::string stdlib;
  if (stdlib.empty()) stdlib = [] {
    PyObject* sysconfig = PyImport_ImportModule("sysconfig");
    PyObject* path = sysconfig ? PyObject_CallMethod(sysconfig, "get_path", "s", "stdlib") : nullptr;
    std::string p = path && PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : "";
    Py_XDECREF(path);
    Py_XDECREF(sysconfig);
    PyErr_Clear();
    return p.empty() ? p : p + "/";
  }();
  std::string file = PyUnicode_AsUTF8(((PyCodeObject*)PyFunction_GET_CODE(fn))->co_filename);
  return !stdlib.empty() && file.compare(0, stdlib.size(), stdlib) == 0 &&
         file.find("-packages/") == std::string::npos;
}

// The plain function behind `type(obj).name`, with a Source that reads it there.
VarRef class_function(TraceContext& ctx, const VarRef& obj, const std::string& name) {
  PyObject* cls = (PyObject*)Py_TYPE(obj->obj);
  PyObject* fn = PyObject_GetAttrString(cls, name.c_str());
  if (!fn) { PyErr_Clear(); unsupported(std::string(Py_TYPE(obj->obj)->tp_name) + " has no method " + name); }
  auto var = std::make_shared<Var>(Var::Kind::Function);
  var->obj = fn;
  if (obj->source) var->source = guards::Source::attr(guards::Source::attr(obj->source, "__class__"), name);
  if (!PyFunction_Check(fn))
    unsupported("calling " + name + " of " + Py_TYPE(obj->obj)->tp_name + ", which is not a Python function");
  return var;
}

}  // namespace

// A class of the standard library, looked up once (null if it is not there): module.name
static PyObject* library_class(const char* module, const char* name) {
  PyObject* m = PyImport_ImportModule(module);
  PyObject* t = m ? PyObject_GetAttrString(m, name) : nullptr;
  Py_XDECREF(m);
  PyErr_Clear();
  return t;
}

static PyObject* partial_type() {
  static PyObject* type = library_class("functools", "partial");
  return type;
}

static PyObject* nullcontext_type() {
  static PyObject* type = library_class("contextlib", "nullcontext");
  return type;
}

bool is_null_context(const VarRef& v) {
  PyObject* type = nullcontext_type();
  return type && v->is(Var::Kind::Object) && v->obj && Py_TYPE(v->obj) == (PyTypeObject*)type;
}

VarRef null_context_enter(TraceContext& ctx, const VarRef& cm) {
  if (cm->contents) return cm->contents;  // made while tracing: what it was given
  return get_attr(ctx, cm, "enter_result");
}

bool is_object_record(const VarRef& v) { return v->is(Var::Kind::Tuple) && v->self && v->name == "object"; }

// A record built while tracing (Dynamo's NamedTupleVariable, and the dataclasses it
// constructs): calling a namedtuple class, or a dataclass whose generated __init__ only
// stores its fields, gives a Tuple of the field values in order, whose `self` is the class
// (attribute reads by field name; rebuilt as cls(*values)). Null where `cls` is neither.
static VarRef build_record(TraceContext& ctx, const VarRef& cls, const std::vector<VarRef>& args, const Kwargs& kwargs) {
  PyObject* type = cls->obj;
  std::vector<std::string> fields;
  std::vector<VarRef> defaults;  // per field, null: none
  PyObject* nt_fields = PyType_IsSubtype((PyTypeObject*)type, &PyTuple_Type) ? PyObject_GetAttrString(type, "_fields") : nullptr;
  PyObject* dc_fields = !nt_fields ? PyObject_GetAttrString(type, "__dataclass_fields__") : nullptr;
  PyErr_Clear();
  if (nt_fields && PyTuple_Check(nt_fields)) {
    PyObject* given = PyObject_GetAttrString(type, "_field_defaults");
    PyErr_Clear();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(nt_fields); i++) {
      PyObject* f = PyTuple_GET_ITEM(nt_fields, i);
      fields.push_back(PyUnicode_AsUTF8(f));
      PyObject* d = given && PyDict_Check(given) ? PyDict_GetItem(given, f) : nullptr;
      defaults.push_back(d ? wrap_untracked(ctx, d) : nullptr);
    }
    Py_XDECREF(given);
  } else if (dc_fields && PyDict_Check(dc_fields)) {
    // only a dataclass whose __init__ does nothing but store its fields
    PyObject* post_init = PyObject_GetAttrString(type, "__post_init__");
    PyErr_Clear();
    bool plain = !post_init && ((PyTypeObject*)type)->tp_new == PyBaseObject_Type.tp_new;
    Py_XDECREF(post_init);
    PyObject *name, *field;
    Py_ssize_t pos = 0;
    while (plain && PyDict_Next(dc_fields, &pos, &name, &field)) {
      PyObject* init = PyObject_GetAttrString(field, "init");
      PyObject* kind = PyObject_GetAttrString(field, "_field_type");
      PyObject* kind_name = kind ? PyObject_GetAttrString(kind, "name") : nullptr;
      PyObject* d = PyObject_GetAttrString(field, "default");
      PyObject* factory = PyObject_GetAttrString(field, "default_factory");
      PyErr_Clear();
      bool regular = kind_name && PyUnicode_Check(kind_name) && PyUnicode_CompareWithASCIIString(kind_name, "_FIELD") == 0;
      bool missing = d && strcmp(Py_TYPE(d)->tp_name, "_MISSING_TYPE") == 0;
      bool no_factory = factory && strcmp(Py_TYPE(factory)->tp_name, "_MISSING_TYPE") == 0;
      plain = init == Py_True && regular && no_factory && d;
      if (plain) {
        fields.push_back(PyUnicode_AsUTF8(name));
        defaults.push_back(missing ? nullptr : wrap_untracked(ctx, d));
      }
      Py_XDECREF(init), Py_XDECREF(kind), Py_XDECREF(kind_name), Py_XDECREF(d), Py_XDECREF(factory);
    }
    if (!plain) fields.clear(), defaults.clear();
  }
  bool record = !fields.empty() || (nt_fields && PyTuple_Check(nt_fields));
  Py_XDECREF(nt_fields);
  Py_XDECREF(dc_fields);
  if (!record) return nullptr;
  if (args.size() > fields.size()) unsupported("too many arguments for " + cls->describe());
  std::vector<VarRef> values(fields.size());
  for (size_t i = 0; i < args.size(); i++) values[i] = args[i];
  for (const auto& [name, v] : kwargs) {
    auto at = std::find(fields.begin(), fields.end(), name);
    if (at == fields.end() || values[at - fields.begin()])
      unsupported("the argument '" + name + "' of " + cls->describe() + " is unknown or given twice");
    values[at - fields.begin()] = v;
  }
  for (size_t i = 0; i < fields.size(); i++)
    if (!(values[i] = values[i] ? values[i] : defaults[i])) unsupported("missing argument '" + fields[i] + "' of " + cls->describe());
  VarRef r = make_tuple_var(std::move(values));
  r->self = cls;
  if (!PyType_IsSubtype((PyTypeObject*)type, &PyTuple_Type)) r->name = "object";  // a dataclass: no indexing
  for (const std::string& f : fields) r->keys.push_back(make_constant(PyUnicode_FromString(f.c_str())));
  return r;
}

// Calling an object (Dynamo's UserDefinedObjectVariable.call_function and its partials):
// functools.partial(f, ...) builds a Partial; a real partial from the frame calls its func
// with its args and keywords (each read, and guarded, through the partial); an instance of a
// class of the user's with a __call__ inlines that function with self bound, guarded by the
// function's identity (any instance of the class reuses the graph). Else null.
static VarRef call_object(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  if (callee->obj && PyType_Check(callee->obj))
    if (VarRef r = build_record(ctx, callee, args, kwargs)) return r;
  PyObject* nullcontext = nullcontext_type();
  if (nullcontext && callee->obj == nullcontext && args.size() + kwargs.size() <= 1 &&
      (kwargs.empty() || kwargs[0].first == "enter_result")) {
    // contextlib.nullcontext(enter_result): a with block that does nothing but hand
    // enter_result to `as` (a fresh real object; what it holds stays a Var)
    PyObject* obj = PyObject_CallNoArgs(nullcontext);
    if (!obj) { PyErr_Clear(); return nullptr; }
    auto cm = std::make_shared<Var>(Var::Kind::Object);
    cm->obj = obj;
    cm->contents = !args.empty() ? args[0] : !kwargs.empty() ? kwargs[0].second : make_constant((Py_INCREF(Py_None), Py_None));
    return cm;
  }
  PyObject* partial = partial_type();
  if (partial && callee->obj == partial && !args.empty()) {
    auto p = std::make_shared<Var>(Var::Kind::Partial);
    p->self = args[0];
    p->items.assign(args.begin() + 1, args.end());
    std::vector<VarRef> keys, values;
    for (auto& [name, v] : kwargs) {
      keys.push_back(make_constant(PyUnicode_FromString(name.c_str())));
      values.push_back(v);
    }
    p->contents = make_dict(std::move(keys), std::move(values));
    return p;
  }
  if (!callee->source || !callee->obj) return nullptr;
  if (partial && Py_TYPE(callee->obj) == (PyTypeObject*)partial) {
    ctx.guards().add_type_match(callee->source, callee->obj);
    auto p = std::make_shared<Var>(Var::Kind::Partial);
    p->self = get_attr(ctx, callee, "func");
    VarRef leading = get_attr(ctx, callee, "args"), keywords = get_attr(ctx, callee, "keywords");
    if (!leading->is(Var::Kind::Tuple) || !keywords->is(Var::Kind::Dict)) return nullptr;
    p->items = leading->items;
    std::vector<VarRef> values;  // a dict read from the frame reads (and guards) each value on first use
    for (size_t i = 0; i < keywords->keys.size(); i++) values.push_back(dict_value(ctx, keywords, i));
    p->contents = make_dict(keywords->keys, std::move(values));
    return call_var(ctx, p, std::move(args), std::move(kwargs));
  }
  static PyObject* dunder_call = PyUnicode_InternFromString("__call__");
  PyObject* call = _PyType_Lookup(Py_TYPE(callee->obj), dunder_call);
  if (!call || !PyFunction_Check(call) || in_stdlib(call)) return nullptr;
  SourceRef fn_source = guards::Source::attr(guards::Source::attr(callee->source, "__call__"), "__func__");
  ctx.guards().add_id_match(fn_source, call);
  args.insert(args.begin(), callee);
  return inline_function(ctx, call, fn_source, std::move(args), std::move(kwargs));
}

VarRef call_var(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  switch (callee->kind) {
    case Var::Kind::Function: {
      if (callee->graph_function) {
        PyObject* n = PyDict_GetItem(python_bridge().graph_functions, callee->obj);
        return call_graph_function(ctx, PyUnicode_AsUTF8(n), std::move(args), kwargs);
      }
      if (VarRef r = call_grad_mode_wrapper(ctx, callee, args, kwargs)) return r;
      return inline_function(ctx, callee->obj, callee->source, std::move(args), std::move(kwargs), callee->made.get());
    }
    case Var::Kind::Method: {
      const VarRef& self = callee->self;
      if (self->is(Var::Kind::Tensor)) return call_tensor_method_as_found(ctx, callee->name, self, std::move(args), kwargs);
      if (self->is(Var::Kind::Module))
        return call_module_method(ctx, self, callee->name, std::move(args), std::move(kwargs));
      if (is_grad_mode_exit(callee)) {  // the end of a with mini.no_grad() block
        exit_grad_mode(ctx, callee, true);
        return make_constant((Py_INCREF(Py_False), Py_False));  // exceptions are not traced
      }
      if (callee->name == "__exit__" && is_null_context(self)) return make_constant((Py_INCREF(Py_None), Py_None));
      if (self->is(Var::Kind::Object) && self->source) {
        // a method of a plain object: the class's function, inlined with self bound; the
        // function is guarded by identity where the code reads it (obj.name.__func__)
        VarRef fn = class_function(ctx, self, callee->name);
        if (in_stdlib(fn->obj))
          unsupported("Attempted to call function marked as skipped: " + std::string(Py_TYPE(self->obj)->tp_name) + "." +
                      callee->name + " (the Python standard library is not traced)");
        SourceRef fn_source = guards::Source::attr(guards::Source::attr(self->source, callee->name), "__func__");
        ctx.guards().add_id_match(fn_source, fn->obj);
        args.insert(args.begin(), self);
        return inline_function(ctx, fn->obj, fn_source, std::move(args), std::move(kwargs));
      }
      if (self->size && callee->name == "numel" && args.empty() && kwargs.empty()) {
        if (VarRef sizes = as_constant(ctx, self)) {
          PyObject* numel = PyLong_FromLong(1);
          for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes->obj); i++)
            Py_SETREF(numel, PyNumber_Multiply(numel, PyTuple_GET_ITEM(sizes->obj, i)));
          return make_constant(numel);
        }
      }
      if (self->is(Var::Kind::List) && made_in_trace(self) && callee->name == "append" && args.size() == 1) {
        self->items.push_back(args[0]);
        ctx.mutations++;
        return make_constant((Py_INCREF(Py_None), Py_None));
      }
      if (self->is(Var::Kind::List) && self->source && (callee->name == "append" || callee->name == "extend") &&
          args.size() == 1 && kwargs.empty()) {
        // a list of the frame's (a global, an argument): its Var grows, and its contents after
        // the trace are a side effect replayed into the real list (target[:] = items)
        PyObject* real = guards::fetch(*self->source, ctx.root);
        if (!real || !PyList_CheckExact(real)) {
          Py_XDECREF(real);
          PyErr_Clear();
          unsupported("appending to a list read from " + self->source->str() + " that is not one now");
        }
        if (callee->name == "append") {
          self->items.push_back(args[0]);
        } else {
          std::vector<VarRef> more = items_of(ctx, args[0]);
          self->items.insert(self->items.end(), more.begin(), more.end());
        }
        record_store(ctx, SideEffect::Kind::Contents, real, self->source, "", self);
        Py_DECREF(real);  // the frame holds it: its address only names the store
        return make_constant((Py_INCREF(Py_None), Py_None));
      }
      if (self->is(Var::Kind::Dict) || self->is(Var::Kind::DictView)) return call_dict_method(ctx, callee, args);
      if (self->is(Var::Kind::Constant) && all_constant(args, kwargs)) {
        PyObject* m = PyObject_GetAttrString(self->obj, callee->name.c_str());
        if (!m) { PyErr_Clear(); unsupported("no attribute " + callee->name); }
        VarRef r = call_on_constants(ctx, m, args, kwargs, callee->name + "()");
        Py_DECREF(m);
        return r;
      }
      unsupported("calling the method " + callee->name + " of " + self->describe() + " is not supported by mini's capture");
    }
    case Var::Kind::Module: {
      // module(x) runs Module.__call__, which calls self.forward; a class with its own
      // __call__ would run something else
      PyObject* call = PyObject_GetAttrString((PyObject*)Py_TYPE(callee->obj), "__call__");
      PyObject* module_call = PyObject_GetAttrString(python_bridge().module_class, "__call__");
      bool own_call = call != module_call;
      Py_XDECREF(call);
      Py_XDECREF(module_call);
      PyErr_Clear();
      if (own_call)
        unsupported(std::string("calling a ") + Py_TYPE(callee->obj)->tp_name + ", whose class overrides "
                    "nn.Module.__call__: mini's capture inlines only Module.__call__ (forward)");
      return call_module_method(ctx, callee, "forward", std::move(args), std::move(kwargs));
    }
    case Var::Kind::Builtin: return call_builtin(ctx, callee, std::move(args), kwargs);
    case Var::Kind::Partial: {  // its callable with its arguments first, its keywords unless given
      std::vector<VarRef> all = callee->items;
      all.insert(all.end(), args.begin(), args.end());
      Kwargs merged;
      for (size_t i = 0; i < callee->contents->keys.size(); i++)
        merged.emplace_back(PyUnicode_AsUTF8(callee->contents->keys[i]->obj), callee->contents->items[i]);
      for (auto& [name, v] : kwargs) {
        auto same = std::find_if(merged.begin(), merged.end(), [&](const auto& kv) { return kv.first == name; });
        if (same != merged.end()) same->second = v;
        else merged.emplace_back(name, v);
      }
      return call_var(ctx, callee->self, std::move(all), std::move(merged));
    }
    case Var::Kind::Object:
      if (VarRef r = call_object(ctx, callee, std::move(args), std::move(kwargs))) return r;
      [[fallthrough]];
    default:
      unsupported("calling " + callee->describe() + " is not supported by mini's capture");
  }
}

// A plain Python class's attribute protocol: object's own __getattribute__ and __setattr__,
// so that after obj.name = v, obj.name is v (unless a data descriptor, such as a property,
// handles the name).
static bool plain_attributes(PyTypeObject* type) {
  static PyObject* getattribute = PyUnicode_InternFromString("__getattribute__");
  static PyObject* setattr = PyUnicode_InternFromString("__setattr__");
  return _PyType_Lookup(type, getattribute) == _PyType_Lookup(&PyBaseObject_Type, getattribute) &&
         _PyType_Lookup(type, setattr) == _PyType_Lookup(&PyBaseObject_Type, setattr);
}

void store_attr(TraceContext& ctx, const VarRef& obj, const std::string& name, const VarRef& value) {
  if (!(obj->is(Var::Kind::Object) || obj->is(Var::Kind::Module)) || !obj->source)
    unsupported("setting ." + name + " of " + obj->describe() + " is not supported by mini's capture");
  PyTypeObject* type = Py_TYPE(obj->obj);
  PyObject* key = PyUnicode_FromString(name.c_str());
  PyObject* descr = _PyType_Lookup(type, key);
  Py_DECREF(key);
  bool data_descriptor = descr && Py_TYPE(descr)->tp_descr_set;
  bool has_dict = type->tp_dictoffset != 0;
  if (obj->is(Var::Kind::Module)) {
    // nn.Module.__setattr__ stores anything but a Parameter, buffer or Module in __dict__
    for (const char* registry : {"_parameters", "_buffers", "_modules"}) {
      PyObject* d = PyObject_GetAttrString(obj->obj, registry);
      bool registered = d && PyDict_Check(d) && PyDict_GetItemString(d, name.c_str());
      Py_XDECREF(d);
      PyErr_Clear();
      if (registered) unsupported("assigning the parameter, buffer or submodule '" + name + "' in compiled code is not supported by mini's capture");
    }
    bool input = value->is(Var::Kind::Tensor) && ctx.graph().nodes[value->node].kind == graph::NodeKind::Input;
    if (value->is(Var::Kind::Module) || input)
      unsupported("assigning a module or an input tensor to a module attribute ('" + name + "') is not supported by mini's capture");
  } else if (!plain_attributes(type) && !PyModule_CheckExact(obj->obj)) {
    unsupported(std::string("setting an attribute of a ") + type->tp_name + ", whose class defines __setattr__ or "
                "__getattribute__, is not supported by mini's capture");
  }
  if (data_descriptor || !has_dict)
    unsupported(std::string("setting ") + type->tp_name + "." + name + " (a property, slot or object without __dict__) "
                "is not supported by mini's capture");
  ctx.attr_objects.emplace_back(obj->source, obj->obj);
  if (PyModule_CheckExact(obj->obj))  // a module's attribute is a global of its functions
    record_store(ctx, SideEffect::Kind::Global, PyModule_GetDict(obj->obj), guards::Source::attr(obj->source, "__dict__"),
                 name, value);
  else
    record_store(ctx, SideEffect::Kind::Attr, obj->obj, obj->source, name, value);
}

VarRef get_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
  if (obj->is(Var::Kind::Tuple) && obj->self) {  // a record built while tracing: its fields by name
    for (size_t i = 0; i < obj->keys.size(); i++)
      if (name == PyUnicode_AsUTF8(obj->keys[i]->obj)) return obj->items[i];
    unsupported("reading ." + name + " of a " + obj->self->describe() + " built in compiled code (only its fields) "
                "is not supported by mini's capture");
  }
  if (obj->number)
    unsupported("reading ." + name + " of a dynamic Python number (a graph input since its value "
                "changed) is not supported by mini's capture");
  if ((obj->is(Var::Kind::Object) || obj->is(Var::Kind::Module)) && obj->source) {
    ctx.attr_objects.emplace_back(obj->source, obj->obj);
    if (VarRef stored = find_store(ctx, SideEffect::Kind::Attr, obj->obj, name)) return stored;
    if (PyModule_CheckExact(obj->obj))
      if (VarRef stored = find_store(ctx, SideEffect::Kind::Global, PyModule_GetDict(obj->obj), name)) return stored;
  }
  if (obj->is(Var::Kind::Object) && obj->source && plain_attributes(Py_TYPE(obj->obj))) {
    // a method of a plain object (the class's function, not shadowed by the instance)
    PyObject* key = PyUnicode_FromString(name.c_str());
    PyObject* cls_attr = _PyType_Lookup(Py_TYPE(obj->obj), key);
    PyObject** dict = _PyObject_GetDictPtr(obj->obj);
    bool shadowed = dict && *dict && PyDict_GetItem(*dict, key);
    Py_DECREF(key);
    if (cls_attr && PyFunction_Check(cls_attr) && !shadowed) return make_method(obj, name);
  }
  switch (obj->kind) {
    case Var::Kind::Tensor: return tensor_attr(ctx, obj, name);
    case Var::Kind::Module: {
      // Python's lookup order: a class attribute, then the instance's __dict__, which win over
      // nn.Module.__getattr__ (it runs only when they fail) and so read through getattr below;
      // else parameters, buffers and submodules, read from their registries as Dynamo does (no
      // Python __getattr__ runs when the guards read them again), guarded on the name staying
      // out of the instance's __dict__ (m.__dict__['sub'] = other shadows m._modules['sub'])
      PyObject* key = PyUnicode_FromString(name.c_str());
      PyObject** dict = _PyObject_GetDictPtr(obj->obj);
      bool found = _PyType_Lookup(Py_TYPE(obj->obj), key) || (dict && *dict && PyDict_GetItem(*dict, key));
      Py_DECREF(key);
      for (const char* registry : {"_parameters", "_buffers", "_modules"}) {
        if (found) break;
        PyObject* d = PyObject_GetAttrString(obj->obj, registry);
        if (!d) { PyErr_Clear(); continue; }
        PyObject* v = PyDict_Check(d) ? PyDict_GetItemString(d, name.c_str()) : nullptr;
        if (v) {
          Py_INCREF(v);
          Py_DECREF(d);
          if (obj->source) ctx.guards().add_dict_contains(guards::Source::attr(obj->source, "__dict__"), name, false);
          SourceRef s = obj->source ? guards::Source::dict_item(guards::Source::attr(obj->source, registry), name) : nullptr;
          VarRef r = s ? wrap(ctx, v, s) : wrap_untracked(ctx, v);
          Py_DECREF(v);
          return r;
        }
        Py_DECREF(d);
      }
      // a method (the class's, or one set on the instance): guarded when it is called
      PyObject* attr = PyObject_GetAttrString(obj->obj, name.c_str());
      PyErr_Clear();
      bool method = attr && PyMethod_Check(attr) && PyFunction_Check(PyMethod_GET_FUNCTION(attr));
      if (attr && PyLong_CheckExact(attr) && obj->source) {
        // an int of a module (a size, a dim) is its structure: a constant, never an automatic
        // dynamic input (torch: allow_unspec_int_on_nn_module = False)
        SourceRef s = guards::Source::attr(obj->source, name);
        ctx.guards().add_constant_match(s, attr);
        VarRef r = make_constant(attr);  // steals the reference
        r->source = s;
        return r;
      }
      Py_XDECREF(attr);
      if (method) return make_method(obj, name);
      [[fallthrough]];
    }
    case Var::Kind::Object:
    case Var::Kind::Function:
    case Var::Kind::Builtin: {
      PyObject* v = PyObject_GetAttrString(obj->obj, name.c_str());
      if (!v) {
        PyErr_Clear();
        unsupported(obj->describe() + " has no attribute '" + name + "'");
      }
      VarRef r = obj->source ? wrap(ctx, v, guards::Source::attr(obj->source, name)) : wrap_untracked(ctx, v);
      Py_DECREF(v);
      return r;
    }
    case Var::Kind::Constant: {
      PyObject* v = PyObject_GetAttrString(obj->obj, name.c_str());
      if (!v) { PyErr_Clear(); unsupported(obj->describe() + " has no attribute '" + name + "'"); }
      if (PyCallable_Check(v) && !PyType_Check(v)) {
        Py_DECREF(v);
        return make_method(obj, name);
      }
      VarRef r = wrap_untracked(ctx, v);
      Py_DECREF(v);
      return r;
    }
    case Var::Kind::List: case Var::Kind::Tuple: case Var::Kind::Dict:
      return make_method(obj, name);
    default:
      unsupported("reading ." + name + " of " + obj->describe() + " is not supported by mini's capture");
  }
}

}  // namespace mini::capture
