// wrap.cpp — turning a real object read from the frame into a Var, with the guards that make
// the graph valid only while that object stays what it was (Dynamo's VariableBuilder).
#include "capture/trace_context.h"

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

static VarRef object_var(Var::Kind kind, PyObject* v, SourceRef source) {
  auto var = std::make_shared<Var>(kind);
  var->obj = v;
  Py_INCREF(v);
  var->source = std::move(source);
  return var;
}

static bool is_graph_function(PyObject* v) {
  PyObject* table = python_bridge().graph_functions;
  if (!table) return false;
  PyObject* name = PyDict_GetItemWithError(table, v);
  if (!name) PyErr_Clear();
  return name != nullptr;
}

VarRef wrap(TraceContext& ctx, PyObject* v, SourceRef src) {
  guards::GuardSet& g = ctx.guards();
  if (TensorImpl* t = guards::unwrap_tensor(v)) {
    g.add_tensor_match(src, v);
    auto found = ctx.tensor_node.find(v);
    if (found != ctx.tensor_node.end()) return make_tensor(found->second);
    graph::TensorMeta meta{t->sizes, t->strides, t->dtype, t->needs_grad()};
    int node = ctx.graph().add_input(meta, src->str());
    ctx.tensor_node[v] = node;
    ctx.trace.input_sources.push_back(src);
    ctx.trace.example_inputs.push_back(v);
    return make_tensor(node);
  }
  if (is_immutable_constant(v)) {
    if (!PySlice_Check(v) && !PyRange_Check(v) && v != Py_Ellipsis) g.add_constant_match(src, v);
    else g.add_type_match(src, v);
    return object_var(Var::Kind::Constant, v, src);
  }
  if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
    g.add_length_check(src, v);
    std::vector<VarRef> items;
    for (Py_ssize_t i = 0; i < Py_SIZE(v); i++) {
      PyObject* item = PyTuple_Check(v) ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i);
      items.push_back(wrap(ctx, item, guards::Source::item(src, (int)i)));
    }
    VarRef var = make_tuple_var(items, PyList_Check(v));
    var->source = src;
    return var;
  }
  if (is_module(v)) {
    g.add_id_match(src, v);
    return object_var(Var::Kind::Module, v, src);
  }
  if (PyFunction_Check(v)) {
    g.add_id_match(src, v);
    VarRef var = object_var(Var::Kind::Function, v, src);
    var->graph_function = is_graph_function(v);
    return var;
  }
  if (PyCFunction_Check(v) || (PyType_Check(v) && PyDict_GetItemString(PyEval_GetBuiltins(),
                                                                        ((PyTypeObject*)v)->tp_name) == v)) {
    g.add_id_match(src, v);
    return object_var(Var::Kind::Builtin, v, src);
  }
  g.add_id_match(src, v);  // Python modules, classes, dtype objects, other objects
  return object_var(Var::Kind::Object, v, src);
}

VarRef wrap_untracked(TraceContext& ctx, PyObject* v) {
  if (guards::unwrap_tensor(v))
    unsupported("a tensor that does not come from the frame's arguments, globals or closure "
                "(e.g. a default argument or a tensor stored on a plain object)");
  if (is_immutable_constant(v)) return object_var(Var::Kind::Constant, v, nullptr);
  if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
    std::vector<VarRef> items;
    for (Py_ssize_t i = 0; i < Py_SIZE(v); i++)
      items.push_back(wrap_untracked(ctx, PyTuple_Check(v) ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i)));
    return make_tuple_var(items, PyList_Check(v));
  }
  if (is_module(v)) return object_var(Var::Kind::Module, v, nullptr);
  if (PyFunction_Check(v)) {
    VarRef var = object_var(Var::Kind::Function, v, nullptr);
    var->graph_function = is_graph_function(v);
    return var;
  }
  if (PyCFunction_Check(v)) return object_var(Var::Kind::Builtin, v, nullptr);
  return object_var(Var::Kind::Object, v, nullptr);
}

}  // namespace mini::capture
