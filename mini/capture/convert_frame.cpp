// convert_frame.cpp — Dynamo's convert_frame and eval_frame callback: the frame hook
// (on_frame), the per-unit cache lookup and compile (lookup_or_compile, compile_unit,
// automatic dynamic), running a unit's artifact and rebuilding the frame after it (run_unit,
// build, write_back_inputs, replay_side_effects), and the resume point of a graph break
// (resume_after_break, run_instruction).
#include "capture/convert_frame.h"

#include <unistd.h>

#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "capture/frame_hook.h"
#include "tensor/autograd.h"
#include "tensor/errors.h"

#if PY_VERSION_HEX >= 0x030D0000  // exported by CPython, declared in an internal header on 3.13
extern "C" PyAPI_FUNC(void) _PyTraceback_Add(const char*, const char*, int);
#endif

namespace mini::capture {

PyObject* g_unsupported_error = nullptr;
GraphCompiler g_inductor = nullptr;
TrainingCompiler g_training = nullptr;
std::string g_skip_prefix;

CompileConfig& compile_config() {
  static CompileConfig c;
  return c;
}
LogChannels& log_channels() {
  static LogChannels l;
  return l;
}
std::deque<CompileEvent>& compile_events() {
  static std::deque<CompileEvent> v;
  return v;
}
std::deque<BreakEvent>& break_events() {
  static std::deque<BreakEvent> v;
  return v;
}

namespace {
size_t g_dropped_events = 0;
size_t g_break_count = 0;  // since the reset, dropped ones included (names debug files)

template <class Event>
void record_event(std::deque<Event>& log, Event event) {
  if (log.size() >= kMaxEvents) {
    log.pop_front();
    g_dropped_events++;
  }
  log.push_back(std::move(event));
}
}  // namespace

size_t dropped_events() { return g_dropped_events; }

void clear_events() {
  compile_events().clear();
  break_events().clear();
  g_dropped_events = 0;
  g_break_count = 0;
}

void log_write(const std::string& text) {
  PyObject* err = PySys_GetObject("stderr");  // Borrowed
  if (!err || err == Py_None) return;
  PyObject* s = PyUnicode_FromString((text + (text.empty() || text.back() != '\n' ? "\n" : "")).c_str());
  if (s) {
    PyFile_WriteObject(s, err, Py_PRINT_RAW);
    Py_DECREF(s);
  }
  PyErr_Clear();
}

namespace {
// MINI_COMPILE_DEBUG read once: on, and the warning an unrecognised value gets ("" if none).
struct DebugSetting {
  bool on = false;
  std::string warning;
};
const DebugSetting& debug_setting() {
  static const DebugSetting setting = [] {
    DebugSetting d;
    const char* env = std::getenv("MINI_COMPILE_DEBUG");
    std::string v = env ? env : "";
    for (char& c : v) c = (char)std::tolower((unsigned char)c);
    d.on = v == "1" || v == "true" || v == "yes" || v == "on";
    if (!d.on && !v.empty() && v != "0" && v != "false" && v != "no" && v != "off")
      d.warning = cat("MINI_COMPILE_DEBUG='", env, "' is not understood: 1, true, yes or on write the debug files, "
                      "0, false, no, off or empty do not. It is taken as off.");
    return d;
  }();
  return setting;
}
}  // namespace

bool compile_debug() { return debug_setting().on; }
const std::string& compile_debug_warning() { return debug_setting().warning; }

void debug_write(const std::string& title, const std::string& name, const std::string& text) {
  if (!compile_debug()) return;
  // ./mini_compile_debug, or the temporary folder's when the working folder is gone (removed
  // under the process) or unreadable, said once
  static const std::filesystem::path run = [] {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y_%m_%d_%H_%M_%S", std::localtime(&now));
    std::error_code ec;
    std::filesystem::path base = std::filesystem::current_path(ec);
    if (ec) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp && *tmp ? tmp : "/tmp";
      log_write("MINI_COMPILE_DEBUG: the working folder cannot be read (" + ec.message() + "); the debug files go to " +
                (base / "mini_compile_debug").string() + " instead");
    }
    return base / "mini_compile_debug" / ("run_" + std::string(stamp) + "-pid_" + std::to_string(getpid()));
  }();
  std::error_code ec;
  std::filesystem::create_directories(run / title, ec);
  std::ofstream out(run / title / name);
  out << text;
  if (ec || !out) log_write("MINI_COMPILE_DEBUG: could not write " + (run / title / name).string());
}

void set_python_error(const std::exception& e) {
  PyObject* type = PyExc_RuntimeError;
  if (auto* me = dynamic_cast<const Error*>(&e)) {
    if (me->kind == Error::Kind::Interrupted && PyErr_Occurred()) return;  // the handler's exception stands
    switch (me->kind) {
      case Error::Kind::Interrupted: type = PyExc_KeyboardInterrupt; break;
      case Error::Kind::Type: type = PyExc_TypeError; break;
      case Error::Kind::Value: type = PyExc_ValueError; break;
      case Error::Kind::Index: type = PyExc_IndexError; break;
      default: break;
    }
  }
  PyErr_SetString(type, e.what());
}

int64_t python_int64(PyObject* number) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(number, &overflow);
  if (!overflow) return v;
  PyObject* r = PyObject_Repr(number);
  std::string digits = r ? PyUnicode_AsUTF8(r) : "?";
  Py_XDECREF(r);
  if (digits.size() > 40) digits = digits.substr(0, 20) + "..." + digits.substr(digits.size() - 10);
  fail("Overflow when unpacking long: the Python int ", digits, " is outside int64, the range "
       "a number must fit in to meet a tensor (write it as a float to compute in floating point)");
}

Tensor wrapped_number_tensor(PyObject* number) {
  if (PyBool_Check(number)) return scalar_tensor(number == Py_True, DType::Bool, true);
  if (PyLong_Check(number)) return int_scalar_tensor(python_int64(number), true);
  return scalar_tensor(PyFloat_AsDouble(number), DType::Float64, true);
}

