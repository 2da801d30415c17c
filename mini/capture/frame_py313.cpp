// frame_py313.cpp: cpython_frame.h for CPython 3.13 (Include/internal/pycore_frame.h).
//
// Compiled for every version but empty unless Python.h is 3.13's.
#include "cpython_frame.h"

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 13

#define Py_BUILD_CORE
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

// Exported by 3.13 but declared only in internal/pycore_ceval.h, which needs C11 atomics.
extern "C" void _PyEval_FrameClearAndPop(PyThreadState* tstate, _PyInterpreterFrame* frame);

// frame_hook.h spells the local kinds itself; they must be CPython's.
static_assert(CO_FAST_HIDDEN == 0x10 && CO_FAST_LOCAL == 0x20 && CO_FAST_CELL == 0x40 &&
                  CO_FAST_FREE == 0x80,
              "kinds");

namespace mini::capture::cpython_frame {

PyCodeObject* code(_PyInterpreterFrame* frame) { return _PyFrame_GetCode(frame); }
PyObject* function(_PyInterpreterFrame* frame) { return frame->f_funcobj; }
PyObject* globals(_PyInterpreterFrame* frame) { return frame->f_globals; }
PyObject* builtins(_PyInterpreterFrame* frame) { return frame->f_builtins; }

PyObject** localsplus(_PyInterpreterFrame* frame) { return frame->localsplus; }
int stack_top(_PyInterpreterFrame* frame) { return frame->stacktop; }
void set_stack_top(_PyInterpreterFrame* frame, int top) { frame->stacktop = top; }

bool has_started(_PyInterpreterFrame* frame) { return _PyInterpreterFrame_LASTI(frame) > 0; }

void set_next_instruction(_PyInterpreterFrame* frame, int offset) {
  frame->instr_ptr = _PyCode_CODE(_PyFrame_GetCode(frame)) + offset / 2;
}

void clear_and_pop(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  _PyEval_FrameClearAndPop(tstate, frame);
}

}  // namespace mini::capture::cpython_frame

#endif
