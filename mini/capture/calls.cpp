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

std::vector<VarRef> items_of(const VarRef& v) {
  if (v->is(Var::Kind::Tuple) || v->is(Var::Kind::List)) return v->items;
  if (v->is(Var::Kind::Iterator)) return {v->items.begin() + v->position, v->items.end()};
  unsupported("expected a tuple, list or iterator, got " + v->describe());
}

VarRef call_builtin(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, const Kwargs& kwargs_in) {
  for (auto& a : args) a = specialize(ctx, a);
  Kwargs kwargs = kwargs_in;
  for (auto& kv : kwargs) kv.second = specialize(ctx, kv.second);
  std::string name = builtin_name(callee->obj);
  if (name == "print")
    unsupported("Failed to trace builtin operator `print`: printing is a side effect that must run "
                "in Python; move the print out of the compiled function");
  if (name == "len" && args.size() == 1) {
    const VarRef& a = args[0];
    if (a->is(Var::Kind::Tuple) || a->is(Var::Kind::List)) return make_constant(PyLong_FromSize_t(a->items.size()));
    if (a->is(Var::Kind::Tensor)) {
      const auto& m = meta_of(ctx, a);
      if (m.sizes.empty()) unsupported("len() of a 0-d tensor");
      return make_constant(PyLong_FromLongLong(m.sizes[0]));
    }
  }
  if (name == "isinstance" && args.size() == 2 && args[1]->obj) {
    if (args[0]->is(Var::Kind::Tensor)) {
      int r = PyObject_IsSubclass(python_bridge().tensor_type, args[1]->obj);
      if (r < 0) { PyErr_Clear(); unsupported("isinstance on a tensor"); }
      return make_constant(PyBool_FromLong(r));
    }
    if (args[0]->is(Var::Kind::Tuple) || args[0]->is(Var::Kind::List)) {
      PyObject* cls = args[0]->is(Var::Kind::Tuple) ? (PyObject*)&PyTuple_Type : (PyObject*)&PyList_Type;
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
    return make_tuple_var(items_of(args[0]), name == "list");
  if (name == "enumerate" && !args.empty()) {
    std::vector<VarRef> out;
    long start = args.size() > 1 && args[1]->obj ? PyLong_AsLong(args[1]->obj) : 0;
    auto items = items_of(args[0]->is(Var::Kind::Constant) ? args[0] : args[0]);
    for (size_t i = 0; i < items.size(); i++)
      out.push_back(make_tuple_var({make_constant(PyLong_FromLong(start + (long)i)), items[i]}));
    return make_tuple_var(out);
  }
  if (name == "zip") {
    std::vector<std::vector<VarRef>> lists;
    for (auto& a : args) lists.push_back(items_of(a));
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
  if (name == "abs" && args.size() == 1 && args[0]->is(Var::Kind::Tensor))
    return tensor_unary(ctx, OpKind::Abs, args[0]);
  if (name == "getattr" && args.size() == 2 && args[1]->obj && PyUnicode_Check(args[1]->obj))
    return get_attr(ctx, args[0], PyUnicode_AsUTF8(args[1]->obj));
  static const char* pure[] = {"range", "int", "float", "bool", "abs", "min", "max", "round", "str",
                               "tuple", "list", "divmod", "pow", "sum", "len", "isinstance", "slice"};
  for (const char* p : pure) {
    if (name != p) continue;
    std::vector<VarRef> constants;  // tuples of numbers too: max(x.shape)
    for (auto& a : args)
      if (VarRef c = as_constant(ctx, a)) constants.push_back(c);
    if (constants.size() == args.size() && all_constant(constants, kwargs))
      return call_on_constants(ctx, callee->obj, constants, kwargs, name + "()");
  }
  unsupported("Failed to trace builtin operator `" + name + "` with arguments (" +
              [&] { std::string s; for (auto& a : args) s += (s.empty() ? "" : ", ") + a->describe(); return s; }() +
              "); mini's capture only evaluates builtins on constants");
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

VarRef call_var(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  switch (callee->kind) {
    case Var::Kind::Function: {
      if (callee->graph_function) {
        PyObject* n = PyDict_GetItem(python_bridge().graph_functions, callee->obj);
        return call_graph_function(ctx, PyUnicode_AsUTF8(n), std::move(args), kwargs);
      }
      if (VarRef r = call_grad_mode_wrapper(ctx, callee, args, kwargs)) return r;
      return inline_function(ctx, callee->obj, callee->source, std::move(args), std::move(kwargs));
    }
    case Var::Kind::Method: {
      const VarRef& self = callee->self;
      if (self->is(Var::Kind::Tensor)) return call_tensor_method(ctx, callee->name, self, std::move(args), kwargs);
      if (self->is(Var::Kind::Module)) {
        VarRef fn = class_function(ctx, self, callee->name);
        args.insert(args.begin(), self);
        return inline_function(ctx, fn->obj, fn->source, std::move(args), std::move(kwargs));
      }
      if (is_grad_mode_exit(callee)) {  // the end of a with mini.no_grad() block
        exit_grad_mode(ctx, callee, true);
        return make_constant((Py_INCREF(Py_False), Py_False));  // exceptions are not traced
      }
      if (self->size && callee->name == "numel" && args.empty() && kwargs.empty()) {
        if (VarRef sizes = as_constant(ctx, self)) {
          PyObject* numel = PyLong_FromLong(1);
          for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes->obj); i++)
            Py_SETREF(numel, PyNumber_Multiply(numel, PyTuple_GET_ITEM(sizes->obj, i)));
          return make_constant(numel);
        }
      }
      if (self->is(Var::Kind::List) && !self->source && callee->name == "append" && args.size() == 1) {
        self->items.push_back(args[0]);
        return make_constant((Py_INCREF(Py_None), Py_None));
      }
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
      VarRef fn = class_function(ctx, callee, "forward");
      args.insert(args.begin(), callee);
      return inline_function(ctx, fn->obj, fn->source, std::move(args), std::move(kwargs));
    }
    case Var::Kind::Builtin: return call_builtin(ctx, callee, std::move(args), kwargs);
    default:
      unsupported("calling " + callee->describe() + " is not supported by mini's capture");
  }
}

VarRef get_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
  switch (obj->kind) {
    case Var::Kind::Tensor: return tensor_attr(ctx, obj, name);
    case Var::Kind::Module: {
      // parameters and submodules are read from their registries, as Dynamo does: no
      // Python __getattr__ runs when the guards read them again
      for (const char* registry : {"_parameters", "_modules"}) {
        PyObject* d = PyObject_GetAttrString(obj->obj, registry);
        if (!d) { PyErr_Clear(); continue; }
        PyObject* v = PyDict_Check(d) ? PyDict_GetItemString(d, name.c_str()) : nullptr;
        if (v) {
          Py_INCREF(v);
          Py_DECREF(d);
          SourceRef s = obj->source ? guards::Source::dict_item(guards::Source::attr(obj->source, registry), name) : nullptr;
          VarRef r = s ? wrap(ctx, v, s) : wrap_untracked(ctx, v);
          Py_DECREF(v);
          return r;
        }
        Py_DECREF(d);
      }
      PyObject* cls_attr = PyObject_GetAttrString((PyObject*)Py_TYPE(obj->obj), name.c_str());
      if (cls_attr && PyFunction_Check(cls_attr)) {
        Py_DECREF(cls_attr);
        return make_method(obj, name);
      }
      Py_XDECREF(cls_attr);
      PyErr_Clear();
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
    case Var::Kind::List: case Var::Kind::Tuple:
      return make_method(obj, name);
    default:
      unsupported("reading ." + name + " of " + obj->describe() + " is not supported by mini's capture");
  }
}

}  // namespace mini::capture