namespace {

thread_local std::vector<CompileRequest*> t_requests;
PyObject* g_class_cell_name = PyUnicode_InternFromString("__class__");
int g_graph_counter = 0;

// "backend 'name'" for messages about what a Python backend returned.
std::string backend_label(PyObject* backend) {
  PyObject* name = PyObject_GetAttrString(backend, "__qualname__");
  if (!name) name = PyObject_GetAttrString((PyObject*)Py_TYPE(backend), "__qualname__");
  PyErr_Clear();
  std::string s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : "?";
  Py_XDECREF(name);
  return "backend '" + s + "'";
}

std::string function_label(PyCodeObject* code) {
  return std::string("'") + PyUnicode_AsUTF8(code->co_name) + "' (" + PyUnicode_AsUTF8(code->co_filename) +
         ":" + std::to_string(code->co_firstlineno) + ")";
}

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

// Dynamo compiles a frame only if it can see a tensor or module in it.
// (or a global it names that is one, or is the mini module: torch checks for torch.*)
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

// A real object from its reconstruction spec. New reference; NULL for Null/Absent slots
// (no error set); NULL with an error set when something cannot be rebuilt. `made` holds
// the objects built so far for each alias (New references, released by the caller).
PyObject* build(const OutputSpec& spec, const std::vector<PyObject*>& outs, const guards::FrameValues& fv,
                bool* failed, std::vector<PyObject*>& made) {
  auto remember = [&](PyObject* o) {  // a mutable object made while tracing: built once
    if (spec.alias < 0 || !o) return o;
    if ((int)made.size() <= spec.alias) made.resize(spec.alias + 1, nullptr);
    made[spec.alias] = o;
    Py_INCREF(o);
    return o;
  };
  switch (spec.kind) {
    case OutputSpec::Kind::GraphOutput: {
      PyObject* o = outs.at(spec.index);
      Py_INCREF(o);
      return o;
    }
    case OutputSpec::Kind::Number: {  // a number that went through the graph as a 0-d tensor
      PyObject* o = PyObject_CallMethod(outs.at(spec.index), "item", nullptr);
      if (!o) *failed = true;
      return o;
    }
    case OutputSpec::Kind::Constant:
      Py_INCREF(spec.value);
      return spec.value;
    case OutputSpec::Kind::SizeExpr: {  // a dynamic size, from this call's tensors
      int64_t v;
      if (spec.expr.evaluate(fv, &v)) return PyLong_FromLongLong(v);
      *failed = true;
      PyErr_Format(PyExc_RuntimeError, "mini: cannot evaluate %s again", spec.expr.str().c_str());
      return nullptr;
    }
    case OutputSpec::Kind::Source: {
      PyObject* o = guards::fetch(*spec.source, fv);
      if (!o) {
        *failed = true;
        PyErr_Format(PyExc_RuntimeError, "mini: cannot read %s again", spec.source->str().c_str());
      }
      return o;
    }
    case OutputSpec::Kind::Local: {
      PyObject* o = spec.index < fv.nlocals ? fv.locals[spec.index] : nullptr;
      Py_XINCREF(o);
      return o;
    }
    case OutputSpec::Kind::Alias: {
      PyObject* o = spec.index < (int)made.size() ? made[spec.index] : nullptr;
      if (!o) {
        *failed = true;
        PyErr_SetString(PyExc_SystemError, "mini: an object rebuilt after the graph was used before it was built");
      }
      Py_XINCREF(o);
      return o;
    }
    case OutputSpec::Kind::Null: case OutputSpec::Kind::Absent:
      return nullptr;
    case OutputSpec::Kind::View: {  // a view of an input written in place, made on the input
      // (without a source: a view of graph output `index`)
      PyObject* base = spec.source ? guards::fetch(*spec.source, fv) : outs.at(spec.index);
      if (!spec.source) Py_INCREF(base);
      TensorImpl* t = base ? guards::unwrap_tensor(base) : nullptr;
      if (!t) {
        Py_XDECREF(base);
        *failed = true;
        PyErr_Format(PyExc_RuntimeError, "mini: cannot read %s again", spec.source->str().c_str());
        return nullptr;
      }
      Tensor v = t->shared_from_this();
      Py_DECREF(base);
      try {
        for (const auto& [op, attrs] : spec.views) v = call_op(op, {v}, attrs);
      } catch (const std::exception& e) {
        *failed = true;
        set_python_error(e);
        return nullptr;
      }
      return python_bridge().wrap_tensor(v);
    }
    case OutputSpec::Kind::Method: case OutputSpec::Kind::Call: {
      PyObject* self = build(spec.items[0], outs, fv, failed, made);
      if (!self) return nullptr;
      PyObject* m = spec.kind == OutputSpec::Kind::Call ? PyObject_CallMethod(self, spec.name.c_str(), nullptr)
                                                        : PyObject_GetAttrString(self, spec.name.c_str());
      Py_DECREF(self);
      if (!m) *failed = true;
      return m;
    }
    case OutputSpec::Kind::Tuple: case OutputSpec::Kind::List: case OutputSpec::Kind::Iterator:
    case OutputSpec::Kind::Size: {
      bool list = spec.kind == OutputSpec::Kind::List;
      PyObject* r = list ? PyList_New((Py_ssize_t)spec.items.size()) : PyTuple_New((Py_ssize_t)spec.items.size());
      if (list) remember(r);  // before its items: an item may hold the list itself
      for (size_t i = 0; i < spec.items.size(); i++) {
        PyObject* item = build(spec.items[i], outs, fv, failed, made);
        if (*failed) { Py_DECREF(r); return nullptr; }
        if (list) PyList_SET_ITEM(r, i, item);
        else PyTuple_SET_ITEM(r, i, item);
      }
      if (spec.kind == OutputSpec::Kind::Tuple && spec.value) {  // a record built in the trace: cls(*fields)
        PyObject* record = PyObject_CallObject(spec.value, r);
        Py_DECREF(r);
        if (!record) *failed = true;
        return record;
      }
      if (spec.kind == OutputSpec::Kind::Tuple || spec.kind == OutputSpec::Kind::List) return r;
      PyObject* made = spec.kind == OutputSpec::Kind::Size ? PyObject_CallOneArg(python_bridge().size_type, r)
                                                            : PyObject_GetIter(r);
      Py_DECREF(r);
      if (!made) *failed = true;
      return made;
    }
    case OutputSpec::Kind::Dict: {
      PyObject* d = remember(PyDict_New());
      for (size_t i = 0; i + 1 < spec.items.size(); i += 2) {
        PyObject* k = build(spec.items[i], outs, fv, failed, made);
        PyObject* v = *failed ? nullptr : build(spec.items[i + 1], outs, fv, failed, made);
        if (!*failed && PyDict_SetItem(d, k, v) < 0) *failed = true;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (*failed) { Py_DECREF(d); return nullptr; }
      }
      return d;
    }
    case OutputSpec::Kind::Cell: {
      PyObject* cell = remember(PyCell_New(nullptr));
      if (!spec.items.empty()) {
        PyObject* v = build(spec.items[0], outs, fv, failed, made);
        if (*failed) { Py_DECREF(cell); return nullptr; }
        PyCell_Set(cell, v);
        Py_XDECREF(v);
      }
      return cell;
    }
    case OutputSpec::Kind::Function: {  // as MAKE_FUNCTION would have made it
      auto* bare = (PyFunctionObject*)spec.value;
      PyObject* fn = remember(PyFunction_NewWithQualName(bare->func_code, bare->func_globals, bare->func_qualname));
      if (!fn) { *failed = true; return nullptr; }
      if (bare->func_annotations) PyFunction_SetAnnotations(fn, bare->func_annotations);
      int (*setters[])(PyObject*, PyObject*) = {PyFunction_SetDefaults, PyFunction_SetKwDefaults, PyFunction_SetClosure};
      for (int i = 0; i < 3 && !*failed; i++) {
        if (spec.items[i].kind == OutputSpec::Kind::Null) continue;
        PyObject* part = build(spec.items[i], outs, fv, failed, made);
        if (!*failed && setters[i](fn, part) < 0) *failed = true;
        Py_XDECREF(part);
      }
      if (*failed) { Py_DECREF(fn); return nullptr; }
      return fn;
    }
  }
  return nullptr;
}

// Replays the trace's side effects: each value was built (with the outputs) before any
// store, so a store never changes what another value is read from. Steals `values`.
bool replay_side_effects(const Artifact& a, const guards::FrameValues& fv, std::vector<PyObject*>& values) {
  bool ok = true;
  for (size_t i = 0; i < a.side_effects.size(); i++) {
    const SideEffect& e = a.side_effects[i];
    PyObject* v = values[i];
    PyObject* target = !ok ? nullptr : e.target ? guards::fetch(*e.target, fv) : (Py_INCREF(fv.globals), fv.globals);
    if (ok && !target) {
      PyErr_Format(PyExc_RuntimeError, "mini: cannot read %s again to replay a store into it",
                   e.target ? e.target->str().c_str() : "the globals");
      ok = false;
    } else if (ok) {
      int r = e.kind == SideEffect::Kind::Cell ? (PyCell_Check(target) ? PyCell_Set(target, v) : -1)
              : e.kind == SideEffect::Kind::Global ? PyDict_SetItemString(target, e.name.c_str(), v)
              : e.kind == SideEffect::Kind::Item ? PyDict_SetItemString(target, e.name.c_str(), v)
              : e.kind == SideEffect::Kind::Contents ? PySequence_SetSlice(target, 0, PY_SSIZE_T_MAX, v)
              : PyObject_SetAttrString(target, e.name.c_str(), v);
      if (r < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "mini: a closure store without its cell");
      ok = r == 0;
    }
    Py_XDECREF(target);
    Py_XDECREF(v);
  }
  values.clear();
  return ok;
}

// Runs a unit's graph on the frame's values: the graph's outputs as Python objects (New
// references, appended to `outs`). False with a Python error on failure.
bool run_graph_of(const Artifact& a, const guards::FrameValues& fv, std::vector<PyObject*>* outs) {
  std::vector<PyObject*> input_objects;
  auto release = [&] {
    for (PyObject* o : input_objects) Py_XDECREF(o);
  };
  for (size_t i = 0; i < a.input_sources.size(); i++) {
    PyObject* o = guards::fetch(*a.input_sources[i], fv);
    if (!o) {
      release();
      PyErr_Format(PyExc_RuntimeError, "mini: graph input %s disappeared", a.input_sources[i]->str().c_str());
      return false;
    }
    if (i < a.scalar_inputs.size() && a.scalar_inputs[i]) {  // a dynamic Python number
      Tensor number;
      try {
        number = wrapped_number_tensor(o);
      } catch (const std::exception& e) {  // an int past int64: eager's error
        Py_DECREF(o);
        release();
        set_python_error(e);
        return false;
      }
      Py_DECREF(o);
      o = python_bridge().wrap_tensor(number);
    }
    input_objects.push_back(o);
  }
  // An input the graph writes, when autograd records this run: the graph gets a copy that
  // takes over the input's history, so that what autograd saves of its old value survives
  // the write-back (eager's in-place ops save a copy of the old value the same way).
  bool records = grad_enabled();
  bool any_grad = false;
  for (PyObject* o : input_objects)
    if (TensorImpl* t = guards::unwrap_tensor(o)) any_grad = any_grad || t->needs_grad();
  for (const auto& [input, output] : a.input_mutations) {
    if (!records || !any_grad) break;
    Tensor x = guards::unwrap_tensor(input_objects[input])->shared_from_this();
    Tensor old;
    {
      NoGradGuard no_grad;
      old = clone(x);
    }
    old->grad_fn = x->grad_fn;
    old->output_nr = x->output_nr;
    old->requires_grad = x->requires_grad;
    Py_DECREF(input_objects[input]);
    input_objects[input] = python_bridge().wrap_tensor(old);
  }
  if (!a.compiled_fn) {
    std::vector<Tensor> inputs;
    for (PyObject* o : input_objects) inputs.push_back(guards::unwrap_tensor(o)->shared_from_this());
    std::vector<Tensor> values;
    try {
      values = a.compiled ? a.compiled(inputs) : graph::run_graph(*a.graph, inputs);
    } catch (const std::exception& e) {
      release();
      set_python_error(e);
      return false;
    }
    for (auto& t : values) outs->push_back(python_bridge().wrap_tensor(t));
    release();
    return true;
  }
  PyObject* args = PyTuple_New((Py_ssize_t)input_objects.size());
  for (size_t i = 0; i < input_objects.size(); i++) PyTuple_SET_ITEM(args, i, input_objects[i]);
  PyObject* r = PyObject_Call(a.compiled_fn, args, nullptr);
  Py_DECREF(args);
  if (!r) return false;
  // A list or tuple of tensors, one per graph output (a str is a sequence too: not this)
  PyObject* seq = PyList_Check(r) || PyTuple_Check(r) ? PySequence_Fast(r, "") : nullptr;
  std::string returned = Py_TYPE(r)->tp_name;
  Py_DECREF(r);
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "mini: the compiled function from %s returned a value of type "
                 "%s: it must return a list or tuple of tensors, one per graph output, as the "
                 "GraphModule's forward does",
                 a.backend_label.c_str(), returned.c_str());
    return false;
  }
  if ((size_t)PySequence_Fast_GET_SIZE(seq) != a.graph->outputs.size()) {
    PyErr_Format(PyExc_RuntimeError, "mini: the compiled function from %s returned %zd outputs, "
                 "the graph has %zu: it must return one tensor per graph output, as the "
                 "GraphModule's forward does",
                 a.backend_label.c_str(), PySequence_Fast_GET_SIZE(seq), a.graph->outputs.size());
    Py_DECREF(seq);
    return false;
  }
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject* o = PySequence_Fast_GET_ITEM(seq, i);
    if (!guards::unwrap_tensor(o)) {
      PyErr_Format(PyExc_TypeError, "mini: the compiled function from %s returned a value of "
                   "type %s as output %zd: it must return tensors only, one per graph output, as "
                   "the GraphModule's forward does",
                   a.backend_label.c_str(), Py_TYPE(o)->tp_name, i);
      Py_DECREF(seq);
      return false;
    }
    Py_INCREF(o);
    outs->push_back(o);
  }
  Py_DECREF(seq);
  return true;
}

