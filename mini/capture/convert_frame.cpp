// convert_frame.cpp — Dynamo's convert_frame and eval_frame callback: the frame hook
// (on_frame: the loop over a frame's resume units) and the per-unit cache lookup and compile
// (lookup_or_compile). What acts on one unit lives in the files unit.h names: tracing and
// compiling it (compile_unit.cpp), running it (run_unit.cpp), rebuilding objects
// (rebuild.cpp), the resume point of a graph break (resume.cpp), automatic dynamic
// (automatic_dynamic.cpp); logs in compile_log.cpp.
#include "capture/convert_frame.h"

#include <optional>

#include "capture/frame_hook.h"
#include "capture/unit.h"
#include "tensor/autograd.h"
#include "tensor/errors.h"

namespace mini::capture {

PyObject* g_unsupported_error = nullptr;
std::string g_skip_prefix;

CompileConfig& compile_config() {
  static CompileConfig c;
  return c;
}

void set_python_error(const std::exception& e) {
  if (dynamic_cast<const PythonErrorSet*>(&e) && PyErr_Occurred()) return;
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

std::string function_label(PyCodeObject* code) {
  return std::string("'") + PyUnicode_AsUTF8(code->co_name) + "' (" + PyUnicode_AsUTF8(code->co_filename) +
         ":" + std::to_string(code->co_firstlineno) + ")";
}

void release_all(std::vector<PyObject*>& v) {
  for (PyObject* o : v) Py_XDECREF(o);
  v.clear();
}

// Sets `e` as the Python error, unless one is set already (a warning turned into an error).
UnitPlan python_error(const std::exception& e) {
  if (!PyErr_Occurred()) set_python_error(e);
  return UnitPlan::Error;
}

namespace {

thread_local std::vector<CompileRequest*> t_requests;

// The cache lookup and compile of Dynamo's convert_frame, for the unit at `offset`: the
// first entry whose guards hold; on a miss, the recompile reason (the first entry's first
// failing guard), the cache size limit, automatic dynamic, then a compile whose entry the
// policy places (mini.config.cache_policy; guards/cache.h). *art is what Run runs: held by the caller too, as code the unit runs
// (the breaking call, a backend, a setter) may call mini.reset(), which empties the cache.
UnitPlan lookup_or_compile(PyCodeObject* code, guards::UnitCache& unit, int offset,
                           const guards::FrameValues& fv, CompileRequest* req,
                           std::shared_ptr<Artifact>* art) {
  HookDisabled no_hook;  // guards, tracing and the graph are mini's own work
  guards::UnitsInUse in_use;  // `unit` outlives a reset until this returns
  guards::CacheEntry* hit = nullptr;
  long checked = unit.entries_checked;
  try {  // a guard check that throws is a Python error, not a crash
    hit = unit.lookup(fv, req->backend_key, compile_config().cache_policy);
  } catch (const std::exception& e) {
    return python_error(e);
  }
  compile_stats().entries_checked += unit.entries_checked - checked;
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
    if (!unit.entries.empty()) reason = unit.recompile_reason(fv, req->backend_key);
    int evicted = unit.evictions;
    may_compile = unit.may_compile(compile_config().cache_size_limit, compile_config().cache_policy);
    compile_stats().evictions += unit.evictions - evicted;
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
    unit.add(std::move(entry), compile_config().cache_policy);
  } catch (const std::exception& e) {
    return python_error(e);
  }
  *art = std::move(compiled);
  return UnitPlan::Run;
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

// The cache of a code the hook has not captured yet, made now; null (the frame counted as
// skipped) where the frame has no tensor among its arguments or its code cannot hold a cache.
guards::CodeCache* first_code_cache(const FrameView& view, const std::vector<PyObject*>& entry_locals) {
  guards::CodeCache* cache = nullptr;
  const char* why = !frame_has_tensors(view, entry_locals) ? "no tensor among its arguments"
                    : !(cache = guards::code_cache(view.code, true)) ? "its code cannot hold a cache"
                                                                      : nullptr;
  if (why) compile_stats().skipped(why);
  return cache;
}

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
  if (!cache && !(cache = first_code_cache(view, entry_locals))) return run_default(ts, frame, throwflag);
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
  reset_graph_counter();
}

}  // namespace mini::capture