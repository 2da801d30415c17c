// interpret_operators.cpp — the FrameInterpreter's operators (frame_interpreter.h): truth,
// binary operators and comparisons on tensors, dynamic sizes, dynamic numbers and constants;
// `is` and `in`; unary operators; f-strings.
#include "capture/frame_interpreter.h"

namespace mini::capture {

namespace {

// Python's operator for BINARY_OP's oparg (the in-place forms are oparg - 13).
PyObject* number_op(int op, PyObject* a, PyObject* b) {
  switch (op % 13) {
    case 0: return PyNumber_Add(a, b);
    case 1: return PyNumber_And(a, b);
    case 2: return PyNumber_FloorDivide(a, b);
    case 3: return PyNumber_Lshift(a, b);
    case 4: return PyNumber_MatrixMultiply(a, b);
    case 5: return PyNumber_Multiply(a, b);
    case 6: return PyNumber_Remainder(a, b);
    case 7: return PyNumber_Or(a, b);
    case 8: return PyNumber_Power(a, b, Py_None);
    case 9: return PyNumber_Rshift(a, b);
    case 10: return PyNumber_Subtract(a, b);
    case 11: return PyNumber_TrueDivide(a, b);
    case 12: return PyNumber_Xor(a, b);
  }
  return nullptr;
}

const char* binary_symbol(int op) {
  static const char* s[] = {"+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^"};
  return s[op % 13];
}

OpKind tensor_binary_kind(int op) {
  switch (op % 13) {
    case 0: return OpKind::Add;
    case 4: return OpKind::Matmul;
    case 5: return OpKind::Mul;
    case 8: return OpKind::Pow;
    case 10: return OpKind::Sub;
    case 11: return OpKind::Div;
  }
  unsupported(std::string("the operator ") + binary_symbol(op) + " on tensors is not supported by mini");
}

OpKind compare_kind(int richcmp) {
  switch (richcmp) {
    case Py_LT: return OpKind::Lt;
    case Py_LE: return OpKind::Le;
    case Py_EQ: return OpKind::Eq;
    case Py_NE: return OpKind::Ne;
    case Py_GT: return OpKind::Gt;
    default: return OpKind::Ge;
  }
}

// BINARY_OP's int operators that a SymInt keeps symbolic (+ - * // %).
bool int_op(int op, guards::SizeTerm::Op* out) {
  using Op = guards::SizeTerm::Op;
  switch (op % 13) {
    case 0: *out = Op::Add; return true;
    case 2: *out = Op::FloorDiv; return true;
    case 5: *out = Op::Mul; return true;
    case 6: *out = Op::Mod; return true;
    case 10: *out = Op::Sub; return true;
  }
  return false;
}


// The items of a tuple var or of a constant tuple.
bool tuple_items(const VarRef& v, std::vector<VarRef>* items) {
  if (const Var::Tuple* tuple = v->as<Var::Tuple>()) {
    *items = tuple->items;
    return true;
  }
  if (!is_constant(v) || !PyTuple_CheckExact(v->obj)) return false;
  items->clear();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v->obj); i++) {
    PyObject* item = PyTuple_GET_ITEM(v->obj, i);
    Py_INCREF(item);
    items->push_back(make_constant(item));
  }
  return true;
}

}  // namespace

bool FrameInterpreter::truth(const VarRef& v_in) {
  if (v_in->is(Var::Kind::SymInt))  // `if x.numel():` is x.numel() != 0, under a shape guard
    if (VarRef r = sym_compare(ctx_, Py_NE, v_in, make_constant(PyLong_FromLong(0))))
      return r->obj == Py_True;
  if (is_dynamic_number(v_in))  // `if n:` on a Python number made dynamic: n != 0, under a guard on n
    if (VarRef r = number_compare(ctx_, Py_NE, v_in, make_constant(PyLong_FromLong(0))))
      return r->obj == Py_True;
  VarRef v = specialize(ctx_, v_in);
  switch (v->kind()) {
    case Var::Kind::Constant: {
      int t = PyObject_IsTrue(v->obj);
      if (t < 0) checked(nullptr, "truth value");
      return t;
    }
    case Var::Kind::Tuple: case Var::Kind::List: return !v->sequence()->items.empty();
    case Var::Kind::Dict: return !v->get<Var::Dict>().keys.empty();
    case Var::Kind::DictView: return !v->get<Var::DictView>().dict->get<Var::Dict>().keys.empty();
    case Var::Kind::Tensor:
      unsupported("a Python branch on a tensor's value (`if tensor:` or a comparison of a tensor) "
                  "is data-dependent; use mini.where(cond, a, b) to keep it in the graph");
    case Var::Kind::Null: unsupported("internal: truth of NULL");
    case Var::Kind::Object: case Var::Kind::Module: {
      // Python asks type(obj).__bool__, then __len__; without either an object is true (its
      // type is guarded by the wrap). A Python function of the class is inlined.
      for (const char* name : {"__bool__", "__len__"}) {
        PyObject* key = PyUnicode_InternFromString(name);
        PyObject* method = _PyType_Lookup(Py_TYPE(v->obj), key);
        Py_DECREF(key);
        if (!method) continue;
        if (!v->is(Var::Kind::Object) || !v->source || !PyFunction_Check(method))
          unsupported(std::string("the truth value of a ") + Py_TYPE(v->obj)->tp_name + " object, whose " + name +
                      " is not a Python function of a plain object mini's capture can inline");
        return truth(call_var(ctx_, make_method(v, name), {}, {}));
      }
      return true;
    }
    default: return true;  // functions, builtins, iterators are truthy
  }
}

