// probe_module.cpp: `_capture_probe`, a test-only extension that drives mini/capture/ from
// Python (plain CPython C API; built by build.sh, exercised by test_capture_probe.py).
//
// Bytecode:  decode(func), details(func), exception_table(func), stack_depths(func),
//            raw_opcode_table(), header_cache_entries(), dialect()
// Frames:    run_hooked(func, *args), run_hooked_on(target, func, *args),
//            run_finished(func, value, *args), resume_at(func, offset, locals, stack, *args),
//            resume_at_with_cells(...), frame_view(func, *args),
//            run_reentrant(func, disabled, *args), intercepted(), datastack_top(),
//            frames_starting_a_chunk(), hook_installed(), NULL
//
// In each frame probe, the hook is installed only for the duration of the call, and only
// frames of the target function's code object are treated specially (the first one only,
// except for run_hooked*); all other frames are evaluated with run_default.
#include <Python.h>

#include <vector>

#include "bytecode.h"
#include "frame_hook.h"
#include "opcode_table.h"

extern "C" int probe_header_cache_entries(int op);
extern "C" int probe_header_is_base_opcode(int op);

namespace mc = mini::capture;

namespace {

// `_capture_probe.NULL`: stands for a NULL slot (an unbound local or a call's NULL).
PyObject* g_null_marker = nullptr;

PyCodeObject* code_of(PyObject* func) {
  if (!PyFunction_Check(func)) {
    PyErr_SetString(PyExc_TypeError, "expected a Python function");
    return nullptr;
  }
  return reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(func));  // Borrowed
}

// ---------------------------------------------------------------------------------------
// Bytecode probes.