// True when an input the unit writes in place shares memory with another input on this call
// (torch guards this with NO_TENSOR_ALIASING): the unit then runs eagerly instead. (Two
// sources that held one tensor while tracing are guarded by DUPLICATE_INPUT.)
bool aliasing_changed(const Artifact& a, const guards::FrameValues& fv) {
  if (a.input_mutations.empty()) return false;
  std::vector<PyObject*> objects;
  for (size_t i = 0; i < a.input_sources.size(); i++) {
    bool number = i < a.scalar_inputs.size() && a.scalar_inputs[i];
    objects.push_back(number ? nullptr : guards::fetch(*a.input_sources[i], fv));
  }
  PyErr_Clear();
  auto storage = [&](int i) {
    TensorImpl* t = objects[i] ? guards::unwrap_tensor(objects[i]) : nullptr;
    return t ? t->storage.get() : nullptr;
  };
  bool changed = false;
  for (const auto& [input, output] : a.input_mutations)
    for (int j = 0; j < (int)objects.size(); j++)
      changed = changed || (j != input && storage(j) && storage(j) == storage(input));
  for (PyObject* o : objects) Py_XDECREF(o);
  return changed;
}

// Copies the final value of each graph input the unit wrote in place into the input's own
// memory, as AOTAutograd's epilogue does: one copy_, so the input's version moves on once
// and, when grad mode is on, autograd records the write. False with a Python error.
bool write_back_inputs(const Artifact& a, const guards::FrameValues& fv,
                       const std::vector<PyObject*>& outs) {
  for (const auto& [input, output] : a.input_mutations) {
    PyObject* o = guards::fetch(*a.input_sources[input], fv);
    TensorImpl* dst = o ? guards::unwrap_tensor(o) : nullptr;
    TensorImpl* src = guards::unwrap_tensor(outs.at(output));
    if (!dst || !src) {
      Py_XDECREF(o);
      PyErr_Format(PyExc_RuntimeError, "mini: cannot write back the graph input %s",
                   a.input_sources[input]->str().c_str());
      return false;
    }
    try {
      copy_(dst->shared_from_this(), src->shared_from_this());
    } catch (const std::exception& e) {
      Py_DECREF(o);
      set_python_error(e);
      return false;
    }
    Py_DECREF(o);
  }
  return true;
}

