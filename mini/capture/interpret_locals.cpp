// interpret_locals.cpp — the FrameInterpreter's names (frame_interpreter.h): locals and
// cells, constants, globals (guarded where the user's code reads them), attributes and
// super(), and the stack's own shuffles.
#include "capture/frame_interpreter.h"

namespace mini::capture {

// Globals of mini's own Python modules (mini, mini.nn, ...): the library a Tensor method or
// a function reached without a source comes from. Its names are read as they are, unguarded,
// as Dynamo reads torch's own modules: they are not the user's to rebind between calls.
bool is_mini_library(PyObject* globals) {
  PyObject* name = PyDict_GetItemString(globals, "__name__");
  if (!name || !PyUnicode_Check(name)) return false;
  std::string n = PyUnicode_AsUTF8(name);
  return n == "mini" || n.rfind("mini.", 0) == 0;
}

VarRef FrameInterpreter::load_global(const std::string& name) {
  if (VarRef stored = find_store(ctx_, SideEffect::Kind::Global, globals_, name)) return stored;
  PyObject* key = PyUnicode_FromString(name.c_str());
  PyObject* v = PyDict_GetItemWithError(globals_, key);
  bool builtin = false;
  if (!v && !PyErr_Occurred()) {
    v = PyDict_GetItemWithError(builtins_, key);
    builtin = v != nullptr;
  }
  Py_DECREF(key);
  PyErr_Clear();
  if (!v) unsupported("name '" + name + "' is not defined");
  if (!globals_source_ && globals_ != ctx_.root_globals) return wrap_untracked(ctx_, v);  // mini's library
  SourceRef src;
  if (!globals_source_ || globals_ == ctx_.root_globals) src = guards::Source::global(name);
  else if (builtin) src = guards::Source::global_in(globals_source_, name);  // shadowed there later: a miss
  else src = guards::Source::dict_item(globals_source_, name);
  return wrap(ctx_, v, src);
}

// super() with no arguments in an inlined method: the class of its __class__ cell and its
// first argument, as CPython's super_init_without_args reads them from the frame.
VarRef FrameInterpreter::zero_arg_super() {
  static PyObject* class_cell = PyUnicode_InternFromString("__class__");
  VarRef cls;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(code_->co_localsplusnames); i++)
    if (PyUnicode_Compare(PyTuple_GET_ITEM(code_->co_localsplusnames, i), class_cell) == 0 && locals_[i])
      cls = cell_get(ctx_, locals_[i]);
  if (!cls || code_->co_argcount < 1 || !locals_[0]) unsupported("super() outside a method");
  return super_attr_owner(cls, load_local(0));
}

// What super(cls, self).name reads: the attribute of the first class after `cls` in self's
// type's MRO that has it. A function there is bound to self as a Partial (called, it is
// inlined with self first), read through self's class so that a guard holds it.
VarRef FrameInterpreter::super_attr_owner(const VarRef& cls, const VarRef& self) {
  if (!cls->obj || !PyType_Check(cls->obj) || !self->obj || !self->source)
    unsupported("super() of " + self->describe() + " is not supported by mini's capture");
  Var::Object super;
  super.super_self = self;
  super.super_class = cls;
  auto v = std::make_shared<Var>(std::move(super));
  v->obj = PyObject_CallFunctionObjArgs((PyObject*)&PySuper_Type, cls->obj, self->obj, nullptr);
  if (!v->obj) {
    PyErr_Clear();
    unsupported("super(" + cls->describe() + ", " + self->describe() + ") raised an error");
  }
  return v;
}

VarRef FrameInterpreter::super_attr(const VarRef& sup, const std::string& name) {
  const VarRef& self = sup->get<Var::Object>().super_self;
  const VarRef& cls = sup->get<Var::Object>().super_class;
  PyTypeObject* type = Py_TYPE(self->obj);
  PyObject* mro = type->tp_mro;
  Py_ssize_t n = PyTuple_GET_SIZE(mro), i = 0;
  while (i < n && PyTuple_GET_ITEM(mro, i) != cls->obj) i++;
  PyObject* key = PyUnicode_FromString(name.c_str());
  for (i++; i < n; i++) {
    PyObject* klass = PyTuple_GET_ITEM(mro, i);
    PyObject* found = PyDict_GetItemWithError(((PyTypeObject*)klass)->tp_dict, key);
    if (!found) continue;
    Py_DECREF(key);
    if (!PyFunction_Check(found)) unsupported("super()." + name + ", not a plain function, is not supported by mini's capture");
    // the self's type is guarded (its class fixes its MRO): the function is read through it
    ctx_.guards().add_type_match(self->source, self->obj);
    SourceRef fsrc = guards::Source::attr(
        guards::Source::item(guards::Source::attr(guards::Source::attr(self->source, "__class__"), "__mro__"), (int)i),
        name);
    auto fn = std::make_shared<Var>(Var::Function{});
    fn->obj = (Py_INCREF(found), found);
    fn->source = fsrc;
    return std::make_shared<Var>(Var::Partial{fn, {self}, make_dict({}, {})});
  }
  Py_DECREF(key);
  PyErr_Clear();
  unsupported("super() has no attribute '" + name + "'");
}

// ---- the opcode handlers ------------------------------------------------------------------

