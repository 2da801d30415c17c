// resume.cpp — what happens at a graph break (unit.h): the breaking instruction runs with real
// objects (run_instruction, assignment A9) and the next unit starts after it.
#include "capture/unit.h"
#include "tensor/autograd.h"

namespace mini::capture {

// ---- resume units (A9) -----------------------------------------------------------------------
// At a graph break the unit's graph has run and the frame's locals and value stack are rebuilt
// as they were just before the breaking instruction (run_unit). run_instruction runs that one
// instruction with real objects, and the next unit of the frame starts at the offset it
// returns, with its own UnitCache (CodeCache::unit(offset)): torch's resume function
// resume_in_f_at_N, without a new code object.

const char* const kResumeStubFallback =
    "CPython runs the rest of the frame from each graph break: nothing after a break is compiled";

// run_instruction: the breaking instruction, run for real (assignment A9, with the tracer's
// exit_at; notes/assignments/A9.md).
//   in:  `in`, the instruction a Break exit stopped at: CALL, CALL_KW (3.13), CALL_FUNCTION_EX,
//        POP_JUMP_IF_FALSE / POP_JUMP_IF_TRUE, or TO_BOOL (3.13); `stack`, the frame's value
//        stack before it, owned references, NULL entries allowed (a NULL pushed for a call);
//        `kw_names`, the pending KW_NAMES tuple of 3.11/3.12 for a CALL (Borrowed), or null.
//   out: the byte offset where the next unit starts — in.next_offset, or in.jump_target for a
//        jump taken — with the instruction's operands popped (their references released) and
//        its result pushed (a new reference); or -1 with the Python error set (the call
//        raised: the error goes to the user as eager's would).
//   guarantees: exactly CPython's stack effect for that instruction on this version
//        (bytecode_dialect().call_null_position: where the NULL or self sits below the callable;
//        CALL_KW's names tuple on top; CALL_FUNCTION_EX's flag bit 0 for a kwargs dict); the
//        call goes through PyObject_Vectorcall / PyObject_Call, so a function it calls is
//        captured on its own by the hook; no reference leaks on either path. Any other
//        instruction: SystemError ("mini: cannot run <name> eagerly"), -1.
int run_instruction(const Instruction& in, std::vector<PyObject*>& stack, PyObject* kw_names) {
  // A9 BEGIN: resume units
  MINI_KIT_STUB(A9);
  const BytecodeDialect& dialect = bytecode_dialect();
  auto pop = [&] {
    PyObject* v = stack.back();
    stack.pop_back();
    return v;
  };
  switch (in.op) {
    case Opcode::CALL: case Opcode::CALL_KW: case Opcode::CALL_FUNCTION_EX: {
      PyObject* kwnames = in.op == Opcode::CALL_KW ? pop() : nullptr;
      if (in.op == Opcode::CALL && kw_names) { kwnames = kw_names; Py_INCREF(kwnames); }
      PyObject *ex_args = nullptr, *ex_kwargs = nullptr;
      std::vector<PyObject*> args;
      if (in.op == Opcode::CALL_FUNCTION_EX) {
        if (in.arg & 1) ex_kwargs = pop();
        ex_args = pop();
      } else {
        args.resize(in.arg);
        for (int i = in.arg - 1; i >= 0; i--) args[i] = pop();
      }
      PyObject* b = pop();
      PyObject* a = pop();
      PyObject *callable, *self = nullptr;
      if (dialect.call_null_position == NullPosition::BeforeCallable) {
        if (!a) callable = b;
        else { callable = a; self = b; }
      } else {
        callable = a;
        self = b;
      }
      PyObject* result;
      if (ex_args) {
        PyObject* tuple = PySequence_Tuple(ex_args);
        result = tuple ? PyObject_Call(callable, tuple, ex_kwargs) : nullptr;
        Py_XDECREF(tuple);
      } else {
        if (self) args.insert(args.begin(), self);
        size_t nkw = kwnames ? (size_t)PyTuple_GET_SIZE(kwnames) : 0;
        result = PyObject_Vectorcall(callable, args.data(), args.size() - nkw, kwnames);
        if (self) args.erase(args.begin());
      }
      for (PyObject* o : args) Py_XDECREF(o);
      Py_XDECREF(a);
      Py_XDECREF(b);
      Py_XDECREF(ex_args);
      Py_XDECREF(ex_kwargs);
      Py_XDECREF(kwnames);
      if (!result) return -1;
      stack.push_back(result);
      return in.next_offset;
    }
    case Opcode::POP_JUMP_IF_FALSE: case Opcode::POP_JUMP_IF_TRUE: {
      PyObject* v = pop();
      int t = PyObject_IsTrue(v);
      Py_DECREF(v);
      if (t < 0) return -1;
      return (t == (in.op == Opcode::POP_JUMP_IF_TRUE)) ? in.jump_target : in.next_offset;
    }
    case Opcode::TO_BOOL: {
      PyObject* v = pop();
      int t = PyObject_IsTrue(v);
      Py_DECREF(v);
      if (t < 0) return -1;
      stack.push_back(PyBool_FromLong(t));
      return in.next_offset;
    }
    default:
      PyErr_Format(PyExc_SystemError, "mini: cannot run %s eagerly", in.name);
      return -1;
  }
  // A9 END
}

// The resume point after a graph break: the instruction the trace stopped at runs with real
// objects on the rebuilt stack (the hook stays on: a function it calls is captured on its
// own). Next: *offset is the next unit's start, the instruction after it. Torch's resume
// functions (resume_in_f_at_N) start at the same place. While run_instruction is a course
// kit's stub (A9), Native: CPython runs the rest of the frame from the breaking instruction,
// uncompiled but right, said once. Error: a Python error is set.
ResumePlan resume_after_break(const Artifact& art, std::vector<PyObject*>& stack, int* offset) {
  int on_raise = art.grad_enabled_on_raise;
  try {
    *offset = run_instruction(art.exit_instruction, stack, art.exit_kw_names);
  } catch (const std::exception& e) {
    if (!is_assignment_stub(e)) {
      python_error(e);
      return ResumePlan::Error;
    }
    bool told = guards::warn_stub_fallback(e, kResumeStubFallback);
    return told ? ResumePlan::Native : ResumePlan::Error;
  }
  // the ends of the grad-mode with blocks around the call restore the mode and re-raise
  if (*offset < 0 && on_raise >= 0) set_grad_enabled(on_raise);
  return *offset < 0 ? ResumePlan::Error : ResumePlan::Next;
}

}  // namespace mini::capture