// ---- resume units (A9) -----------------------------------------------------------------------
// At a graph break the unit's graph has run and the frame's locals and value stack are rebuilt
// as they were just before the breaking instruction (run_unit). run_instruction runs that one
// instruction with real objects, and the next unit of the frame starts at the offset it
// returns, with its own UnitCache (CodeCache::unit(offset)): torch's resume function
// resume_in_f_at_N, without a new code object.

// While A9 is a stub (exit_at or run_instruction), every break is left to CPython: said once.
const char* kResumeStubFallback =
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

std::string repr_of(PyObject* o) {
  PyObject* r = PyObject_Repr(o);
  std::string s = r ? PyUnicode_AsUTF8(r) : "?";
  Py_XDECREF(r);
  PyErr_Clear();
  return s;
}

// ---- automatic dynamic shapes (A7) -----------------------------------------------------------
// torch's automatic_dynamic_shapes (kept per code in pgo.py's CodeState): a unit is first
// compiled with every size and number a constant; when a call misses because one of them
// changed, the recompile makes exactly what changed symbolic (a size: a symbol s0 >= 2; an int
// or float: a graph input), so that the next change is a cache hit (torch 2.11: one recompile,
// then never again for that change). Two functions of the course kit's assignment A7
// (notes/assignments/A7.md) keep the unit's record: record_seen after each compile,
// automatic_dynamic_on_recompile before a recompile. compile_unit hands the unit's
// dynamic_dims and dynamic_scalars to the tracer (DynamicPolicy), which makes those symbolic.

// record_seen: after a compile, what it saw, for later calls to be compared with.
//   in:  the unit; the frame's values of the call just compiled; the compile's guards. Each
//        guard with a source (g.source >= 0; gs.sources()[g.source], keyed by its printed form
//        src->str(), e.g. "L['x']") may be a TensorMatch (g.as<guards::TensorMatch>()) or an
//        EqualsMatch on a constant (g.as<guards::EqualsMatch>()->constant).
//   out: unit.seen[key] = {source, true, the tensor's sizes now, ""} for each tensor source
//        (the value from guards::fetch(*src, fv), a New reference or null, unwrapped with
//        guards::unwrap_tensor); {source, false, {}, repr_of(constant)} for each source
//        guarded equal to an exact Python int or float (PyLong_CheckExact/PyFloat_CheckExact:
//        a bool is neither, so bools stay specialized).
//   guarantees: the first record of a source stays: a later compile does not overwrite a
//        record of the same kind (tensor or number), so that changes are measured from the
//        first call; no reference is leaked.
void record_seen(guards::UnitCache& unit, const guards::FrameValues& fv, const guards::GuardSet& gs) {
  // A7 BEGIN: automatic dynamic shapes
  for (const guards::Guard& g : gs.guards()) {
    if (g.source < 0) continue;
    const SourceRef& src = gs.sources()[g.source];
    std::string key = src->str();
    bool tensor = g.as<guards::TensorMatch>() != nullptr;
    const guards::EqualsMatch* constant = g.as<guards::EqualsMatch>();
    auto old = unit.seen.find(key);
    if (old != unit.seen.end() && old->second.tensor == tensor) continue;  // first sighting of this kind wins
    if (tensor) {
      PyObject* o = guards::fetch(*src, fv);
      if (TensorImpl* t = o ? guards::unwrap_tensor(o) : nullptr) unit.seen[key] = {src, true, t->sizes, ""};
      Py_XDECREF(o);
    } else if (constant && (PyFloat_CheckExact(constant->constant) || PyLong_CheckExact(constant->constant))) {
      unit.seen[key] = {src, false, {}, repr_of(constant->constant)};
    }
  }
  // A7 END
}

// automatic_dynamic_on_recompile: before a recompile, what turns symbolic.
//   when: a call missed every entry and recompiles (a non-empty recompile reason), with
//        mini.config.automatic_dynamic_shapes on and mini.compile's dynamic not False (the
//        caller checks both).
//   in:  the unit, with unit.seen as record_seen left it; the frame's values of this call.
//   out: for each seen source whose value now (guards::fetch: New reference or null; skip
//        null) is
//        - a tensor of another rank: every dim of it dynamic (unit.dynamic_dims[key] =
//          new-rank trues), and seen.sizes becomes the new sizes;
//        - a tensor of the same rank: dim d dynamic (unit.dynamic_dims[key][d] = true, the
//          vector sized to the rank, false elsewhere) where its size differs from seen.sizes[d];
//        - an exact int or float whose repr_of differs from seen.scalar:
//          unit.dynamic_scalars[key] = true.
//        Under MINI_LOGS=dynamic (log_channels().dynamic) each decision that is new is logged
//        once, through log_write, in exactly these words:
//          "automatic dynamic: L['x'] changed rank 1 -> 2, recompiling with every dim symbolic"
//          "automatic dynamic: L['x'].size()[0] changed 32 -> 64, recompiling with that dim symbolic"
//          "automatic dynamic: L['lr'] changed 0.1 -> 0.01, recompiling with it as a graph input"
//   guarantees: only what changed turns dynamic (an unchanged dim stays static, a bool never
//        turns); nothing turns back (a dim or number once dynamic stays dynamic); a dim
//        already dynamic is not logged again; no reference is leaked.
void automatic_dynamic_on_recompile(guards::UnitCache& unit, const guards::FrameValues& fv) {
  // A7 BEGIN: automatic dynamic shapes
  for (auto& [key, seen] : unit.seen) {
    PyObject* o = guards::fetch(*seen.source, fv);
    if (!o) continue;
    if (seen.tensor) {
      TensorImpl* t = guards::unwrap_tensor(o);
      if (t) {
        auto& dyn = unit.dynamic_dims[key];
        bool rank_changed = t->sizes.size() != seen.sizes.size();
        if (rank_changed) {  // as torch: a change of rank makes every dim dynamic
          if (log_channels().dynamic)
            log_write("automatic dynamic: " + key + " changed rank " + std::to_string(seen.sizes.size()) +
                      " -> " + std::to_string(t->sizes.size()) + ", recompiling with every dim symbolic");
          dyn.assign(t->sizes.size(), true);
          seen.sizes = t->sizes;
          Py_DECREF(o);
          continue;
        }
        dyn.resize(seen.sizes.size(), false);
        for (size_t d = 0; d < seen.sizes.size(); d++) {
          bool changed = t->sizes[d] != seen.sizes[d];
          if (changed && !dyn[d] && log_channels().dynamic)
            log_write("automatic dynamic: " + key + ".size()[" + std::to_string(d) + "] changed " +
                      std::to_string(seen.sizes[d]) + " -> " + std::to_string(t->sizes[d]) +
                      ", recompiling with that dim symbolic");
          dyn[d] = dyn[d] || changed;
        }
      }
    } else if ((PyFloat_CheckExact(o) || PyLong_CheckExact(o)) && repr_of(o) != seen.scalar) {
      if (!unit.dynamic_scalars[key] && log_channels().dynamic)
        log_write("automatic dynamic: " + key + " changed " + seen.scalar + " -> " + repr_of(o) +
                  ", recompiling with it as a graph input");
      unit.dynamic_scalars[key] = true;
    }
    Py_DECREF(o);
  }
  // A7 END
}