std::vector<VarRef> FrameInterpreter::pop_n(int n) {
  std::vector<VarRef> values(n);
  for (int i = n - 1; i >= 0; i--) values[i] = pop();
  return values;
}

void FrameInterpreter::push_attr(VarRef v, bool method) {
  NullPosition null_at = bytecode_dialect().call_null_position;
  if (method && null_at == NullPosition::BeforeCallable) push(null_var());
  push(std::move(v));
  if (method && null_at == NullPosition::AfterCallable) push(null_var());
}

// MAKE_CELL: the slot's value (an argument, or nothing) goes into a new cell; a root argument
// not read yet stays lazy: the cell reads it on first use. (The free slots hold their cells
// already: set by trace_frame or inline_function.)
VarRef FrameInterpreter::op_make_cell(const Instruction& in) {
  VarRef cell;
  if (in.arg < (int)lazy_.size() && lazy_[in.arg].first) {
    cell = std::make_shared<Var>(Var::Cell{});
    cell->source = lazy_[in.arg].second;
  } else {
    cell = new_cell(locals_[in.arg]);
  }
  set_local(in.arg, cell);
  return nullptr;
}

VarRef FrameInterpreter::op_local(const Instruction& in) {
  switch (in.op) {
    case Opcode::LOAD_FAST: case Opcode::LOAD_FAST_CHECK: case Opcode::LOAD_CLOSURE:
      push(load_local(in.arg));  // on a cell slot (a closure being built): the cell
      break;
    case Opcode::LOAD_FAST_AND_CLEAR:
      if (in.arg < (int)lazy_.size() && lazy_[in.arg].first) load_local(in.arg);
      push(locals_[in.arg] ? locals_[in.arg] : null_var());
      locals_[in.arg] = nullptr;
      break;
    case Opcode::LOAD_FAST_LOAD_FAST:
      push(load_local(first_of_pair(in)));
      push(load_local(second_of_pair(in)));
      break;
    case Opcode::STORE_FAST: set_local(in.arg, pop()); break;
    case Opcode::STORE_FAST_LOAD_FAST:
      set_local(first_of_pair(in), pop());
      push(load_local(second_of_pair(in)));
      break;
    case Opcode::STORE_FAST_STORE_FAST:
      set_local(first_of_pair(in), pop());
      set_local(second_of_pair(in), pop());
      break;
    default:  // DELETE_FAST
      set_local(in.arg, nullptr);
  }
  return nullptr;
}

VarRef FrameInterpreter::op_cell(const Instruction& in) {
  if (in.op == Opcode::LOAD_DEREF) push(cell_get(ctx_, load_local(in.arg)));
  else cell_set(ctx_, locals_[in.arg], pop());  // STORE_DEREF
  return nullptr;
}

VarRef FrameInterpreter::op_load_const(const Instruction& in) {
  push(wrap_untracked(ctx_, PyTuple_GET_ITEM(code_->co_consts, in.arg)));
  return nullptr;
}

VarRef FrameInterpreter::op_load_global(const Instruction& in) {
  bool null = load_global_pushes_null(in);
  VarRef v = load_global(PyUnicode_AsUTF8(name_at(load_global_name_index(in))));
  push_attr(v, null);  // `f(x)` on a global: the NULL of the call's layout
  return nullptr;
}

VarRef FrameInterpreter::op_store_global(const Instruction& in) {
  record_store(ctx_, SideEffect::Kind::Global, globals_, globals_ == ctx_.root_globals ? nullptr : globals_source_,
               PyUnicode_AsUTF8(name_at(in.arg)), pop());
  return nullptr;
}

VarRef FrameInterpreter::op_load_attr(const Instruction& in) {  // LOAD_ATTR, LOAD_METHOD
  std::string name = PyUnicode_AsUTF8(name_at(load_attr_name_index(in)));
  VarRef obj = pop();
  const Var::Object* object = obj->as<Var::Object>();
  bool super = object && object->super_self && obj->obj && PyObject_TypeCheck(obj->obj, &PySuper_Type);
  push_attr(super ? super_attr(obj, name) : get_attr(ctx_, obj, name), load_attr_is_method(in));
  return nullptr;
}

VarRef FrameInterpreter::op_load_super_attr(const Instruction& in) {  // 3.12+: super().name, super(cls, self).name
  std::string name = PyUnicode_AsUTF8(name_at(in.arg >> 2));
  VarRef self = pop(), cls = pop();
  pop();  // the global super
  push_attr(super_attr(super_attr_owner(cls, self), name), in.arg & 1);
  return nullptr;
}

VarRef FrameInterpreter::op_store_attr(const Instruction& in) {
  VarRef obj = pop(), value = pop();
  store_attr(ctx_, obj, PyUnicode_AsUTF8(name_at(in.arg)), value);
  return nullptr;
}

VarRef FrameInterpreter::op_stack(const Instruction& in) {
  switch (in.op) {
    case Opcode::POP_TOP: pop(); break;
    case Opcode::PUSH_NULL: push(null_var()); break;
    case Opcode::COPY: push(top(in.arg)); break;
    default: std::swap(top(1), top(in.arg));  // SWAP
  }
  return nullptr;
}

}  // namespace mini::capture
