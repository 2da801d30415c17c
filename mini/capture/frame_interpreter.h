// frame_interpreter.h — one frame being run symbolically (Dynamo's InstructionTranslator):
// its value stack and locals as Vars, the instruction loop, and one handler per opcode or
// family of opcodes. Internal to capture/; the files that hold its parts:
//   tracer.cpp                 the loop (run), the dispatch table, where a unit ends (exit_at),
//                              and trace_frame
//   interpret_locals.cpp       locals, cells, constants, globals, attributes, the stack
//   interpret_operators.cpp    truth, binary and comparison operators, unary ops, f-strings
//   interpret_containers.cpp   building tuples, lists, dicts and slices; subscripts; iteration
//   interpret_control.cpp      calls, functions, jumps, with blocks, generators, raise, return;
//                              inline_function (a call's frame)
//   rebuild.cpp                Vars back into real objects after the graph (OutputSpec)
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "capture/bytecode.h"
#include "capture/trace_context.h"

namespace mini::capture {

// Borrowed -> owned, raising Unsupported with Python's error text on failure.
PyObject* checked(PyObject* result, const std::string& what);
inline bool is_constant(const VarRef& v) { return v->is(Var::Kind::Constant); }

// rebuild.cpp
// A value never read while tracing, as it was: a local slot as it is (unbound stays unbound),
// anything else read again from its source.
OutputSpec unchanged(const SourceRef& source);
// How to rebuild a Var as a real object after the graph has run.
OutputSpec rebuild(TraceContext& ctx, const VarRef& v);
// The stores the trace made into cells, globals and attributes, as side effects to replay.
std::vector<SideEffect> side_effects(TraceContext& ctx);

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

  // The opcode handlers, named in opcodes.def (its second field): each runs one instruction
  // over the stack and locals and returns the frame's result at a return, else null.
  using Handler = VarRef (FrameInterpreter::*)(const Instruction& in);
  VarRef op_unsupported(const Instruction& in);
  VarRef op_nothing(const Instruction& in);
  // interpret_locals.cpp
  VarRef op_make_cell(const Instruction& in);
  VarRef op_local(const Instruction& in);
  VarRef op_cell(const Instruction& in);
  VarRef op_load_const(const Instruction& in);
  VarRef op_load_global(const Instruction& in);
  VarRef op_store_global(const Instruction& in);
  VarRef op_load_attr(const Instruction& in);
  VarRef op_load_super_attr(const Instruction& in);
  VarRef op_store_attr(const Instruction& in);
  VarRef op_stack(const Instruction& in);
  // interpret_operators.cpp
  VarRef op_binary(const Instruction& in);
  VarRef op_compare(const Instruction& in);
  VarRef op_is(const Instruction& in);
  VarRef op_contains(const Instruction& in);
  VarRef op_unary(const Instruction& in);
  VarRef op_truth(const Instruction& in);
  VarRef op_intrinsic(const Instruction& in);
  VarRef op_format(const Instruction& in);
  VarRef op_build_string(const Instruction& in);
  // interpret_containers.cpp
  VarRef op_build_sequence(const Instruction& in);
  VarRef op_build_map(const Instruction& in);
  VarRef op_build_slice(const Instruction& in);
  VarRef op_list_update(const Instruction& in);
  VarRef op_dict_update(const Instruction& in);
  VarRef op_unpack(const Instruction& in);
  VarRef op_subscript(const Instruction& in);
  VarRef op_store_subscript(const Instruction& in);
  VarRef op_delete_subscript(const Instruction& in);
  VarRef op_iter(const Instruction& in);
  // interpret_control.cpp
  VarRef op_call(const Instruction& in);
  VarRef op_call_ex(const Instruction& in);
  VarRef op_function(const Instruction& in);
  VarRef op_return(const Instruction& in);
  VarRef op_jump(const Instruction& in);
  VarRef op_branch(const Instruction& in);
  VarRef op_with(const Instruction& in);
  VarRef op_generator(const Instruction& in);
  VarRef op_raise(const Instruction& in);

  // what the handlers share
  std::vector<VarRef> pop_n(int n);  // the top n values, bottom first
  void push_attr(VarRef v, bool method);  // v, with the NULL a method call's layout wants
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

}  // namespace mini::capture