VarRef FrameInterpreter::binary(int op, const VarRef& a_in, const VarRef& b_in) {
  guards::SizeTerm::Op size_op;
  if (int_op(op, &size_op))  // int arithmetic on dynamic sizes stays symbolic
    if (VarRef r = sym_binary(ctx_, size_op, a_in, b_in)) return r;
  if (op % 13 == 8 && a_in->is(Var::Kind::SymInt) && b_in->is(Var::Kind::Constant) && PyLong_CheckExact(b_in->obj)) {
    // n ** k of a dynamic size, k a small int: n * n * ... (Python's int power)
    long k = PyLong_AsLong(b_in->obj);
    VarRef r = k >= 1 && k <= 4 ? a_in : nullptr;
    for (long i = 1; r && i < k; i++) r = sym_binary(ctx_, guards::SizeTerm::Op::Mul, r, a_in);
    if (r) return r;
    PyErr_Clear();
  }
  // a dynamic size in tensor math is a graph value (Dynamo passes the SymInt to the graph)
  bool tensor_math = is_tensor(a_in) || is_tensor(b_in);
  VarRef a = tensor_math ? sym_as_number(ctx_, a_in) : specialize(ctx_, a_in);
  VarRef b = tensor_math ? sym_as_number(ctx_, b_in) : specialize(ctx_, b_in);
  bool tensors = a->is(Var::Kind::Tensor) || b->is(Var::Kind::Tensor);
  if (tensors && is_python_number(a) && is_python_number(b)) {
    // Python arithmetic on a dynamic number: the graph computes it as int64 / float64
    // values, which is Python's arithmetic for + - *, and for / by a nonzero constant (true
    // division of two numbers is float64 there); a division by a graph value that may be
    // zero would not raise, and // % ** differ for negative or large values
    bool true_div_by_constant = op % 13 == 11 && is_constant(b) && PyObject_IsTrue(b->obj) == 1;
    if (op % 13 != 0 && op % 13 != 5 && op % 13 != 10 && !true_div_by_constant)
      unsupported(std::string("the operator ") + binary_symbol(op) + " on a dynamic Python number (a "
                  "graph input since its value changed): the graph would not compute it as Python "
                  "does, so it runs as Python");
    VarRef r = tensor_binary(ctx_, tensor_binary_kind(op), a, b);
    r->tensor().number = true;
    return r;
  }
  if (tensors && (op % 13 == 1 || op % 13 == 7)) {  // a & b, a | b: Tensor's Python dunder, inlined
    bool left = is_tensor(a);
    std::string dunder = std::string(left ? "__" : "__r") + (op % 13 == 1 ? "and__" : "or__");
    return call_tensor_method_as_found(ctx_, dunder, left ? a : b, {left ? b : a}, {});
  }
  if (tensors) {
    OpKind kind = tensor_binary_kind(op);
    // x += y on a tensor writes x in place (Tensor.__iadd__, __isub__, __imul__, __itruediv__);
    // a tensor has no other in-place operator, so x **= 2 rebinds x, as Python does
    bool has_inplace = kind == OpKind::Add || kind == OpKind::Sub || kind == OpKind::Mul || kind == OpKind::Div;
    // the method Python calls, unless the program replaced it on the class: a's __op__ (or
    // __iop__), else b's reflected __rop__
    static const char* names[] = {"add", "", "", "", "matmul", "mul", "", "", "pow", "", "sub", "truediv", ""};
    bool left = is_tensor(a);
    std::string dunder = std::string("__") + (left ? (op >= 13 && has_inplace ? "i" : "") : "r") + names[op % 13] + "__";
    if (left || is_tensor(b))
      if (VarRef r = call_replaced_tensor_method(ctx_, dunder, left ? a : b, {left ? b : a}, {})) return r;
    if (op >= 13 && has_inplace && is_tensor(a))
      return tensor_inplace_binary(ctx_, kind, a, b);
    return tensor_binary(ctx_, kind, a, b);
  }
  if (is_constant(a) && is_constant(b))
    return make_constant(checked(number_op(op, a->obj, b->obj), std::string("constant ") + binary_symbol(op)));
  if ((a->is(Var::Kind::Tuple) || a->is(Var::Kind::List)) && op % 13 == 0 && a->kind() == b->kind()) {
    std::vector<VarRef> items = a->sequence()->items;
    const std::vector<VarRef>& more = b->sequence()->items;
    items.insert(items.end(), more.begin(), more.end());
    return make_tuple_var(items, a->is(Var::Kind::List));
  }
  std::vector<VarRef> left, right;  // a tuple and a constant one: x.shape + (1,)
  if (op % 13 == 0 && tuple_items(a, &left) && tuple_items(b, &right)) {
    left.insert(left.end(), right.begin(), right.end());
    return make_tuple_var(left);
  }
  unsupported("the operator " + std::string(binary_symbol(op)) + " on " + a->describe() + " and " +
              b->describe() + " is not supported by mini's capture");
}

