// convert_frame.cpp — Dynamo's convert_frame and eval_frame callback: the frame hook
// (on_frame: the loop over a frame's resume units) and the per-unit cache lookup and compile
// (lookup_or_compile, compile_unit). What acts on one unit lives in the files unit.h names:
// running it (run_unit.cpp), rebuilding objects (rebuild.cpp), the resume point of a graph
// break (resume.cpp), automatic dynamic (automatic_dynamic.cpp); logs in compile_log.cpp.
#include "capture/convert_frame.h"

#include <optional>
#include <set>

#include "capture/frame_hook.h"
#include "capture/unit.h"
#include "tensor/autograd.h"
#include "tensor/errors.h"

#if PY_VERSION_HEX >= 0x030D0000  // exported by CPython, declared in an internal header on 3.13
extern "C" PyAPI_FUNC(void) _PyTraceback_Add(const char*, const char*, int);
#endif

namespace mini::capture {

PyObject* g_unsupported_error = nullptr;
std::string g_skip_prefix;

CompileConfig& compile_config() {
  static CompileConfig c;
  return c;
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

// What a built-in backend is told about graph `title` of request `req`.
static backends::CompileOptions backend_options(const CompileRequest& req, const std::string& title, bool training) {
  backends::CompileOptions options;
  options.title = options.debug_dir = title;
  options.mode = req.mode;
  options.training = training;
  options.cache_dir = compile_config().cache_dir;
  options.partitioner = compile_config().partitioner;
  return options;
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
    record_break(BreakEvent{why, where, trace.break_code});  // explain() lists why
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
    record_break(BreakEvent{trace.break_reason, where, trace.break_code});
    debug_write("graph_breaks", "break_" + std::to_string(next_break_file()) + ".txt",
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
  const bool inductor = req->builtin_name == "inductor", trains = inductor || req->builtin_name == "aot_eager";
  if (has_graph && inductor && unbacked && log_channels().fusion)
    log_write("inductor: " + title + " has a size known only at run time (nonzero, or a slice of a "
              "dynamic dim); it runs with eager kernels");
  bool aot_logs = log_channels().fusion || log_channels().aot_graphs;
  if (has_graph && trains && eager_autograd && aot_logs)
    log_write("aot: " + title + " makes a tensor that requires grad (requires_grad=True, enable_grad()); "
              "it runs with eager kernels, which record autograd");
  needs_autograd &= grad_enabled();
  try {
    bool eager_kernels = unbacked || eager_autograd;
    if (has_graph && req->builtin && !eager_kernels)
      art->compiled = req->builtin->compile(*art->graph, backend_options(*req, title, needs_autograd));
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
    record_compile(CompileEvent{art->graph, trace.guards->print(), function_label(code)});
  *guards_out = std::move(trace.guards);
  return art;
}


// ---- the guard cache and automatic dynamic, as lookup_or_compile calls them ------------------
// In a student tree (scripts/make_assignment.py) a stage not written yet raises "not
// implemented: A<n> ..."; mini then runs something slower but right in its place and says so
// once, as a UserWarning naming the assignment (guards::warn_stub_fallback). Any other error
// propagates; so does the stub's, in the stage's own tests (is_assignment_stub).


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