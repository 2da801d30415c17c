// cpython_frame.h: the few facts about CPython's _PyInterpreterFrame that differ between
// 3.11, 3.12 and 3.13 (internal to capture/; frame_hook.cpp is its only user).
//
// What comes in: a frame handed to the PEP 523 hook. What goes out: its code, function,
// globals, builtins, localsplus array and stack top, whether it has started, a way to set
// where it continues, and a way to clear and pop it.
//
// One implementation per version: frame_py311.cpp, frame_py312.cpp, frame_py313.cpp. Each
// is wrapped in one check of the Python version, so a build may compile all three. They are
// the only files of mini that define Py_BUILD_CORE and include CPython's internal headers
// (internal/pycore_frame.h), which is where the frame's layout lives.
//
// References: every accessor returns a Borrowed reference owned by the frame.
#pragma once

#include <Python.h>

struct _PyInterpreterFrame;  // opaque outside frame_py3XX.cpp

namespace mini::capture::cpython_frame {

// 3.11, 3.12: f_code. 3.13: f_executable (a PyObject*, always a code object here).
PyCodeObject* code(_PyInterpreterFrame* frame);
// 3.11: f_func. 3.12, 3.13: f_funcobj.
PyObject* function(_PyInterpreterFrame* frame);
PyObject* globals(_PyInterpreterFrame* frame);
PyObject* builtins(_PyInterpreterFrame* frame);

// localsplus[0 .. co_nlocalsplus) are the locals; the value stack follows, up to stack_top.
PyObject** localsplus(_PyInterpreterFrame* frame);
int stack_top(_PyInterpreterFrame* frame);
void set_stack_top(_PyInterpreterFrame* frame, int top);

// Has the frame executed any instruction? On entry LASTI is -1 on 3.11/3.12 (prev_instr
// points one unit before the code) and 0 on 3.13 (instr_ptr points at the first unit).
bool has_started(_PyInterpreterFrame* frame);

// Makes _PyEval_EvalFrameDefault continue at byte `offset`: prev_instr = code + offset/2 - 1
// on 3.11/3.12, instr_ptr = code + offset/2 on 3.13.
void set_next_instruction(_PyInterpreterFrame* frame, int offset);

// Releases everything the frame holds and pops it off the thread's frame data stack, for a
// frame the hook completes without evaluating. 3.11: nothing (the caller, _PyEval_Vector,
// clears and pops). 3.12: our copy of CPython's unexported clear_thread_frame. 3.13: the
// exported _PyEval_FrameClearAndPop.
void clear_and_pop(PyThreadState* tstate, _PyInterpreterFrame* frame);

}  // namespace mini::capture::cpython_frame
