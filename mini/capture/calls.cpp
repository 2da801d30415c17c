// calls.cpp — what calling a Var means while tracing: inlining Python functions and
// nn.Module.forward, methods of dicts and constants, dataclass records. Builtins are
// builtins.cpp's; attribute reads and stores attributes.cpp's.
#include "capture/config.h"
#include "capture/trace_context.h"

namespace mini::capture {

std::vector<VarRef> items_of(TraceContext& ctx, const VarRef& v) {
  if (is_object_record(v))
    unsupported("iterating over a " + v->get<Var::Tuple>().record->describe() + " (not a sequence)");
  if (auto* seq = v->sequence()) return seq->items;
  if (auto* it = v->as<Var::Iterator>()) return {it->items.begin() + it->position, it->items.end()};
  if (auto* d = v->as<Var::Dict>()) return d->keys;
  if (auto* view = v->as<Var::DictView>()) {
    const VarRef& d = view->dict;
    const std::vector<VarRef>& keys = d->get<Var::Dict>().keys;
    if (view->name == "keys") return keys;
    std::vector<VarRef> out;
    for (size_t i = 0; i < keys.size(); i++)
      out.push_back(view->name == "values" ? dict_value(ctx, d, i) : make_tuple_var({keys[i], dict_value(ctx, d, i)}));
    return out;
  }
  unsupported("expected a tuple, list, dict or iterator, got " + v->describe());
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

namespace {

// d.get(k[, default]), d.items() / keys() / values(), d.copy(); on a dict made while
// tracing also d.update(other), d.pop(k[, default]), d.setdefault(k[, default]).
VarRef call_dict_method(TraceContext& ctx, const VarRef& callee, const std::vector<VarRef>& args) {
  const VarRef& d = callee->get<Var::Method>().self;
  const std::string& name = callee->get<Var::Method>().name;
  auto none = [] { return make_constant((Py_INCREF(Py_None), Py_None)); };
  if (Var::Dict* dict = d->as<Var::Dict>()) {
    if ((name == "keys" || name == "values" || name == "items") && args.empty())
      return std::make_shared<Var>(Var::DictView{d, name});
    if (name == "get" && (args.size() == 1 || args.size() == 2)) {
      int i = dict_find(d, specialize(ctx, args[0]));
      return i >= 0 ? dict_value(ctx, d, i) : args.size() == 2 ? args[1] : none();
    }
    if (name == "copy" && args.empty()) {
      VarRef copy = make_dict({}, {});
      for (size_t i = 0; i < dict->keys.size(); i++) dict_set(ctx, copy, dict->keys[i], dict_value(ctx, d, i));
      return copy;
    }
    if (name == "update" && args.size() == 1 && args[0]->is(Var::Kind::Dict)) {
      const std::vector<VarRef>& keys = args[0]->get<Var::Dict>().keys;
      for (size_t i = 0; i < keys.size(); i++) dict_set(ctx, d, keys[i], dict_value(ctx, args[0], i));
      return none();
    }
    if ((name == "pop" || name == "setdefault") && (args.size() == 1 || args.size() == 2) && made_in_trace(d)) {
      VarRef key = specialize(ctx, args[0]);
      int i = dict_find(d, key);
      if (i >= 0) {
        VarRef v = dict->values[i];
        if (name == "pop") {
          dict->keys.erase(dict->keys.begin() + i);
          dict->values.erase(dict->values.begin() + i);
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
  auto var = std::make_shared<Var>(Var::Function{});
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
  // made while tracing: what it was given
  if (const VarRef& given = cm->get<Var::Object>().enter_result) return given;
  return get_attr(ctx, cm, "enter_result");
}

bool is_object_record(const VarRef& v) {
  const Var::Tuple* t = v->as<Var::Tuple>();
  return t && t->record && t->object_record;
}

// A record built while tracing (Dynamo's NamedTupleVariable, and the dataclasses it
// constructs): calling a namedtuple class, or a dataclass whose generated __init__ only
// stores its fields, gives a Tuple of the field values in order, whose `record` is the class
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
  Var::Tuple r{{std::move(values)}};
  r.record = cls;
  r.object_record = !PyType_IsSubtype((PyTypeObject*)type, &PyTuple_Type);  // a dataclass: no indexing
  for (const std::string& f : fields) r.fields.push_back(make_constant(PyUnicode_FromString(f.c_str())));
  return std::make_shared<Var>(std::move(r));
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
    Var::Object made;
    made.enter_result = !args.empty()     ? args[0]
                        : !kwargs.empty() ? kwargs[0].second
                                          : make_constant((Py_INCREF(Py_None), Py_None));
    auto cm = std::make_shared<Var>(std::move(made));
    cm->obj = obj;
    return cm;
  }
  PyObject* partial = partial_type();
  if (partial && callee->obj == partial && !args.empty()) {
    std::vector<VarRef> keys, values;
    for (auto& [name, v] : kwargs) {
      keys.push_back(make_constant(PyUnicode_FromString(name.c_str())));
      values.push_back(v);
    }
    std::vector<VarRef> leading(args.begin() + 1, args.end());
    return std::make_shared<Var>(Var::Partial{args[0], std::move(leading), make_dict(std::move(keys), std::move(values))});
  }
  if (!callee->source || !callee->obj) return nullptr;
  if (partial && Py_TYPE(callee->obj) == (PyTypeObject*)partial) {
    ctx.guards().add_type_match(callee->source, callee->obj);
    VarRef func = get_attr(ctx, callee, "func");
    VarRef leading = get_attr(ctx, callee, "args"), keywords = get_attr(ctx, callee, "keywords");
    if (!leading->is(Var::Kind::Tuple) || !keywords->is(Var::Kind::Dict)) return nullptr;
    const std::vector<VarRef>& keys = keywords->get<Var::Dict>().keys;
    std::vector<VarRef> values;  // a dict read from the frame reads (and guards) each value on first use
    for (size_t i = 0; i < keys.size(); i++) values.push_back(dict_value(ctx, keywords, i));
    auto p = std::make_shared<Var>(
        Var::Partial{std::move(func), leading->get<Var::Tuple>().items, make_dict(keys, std::move(values))});
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

namespace {

// A Python function: a graph function (mini.where) recorded by name, a grad-mode wrapper
// (a function decorated with mini.no_grad()) in its mode, any other inlined.
VarRef call_function_var(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  const Var::Function& function = callee->get<Var::Function>();
  if (function.graph_function) {
    PyObject* n = PyDict_GetItem(python_bridge().graph_functions, callee->obj);
    return call_graph_function(ctx, PyUnicode_AsUTF8(n), std::move(args), kwargs);
  }
  if (VarRef r = call_grad_mode_wrapper(ctx, callee, args, kwargs)) return r;
  return inline_function(ctx, callee->obj, callee->source, std::move(args), std::move(kwargs), function.made.get());
}

// A method of a plain object: the class's function, inlined with self bound; the function is
// guarded by identity where the code reads it (obj.name.__func__).
VarRef call_object_method(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  const auto& [self, name] = callee->get<Var::Method>();
  VarRef fn = class_function(ctx, self, name);
  if (in_stdlib(fn->obj))
    unsupported("Attempted to call function marked as skipped: " + std::string(Py_TYPE(self->obj)->tp_name) + "." +
                name + " (the Python standard library is not traced)");
  SourceRef fn_source = guards::Source::attr(guards::Source::attr(self->source, name), "__func__");
  ctx.guards().add_id_match(fn_source, fn->obj);
  args.insert(args.begin(), self);
  return inline_function(ctx, fn->obj, fn_source, std::move(args), std::move(kwargs));
}

// x.shape.numel() where every size is known: the product, a constant; else null.
VarRef size_numel(TraceContext& ctx, const VarRef& self) {
  VarRef sizes = as_constant(ctx, self);
  if (!sizes) return nullptr;
  PyObject* numel = PyLong_FromLong(1);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes->obj); i++)
    Py_SETREF(numel, PyNumber_Multiply(numel, PyTuple_GET_ITEM(sizes->obj, i)));
  return make_constant(numel);
}

VarRef none_var() { return make_constant((Py_INCREF(Py_None), Py_None)); }

// append/extend of a list of the frame's (a global, an argument): its Var grows, and its
// contents after the trace are a side effect replayed into the real list (target[:] = items).
VarRef grow_frame_list(TraceContext& ctx, const VarRef& callee, const std::vector<VarRef>& args) {
  const VarRef& self = callee->get<Var::Method>().self;
  std::vector<VarRef>& items = self->get<Var::List>().items;
  PyObject* real = guards::fetch(*self->source, ctx.root);
  if (!real || !PyList_CheckExact(real)) {
    Py_XDECREF(real);
    PyErr_Clear();
    unsupported("appending to a list read from " + self->source->str() + " that is not one now");
  }
  if (callee->get<Var::Method>().name == "append") {
    items.push_back(args[0]);
  } else {
    std::vector<VarRef> more = items_of(ctx, args[0]);
    items.insert(items.end(), more.begin(), more.end());
  }
  record_store(ctx, SideEffect::Kind::Contents, real, self->source, "", self);
  Py_DECREF(real);  // the frame holds it: its address only names the store
  return none_var();
}

// A method of a constant, on constant arguments: run now.
VarRef call_constant_method(TraceContext& ctx, const VarRef& callee, const std::vector<VarRef>& args,
                            const Kwargs& kwargs) {
  const auto& [self, name] = callee->get<Var::Method>();
  PyObject* m = PyObject_GetAttrString(self->obj, name.c_str());
  if (!m) { PyErr_Clear(); unsupported("no attribute " + name); }
  VarRef r = call_on_constants(ctx, m, args, kwargs, name + "()");
  Py_DECREF(m);
  return r;
}

// A bound method, by what it is bound to: a tensor's (the op table), a module's, the end of a
// with block, a plain object's (inlined), a size's numel, a list's append, a dict's, a
// constant's.
VarRef call_method_var(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  const auto& [self, name] = callee->get<Var::Method>();
  if (self->is(Var::Kind::Tensor)) return call_tensor_method_as_found(ctx, name, self, std::move(args), kwargs);
  if (self->is(Var::Kind::Module)) return call_module_method(ctx, self, name, std::move(args), std::move(kwargs));
  if (is_grad_mode_exit(callee)) {  // the end of a with mini.no_grad() block
    exit_grad_mode(ctx, callee, true);
    return make_constant((Py_INCREF(Py_False), Py_False));  // exceptions are not traced
  }
  if (name == "__exit__" && is_null_context(self)) return none_var();
  if (self->is(Var::Kind::Object) && self->source)
    return call_object_method(ctx, callee, std::move(args), std::move(kwargs));
  const Var::Tuple* tuple = self->as<Var::Tuple>();
  if (tuple && tuple->size && name == "numel" && args.empty() && kwargs.empty())
    if (VarRef numel = size_numel(ctx, self)) return numel;
  if (self->is(Var::Kind::List) && made_in_trace(self) && name == "append" && args.size() == 1) {
    self->get<Var::List>().items.push_back(args[0]);
    ctx.mutations++;
    return none_var();
  }
  if (self->is(Var::Kind::List) && self->source && (name == "append" || name == "extend") &&
      args.size() == 1 && kwargs.empty())
    return grow_frame_list(ctx, callee, args);
  if (self->is(Var::Kind::Dict) || self->is(Var::Kind::DictView)) return call_dict_method(ctx, callee, args);
  if (self->is(Var::Kind::Constant) && all_constant(args, kwargs)) return call_constant_method(ctx, callee, args, kwargs);
  unsupported("calling the method " + name + " of " + self->describe() + " is not supported by mini's capture");
}

// module(x) runs Module.__call__, which calls self.forward; a class with its own __call__
// would run something else, and is refused.
VarRef call_module_var(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  PyObject* call = PyObject_GetAttrString((PyObject*)Py_TYPE(callee->obj), "__call__");
  PyObject* module_call = PyObject_GetAttrString(python_bridge().module_class, "__call__");
  bool own_call = call != module_call;
  bool parallel = call && PyFunction_Check(call) && is_parallel_code((PyCodeObject*)PyFunction_GET_CODE(call));
  Py_XDECREF(call);
  Py_XDECREF(module_call);
  PyErr_Clear();
  if (parallel) unsupported(kParallelCodeBreak);
  if (own_call)
    unsupported(std::string("calling a ") + Py_TYPE(callee->obj)->tp_name + ", whose class overrides "
                "nn.Module.__call__: mini's capture inlines only Module.__call__ (forward)");
  return call_module_method(ctx, callee, "forward", std::move(args), std::move(kwargs));
}

// A partial: its callable with its arguments first, its keywords unless the call gives them.
VarRef call_partial(TraceContext& ctx, const VarRef& callee, const std::vector<VarRef>& args, const Kwargs& kwargs) {
  const Var::Partial& partial = callee->get<Var::Partial>();
  std::vector<VarRef> all = partial.args;
  all.insert(all.end(), args.begin(), args.end());
  Kwargs merged;
  const Var::Dict& keywords = partial.keywords->get<Var::Dict>();
  for (size_t i = 0; i < keywords.keys.size(); i++)
    merged.emplace_back(PyUnicode_AsUTF8(keywords.keys[i]->obj), keywords.values[i]);
  for (auto& [name, v] : kwargs) {
    auto same = std::find_if(merged.begin(), merged.end(), [&](const auto& kv) { return kv.first == name; });
    if (same != merged.end()) same->second = v;
    else merged.emplace_back(name, v);
  }
  return call_var(ctx, partial.func, std::move(all), std::move(merged));
}

}  // namespace

VarRef call_var(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, Kwargs kwargs) {
  switch (callee->kind()) {
    case Var::Kind::Function: return call_function_var(ctx, callee, std::move(args), std::move(kwargs));
    case Var::Kind::Method: return call_method_var(ctx, callee, std::move(args), std::move(kwargs));
    case Var::Kind::Module: return call_module_var(ctx, callee, std::move(args), std::move(kwargs));
    case Var::Kind::Builtin: return call_builtin(ctx, callee, std::move(args), kwargs);
    case Var::Kind::Partial: return call_partial(ctx, callee, args, kwargs);
    case Var::Kind::Object:
      if (VarRef r = call_object(ctx, callee, std::move(args), std::move(kwargs))) return r;
      [[fallthrough]];
    default:
      unsupported("calling " + callee->describe() + " is not supported by mini's capture");
  }
}

}  // namespace mini::capture
