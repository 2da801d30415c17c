// compile_unit.cpp — one resume unit traced and compiled (Dynamo's compile_inner and
// OutputGraph.compile_and_call_fx_graph), for lookup_or_compile (convert_frame.cpp): the
// trace, the logs and debug files of its graph and guards, the report of its graph break,
// and the compile of its graph by mini's compilers or the user's Python backend.
#include <set>

#include "capture/ddp_optimizer.h"
#include "capture/unit.h"
#include "guards/guards.h"
#include "tensor/autograd.h"
#include "tensor/errors.h"

#if PY_VERSION_HEX >= 0x030D0000  // exported by CPython, declared in an internal header on 3.13
extern "C" PyAPI_FUNC(void) _PyTraceback_Add(const char*, const char*, int);
#endif

namespace mini::capture {

void add_user_frame(PyCodeObject* code, int line, const std::string& location) {
  std::string file = PyUnicode_AsUTF8(code->co_filename), fn = PyUnicode_AsUTF8(code->co_name);
  size_t in = location.rfind(" in "), colon = location.rfind(':', in);
  if (in != std::string::npos && colon != std::string::npos) {  // "file:line in fn", maybe inlined
    file = location.substr(0, colon);
    line = std::atoi(location.c_str() + colon + 1);
    fn = location.substr(in + 4);
  }
  if (line > 0) _PyTraceback_Add(fn.c_str(), file.c_str(), line);
}

namespace {

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

// Traces the unit into *trace; what capture cannot trace at all leaves the whole unit to
// CPython (Exit::Native). False with a Python error when the user's code raised.
bool trace_unit(PyCodeObject* code, guards::UnitCache& unit, int offset, const guards::FrameValues& fv,
                const CompileRequest* req, Trace* trace) {
  DynamicPolicy policy;
  policy.all_dims = req->dynamic == 1;
  policy.dims = &unit.dynamic_dims;
  policy.scalars = &unit.dynamic_scalars;
  TraceOptions options;
  // torch 2.11 captures Tensor.item() under fullgraph=True, where a break is no way out
  options.capture_scalar_outputs = compile_config().capture_scalar_outputs || req->fullgraph;
  StageTimer capture_time(Stage::Capture);
  try {
    *trace = trace_frame(code, fv, offset, policy, options);
  } catch (const Unsupported& u) {
    trace->exit = Trace::Exit::Native;
    trace->break_reason = u.reason;
    trace->graph->nodes.clear();
    trace->exit_instruction.offset = offset;  // the whole unit runs in CPython
  } catch (const std::exception& e) {
    set_python_error(e);
    return false;
  }
  return true;
}

// Where the unit's break happened: its location, or the function's.
std::string break_where(PyCodeObject* code, const Trace& trace) {
  return trace.break_location.empty() ? function_label(code) : trace.break_location;
}

// Under fullgraph=True a break is an error: mini's Unsupported, with the user's line.
void raise_fullgraph_break(const std::string& why, const Trace& trace, const std::string& where) {
  PyErr_SetString(g_unsupported_error, (why + "\n  from user code: " +
                                        (trace.break_code.empty() ? where : trace.break_code)).c_str());
}

// A unit compiled to nothing: CPython runs it. As Dynamo: no graph where every iteration would
// break again, nor where an exception has to reach the user's handler ("Skipping frame because
// there is a graph break in a for/while loop"; should_compile_partial_graph inside a try).
std::shared_ptr<Artifact> skipped_unit(PyCodeObject* code, const Trace& trace, const CompileRequest* req) {
  std::string where = break_where(code, trace);
  std::string why = trace.break_reason + (trace.skip_unit ? "" : " (a break " + trace.skip_where +
                                                                     ": the whole frame runs as plain Python)");
  if (req->fullgraph) {
    raise_fullgraph_break(why, trace, where);
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

// What running the unit needs of its trace: the graph, its inputs, how the unit exits.
std::shared_ptr<Artifact> artifact_of(Trace& trace) {
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
  return art;
}

// The graph and guards, to the logs that ask for them and to MINI_COMPILE_DEBUG's folder.
void log_graph_and_guards(const Trace& trace, const Artifact& art, const std::string& title, bool has_graph) {
  if (has_graph && log_channels().graph_code) log_write("TRACED GRAPH\n" + art.graph->print(title));
  if (log_channels().guards) log_write(trace.guards->print());
  if (has_graph && compile_debug()) {
    debug_write(title, "graph_code.txt", art.graph->print(title));
    debug_write(title, "guards.txt", trace.guards->print());
  }
}

// A unit that stops at a graph break: recorded, logged and written as a debug file; under
// fullgraph=True an error instead (the user's own error, as eager raises it, where the trace
// found one). False with that Python error set.
bool report_break(PyCodeObject* code, const Trace& trace, const CompileRequest* req, bool has_graph,
                  const std::string& title) {
  std::string where = break_where(code, trace);
  if (req->fullgraph && trace.user_error) {
    set_python_error(*trace.user_error);
    add_user_frame(code, -1, trace.break_location);
    return false;
  }
  if (req->fullgraph) {
    raise_fullgraph_break(trace.break_reason, trace, where);
    return false;
  }
  record_break(BreakEvent{trace.break_reason, where, trace.break_code});
  debug_write("graph_breaks", "break_" + std::to_string(next_break_file()) + ".txt",
              "Graph break in user code at " + where + "\nGraph Break Reason: " + trace.break_reason +
                  (trace.break_code.empty() ? "" : "\n  " + trace.break_code) +
                  (has_graph ? "\nThe graph before it: " + title : "") + "\n");
  if (log_channels().graph_breaks)
    log_write("Graph break in user code at " + where + "\nGraph Break Reason: " + trace.break_reason +
              (trace.break_code.empty() ? "" : "\nUser code traceback:\n  " + trace.break_code));
  return true;
}

// What a graph needs when it runs: autograd (an input requires grad), and whether only eager
// kernels can run it (a size known only at run time; autograd only eager kernels record).
struct GraphNeeds {
  bool autograd = false, unbacked = false, eager_autograd = false;
};

GraphNeeds graph_needs(const graph::Graph& g) {
  GraphNeeds needs;
  for (int i : g.inputs) needs.autograd |= g.nodes[i].meta.requires_grad;
  for (const auto& n : g.nodes) {
    for (int64_t s : n.meta.sizes) needs.unbacked |= s == graph::kUnbacked;
    // autograd only eager kernels record as the code would: a new leaf that requires grad
    // (mini.zeros(..., requires_grad=True)), an enable_grad() block in code entered with grad
    // off (training graphs assume grad on)
    bool leaf = n.kind == graph::NodeKind::Op && op_class(n.op) == OpClass::Factory && n.meta.requires_grad;
    needs.eager_autograd |= leaf;
    needs.eager_autograd |= n.grad_mode == graph::GradMode::On && !grad_enabled() && needs.autograd;
  }
  return needs;
}

// Says why a graph the built-in compilers would take runs with eager kernels.
void log_eager_kernels(const CompileRequest* req, const GraphNeeds& needs, const std::string& title) {
  const bool inductor = req->builtin_name == "inductor", trains = inductor || req->builtin_name == "aot_eager";
  if (inductor && needs.unbacked && log_channels().fusion)
    log_write("inductor: " + title + " has a size known only at run time (nonzero, or a slice of a "
              "dynamic dim); it runs with eager kernels");
  bool aot_logs = log_channels().fusion || log_channels().aot_graphs;
  if (trains && needs.eager_autograd && aot_logs)
    log_write("aot: " + title + " makes a tensor that requires grad (requires_grad=True, enable_grad()); "
              "it runs with eager kernels, which record autograd");
}

// A student tree whose stage is not written yet: the graph runs with eager kernels, so that
// every other stage and lab keeps running; said once per assignment. False if the warning
// raised.
bool warn_assignment_stub(const std::exception& e, Artifact& art) {
  static std::set<std::string> told;
  art.compiled = nullptr;
  std::string which = assignment_of(e);
  return !(told.insert(which).second &&
           PyErr_WarnEx(PyExc_UserWarning, (which + " is not written yet (" + e.what() + "); graphs that need it "
                                            "run with eager kernels until it is").c_str(), 1) < 0);
}

// A compiler that raised: Ctrl-C stands, neither suppressed nor explained; an assignment stub
// runs the graph with eager kernels; any other error is the user's, unless suppress_errors
// (torch's) runs the graph with eager kernels (the interpreter, which records autograd) and
// the user hears why once, here. False with a Python error set.
bool compile_failed(PyCodeObject* code, const std::exception& e, Artifact& art, const std::string& title) {
  std::string graph = title + " of " + function_label(code);
  auto* me = dynamic_cast<const Error*>(&e);
  if (me && me->kind == Error::Kind::Interrupted) {
    set_python_error(e);
    return false;
  }
  if (is_assignment_stub(e)) return warn_assignment_stub(e, art);
  if (!compile_config().suppress_errors) {
    set_python_error(Error(me ? me->kind : Error::Kind::Runtime,
                           e.what() + ("\nThe graph: " + graph + ", compiled by the inductor backend.")));
    return false;
  }
  art.compiled = nullptr;
  std::string why = "inductor failed to compile " + graph + ": " + e.what();
  return PyErr_WarnEx(PyExc_UserWarning, (why + "\nIt runs eagerly (mini.config.suppress_errors is True).").c_str(), 1) >= 0;
}

// What a built-in backend is told about graph `title` of request `req`.
backends::CompileOptions backend_options(const CompileRequest& req, const std::string& title, bool training) {
  backends::CompileOptions options;
  options.title = options.debug_dir = title;
  options.mode = req.mode;
  options.training = training;
  options.cache_dir = compile_config().cache_dir;
  options.partitioner = compile_config().partitioner;
  return options;
}

// The graph compiled by the built-in backend: whole, or, inside a DDP forward, in the pieces of
// DDP's buckets (ddp_optimizer.h), each trained where one of its inputs needs autograd.
backends::Runner compile_builtin(PyCodeObject* code, const CompileRequest* req, const Artifact& art,
                                 const Trace& trace, const std::string& title, bool autograd) {
  auto split = plan_ddp_split(*art.graph, trace.example_inputs, title, function_label(code));
  if (!split) return req->builtin->compile(*art.graph, backend_options(*req, title, autograd));
  return compile_pieces(split, title, [&](const graph::GraphPiece& piece, const std::string& name) {
    bool trains = autograd && graph_needs(*piece.graph).autograd;
    return req->builtin->compile(*piece.graph, backend_options(*req, name, trains));
  });
}

// The graph compiled by the request's built-in backend (backends/backend.h), told whether it is
// trained (its inputs need autograd and grad is on); not where only eager kernels can run it
// (art.compiled stays empty: the interpreter runs it). False with a Python error set.
bool compile_graph(PyCodeObject* code, const CompileRequest* req, Artifact& art, const Trace& trace,
                   const std::string& title, bool has_graph) {
  GraphNeeds needs = graph_needs(*art.graph);
  if (has_graph) log_eager_kernels(req, needs, title);
  bool autograd = needs.autograd && grad_enabled();
  try {
    bool eager_kernels = needs.unbacked || needs.eager_autograd;
    if (has_graph && req->builtin && !eager_kernels)
      art.compiled = compile_builtin(code, req, art, trace, title, autograd);
  } catch (const std::exception& e) {
    return compile_failed(code, e, art, title);
  }
  return true;
}

// Graph input i's example for a Python backend: the tensor seen while tracing (a dynamic Python
// number as the 0-d tensor the graph takes). New reference.
PyObject* example_input(const Trace& trace, size_t i) {
  PyObject* e = trace.example_inputs[i];
  if (i < trace.scalar_inputs.size() && trace.scalar_inputs[i])
    return python_bridge().wrap_tensor(wrapped_number_tensor(e));  // traced: it fits int64
  Py_INCREF(e);
  return e;
}

// The user's Python backend called on graph `g` as a graph module and its example inputs
// (stolen); the callable it returns (New), checked to be one. Null with a Python error set.
PyObject* backend_callable(const CompileRequest* req, std::shared_ptr<graph::Graph> g, PyObject* examples,
                           const std::string& title, const std::string& label) {
  PyObject* gm = python_bridge().make_graph_module(std::move(g), title);
  PyObject* fn = gm ? PyObject_CallFunctionObjArgs(req->backend, gm, examples, nullptr) : nullptr;
  Py_XDECREF(gm);
  Py_DECREF(examples);
  if (fn && !PyCallable_Check(fn)) {  // found here, not as "'int' object is not callable" at a call
    PyErr_Format(PyExc_TypeError, "mini: %s returned %s for graph %s, not a callable: a backend must "
                 "return the function that runs the graph, e.g. `return gm.forward`",
                 label.c_str(), fn == Py_None ? "None" : Py_TYPE(fn)->tp_name, title.c_str());
    Py_CLEAR(fn);
  }
  return fn;
}

// A Python backend's callable for a piece (stolen), as a Runner: tensors in, the piece's output
// tensors out (a list or tuple of them, as GraphModule.forward returns). A Python error stays set
// and travels as PythonErrorSet.
backends::Runner python_piece_runner(PyObject* fn, const std::string& label, const std::string& title) {
  // released under the GIL, as the artifact holding the runner is
  std::shared_ptr<PyObject> held(fn, [](PyObject* o) { Py_DECREF(o); });
  return [held, label, title](const std::vector<Tensor>& inputs) {
    PyObject* args = PyTuple_New((Py_ssize_t)inputs.size());
    for (size_t i = 0; i < inputs.size(); i++) PyTuple_SET_ITEM(args, i, python_bridge().wrap_tensor(inputs[i]));
    PyObject* r = PyObject_Call(held.get(), args, nullptr);
    Py_DECREF(args);
    if (!r) throw PythonErrorSet();
    PyObject* seq = PyList_Check(r) || PyTuple_Check(r) ? PySequence_Fast(r, "") : nullptr;
    Py_DECREF(r);
    std::vector<Tensor> outs;
    for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++) {
      TensorImpl* t = guards::unwrap_tensor(PySequence_Fast_GET_ITEM(seq, i));
      if (!t) break;
      outs.push_back(t->shared_from_this());
    }
    bool all_tensors = seq && (Py_ssize_t)outs.size() == PySequence_Fast_GET_SIZE(seq);
    Py_XDECREF(seq);
    if (!all_tensors)
      fail_type("the compiled function from ", label, " for graph ", title, " must return a list or tuple of "
                "tensors, one per graph output, as the GraphModule's forward does");
    return outs;
  };
}

// A piece's example inputs for the Python backend (New): the tensors seen while tracing for the
// graph's own inputs; zeros of the value's meta for what an earlier piece hands on (torch
// passes fake tensors there).
PyObject* piece_examples(const Trace& trace, const graph::GraphPiece& piece) {
  PyObject* examples = PyList_New((Py_ssize_t)piece.inputs.size());
  for (size_t i = 0; i < piece.inputs.size(); i++) {
    graph::PieceValue v = piece.inputs[i];
    const graph::Graph& g = *piece.graph;
    const graph::TensorMeta& meta = g.nodes[g.inputs[i]].meta;
    Tensor zeros = v.piece < 0 ? nullptr : mini::zeros(meta.sizes, meta.dtype, g.device);
    if (zeros) zeros->requires_grad = meta.requires_grad;
    PyList_SET_ITEM(examples, i, zeros ? python_bridge().wrap_tensor(zeros) : example_input(trace, v.index));
  }
  return examples;
}

// The Python backend called on each piece of DDP's split (as DDPOptimizer calls the user's
// compiler on each submodule); the pieces' callables run in order. False with a Python error.
bool call_backend_on_pieces(const CompileRequest* req, const Trace& trace, Artifact& art, const std::string& title,
                            std::shared_ptr<const DdpSplit> split) {
  bool failed = false;
  auto compile = [&](const graph::GraphPiece& piece, const std::string& name) -> backends::Runner {
    PyObject* fn = failed ? nullptr : backend_callable(req, piece.graph, piece_examples(trace, piece), name,
                                                       art.backend_label);
    failed = failed || !fn;
    return fn ? python_piece_runner(fn, art.backend_label, name) : backends::Runner{};
  };
  art.compiled = compile_pieces(split, title, compile);
  if (failed) art.compiled = nullptr;
  return !failed;
}

// The user's Python backend called on the graph module and example inputs; what it returns is
// what runs the graph. Inside a DDP forward, called on each piece of DDP's buckets instead
// (call_backend_on_pieces). False with a Python error set.
bool call_backend(PyCodeObject* code, const CompileRequest* req, const Trace& trace, Artifact& art,
                  const std::string& title) {
  art.backend_label = backend_label(req->backend);
  std::shared_ptr<const DdpSplit> split;
  try {
    split = plan_ddp_split(*art.graph, trace.example_inputs, title, function_label(code));
  } catch (const std::exception& e) {
    set_python_error(e);
    return false;
  }
  if (split) return call_backend_on_pieces(req, trace, art, title, split);
  PyObject* examples = PyList_New((Py_ssize_t)trace.example_inputs.size());
  for (size_t i = 0; i < trace.example_inputs.size(); i++) PyList_SET_ITEM(examples, i, example_input(trace, i));
  art.compiled_fn = backend_callable(req, art.graph, examples, title, art.backend_label);
  return art.compiled_fn != nullptr;
}

}  // namespace

std::shared_ptr<Artifact> compile_unit(PyCodeObject* code, guards::UnitCache& unit, int offset,
                                       const guards::FrameValues& fv, CompileRequest* req,
                                       std::unique_ptr<guards::GuardSet>* guards_out) {
  Trace trace;
  if (!trace_unit(code, unit, offset, fv, req, &trace)) return nullptr;
  if (!trace.stub_fallback.empty() &&
      !guards::warn_stub_fallback(Error(Error::Kind::Runtime, trace.stub_fallback), kResumeStubFallback))
    return nullptr;  // the warning raised: its error is set
  if (trace.exit == Trace::Exit::Skip) return skipped_unit(code, trace, req);  // CPython runs the unit
  std::shared_ptr<Artifact> art = artifact_of(trace);
  bool has_graph = art->graph->op_count() > 0;
  std::string title = "__compiled_fn_" + std::to_string(has_graph ? ++g_graph_counter : g_graph_counter);
  log_graph_and_guards(trace, *art, title, has_graph);
  if (trace.exit != Trace::Exit::Return && !report_break(code, trace, req, has_graph, title)) return nullptr;
  // An empty graph is neither compiled nor counted (Dynamo skips graphs without calls).
  if (!compile_graph(code, req, *art, trace, title, has_graph)) return nullptr;
  if (has_graph && req->backend && !call_backend(code, req, trace, *art, title)) return nullptr;
  if (has_graph)
    record_compile(CompileEvent{art->graph, trace.guards->print(), function_label(code)});
  *guards_out = std::move(trace.guards);
  return art;
}

void reset_graph_counter() { g_graph_counter = 0; }

}  // namespace mini::capture
