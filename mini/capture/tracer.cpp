// tracer.cpp — the instruction loop of symbolic evaluation, and trace_frame().
#include "capture/tracer.h"

#include "capture/frame_hook.h"
#include "capture/trace_context.h"
#include "tensor/autograd.h"

namespace mini::capture {

PythonBridge& python_bridge() {
  static PythonBridge bridge;
  return bridge;
}

void unsupported(const std::string& reason) { throw Unsupported{reason}; }

std::string Var::describe() const {
  switch (kind) {
    case Kind::Tensor: return "Tensor";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Null: return "NULL";
    case Kind::Method: return "method " + name;
    case Kind::Iterator: return "iterator";
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
VarRef null_var() {
  static VarRef null = std::make_shared<Var>(Var::Kind::Null);
  return null;
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
    builtins_ = PyEval_GetBuiltins();
    locals_.resize(code->co_nlocalsplus);
  }

  VarRef run();
  bool root_ = false;
  std::vector<VarRef> exit_stack_, exit_locals_;  // the state before the breaking instruction
  std::vector<std::pair<PyObject*, SourceRef>> exit_lazy_;
  PyObject* exit_kw_names_ = nullptr;

  void set_start(int offset, std::vector<VarRef> stack) {
    jump(offset);
    stack_ = std::move(stack);
  }

 private:
  VarRef step(const Instruction& in);
  bool can_run_eagerly(const Instruction& in);
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
  void do_call(int argc, PyObject* kw_names);
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
  static PyObject* linecache = PyImport_ImportModule("linecache");
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

VarRef FrameInterpreter::load_global(const std::string& name) {
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
  SourceRef src;
  if (!globals_source_ || globals_ == ctx_.root_globals || builtin) src = guards::Source::global(name);
  else src = guards::Source::dict_item(globals_source_, name);
  return wrap(ctx_, v, src);
}

bool FrameInterpreter::truth(const VarRef& v_in) {
  VarRef v = specialize(ctx_, v_in);
  switch (v->kind) {
    case Var::Kind::Constant: {
      int t = PyObject_IsTrue(v->obj);
      if (t < 0) checked(nullptr, "truth value");
      return t;
    }
    case Var::Kind::Tuple: case Var::Kind::List: return !v->items.empty();
    case Var::Kind::Tensor:
      unsupported("a Python branch on a tensor's value (`if tensor:` or a comparison of a tensor) "
                  "is data-dependent; use mini.where(cond, a, b) to keep it in the graph");
    case Var::Kind::Null: unsupported("internal: truth of NULL");
    default: return true;  // functions, modules, objects are truthy
  }
}

VarRef FrameInterpreter::binary(int op, const VarRef& a_in, const VarRef& b_in) {
  VarRef a = specialize(ctx_, a_in), b = specialize(ctx_, b_in);
  bool tensors = a->is(Var::Kind::Tensor) || b->is(Var::Kind::Tensor);
  if (tensors) {
    OpKind kind = tensor_binary_kind(op);
    // x += y on a tensor writes x in place (Tensor.__iadd__, __isub__, __imul__, __itruediv__);
    // a tensor has no other in-place operator, so x **= 2 rebinds x, as Python does
    bool has_inplace = kind == OpKind::Add || kind == OpKind::Sub || kind == OpKind::Mul || kind == OpKind::Div;
    if (op >= 13 && has_inplace && a->is(Var::Kind::Tensor) && !ctx_.graph().nodes[a->node].wrapped_number)
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
  unsupported("the operator " + std::string(binary_symbol(op)) + " on " + a->describe() + " and " +
              b->describe() + " is not supported by mini's capture");
}

VarRef FrameInterpreter::compare(int richcmp, const VarRef& a_in, const VarRef& b_in) {
  // A dynamic size against a number: decided now, with a shape guard that keeps it so.
  for (int flip = 0; flip < 2; flip++) {
    const VarRef& s = flip ? b_in : a_in;
    const VarRef& c = flip ? a_in : b_in;
    if (s->is(Var::Kind::SymInt) && c->is(Var::Kind::Constant) && PyLong_Check(c->obj) && !PyBool_Check(c->obj)) {
      static const int swapped[] = {Py_GT, Py_GE, Py_EQ, Py_NE, Py_LT, Py_LE};
      int op = flip ? swapped[richcmp] : richcmp;
      int64_t value = PyLong_AsLongLong(c->obj), hint = PyLong_AsLongLong(s->obj);
      bool r = op == Py_LT ? hint < value : op == Py_LE ? hint <= value : op == Py_EQ ? hint == value
             : op == Py_NE ? hint != value : op == Py_GT ? hint > value : hint >= value;
      ctx_.guards().add_size_compare(s->source, (int)s->position, op, value, r);
      return make_constant(PyBool_FromLong(r));
    }
  }
  VarRef a = specialize(ctx_, a_in), b = specialize(ctx_, b_in);
  if (a->is(Var::Kind::Tensor) || b->is(Var::Kind::Tensor))
    return tensor_binary(ctx_, compare_kind(richcmp), a, b);
  if (is_constant(a) && is_constant(b))
    return make_constant(checked(PyObject_RichCompare(a->obj, b->obj, richcmp), "comparison"));
  if (a->obj && b->obj && (richcmp == Py_EQ || richcmp == Py_NE)) {
    bool same = a->obj == b->obj;
    return make_constant(PyBool_FromLong(richcmp == Py_EQ ? same : !same));
  }
  unsupported("comparing " + a->describe() + " with " + b->describe() + " is not supported by mini's capture");
}

VarRef FrameInterpreter::subscript(const VarRef& obj, const VarRef& index_in) {
  VarRef index = specialize(ctx_, index_in);
  if (obj->is(Var::Kind::Tensor)) return tensor_getitem(ctx_, obj, index);
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
  if (obj->is(Var::Kind::Module) && is_constant(index)) {
    PyObject* item = checked(PyObject_GetItem(obj->obj, index->obj), "module subscript");
    VarRef v = wrap_untracked(ctx_, item);
    Py_DECREF(item);
    return v;
  }
  unsupported("indexing " + obj->describe() + " with " + index->describe() + " is not supported by mini's capture");
}

VarRef FrameInterpreter::iterate(const VarRef& v) {
  auto it = std::make_shared<Var>(Var::Kind::Iterator);
  if (v->is(Var::Kind::Tuple) || v->is(Var::Kind::List)) {
    it->items = v->items;
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
    PyObject* mods = PyObject_GetAttrString(v->obj, "_modules");
    if (!mods || !PyDict_Check(mods)) { Py_XDECREF(mods); PyErr_Clear(); unsupported("iterating this module"); }
    SourceRef dict_src = v->source ? guards::Source::attr(v->source, "_modules") : nullptr;
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
    int64_t rows = m.sizes[0];  // a copy: tensor_getitem grows the graph, moving `m`
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

void FrameInterpreter::do_call(int argc, PyObject* kw_names) {
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
  push(call_var(ctx_, callee, std::move(args), std::move(kwargs)));
}

// Instructions a graph break can stop at and then run with real objects: calls, and
// branches on a value only known at run time. Inside a try block, CPython must run them
// (an exception has to reach the handler), so they end the unit natively instead.
bool FrameInterpreter::can_run_eagerly(const Instruction& in) {
  switch (in.op) {
    case Opcode::CALL: case Opcode::CALL_KW: case Opcode::CALL_FUNCTION_EX:
    case Opcode::POP_JUMP_IF_FALSE: case Opcode::POP_JUMP_IF_TRUE: case Opcode::TO_BOOL:
      break;
    default:
      return false;
  }
  std::vector<ExceptionTableEntry> table;
  if (!parse_exception_table(code_, &table)) { PyErr_Clear(); return false; }
  return find_exception_handler(table, in.offset) == nullptr;
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
    size_t graph_size = ctx_.graph().nodes.size();
    size_t writes = ctx_.writes.size();
    pc_++;
    try {
      if (VarRef r = step(in)) return r;
    } catch (const Unsupported& u) {
      undo_writes(ctx_, writes);  // the instruction runs again eagerly
      exit_stack_ = std::move(saved_stack);
      exit_locals_ = std::move(saved_locals);
      exit_lazy_ = std::move(saved_lazy);
      exit_kw_names_ = saved_kw;
      Trace& t = ctx_.trace;
      t.exit = can_run_eagerly(in) ? Trace::Exit::Break : Trace::Exit::Native;
      t.exit_instruction = in;
      t.break_reason = u.reason;
      t.break_location = ctx_.current_location;
      t.break_code = ctx_.current_code;
      (void)graph_size;
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
      case Opcode::NOP: case Opcode::RESUME: case Opcode::CACHE: case Opcode::EXTENDED_ARG:
      case Opcode::MAKE_CELL: case Opcode::COPY_FREE_VARS: case Opcode::PRECALL:
        break;
      case Opcode::LOAD_FAST: case Opcode::LOAD_FAST_CHECK: case Opcode::LOAD_DEREF:
      case Opcode::LOAD_CLOSURE:
        push(load_local(in.arg));
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
      case Opcode::STORE_FAST: case Opcode::STORE_DEREF: {
        VarRef v = pop();
        if (in.arg < (int)lazy_.size()) lazy_[in.arg].first = nullptr;
        locals_[in.arg] = v->is(Var::Kind::Null) ? nullptr : v;
        break;
      }
      case Opcode::STORE_FAST_LOAD_FAST:
        locals_[first_of_pair(in)] = pop();
        push(load_local(second_of_pair(in)));
        break;
      case Opcode::STORE_FAST_STORE_FAST:
        locals_[first_of_pair(in)] = pop();
        locals_[second_of_pair(in)] = pop();
        break;
      case Opcode::DELETE_FAST: locals_[in.arg] = nullptr; break;
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
      case Opcode::LOAD_ATTR: case Opcode::LOAD_METHOD: {
        std::string name = PyUnicode_AsUTF8(name_at(load_attr_name_index(in)));
        VarRef obj = pop();
        VarRef v = get_attr(ctx_, obj, name);
        bool method = load_attr_is_method(in);
        if (method && dialect.call_null_position == NullPosition::BeforeCallable) push(null_var());
        push(v);
        if (method && dialect.call_null_position == NullPosition::AfterCallable) push(null_var());
        break;
      }
      case Opcode::PUSH_NULL: push(null_var()); break;
      case Opcode::POP_TOP: pop(); break;
      case Opcode::COPY: push(top(in.arg)); break;
      case Opcode::SWAP: std::swap(top(1), top(in.arg)); break;
      case Opcode::KW_NAMES: kw_names_ = PyTuple_GET_ITEM(code_->co_consts, in.arg); break;
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
        if (kw) unsupported("calls with **kwargs are not supported by mini's capture");
        if (!(args->is(Var::Kind::Tuple) || args->is(Var::Kind::List)))
          unsupported("calls with *args of " + args->describe() + " are not supported");
        int n = (int)args->items.size();
        for (auto& a : args->items) push(a);
        do_call(n, nullptr);
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
        VarRef b = pop(), a = pop();
        bool same;
        if (a->obj && b->obj) same = a->obj == b->obj;
        else if (a->is(Var::Kind::Tensor) && b->is(Var::Kind::Tensor)) same = a->node == b->node;
        else same = false;  // a tensor (or a container) is not None or any constant
        push(make_constant(PyBool_FromLong(in.arg ? !same : same)));
        break;
      }
      case Opcode::CONTAINS_OP: {
        VarRef container = pop(), item = pop();
        if (!is_constant(container) || !is_constant(item))
          unsupported("`in` on " + container->describe() + " is not supported by mini's capture");
        int r = PySequence_Contains(container->obj, item->obj);
        if (r < 0) checked(nullptr, "in");
        push(make_constant(PyBool_FromLong(in.arg ? !r : r)));
        break;
      }
      case Opcode::UNARY_NEGATIVE: {
        VarRef a = pop();
        if (a->is(Var::Kind::Tensor)) push(tensor_unary(ctx_, OpKind::Neg, a));
        else if (is_constant(a)) push(make_constant(checked(PyNumber_Negative(a->obj), "-x")));
        else unsupported("-" + a->describe());
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
        for (auto& p : parts)
          if (!is_constant(p)) unsupported("a slice bound that is not a Python constant");
        PyObject* s = PySlice_New(parts[0]->obj, parts[1]->obj, in.arg == 3 ? parts[2]->obj : nullptr);
        push(make_constant(checked(s, "slice")));
        break;
      }
      case Opcode::BINARY_SLICE: {
        VarRef stop = pop(), start = pop(), obj = pop();
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
        break;
      }
      case Opcode::LIST_EXTEND: {
        VarRef v = pop();
        VarRef it = iterate(v);
        auto& dst = top(in.arg)->items;
        dst.insert(dst.end(), it->items.begin() + it->position, it->items.end());
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
      default:
        unsupported(std::string("the instruction ") + in.name + " is not supported by mini's capture");
    }
  }
  return nullptr;
}

// ---- inlining and the root frame ----------------------------------------------------------

VarRef inline_function(TraceContext& ctx, PyObject* function, SourceRef fsrc, std::vector<VarRef> args,
                       Kwargs kwargs) {
  if (ctx.depth >= ctx.options.max_inline_depth) unsupported("inlining is nested too deeply (recursion?)");
  auto* code = (PyCodeObject*)PyFunction_GET_CODE(function);
  int flags = code->co_flags;
  if (flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
    unsupported("calling a generator or coroutine function is not supported by mini's capture");
  if (code->co_ncellvars > 0)
    unsupported("calling a function that creates closures over its locals is not supported by mini's capture");
  int nargs = code->co_argcount, nkw = code->co_kwonlyargcount;
  std::vector<VarRef> locals(code->co_nlocalsplus);
  size_t npos = std::min<size_t>(args.size(), nargs);
  for (size_t i = 0; i < npos; i++) locals[i] = args[i];
  int slot = nargs + nkw;
  if (flags & CO_VARARGS) {
    locals[slot++] = make_tuple_var(std::vector<VarRef>(args.begin() + npos, args.end()));
  } else if (args.size() > (size_t)nargs) {
    unsupported("too many positional arguments for " + std::string(PyUnicode_AsUTF8(code->co_name)));
  }
  for (auto& [name, v] : kwargs) {
    int found = -1;
    for (int i = 0; i < nargs + nkw; i++)
      if (name == PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i))) found = i;
    if (found < 0) unsupported("unexpected keyword argument '" + name + "' (or **kwargs) in an inlined call");
    locals[found] = v;
  }
  PyObject* defaults = PyFunction_GET_DEFAULTS(function);
  int ndef = defaults ? (int)PyTuple_GET_SIZE(defaults) : 0;
  for (int i = 0; i < nargs; i++)
    if (!locals[i] && i >= nargs - ndef) locals[i] = wrap_untracked(ctx, PyTuple_GET_ITEM(defaults, i - (nargs - ndef)));
  PyObject* kwdefaults = PyFunction_GET_KW_DEFAULTS(function);
  for (int i = nargs; i < nargs + nkw; i++) {
    if (locals[i] || !kwdefaults) continue;
    PyObject* d = PyDict_GetItem(kwdefaults, PyTuple_GET_ITEM(code->co_localsplusnames, i));
    if (d) locals[i] = wrap_untracked(ctx, d);
  }
  for (int i = 0; i < nargs + nkw; i++)
    if (!locals[i]) unsupported("missing argument '" + std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i))) + "'");
  // free variables: the function's closure cells, guarded through the function object
  PyObject* closure = PyFunction_GET_CLOSURE(function);
  int nfree = closure ? (int)PyTuple_GET_SIZE(closure) : 0;
  for (int i = 0; i < nfree; i++) {
    PyObject* cell = PyTuple_GET_ITEM(closure, i);
    PyObject* value = PyCell_GET(cell);
    int local_index = code->co_nlocalsplus - nfree + i;
    if (!value) continue;
    if (!fsrc) unsupported("a function made inside the compiled code reads its closure");
    SourceRef s = guards::Source::cell_contents(guards::Source::item(guards::Source::attr(fsrc, "__closure__"), i));
    locals[local_index] = wrap(ctx, value, s);
  }
  PyObject* globals = PyFunction_GET_GLOBALS(function);
  SourceRef gsrc = globals == ctx.root_globals || !fsrc ? nullptr : guards::Source::attr(fsrc, "__globals__");
  if (globals != ctx.root_globals && !fsrc) unsupported("a function from another module without a source");
  ctx.depth++;
  std::string saved_code = ctx.current_code;
  FrameInterpreter inner(ctx, code, globals, gsrc, std::move(locals));
  VarRef result;
  try {
    result = inner.run();
  } catch (...) {
    ctx.depth--;
    throw;
  }
  ctx.depth--;
  ctx.current_code = saved_code;
  return result;
}

namespace {
// How to rebuild a Var as a real object after the graph has run.
OutputSpec rebuild(TraceContext& ctx, const VarRef& v_in) {
  VarRef v = specialize(ctx, v_in);
  OutputSpec s;
  switch (v->kind) {
    case Var::Kind::Tensor: {
      const Alias& alias = alias_of(ctx, v->node);
      if (alias.storage->input >= 0 && alias.storage->mutated) {
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
      s.kind = ctx.graph().nodes[v->node].wrapped_number ? OutputSpec::Kind::Number
                                                         : OutputSpec::Kind::GraphOutput;
      s.index = (int)(it - outs.begin());
      if (it == outs.end()) outs.push_back(v->node);
      return s;
    }
    case Var::Kind::Tuple: case Var::Kind::List:
      if (v->source && v->is(Var::Kind::List)) break;  // the caller's own list: read it again
      s.kind = v->is(Var::Kind::Tuple) ? OutputSpec::Kind::Tuple : OutputSpec::Kind::List;
      for (auto& item : v->items) s.items.push_back(rebuild(ctx, item));
      return s;
    case Var::Kind::Null:
      s.kind = OutputSpec::Kind::Null;
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
}  // namespace

Trace trace_frame(PyCodeObject* code, const guards::FrameValues& frame, int start_offset,
                  const DynamicPolicy& dynamic, const TraceOptions& options) {
  TraceContext ctx;
  ctx.root = frame;
  ctx.root_globals = frame.globals;
  ctx.options = options;
  ctx.dynamic = dynamic;
  ctx.guards().add_grad_mode(grad_enabled());
  if (code->co_ncellvars > 0)
    unsupported("the function creates closures over its locals (cell variables), which mini's "
                "capture does not model; it runs as plain Python");
  FrameInterpreter interp(ctx, code, frame.globals, nullptr, {});
  interp.root_ = true;
  interp.lazy_.resize(code->co_nlocalsplus);
  for (int i = 0; i < code->co_nlocalsplus && i < frame.nlocals; i++) {
    if (!frame.locals[i]) continue;
    std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    interp.lazy_[i] = {frame.locals[i], guards::Source::local(i, name)};
  }
  std::vector<VarRef> stack;
  for (int i = 0; i < frame.nstack; i++)
    stack.push_back(frame.stack[i] ? wrap(ctx, frame.stack[i], guards::Source::stack(i)) : null_var());
  interp.set_start(start_offset, std::move(stack));
  VarRef result = interp.run();
  Trace& t = ctx.trace;
  if (result) {
    t.output = rebuild(ctx, result);
  } else {
    for (auto& v : interp.exit_stack_) t.exit_stack.push_back(rebuild(ctx, v));
    for (int i = 0; i < code->co_nlocalsplus; i++) {
      OutputSpec spec;
      if (i < (int)interp.exit_lazy_.size() && interp.exit_lazy_[i].first) {
        spec.kind = OutputSpec::Kind::Source;  // never read while tracing: unchanged
        spec.source = interp.exit_lazy_[i].second;
      } else if (i < (int)interp.exit_locals_.size() && interp.exit_locals_[i]) {
        spec = rebuild(ctx, interp.exit_locals_[i]);
      } else {
        spec.kind = OutputSpec::Kind::Absent;
      }
      t.exit_locals.push_back(std::move(spec));
    }
    t.exit_kw_names = interp.exit_kw_names_;
  }
  add_input_mutations(ctx);
  ctx.graph().eliminate_dead_code();
  return std::move(ctx.trace);
}

}  // namespace mini::capture