// `a is b` for two Python objects, decided now under guards that keep the answer: a plain
// object is guarded by its type only, so another pairing of objects of the same types must
// not reuse it (DUPLICATE_INPUT between two sources, ID_MATCH against a fixed object).
static bool same_object(TraceContext& ctx, const VarRef& a, const VarRef& b) {
  bool same = a->obj == b->obj;
  auto loose = [](const VarRef& v) {
    return (v->is(Var::Kind::Object) || v->is(Var::Kind::Module)) && v->source &&
           !PyType_Check(v->obj) && !PyModule_Check(v->obj);
  };
  if (!loose(a) && !loose(b)) return same;
  if (a->source && b->source) {
    ctx.guards().add_duplicate_input(a->source, b->source, same);
    return same;
  }
  const VarRef& tracked = loose(a) ? a : b;
  if (Py_TYPE(a->obj) != Py_TYPE(b->obj)) return false;  // the type guard keeps them apart
  // the other object has no source: it is fixed by what the trace is guarded on (x.dtype by
  // x's guards, a constant), so pinning the tracked one keeps the answer, same or not
  // (x.dtype == mini.float64 where x is float32: mini.float64 stays that object)
  ctx.guards().add_id_match(tracked->source, tracked->obj);
  return same;
}

// Whether `==` on v is identity: its class keeps object's __eq__ and __ne__ (a builtin
// constant's own __eq__ answers NotImplemented for a plain object, which is identity too).
static bool identity_equality(const VarRef& v) {
  if (!v->is(Var::Kind::Object) && !v->is(Var::Kind::Module)) return true;
  static PyObject* eq = PyUnicode_InternFromString("__eq__");
  static PyObject* ne = PyUnicode_InternFromString("__ne__");
  return _PyType_Lookup(Py_TYPE(v->obj), eq) == _PyType_Lookup(&PyBaseObject_Type, eq) &&
         _PyType_Lookup(Py_TYPE(v->obj), ne) == _PyType_Lookup(&PyBaseObject_Type, ne);
}

