// tracer.cpp — the instruction loop of symbolic evaluation, and trace_frame().
#include "capture/tracer.h"

#include <cstring>

#include "capture/convert_frame.h"
#include "capture/frame_hook.h"
#include "capture/trace_context.h"
#include "tensor/autograd.h"
#include "tensor/errors.h"

namespace mini::capture {

PythonBridge& python_bridge() {
  static PythonBridge bridge;
  return bridge;
}

void unsupported(const std::string& reason) { throw Unsupported{reason}; }

std::string error_type_name(const Error& e) {
  switch (e.kind) {
    case Error::Kind::Type: return "TypeError";
    case Error::Kind::Value: return "ValueError";
    case Error::Kind::Index: return "IndexError";
    default: return "RuntimeError";
  }
}

std::string Var::describe() const {
  switch (kind) {
    case Kind::Tensor: return number ? "a Python number made dynamic" : "Tensor";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Null: return "NULL";
    case Kind::Method: return "method " + name;
    case Kind::Iterator: return "iterator";
    case Kind::Dict: return "dict";
    case Kind::DictView: return "dict." + name + "()";
    case Kind::Cell: return "cell";
    case Kind::Partial: return "functools.partial(" + self->describe() + ", ...)";
    default: break;
  }
  if (!obj) return "?";
  PyObject* r = PyObject_Repr(obj);
  std::string s = r ? PyUnicode_AsUTF8(r) : "?";
  Py_XDECREF(r);
  PyErr_Clear();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

VarRef make_constant(PyObject* value) {
  auto v = std::make_shared<Var>(Var::Kind::Constant);
  v->obj = value;
  return v;
}
VarRef make_tensor(int node) {
  auto v = std::make_shared<Var>(Var::Kind::Tensor);
  v->node = node;
  return v;
}
bool is_python_number(const VarRef& v) {
  if (v->is(Var::Kind::Tensor)) return v->number;
  return v->is(Var::Kind::Constant) && (PyLong_Check(v->obj) || PyFloat_Check(v->obj));
}
VarRef make_tuple_var(std::vector<VarRef> items, bool list) {
  auto v = std::make_shared<Var>(list ? Var::Kind::List : Var::Kind::Tuple);
  v->items = std::move(items);
  return v;
}
VarRef make_method(VarRef self, const std::string& name) {
  auto v = std::make_shared<Var>(Var::Kind::Method);
  v->self = std::move(self);
  v->name = name;
  return v;
}
VarRef make_dict(std::vector<VarRef> keys, std::vector<VarRef> values) {
  auto v = std::make_shared<Var>(Var::Kind::Dict);
  v->keys = std::move(keys);
  v->items = std::move(values);
  return v;
}
VarRef null_var() {
  static VarRef null = std::make_shared<Var>(Var::Kind::Null);
  return null;
}

// ---- cells, dicts and stores: the state the traced code changes ---------------------------

VarRef cell_var(TraceContext& ctx, PyObject* cell, SourceRef contents_source, SourceRef cell_source) {
  auto found = ctx.cells.find(cell);
  if (found != ctx.cells.end()) return found->second;  // one Var per real cell: every closure sees each store
  auto v = std::make_shared<Var>(Var::Kind::Cell);
  v->obj = cell;
  Py_INCREF(cell);
  v->source = std::move(contents_source);
  v->cell_source = std::move(cell_source);
  ctx.cells[cell] = v;
  return v;
}

VarRef new_cell(VarRef contents) {
  auto v = std::make_shared<Var>(Var::Kind::Cell);
  v->contents = std::move(contents);
  v->contents_read = true;
  return v;
}

VarRef cell_get(TraceContext& ctx, const VarRef& cell) {
  if (!cell || !cell->is(Var::Kind::Cell)) unsupported("internal: a closure variable without its cell");
  if (!cell->contents_read) {  // first read of a real cell: its value at entry, guarded
    PyObject* v = cell->source ? guards::fetch(*cell->source, ctx.root) : nullptr;
    if (v) {
      VarRef wrapped;
      try {
        wrapped = wrap(ctx, v, cell->source);
      } catch (...) {
        Py_DECREF(v);
        throw;
      }
      Py_DECREF(v);
      cell->contents = wrapped;
    }
    cell->contents_read = true;
  }
  if (!cell->contents)
    unsupported("a closure variable referenced before assignment (an empty cell)");
  return cell->contents;
}

void cell_set(TraceContext& ctx, const VarRef& cell, VarRef value) {
  if (!cell || !cell->is(Var::Kind::Cell)) unsupported("internal: a store into a closure variable without its cell");
  cell->contents = std::move(value);
  cell->contents_read = true;
  ctx.mutations++;
  if (cell->cell_source && std::find(ctx.stored_cells.begin(), ctx.stored_cells.end(), cell) == ctx.stored_cells.end())
    ctx.stored_cells.push_back(cell);
}

int dict_find(const VarRef& dict, const VarRef& key) {
  if (!key->is(Var::Kind::Constant)) unsupported("a dict key that is not a Python constant (" + key->describe() + ")");
  for (size_t i = 0; i < dict->keys.size(); i++) {
    PyObject* k = dict->keys[i]->obj;
    if (k == key->obj) return (int)i;
    int eq = PyObject_RichCompareBool(k, key->obj, Py_EQ);
    if (eq < 0) { PyErr_Clear(); unsupported("comparing dict keys raised an error"); }
    if (eq) return (int)i;
  }
  return -1;
}

void dict_set(TraceContext& ctx, const VarRef& dict, const VarRef& key, VarRef value) {
  if (!made_in_trace(dict)) {
    // a dict of the frame's (a global, an argument): the Var changes, so that the trace reads
    // what it stored, and the store is a side effect replayed into the real dict
    if (!dict->source || !dict->obj || !PyDict_CheckExact(dict->obj) || !key->is(Var::Kind::Constant) ||
        !PyUnicode_Check(key->obj))
      unsupported("a store into a dict that comes from outside the compiled code (other than a plain dict of str "
                  "keys read from the frame) is not supported by mini's capture");
    int i = dict_find(dict, key);
    if (i < 0) {
      dict->keys.push_back(key);
      dict->items.push_back(value);
    } else {
      dict->items[i] = value;
    }
    record_store(ctx, SideEffect::Kind::Item, dict->obj, dict->source, PyUnicode_AsUTF8(key->obj), value);
    return;
  }
  int i = dict_find(dict, key);
  if (PyObject_Hash(key->obj) == -1) { PyErr_Clear(); unsupported("an unhashable dict key"); }
  if (i >= 0) dict->items[i] = std::move(value);
  else { dict->keys.push_back(key); dict->items.push_back(std::move(value)); }
  ctx.mutations++;
}

bool made_in_trace(const VarRef& v) { return !v->source && !v->obj; }

VarRef find_store(TraceContext& ctx, SideEffect::Kind kind, PyObject* target, const std::string& name) {
  for (auto& s : ctx.stores)
    if (s.kind == kind && s.target == target && s.name == name) return s.value;
  return nullptr;
}

void record_store(TraceContext& ctx, SideEffect::Kind kind, PyObject* target, SourceRef target_source,
                  const std::string& name, VarRef value) {
  ctx.mutations++;
  for (auto& s : ctx.stores)
    if (s.kind == kind && s.target == target && s.name == name) { s.value = std::move(value); return; }
  ctx.stores.push_back({kind, target, std::move(target_source), name, std::move(value)});
}

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

// Borrowed -> owned, raising Unsupported with Python's error text on failure.
PyObject* checked(PyObject* result, const std::string& what) {
  if (result) return result;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string msg = what;
  if (value) {
    PyObject* s = PyObject_Str(value);
    if (s) msg += ": " + std::string(PyUnicode_AsUTF8(s));
    Py_XDECREF(s);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  unsupported(msg);
}

bool is_constant(const VarRef& v) { return v->is(Var::Kind::Constant); }

// The items of a tuple var or of a constant tuple.
bool tuple_items(const VarRef& v, std::vector<VarRef>* items) {
  if (v->is(Var::Kind::Tuple)) {
    *items = v->items;
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

// ---- one frame ------------------------------------------------------------------------

class FrameInterpreter {
 public:
  FrameInterpreter(TraceContext& ctx, PyCodeObject* code, PyObject* globals, SourceRef globals_source,
                   std::vector<VarRef> locals)
      : ctx_(ctx), code_(code), globals_(globals), globals_source_(std::move(globals_source)),
        locals_(std::move(locals)) {
    if (!decode_instructions(code, &ins_)) checked(nullptr, "cannot decode bytecode");
    index_of_.assign(Py_SIZE(code) + 2, -1);  // Py_SIZE of a code object: its code units
    for (size_t i = 0; i < ins_.size(); i++) index_of_[ins_[i].offset / 2] = (int)i;
    // a function's builtins: its module's __builtins__ (as CPython's function objects)
    PyObject* b = PyDict_GetItemString(globals, "__builtins__");
    if (b && PyModule_Check(b)) b = PyModule_GetDict(b);
    builtins_ = b && PyDict_Check(b) ? b : PyEval_GetBuiltins();
    locals_.resize(code->co_nlocalsplus);
  }

  VarRef run();
  bool root_ = false;
  // A generator's frame run to its end: each yielded value is appended here (see
  // inline_function); null in any other frame, where yield is not traced.
  std::vector<VarRef>* yielded_ = nullptr;
  std::vector<VarRef> exit_stack_, exit_locals_;  // the state before the breaking instruction
  std::vector<std::pair<PyObject*, SourceRef>> exit_lazy_;
  PyObject* exit_kw_names_ = nullptr;
  int exit_kw_names_offset_ = -1;
  size_t exit_graph_size_ = SIZE_MAX;  // the graph's nodes before the breaking instruction

  void set_start(int offset, std::vector<VarRef> stack) {
    jump(offset);
    stack_ = std::move(stack);
  }
  void set_cell(int i, VarRef cell) {  // the root frame's cell and free slots
    locals_[i] = std::move(cell);
    if (i < (int)lazy_.size()) lazy_[i].first = nullptr;
  }
  // Retracing after a step that failed having changed Vars in place (see trace_frame): the
  // root stops before step `stop_step` with this reason instead of running it.
  int stop_step = -1;
  std::string stop_reason;
  int failed_step_mutated = -1;  // the step that failed after changing a Var, or -1

 private:
  VarRef step(const Instruction& in);
  bool can_run_eagerly(const Instruction& in);
  bool in_handler(const Instruction& in, const std::vector<VarRef>& stack);
  Trace::Exit exit_at(const Instruction& in, const std::vector<VarRef>& stack, bool skip_unit, bool in_callee);
  bool in_loop(size_t index);
  VarRef pop() {
    if (stack_.empty()) unsupported("internal: stack underflow");
    VarRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  VarRef& top(int n = 1) { return stack_[stack_.size() - n]; }
  void push(VarRef v) { stack_.push_back(std::move(v)); }
  void jump(int offset) {
    int i = offset / 2 < (int)index_of_.size() ? index_of_[offset / 2] : -1;
    if (i < 0) unsupported("internal: jump to a non-instruction offset");
    pc_ = i;
  }
  PyObject* name_at(int i) { return PyTuple_GET_ITEM(code_->co_names, i); }
  std::string local_name(int i) {
    return PyUnicode_AsUTF8(PyTuple_GET_ITEM(code_->co_localsplusnames, i));
  }
  void set_local(int i, VarRef v) {
    if (i < (int)lazy_.size()) lazy_[i].first = nullptr;
    locals_[i] = v && v->is(Var::Kind::Null) ? nullptr : std::move(v);
  }
  VarRef load_local(int i) {
    if (i < (int)lazy_.size() && lazy_[i].first) {  // first read of an argument: wrap and guard it
      locals_[i] = wrap(ctx_, lazy_[i].first, lazy_[i].second);
      lazy_[i].first = nullptr;
    }
    if (i >= (int)locals_.size() || !locals_[i])
      unsupported("local variable '" + local_name(i) + "' referenced before assignment");
    return locals_[i];
  }

 public:
  // The root frame's entry values, wrapped (and guarded) only when first read, as
  // Dynamo's lazy variable trackers: an argument the code never reads is never guarded.
  std::vector<std::pair<PyObject*, SourceRef>> lazy_;

 private:
  void set_line(const Instruction& in);
  VarRef load_global(const std::string& name);
  bool truth(const VarRef& v);
  void do_call(int argc, PyObject* kw_names, Kwargs extra_kwargs = {});
  VarRef zero_arg_super();
  VarRef super_attr_owner(const VarRef& cls, const VarRef& self);
  VarRef super_attr(const VarRef& sup, const std::string& name);
  VarRef make_function(const VarRef& code);
  void set_function_attribute(const VarRef& fn, int flag, const VarRef& value);
  VarRef binary(int op, const VarRef& a, const VarRef& b);
  VarRef compare(int richcmp, const VarRef& a, const VarRef& b);
  VarRef subscript(const VarRef& obj, const VarRef& index);
  VarRef iterate(const VarRef& v);
  std::vector<VarRef> unpack(const VarRef& v, size_t n);

  TraceContext& ctx_;
  PyCodeObject* code_;
  PyObject* globals_;
  SourceRef globals_source_;  // null: these are the root frame's globals
  PyObject* builtins_ = nullptr;
  std::vector<Instruction> ins_;
  std::vector<int> index_of_;  // code unit -> instruction index
  std::vector<VarRef> locals_;
  std::vector<VarRef> stack_;
  PyObject* kw_names_ = nullptr;  // Borrowed: KW_NAMES' tuple for the next CALL
  int kw_names_offset_ = -1;      // that KW_NAMES instruction's offset
  int pc_ = 0;
  int line_ = -1;
};

void FrameInterpreter::set_line(const Instruction& in) {
  if (in.line < 0 || in.line == line_) return;
  line_ = in.line;
  std::string file = PyUnicode_AsUTF8(code_->co_filename);
  std::string fn = PyUnicode_AsUTF8(code_->co_name);
  ctx_.current_location = file + ":" + std::to_string(line_) + " in " + fn;
  std::string text;
  // set under the GIL, not by a C++ static initializer: its guard would be held across the
  // import, which lets another thread run and block on the guard holding the GIL (a deadlock)
  static PyObject* linecache = nullptr;
  if (!linecache) linecache = PyImport_ImportModule("linecache");
  if (linecache) {
    PyObject* l = PyObject_CallMethod(linecache, "getline", "si", file.c_str(), line_);
    if (l && PyUnicode_Check(l)) text = PyUnicode_AsUTF8(l);
    Py_XDECREF(l);
  }
  PyErr_Clear();
  size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t\r\n");
  text = b == std::string::npos ? "" : text.substr(b, e - b + 1);
  ctx_.current_code = "File: " + ctx_.current_location + ", code: " + text;
}

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

bool FrameInterpreter::truth(const VarRef& v_in) {
  if (v_in->is(Var::Kind::SymInt))  // `if x.numel():` is x.numel() != 0, under a shape guard
    if (VarRef r = sym_compare(ctx_, Py_NE, v_in, make_constant(PyLong_FromLong(0))))
      return r->obj == Py_True;
  if (v_in->number)  // `if n:` on a Python number made dynamic: n != 0, under a guard on n
    if (VarRef r = number_compare(ctx_, Py_NE, v_in, make_constant(PyLong_FromLong(0))))
      return r->obj == Py_True;
  VarRef v = specialize(ctx_, v_in);
  switch (v->kind) {
    case Var::Kind::Constant: {
      int t = PyObject_IsTrue(v->obj);
      if (t < 0) checked(nullptr, "truth value");
      return t;
    }
    case Var::Kind::Tuple: case Var::Kind::List: return !v->items.empty();
    case Var::Kind::Dict: return !v->keys.empty();
    case Var::Kind::DictView: return !v->self->keys.empty();
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
  bool tensor_math = (a_in->is(Var::Kind::Tensor) && !a_in->number) || (b_in->is(Var::Kind::Tensor) && !b_in->number);
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
    r->number = true;
    return r;
  }
  if (tensors && (op % 13 == 1 || op % 13 == 7)) {  // a & b, a | b: Tensor's Python dunder, inlined
    bool left = a->is(Var::Kind::Tensor) && !a->number;
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
    bool left = a->is(Var::Kind::Tensor) && !a->number;
    std::string dunder = std::string("__") + (left ? (op >= 13 && has_inplace ? "i" : "") : "r") + names[op % 13] + "__";
    if (left || (b->is(Var::Kind::Tensor) && !b->number))
      if (VarRef r = call_replaced_tensor_method(ctx_, dunder, left ? a : b, {left ? b : a}, {})) return r;
    if (op >= 13 && has_inplace && a->is(Var::Kind::Tensor) && !a->number)
      return tensor_inplace_binary(ctx_, kind, a, b);
    return tensor_binary(ctx_, kind, a, b);
  }
  if (is_constant(a) && is_constant(b))
    return make_constant(checked(number_op(op, a->obj, b->obj), std::string("constant ") + binary_symbol(op)));
  if ((a->is(Var::Kind::Tuple) || a->is(Var::Kind::List)) && op % 13 == 0 && a->kind == b->kind) {
    std::vector<VarRef> items = a->items;
    items.insert(items.end(), b->items.begin(), b->items.end());
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
  const VarRef& fixed = loose(a) ? b : a;
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
    bool left = a->is(Var::Kind::Tensor) && !a->number;
    if (left || (b->is(Var::Kind::Tensor) && !b->number))
      if (VarRef r = call_replaced_tensor_method(ctx_, names[left ? richcmp : reflected[richcmp]], left ? a : b,
                                                 {left ? b : a}, {}))
        return r;
    VarRef r = tensor_binary(ctx_, compare_kind(richcmp), a, b);
    r->number = is_python_number(a) && is_python_number(b);  // a Python bool
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

// A Sequential's or ModuleList's submodules, as their __iter__ and __getitem__ (one pair, of
// their base class) read them: module._modules,
// in order, under a guard that its keys stay these keys in this order (so another Sequential
// of the same layout reuses the graph, and one with a layer more or less does not). Returns
// the dict (New) and its source (null for a module without one). Other module classes
// define iteration and indexing their own way: those are unsupported.
static PyObject* sequential_modules(TraceContext& ctx, const VarRef& module, const char* method,
                                    SourceRef* dict_src) {
  static PyObject* sequential = nullptr;  // set under the GIL (see set_line)
  if (!sequential) sequential = [] {
    PyObject* nn = PyImport_ImportModule("mini.nn");
    PyObject* cls = nn ? PyObject_GetAttrString(nn, "Sequential") : nullptr;
    Py_XDECREF(nn);
    PyErr_Clear();
    return cls;
  }();
  PyObject* own = PyObject_GetAttrString((PyObject*)Py_TYPE(module->obj), method);
  PyObject* sequentials = sequential ? PyObject_GetAttrString(sequential, method) : nullptr;
  bool same = own && own == sequentials;
  Py_XDECREF(own);
  Py_XDECREF(sequentials);
  PyErr_Clear();
  PyObject* mods = same ? PyObject_GetAttrString(module->obj, "_modules") : nullptr;
  if (!mods || !PyDict_Check(mods)) {
    Py_XDECREF(mods);
    PyErr_Clear();
    unsupported(std::string(method == std::string("__iter__") ? "iterating" : "indexing") + " a " +
                Py_TYPE(module->obj)->tp_name + ": mini's capture knows only Sequential's and ModuleList's " + method);
  }
  *dict_src = module->source ? guards::Source::attr(module->source, "_modules") : nullptr;
  if (*dict_src) ctx.guards().add_dict_keys_match(*dict_src, mods);
  return mods;
}

VarRef FrameInterpreter::subscript(const VarRef& obj, const VarRef& index_in) {
  if (is_object_record(obj)) unsupported("indexing a " + obj->self->describe() + " (not a sequence)");
  if (obj->is(Var::Kind::Tensor) && obj->number) unsupported("indexing a dynamic Python number");
  if (obj->is(Var::Kind::Tensor)) {  // the index as given: a dynamic size can stay a slice bound
    if (VarRef r = call_replaced_tensor_method(ctx_, "__getitem__", obj, {index_in}, {})) return r;
    return tensor_getitem(ctx_, obj, index_in);
  }
  VarRef index = specialize(ctx_, index_in);
  if ((obj->is(Var::Kind::Tuple) || obj->is(Var::Kind::List)) && is_constant(index)) {
    if (PyLong_Check(index->obj)) {
      Py_ssize_t i = PyLong_AsSsize_t(index->obj), n = (Py_ssize_t)obj->items.size();
      if (i < 0) i += n;
      if (i < 0 || i >= n) unsupported("tuple index out of range");
      return obj->items[i];
    }
    if (PySlice_Check(index->obj)) {
      Py_ssize_t start, stop, step, n = (Py_ssize_t)obj->items.size();
      if (PySlice_Unpack(index->obj, &start, &stop, &step) < 0) checked(nullptr, "slice");
      Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
      std::vector<VarRef> items;
      for (Py_ssize_t k = 0; k < len; k++) items.push_back(obj->items[start + k * step]);
      return make_tuple_var(items, obj->is(Var::Kind::List));
    }
  }
  if (is_constant(obj) && is_constant(index))
    return make_constant(checked(PyObject_GetItem(obj->obj, index->obj), "subscript"));
  if (obj->is(Var::Kind::Dict)) {
    int i = dict_find(obj, index);
    if (i < 0) unsupported("KeyError: " + index->describe());
    return dict_value(ctx_, obj, i);
  }
  if (obj->is(Var::Kind::Module) && is_constant(index) && PyLong_CheckExact(index->obj)) {
    // sequential[i]: the submodule at _modules' i-th key, read from there
    SourceRef dict_src;
    PyObject* mods = sequential_modules(ctx_, obj, "__getitem__", &dict_src);
    Py_ssize_t i = PyLong_AsSsize_t(index->obj), n = PyDict_GET_SIZE(mods);
    if (i < 0) i += n;
    PyObject *key = nullptr, *value = nullptr;
    Py_ssize_t pos = 0;
    for (Py_ssize_t k = 0; k <= i && k < n; k++) PyDict_Next(mods, &pos, &key, &value);
    if (i < 0 || i >= n || !PyUnicode_Check(key)) {
      Py_DECREF(mods);
      unsupported("Sequential index " + std::to_string(i) + " is out of range");
    }
    Py_INCREF(value);
    std::string name = PyUnicode_AsUTF8(key);
    Py_DECREF(mods);
    VarRef v = dict_src ? wrap(ctx_, value, guards::Source::dict_item(dict_src, name))
                        : wrap_untracked(ctx_, value);
    Py_DECREF(value);
    return v;
  }
  unsupported("indexing " + obj->describe() + " with " + index->describe() + " is not supported by mini's capture");
}

VarRef FrameInterpreter::iterate(const VarRef& v) {
  auto it = std::make_shared<Var>(Var::Kind::Iterator);
  if (v->is(Var::Kind::Tuple) || v->is(Var::Kind::List) || v->is(Var::Kind::Dict) || v->is(Var::Kind::DictView)) {
    it->items = items_of(ctx_, v);
  } else if (is_constant(v)) {
    PyObject* iter = checked(PyObject_GetIter(v->obj), "iter()");
    while (PyObject* item = PyIter_Next(iter)) {
      it->items.push_back(wrap_untracked(ctx_, item));
      Py_DECREF(item);
    }
    Py_DECREF(iter);
    if (PyErr_Occurred()) checked(nullptr, "iteration");
  } else if (v->is(Var::Kind::Module)) {
    // iter(Sequential): its submodules, each read from module._modules[key]
    SourceRef dict_src;
    PyObject* mods = sequential_modules(ctx_, v, "__iter__", &dict_src);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(mods, &pos, &key, &value)) {
      SourceRef s = dict_src ? guards::Source::dict_item(dict_src, PyUnicode_AsUTF8(key)) : nullptr;
      it->items.push_back(s ? wrap(ctx_, value, s) : wrap_untracked(ctx_, value));
    }
    Py_DECREF(mods);
  } else if (v->is(Var::Kind::Tensor)) {
    const auto& m = meta_of(ctx_, v);
    if (m.sizes.empty()) unsupported("iteration over a 0-d tensor");
    int64_t rows = PyLong_AsLongLong(specialize(ctx_, size_var(ctx_, v, 0))->obj);  // unrolled
    for (int64_t i = 0; i < rows; i++) {
      VarRef idx = make_constant(PyLong_FromLongLong(i));
      it->items.push_back(tensor_getitem(ctx_, v, idx));
    }
  } else if (v->is(Var::Kind::Iterator)) {
    return v;
  } else {
    unsupported("iterating over " + v->describe() + " is not supported by mini's capture");
  }
  return it;
}

std::vector<VarRef> FrameInterpreter::unpack(const VarRef& v, size_t n) {
  VarRef it = iterate(v);
  if (it->items.size() - it->position != n)
    unsupported("cannot unpack " + std::to_string(it->items.size()) + " values into " + std::to_string(n));
  return std::vector<VarRef>(it->items.begin() + it->position, it->items.end());
}

void FrameInterpreter::do_call(int argc, PyObject* kw_names, Kwargs extra_kwargs) {
  std::vector<VarRef> args(argc);
  for (int i = argc - 1; i >= 0; i--) args[i] = pop();
  VarRef b = pop(), a = pop();
  VarRef callee, self;
  if (bytecode_dialect().call_null_position == NullPosition::BeforeCallable) {
    if (a->is(Var::Kind::Null)) callee = b;
    else { callee = a; self = b; }
  } else {
    callee = a;
    if (!b->is(Var::Kind::Null)) self = b;
  }
  if (self) args.insert(args.begin(), self);
  Kwargs kwargs;
  if (kw_names) {
    Py_ssize_t nk = PyTuple_GET_SIZE(kw_names);
    for (Py_ssize_t k = 0; k < nk; k++) {
      std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kw_names, k));
      kwargs.emplace_back(name, args[args.size() - nk + k]);
    }
    args.resize(args.size() - nk);
  }
  for (auto& kv : extra_kwargs) kwargs.push_back(std::move(kv));
  if (callee->obj == (PyObject*)&PySuper_Type && args.empty() && kwargs.empty()) {  // 3.11's super()
    push(zero_arg_super());
    return;
  }
  push(call_var(ctx_, callee, std::move(args), std::move(kwargs)));
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
  auto v = std::make_shared<Var>(Var::Kind::Object);
  v->obj = PyObject_CallFunctionObjArgs((PyObject*)&PySuper_Type, cls->obj, self->obj, nullptr);
  if (!v->obj) {
    PyErr_Clear();
    unsupported("super(" + cls->describe() + ", " + self->describe() + ") raised an error");
  }
  v->self = self;
  v->contents = cls;
  return v;
}

VarRef FrameInterpreter::super_attr(const VarRef& sup, const std::string& name) {
  PyTypeObject* type = Py_TYPE(sup->self->obj);
  PyObject* mro = type->tp_mro;
  Py_ssize_t n = PyTuple_GET_SIZE(mro), i = 0;
  while (i < n && PyTuple_GET_ITEM(mro, i) != sup->contents->obj) i++;
  PyObject* key = PyUnicode_FromString(name.c_str());
  for (i++; i < n; i++) {
    PyObject* klass = PyTuple_GET_ITEM(mro, i);
    PyObject* found = PyDict_GetItemWithError(((PyTypeObject*)klass)->tp_dict, key);
    if (!found) continue;
    Py_DECREF(key);
    if (!PyFunction_Check(found)) unsupported("super()." + name + ", not a plain function, is not supported by mini's capture");
    // the self's type is guarded (its class fixes its MRO): the function is read through it
    ctx_.guards().add_type_match(sup->self->source, sup->self->obj);
    SourceRef fsrc = guards::Source::attr(
        guards::Source::item(guards::Source::attr(guards::Source::attr(sup->self->source, "__class__"), "__mro__"), (int)i),
        name);
    auto fn = std::make_shared<Var>(Var::Kind::Function);
    fn->obj = (Py_INCREF(found), found);
    fn->source = fsrc;
    auto bound = std::make_shared<Var>(Var::Kind::Partial);
    bound->self = fn;
    bound->items = {sup->self};
    bound->contents = make_dict({}, {});
    return bound;
  }
  Py_DECREF(key);
  PyErr_Clear();
  unsupported("super() has no attribute '" + name + "'");
}

// MAKE_FUNCTION: a bare function of the code and this frame's globals; its defaults and
// closure stay Vars until the function is called (inlined) or rebuilt after the graph.
VarRef FrameInterpreter::make_function(const VarRef& code) {
  if (!code->obj || !PyCode_Check(code->obj)) unsupported("internal: MAKE_FUNCTION without a code object");
  auto fn = std::make_shared<Var>(Var::Kind::Function);
  fn->obj = checked(PyFunction_New(code->obj, globals_), "MAKE_FUNCTION");
  fn->made = std::make_shared<Var::MadeFunction>();
  fn->made->globals_source = globals_ == ctx_.root_globals ? nullptr : globals_source_;
  return fn;
}

void FrameInterpreter::set_function_attribute(const VarRef& fn, int flag, const VarRef& value) {
  Var::MadeFunction& made = *fn->made;
  switch (flag) {
    case 0x01:  // positional defaults: a tuple
      made.defaults = is_constant(value) ? make_tuple_var(iterate(value)->items) : value;
      if (!made.defaults->is(Var::Kind::Tuple)) unsupported("internal: function defaults that are not a tuple");
      break;
    case 0x02:  // keyword-only defaults: a dict
      if (!value->is(Var::Kind::Dict)) unsupported("internal: keyword defaults that are not a dict");
      made.kwdefaults = value;
      break;
    case 0x04: {  // annotations: a tuple (name, annotation, ...) of real objects
      std::vector<VarRef> parts = iterate(value)->items;
      PyObject* d = PyDict_New();
      for (size_t i = 0; i + 1 < parts.size(); i += 2) {
        if (!parts[i]->obj || !parts[i + 1]->obj) {
          Py_DECREF(d);
          unsupported("an annotation of a function made in compiled code that is not a plain object");
        }
        PyDict_SetItem(d, parts[i]->obj, parts[i + 1]->obj);
      }
      int r = PyFunction_SetAnnotations(fn->obj, d);
      Py_DECREF(d);
      if (r < 0) checked(nullptr, "annotations");
      break;
    }
    case 0x08:  // the closure: a tuple of cells
      for (auto& c : value->items)
        if (!c->is(Var::Kind::Cell)) unsupported("internal: a closure that is not a tuple of cells");
      made.closure = value->items;
      break;
    default:
      unsupported("the function attribute " + std::to_string(flag) + " is not supported by mini's capture");
  }
}

// Instructions a graph break can stop at and then run with real objects: calls, and
// branches on a value only known at run time.
bool FrameInterpreter::can_run_eagerly(const Instruction& in) {
  switch (in.op) {
    case Opcode::CALL: case Opcode::CALL_KW: case Opcode::CALL_FUNCTION_EX:
    case Opcode::POP_JUMP_IF_FALSE: case Opcode::POP_JUMP_IF_TRUE: case Opcode::TO_BOOL:
      return true;
    default:
      return false;
  }
}

// Whether an exception raised at `in` would reach a handler of the user's: a try block, or a
// with block other than a grad mode's. Dynamo compiles no partial graph there
// (should_compile_partial_graph: an exception has to reach the handler, which a graph cannot
// raise into), so a break there leaves the whole unit to CPython. The ends of grad-mode with
// blocks (`stack` holds their __exit__s) are the exception: all they do with an exception is
// restore the grad mode and re-raise, which the compiler does itself.
bool FrameInterpreter::in_handler(const Instruction& in, const std::vector<VarRef>& stack) {
  std::vector<ExceptionTableEntry> table;
  if (!parse_exception_table(code_, &table)) { PyErr_Clear(); return true; }
  int on_raise = -1;
  for (const ExceptionTableEntry* h = find_exception_handler(table, in.offset); h;) {
    if (h->depth < 1 || h->depth > (int)stack.size() || !is_grad_mode_exit(stack[h->depth - 1])) return true;
    on_raise = exit_grad_mode(ctx_, stack[h->depth - 1], false);
    // the handler of the code around the block: where its BEFORE_WITH is
    int start = h->start;
    for (const auto& e : table)
      if (e.target == h->target) start = std::min(start, e.start);
    int i = start / 2 < (int)index_of_.size() ? index_of_[start / 2] : -1;
    if (i < 1 || ins_[i - 1].op != Opcode::BEFORE_WITH) return true;
    h = find_exception_handler(table, ins_[i - 1].offset);
  }
  ctx_.trace.grad_enabled_on_raise = on_raise;
  return false;
}

// Dynamo's maybe_has_backedge: a jump at or after instruction `index`, before the first
// return, to an offset before it. (The instruction itself counts: 3.11 tests a while loop's
// condition at the bottom with a backward jump.)
bool FrameInterpreter::in_loop(size_t index) {
  for (size_t i = index; i < ins_.size(); i++) {
    const Instruction& j = ins_[i];
    if (j.op == Opcode::RETURN_VALUE || j.op == Opcode::RETURN_CONST) return false;
    if (j.jump_target >= 0 && j.jump_target < ins_[index].offset) return true;
  }
  return false;
}

// exit_at: how a unit ends at an instruction capture cannot trace (assignment A9, with
// convert_frame.cpp's run_instruction; notes/assignments/A9.md).
//   in:  `in`, the instruction that raised Unsupported; `stack`, the symbolic value stack just
//        before it; skip_unit, the Unsupported asked for the whole unit to be left to CPython;
//        in_callee, it was raised inside a function being inlined at `in`.
//   out: Skip when skip_unit, and where Dynamo gives up on the frame: inside a handler of the
//        user's (in_handler: a try block, a with block other than a grad mode's), and at a
//        break of the unit's own inside a loop (in_loop(pc_ - 1): every iteration would break
//        again; the graphs of earlier units stay compiled); Break when the instruction can run
//        eagerly with real objects (can_run_eagerly: a call or a conditional jump); otherwise
//        Native (CPython runs the rest of the frame from `in`).
//   guarantees: Break only where run_instruction can run `in`; a Native exit is always valid
//        (a NOP, LOAD_FAST... with any stack).
Trace::Exit FrameInterpreter::exit_at(const Instruction& in, const std::vector<VarRef>& stack, bool skip_unit,
                                      bool in_callee) {
  // A9 BEGIN: resume units
  if (skip_unit || in_handler(in, stack)) return Trace::Exit::Skip;
  if (!can_run_eagerly(in)) return Trace::Exit::Native;
  if (!in_callee && in_loop(pc_ - 1)) return Trace::Exit::Skip;
  return Trace::Exit::Break;
  // A9 END
}

VarRef FrameInterpreter::run() {
  int steps = 0;
  while (pc_ < (int)ins_.size()) {
    if (++steps > 1000000) unsupported("the function runs too many instructions to unroll");
    const Instruction& in = ins_[pc_];
    if (!root_) {
      pc_++;
      if (VarRef r = step(in)) return r;
      continue;
    }
    // The root frame keeps the state before each instruction: if the instruction cannot be
    // traced, the unit ends there (a graph break) with exactly that state.
    std::vector<VarRef> saved_stack = stack_, saved_locals = locals_;
    auto saved_lazy = lazy_;
    PyObject* saved_kw = kw_names_;
    int saved_kw_offset = kw_names_offset_;
    size_t graph_size = ctx_.graph().nodes.size();
    int mutations = ctx_.mutations;
    bool saved_grad = ctx_.grad_enabled;
    size_t writes = ctx_.writes.size();
    pc_++;
    try {
      if (steps == stop_step) {
        set_line(in);
        throw Unsupported{stop_reason};
      }
      try {
        if (VarRef r = step(in)) return r;
      } catch (const Error& e) {
        if (is_stub_error(e)) throw;  // a course kit's stub in its own tests: not the user's error
        // a user error (eager's, from tracing an op): the unit ends before the instruction as at
        // a graph break, so that the graph so far and its side effects happen as in eager, and
        // the instruction then runs eagerly and raises eager's own error
        ctx_.trace.user_error = std::make_shared<const Error>(e);
        throw Unsupported{"the instruction raises " + error_type_name(e) + ": " + e.what()};
      }
    } catch (const Unsupported& u) {
      if (ctx_.mutations != mutations) failed_step_mutated = steps;
      Trace& t = ctx_.trace;
      ctx_.grad_enabled = t.grad_enabled_after = saved_grad;
      try {
        t.exit = exit_at(in, saved_stack, u.skip_unit, u.in_callee);
      } catch (const Error& e) {
        // a course kit's tree where A9 is still the stub: CPython runs the rest of the frame
        // from the breaking instruction (the caller says so once, when run_instruction's stub
        // raises too); in A9's own tests the stub's error goes on
        if (!is_assignment_stub(e)) throw;
        t.exit = u.skip_unit ? Trace::Exit::Skip : Trace::Exit::Native;
        t.stub_fallback = e.what();
      }
      t.skip_unit = u.skip_unit;
      if (t.exit == Trace::Exit::Skip && !u.skip_unit)
        t.skip_where = in_handler(in, saved_stack) ? "inside a try block" : "inside a loop";
      undo_writes(ctx_, writes);  // the instruction runs again eagerly
      exit_stack_ = std::move(saved_stack);
      exit_locals_ = std::move(saved_locals);
      exit_lazy_ = std::move(saved_lazy);
      exit_kw_names_ = saved_kw;
      exit_kw_names_offset_ = saved_kw_offset;
      exit_graph_size_ = graph_size;
      t.exit_instruction = in;
      t.break_reason = u.reason;
      t.break_location = ctx_.current_location;
      t.break_code = ctx_.current_code;
      return nullptr;
    }
  }
  unsupported("internal: fell off the end of the code");
}

VarRef FrameInterpreter::step(const Instruction& in) {
  const BytecodeDialect& dialect = bytecode_dialect();
  set_line(in);
  {
    switch (in.op) {
      // the free slots hold their cells already (set by trace_frame or inline_function)
      case Opcode::NOP: case Opcode::RESUME: case Opcode::CACHE: case Opcode::EXTENDED_ARG:
      case Opcode::COPY_FREE_VARS: case Opcode::PRECALL:
        break;
      case Opcode::MAKE_CELL: {
        // the slot's value (an argument, or nothing) goes into a new cell; a root argument
        // not read yet stays lazy: the cell reads it on first use
        VarRef cell;
        if (in.arg < (int)lazy_.size() && lazy_[in.arg].first) {
          cell = std::make_shared<Var>(Var::Kind::Cell);
          cell->source = lazy_[in.arg].second;
        } else {
          cell = new_cell(locals_[in.arg]);
        }
        set_local(in.arg, cell);
        break;
      }
      case Opcode::LOAD_FAST: case Opcode::LOAD_FAST_CHECK: case Opcode::LOAD_CLOSURE:
        push(load_local(in.arg));  // on a cell slot (a closure being built): the cell
        break;
      case Opcode::LOAD_DEREF:
        push(cell_get(ctx_, load_local(in.arg)));
        break;
      case Opcode::STORE_DEREF:
        cell_set(ctx_, locals_[in.arg], pop());
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
      case Opcode::STORE_FAST:
        set_local(in.arg, pop());
        break;
      case Opcode::STORE_FAST_LOAD_FAST:
        set_local(first_of_pair(in), pop());
        push(load_local(second_of_pair(in)));
        break;
      case Opcode::STORE_FAST_STORE_FAST:
        set_local(first_of_pair(in), pop());
        set_local(second_of_pair(in), pop());
        break;
      case Opcode::DELETE_FAST: set_local(in.arg, nullptr); break;
      case Opcode::STORE_GLOBAL:
        record_store(ctx_, SideEffect::Kind::Global, globals_, globals_ == ctx_.root_globals ? nullptr : globals_source_,
                     PyUnicode_AsUTF8(name_at(in.arg)), pop());
        break;
      case Opcode::STORE_ATTR: {
        VarRef obj = pop(), value = pop();
        store_attr(ctx_, obj, PyUnicode_AsUTF8(name_at(in.arg)), value);
        break;
      }
      case Opcode::MAKE_FUNCTION: {
        VarRef fn = make_function(pop());
        if (!dialect.has_set_function_attribute)  // 3.11, 3.12: the attributes are below the code
          for (int flag : {0x08, 0x04, 0x02, 0x01})
            if (in.arg & flag) set_function_attribute(fn, flag, pop());
        push(fn);
        break;
      }
      case Opcode::SET_FUNCTION_ATTRIBUTE: {
        VarRef fn = pop(), value = pop();
        if (!fn->made) unsupported("internal: SET_FUNCTION_ATTRIBUTE on " + fn->describe());
        set_function_attribute(fn, in.arg, value);
        push(fn);
        break;
      }
      case Opcode::LOAD_CONST: {
        PyObject* c = PyTuple_GET_ITEM(code_->co_consts, in.arg);
        push(wrap_untracked(ctx_, c));
        break;
      }
      case Opcode::RETURN_CONST:
        return wrap_untracked(ctx_, PyTuple_GET_ITEM(code_->co_consts, in.arg));
      case Opcode::RETURN_VALUE:
        return pop();
      case Opcode::LOAD_GLOBAL: {
        bool null = load_global_pushes_null(in);
        VarRef v = load_global(PyUnicode_AsUTF8(name_at(load_global_name_index(in))));
        if (null && dialect.call_null_position == NullPosition::BeforeCallable) push(null_var());
        push(v);
        if (null && dialect.call_null_position == NullPosition::AfterCallable) push(null_var());
        break;
      }
      case Opcode::LOAD_SUPER_ATTR: {  // 3.12+: super().name, or super(cls, self).name
        std::string name = PyUnicode_AsUTF8(name_at(in.arg >> 2));
        VarRef self = pop(), cls = pop();
        pop();  // the global super
        VarRef v = super_attr(super_attr_owner(cls, self), name);
        bool method = in.arg & 1;
        if (method && dialect.call_null_position == NullPosition::BeforeCallable) push(null_var());
        push(v);
        if (method && dialect.call_null_position == NullPosition::AfterCallable) push(null_var());
        break;
      }
      case Opcode::LOAD_ATTR: case Opcode::LOAD_METHOD: {
        std::string name = PyUnicode_AsUTF8(name_at(load_attr_name_index(in)));
        VarRef obj = pop();
        VarRef v = obj->is(Var::Kind::Object) && obj->self && obj->obj && PyObject_TypeCheck(obj->obj, &PySuper_Type)
                       ? super_attr(obj, name)
                       : get_attr(ctx_, obj, name);
        bool method = load_attr_is_method(in);
        if (method && dialect.call_null_position == NullPosition::BeforeCallable) push(null_var());
        push(v);
        if (method && dialect.call_null_position == NullPosition::AfterCallable) push(null_var());
        break;
      }
      case Opcode::PUSH_NULL: push(null_var()); break;
      case Opcode::POP_TOP: pop(); break;
      // f-strings: formatted while tracing, from values known then (constants, static sizes);
      // a tensor's text is known only when it runs (a graph break, as in Dynamo)
      case Opcode::FORMAT_VALUE: case Opcode::FORMAT_SIMPLE: case Opcode::FORMAT_WITH_SPEC:
      case Opcode::CONVERT_VALUE: {
        VarRef spec = (in.op == Opcode::FORMAT_WITH_SPEC || (in.op == Opcode::FORMAT_VALUE && (in.arg & 4))) ? pop()
                                                                                                          : nullptr;
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
        break;
      }
      case Opcode::BUILD_STRING: {
        std::vector<VarRef> parts(in.arg);
        for (int i = in.arg - 1; i >= 0; i--) parts[i] = pop();
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
        break;
      }
      case Opcode::RETURN_GENERATOR:  // the generator's first resume: the value sent, None
        if (!yielded_) unsupported("RETURN_GENERATOR outside a generator that capture runs");
        push(make_constant((Py_INCREF(Py_None), Py_None)));
        break;
      case Opcode::YIELD_VALUE: {
        if (!yielded_) unsupported("a yield outside a generator that capture runs");
        yielded_->push_back(pop());
        if (yielded_->size() > 100000) unsupported("a generator that yields more than 100000 values");
        push(make_constant((Py_INCREF(Py_None), Py_None)));  // next() sends None
        break;
      }
      case Opcode::COPY: push(top(in.arg)); break;
      case Opcode::SWAP: std::swap(top(1), top(in.arg)); break;
      case Opcode::KW_NAMES:
        kw_names_ = PyTuple_GET_ITEM(code_->co_consts, in.arg);
        kw_names_offset_ = in.offset;
        break;
      case Opcode::CALL: {
        PyObject* kw = kw_names_;
        kw_names_ = nullptr;
        do_call(in.arg, kw);
        break;
      }
      case Opcode::CALL_KW: {
        VarRef names = pop();
        do_call(in.arg, names->obj);
        break;
      }
      case Opcode::CALL_FUNCTION_EX: {
        VarRef kw = (in.arg & 1) ? pop() : nullptr;
        VarRef args = pop();
        Kwargs kwargs;
        if (kw) {
          if (!kw->is(Var::Kind::Dict)) unsupported("calls with **kwargs of " + kw->describe() + " are not supported");
          for (size_t i = 0; i < kw->keys.size(); i++) {
            if (!PyUnicode_Check(kw->keys[i]->obj)) unsupported("keywords must be strings");
            kwargs.emplace_back(PyUnicode_AsUTF8(kw->keys[i]->obj), dict_value(ctx_, kw, i));
          }
        }
        if (!(args->is(Var::Kind::Tuple) || args->is(Var::Kind::List) || is_constant(args)))
          unsupported("calls with *args of " + args->describe() + " are not supported");
        std::vector<VarRef> items = iterate(args)->items;
        for (auto& a : items) push(a);
        do_call((int)items.size(), nullptr, std::move(kwargs));
        break;
      }
      case Opcode::BINARY_OP: {
        VarRef b = pop(), a = pop();
        push(binary(in.arg, a, b));
        break;
      }
      case Opcode::COMPARE_OP: {
        VarRef b = pop(), a = pop();
        VarRef r = compare(compare_op_richcompare(in), a, b);
        push(r);
        break;
      }
      case Opcode::IS_OP: {
        VarRef b = specialize(ctx_, pop()), a = specialize(ctx_, pop());
        bool same;
        if (a == b) same = true;  // the same Var: a list or dict made while tracing, say
        else if (a->obj && b->obj) same = same_object(ctx_, a, b);
        else if (a->is(Var::Kind::Tensor) && b->is(Var::Kind::Tensor)) {
          same = a->node == b->node;
          auto input = [&](int node) { return ctx_.graph().nodes[node].kind == graph::NodeKind::Input; };
          if (!same && input(a->node) && input(b->node))  // two sources: one tensor on some calls?
            unsupported("`is` between two input tensors (whether they are one tensor is not guarded)");
        } else {
          same = false;  // a tensor (or a container) is not None or any constant
        }
        push(make_constant(PyBool_FromLong(in.arg ? !same : same)));
        break;
      }
      case Opcode::CONTAINS_OP: {
        VarRef container = pop(), item = pop();
        if (VarRef c = as_constant(ctx_, container)) container = c;  // 3 in x.shape
        if (container->is(Var::Kind::DictView) && container->name == "keys") container = container->self;
        if (container->is(Var::Kind::Dict) || container->is(Var::Kind::Tuple) || container->is(Var::Kind::List)) {
          bool found;
          if (container->is(Var::Kind::Dict)) {
            found = dict_find(container, item) >= 0;
          } else {  // `in` on a tuple or list, compared up to the first match with constants
            found = false;   // only (anything else could run a tensor's ==)
            for (auto& v : container->items) {
              if (!is_constant(v) || !is_constant(item))
                unsupported("`in` comparing " + item->describe() + " with " + v->describe());
              int eq = v->obj == item->obj ? 1 : PyObject_RichCompareBool(v->obj, item->obj, Py_EQ);
              if (eq < 0) checked(nullptr, "in");
              if ((found = eq == 1)) break;
            }
          }
          push(make_constant(PyBool_FromLong(in.arg ? !found : found)));
          break;
        }
        if (!is_constant(container) || !is_constant(item))
          unsupported("`in` on " + container->describe() + " is not supported by mini's capture");
        int r = PySequence_Contains(container->obj, item->obj);
        if (r < 0) checked(nullptr, "in");
        push(make_constant(PyBool_FromLong(in.arg ? !r : r)));
        break;
      }
      case Opcode::UNARY_NEGATIVE: {
        VarRef a = pop();
        if (VarRef n = sym_negate(ctx_, a)) push(n);
        else if (a->is(Var::Kind::Tensor)) {
          VarRef r = call_replaced_tensor_method(ctx_, "__neg__", a, {}, {});
          if (!r) {
            r = tensor_unary(ctx_, OpKind::Neg, a);
            r->number = a->number;
          }
          push(r);
        }
        else if (is_constant(a)) push(make_constant(checked(PyNumber_Negative(a->obj), "-x")));
        else unsupported("-" + a->describe());
        break;
      }
      case Opcode::UNARY_INVERT: {  // ~t: Tensor.__invert__, mini's Python, inlined (one definition)
        VarRef a = pop();
        if (a->is(Var::Kind::Tensor)) push(call_tensor_method_as_found(ctx_, "__invert__", a, {}, {}));
        else if (is_constant(a)) push(make_constant(checked(PyNumber_Invert(a->obj), "~x")));
        else unsupported("~" + a->describe());
        break;
      }
      case Opcode::UNARY_NOT: {
        VarRef a = pop();
        push(make_constant(PyBool_FromLong(!truth(a))));
        break;
      }
      case Opcode::TO_BOOL: {
        VarRef a = pop();
        push(make_constant(PyBool_FromLong(truth(a))));
        break;
      }
      case Opcode::CALL_INTRINSIC_1: {
        VarRef a = pop();
        if (in.arg == (int)Intrinsic1::ListToTuple) push(make_tuple_var(a->items));
        else if (in.arg == (int)Intrinsic1::UnaryPositive) push(a);
        else unsupported(std::string("the intrinsic ") + std::to_string(in.arg) + " is not supported");
        break;
      }
      case Opcode::BINARY_SUBSCR: {
        VarRef index = pop(), obj = pop();
        push(subscript(obj, index));
        break;
      }
      case Opcode::BUILD_SLICE: {
        std::vector<VarRef> parts(in.arg);
        for (int i = in.arg - 1; i >= 0; i--) parts[i] = pop();
        if (VarRef s = sym_slice(ctx_, parts)) {  // a dynamic size as a bound: kept symbolic
          push(s);
          break;
        }
        for (auto& p : parts) p = specialize(ctx_, p);
        for (auto& p : parts)
          if (!is_constant(p)) unsupported("a slice bound that is not a Python constant");
        PyObject* s = PySlice_New(parts[0]->obj, parts[1]->obj, in.arg == 3 ? parts[2]->obj : nullptr);
        push(make_constant(checked(s, "slice")));
        break;
      }
      case Opcode::BINARY_SLICE: {
        VarRef stop = pop(), start = pop(), obj = pop();
        if (VarRef s = sym_slice(ctx_, {start, stop})) {  // a dynamic size as a bound: kept symbolic
          push(subscript(obj, s));
          break;
        }
        stop = specialize(ctx_, stop), start = specialize(ctx_, start);
        if (!is_constant(start) || !is_constant(stop)) unsupported("a slice bound that is not a Python constant");
        VarRef s = make_constant(checked(PySlice_New(start->obj, stop->obj, nullptr), "slice"));
        push(subscript(obj, s));
        break;
      }
      case Opcode::BUILD_TUPLE: case Opcode::BUILD_LIST: {
        std::vector<VarRef> items(in.arg);
        for (int i = in.arg - 1; i >= 0; i--) items[i] = pop();
        push(make_tuple_var(std::move(items), in.op == Opcode::BUILD_LIST));
        break;
      }
      case Opcode::LIST_APPEND: {
        VarRef v = pop();
        top(in.arg)->items.push_back(v);
        ctx_.mutations++;
        break;
      }
      case Opcode::LIST_EXTEND: {
        VarRef v = pop();
        VarRef it = iterate(v);
        auto& dst = top(in.arg)->items;
        dst.insert(dst.end(), it->items.begin() + it->position, it->items.end());
        ctx_.mutations++;
        break;
      }
      case Opcode::BUILD_MAP: {
        std::vector<VarRef> parts(2 * in.arg);
        for (int i = 2 * in.arg - 1; i >= 0; i--) parts[i] = pop();
        VarRef d = make_dict({}, {});
        for (int i = 0; i < in.arg; i++) dict_set(ctx_, d, parts[2 * i], parts[2 * i + 1]);
        push(d);
        break;
      }
      case Opcode::BUILD_CONST_KEY_MAP: {
        VarRef keys = pop();
        std::vector<VarRef> values(in.arg);
        for (int i = in.arg - 1; i >= 0; i--) values[i] = pop();
        std::vector<VarRef> key_vars = iterate(keys)->items;
        VarRef d = make_dict({}, {});
        for (int i = 0; i < in.arg; i++) dict_set(ctx_, d, key_vars.at(i), values[i]);
        push(d);
        break;
      }
      case Opcode::MAP_ADD: {
        VarRef value = pop(), key = pop();
        dict_set(ctx_, top(in.arg), key, value);
        break;
      }
      case Opcode::DICT_UPDATE: case Opcode::DICT_MERGE: {
        VarRef update = pop();
        VarRef d = top(in.arg);
        if (!update->is(Var::Kind::Dict)) unsupported("updating a dict with " + update->describe() + " is not supported");
        for (size_t i = 0; i < update->keys.size(); i++) {
          if (in.op == Opcode::DICT_MERGE && dict_find(d, update->keys[i]) >= 0)
            unsupported("got multiple values for keyword argument " + update->keys[i]->describe());
          dict_set(ctx_, d, update->keys[i], dict_value(ctx_, update, i));
        }
        break;
      }
      case Opcode::STORE_SUBSCR: {
        VarRef index = pop(), obj = pop(), value = pop();
        if (obj->is(Var::Kind::Dict)) {
          dict_set(ctx_, obj, specialize(ctx_, index), value);
        } else if (obj->is(Var::Kind::List) && made_in_trace(obj) && is_constant(specialize(ctx_, index)) &&
                   PyLong_Check(specialize(ctx_, index)->obj)) {
          Py_ssize_t i = PyLong_AsSsize_t(specialize(ctx_, index)->obj), n = (Py_ssize_t)obj->items.size();
          if (i < 0) i += n;
          if (i < 0 || i >= n) unsupported("list assignment index out of range");
          obj->items[i] = value;
          ctx_.mutations++;
        } else {
          unsupported("storing into " + obj->describe() + "[...] is not supported by mini's capture");
        }
        break;
      }
      case Opcode::DELETE_SUBSCR: {
        VarRef index = pop(), obj = pop();
        int i = obj->is(Var::Kind::Dict) && made_in_trace(obj) ? dict_find(obj, index) : -1;
        if (i < 0) unsupported("deleting " + obj->describe() + "[" + index->describe() + "] is not supported by mini's capture");
        obj->keys.erase(obj->keys.begin() + i);
        obj->items.erase(obj->items.begin() + i);
        ctx_.mutations++;
        break;
      }
      case Opcode::LIST_TO_TUPLE: push(make_tuple_var(pop()->items)); break;
      case Opcode::UNPACK_SEQUENCE: {
        std::vector<VarRef> items = unpack(pop(), in.arg);
        for (auto r = items.rbegin(); r != items.rend(); ++r) push(*r);
        break;
      }
      case Opcode::GET_ITER: push(iterate(pop())); break;
      case Opcode::FOR_ITER: {
        VarRef it = top();
        if (!it->is(Var::Kind::Iterator))  // a real iterator from the caller: CPython steps it
          unsupported("a for loop over " + it->describe() + ", an iterator capture cannot see into");
        if (it->position < it->items.size()) {
          push(it->items[it->position++]);
        } else {
          pop();
          jump(in.jump_target + dialect.for_iter_exit_skip);
        }
        break;
      }
      case Opcode::END_FOR:
        pop();
        if (dialect.python_minor == 12) pop();
        break;
      case Opcode::BEFORE_WITH: {  // grad-mode blocks and contextlib.nullcontext() only
        VarRef mode = pop();
        if (is_null_context(mode)) {
          push(make_method(mode, "__exit__"));
          push(null_context_enter(ctx_, mode));
          break;
        }
        if (!is_grad_mode(mode))
          unsupported("a with block over " + mode->describe() + ": mini's capture traces the grad-mode "
                      "blocks (mini.no_grad(), enable_grad(), set_grad_enabled()) and contextlib.nullcontext() only");
        push(enter_grad_mode(ctx_, mode));
        push(make_constant((Py_INCREF(Py_None), Py_None)));  // what __enter__ returns
        break;
      }
      case Opcode::JUMP_FORWARD: case Opcode::JUMP_BACKWARD: case Opcode::JUMP_BACKWARD_NO_INTERRUPT:
        jump(in.jump_target);
        break;
      case Opcode::POP_JUMP_IF_FALSE: case Opcode::POP_JUMP_IF_TRUE: {
        bool t = truth(pop());
        if (t == (in.op == Opcode::POP_JUMP_IF_TRUE)) jump(in.jump_target);
        break;
      }
      case Opcode::POP_JUMP_IF_NONE: case Opcode::POP_JUMP_IF_NOT_NONE: {
        VarRef v = pop();
        bool none = v->obj == Py_None;
        if (none == (in.op == Opcode::POP_JUMP_IF_NONE)) jump(in.jump_target);
        break;
      }
      case Opcode::JUMP_IF_FALSE_OR_POP: case Opcode::JUMP_IF_TRUE_OR_POP: {
        bool t = truth(top());
        if (t == (in.op == Opcode::JUMP_IF_TRUE_OR_POP)) jump(in.jump_target);
        else pop();
        break;
      }
      case Opcode::RAISE_VARARGS: {
        // `raise RuntimeError("...")` of a message known while tracing in mini's own Python (an
        // op's check, as cat's): the user error it is, as a C++ op's: the unit ends before the
        // instruction (eager raises it), and fullgraph=True raises it. A raise in the user's
        // code stays unsupported (torch 2.11 does not trace it under fullgraph either).
        const char* file = PyUnicode_AsUTF8(code_->co_filename);
        bool mini_code = !g_skip_prefix.empty() && file && strncmp(file, g_skip_prefix.c_str(), g_skip_prefix.size()) == 0;
        PyObject* e = in.arg == 1 && mini_code ? top()->obj : nullptr;  // made of constants (wrap_untracked)
        static const std::pair<PyObject*, Error::Kind> kinds[] = {
            {PyExc_RuntimeError, Error::Kind::Runtime}, {PyExc_TypeError, Error::Kind::Type},
            {PyExc_ValueError, Error::Kind::Value}, {PyExc_IndexError, Error::Kind::Index}};
        for (const auto& [type, kind] : kinds) {
          if (!e || (PyObject*)Py_TYPE(e) != type) continue;
          PyObject* text = PyObject_Str(e);
          std::string message = text ? PyUnicode_AsUTF8(text) : "";
          Py_XDECREF(text);
          PyErr_Clear();
          throw Error(kind, message);
        }
        unsupported("the instruction RAISE_VARARGS is not supported by mini's capture");
      }
      default:
        unsupported(std::string("the instruction ") + in.name + " is not supported by mini's capture");
    }
  }
  return nullptr;
}

// ---- inlining and the root frame ----------------------------------------------------------

VarRef inline_function(TraceContext& ctx, PyObject* function, SourceRef fsrc, std::vector<VarRef> args,
                       Kwargs kwargs, const Var::MadeFunction* made) {
  if (ctx.depth >= ctx.options.max_inline_depth) unsupported("inlining is nested too deeply (recursion?)");
  auto* code = (PyCodeObject*)PyFunction_GET_CODE(function);
  // the code is the function's own attribute, replaced in place by a hot reload (IPython's
  // autoreload assigns fn.__code__): guarded where the function is read, as its defaults
  if (fsrc) ctx.guards().add_id_match(guards::Source::attr(fsrc, "__code__"), (PyObject*)code);
  int flags = code->co_flags;
  if (flags & (CO_COROUTINE | CO_ASYNC_GENERATOR))
    unsupported("calling a coroutine or async generator function is not supported by mini's capture");
  int nargs = code->co_argcount, nkw = code->co_kwonlyargcount;
  auto arg_name = [&](int i) { return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i))); };
  std::vector<VarRef> locals(code->co_nlocalsplus);
  size_t npos = std::min<size_t>(args.size(), nargs);
  for (size_t i = 0; i < npos; i++) locals[i] = args[i];
  int slot = nargs + nkw;
  if (flags & CO_VARARGS) {
    locals[slot++] = make_tuple_var(std::vector<VarRef>(args.begin() + npos, args.end()));
  } else if (args.size() > (size_t)nargs) {
    unsupported("too many positional arguments for " + std::string(PyUnicode_AsUTF8(code->co_name)));
  }
  VarRef extra_kwargs = (flags & CO_VARKEYWORDS) ? make_dict({}, {}) : nullptr;
  for (auto& [name, v] : kwargs) {
    int found = -1;
    for (int i = code->co_posonlyargcount; i < nargs + nkw; i++)
      if (name == arg_name(i)) found = i;
    if (found >= 0 && locals[found]) unsupported("got multiple values for argument '" + name + "'");
    if (found >= 0) locals[found] = v;
    else if (extra_kwargs) dict_set(ctx, extra_kwargs, make_constant(PyUnicode_FromString(name.c_str())), v);
    else unsupported("unexpected keyword argument '" + name + "' in an inlined call");
  }
  if (extra_kwargs) locals[slot] = extra_kwargs;
  // defaults: the real function's (constants), or the Vars of one made while tracing
  std::vector<VarRef> defaults;
  if (made && made->defaults) {
    defaults = made->defaults->items;
  } else if (PyObject* d = PyFunction_GET_DEFAULTS(function)) {
    // guarded through the function (fn.__defaults__[i], and their count, which decides the
    // parameters they belong to): they can be replaced
    if (fsrc) ctx.guards().add_length_check(guards::Source::attr(fsrc, "__defaults__"), d);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d); i++)
      defaults.push_back(fsrc ? wrap(ctx, PyTuple_GET_ITEM(d, i), guards::Source::item(guards::Source::attr(fsrc, "__defaults__"), (int)i))
                              : wrap_untracked(ctx, PyTuple_GET_ITEM(d, i)));
  }
  int ndef = (int)defaults.size();
  for (int i = 0; i < nargs; i++)
    if (!locals[i] && i >= nargs - ndef) locals[i] = defaults[i - (nargs - ndef)];
  PyObject* kwdefaults = PyFunction_GET_KW_DEFAULTS(function);
  for (int i = nargs; i < nargs + nkw; i++) {
    if (locals[i]) continue;
    if (made && made->kwdefaults) {
      int k = dict_find(made->kwdefaults, wrap_untracked(ctx, PyTuple_GET_ITEM(code->co_localsplusnames, i)));
      if (k >= 0) locals[i] = made->kwdefaults->items[k];
    } else if (kwdefaults) {
      PyObject* d = PyDict_GetItem(kwdefaults, PyTuple_GET_ITEM(code->co_localsplusnames, i));
      if (d) locals[i] = fsrc ? wrap(ctx, d, guards::Source::dict_item(guards::Source::attr(fsrc, "__kwdefaults__"), arg_name(i)))
                              : wrap_untracked(ctx, d);
    }
  }
  for (int i = 0; i < nargs + nkw; i++)
    if (!locals[i]) unsupported("missing argument '" + arg_name(i) + "'");
  // free variables: the cells of the function's closure. Real ones are read through the
  // function object (fn.__closure__[i].cell_contents, guarded on first read); those of a
  // function made while tracing are the Vars it closed over.
  PyObject* closure = PyFunction_GET_CLOSURE(function);
  int nfree = made ? (int)made->closure.size() : closure ? (int)PyTuple_GET_SIZE(closure) : 0;
  if (nfree != code->co_nfreevars) unsupported("internal: the closure does not match the code's free variables");
  for (int i = 0; i < nfree; i++) {
    int local_index = code->co_nlocalsplus - nfree + i;
    if (made) {
      locals[local_index] = made->closure[i];
      continue;
    }
    if (!fsrc) unsupported("a function read without a source reads its closure");
    SourceRef cell_src = guards::Source::item(guards::Source::attr(fsrc, "__closure__"), i);
    locals[local_index] = cell_var(ctx, PyTuple_GET_ITEM(closure, i), guards::Source::cell_contents(cell_src), cell_src);
  }
  PyObject* globals = PyFunction_GET_GLOBALS(function);
  SourceRef gsrc = made ? made->globals_source
                        : globals == ctx.root_globals || !fsrc ? nullptr : guards::Source::attr(fsrc, "__globals__");
  if (globals != ctx.root_globals && !gsrc && !is_mini_library(globals))
    unsupported("a function from another module without a source");
  ctx.depth++;
  std::string saved_code = ctx.current_code;
  FrameInterpreter inner(ctx, code, globals, gsrc, std::move(locals));
  // A generator (a generator expression above all: sum(f(t) for t in xs)) runs to its end
  // here, and the call returns an iterator over what it yielded. That is the generator's
  // values in order for every consumer that takes them all (sum, all, list, a for loop); its
  // body's work happens at the call rather than interleaved with the consumer's, which only
  // a generator whose body has effects the consumer observes could tell (Dynamo steps it).
  std::vector<VarRef> yielded;
  if (flags & CO_GENERATOR) inner.yielded_ = &yielded;
  VarRef result;
  try {
    result = inner.run();
    if (flags & CO_GENERATOR) {
      auto it = std::make_shared<Var>(Var::Kind::Iterator);
      it->items = std::move(yielded);
      result = it;
    }
  } catch (Unsupported& u) {
    ctx.depth--;
    u.in_callee = true;
    throw;
  } catch (...) {
    ctx.depth--;
    throw;
  }
  ctx.depth--;
  ctx.current_code = saved_code;
  return result;
}

