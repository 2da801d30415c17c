// skip_rules.cpp — which frames the hook hands to capture (Dynamo's skip rules): not code that
// is not a function's, not mini's own files, not code that uses zero-argument super(), and
// only a frame where a tensor or module can be seen (unit.h).
#include <cstring>

#include "capture/unit.h"
#include "guards/guards.h"

namespace mini::capture {

namespace {

PyObject* g_class_cell_name = PyUnicode_InternFromString("__class__");

bool holds_tensor(PyObject* v, int depth = 0) {
  if (!v || depth > 2) return false;
  if (guards::unwrap_tensor(v)) return true;
  if (python_bridge().module_class && PyObject_IsInstance(v, python_bridge().module_class) == 1) return true;
  PyErr_Clear();
  if (PyTuple_Check(v) || PyList_Check(v))
    for (Py_ssize_t i = 0; i < Py_SIZE(v); i++)
      if (holds_tensor(PyTuple_Check(v) ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i), depth + 1)) return true;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Check(v) && PyDict_Next(v, &pos, &key, &value))  // **kwargs
    if (holds_tensor(value, depth + 1)) return true;
  // a plain object's attributes (a dataclass batch as the only argument); not a class's
  // or a module's, whose namespaces are everything they define
  if (!PyType_Check(v) && !PyModule_Check(v) && !PyCallable_Check(v)) {
    PyObject* dict = Py_TYPE(v)->tp_dictoffset ? PyObject_GenericGetDict(v, nullptr) : nullptr;
    if (!dict) PyErr_Clear();
    bool found = false;
    pos = 0;
    while (!found && dict && PyDict_Check(dict) && PyDict_Next(dict, &pos, &key, &value))
      found = holds_tensor(value, depth + 1);
    Py_XDECREF(dict);
    if (found) return true;
  }
  return false;
}

}  // namespace

// (a global it names is seen too, and the mini module counts: torch checks for torch.*)
bool frame_has_tensors(const FrameView& view, const std::vector<PyObject*>& locals) {
  for (PyObject* v : locals)
    if (holds_tensor(v)) return true;
  PyObject* names = view.code->co_names;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
    PyObject* g = PyDict_GetItem(view.globals, PyTuple_GET_ITEM(names, i));
    if (!g) continue;
    if (holds_tensor(g)) return true;
    if (PyModule_Check(g) && strcmp(PyModule_GetName(g), "mini") == 0) return true;
    PyErr_Clear();
  }
  return false;
}

const char* const kParallelCodeBreak =
    "DistributedDataParallel's code runs as it is, not traced (its inner module's call is captured on "
    "its own, cut at DDP's buckets); compile the DDP module itself, mini.compile(ddp_model), to have "
    "no graph break here";

bool is_parallel_code(PyCodeObject* code) {
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  return !g_skip_prefix.empty() && file && strncmp(file, g_skip_prefix.c_str(), g_skip_prefix.size()) == 0 &&
         strncmp(file + g_skip_prefix.size(), "nn/parallel/", 12) == 0;
}

// Frames the hook never captures (Dynamo's skip rules): code that is not a function's,
// mini's own files, and code that uses zero-argument super(). Returns why, or null.
const char* skip_reason(const FrameView& view) {
  PyCodeObject* code = view.code;
  if (!(code->co_flags & CO_OPTIMIZED) || !view.function) return "not a function's code (a module or class body)";
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  // mini's own frames run as they are, except mini.nn's modules, which user code calls and
  // capture inlines (as Dynamo traces torch.nn); but not mini.nn.parallel's (is_parallel_code)
  if (!g_skip_prefix.empty() && file && strncmp(file, g_skip_prefix.c_str(), g_skip_prefix.size()) == 0 &&
      (strncmp(file + g_skip_prefix.size(), "nn/", 3) != 0 || is_parallel_code(code)))
    return "mini's own code";
  // zero-argument super() needs CPython's own frame
  if (code->co_nfreevars > 0 && PySequence_Contains(code->co_localsplusnames, g_class_cell_name) == 1)
    return "it calls zero-argument super()";
  return nullptr;
}

}  // namespace mini::capture