VarRef FrameInterpreter::compare(int richcmp, const VarRef& a_in, const VarRef& b_in) {
  // A dynamic size against an int or another size: decided now, with a shape guard that
  // keeps it so.
  if (VarRef r = sym_compare(ctx_, richcmp, a_in, b_in)) return r;
  // A Python number made dynamic against a constant (`if lr > 0.5:`): the same, with a guard
  // on the number (torch's SymFloat / SymInt guard); the number stays a graph input
  if (VarRef r = number_compare(ctx_, richcmp, a_in, b_in)) return r;
  VarRef a = specialize(ctx_, a_in), b = specialize(ctx_, b_in);
  if (a->is(Var::Kind::Tensor) || b->is(Var::Kind::Tensor)) {
    // the method Python calls, unless the program replaced it on the class: a's, else b's
    // reflected one (a < b is b > a)
    static const char* names[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
    static const int reflected[] = {Py_GT, Py_GE, Py_EQ, Py_NE, Py_LT, Py_LE};
    bool left = is_tensor(a);
    if (left || is_tensor(b))
      if (VarRef r = call_replaced_tensor_method(ctx_, names[left ? richcmp : reflected[richcmp]], left ? a : b,
                                                 {left ? b : a}, {}))
        return r;
    VarRef r = tensor_binary(ctx_, compare_kind(richcmp), a, b);
    r->tensor().number = is_python_number(a) && is_python_number(b);  // a Python bool
    return r;
  }
  if (VarRef ca = as_constant(ctx_, a)) {  // tuples of numbers: x.shape == (3, 4)
    if (VarRef cb = as_constant(ctx_, b)) {
      a = ca;
      b = cb;
    }
  }
  if (is_constant(a) && is_constant(b))
    return make_constant(checked(PyObject_RichCompare(a->obj, b->obj, richcmp), "comparison"));
  if (a->obj && b->obj && (richcmp == Py_EQ || richcmp == Py_NE)) {
    if (identity_equality(a) && identity_equality(b)) {
      bool same = same_object(ctx_, a, b);
      return make_constant(PyBool_FromLong(richcmp == Py_EQ ? same : !same));
    }
    // a class's own __eq__ (a dataclass's, say): inlined; != is its negation while the
    // class keeps object's __ne__
    static PyObject* ne = PyUnicode_InternFromString("__ne__");
    bool default_ne = _PyType_Lookup(Py_TYPE(a->obj), ne) == _PyType_Lookup(&PyBaseObject_Type, ne);
    PyObject* eq = a->is(Var::Kind::Object) && a->source && default_ne
                       ? _PyType_Lookup(Py_TYPE(a->obj), PyUnicode_InternFromString("__eq__")) : nullptr;
    if (eq && PyFunction_Check(eq)) {
      VarRef r = call_var(ctx_, make_method(a, "__eq__"), {b}, {});
      if (!(r->is(Var::Kind::Constant) && r->obj == Py_NotImplemented)) {
        bool t = truth(r);
        return make_constant(PyBool_FromLong(richcmp == Py_EQ ? t : !t));
      }
    }
    unsupported("comparing " + a->describe() + " with " + b->describe() + ", whose class defines __eq__, "
                "is not supported by mini's capture (only a Python __eq__ of the left operand is inlined)");
  }
  unsupported("comparing " + a->describe() + " with " + b->describe() + " is not supported by mini's capture");
}

// ---- the opcode handlers ------------------------------------------------------------------

VarRef FrameInterpreter::op_binary(const Instruction& in) {
  VarRef b = pop(), a = pop();
  push(binary(in.arg, a, b));
  return nullptr;
}

VarRef FrameInterpreter::op_compare(const Instruction& in) {
  VarRef b = pop(), a = pop();
  push(compare(compare_op_richcompare(in), a, b));
  return nullptr;
}

VarRef FrameInterpreter::op_is(const Instruction& in) {
  VarRef b = specialize(ctx_, pop()), a = specialize(ctx_, pop());
  bool same;
  if (a == b) {
    same = true;  // the same Var: a list or dict made while tracing, say
  } else if (a->obj && b->obj) {
    same = same_object(ctx_, a, b);
  } else if (a->is(Var::Kind::Tensor) && b->is(Var::Kind::Tensor)) {
    same = a->tensor().node == b->tensor().node;
    auto input = [&](int node) { return ctx_.graph().nodes[node].kind == graph::NodeKind::Input; };
    if (!same && input(a->tensor().node) && input(b->tensor().node))  // two sources: one tensor on some calls?
      unsupported("`is` between two input tensors (whether they are one tensor is not guarded)");
  } else {
    same = false;  // a tensor (or a container) is not None or any constant
  }
  push(make_constant(PyBool_FromLong(in.arg ? !same : same)));
  return nullptr;
}

// `item in container`, for a container the trace holds: a dict's keys, or a tuple or list
// compared up to the first match with constants only (anything else could run a tensor's ==).
static bool contains_in_trace(const VarRef& container, const VarRef& item) {
  if (container->is(Var::Kind::Dict)) return dict_find(container, item) >= 0;
  for (auto& v : container->sequence()->items) {
    if (!is_constant(v) || !is_constant(item))
      unsupported("`in` comparing " + item->describe() + " with " + v->describe());
    int eq = v->obj == item->obj ? 1 : PyObject_RichCompareBool(v->obj, item->obj, Py_EQ);
    if (eq < 0) checked(nullptr, "in");
    if (eq == 1) return true;
  }
  return false;
}

VarRef FrameInterpreter::op_contains(const Instruction& in) {
  VarRef container = pop(), item = pop();
  if (VarRef c = as_constant(ctx_, container)) container = c;  // 3 in x.shape
  if (const Var::DictView* view = container->as<Var::DictView>(); view && view->name == "keys")
    container = VarRef(view->dict);
  int found;
  if (container->is(Var::Kind::Dict) || container->is(Var::Kind::Tuple) || container->is(Var::Kind::List)) {
    found = contains_in_trace(container, item);
  } else {
    if (!is_constant(container) || !is_constant(item))
      unsupported("`in` on " + container->describe() + " is not supported by mini's capture");
    found = PySequence_Contains(container->obj, item->obj);
    if (found < 0) checked(nullptr, "in");
  }
  push(make_constant(PyBool_FromLong(in.arg ? !found : found)));
  return nullptr;
}

VarRef FrameInterpreter::op_unary(const Instruction& in) {  // UNARY_NEGATIVE, UNARY_INVERT
  VarRef a = pop();
  if (in.op == Opcode::UNARY_INVERT) {  // ~t: Tensor.__invert__, mini's Python, inlined (one definition)
    if (a->is(Var::Kind::Tensor)) push(call_tensor_method_as_found(ctx_, "__invert__", a, {}, {}));
    else if (is_constant(a)) push(make_constant(checked(PyNumber_Invert(a->obj), "~x")));
    else unsupported("~" + a->describe());
    return nullptr;
  }
  if (VarRef n = sym_negate(ctx_, a)) {
    push(n);
  } else if (a->is(Var::Kind::Tensor)) {
    VarRef r = call_replaced_tensor_method(ctx_, "__neg__", a, {}, {});
    if (!r) {
      r = tensor_unary(ctx_, OpKind::Neg, a);
      r->tensor().number = a->tensor().number;
    }
    push(r);
  } else if (is_constant(a)) {
    push(make_constant(checked(PyNumber_Negative(a->obj), "-x")));
  } else {
    unsupported("-" + a->describe());
  }
  return nullptr;
}

VarRef FrameInterpreter::op_truth(const Instruction& in) {  // UNARY_NOT, TO_BOOL
  bool t = truth(pop());
  push(make_constant(PyBool_FromLong(in.op == Opcode::UNARY_NOT ? !t : t)));
  return nullptr;
}

VarRef FrameInterpreter::op_intrinsic(const Instruction& in) {  // CALL_INTRINSIC_1
  VarRef a = pop();
  if (in.arg == (int)Intrinsic1::ListToTuple) push(make_tuple_var(a->get<Var::List>().items));
  else if (in.arg == (int)Intrinsic1::UnaryPositive) push(a);
  else unsupported(std::string("the intrinsic ") + std::to_string(in.arg) + " is not supported");
  return nullptr;
}

// f-strings: formatted while tracing, from values known then (constants, static sizes); a
// tensor's text is known only when it runs (a graph break, as in Dynamo).
VarRef FrameInterpreter::op_format(const Instruction& in) {
  bool has_spec = in.op == Opcode::FORMAT_WITH_SPEC || (in.op == Opcode::FORMAT_VALUE && (in.arg & 4));
  VarRef spec = has_spec ? pop() : nullptr;
  VarRef v = pop();
  VarRef c = as_constant(ctx_, specialize(ctx_, v));
  if (!c || (spec && !(spec = as_constant(ctx_, spec))))
    unsupported(std::string("the instruction ") + in.name + " is not supported by mini's capture for " +
                v->describe() + ": an f-string of a value known only when the graph runs");
  int conversion = in.op == Opcode::CONVERT_VALUE ? in.arg : in.op == Opcode::FORMAT_VALUE ? (in.arg & 3) : 0;
  PyObject* text = conversion == 1 ? PyObject_Str(c->obj) : conversion == 2 ? PyObject_Repr(c->obj)
                   : conversion == 3 ? PyObject_ASCII(c->obj) : (Py_INCREF(c->obj), c->obj);
  if (text && in.op != Opcode::CONVERT_VALUE) {
    PyObject* formatted = PyObject_Format(text, spec ? spec->obj : nullptr);
    Py_DECREF(text);
    text = formatted;
  }
  push(make_constant(checked(text, "an f-string")));
  return nullptr;
}

VarRef FrameInterpreter::op_build_string(const Instruction& in) {
  std::vector<VarRef> parts = pop_n(in.arg);
  PyObject* joined = PyUnicode_FromString("");
  for (const VarRef& part : parts) {
    if (!is_constant(part) || !PyUnicode_Check(part->obj)) {
      Py_DECREF(joined);
      unsupported("joining " + part->describe() + " into a string");
    }
    PyObject* next = PyUnicode_Concat(joined, part->obj);
    Py_DECREF(joined);
    joined = checked(next, "an f-string");
  }
  push(make_constant(joined));
  return nullptr;
}

}  // namespace mini::capture