namespace {
// A value never read while tracing, as it was: a local slot as it is (unbound stays
// unbound), anything else read again from its source.
OutputSpec unchanged(const SourceRef& source) {
  OutputSpec s;
  s.kind = source->kind == guards::Source::Kind::Local ? OutputSpec::Kind::Local : OutputSpec::Kind::Source;
  s.index = source->index;
  s.source = source;
  return s;
}

// How to rebuild a Var as a real object after the graph has run.
OutputSpec rebuild(TraceContext& ctx, const VarRef& v) {
  OutputSpec s;
  // A list, dict, cell or function made while tracing is built once per run, however many
  // places hold it (a later place, or a cycle through a closure, is an Alias of it).
  bool mutable_made = (v->is(Var::Kind::List) || v->is(Var::Kind::Dict)) ? made_in_trace(v)
                      : v->is(Var::Kind::Cell) ? !v->obj : v->is(Var::Kind::Function) && v->made;
  if (mutable_made) {
    auto found = ctx.alias_of.find(v.get());
    if (found != ctx.alias_of.end()) {
      s.kind = OutputSpec::Kind::Alias;
      s.index = found->second;
      return s;
    }
    s.alias = (int)ctx.alias_of.size();
    ctx.alias_of[v.get()] = s.alias;
  }
  switch (v->kind) {
    case Var::Kind::Tensor: {
      const Alias& alias = alias_of(ctx, v->node);
      // An input handed on as it is: the real input (AOTAutograd's output-is-input), not a
      // graph output, which a training graph would make a new tensor with an autograd history
      const graph::Node& n = ctx.graph().nodes[v->node];
      if (n.kind == graph::NodeKind::Input && !n.wrapped_number && !alias.storage->mutated) {
        const auto& inputs = ctx.graph().inputs;
        s.kind = OutputSpec::Kind::Source;
        s.source = ctx.trace.input_sources.at(std::find(inputs.begin(), inputs.end(), v->node) - inputs.begin());
        return s;
      }
      // Before an instruction that raises a user error, a view is rebuilt as a view (of the
      // input, or of the graph output of its base): the instruction must see eager's tensors.
      bool as_view = ctx.trace.user_error && alias.exact;
      if (as_view && alias.storage->input < 0 && !alias.views.empty()) {
        auto& outs = ctx.graph().outputs;
        auto it = std::find(outs.begin(), outs.end(), alias.storage->base);
        s.kind = OutputSpec::Kind::View;
        s.index = (int)(it - outs.begin());
        if (it == outs.end()) outs.push_back(alias.storage->base);
        for (int view : alias.views) {
          const graph::Node& n = ctx.graph().nodes[view];
          if (n.symbolic_attrs) unsupported("a view with dynamic sizes before an instruction that raises");
          s.views.push_back({n.op, n.attrs});
        }
        return s;
      }
      if (alias.storage->input >= 0 && (alias.storage->mutated || as_view)) {
        // a graph input written in place (or a view of it): the real input, which the
        // write-back updates, so that it keeps sharing memory with what eager code holds
        s.source = ctx.trace.input_sources.at(alias.storage->input);
        s.kind = alias.views.empty() ? OutputSpec::Kind::Source : OutputSpec::Kind::View;
        for (int view : alias.views) {
          const graph::Node& n = ctx.graph().nodes[view];
          if (n.symbolic_attrs) unsupported("a view with dynamic sizes of an input written in place");
          s.views.push_back({n.op, n.attrs});
        }
        return s;
      }
      auto& outs = ctx.graph().outputs;
      auto it = std::find(outs.begin(), outs.end(), v->node);
      s.kind = v->number ? OutputSpec::Kind::Number : OutputSpec::Kind::GraphOutput;
      s.index = (int)(it - outs.begin());
      if (it == outs.end()) outs.push_back(v->node);
      return s;
    }
    case Var::Kind::Tuple: case Var::Kind::List:
      if (v->is(Var::Kind::List) && !made_in_trace(v)) break;  // the caller's own list: read it again
      s.kind = v->is(Var::Kind::Tuple) ? (v->size ? OutputSpec::Kind::Size : OutputSpec::Kind::Tuple)
                                       : OutputSpec::Kind::List;
      for (auto& item : v->items) s.items.push_back(rebuild(ctx, item));
      if (v->is(Var::Kind::Tuple) && v->self) {  // a record: cls(*fields)
        s.value = v->self->obj;
        Py_INCREF(s.value);
      }
      return s;
    case Var::Kind::Dict:
      if (!made_in_trace(v)) break;  // a dict from the frame, unchanged
      s.kind = OutputSpec::Kind::Dict;
      for (size_t i = 0; i < v->keys.size(); i++) {
        s.items.push_back(rebuild(ctx, v->keys[i]));
        s.items.push_back(rebuild(ctx, v->items[i]));
      }
      return s;
    case Var::Kind::Cell:
      if (v->obj) {  // a real cell: the same cell (stores into it are replayed)
        s.kind = OutputSpec::Kind::Source;
        s.source = v->cell_source;
        return s;
      }
      s.kind = OutputSpec::Kind::Cell;
      if (!v->contents_read) s.items.push_back(unchanged(v->source));  // a root argument never read
      else if (v->contents) s.items.push_back(rebuild(ctx, v->contents));
      return s;
    case Var::Kind::Function:
      if (!v->made) break;
      s.kind = OutputSpec::Kind::Function;
      s.value = v->obj;
      Py_INCREF(s.value);
      for (const VarRef& part : {v->made->defaults, v->made->kwdefaults}) {
        OutputSpec p;
        p.kind = OutputSpec::Kind::Null;
        s.items.push_back(part ? rebuild(ctx, part) : std::move(p));
      }
      {
        OutputSpec closure;
        closure.kind = v->made->closure.empty() ? OutputSpec::Kind::Null : OutputSpec::Kind::Tuple;
        for (auto& c : v->made->closure) closure.items.push_back(rebuild(ctx, c));
        s.items.push_back(std::move(closure));
      }
      return s;
    case Var::Kind::DictView:
      s.kind = OutputSpec::Kind::Call;
      s.name = v->name;
      s.items.push_back(rebuild(ctx, v->self));
      return s;
    case Var::Kind::Null:
      s.kind = OutputSpec::Kind::Null;
      return s;
    case Var::Kind::SymInt:  // a size: computed from the frame's tensors on each run
      s.kind = OutputSpec::Kind::SizeExpr;
      s.expr = v->expr;
      return s;
    case Var::Kind::Method:
      s.kind = OutputSpec::Kind::Method;
      s.name = v->name;
      s.items.push_back(rebuild(ctx, v->self));
      return s;
    case Var::Kind::Iterator:
      s.kind = OutputSpec::Kind::Iterator;
      for (size_t i = v->position; i < v->items.size(); i++) s.items.push_back(rebuild(ctx, v->items[i]));
      return s;
    default:
      break;
  }
  if (v->source) {  // an object read from the frame, unchanged: read it again (no reference kept)
    s.kind = OutputSpec::Kind::Source;
    s.source = v->source;
    return s;
  }
  if (v->obj) {
    s.kind = OutputSpec::Kind::Constant;
    s.value = v->obj;
    Py_INCREF(s.value);
    return s;
  }
  unsupported("cannot rebuild " + v->describe() + " after the graph");
}

// The stores the trace made into cells, globals and attributes, as side effects to replay.
// Which objects alias is part of what the trace assumed: when it stored an attribute of an
// object of some class and touched objects of that class at two or more sources, those are
// guarded by identity (objects of different classes cannot be one object); when it stored
// into a cell and also used a cell of another function, the root's cells are.
std::vector<SideEffect> side_effects(TraceContext& ctx) {
  std::vector<SideEffect> out;
  for (auto& cell : ctx.stored_cells) {
    SideEffect e;
    e.kind = SideEffect::Kind::Cell;
    e.target = cell->cell_source;
    e.value = rebuild(ctx, cell->contents);
    out.push_back(std::move(e));
  }
  std::vector<PyTypeObject*> stored_types;
  for (auto& st : ctx.stores) {
    SideEffect e;
    e.kind = st.kind;
    e.target = st.target_source;
    e.name = st.name;
    if (st.kind == SideEffect::Kind::Contents) {  // a list of the frame's: its items now, as a new list
      e.value.kind = OutputSpec::Kind::List;
      for (auto& item : st.value->items) e.value.items.push_back(rebuild(ctx, item));
    } else {
      e.value = rebuild(ctx, st.value);
    }
    out.push_back(std::move(e));
    if (st.kind == SideEffect::Kind::Attr) stored_types.push_back(Py_TYPE(st.target));
  }
  for (PyTypeObject* type : stored_types) {
    std::vector<std::pair<SourceRef, PyObject*>> touched;
    for (auto& [src, obj] : ctx.attr_objects) {
      bool seen = false;
      for (auto& t : touched) seen = seen || t.first->str() == src->str();
      if (Py_TYPE(obj) == type && !seen) touched.emplace_back(src, obj);
    }
    if (touched.size() >= 2)
      for (auto& [src, obj] : touched) ctx.guards().add_id_match(src, obj);
  }
  bool root_cells = false, other_cells = false;
  for (auto& [cell, v] : ctx.cells) {
    bool root = v->cell_source->kind != guards::Source::Kind::Item;
    root_cells = root_cells || root;
    other_cells = other_cells || !root;
  }
  if (!ctx.stored_cells.empty() && root_cells && other_cells)
    for (auto& [cell, v] : ctx.cells)
      if (v->cell_source->kind != guards::Source::Kind::Item) ctx.guards().add_id_match(v->cell_source, cell);
  return out;
}
}  // namespace

