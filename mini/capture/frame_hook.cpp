// frame_hook.cpp: the PEP 523 hook, FrameView, and the three ways to finish a frame.
// See frame_hook.h for the contract. The per-version frame layout is behind
// cpython_frame.h; this file is the same for 3.11, 3.12 and 3.13.
#include "frame_hook.h"

#include "cpython_frame.h"

namespace mini::capture {

namespace {

// This thread's callback and its "inside mini" depth.
struct ThreadHook {
  FrameCallback callback = nullptr;
  void* user = nullptr;
  int disabled_depth = 0;
};
thread_local ThreadHook t_hook;

// Interpreter-wide state, protected by the GIL.
int g_threads_with_callback = 0;
_PyFrameEvalFunction g_previous_eval_frame = nullptr;  // restored by the last uninstall

PyObject* pass_through(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag) {
  return g_previous_eval_frame(tstate, frame, throwflag);
}

// Frames the callback may take: ordinary function frames that have not started yet.
bool is_capturable(_PyInterpreterFrame* frame) {
  PyCodeObject* code = cpython_frame::code(frame);
  const int generator_flags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;
  if ((code->co_flags & generator_flags) != 0) {
    return false;  // each next() re-enters the hook; the frame's life is the generator's
  }
  return !cpython_frame::has_started(frame);
}

PyObject* eval_frame_shim(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag) {
  const ThreadHook& hook = t_hook;
  if (hook.callback == nullptr || hook.disabled_depth > 0 || throwflag != 0 ||
      !is_capturable(frame)) {
    return pass_through(tstate, frame, throwflag);
  }
  return hook.callback(tstate, frame, throwflag, hook.user);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Installing.

void install_frame_hook(FrameCallback callback, void* user) {
  if (callback == nullptr) {
    uninstall_frame_hook();
    return;
  }
  const bool had_callback = t_hook.callback != nullptr;
  t_hook.callback = callback;
  t_hook.user = user;
  if (had_callback || g_threads_with_callback++ > 0) {
    return;
  }
  PyInterpreterState* interp = PyInterpreterState_Get();
  g_previous_eval_frame = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (g_previous_eval_frame == eval_frame_shim) {
    g_previous_eval_frame = _PyEval_EvalFrameDefault;
  }
  _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame_shim);
}

void uninstall_frame_hook() {
  if (t_hook.callback == nullptr) {
    return;
  }
  t_hook.callback = nullptr;
  t_hook.user = nullptr;
  if (--g_threads_with_callback > 0) {
    return;
  }
  PyInterpreterState* interp = PyInterpreterState_Get();
  if (_PyInterpreterState_GetEvalFrameFunc(interp) == eval_frame_shim) {
    _PyInterpreterState_SetEvalFrameFunc(interp, g_previous_eval_frame);
  }
}

bool frame_hook_installed() { return t_hook.callback != nullptr; }

HookDisabled::HookDisabled() { t_hook.disabled_depth++; }
HookDisabled::~HookDisabled() { t_hook.disabled_depth--; }
bool hook_disabled() { return t_hook.disabled_depth > 0; }

// ---------------------------------------------------------------------------------------
// Finishing a frame.

PyObject* run_default(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag) {
  return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

void finish_frame(PyThreadState* tstate, _PyInterpreterFrame* frame) {
  cpython_frame::clear_and_pop(tstate, frame);
}

namespace {

int kind_of(PyCodeObject* code, int i) {
  return static_cast<unsigned char>(PyBytes_AS_STRING(code->co_localspluskinds)[i]);
}

// Index of free variable slot i in the function's closure tuple: the free variables are the
// last co_nfreevars slots, in closure order (what COPY_FREE_VARS copies).
int closure_index(PyCodeObject* code, int i) {
  return i - (code->co_nlocalsplus - code->co_nfreevars);
}

// Why resume_native cannot honour its arguments, or nullptr.
const char* resume_problem(_PyInterpreterFrame* frame, int offset, ResumeCells cells,
                           const std::vector<PyObject*>& locals,
                           const std::vector<PyObject*>& stack) {
  PyCodeObject* code = cpython_frame::code(frame);
  const int code_bytes = static_cast<int>(Py_SIZE(code)) * 2;
  const int prologue_end = code->_co_firsttraceable * 2;  // the first RESUME
  if (cpython_frame::has_started(frame)) {
    return "the frame has already started";
  }
  if (offset < 0 || offset >= code_bytes || offset % 2 != 0) {
    return "the offset is not inside the code";
  }
  if (offset != 0 && offset < prologue_end) {
    return "the offset is inside the MAKE_CELL/COPY_FREE_VARS prologue";
  }
  if (offset == 0 && !stack.empty()) {
    return "a resume at offset 0 cannot have a value stack";
  }
  if (static_cast<int>(locals.size()) != code->co_nlocalsplus) {
    return "locals must have one entry per localsplus slot (co_nlocalsplus)";
  }
  if (static_cast<int>(stack.size()) > code->co_stacksize) {
    return "the stack is deeper than co_stacksize";
  }
  if (offset != 0 && cells == ResumeCells::FromValues && code->co_nfreevars > 0) {
    PyObject* closure = reinterpret_cast<PyFunctionObject*>(cpython_frame::function(frame))
                            ->func_closure;
    if (closure == nullptr || !PyTuple_Check(closure) ||
        PyTuple_GET_SIZE(closure) != code->co_nfreevars) {
      return "the function's closure does not match co_nfreevars";
    }
  }
  if (offset != 0 && cells == ResumeCells::AreCells) {
    for (int i = 0; i < code->co_nlocalsplus; i++) {
      const bool cell_slot = (kind_of(code, i) & (kLocalCell | kLocalFree)) != 0;
      if (cell_slot && (locals[i] == nullptr || !PyCell_Check(locals[i]))) {
        return "ResumeCells::AreCells needs a cell object in every cell and free slot";
      }
    }
  }
  return nullptr;
}

}  // namespace

PyObject* resume_native(PyThreadState* tstate, _PyInterpreterFrame* frame, int offset,
                        const std::vector<PyObject*>& locals,
                        const std::vector<PyObject*>& stack, ResumeCells cells) {
  PyCodeObject* code = cpython_frame::code(frame);
  const int local_count = code->co_nlocalsplus;
  const bool run_prologue = offset != 0 && cells == ResumeCells::FromValues;

  // 1. Check everything and allocate the new cells before touching the frame, so a failure
  //    leaves the frame as CPython made it.
  const char* problem = resume_problem(frame, offset, cells, locals, stack);
  std::vector<PyObject*> new_cells(local_count, nullptr);  // New refs
  if (problem == nullptr && run_prologue) {
    for (int i = 0; i < local_count && problem == nullptr; i++) {
      const int kind = kind_of(code, i);
      if ((kind & kLocalCell) && !(kind & kLocalFree)) {
        new_cells[i] = PyCell_New(locals[i]);  // MAKE_CELL: the cell takes its own reference
        if (new_cells[i] == nullptr) {
          problem = "out of memory";
        }
      }
    }
  }
  if (problem != nullptr) {
    for (PyObject* object : locals) Py_XDECREF(object);
    for (PyObject* object : stack) Py_XDECREF(object);
    for (PyObject* object : new_cells) Py_XDECREF(object);
    finish_frame(tstate, frame);
    if (!PyErr_Occurred()) {
      PyErr_Format(PyExc_SystemError, "mini capture: cannot resume %U at offset %d: %s",
                   code->co_qualname, offset, problem);
    }
    return nullptr;
  }

  // 2. Fill localsplus. References the frame held (the call's arguments) and references we
  //    were given but do not store are released only at the end, once the frame is whole.
  PyObject** slots = cpython_frame::localsplus(frame);
  std::vector<PyObject*> to_release(slots, slots + cpython_frame::stack_top(frame));
  PyObject* closure =
      reinterpret_cast<PyFunctionObject*>(cpython_frame::function(frame))->func_closure;
  for (int i = 0; i < local_count; i++) {
    const int kind = kind_of(code, i);
    if (run_prologue && (kind & kLocalFree)) {
      // COPY_FREE_VARS: the slot holds the closure's cell.
      PyObject* cell = PyTuple_GET_ITEM(closure, closure_index(code, i));
      Py_INCREF(cell);
      slots[i] = cell;
      to_release.push_back(locals[i]);
    } else if (run_prologue && (kind & kLocalCell)) {
      // MAKE_CELL: the slot holds a fresh cell containing the value.
      slots[i] = new_cells[i];
      to_release.push_back(locals[i]);
    } else {
      slots[i] = locals[i];
    }
  }

  // 3. Push the value stack above the locals and point the frame at `offset`.
  for (size_t j = 0; j < stack.size(); j++) {
    slots[local_count + j] = stack[j];
  }
  cpython_frame::set_stack_top(frame, local_count + static_cast<int>(stack.size()));
  cpython_frame::set_next_instruction(frame, offset);

  for (PyObject* object : to_release) Py_XDECREF(object);

  // 4. CPython continues from there.
  return _PyEval_EvalFrameDefault(tstate, frame, 0);
}

// ---------------------------------------------------------------------------------------
// FrameView.

FrameView::FrameView(_PyInterpreterFrame* frame)
    : frame(frame),
      code(cpython_frame::code(frame)),
      function(cpython_frame::function(frame)),
      globals(cpython_frame::globals(frame)),
      builtins(cpython_frame::builtins(frame)) {}

int FrameView::local_count() const { return code->co_nlocalsplus; }

int FrameView::argument_count() const {
  int count = code->co_argcount + code->co_kwonlyargcount;
  if (code->co_flags & CO_VARARGS) count++;
  if (code->co_flags & CO_VARKEYWORDS) count++;
  return count;
}

int FrameView::local_kind(int i) const { return kind_of(code, i); }

PyObject* FrameView::local_name(int i) const {
  return PyTuple_GET_ITEM(code->co_localsplusnames, i);
}

PyObject* FrameView::free_cell(int i) const {
  if (!(local_kind(i) & kLocalFree)) {
    return nullptr;
  }
  PyObject* closure = reinterpret_cast<PyFunctionObject*>(function)->func_closure;
  const int index = closure_index(code, i);
  if (closure == nullptr || index >= PyTuple_GET_SIZE(closure)) {
    return nullptr;
  }
  return PyTuple_GET_ITEM(closure, index);
}

PyObject* FrameView::local(int i) const {
  if (local_kind(i) & kLocalFree) {
    // At entry the slot is still NULL: COPY_FREE_VARS has not run. Read the closure.
    PyObject* cell = free_cell(i);
    return cell != nullptr ? PyCell_GET(cell) : nullptr;
  }
  // A cell argument is still the plain argument (MAKE_CELL has not run); other cells are
  // NULL, other locals are the arguments CPython placed or NULL.
  return cpython_frame::localsplus(frame)[i];
}

std::vector<PyObject*> FrameView::locals() const {
  std::vector<PyObject*> values(local_count());
  for (int i = 0; i < local_count(); i++) {
    values[i] = local(i);
  }
  return values;
}

}  // namespace mini::capture
