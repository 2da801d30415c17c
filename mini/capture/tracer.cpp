// tracer.cpp — the instruction loop of symbolic evaluation (FrameInterpreter::run and the
// opcode dispatch table), where a unit ends when an instruction cannot be traced, and
// trace_frame(). The handlers live in interpret_*.cpp (frame_interpreter.h says which).
#include "capture/tracer.h"

#include <cstring>

#include "capture/frame_hook.h"
#include "capture/frame_interpreter.h"
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
// resume.cpp's run_instruction; notes/assignments/A9.md). One of three:
//   Break:  the graph so far is compiled; `in` runs eagerly with real objects (run_instruction)
//           and a new unit, compiled in turn, resumes after it. The most compiled, and only
//           where run_instruction can run `in`.
//   Native: the graph so far is compiled; CPython runs the rest of the frame from `in`. Always
//           valid (a NOP, LOAD_FAST... with any stack), and nothing after `in` is compiled.
//   Skip:   nothing of this unit is compiled; CPython runs it whole (earlier units' graphs stay).
//   in:  `in`, the instruction that raised Unsupported; `stack`, the symbolic value stack just
//        before it; skip_unit, the Unsupported asked for the whole unit to be left to CPython;
//        in_callee, it was raised inside a function being inlined at `in`.
//   The choice is yours, with FrameInterpreter's questions (frame_interpreter.h): in_handler
//   (ask it before any Break: inside a grad mode's with block it records, in
//   trace.grad_enabled_on_raise, the mode the block's end restores), in_loop (of an instruction
//   index: index_of_[in.offset / 2] is `in`'s) and can_run_eagerly. What it must respect, as
//   Dynamo does:
//   - a graph cut off inside a handler of the user's (a try block; a with block other than a
//     grad mode's, which capture replays) would leave the handler's exit to no one;
//   - a unit that breaks inside a loop of its own would break again on every iteration, a
//     resume unit per trip; one inside a function being inlined does not (the loop is its);
//   - the tests count the frames compiled and the graphs and breaks explain() reports, cause
//     by cause (tests/python/test_graph_breaks.py): the right answer compiles the most that is
//     safe.
Trace::Exit FrameInterpreter::exit_at(const Instruction& in, const std::vector<VarRef>& stack, bool skip_unit,
                                      bool in_callee) {
  // A9 BEGIN: resume units
  MINI_KIT_STUB(A9);
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

// One instruction: the handler opcodes.def names for its opcode.
VarRef FrameInterpreter::step(const Instruction& in) {
  static constexpr Handler kHandlers[] = {
#define MINI_OPCODE(name, handler) &FrameInterpreter::handler,
#include "capture/opcodes.def"
#undef MINI_OPCODE
      &FrameInterpreter::op_unsupported,  // Opcode::Unknown
  };
  set_line(in);
  return (this->*kHandlers[(int)in.op])(in);
}

VarRef FrameInterpreter::op_unsupported(const Instruction& in) {
  unsupported(std::string("the instruction ") + in.name + " is not supported by mini's capture");
}

VarRef FrameInterpreter::op_nothing(const Instruction&) { return nullptr; }

namespace {

// The frame's locals, each wrapped (and guarded) when the code first reads it.
void bind_lazy_locals(FrameInterpreter& interp, PyCodeObject* code, const guards::FrameValues& frame) {
  interp.lazy_.resize(code->co_nlocalsplus);
  for (int i = 0; i < code->co_nlocalsplus && i < frame.nlocals; i++) {
    if (!frame.locals[i]) continue;
    std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    interp.lazy_[i] = {frame.locals[i], guards::Source::local(i, name)};
  }
}

// Cells. Free slots: the function's closure cells; the frame's values hold their contents
// (L['acc']). A resume unit of a frame with cell variables gets the cells themselves in its
// cell and free slots (they are shared with functions made before the break).
void bind_cells(TraceContext& ctx, FrameInterpreter& interp, PyCodeObject* code,
                const guards::FrameValues& frame, int start_offset) {
  const bool cells_in_slots = start_offset > 0 && code->co_ncellvars > 0;
  for (int i = 0; i < code->co_nlocalsplus; i++) {
    int kind = (unsigned char)PyBytes_AS_STRING(code->co_localspluskinds)[i];
    bool free = kind & kLocalFree, cell = kind & kLocalCell;
    if (!free && !(cell && cells_in_slots)) continue;
    const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    guards::SourceRef local = guards::Source::local(i, name);
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
      guards::SourceRef cell = guards::Source::closure(k, name);
      interp.set_cell(i, cell_var(ctx, PyTuple_GET_ITEM(frame.closure, k),
                                  start_offset > 0 ? guards::Source::cell_contents(cell) : local, cell));
    }
  }
}

// How local slot `i` is rebuilt at the break: as it was where the trace never read it; a free
// slot's cell not at all (the resumed frame gets the closure's cell back,
// ResumeCells::FromValues, and the next unit reads the cell itself); else its Var rebuilt
// (with cell variables: the cells, ResumeCells::AreCells).
OutputSpec exit_local(TraceContext& ctx, const FrameInterpreter& interp, PyCodeObject* code, int i) {
  OutputSpec spec;
  int kind = (unsigned char)PyBytes_AS_STRING(code->co_localspluskinds)[i];
  VarRef v = i < (int)interp.exit_locals_.size() ? interp.exit_locals_[i] : nullptr;
  if (i < (int)interp.exit_lazy_.size() && interp.exit_lazy_[i].first) {
    spec = unchanged(interp.exit_lazy_[i].second);  // never read while tracing
  } else if (v && v->is(Var::Kind::Cell) && code->co_ncellvars == 0) {
    spec = OutputSpec::Absent{};
  } else if (v) {
    spec = rebuild(ctx, v);
  } else {
    spec = OutputSpec::Absent{};
  }
  if (code->co_ncellvars > 0 && (kind & (kLocalCell | kLocalFree)) && !(v && v->is(Var::Kind::Cell)))
    unsupported("a cell variable unbound at a graph break (a comprehension's loop variable that a "
                "lambda captured) cannot be handed back to CPython with the frame's other cells");
  return spec;
}

// The frame's state before the breaking instruction: its stack and locals as specs to rebuild.
void record_break_state(TraceContext& ctx, const FrameInterpreter& interp, PyCodeObject* code) {
  Trace& t = ctx.trace;
  for (auto& v : interp.exit_stack_) t.exit_stack.push_back(rebuild(ctx, v));
  for (int i = 0; i < code->co_nlocalsplus; i++) t.exit_locals.push_back(exit_local(ctx, interp, code, i));
  t.exit_kw_names = interp.exit_kw_names_;
  if (t.exit_kw_names) t.native_resume_offset = interp.exit_kw_names_offset_;
}

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
  bind_lazy_locals(interp, code, frame);
  bind_cells(ctx, interp, code, frame, start_offset);
  std::vector<VarRef> stack;
  for (int i = 0; i < frame.nstack; i++)
    stack.push_back(frame.stack[i] ? wrap(ctx, frame.stack[i], guards::Source::stack(i)) : null_var());
  interp.set_start(start_offset, std::move(stack));
  VarRef result = interp.run();
  *failed_step_mutated = interp.failed_step_mutated;
  if (result) {
    ctx.trace.output = rebuild(ctx, result);
    ctx.trace.grad_enabled_after = ctx.grad_enabled;
  } else {
    record_break_state(ctx, interp, code);
  }
  add_input_mutations(ctx);
  ctx.trace.side_effects = side_effects(ctx);
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