void release_all(std::vector<PyObject*>& v) {
  for (PyObject* o : v) Py_XDECREF(o);
  v.clear();
}

// Adds the user's line to the traceback of the error being raised: CPython's loop adds one for
// each frame it runs, and mini ran this one (a call at a break raised, or a trace found the
// user's error), so the traceback would skip the user's frame.
void add_user_frame(PyCodeObject* code, int line, const std::string& location = "") {
  std::string file = PyUnicode_AsUTF8(code->co_filename), fn = PyUnicode_AsUTF8(code->co_name);
  size_t in = location.rfind(" in "), colon = location.rfind(':', in);
  if (in != std::string::npos && colon != std::string::npos) {  // "file:line in fn", maybe inlined
    file = location.substr(0, colon);
    line = std::atoi(location.c_str() + colon + 1);
    fn = location.substr(in + 4);
  }
  if (line > 0) _PyTraceback_Add(fn.c_str(), file.c_str(), line);
}

// Traces one unit and hands its graph to the backend. Returns null with a Python error
// when the backend or the user's code (a bad shape, say) raised.
std::shared_ptr<Artifact> compile_unit(PyCodeObject* code, guards::UnitCache& unit, int offset,
                                       const guards::FrameValues& fv, CompileRequest* req,
                                       std::unique_ptr<guards::GuardSet>* guards_out) {
  DynamicPolicy policy;
  policy.all_dims = req->dynamic == 1;
  policy.dims = &unit.dynamic_dims;
  policy.scalars = &unit.dynamic_scalars;
  TraceOptions options;
  // torch 2.11 captures Tensor.item() under fullgraph=True, where a break is no way out
  options.capture_scalar_outputs = compile_config().capture_scalar_outputs || req->fullgraph;
  Trace trace;
  StageTimer capture_time(Stage::Capture);
  try {
    trace = trace_frame(code, fv, offset, policy, options);
  } catch (const Unsupported& u) {
    trace.exit = Trace::Exit::Native;
    trace.break_reason = u.reason;
    trace.graph->nodes.clear();
    trace.exit_instruction.offset = offset;  // the whole unit runs in CPython
  } catch (const std::exception& e) {
    set_python_error(e);
    return nullptr;
  }
  capture_time.stop();
  if (!trace.stub_fallback.empty() &&
      !guards::warn_stub_fallback(Error(Error::Kind::Runtime, trace.stub_fallback), kResumeStubFallback))
    return nullptr;  // the warning raised: its error is set
  if (trace.exit == Trace::Exit::Skip) {  // nothing is compiled: CPython runs the unit
    std::string where = trace.break_location.empty() ? function_label(code) : trace.break_location;
    // as Dynamo: no graph where every iteration would break again, nor where an exception has
    // to reach the user's handler ("Skipping frame because there is a graph break in a
    // for/while loop"; should_compile_partial_graph inside a try)
    std::string why = trace.break_reason + (trace.skip_unit ? "" : " (a break " + trace.skip_where +
                                                                       ": the whole frame runs as plain Python)");
    if (req->fullgraph) {
      PyErr_SetString(g_unsupported_error, (why + "\n  from user code: " +
                                            (trace.break_code.empty() ? where : trace.break_code)).c_str());
      return nullptr;
    }
    if (log_channels().graph_breaks)
      log_write("Skipping the rest of the frame at " + where + "\nReason: " + why +
                (trace.break_code.empty() ? "" : "\n  " + trace.break_code));
    record_event(break_events(), BreakEvent{why, where, trace.break_code});  // explain() lists why
    auto art = std::make_shared<Artifact>();
    art->graph = std::make_shared<graph::Graph>();
    art->exit = Trace::Exit::Skip;
    art->break_reason = why;
    return art;
  }
  auto art = std::make_shared<Artifact>();
  art->graph = trace.graph;
  art->grad_enabled_after = trace.grad_enabled_after;
  art->grad_enabled_on_raise = trace.grad_enabled_on_raise;
  art->input_sources = trace.input_sources;
  art->scalar_inputs = trace.scalar_inputs;
  art->input_mutations = trace.input_mutations;
  art->exit = trace.exit;
  art->output = std::move(trace.output);
  art->exit_instruction = trace.exit_instruction;
  art->exit_stack = std::move(trace.exit_stack);
  art->exit_locals = std::move(trace.exit_locals);
  art->exit_kw_names = trace.exit_kw_names;
  art->native_resume_offset = trace.native_resume_offset >= 0 ? trace.native_resume_offset
                                                              : trace.exit_instruction.offset;
  art->side_effects = std::move(trace.side_effects);
  bool has_graph = art->graph->op_count() > 0;
  std::string title = "__compiled_fn_" + std::to_string(has_graph ? ++g_graph_counter : g_graph_counter);
  if (has_graph && log_channels().graph_code) log_write("TRACED GRAPH\n" + art->graph->print(title));
  if (log_channels().guards) log_write(trace.guards->print());
  if (has_graph && compile_debug()) {
    debug_write(title, "graph_code.txt", art->graph->print(title));
    debug_write(title, "guards.txt", trace.guards->print());
  }
  if (trace.exit != Trace::Exit::Return) {
    std::string where = trace.break_location.empty() ? function_label(code) : trace.break_location;
    if (req->fullgraph && trace.user_error) {  // the user's error, as eager raises it
      set_python_error(*trace.user_error);
      add_user_frame(code, -1, trace.break_location);
      return nullptr;
    }
    if (req->fullgraph) {
      PyErr_SetString(g_unsupported_error, (trace.break_reason + "\n  from user code: " +
                                            (trace.break_code.empty() ? where : trace.break_code)).c_str());
      return nullptr;
    }
    record_event(break_events(), BreakEvent{trace.break_reason, where, trace.break_code});
    debug_write("graph_breaks", "break_" + std::to_string(++g_break_count) + ".txt",
                "Graph break in user code at " + where + "\nGraph Break Reason: " + trace.break_reason +
                    (trace.break_code.empty() ? "" : "\n  " + trace.break_code) +
                    (has_graph ? "\nThe graph before it: " + title : "") + "\n");
    if (log_channels().graph_breaks)
      log_write("Graph break in user code at " + where + "\nGraph Break Reason: " + trace.break_reason +
                (trace.break_code.empty() ? "" : "\nUser code traceback:\n  " + trace.break_code));
  }
  // An empty graph is neither compiled nor counted (Dynamo skips graphs without calls).
  bool needs_autograd = false, unbacked = false, eager_autograd = false;
  for (int i : art->graph->inputs) needs_autograd |= art->graph->nodes[i].meta.requires_grad;
  for (const auto& n : art->graph->nodes) {
    for (int64_t s : n.meta.sizes) unbacked |= s == graph::kUnbacked;
    // autograd only eager kernels record as the code would: a new leaf that requires grad
    // (mini.zeros(..., requires_grad=True)), an enable_grad() block in code entered with grad
    // off (training graphs assume grad on)
    bool leaf = n.kind == graph::NodeKind::Op && op_class(n.op) == OpClass::Factory && n.meta.requires_grad;
    eager_autograd |= leaf;
    eager_autograd |= n.grad_mode == graph::GradMode::On && !grad_enabled() && needs_autograd;
  }
  if (has_graph && req->inductor && unbacked && log_channels().fusion)
    log_write("inductor: " + title + " has a size known only at run time (nonzero, or a slice of a "
              "dynamic dim); it runs with eager kernels");
  bool aot_logs = log_channels().fusion || log_channels().aot_graphs;
  if (has_graph && (req->inductor || req->aot) && eager_autograd && aot_logs)
    log_write("aot: " + title + " makes a tensor that requires grad (requires_grad=True, enable_grad()); "
              "it runs with eager kernels, which record autograd");
  needs_autograd &= grad_enabled();
  try {
    bool eager_kernels = unbacked || eager_autograd;
    if (has_graph && (req->inductor || req->aot) && g_training && needs_autograd && !eager_kernels)
      art->compiled = g_training(*art->graph, title, req->inductor);
    else if (has_graph && req->inductor && g_inductor && !needs_autograd && !eager_kernels)
      art->compiled = g_inductor(*art->graph, title, req->mode);
  } catch (const std::exception& e) {
    std::string graph = title + " of " + function_label(code);
    auto* me = dynamic_cast<const Error*>(&e);
    if (me && me->kind == Error::Kind::Interrupted) {  // Ctrl-C: neither suppressed nor explained
      set_python_error(e);
      return nullptr;
    } else if (is_assignment_stub(e)) {
      // a student tree whose stage is not written yet: the graph runs with eager kernels, so
      // that every other stage and lab keeps running; said once per assignment
      static std::set<std::string> told;
      art->compiled = nullptr;
      std::string which = assignment_of(e);
      if (told.insert(which).second &&
          PyErr_WarnEx(PyExc_UserWarning, (which + " is not written yet (" + e.what() + "); graphs that need it "
                                           "run with eager kernels until it is").c_str(), 1) < 0)
        return nullptr;
    } else if (!compile_config().suppress_errors) {
      set_python_error(Error(me ? me->kind : Error::Kind::Runtime,
                             e.what() + ("\nThe graph: " + graph + ", compiled by the inductor backend.")));
      return nullptr;
    } else {
      // torch's suppress_errors: the graph runs with eager kernels (the interpreter, which
      // records autograd), and the user hears why once, here
      art->compiled = nullptr;
      std::string why = "inductor failed to compile " + graph + ": " + e.what();
      if (PyErr_WarnEx(PyExc_UserWarning, (why + "\nIt runs eagerly (mini.config.suppress_errors is True).").c_str(), 1) < 0)
        return nullptr;
    }
  }
  if (has_graph && req->backend) {
    PyObject* gm = python_bridge().make_graph_module(art->graph, title);
    if (!gm) return nullptr;
    PyObject* examples = PyList_New((Py_ssize_t)trace.example_inputs.size());
    for (size_t i = 0; i < trace.example_inputs.size(); i++) {
      PyObject* e = trace.example_inputs[i];
      if (i < trace.scalar_inputs.size() && trace.scalar_inputs[i])
        e = python_bridge().wrap_tensor(wrapped_number_tensor(e));  // traced: it fits int64
      else
        Py_INCREF(e);
      PyList_SET_ITEM(examples, i, e);
    }
    PyObject* fn = PyObject_CallFunctionObjArgs(req->backend, gm, examples, nullptr);
    Py_DECREF(gm);
    Py_DECREF(examples);
    if (!fn) return nullptr;
    art->backend_label = backend_label(req->backend);
    if (!PyCallable_Check(fn)) {  // found here, not as "'int' object is not callable" at a call
      PyErr_Format(PyExc_TypeError, "mini: %s returned %s for graph %s, not a callable: a backend must "
                   "return the function that runs the graph, e.g. `return gm.forward`",
                   art->backend_label.c_str(), fn == Py_None ? "None" : Py_TYPE(fn)->tp_name, title.c_str());
      Py_DECREF(fn);
      return nullptr;
    }
    art->compiled_fn = fn;
  }
  if (has_graph)
    record_event(compile_events(), CompileEvent{art->graph, trace.guards->print(), function_label(code)});
  *guards_out = std::move(trace.guards);
  return art;
}