PyObject* probe_decode(PyObject*, PyObject* func) {
  PyCodeObject* code = code_of(func);
  std::vector<mc::Instruction> instructions;
  if (code == nullptr || !mc::decode_instructions(code, &instructions)) return nullptr;
  PyObject* list = PyList_New(0);
  for (const mc::Instruction& in : instructions) {
    PyObject* row = Py_BuildValue("(issiii)", in.offset, in.name, mc::opcode_name(in.op), in.arg,
                                  in.jump_target, in.line);
    if (row == nullptr || PyList_Append(list, row) < 0) {
      Py_XDECREF(row);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(row);
  }
  return list;
}

// Per instruction: the dialect-dependent reading of its argument, as a dict.
PyObject* probe_details(PyObject*, PyObject* func) {
  PyCodeObject* code = code_of(func);
  std::vector<mc::Instruction> instructions;
  if (code == nullptr || !mc::decode_instructions(code, &instructions)) return nullptr;
  PyObject* list = PyList_New(0);
  for (const mc::Instruction& in : instructions) {
    PyObject* row = nullptr;
    switch (in.op) {
      case mc::Opcode::COMPARE_OP:
        row = Py_BuildValue("{sisiss}", "offset", in.offset, "richcompare",
                            mc::compare_op_richcompare(in), "symbol",
                            mc::compare_op_symbol(in));
        break;
      case mc::Opcode::LOAD_GLOBAL:
        row = Py_BuildValue("{sisOsO}", "offset", in.offset, "name",
                            PyTuple_GET_ITEM(code->co_names, mc::load_global_name_index(in)),
                            "null", mc::load_global_pushes_null(in) ? Py_True : Py_False);
        break;
      case mc::Opcode::LOAD_ATTR:
      case mc::Opcode::LOAD_METHOD:
        row = Py_BuildValue("{sisOsO}", "offset", in.offset, "name",
                            PyTuple_GET_ITEM(code->co_names, mc::load_attr_name_index(in)),
                            "method", mc::load_attr_is_method(in) ? Py_True : Py_False);
        break;
      case mc::Opcode::LOAD_FAST_LOAD_FAST:
      case mc::Opcode::STORE_FAST_LOAD_FAST:
      case mc::Opcode::STORE_FAST_STORE_FAST:
        row = Py_BuildValue("{sis(ii)}", "offset", in.offset, "pair", mc::first_of_pair(in),
                            mc::second_of_pair(in));
        break;
      default:
        continue;
    }
    if (row == nullptr || PyList_Append(list, row) < 0) {
      Py_XDECREF(row);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(row);
  }
  return list;
}

PyObject* probe_exception_table(PyObject*, PyObject* func) {
  PyCodeObject* code = code_of(func);
  std::vector<mc::ExceptionTableEntry> table;
  if (code == nullptr || !mc::parse_exception_table(code, &table)) return nullptr;
  PyObject* list = PyList_New(0);
  for (const mc::ExceptionTableEntry& e : table) {
    PyObject* row = Py_BuildValue("(iiiiO)", e.start, e.end, e.target, e.depth,
                                  e.push_lasti ? Py_True : Py_False);
    PyList_Append(list, row);
    Py_DECREF(row);
  }
  return list;
}

PyObject* probe_stack_depths(PyObject*, PyObject* func) {
  PyCodeObject* code = code_of(func);
  std::vector<mc::Instruction> instructions;
  std::vector<mc::ExceptionTableEntry> table;
  std::vector<int> depths;
  if (code == nullptr || !mc::decode_instructions(code, &instructions) ||
      !mc::parse_exception_table(code, &table) ||
      !mc::compute_stack_depths(code, instructions, table, &depths)) {
    return nullptr;
  }
  PyObject* list = PyList_New(0);
  for (size_t i = 0; i < instructions.size(); i++) {
    PyObject* row = Py_BuildValue("(ii)", instructions[i].offset, depths[i]);
    PyList_Append(list, row);
    Py_DECREF(row);
  }
  return list;
}

// The compiled-in per-version table (opcode_table.h, internal to capture/): for raw opcodes
// 0..255, (name, normalized name, cache entries, jump) with jump 0 none, 1 forward,
// -1 backward.
PyObject* probe_raw_opcode_table(PyObject*, PyObject*) {
  PyObject* list = PyList_New(256);
  for (int op = 0; op < 256; op++) {
    const mc::RawOpcode& raw = mc::kRawOpcodes[op];
    const int jump = raw.jump == mc::JumpKind::Forward ? 1
                     : raw.jump == mc::JumpKind::Backward ? -1
                                                          : 0;
    PyList_SET_ITEM(list, op, Py_BuildValue("(ssii)", raw.name, mc::opcode_name(raw.op),
                                            static_cast<int>(raw.cache_entries), jump));
  }
  return list;
}

PyObject* probe_header_caches(PyObject*, PyObject*) {
  PyObject* list = PyList_New(256);
  for (int op = 0; op < 256; op++) {
    PyList_SET_ITEM(list, op,
                    Py_BuildValue("(iO)", probe_header_cache_entries(op),
                                  probe_header_is_base_opcode(op) ? Py_True : Py_False));
  }
  return list;
}

PyObject* probe_dialect(PyObject*, PyObject*) {
  const mc::BytecodeDialect& d = mc::bytecode_dialect();
  return Py_BuildValue(
      "{sisisisisOsssOsOsOsOsOsisOsOsO}", "python_minor", d.python_minor, "compare_op_shift",
      d.compare_op_shift, "compare_op_bool_bit", d.compare_op_bool_bit, "load_attr_name_shift",
      d.load_attr_name_shift, "load_attr_method_bit", d.load_attr_method_bit ? Py_True : Py_False,
      "call_null_position",
      d.call_null_position == mc::NullPosition::BeforeCallable ? "before" : "after",
      "has_precall", d.has_precall ? Py_True : Py_False, "has_kw_names",
      d.has_kw_names ? Py_True : Py_False, "has_call_kw", d.has_call_kw ? Py_True : Py_False,
      "has_set_function_attribute", d.has_set_function_attribute ? Py_True : Py_False,
      "jumps_need_exact_bool", d.jumps_need_exact_bool ? Py_True : Py_False,
      "for_iter_exit_skip", d.for_iter_exit_skip, "has_return_const",
      d.has_return_const ? Py_True : Py_False, "load_closure_is_load_fast",
      d.load_closure_is_load_fast ? Py_True : Py_False, "has_fast_pairs",
      d.has_fast_pairs ? Py_True : Py_False);
}

// ---------------------------------------------------------------------------------------
// Frame probes: one request at a time, described by g_probe.

enum class Mode { Default, Finish, Resume, View, Reentrant };

struct ProbeRequest {
  Mode mode = Mode::Default;
  PyObject* target_code = nullptr;  // Borrowed (the caller holds the function)
  PyObject* value = nullptr;        // Finish: Borrowed
  int offset = 0;                   // Resume
  PyObject* locals = nullptr;       // Resume: Borrowed list
  PyObject* stack = nullptr;        // Resume: Borrowed list
  mc::ResumeCells cells = mc::ResumeCells::FromValues;
  PyObject* view = nullptr;         // View: New, handed to the caller
  PyObject* nested_func = nullptr;  // Reentrant: Borrowed
  PyObject* nested_args = nullptr;  // Reentrant: Borrowed
  bool nested_disabled = true;
  PyObject* nested_result = nullptr;  // Reentrant: New
  int intercepted = 0;
};
ProbeRequest g_probe;
int g_last_intercepted = 0;
int g_frames_starting_a_chunk = 0;  // finished frames that were first in a data stack chunk

PyObject* marker_or_value(PyObject* value) {  // New
  return Py_NewRef(value == nullptr ? g_null_marker : value);
}

// New references for each item; `none_is_null` maps None to NULL as well.
std::vector<PyObject*> slots_from_list(PyObject* list, bool none_is_null) {
  std::vector<PyObject*> slots;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
    PyObject* item = PyList_GET_ITEM(list, i);
    const bool is_null = item == g_null_marker || (none_is_null && item == Py_None);
    slots.push_back(is_null ? nullptr : Py_NewRef(item));
  }
  return slots;
}

PyObject* build_view(const mc::FrameView& view) {
  PyObject* names = PyList_New(0);
  PyObject* kinds = PyList_New(0);
  PyObject* values = PyList_New(0);
  for (int i = 0; i < view.local_count(); i++) {
    PyObject* kind = PyLong_FromLong(view.local_kind(i));
    PyObject* value = marker_or_value(view.local(i));
    PyList_Append(names, view.local_name(i));
    PyList_Append(kinds, kind);
    PyList_Append(values, value);
    Py_DECREF(kind);
    Py_DECREF(value);
  }
  return Py_BuildValue("{sNsNsNsisOsOsOsO}", "names", names, "kinds", kinds, "values", values,
                       "argument_count", view.argument_count(), "function", view.function, "code",
                       reinterpret_cast<PyObject*>(view.code), "globals", view.globals,
                       "builtins", view.builtins);
}

PyObject* probe_callback(PyThreadState* tstate, _PyInterpreterFrame* frame, int throwflag,
                         void*) {
  mc::FrameView view(frame);
  if (reinterpret_cast<PyObject*>(view.code) != g_probe.target_code) {
    return mc::run_default(tstate, frame, throwflag);
  }
  g_probe.intercepted++;
  if (g_probe.intercepted > 1 || g_probe.mode == Mode::Default) {
    return mc::run_default(tstate, frame, throwflag);
  }
  switch (g_probe.mode) {
    case Mode::Finish:
      if (reinterpret_cast<PyObject**>(frame) == &tstate->datastack_chunk->data[0]) {
        g_frames_starting_a_chunk++;  // finish_frame must give this chunk back
      }
      mc::finish_frame(tstate, frame);
      return Py_NewRef(g_probe.value);
    case Mode::Resume:
      return mc::resume_native(tstate, frame, g_probe.offset,
                               slots_from_list(g_probe.locals, /*none_is_null=*/true),
                               slots_from_list(g_probe.stack, /*none_is_null=*/false),
                               g_probe.cells);
    case Mode::View: {
      {
        mc::HookDisabled mini_at_work;
        g_probe.view = build_view(view);
      }
      if (g_probe.view == nullptr) {
        mc::finish_frame(tstate, frame);
        return nullptr;
      }
      return mc::run_default(tstate, frame, throwflag);
    }
    case Mode::Reentrant: {
      if (g_probe.nested_disabled) {
        mc::HookDisabled mini_at_work;
        g_probe.nested_result = PyObject_Call(g_probe.nested_func, g_probe.nested_args, nullptr);
      } else {
        g_probe.nested_result = PyObject_Call(g_probe.nested_func, g_probe.nested_args, nullptr);
      }
      if (g_probe.nested_result == nullptr) {
        mc::finish_frame(tstate, frame);
        return nullptr;
      }
      return mc::run_default(tstate, frame, throwflag);
    }
    case Mode::Default:
      break;
  }
  return mc::run_default(tstate, frame, throwflag);
}

// Calls func(*args, **kwargs) with the hook installed for `target`'s code. The caller has
// filled g_probe's request; it reads the outcome from g_probe, then calls end_probe().
PyObject* call_hooked(PyObject* target, PyObject* func, PyObject* args, PyObject* kwargs) {
  PyCodeObject* code = code_of(target);
  if (code == nullptr) return nullptr;
  g_probe.target_code = reinterpret_cast<PyObject*>(code);
  g_probe.intercepted = 0;
  mc::install_frame_hook(probe_callback, nullptr);
  PyObject* result = PyObject_Call(func, args, kwargs);
  mc::uninstall_frame_hook();
  return result;
}

void end_probe() {
  g_last_intercepted = g_probe.intercepted;
  g_probe = ProbeRequest();
}

bool check_arg_count(PyObject* args, Py_ssize_t fixed, const char* usage) {
  if (PyTuple_GET_SIZE(args) < fixed) {
    PyErr_Format(PyExc_TypeError, "usage: %s", usage);
    return false;
  }
  return true;
}

PyObject* args_after(PyObject* args, Py_ssize_t fixed) {  // New
  return PyTuple_GetSlice(args, fixed, PyTuple_GET_SIZE(args));
}

// The common shape of the probes: func = args[0], the call's arguments follow the first
// `fixed` ones; g_probe's request is already filled in.
PyObject* run_probe(PyObject* target, PyObject* func, PyObject* args, Py_ssize_t fixed,
                    PyObject* kwargs) {
  PyObject* call_args = args_after(args, fixed);
  if (call_args == nullptr) return nullptr;
  PyObject* result = call_hooked(target, func, call_args, kwargs);
  Py_DECREF(call_args);
  return result;
}

PyObject* probe_run_hooked(PyObject*, PyObject* args) {
  if (!check_arg_count(args, 1, "run_hooked(func, *args)")) return nullptr;
  PyObject* func = PyTuple_GET_ITEM(args, 0);
  PyObject* result = run_probe(func, func, args, 1, nullptr);
  end_probe();
  return result;
}

PyObject* probe_run_hooked_on(PyObject*, PyObject* args) {
  if (!check_arg_count(args, 2, "run_hooked_on(target, func, *args)")) return nullptr;
  PyObject* result = run_probe(PyTuple_GET_ITEM(args, 0), PyTuple_GET_ITEM(args, 1), args, 2,
                               nullptr);
  end_probe();
  return result;
}

PyObject* probe_run_finished(PyObject*, PyObject* args) {
  if (!check_arg_count(args, 2, "run_finished(func, value, *args)")) return nullptr;
  PyObject* func = PyTuple_GET_ITEM(args, 0);
  g_probe.mode = Mode::Finish;
  g_probe.value = PyTuple_GET_ITEM(args, 1);
  PyObject* result = run_probe(func, func, args, 2, nullptr);
  end_probe();
  return result;
}

PyObject* resume_common(PyObject* args, mc::ResumeCells cells) {
  if (!check_arg_count(args, 4, "resume_at(func, offset, locals, stack, *args)")) return nullptr;
  PyObject* func = PyTuple_GET_ITEM(args, 0);
  PyObject* locals = PyTuple_GET_ITEM(args, 2);
  PyObject* stack = PyTuple_GET_ITEM(args, 3);
  if (!PyList_Check(locals) || !PyList_Check(stack)) {
    PyErr_SetString(PyExc_TypeError, "locals and stack must be lists");
    return nullptr;
  }
  g_probe.mode = Mode::Resume;
  g_probe.offset = PyLong_AsLong(PyTuple_GET_ITEM(args, 1));
  g_probe.locals = locals;
  g_probe.stack = stack;
  g_probe.cells = cells;
  PyObject* result = run_probe(func, func, args, 4, nullptr);
  end_probe();
  return result;
}

PyObject* probe_resume_at(PyObject*, PyObject* args) {
  return resume_common(args, mc::ResumeCells::FromValues);
}

PyObject* probe_resume_at_with_cells(PyObject*, PyObject* args) {
  return resume_common(args, mc::ResumeCells::AreCells);
}

PyObject* probe_frame_view(PyObject*, PyObject* args, PyObject* kwargs) {
  if (!check_arg_count(args, 1, "frame_view(func, *args, **kwargs)")) return nullptr;
  PyObject* func = PyTuple_GET_ITEM(args, 0);
  g_probe.mode = Mode::View;
  PyObject* result = run_probe(func, func, args, 1, kwargs);
  PyObject* view = g_probe.view;  // New or NULL
  end_probe();
  if (result == nullptr) {
    Py_XDECREF(view);
    return nullptr;
  }
  return Py_BuildValue("(NN)", view != nullptr ? view : Py_NewRef(Py_None), result);
}

PyObject* probe_run_reentrant(PyObject*, PyObject* args) {
  if (!check_arg_count(args, 2, "run_reentrant(func, disabled, *args)")) return nullptr;
  PyObject* func = PyTuple_GET_ITEM(args, 0);
  PyObject* nested_args = args_after(args, 2);
  if (nested_args == nullptr) return nullptr;
  g_probe.mode = Mode::Reentrant;
  g_probe.nested_func = func;
  g_probe.nested_args = nested_args;
  g_probe.nested_disabled = PyObject_IsTrue(PyTuple_GET_ITEM(args, 1));
  PyObject* result = run_probe(func, func, args, 2, nullptr);
  PyObject* nested = g_probe.nested_result;  // New or NULL
  end_probe();
  Py_DECREF(nested_args);
  if (result == nullptr || nested == nullptr) {
    Py_XDECREF(result);
    Py_XDECREF(nested);
    return nullptr;
  }
  return Py_BuildValue("(NNi)", result, nested, g_last_intercepted);
}

PyObject* probe_intercepted(PyObject*, PyObject*) { return PyLong_FromLong(g_last_intercepted); }

PyObject* probe_hook_installed(PyObject*, PyObject*) {
  return PyBool_FromLong(mc::frame_hook_installed());
}

PyObject* probe_frames_starting_a_chunk(PyObject*, PyObject*) {
  return PyLong_FromLong(g_frames_starting_a_chunk);
}

PyObject* probe_datastack_top(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(PyThreadState_Get()->datastack_top);
}

PyMethodDef kMethods[] = {
    {"decode", probe_decode, METH_O,
     "decode(func) -> [(offset, opname, normalized, arg, jump_target, line)]"},
    {"details", probe_details, METH_O, "details(func) -> dialect readings of arguments"},
    {"exception_table", probe_exception_table, METH_O,
     "exception_table(func) -> [(start, end, target, depth, lasti)]"},
    {"stack_depths", probe_stack_depths, METH_O, "stack_depths(func) -> [(offset, depth)]"},
    {"raw_opcode_table", probe_raw_opcode_table, METH_NOARGS,
     "[(name, normalized, caches, jump)] for raw opcodes 0..255, as compiled in"},
    {"header_cache_entries", probe_header_caches, METH_NOARGS,
     "[(caches, is_base)] for 0..255, from CPython's internal headers"},
    {"dialect", probe_dialect, METH_NOARGS, "the BytecodeDialect compiled in, as a dict"},
    {"run_hooked", probe_run_hooked, METH_VARARGS, "run_hooked(func, *args)"},
    {"run_hooked_on", probe_run_hooked_on, METH_VARARGS, "run_hooked_on(target, func, *args)"},
    {"run_finished", probe_run_finished, METH_VARARGS, "run_finished(func, value, *args)"},
    {"resume_at", probe_resume_at, METH_VARARGS,
     "resume_at(func, offset, locals, stack, *args)"},
    {"resume_at_with_cells", probe_resume_at_with_cells, METH_VARARGS,
     "resume_at_with_cells(func, offset, locals, stack, *args): ResumeCells::AreCells"},
    {"frame_view", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(probe_frame_view)),
     METH_VARARGS | METH_KEYWORDS, "frame_view(func, *args, **kwargs) -> (view, result)"},
    {"run_reentrant", probe_run_reentrant, METH_VARARGS,
     "run_reentrant(func, disabled, *args) -> (result, nested_result, intercepted)"},
    {"intercepted", probe_intercepted, METH_NOARGS, "target frames the last probe saw"},
    {"hook_installed", probe_hook_installed, METH_NOARGS, "is a callback set on this thread"},
    {"datastack_top", probe_datastack_top, METH_NOARGS, "tstate->datastack_top as an int"},
    {"frames_starting_a_chunk", probe_frames_starting_a_chunk, METH_NOARGS,
     "how many frames run_finished finished were the first of a data stack chunk"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "_capture_probe", "Test probe for mini/capture/.", -1, kMethods,
    nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__capture_probe(void) {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  g_null_marker = PyObject_CallObject(reinterpret_cast<PyObject*>(&PyBaseObject_Type), nullptr);
  if (g_null_marker == nullptr || PyModule_AddObjectRef(module, "NULL", g_null_marker) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
