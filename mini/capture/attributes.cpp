// attributes.cpp — reading and storing attributes while tracing (Dynamo's var_getattr and
// STORE_ATTR): a record's fields, a module's parameters, buffers, submodules and methods, a
// plain object's methods and attributes, a constant's; a store into a plain object or a
// module's __dict__ becomes a side effect replayed after the graph.
#include "capture/trace_context.h"

namespace mini::capture {

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
    bool input = value->is(Var::Kind::Tensor) && ctx.graph().nodes[value->tensor().node].kind == graph::NodeKind::Input;
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

namespace {

// A record built while tracing (a dataclass, a namedtuple): its field `name`.
VarRef record_field(const Var::Tuple& record, const std::string& name) {
  for (size_t i = 0; i < record.fields.size(); i++)
    if (name == PyUnicode_AsUTF8(record.fields[i]->obj)) return record.items[i];
  unsupported("reading ." + name + " of a " + record.record->describe() + " built in compiled code (only its fields) "
              "is not supported by mini's capture");
}

// What this trace stored into obj.name (or a module's global `name`) earlier, or null.
VarRef stored_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
  ctx.attr_objects.emplace_back(obj->source, obj->obj);
  if (VarRef stored = find_store(ctx, SideEffect::Kind::Attr, obj->obj, name)) return stored;
  if (PyModule_CheckExact(obj->obj))
    if (VarRef stored = find_store(ctx, SideEffect::Kind::Global, PyModule_GetDict(obj->obj), name)) return stored;
  return nullptr;
}

// Whether obj.name of a plain object is a method: the class's function, not shadowed by the
// instance.
bool plain_object_method(const VarRef& obj, const std::string& name) {
  PyObject* key = PyUnicode_FromString(name.c_str());
  PyObject* cls_attr = _PyType_Lookup(Py_TYPE(obj->obj), key);
  PyObject** dict = _PyObject_GetDictPtr(obj->obj);
  bool shadowed = dict && *dict && PyDict_GetItem(*dict, key);
  Py_DECREF(key);
  return cls_attr && PyFunction_Check(cls_attr) && !shadowed;
}

// A module's parameter, buffer or submodule `name`, read from its registries as Dynamo does
// (no Python __getattr__ runs when the guards read them again), guarded on the name staying
// out of the instance's __dict__ (m.__dict__['sub'] = other shadows m._modules['sub']). Null
// where a class attribute or the instance's __dict__ has the name: Python's lookup order
// finds those first (nn.Module.__getattr__ runs only when they fail), or none has it.
VarRef module_registry_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
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
  return nullptr;
}

// An attribute of a module: a parameter, buffer or submodule; a method (the class's, or one
// set on the instance: guarded when it is called); an int (a size, a dim), which is the
// module's structure: a constant, never an automatic dynamic input (torch:
// allow_unspec_int_on_nn_module = False). Null for anything else: read as an object's.
VarRef module_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
  if (VarRef r = module_registry_attr(ctx, obj, name)) return r;
  PyObject* attr = PyObject_GetAttrString(obj->obj, name.c_str());
  PyErr_Clear();
  bool method = attr && PyMethod_Check(attr) && PyFunction_Check(PyMethod_GET_FUNCTION(attr));
  if (attr && PyLong_CheckExact(attr) && obj->source) {
    SourceRef s = guards::Source::attr(obj->source, name);
    ctx.guards().add_constant_match(s, attr);
    VarRef r = make_constant(attr);  // steals the reference
    r->source = s;
    return r;
  }
  Py_XDECREF(attr);
  return method ? make_method(obj, name) : nullptr;
}

// getattr(obj, name) of an object, function or builtin, wrapped at its source (obj.name).
VarRef object_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
  PyObject* v = PyObject_GetAttrString(obj->obj, name.c_str());
  if (!v) {
    PyErr_Clear();
    unsupported(obj->describe() + " has no attribute '" + name + "'");
  }
  VarRef r = obj->source ? wrap(ctx, v, guards::Source::attr(obj->source, name)) : wrap_untracked(ctx, v);
  Py_DECREF(v);
  return r;
}

// An attribute of a constant: a method of it (called later), or a constant.
VarRef constant_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
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

}  // namespace

VarRef get_attr(TraceContext& ctx, const VarRef& obj, const std::string& name) {
  if (auto* t = obj->as<Var::Tuple>(); t && t->record) return record_field(*t, name);
  if (is_dynamic_number(obj))
    unsupported("reading ." + name + " of a dynamic Python number (a graph input since its value "
                "changed) is not supported by mini's capture");
  if ((obj->is(Var::Kind::Object) || obj->is(Var::Kind::Module)) && obj->source)
    if (VarRef stored = stored_attr(ctx, obj, name)) return stored;
  if (obj->is(Var::Kind::Object) && obj->source && plain_attributes(Py_TYPE(obj->obj)) &&
      plain_object_method(obj, name))
    return make_method(obj, name);
  switch (obj->kind()) {
    case Var::Kind::Tensor: return tensor_attr(ctx, obj, name);
    case Var::Kind::Module:
      if (VarRef r = module_attr(ctx, obj, name)) return r;
      return object_attr(ctx, obj, name);
    case Var::Kind::Object: case Var::Kind::Function: case Var::Kind::Builtin:
      return object_attr(ctx, obj, name);
    case Var::Kind::Constant: return constant_attr(ctx, obj, name);
    case Var::Kind::List: case Var::Kind::Tuple: case Var::Kind::Dict:
      return make_method(obj, name);
    default:
      unsupported("reading ." + name + " of " + obj->describe() + " is not supported by mini's capture");
  }
}

}  // namespace mini::capture