// How a unit runs on this call, as lookup_or_compile decided.
enum class UnitPlan {
  Run,          // run the artifact found in the cache or just compiled
  RunNatively,  // CPython runs the unit capture cannot handle; what it calls is captured
  RunOnly,      // past the cache size limit: CPython runs the unit with the hook off for
                // the functions it calls (torch's RUN_ONLY for them: no new compiles)
  Error,        // a Python error is set
};

// ---- the guard cache and automatic dynamic, as lookup_or_compile calls them ------------------
// In a student tree (scripts/make_assignment.py) a stage not written yet raises "not
// implemented: A<n> ..."; mini then runs something slower but right in its place and says so
// once, as a UserWarning naming the assignment (guards::warn_stub_fallback). Any other error
// propagates; so does the stub's, in the stage's own tests (is_assignment_stub).

// Sets `e` as the Python error, unless one is set already (a warning turned into an error).
UnitPlan python_error(const std::exception& e) {
  if (!PyErr_Occurred()) set_python_error(e);
  return UnitPlan::Error;
}

// While A6 (the guard cache) is a stub, a plain cache stands in for it: every entry is
// checked in the order it was compiled and none moves (a shape that comes back walks past the
// guards of every entry compiled before its own), a recompile's reason lists the failing guard
// of every entry (evaluating them all) instead of the most recent entry's, and there is no size
// limit (every new shape compiles). Runs the unit's own operation, or on a stub `plain`.
template <class Written, class Plain>
auto with_plain_cache(Written written, Plain plain) -> decltype(written()) {
  try {
    return written();
  } catch (const std::exception& e) {
    if (!is_assignment_stub(e)) throw;
    const char* instead = "a plain cache stands in: entries checked oldest first, none moves, a "
                          "recompile lists every entry's failing guard, and no cache size limit";
    if (!guards::warn_stub_fallback(e, instead))
      throw Error(Error::Kind::Runtime, "a warning raised");  // its Python error stays set
    return plain();
  }
}

guards::CacheEntry* cache_lookup(guards::UnitCache& unit, const guards::FrameValues& fv,
                                 PyObject* backend) {
  return with_plain_cache([&] { return unit.lookup(fv, backend); }, [&]() -> guards::CacheEntry* {
    for (guards::CacheEntry& entry : unit.entries)
      if (entry.backend_key == backend && guards::guards_hold(entry, fv)) return &entry;
    return nullptr;
  });
}

std::string cache_recompile_reason(const guards::UnitCache& unit, const guards::FrameValues& fv,
                                   PyObject* backend) {
  return with_plain_cache([&] { return unit.recompile_reason(fv, backend); }, [&] {
    std::string every;  // not the most recent entry's reason: each entry's, oldest first
    for (const guards::CacheEntry& entry : unit.entries) {
      if (entry.backend_key != backend) continue;
      std::string why = guards::failing_guard(entry, fv);
      if (!why.empty())
        every += (every.empty() ? "" : "; ") + std::to_string(unit.frame_id) + "/" +
                 std::to_string(entry.compile_id) + ": " + why;
    }
    return every;
  });
}

bool cache_may_compile(guards::UnitCache& unit, int limit) {
  return with_plain_cache([&] { return unit.may_compile(limit); }, [] { return true; });
}

void cache_add(guards::UnitCache& unit, guards::CacheEntry&& entry) {
  with_plain_cache([&] { unit.add(std::move(entry)); }, [&] {  // a stub has not moved `entry`
    entry.compile_id = unit.compiles++;
    unit.entries.push_back(std::move(entry));
  });
}

