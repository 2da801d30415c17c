// frame_py312.cpp: cpython_frame.h for CPython 3.12 (Include/internal/pycore_frame.h).
//
// Compiled for every version but empty unless Python.h is 3.12's.
#include "cpython_frame.h"

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 12

#define Py_BUILD_CORE
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

// frame_hook.h spells the local kinds itself; they must be CPython's.
static_assert(CO_FAST_HIDDEN == 0x10 && CO_FAST_LOCAL == 0x20 && CO_FAST_CELL == 0x40 &&
                  CO_FAST_FREE == 0x80,
              "kinds");

namespace mini::capture::cpython_frame {

PyCodeObject* code(_PyInterpreterFrame* frame) { return frame->f_code; }
PyObject* function(_PyInterpreterFrame* frame) { return frame->f_funcobj; }
PyObject* globals(_PyInterpreterFrame* frame) { return frame->f_globals; }
PyObject* builtins(_PyInterpreterFrame* frame) { return frame->f_builtins; }

PyObject** localsplus(_PyInterpreterFrame* frame) { return frame->localsplus; }
int stack_top(_PyInterpreterFrame* frame) { return frame->stacktop; }
void set_stack_top(_PyInterpreterFrame* frame, int top) { frame->stacktop = top; }

bool has_started(_PyInterpreterFrame* frame) { return _PyInterpreterFrame_LASTI(frame) >= 0; }

void set_next_instruction(_PyInterpreterFrame* frame, int offset) {
  frame->prev_instr = _PyCode_CODE(frame->f_code) + offset / 2 - 1;
}

namespace {

// What CPython's _PyThreadState_PopFrame (Python/pystate.c) does; 3.12 does not export it.
// Frames live in chunks of the thread's data stack; the first frame of a chunk owns it.
void pop_frame(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  PyObject** base = reinterpret_cast<PyObject**>(frame);
  _PyStackChunk* chunk = tstate->datastack_chunk;
  if (base != &chunk->data[0]) {
    tstate->datastack_top = base;
    return;
  }
  // The frame was the first in its chunk: give the chunk back and continue in the previous
  // one (the root chunk is never popped, so `previous` exists).
  _PyStackChunk* previous = chunk->previous;
  tstate->datastack_top = &previous->data[previous->top];
  tstate->datastack_chunk = previous;
  tstate->datastack_limit = reinterpret_cast<PyObject**>(
      reinterpret_cast<char*>(previous) + previous->size);
  PyObjectArenaAllocator arena;  // the allocator CPython's _PyObject_VirtualFree uses
  PyObject_GetArenaAllocator(&arena);
  arena.free(arena.ctx, chunk, chunk->size);
}

}  // namespace

// What CPython's clear_thread_frame (Python/ceval.c) and _PyFrame_ClearExceptCode
// (Python/frame.c) do for a frame that the hook never evaluated. 3.12 exports neither.
void clear_and_pop(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  if (frame->frame_obj != nullptr) {
    // A frame object is only made for a complete frame, and this one never ran its first
    // RESUME (nor was it linked as the current frame), so nothing can have asked for one.
    // CPython would hand the frame's data over to the frame object here (take_ownership).
    Py_FatalError("mini capture: a frame object exists for a frame that never ran");
  }
  tstate->c_recursion_remaining--;
  for (int i = 0; i < frame->stacktop; i++) {
    Py_XDECREF(frame->localsplus[i]);
  }
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  tstate->c_recursion_remaining++;
  pop_frame(tstate, frame);
}

}  // namespace mini::capture::cpython_frame

#endif
