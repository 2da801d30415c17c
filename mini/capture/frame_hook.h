// frame_hook.h: the PEP 523 frame hook, the entry point of mini's capture stage.
//
// == capture/, the CPython-version-specific foundation ==
//
// While the hook is installed on a thread, CPython hands every Python frame that thread is
// about to run to a FrameCallback *before* the frame executes its first instruction (even
// before the MAKE_CELL / COPY_FREE_VARS prologue). The callback owns the frame from then on
// and must finish it in exactly one of three ways, returning what that call returns:
//
//   run_default(...)     evaluate the frame normally (CPython's own evaluator);
//   resume_native(...)   set the frame's locals and value stack and let CPython continue at
//                        any instruction boundary: how a frame continues eagerly after a
//                        graph break, or after compiled code has run its first part;
//   finish_frame(...)    the frame's result was computed elsewhere (compiled code): release
//                        and pop the frame, then return that result (or NULL on error).
//
// What comes in: frames (_PyInterpreterFrame*, opaque here). What goes out: the frame's
// result. FrameView reads the frame as the function body would see it at entry.
//
// Guarantees:
// - The callback never sees: generator, coroutine or async-generator code (co_flags); frames
//   entered with throwflag set; frames that have already started (a generator's next());
//   frames run while HookDisabled is alive on the thread. Those go straight to the evaluator
//   that was installed before this hook (normally _PyEval_EvalFrameDefault).
// - The hook is installed per thread: frames of other threads pass through untouched. The
//   interpreter-wide PEP 523 function is set while at least one thread has a callback, and
//   the previous one is restored after the last uninstall.
// - After run_default, resume_native or finish_frame the frame is gone (3.12+: popped by
//   the evaluator or by finish_frame; 3.11: _PyEval_Vector pops it when the hook returns).
//   The callback must not touch it again and must return the result immediately.
// - Every function here must be called with the GIL held.
//
// Version differences live in cpython_frame.h (frame_py311.cpp, frame_py312.cpp,
// frame_py313.cpp); nothing in this header depends on the Python version.
//
// References: Borrowed = owned by someone else, do not DECREF; New = the caller owns it;
// Stolen = the callee takes the caller's reference, even when it fails.
#pragma once

#include <Python.h>

#include <vector>

struct _PyInterpreterFrame;  // CPython's interpreter frame; read it through FrameView

namespace mini::capture {

// Called for each captured frame. Must finish the frame with run_default, resume_native or
// finish_frame. Returns New (the frame's result) or NULL with an exception set.
using FrameCallback = PyObject* (*)(PyThreadState* tstate, _PyInterpreterFrame* frame,
                                    int throwflag, void* user);

// Sets this thread's callback (replacing any earlier one) and makes sure the PEP 523 hook is
// installed on the interpreter. `user` is passed back to the callback untouched.
void install_frame_hook(FrameCallback callback, void* user);
// Clears this thread's callback; removes the PEP 523 hook when no thread has one left.
void uninstall_frame_hook();
bool frame_hook_installed();  // on this thread

// While alive, frames started by this thread pass through (mini's own work: tracing, guard
// evaluation, compiling). Nests.
class HookDisabled {
 public:
  HookDisabled();
  ~HookDisabled();
  HookDisabled(const HookDisabled&) = delete;
  HookDisabled& operator=(const HookDisabled&) = delete;
};
bool hook_disabled();  // on this thread

// Evaluates the frame with _PyEval_EvalFrameDefault. Returns New or NULL.
PyObject* run_default(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag);

// How resume_native reads the values it is given for cell and free variable slots.
enum class ResumeCells {
  // locals[i] is the *value* of each cell variable (NULL: empty cell); resume_native makes
  // a fresh cell for it, as MAKE_CELL would. Free variable slots get the cells of the
  // function's closure, as COPY_FREE_VARS would; locals[i] for them is ignored (and
  // released).
  FromValues,
  // locals[i] already is the cell object for every cell and free variable slot (use this
  // when a closure made before the resume point must share the frame's cell).
  AreCells,
};

// Continues the frame natively at byte `offset` (an Instruction::offset) with
//   locals: one entry per localsplus slot (co_nlocalsplus), NULL = unbound. Stolen.
//   stack:  the value stack, bottom first; may hold NULLs where CALL expects one. Stolen.
// For offset 0, locals are written as CPython's call left them (arguments in their slots,
// cell arguments as plain values) and the prologue runs natively; stack must be empty.
// Any other offset must be at or after the first RESUME (the end of the prologue), and
// resume_native runs the prologue's effect itself (see ResumeCells).
// The frame must be fresh (as handed to the callback). The stack depth must be the one
// the compiler expects at `offset` (bytecode.h: compute_stack_depths), or CPython will
// misbehave. Returns New (the frame's result) or NULL. On a bad argument it raises
// SystemError, releases the stolen references and finishes the frame itself.
PyObject* resume_native(PyThreadState* tstate, _PyInterpreterFrame* frame, int offset,
                        const std::vector<PyObject*>& locals,
                        const std::vector<PyObject*>& stack,
                        ResumeCells cells = ResumeCells::FromValues);

// Releases and pops a frame the callback did not evaluate (3.12+: clear and pop; 3.11:
// nothing, the caller does it). Call it, then return the result computed elsewhere.
void finish_frame(PyThreadState* tstate, _PyInterpreterFrame* frame);

// ---------------------------------------------------------------------------------------

// The kind bits of a localsplus slot (co_localspluskinds; CPython's CO_FAST_*).
enum LocalKind : unsigned char {
  kLocalHidden = 0x10,  // 3.12+: a variable of an inlined comprehension
  kLocalPlain = 0x20,   // an argument or a local variable
  kLocalCell = 0x40,    // captured by an inner function (0x60 when it is also an argument)
  kLocalFree = 0x80,    // comes from the function's closure
};

// A fresh frame (as the callback receives it) read as the function body will see it.
// Layout of the slots: positional args, keyword-only args, *args, **kwargs, other locals,
// cells that are not arguments, free variables. Indices are localsplus indices, the same as
// LOAD_FAST's and LOAD_DEREF's argument (3.11+).
struct FrameView {
  explicit FrameView(_PyInterpreterFrame* frame);

  _PyInterpreterFrame* frame;
  PyCodeObject* code;  // Borrowed
  PyObject* function;  // Borrowed (a PyFunctionObject)
  PyObject* globals;   // Borrowed dict
  PyObject* builtins;  // Borrowed dict

  int local_count() const;     // co_nlocalsplus
  int argument_count() const;  // slots holding arguments (including *args and **kwargs)
  // The value of slot i at entry, Borrowed, NULL if unbound. For a cell argument, the
  // argument itself (CPython has not wrapped it yet); for a free variable, the contents of
  // the closure cell.
  PyObject* local(int i) const;
  // Every local(i), Borrowed.
  std::vector<PyObject*> locals() const;
  PyObject* local_name(int i) const;  // Borrowed str, from co_localsplusnames
  int local_kind(int i) const;        // LocalKind bits
  // For a free variable slot: the closure's cell, Borrowed. NULL for other slots.
  PyObject* free_cell(int i) const;
};

}  // namespace mini::capture