// While A7 (automatic dynamic shapes) is a stub, recompiles stay static, as with
// mini.config.automatic_dynamic_shapes = False. True to go on; false with a Python error set.
bool static_instead(const std::exception& e) {
  if (!is_assignment_stub(e)) {
    python_error(e);
    return false;
  }
  return guards::warn_stub_fallback(e, "recompiles stay static: no size or number becomes symbolic, "
                                       "as with mini.config.automatic_dynamic_shapes = False");
}

bool decide_dynamic(guards::UnitCache& unit, const guards::FrameValues& fv,
                    const CompileRequest* req) {
  if (!compile_config().automatic_dynamic_shapes || req->dynamic == 0) return true;
  try {
    automatic_dynamic_on_recompile(unit, fv);
    return true;
  } catch (const std::exception& e) {
    return static_instead(e);
  }
}

bool remember_seen(guards::UnitCache& unit, const guards::FrameValues& fv,
                   const guards::GuardSet& gs) {
  try {
    record_seen(unit, fv, gs);
    return true;
  } catch (const std::exception& e) {
    return static_instead(e);
  }
}

// The cache lookup and compile of Dynamo's convert_frame, for the unit at `offset`: the
// first entry whose guards hold; on a miss, the recompile reason (the newest entry's first
// failing guard), the cache size limit, automatic dynamic, then a compile whose entry goes
// in at the front. *art is what Run runs: held by the caller too, as code the unit runs
// (the breaking call, a backend, a setter) may call mini.reset(), which empties the cache.
UnitPlan lookup_or_compile(PyCodeObject* code, guards::UnitCache& unit, int offset,
                           const guards::FrameValues& fv, CompileRequest* req,
                           std::shared_ptr<Artifact>* art) {
  HookDisabled no_hook;  // guards, tracing and the graph are mini's own work
  guards::UnitsInUse in_use;  // `unit` outlives a reset until this returns
  guards::CacheEntry* hit = nullptr;
  try {  // a guard check that throws is a Python error, not a crash
    hit = cache_lookup(unit, fv, req->backend_key);
  } catch (const std::exception& e) {
    return python_error(e);
  }
  if (hit) {
    compile_stats().cache_hits++;
    *art = std::static_pointer_cast<Artifact>(hit->artifact);
    return UnitPlan::Run;
  }
  if (unit.run_only) return UnitPlan::RunOnly;
  if (unit.frame_id < 0) unit.frame_id = guards::next_frame_id();
  std::string reason;
  bool may_compile = true;
  try {
    if (!unit.entries.empty()) reason = cache_recompile_reason(unit, fv, req->backend_key);
    may_compile = cache_may_compile(unit, compile_config().cache_size_limit);
  } catch (const std::exception& e) {
    return python_error(e);
  }
  if (!may_compile) {
    std::string msg = "mini hit config.cache_size_limit (" +
                      std::to_string(compile_config().cache_size_limit) + ")\n   function: " +
                      function_label(code) + "\n   last reason: " + reason +
                      "\nTo log all recompilation reasons, use MINI_LOGS=\"recompiles\".";
    if (req->fullgraph) {
      PyErr_SetString(g_unsupported_error, msg.c_str());
      return UnitPlan::Error;
    }
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) < 0) return UnitPlan::Error;
    return UnitPlan::RunOnly;
  }
  if (!reason.empty()) {
    if (!decide_dynamic(unit, fv, req)) return UnitPlan::Error;
    if (log_channels().recompiles)
      log_write("Recompiling function " + std::string(PyUnicode_AsUTF8(code->co_name)) + " in " +
                PyUnicode_AsUTF8(code->co_filename) + ":" + std::to_string(code->co_firstlineno) +
                "\n    triggered by the following guard failure(s):\n    - " + reason);
  }
  std::unique_ptr<guards::GuardSet> guard_set;
  compile_stats().compiles++;
  if (!reason.empty()) compile_stats().recompiles++;
  std::shared_ptr<Artifact> compiled = compile_unit(code, unit, offset, fv, req, &guard_set);
  if (!compiled) return UnitPlan::Error;
  if (compiled->exit == Trace::Exit::Skip) {
    unit.skip_reason = compiled->break_reason;
    return UnitPlan::RunNatively;
  }
  if (compiled->exit == Trace::Exit::Native && compiled->graph->op_count() == 0 &&
      compiled->native_resume_offset == offset) {
    unit.skip_reason = "capture cannot run this code";  // nothing to gain: CPython runs it
    return UnitPlan::RunNatively;
  }
  if (!remember_seen(unit, fv, *guard_set)) return UnitPlan::Error;
  guards::CacheEntry entry;
  entry.guards = std::move(guard_set);
  entry.artifact = compiled;
  entry.backend_key = req->backend_key;
  Py_INCREF(entry.backend_key);
  try {
    cache_add(unit, std::move(entry));
  } catch (const std::exception& e) {
    return python_error(e);
  }
  *art = std::move(compiled);
  return UnitPlan::Run;
}

// True (after logging why) when the unit's inputs alias differently from the traced call's:
// the unit then runs eagerly (torch's NO_TENSOR_ALIASING guard).
bool inputs_alias_differently(const Artifact& art, const guards::FrameValues& fv,
                              PyCodeObject* code) {
  bool aliased;
  {
    HookDisabled no_hook;
    aliased = aliasing_changed(art, fv);
  }
  if (aliased && log_channels().graph_breaks)
    log_write("mini: the inputs of " + function_label(code) + " alias differently from the "
              "traced call's (one tensor passed twice, or memory shared with a tensor the graph "
              "writes); it runs eagerly from here");
  return aliased;
}

// Runs one unit's artifact on the frame's values: its graph, the write-back of the inputs it
// wrote in place, the side effects the trace recorded and the grad mode the unit's code
// left. Then rebuilds what follows the unit: the return value (*result, New) or, at a break,
// the frame's new locals and stack, which replace `locals` and `stack` (the old references
// are released). False with a Python error set, and nothing replaced.
bool run_unit(const Artifact& art, const guards::FrameValues& fv, std::vector<PyObject*>& locals,
              std::vector<PyObject*>& stack, PyObject** result) {
  std::vector<PyObject*> outs;
  bool failed = false;
  PyObject* returned = nullptr;
  std::vector<PyObject*> new_locals, new_stack, effects, made;
  {
    HookDisabled no_hook;
    std::optional<StageTimer> first_run;
    if (!art.ran) first_run.emplace(Stage::FirstRun), art.ran = true;
    if (!run_graph_of(art, fv, &outs)) return release_all(outs), false;
    first_run.reset();
    if (!write_back_inputs(art, fv, outs)) return release_all(outs), false;
    if (art.exit == Trace::Exit::Return) {
      returned = build(art.output, outs, fv, &failed, made);
    } else {
      for (auto& s : art.exit_stack) new_stack.push_back(build(s, outs, fv, &failed, made));
      for (auto& s : art.exit_locals) new_locals.push_back(build(s, outs, fv, &failed, made));
    }
    for (auto& e : art.side_effects)
      effects.push_back(failed ? nullptr : build(e.value, outs, fv, &failed, made));
    release_all(outs);
    release_all(made);
    if (!failed && !replay_side_effects(art, fv, effects)) failed = true;
    release_all(effects);
  }
  if (failed) {
    Py_XDECREF(returned);
    release_all(new_locals);
    release_all(new_stack);
    return false;
  }
  // The grad mode the unit's code left (a with mini.no_grad() block open at the break): the
  // graph ran its ops in their modes without touching the global one.
  if (grad_enabled() != art.grad_enabled_after) set_grad_enabled(art.grad_enabled_after);
  if (art.exit == Trace::Exit::Return) {
    *result = returned;
    return true;
  }
  release_all(locals);
  release_all(stack);
  locals = std::move(new_locals);
  stack = std::move(new_stack);
  return true;
}