namespace {
// One pass of trace_frame. `stop_step` >= 0: stop before that root step (see trace_frame),
// which raised `stop_error` if that is set.
Trace trace_pass(PyCodeObject* code, const guards::FrameValues& frame, int start_offset, const DynamicPolicy& dynamic,
                 const TraceOptions& options, int stop_step, const std::string& stop_reason,
                 std::shared_ptr<const Error> stop_error, int* failed_step_mutated) {
  TraceContext ctx;
  ctx.trace.user_error = std::move(stop_error);  // the user error of the step it stops before
  ctx.root = frame;
  ctx.root_globals = frame.globals;
  ctx.options = options;
  ctx.dynamic = dynamic;
  ctx.entry_grad_enabled = ctx.grad_enabled = grad_enabled();
  ctx.guards().add_grad_mode(grad_enabled(), autocast_state());
  FrameInterpreter interp(ctx, code, frame.globals, nullptr, {});
  interp.root_ = true;
  interp.stop_step = stop_step;
  interp.stop_reason = stop_reason;
  interp.lazy_.resize(code->co_nlocalsplus);
  for (int i = 0; i < code->co_nlocalsplus && i < frame.nlocals; i++) {
    if (!frame.locals[i]) continue;
    std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    interp.lazy_[i] = {frame.locals[i], guards::Source::local(i, name)};
  }
  // Cells. Free slots: the function's closure cells; the frame's values hold their contents
  // (L['acc']). A resume unit of a frame with cell variables gets the cells themselves in
  // its cell and free slots (they are shared with functions made before the break).
  const bool cells_in_slots = start_offset > 0 && code->co_ncellvars > 0;
  for (int i = 0; i < code->co_nlocalsplus; i++) {
    int kind = (unsigned char)PyBytes_AS_STRING(code->co_localspluskinds)[i];
    bool free = kind & kLocalFree, cell = kind & kLocalCell;
    if (!free && !(cell && cells_in_slots)) continue;
    guards::SourceRef local = guards::Source::local(i, PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i)));
    if (cells_in_slots) {
      PyObject* c = i < frame.nlocals ? frame.locals[i] : nullptr;
      if (!c || !PyCell_Check(c)) unsupported("internal: a resume unit without the frame's cells");
      interp.set_cell(i, cell_var(ctx, c, guards::Source::cell_contents(local), local));
    } else {
      int k = i - (code->co_nlocalsplus - code->co_nfreevars);
      if (!frame.closure || !PyTuple_Check(frame.closure) || k >= PyTuple_GET_SIZE(frame.closure))
        unsupported("internal: the function's closure is not available");
      // at entry the frame's values hold the contents; after a graph break the instruction
      // that ran may have changed them, so a resume unit reads the cell itself
      guards::SourceRef cell = guards::Source::closure(k, local->name);
      interp.set_cell(i, cell_var(ctx, PyTuple_GET_ITEM(frame.closure, k),
                                  start_offset > 0 ? guards::Source::cell_contents(cell) : local, cell));
    }
  }
  std::vector<VarRef> stack;
  for (int i = 0; i < frame.nstack; i++)
    stack.push_back(frame.stack[i] ? wrap(ctx, frame.stack[i], guards::Source::stack(i)) : null_var());
  interp.set_start(start_offset, std::move(stack));
  VarRef result = interp.run();
  *failed_step_mutated = interp.failed_step_mutated;
  Trace& t = ctx.trace;
  if (result) {
    t.output = rebuild(ctx, result);
    t.grad_enabled_after = ctx.grad_enabled;
  } else {
    for (auto& v : interp.exit_stack_) t.exit_stack.push_back(rebuild(ctx, v));
    for (int i = 0; i < code->co_nlocalsplus; i++) {
      OutputSpec spec;
      int kind = (unsigned char)PyBytes_AS_STRING(code->co_localspluskinds)[i];
      VarRef v = i < (int)interp.exit_locals_.size() ? interp.exit_locals_[i] : nullptr;
      if (i < (int)interp.exit_lazy_.size() && interp.exit_lazy_[i].first) {
        spec = unchanged(interp.exit_lazy_[i].second);  // never read while tracing
      } else if (v && v->is(Var::Kind::Cell) && code->co_ncellvars == 0) {
        // a free slot: the resumed frame gets the closure's cell back (ResumeCells::FromValues),
        // and the next unit reads the cell itself
        spec.kind = OutputSpec::Kind::Absent;
      } else if (v) {
        spec = rebuild(ctx, v);  // with cell variables: the cells (ResumeCells::AreCells)
      } else {
        spec.kind = OutputSpec::Kind::Absent;
      }
      if (code->co_ncellvars > 0 && (kind & (kLocalCell | kLocalFree)) && !(v && v->is(Var::Kind::Cell)))
        unsupported("a cell variable unbound at a graph break (a comprehension's loop variable that a "
                    "lambda captured) cannot be handed back to CPython with the frame's other cells");
      t.exit_locals.push_back(std::move(spec));
    }
    t.exit_kw_names = interp.exit_kw_names_;
    if (t.exit_kw_names) t.native_resume_offset = interp.exit_kw_names_offset_;
  }
  add_input_mutations(ctx);
  t.side_effects = side_effects(ctx);
  guard_size_facts(ctx);
  ctx.graph().apply_replacements();
  ctx.graph().eliminate_dead_code(interp.exit_graph_size_);
  return std::move(ctx.trace);
}
}  // namespace

// A step that fails after changing a Var in place (an inlined call that appended to a list
// or stored into a cell, then met something unsupported) leaves those changes in the Vars
// the break would rebuild, though the breaking instruction then runs for real: the frame is
// traced again and stops before that step, as Dynamo restarts analysis at a graph break.
Trace trace_frame(PyCodeObject* code, const guards::FrameValues& frame, int start_offset,
                  const DynamicPolicy& dynamic, const TraceOptions& options) {
  int failed_step = -1;
  Trace t = trace_pass(code, frame, start_offset, dynamic, options, -1, "", nullptr, &failed_step);
  if (failed_step < 0) return t;
  int again = -1;
  return trace_pass(code, frame, start_offset, dynamic, options, failed_step, t.break_reason, t.user_error, &again);
}

}  // namespace mini::capture
