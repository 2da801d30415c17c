// interpret_control.cpp — the FrameInterpreter's control flow (frame_interpreter.h): calls
// and the functions made while tracing, returns, jumps and branches, with blocks, generators
// and raise; and inline_function, which runs a called function's frame.
#include <cstring>

#include "capture/config.h"
#include "capture/frame_interpreter.h"

namespace mini::capture {

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

// MAKE_FUNCTION: a bare function of the code and this frame's globals; its defaults and
// closure stay Vars until the function is called (inlined) or rebuilt after the graph.
VarRef FrameInterpreter::make_function(const VarRef& code) {
  if (!code->obj || !PyCode_Check(code->obj)) unsupported("internal: MAKE_FUNCTION without a code object");
  auto made = std::make_shared<Var::MadeFunction>();
  made->globals_source = globals_ == ctx_.root_globals ? nullptr : globals_source_;
  auto fn = std::make_shared<Var>(Var::Function{false, std::move(made)});
  fn->obj = checked(PyFunction_New(code->obj, globals_), "MAKE_FUNCTION");
  return fn;
}

void FrameInterpreter::set_function_attribute(const VarRef& fn, int flag, const VarRef& value) {
  Var::MadeFunction& made = *fn->get<Var::Function>().made;
  switch (flag) {
    case 0x01:  // positional defaults: a tuple
      made.defaults = is_constant(value) ? make_tuple_var(iterate(value)->get<Var::Iterator>().items) : value;
      if (!made.defaults->is(Var::Kind::Tuple)) unsupported("internal: function defaults that are not a tuple");
      break;
    case 0x02:  // keyword-only defaults: a dict
      if (!value->is(Var::Kind::Dict)) unsupported("internal: keyword defaults that are not a dict");
      made.kwdefaults = value;
      break;
    case 0x04: {  // annotations: a tuple (name, annotation, ...) of real objects
      std::vector<VarRef> parts = iterate(value)->get<Var::Iterator>().items;
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
      for (auto& c : value->get<Var::Tuple>().items)
        if (!c->is(Var::Kind::Cell)) unsupported("internal: a closure that is not a tuple of cells");
      made.closure = value->get<Var::Tuple>().items;
      break;
    default:
      unsupported("the function attribute " + std::to_string(flag) + " is not supported by mini's capture");
  }
}

// ---- the opcode handlers ------------------------------------------------------------------

VarRef FrameInterpreter::op_call(const Instruction& in) {  // KW_NAMES, CALL, CALL_KW
  if (in.op == Opcode::KW_NAMES) {
    kw_names_ = PyTuple_GET_ITEM(code_->co_consts, in.arg);
    kw_names_offset_ = in.offset;
  } else if (in.op == Opcode::CALL_KW) {
    VarRef names = pop();
    do_call(in.arg, names->obj);
  } else {
    PyObject* kw = kw_names_;
    kw_names_ = nullptr;
    do_call(in.arg, kw);
  }
  return nullptr;
}

VarRef FrameInterpreter::op_call_ex(const Instruction& in) {  // CALL_FUNCTION_EX: f(*args, **kwargs)
  VarRef kw = (in.arg & 1) ? pop() : nullptr;
  VarRef args = pop();
  Kwargs kwargs;
  if (kw) {
    if (!kw->is(Var::Kind::Dict)) unsupported("calls with **kwargs of " + kw->describe() + " are not supported");
    const std::vector<VarRef>& keys = kw->get<Var::Dict>().keys;
    for (size_t i = 0; i < keys.size(); i++) {
      if (!PyUnicode_Check(keys[i]->obj)) unsupported("keywords must be strings");
      kwargs.emplace_back(PyUnicode_AsUTF8(keys[i]->obj), dict_value(ctx_, kw, i));
    }
  }
  if (!(args->is(Var::Kind::Tuple) || args->is(Var::Kind::List) || is_constant(args)))
    unsupported("calls with *args of " + args->describe() + " are not supported");
  std::vector<VarRef> items = iterate(args)->get<Var::Iterator>().items;
  for (auto& a : items) push(a);
  do_call((int)items.size(), nullptr, std::move(kwargs));
  return nullptr;
}

VarRef FrameInterpreter::op_function(const Instruction& in) {  // MAKE_FUNCTION, SET_FUNCTION_ATTRIBUTE
  if (in.op == Opcode::SET_FUNCTION_ATTRIBUTE) {
    VarRef fn = pop(), value = pop();
    const Var::Function* function = fn->as<Var::Function>();
    if (!function || !function->made) unsupported("internal: SET_FUNCTION_ATTRIBUTE on " + fn->describe());
    set_function_attribute(fn, in.arg, value);
    push(fn);
    return nullptr;
  }
  VarRef fn = make_function(pop());
  if (!bytecode_dialect().has_set_function_attribute)  // 3.11, 3.12: the attributes are below the code
    for (int flag : {0x08, 0x04, 0x02, 0x01})
      if (in.arg & flag) set_function_attribute(fn, flag, pop());
  push(fn);
  return nullptr;
}

VarRef FrameInterpreter::op_return(const Instruction& in) {  // RETURN_VALUE, RETURN_CONST
  if (in.op == Opcode::RETURN_CONST) return wrap_untracked(ctx_, PyTuple_GET_ITEM(code_->co_consts, in.arg));
  return pop();
}

VarRef FrameInterpreter::op_jump(const Instruction& in) {
  jump(in.jump_target);
  return nullptr;
}

VarRef FrameInterpreter::op_branch(const Instruction& in) {
  switch (in.op) {
    case Opcode::POP_JUMP_IF_FALSE: case Opcode::POP_JUMP_IF_TRUE:
      if (truth(pop()) == (in.op == Opcode::POP_JUMP_IF_TRUE)) jump(in.jump_target);
      break;
    case Opcode::POP_JUMP_IF_NONE: case Opcode::POP_JUMP_IF_NOT_NONE:
      if ((pop()->obj == Py_None) == (in.op == Opcode::POP_JUMP_IF_NONE)) jump(in.jump_target);
      break;
    default:  // JUMP_IF_FALSE_OR_POP, JUMP_IF_TRUE_OR_POP
      if (truth(top()) == (in.op == Opcode::JUMP_IF_TRUE_OR_POP)) jump(in.jump_target);
      else pop();
  }
  return nullptr;
}

VarRef FrameInterpreter::op_with(const Instruction&) {  // BEFORE_WITH: grad-mode blocks and nullcontext() only
  VarRef mode = pop();
  if (is_null_context(mode)) {
    push(make_method(mode, "__exit__"));
    push(null_context_enter(ctx_, mode));
    return nullptr;
  }
  if (!is_grad_mode(mode))
    unsupported("a with block over " + mode->describe() + ": mini's capture traces the grad-mode "
                "blocks (mini.no_grad(), enable_grad(), set_grad_enabled()) and contextlib.nullcontext() only");
  push(enter_grad_mode(ctx_, mode));
  push(make_constant((Py_INCREF(Py_None), Py_None)));  // what __enter__ returns
  return nullptr;
}

// A generator's frame run to its end by inline_function: RETURN_GENERATOR is its first resume
// (the value sent, None), and each YIELD_VALUE appends to what it yielded.
VarRef FrameInterpreter::op_generator(const Instruction& in) {
  if (!yielded_) unsupported(in.op == Opcode::YIELD_VALUE ? "a yield outside a generator that capture runs"
                                                          : "RETURN_GENERATOR outside a generator that capture runs");
  if (in.op == Opcode::YIELD_VALUE) {
    yielded_->push_back(pop());
    if (yielded_->size() > 100000) unsupported("a generator that yields more than 100000 values");
  }
  push(make_constant((Py_INCREF(Py_None), Py_None)));  // next() sends None
  return nullptr;
}

// `raise RuntimeError("...")` of a message known while tracing in mini's own Python (an op's
// check, as cat's): the user error it is, as a C++ op's: the unit ends before the instruction
// (eager raises it), and fullgraph=True raises it. A raise in the user's code stays
// unsupported (torch 2.11 does not trace it under fullgraph either).
VarRef FrameInterpreter::op_raise(const Instruction& in) {
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

// ---- inlining and the root frame ----------------------------------------------------------

namespace {

// One inlined call: the function, its source (null for one read without a source), and the
// Vars of a function made while tracing (null for a real one).
struct InlineCall {
  TraceContext& ctx;
  PyObject* function;
  const SourceRef& fsrc;
  const Var::MadeFunction* made;
  PyCodeObject* code;

  std::string arg_name(int i) const {
    return PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
  }
};

// The call's positional and keyword arguments in the parameters' slots (*args and **kwargs
// too, where the code takes them).
void bind_arguments(const InlineCall& call, std::vector<VarRef> args, const Kwargs& kwargs,
                    std::vector<VarRef>& locals) {
  PyCodeObject* code = call.code;
  int flags = code->co_flags, nargs = code->co_argcount, nkw = code->co_kwonlyargcount;
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
      if (name == call.arg_name(i)) found = i;
    if (found >= 0 && locals[found]) unsupported("got multiple values for argument '" + name + "'");
    if (found >= 0) locals[found] = v;
    else if (extra_kwargs)
      dict_set(call.ctx, extra_kwargs, make_constant(PyUnicode_FromString(name.c_str())), v);
    else unsupported("unexpected keyword argument '" + name + "' in an inlined call");
  }
  if (extra_kwargs) locals[slot] = extra_kwargs;
}

// The positional defaults: the real function's (constants), or the Vars of one made while
// tracing. A real function's are guarded through it (fn.__defaults__[i], and their count,
// which decides the parameters they belong to): they can be replaced.
std::vector<VarRef> positional_defaults(const InlineCall& call) {
  if (call.made && call.made->defaults) return call.made->defaults->get<Var::Tuple>().items;
  std::vector<VarRef> defaults;
  PyObject* d = PyFunction_GET_DEFAULTS(call.function);
  if (!d) return defaults;
  SourceRef dsrc = call.fsrc ? guards::Source::attr(call.fsrc, "__defaults__") : nullptr;
  if (dsrc) call.ctx.guards().add_length_check(dsrc, d);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d); i++) {
    PyObject* item = PyTuple_GET_ITEM(d, i);
    defaults.push_back(dsrc ? wrap(call.ctx, item, guards::Source::item(dsrc, (int)i))
                            : wrap_untracked(call.ctx, item));
  }
  return defaults;
}

// The default of keyword-only parameter `i`, or null: the Var of a function made while
// tracing, or the real function's (guarded as fn.__kwdefaults__[name]).
VarRef keyword_default(const InlineCall& call, int i) {
  PyObject* name = PyTuple_GET_ITEM(call.code->co_localsplusnames, i);
  if (call.made && call.made->kwdefaults) {
    int k = dict_find(call.made->kwdefaults, wrap_untracked(call.ctx, name));
    return k >= 0 ? call.made->kwdefaults->get<Var::Dict>().values[k] : nullptr;
  }
  PyObject* kwdefaults = PyFunction_GET_KW_DEFAULTS(call.function);
  PyObject* d = kwdefaults ? PyDict_GetItem(kwdefaults, name) : nullptr;
  if (!d) return nullptr;
  if (!call.fsrc) return wrap_untracked(call.ctx, d);
  SourceRef kwsrc = guards::Source::attr(call.fsrc, "__kwdefaults__");
  return wrap(call.ctx, d, guards::Source::dict_item(kwsrc, call.arg_name(i)));
}

// The parameters the call left unbound, from their defaults; one without is refused.
void fill_defaults(const InlineCall& call, std::vector<VarRef>& locals) {
  int nargs = call.code->co_argcount, nkw = call.code->co_kwonlyargcount;
  std::vector<VarRef> defaults = positional_defaults(call);
  int ndef = (int)defaults.size();
  for (int i = 0; i < nargs; i++)
    if (!locals[i] && i >= nargs - ndef) locals[i] = defaults[i - (nargs - ndef)];
  for (int i = nargs; i < nargs + nkw; i++)
    if (!locals[i]) locals[i] = keyword_default(call, i);
  for (int i = 0; i < nargs + nkw; i++)
    if (!locals[i]) unsupported("missing argument '" + call.arg_name(i) + "'");
}

// Free variables: the cells of the function's closure. Real ones are read through the
// function object (fn.__closure__[i].cell_contents, guarded on first read); those of a
// function made while tracing are the Vars it closed over.
void bind_closure(const InlineCall& call, std::vector<VarRef>& locals) {
  PyObject* closure = PyFunction_GET_CLOSURE(call.function);
  int nfree = call.made ? (int)call.made->closure.size() : closure ? (int)PyTuple_GET_SIZE(closure) : 0;
  if (nfree != call.code->co_nfreevars)
    unsupported("internal: the closure does not match the code's free variables");
  for (int i = 0; i < nfree; i++) {
    int local_index = call.code->co_nlocalsplus - nfree + i;
    if (call.made) {
      locals[local_index] = call.made->closure[i];
      continue;
    }
    if (!call.fsrc) unsupported("a function read without a source reads its closure");
    SourceRef cell_src = guards::Source::item(guards::Source::attr(call.fsrc, "__closure__"), i);
    locals[local_index] = cell_var(call.ctx, PyTuple_GET_ITEM(closure, i),
                                   guards::Source::cell_contents(cell_src), cell_src);
  }
}

// The source of the function's globals: none for the root frame's module (read as the root's
// globals); a function from another module needs one, unless it is mini's own library.
SourceRef globals_source(const InlineCall& call) {
  PyObject* globals = PyFunction_GET_GLOBALS(call.function);
  TraceContext& ctx = call.ctx;
  SourceRef gsrc = call.made                                    ? call.made->globals_source
                   : globals == ctx.root_globals || !call.fsrc ? nullptr
                                                               : guards::Source::attr(call.fsrc, "__globals__");
  if (globals != ctx.root_globals && !gsrc && !is_mini_library(globals))
    unsupported("a function from another module without a source");
  return gsrc;
}

// Runs the function's body with its parameters bound: its return value. A generator (a
// generator expression above all: sum(f(t) for t in xs)) runs to its end here, and the call
// returns an iterator over what it yielded. That is the generator's values in order for every
// consumer that takes them all (sum, all, list, a for loop); its body's work happens at the
// call rather than interleaved with the consumer's, which only a generator whose body has
// effects the consumer observes could tell (Dynamo steps it).
VarRef run_inlined(const InlineCall& call, const SourceRef& gsrc, std::vector<VarRef> locals) {
  TraceContext& ctx = call.ctx;
  bool generator = call.code->co_flags & CO_GENERATOR;
  ctx.depth++;
  std::string saved_code = ctx.current_code;
  FrameInterpreter inner(ctx, call.code, PyFunction_GET_GLOBALS(call.function), gsrc, std::move(locals));
  std::vector<VarRef> yielded;
  if (generator) inner.yielded_ = &yielded;
  VarRef result;
  try {
    result = inner.run();
    if (generator) {
      result = std::make_shared<Var>(Var::Iterator{std::move(yielded)});
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

}  // namespace

VarRef inline_function(TraceContext& ctx, PyObject* function, SourceRef fsrc, std::vector<VarRef> args,
                       Kwargs kwargs, const Var::MadeFunction* made) {
  if (ctx.depth >= ctx.options.max_inline_depth) unsupported("inlining is nested too deeply (recursion?)");
  auto* code = (PyCodeObject*)PyFunction_GET_CODE(function);
  if (is_parallel_code(code)) unsupported(kParallelCodeBreak);
  // the code is the function's own attribute, replaced in place by a hot reload (IPython's
  // autoreload assigns fn.__code__): guarded where the function is read, as its defaults
  if (fsrc) ctx.guards().add_id_match(guards::Source::attr(fsrc, "__code__"), (PyObject*)code);
  if (code->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR))
    unsupported("calling a coroutine or async generator function is not supported by mini's capture");
  InlineCall call{ctx, function, fsrc, made, code};
  std::vector<VarRef> locals(code->co_nlocalsplus);
  bind_arguments(call, std::move(args), kwargs, locals);
  fill_defaults(call, locals);
  bind_closure(call, locals);
  SourceRef gsrc = globals_source(call);
  return run_inlined(call, gsrc, std::move(locals));
}
}  // namespace mini::capture