// The resume point after a graph break: the instruction the trace stopped at runs with real
// objects on the rebuilt stack (the hook stays on: a function it calls is captured on its
// own). Next: *offset is the next unit's start, the instruction after it. Torch's resume
// functions (resume_in_f_at_N) start at the same place. While run_instruction is a course
// kit's stub (A9), Native: CPython runs the rest of the frame from the breaking instruction,
// uncompiled but right, said once. Error: a Python error is set.
enum class ResumePlan { Next, Native, Error };
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

// Frames the hook never captures (Dynamo's skip rules): code that is not a function's,
// mini's own files, and code that uses zero-argument super(). Returns why, or null.
const char* skip_reason(const FrameView& view) {
  PyCodeObject* code = view.code;
  if (!(code->co_flags & CO_OPTIMIZED) || !view.function) return "not a function's code (a module or class body)";
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  // mini's own frames run as they are, except mini.nn's modules, which user code calls and
  // capture inlines (as Dynamo traces torch.nn)
  if (!g_skip_prefix.empty() && file && strncmp(file, g_skip_prefix.c_str(), g_skip_prefix.size()) == 0 &&
      strncmp(file + g_skip_prefix.size(), "nn/", 3) != 0)
    return "mini's own code";
  // zero-argument super() needs CPython's own frame
  if (code->co_nfreevars > 0 && PySequence_Contains(code->co_localsplusnames, g_class_cell_name) == 1)
    return "it calls zero-argument super()";
  return nullptr;
}

// CPython counts a frame against the recursion limit when its own loop runs it; a frame mini
// runs (its graph, then the call at a break, which re-enters the hook) recursed on the C stack
// uncounted, and infinite recursion in a compiled function crashed instead of raising.
// (3.12+ count C calls apart, against a limit deeper than the C stack holds at mini's frame
// size: the frame counts against the Python limit there, as CPython's loop counts it.)
struct RecursionCount {
  bool held = false;
  bool enter() {
#if PY_VERSION_HEX >= 0x030C0000
    PyThreadState* ts = PyThreadState_Get();
    if (ts->py_recursion_remaining <= 0) {
      PyErr_SetString(PyExc_RecursionError, "maximum recursion depth exceeded");
      return false;
    }
    ts->py_recursion_remaining--;
    return held = true;
#else
    return held = Py_EnterRecursiveCall(" while calling a Python object") == 0;
#endif
  }
  void leave() {
#if PY_VERSION_HEX >= 0x030C0000
    if (held) PyThreadState_Get()->py_recursion_remaining++;
#else
    if (held) Py_LeaveRecursiveCall();
#endif
    held = false;
  }
  ~RecursionCount() { leave(); }
};

// The frame hook (Dynamo's eval_frame callback): skips the frames it must not touch, then
// runs the frame unit by unit. Each unit is looked up or compiled, run, and either returns,
// hands the rest of the frame to CPython, or stops at a graph break, whose instruction runs
// before the next unit starts.
PyObject* on_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag, void*) {
  if (t_requests.empty()) return run_default(ts, frame, throwflag);
  CompileRequest* req = t_requests.back();
  FrameView view(frame);
  PyCodeObject* code = view.code;
  CompileStats& stats = compile_stats();
  stats.frames_seen++;
  if (const char* why = skip_reason(view)) {
    stats.skipped(why);
    return run_default(ts, frame, throwflag);
  }
  guards::CodeCache* cache = guards::code_cache(code, false);
  std::vector<PyObject*> entry_locals = view.locals();
  if (!cache) {
    const char* why = !frame_has_tensors(view, entry_locals) ? "no tensor among its arguments"
                      : !(cache = guards::code_cache(code, true)) ? "its code cannot hold a cache"
                                                                   : nullptr;
    if (why) {
      stats.skipped(why);
      return run_default(ts, frame, throwflag);
    }
  }
  stats.frames_captured++;
  // The frame's state as units run: locals and stack, owned references.
  std::vector<PyObject*> locals(entry_locals), stack;
  for (PyObject* o : locals) Py_XINCREF(o);
  RecursionCount depth;  // left when CPython's loop takes the frame over (it counts it then)
  auto finish = [&](PyObject* result) {  // mini ran the frame to its end (or to an error)
    release_all(locals);
    release_all(stack);
    finish_frame(ts, frame);
    return result;
  };
  auto run_natively = [&](int at) -> PyObject* {
    depth.leave();
    if (at == 0) {
      release_all(locals);
      return run_default(ts, frame, throwflag);
    }
    std::vector<PyObject*> l = std::move(locals), st = std::move(stack);
    // after a graph break, a frame with cell variables holds its cells (see trace_frame)
    ResumeCells cells = code->co_ncellvars > 0 ? ResumeCells::AreCells : ResumeCells::FromValues;
    return resume_native(ts, frame, at, l, st, cells);  // steals l and st
  };
  if (!depth.enter()) return finish(nullptr);
  int offset = 0;
  for (;;) {
    guards::UnitCache& unit = cache->unit(offset);
    if (!unit.skip_reason.empty()) {
      stats.units_run_natively[unit.skip_reason]++;
      return run_natively(offset);
    }
    guards::FrameValues fv{locals.data(), (int)locals.size(), view.globals, view.builtins,
                           stack.data(), (int)stack.size()};
    fv.closure = ((PyFunctionObject*)view.function)->func_closure;
    std::shared_ptr<Artifact> art;
    switch (lookup_or_compile(code, unit, offset, fv, req, &art)) {
      case UnitPlan::Run: break;
      case UnitPlan::RunNatively: return run_natively(offset);
      case UnitPlan::RunOnly: {
        stats.units_run_natively["the cache size limit was reached"]++;
        HookDisabled no_hook;
        return run_natively(offset);
      }
      case UnitPlan::Error: return finish(nullptr);
    }
    if (inputs_alias_differently(*art, fv, code)) {
      stats.units_run_natively["its inputs alias differently than when it was traced"]++;
      return run_natively(offset);
    }
    PyObject* result = nullptr;
    if (!run_unit(*art, fv, locals, stack, &result)) return finish(nullptr);
    if (art->exit == Trace::Exit::Return) return finish(result);
    if (art->exit == Trace::Exit::Native) return run_natively(art->native_resume_offset);
    switch (resume_after_break(*art, stack, &offset)) {  // Trace::Exit::Break
      case ResumePlan::Next: break;
      case ResumePlan::Native: return run_natively(art->native_resume_offset);
      case ResumePlan::Error: return add_user_frame(code, art->exit_instruction.line), finish(nullptr);
    }
  }
}

}  // namespace

void enter_compiled_region(CompileRequest* request) {
  if (t_requests.empty()) install_frame_hook(on_frame, nullptr);
  t_requests.push_back(request);
}

void exit_compiled_region() {
  if (!t_requests.empty()) t_requests.pop_back();
  if (t_requests.empty()) uninstall_frame_hook();
}

void reset_all() {
  reset_compile_stats();
  guards::clear_all_code_caches();
  clear_events();
  g_graph_counter = 0;
}

}  // namespace mini::capture
