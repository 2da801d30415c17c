// frame_py311.cpp: cpython_frame.h for CPython 3.11 (Include/internal/pycore_frame.h).
//
// Compiled for every version but empty unless Python.h is 3.11's.
#include "cpython_frame.h"

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 11

#define Py_BUILD_CORE
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

// frame_hook.h spells the local kinds itself; they must be CPython's.
static_assert(CO_FAST_LOCAL == 0x20 && CO_FAST_CELL == 0x40 && CO_FAST_FREE == 0x80, "kinds");

namespace mini::capture::cpython_frame {

PyCodeObject* code(_PyInterpreterFrame* frame) { return frame->f_code; }
PyObject* function(_PyInterpreterFrame* frame) {
  return reinterpret_cast<PyObject*>(frame->f_func);
}
PyObject* globals(_PyInterpreterFrame* frame) { return frame->f_globals; }
PyObject* builtins(_PyInterpreterFrame* frame) { return frame->f_builtins; }

PyObject** localsplus(_PyInterpreterFrame* frame) { return frame->localsplus; }
int stack_top(_PyInterpreterFrame* frame) { return frame->stacktop; }
void set_stack_top(_PyInterpreterFrame* frame, int top) { frame->stacktop = top; }

bool has_started(_PyInterpreterFrame* frame) { return _PyInterpreterFrame_LASTI(frame) >= 0; }

void set_next_instruction(_PyInterpreterFrame* frame, int offset) {
  frame->prev_instr = _PyCode_CODE(frame->f_code) + offset / 2 - 1;
}

void clear_and_pop(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  // On 3.11 the hook's caller (_PyEval_Vector) always clears and pops the frame itself,
  // whether or not the frame was evaluated: there is nothing to do.
  (void)tstate;
  (void)frame;
}

}  // namespace mini::capture::cpython_frame

#endif
