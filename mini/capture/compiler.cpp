#include "capture/compiler.h"

#include "capture/frame_hook.h"
#include "tensor/errors.h"

namespace mini::capture {

PyObject* g_unsupported_error = nullptr;
std::string g_skip_prefix;

CompileConfig& compile_config() {
  static CompileConfig c;
  return c;
}
LogChannels& log_channels() {
  static LogChannels l;
  return l;
}
std::vector<CompileEvent>& compile_events() {
  static std::vector<CompileEvent> v;
  return v;
}
std::vector<BreakEvent>& break_events() {
  static std::vector<BreakEvent> v;
  return v;
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

void set_python_error(const std::exception& e) {
  PyObject* type = PyExc_RuntimeError;
  if (auto* me = dynamic_cast<const Error*>(&e)) {
    switch (me->kind) {
      case Error::Kind::Type: type = PyExc_TypeError; break;
      case Error::Kind::Value: type = PyExc_ValueError; break;
      case Error::Kind::Index: type = PyExc_IndexError; break;
      default: break;
    }
  }
  PyErr_SetString(type, e.what());
}

namespace {

thread_local std::vector<CompileRequest*> t_requests;
int g_graph_counter = 0;

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
  return false;
}

// Dynamo compiles a frame only if it can see a tensor or module in it.
bool frame_has_tensors(const FrameView& view, const std::vector<PyObject*>& locals) {
  for (PyObject* v : locals)
    if (holds_tensor(v)) return true;
  (void)view;
  return false;
}

PyObject* build_output(const OutputSpec& spec, const std::vector<PyObject*>& outs) {
  switch (spec.kind) {
    case OutputSpec::Kind::GraphOutput: {
      PyObject* o = outs.at(spec.index);
      Py_INCREF(o);
      return o;
    }
    case OutputSpec::Kind::Constant:
      Py_INCREF(spec.value);
      return spec.value;
    case OutputSpec::Kind::Tuple: case OutputSpec::Kind::List: {
      bool tuple = spec.kind == OutputSpec::Kind::Tuple;
      PyObject* r = tuple ? PyTuple_New((Py_ssize_t)spec.items.size()) : PyList_New((Py_ssize_t)spec.items.size());
      for (size_t i = 0; i < spec.items.size(); i++) {
        PyObject* item = build_output(spec.items[i], outs);
        if (tuple) PyTuple_SET_ITEM(r, i, item);
        else PyList_SET_ITEM(r, i, item);
      }
      return r;
    }
  }
  return nullptr;
}

// Runs a compiled artifact on the frame's values. New reference, or NULL with an error.
PyObject* run_artifact(const Artifact& a, const guards::FrameValues& fv) {
  std::vector<PyObject*> input_objects;
  input_objects.reserve(a.input_sources.size());
  auto release = [&] {
    for (PyObject* o : input_objects) Py_XDECREF(o);
  };
  for (const auto& s : a.input_sources) {
    PyObject* o = guards::fetch(*s, fv);
    if (!o) {
      release();
      PyErr_Format(PyExc_RuntimeError, "mini: graph input %s disappeared", s->str().c_str());
      return nullptr;
    }
    input_objects.push_back(o);
  }
  std::vector<PyObject*> outs;
  PyObject* result = nullptr;
  if (!a.compiled_fn) {
    std::vector<Tensor> inputs;
    inputs.reserve(input_objects.size());
    for (PyObject* o : input_objects) inputs.push_back(guards::unwrap_tensor(o)->shared_from_this());
    std::vector<Tensor> values;
    try {
      values = graph::run_graph(*a.graph, inputs);
    } catch (const std::exception& e) {
      release();
      set_python_error(e);
      return nullptr;
    }
    for (auto& t : values) outs.push_back(python_bridge().wrap_tensor(t));
    result = build_output(a.output, outs);
    for (PyObject* o : outs) Py_DECREF(o);
  } else {
    PyObject* args = PyTuple_New((Py_ssize_t)input_objects.size());
    for (size_t i = 0; i < input_objects.size(); i++) {
      Py_INCREF(input_objects[i]);
      PyTuple_SET_ITEM(args, i, input_objects[i]);
    }
    PyObject* r = PyObject_Call(a.compiled_fn, args, nullptr);
    Py_DECREF(args);
    if (!r) { release(); return nullptr; }
    PyObject* seq = PySequence_Fast(r, "a compiled graph must return a sequence of tensors");
    Py_DECREF(r);
    if (!seq) { release(); return nullptr; }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) outs.push_back(PySequence_Fast_GET_ITEM(seq, i));
    if (outs.size() != a.graph->outputs.size()) {
      Py_DECREF(seq);
      release();
      PyErr_SetString(PyExc_RuntimeError, "mini: the backend's compiled function returned the wrong number of outputs");
      return nullptr;
    }
    result = build_output(a.output, outs);
    Py_DECREF(seq);
  }
  release();
  return result;
}

// Traces the frame and hands the graph to the backend. Throws Unsupported or Error.
std::shared_ptr<Artifact> compile_frame(PyCodeObject* code, const FrameView& view, const guards::FrameValues& fv,
                                        CompileRequest* req, std::unique_ptr<guards::GuardSet>* guards_out) {
  Trace trace = trace_frame(code, view.function, fv, TraceOptions{});
  auto art = std::make_shared<Artifact>();
  art->graph = trace.graph;
  art->input_sources = trace.input_sources;
  art->output = std::move(trace.output);
  std::string title = "__compiled_fn_" + std::to_string(++g_graph_counter);
  if (log_channels().graph_code) log_write("TRACED GRAPH\n" + art->graph->print(title));
  if (log_channels().guards) log_write(trace.guards->print());
  if (req->backend) {
    PyObject* gm = python_bridge().make_graph_module(art->graph, title);
    if (!gm) throw Unsupported{"internal: cannot make a GraphModule"};
    PyObject* examples = PyList_New((Py_ssize_t)trace.example_inputs.size());
    for (size_t i = 0; i < trace.example_inputs.size(); i++) {
      Py_INCREF(trace.example_inputs[i]);
      PyList_SET_ITEM(examples, i, trace.example_inputs[i]);
    }
    PyObject* fn = PyObject_CallFunctionObjArgs(req->backend, gm, examples, nullptr);
    Py_DECREF(gm);
    Py_DECREF(examples);
    if (!fn) return nullptr;  // the backend raised: propagate
    art->compiled_fn = fn;
  }
  if (art->graph->op_count() > 0 || true)
    compile_events().push_back({art->graph, trace.guards->print(), function_label(code)});
  *guards_out = std::move(trace.guards);
  return art;
}

// A frame that runs as plain Python, as the evaluator would.
PyObject* run_eagerly(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag) {
  return run_default(ts, frame, throwflag);
}

PyObject* on_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag, void*) {
  if (t_requests.empty()) return run_default(ts, frame, throwflag);
  CompileRequest* req = t_requests.back();
  FrameView view(frame);
  PyCodeObject* code = view.code;
  if (!(code->co_flags & CO_OPTIMIZED) || !view.function) return run_default(ts, frame, throwflag);
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  // mini's own frames run as they are, except mini.nn's modules, which user code calls and
  // capture inlines (as Dynamo traces torch.nn)
  if (!g_skip_prefix.empty() && file && strncmp(file, g_skip_prefix.c_str(), g_skip_prefix.size()) == 0 &&
      strncmp(file + g_skip_prefix.size(), "nn/", 3) != 0)
    return run_default(ts, frame, throwflag);

  guards::CodeCache* cache = guards::code_cache(code, false);
  if (cache && !cache->skip_reason.empty()) return run_default(ts, frame, throwflag);
  std::vector<PyObject*> locals = view.locals();
  guards::FrameValues fv{locals.data(), (int)locals.size(), view.globals, view.builtins};

  HookDisabled no_hook;  // guards, tracing and compiled code are mini's own work
  if (cache) {
    if (guards::CacheEntry* hit = cache->lookup(fv, req->backend_key)) {
      PyObject* r = run_artifact(*static_cast<Artifact*>(hit->artifact.get()), fv);
      finish_frame(ts, frame);
      return r;
    }
  }
  if (!frame_has_tensors(view, locals)) return run_default(ts, frame, throwflag);
  if (!cache) cache = guards::code_cache(code, true);
  if (!cache) return run_default(ts, frame, throwflag);
  if (cache->frame_id < 0) cache->frame_id = guards::next_frame_id();
  if (cache->run_only) return run_default(ts, frame, throwflag);

  std::string reason = cache->entries.empty() ? "" : cache->recompile_reason(fv, req->backend_key);
  if (cache->compiles >= compile_config().cache_size_limit) {
    cache->run_only = true;
    std::string msg = "mini hit config.cache_size_limit (" + std::to_string(compile_config().cache_size_limit) +
                      ")\n   function: " + function_label(code) + "\n   last reason: " + reason +
                      "\nTo log all recompilation reasons, use MINI_LOGS=\"recompiles\".";
    if (req->fullgraph) {
      PyErr_SetString(g_unsupported_error, msg.c_str());
      finish_frame(ts, frame);
      return nullptr;
    }
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) < 0) {
      finish_frame(ts, frame);
      return nullptr;
    }
    return run_default(ts, frame, throwflag);
  }
  if (!reason.empty() && log_channels().recompiles)
    log_write("Recompiling function " + std::string(PyUnicode_AsUTF8(code->co_name)) + " in " +
              PyUnicode_AsUTF8(code->co_filename) + ":" + std::to_string(code->co_firstlineno) +
              "\n    triggered by the following guard failure(s):\n    - " + reason);

  std::unique_ptr<guards::GuardSet> guard_set;
  std::shared_ptr<Artifact> art;
  try {
    art = compile_frame(code, view, fv, req, &guard_set);
  } catch (const Unsupported& u) {
    // fall through below with the reason
    std::string where = std::string(PyUnicode_AsUTF8(code->co_filename)) + ":" + std::to_string(code->co_firstlineno);
    BreakEvent ev{u.reason, where, ""};
    if (req->fullgraph) {
      PyErr_SetString(g_unsupported_error, (u.reason + "\n  (in " + function_label(code) + ")").c_str());
      finish_frame(ts, frame);
      return nullptr;
    }
    break_events().push_back(ev);
    if (log_channels().graph_breaks)
      log_write("Graph break: " + u.reason + "\n  frame " + function_label(code) + " runs eagerly");
    cache->skip_reason = u.reason;
    return run_default(ts, frame, throwflag);
  } catch (const std::exception& e) {
    set_python_error(e);
    finish_frame(ts, frame);
    return nullptr;
  }
  if (!art) {  // the backend raised
    finish_frame(ts, frame);
    return nullptr;
  }
  guards::CacheEntry entry;
  entry.guards = std::move(guard_set);
  entry.artifact = art;
  entry.compile_id = cache->compiles++;
  entry.backend_key = req->backend_key;
  cache->add(std::move(entry));
  PyObject* r = run_artifact(*art, fv);
  finish_frame(ts, frame);
  return r;
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
  guards::clear_all_code_caches();
  compile_events().clear();
  break_events().clear();
  g_graph_counter = 0;
}

}  // namespace mini::capture
