// bind_compile.cpp — the capture stage as seen from Python: GraphModule (what a backend
// callable receives), the compile request a mini.compile() wrapper enters, configuration,
// logs, explain's records and reset. mini/_compile.py builds the torch-shaped API on it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <structmember.h>

#include "capture/convert_frame.h"
#include "capture/ddp_optimizer.h"
#include "guards/guards.h"

namespace py = pybind11;
using mini::Tensor;
using mini::TensorImpl;
namespace cap = mini::capture;

namespace {

// A graph handed to a backend callable: prints itself, lists its nodes, and runs.
struct GraphModule {
  std::shared_ptr<mini::graph::Graph> graph;
  std::string name;
};

py::tuple run(const GraphModule& gm, py::args args) {
  std::vector<Tensor> inputs;
  for (auto a : args) inputs.push_back(a.cast<Tensor>());
  std::vector<Tensor> out = mini::graph::run_graph(*gm.graph, inputs);
  py::tuple t(out.size());
  for (size_t i = 0; i < out.size(); i++) t[i] = py::cast(out[i]);
  return t;
}

struct NodeInfo {
  std::string op, name, target, text;
};

std::vector<NodeInfo> nodes(const GraphModule& gm) {
  std::vector<NodeInfo> out;
  const auto& g = *gm.graph;
  for (int i : g.inputs)  // placeholders first, as torch.fx lists them
    out.push_back({"placeholder", g.nodes[i].name, g.nodes[i].source, g.nodes[i].name});
  for (size_t i = 0; i < g.nodes.size(); i++) {
    const auto& n = g.nodes[i];
    if (n.kind == mini::graph::NodeKind::Op)
      out.push_back({"call_function", n.name, std::string("mini.") + mini::op_name(n.op), g.node_str((int)i)});
  }
  out.push_back({"output", "output", "output", ""});
  return out;
}

// A compile request with the Python backend it refers to kept alive.
struct Request {
  cap::CompileRequest req;
  py::object backend;
  py::object key;  // the interned "backend:mode" that keys cache entries in a mode other than default
};

PyObject* wrap_tensor(const Tensor& t) { return py::cast(t).release().ptr(); }

// The callable mini.compile returns for a function: entering the compiled region, calling
// the function and leaving it, with nothing in Python in between (a Python wrapper would
// add its own frame to every call: about half of the cost of a cache hit).
struct CompiledCall {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fn;       // the user's function (owned)
  PyObject* request;  // the Request object (owned)
  PyObject* dict;     // __dict__, for functools.update_wrapper's attributes
};

PyObject* compiled_call_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* c = reinterpret_cast<CompiledCall*>(self);
  auto* r = py::handle(c->request).cast<Request*>();
  cap::enter_compiled_region(&r->req);
  PyObject* out = PyObject_Vectorcall(c->fn, args, nargsf, kwnames);
  cap::exit_compiled_region();
  return out;
}

void compiled_call_dealloc(PyObject* self) {
  auto* c = reinterpret_cast<CompiledCall*>(self);
  PyObject_GC_UnTrack(self);
  Py_CLEAR(c->fn);
  Py_CLEAR(c->request);
  Py_CLEAR(c->dict);
  Py_TYPE(self)->tp_free(self);
}

int compiled_call_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* c = reinterpret_cast<CompiledCall*>(self);
  Py_VISIT(c->fn);
  Py_VISIT(c->request);
  Py_VISIT(c->dict);
  return 0;
}

PyObject* compiled_call_get(PyObject* self, PyObject* obj, PyObject*) {  // as a method
  if (!obj || obj == Py_None) { Py_INCREF(self); return self; }
  return PyMethod_New(self, obj);
}

PyObject* compiled_call_repr(PyObject* self) {
  return PyUnicode_FromFormat("<mini compiled %R>", reinterpret_cast<CompiledCall*>(self)->fn);
}

PyMemberDef compiled_call_members[] = {
    {"_fn", T_OBJECT, offsetof(CompiledCall, fn), READONLY, "the function being compiled"},
    {"_request", T_OBJECT, offsetof(CompiledCall, request), READONLY, "backend, fullgraph, dynamic"},
    {"__dictoffset__", T_PYSSIZET, offsetof(CompiledCall, dict), READONLY, nullptr},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CompiledCall, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot compiled_call_slots[] = {
    {Py_tp_dealloc, (void*)compiled_call_dealloc},
    {Py_tp_traverse, (void*)compiled_call_traverse},
    {Py_tp_call, (void*)PyVectorcall_Call},
    {Py_tp_descr_get, (void*)compiled_call_get},
    {Py_tp_repr, (void*)compiled_call_repr},
    {Py_tp_members, compiled_call_members},
    {0, nullptr}};

PyType_Spec compiled_call_spec = {"mini.CompiledFunction", sizeof(CompiledCall), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
                                  compiled_call_slots};
PyObject* g_compiled_call_type = nullptr;

PyObject* make_graph_module(std::shared_ptr<mini::graph::Graph> g, const std::string& name) {
  try {
    return py::cast(GraphModule{std::move(g), name}).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  }
}

}  // namespace

void bind_compile(py::module_& m) {
  // a MINI_COMPILE_DEBUG value that is neither on nor off: said once, at import
  if (!cap::compile_debug_warning().empty() &&
      PyErr_WarnEx(PyExc_UserWarning, cap::compile_debug_warning().c_str(), 1) < 0)
    throw py::error_already_set();
  py::class_<NodeInfo>(m, "Node")
      .def_readonly("op", &NodeInfo::op)
      .def_readonly("name", &NodeInfo::name)
      .def_readonly("target", &NodeInfo::target)
      .def("__repr__", [](const NodeInfo& n) { return n.name; })
      .def("format_node", [](const NodeInfo& n) { return n.text; });

  py::class_<GraphModule>(m, "GraphModule")
      .def("__call__", &run)
      .def("forward", &run)
      .def_property_readonly("nodes", &nodes)
      .def_property_readonly("name", [](const GraphModule& gm) { return gm.name; })
      .def_property_readonly("graph", [](const GraphModule& gm) { return gm; })
      .def("op_count", [](const GraphModule& gm) { return gm.graph->op_count(); })
      .def("_graph_ptr", [](const GraphModule& gm) { return gm.graph; })
      .def("print_readable", [](const GraphModule& gm, bool print_output) {
        std::string s = gm.graph->print(gm.name);
        if (print_output) py::print(s);
        return s;
      }, py::arg("print_output") = true)
      .def_property_readonly("code", [](const GraphModule& gm) { return gm.graph->print(gm.name); })
      .def("__str__", [](const GraphModule& gm) { return gm.graph->print(gm.name); })
      .def("__repr__", [](const GraphModule& gm) { return "<GraphModule " + gm.name + ">"; });

  py::class_<Request>(m, "CompileRequest")
      .def(py::init([](py::object backend, bool fullgraph, int dynamic, const std::string& mode) {
             // backend: a callable, or the name of a built-in backend ("eager", "inductor")
             auto r = new Request();
             r->backend = backend;
             bool builtin = py::isinstance<py::str>(backend);
             r->req.backend = builtin ? nullptr : backend.ptr();
             if (builtin) {
               r->req.builtin_name = backend.cast<std::string>();
               r->req.builtin = mini::backends::find_backend(r->req.builtin_name);
               if (!r->req.builtin)
                 throw py::value_error("mini.compile: no built-in backend named '" + r->req.builtin_name +
                                       "'; the built-in ones are 'eager', 'aot_eager' and 'inductor', or pass a callable");
             }
             r->req.backend_key = backend.ptr();  // the callable, or the interned name
             r->req.fullgraph = fullgraph;
             r->req.dynamic = dynamic;
             r->req.mode = mode;
             if (builtin && mode != "default") {  // another mode compiles other code: other cache entries
               r->key = py::reinterpret_steal<py::object>(
                   PyUnicode_InternFromString((backend.cast<std::string>() + ":" + mode).c_str()));
               r->req.backend_key = r->key.ptr();
             }
             return r;
           }), py::arg("backend"), py::arg("fullgraph"), py::arg("dynamic"), py::arg("mode") = "default")
      .def("enter", [](Request& r) { cap::enter_compiled_region(&r.req); })
      .def("exit", [](Request&) { cap::exit_compiled_region(); });

  g_compiled_call_type = PyType_FromSpec(&compiled_call_spec);
  m.attr("CompiledFunction") = py::handle(g_compiled_call_type);
  m.def("_compiled_call", [](py::object fn, py::object request) {
    auto* c = PyObject_GC_New(CompiledCall, (PyTypeObject*)g_compiled_call_type);
    c->vectorcall = compiled_call_vectorcall;
    c->fn = fn.release().ptr();
    c->request = request.release().ptr();
    c->dict = PyDict_New();
    PyObject_GC_Track((PyObject*)c);
    return py::reinterpret_steal<py::object>((PyObject*)c);
  }, "The compiled form of `fn` under `request` (what mini.compile returns for a function).");

  m.def("_register_bridge", [](py::object module_class, py::object tensor_type, py::list dtypes,
                               py::dict graph_functions, std::string skip_prefix) {
    auto& b = cap::python_bridge();
    b.module_class = module_class.release().ptr();
    b.tensor_type = tensor_type.release().ptr();
    mini::guards::set_tensor_class(b.tensor_type);
    // mini's own Tensor methods, as Python finds them now: a program may replace or add some
    // later (mini.Tensor.relu = ...), which capture then calls instead of its op table
    b.tensor_methods = PyDict_New();
    PyObject* names = PyObject_Dir(b.tensor_type);
    for (Py_ssize_t i = 0; names && i < PyList_GET_SIZE(names); i++) {
      PyObject* name = PyList_GET_ITEM(names, i);
      PyObject* found = PyObject_GetAttr(b.tensor_type, name);
      if (found) PyDict_SetItem(b.tensor_methods, name, found);
      Py_XDECREF(found);
      PyErr_Clear();
    }
    Py_XDECREF(names);
    for (int i = 0; i < mini::kNumDTypes; i++) b.dtype_objects[i] = py::object(dtypes[i]).release().ptr();
    b.graph_functions = graph_functions.release().ptr();
    b.wrap_tensor = &wrap_tensor;
    b.make_graph_module = &make_graph_module;
    cap::g_skip_prefix = skip_prefix;
  });
  m.def("_register_capture_types", [](py::object size_type, py::object grad_mode_type,
                                      py::object grad_mode_wrapper_code) {
    auto& b = cap::python_bridge();
    b.size_type = size_type.release().ptr();
    b.grad_mode_type = grad_mode_type.release().ptr();
    b.grad_mode_wrapper_code = grad_mode_wrapper_code.release().ptr();
  });
  py::class_<mini::graph::Graph, std::shared_ptr<mini::graph::Graph>>(m, "Graph");
  m.def("_set_config", [](int cache_size_limit, std::string cache_policy, bool automatic_dynamic_shapes, bool capture_scalar_outputs,
                          std::string cache_dir, bool suppress_errors, std::string partitioner,
                          std::string fused_attention, bool optimize_ddp) {
    auto& c = cap::compile_config();
    c.optimize_ddp = optimize_ddp;
    c.fused_attention = fused_attention;
    c.partitioner = partitioner;
    c.suppress_errors = suppress_errors;
    c.cache_dir = cache_dir;
    c.cache_size_limit = cache_size_limit;
    c.cache_policy = cache_policy == "oldest" ? mini::guards::CachePolicy::Oldest
                   : cache_policy == "yours"  ? mini::guards::CachePolicy::Yours
                                              : mini::guards::CachePolicy::Recent;
    c.automatic_dynamic_shapes = automatic_dynamic_shapes;
    c.capture_scalar_outputs = capture_scalar_outputs;
  });
  m.def("_set_logs", [](const std::vector<std::string>& names) {
    auto& l = cap::log_channels();
    l = cap::LogChannels{};
    for (const auto& n : names) {
      if (n == "graph_breaks") l.graph_breaks = true;
      else if (n == "recompiles") l.recompiles = true;
      else if (n == "guards") l.guards = true;
      else if (n == "graph_code") l.graph_code = true;
      else if (n == "dynamic") l.dynamic = true;
      else if (n == "output_code") l.output_code = true;
      else if (n == "fusion") l.fusion = true;
      else if (n == "aot_graphs") l.aot_graphs = true;
      else if (n == "ddp") l.ddp = true;
      else throw py::value_error("unknown MINI_LOGS channel '" + n + "'");
    }
  });
  m.def("_reset", &cap::reset_all);
  // DistributedDataParallel's forward says it is running (and with which parameters and bucket
  // caps) while its inner module runs; None ends it. A graph captured meanwhile is split at the
  // buckets' boundaries (capture/ddp_optimizer.h).
  m.def("_set_active_ddp", [](py::object params, int64_t bucket_bytes, int64_t first_bucket_bytes) {
    cap::ActiveDdp& ddp = cap::active_ddp();
    ddp.params.clear();
    ddp.active = !params.is_none();
    if (!ddp.active) return;
    for (py::handle p : params) ddp.params.insert(p.cast<Tensor>().get());
    ddp.caps = {bucket_bytes, std::min(first_bucket_bytes, bucket_bytes)};
  }, py::arg("params"), py::arg("bucket_bytes") = 0, py::arg("first_bucket_bytes") = 0);
  m.def("_compile_stats", [] {
    const cap::CompileStats& s = cap::compile_stats();
    py::dict frames, units, stages;
    frames["seen"] = s.frames_seen;
    frames["captured"] = s.frames_captured;
    py::dict skipped;
    for (const auto& [reason, n] : s.frames_skipped) skipped[reason] = n;
    frames["skipped"] = skipped;
    units["cache_hits"] = s.cache_hits;
    units["compiles"] = s.compiles;
    units["recompiles"] = s.recompiles;
    units["entries_checked"] = s.entries_checked;
    units["evictions"] = s.evictions;
    units["run_natively"] = py::cast(s.units_run_natively);
    for (int i = 0; i < int(cap::Stage::kCount); i++) {
      py::dict t;
      t["seconds"] = s.stages[i].seconds;
      t["count"] = s.stages[i].count;
      stages[cap::stage_name(cap::Stage(i))] = t;
    }
    py::dict out;
    out["frames"] = frames;
    out["units"] = units;
    out["stages"] = stages;
    return out;
  });
  m.def("_reset_compile_stats", &cap::reset_compile_stats);
  // A code object's cache: per resume unit (by start offset), its entries in lookup order (the
  // policy's), each its compile id, its guards printed, its hits, its last use on the unit's
  // clock, and its address (the same while the entry stays in the list: never copied or moved).
  m.def("_cache_entries", [](py::object code) {
    if (!PyCode_Check(code.ptr())) throw py::type_error("_cache_entries takes a code object (fn.__code__)");
    py::list out;
    mini::guards::CodeCache* cache = mini::guards::code_cache((PyCodeObject*)code.ptr(), false);
    if (!cache) return out;
    for (auto& [offset, unit] : cache->units) {
      py::list entries;
      for (const auto& e : unit.entries)
        entries.append(py::make_tuple(e.compile_id, e.guards ? e.guards->print() : "", e.hits, e.last_used,
                                      reinterpret_cast<uintptr_t>(&e)));
      out.append(py::make_tuple(offset, unit.frame_id, entries));
    }
    return out;
  });
  m.def("_compile_events", [] {
    py::list out;
    for (auto& e : cap::compile_events())
      out.append(py::make_tuple(GraphModule{e.graph, "graph"}, e.guards, e.function));
    return out;
  });
  m.def("_break_events", [] {
    py::list out;
    for (auto& e : cap::break_events()) out.append(py::make_tuple(e.reason, e.location, e.code));
    return out;
  });
  m.def("_dropped_events", &cap::dropped_events);
  m.def("_clear_events", &cap::clear_events);

  cap::g_unsupported_error = PyErr_NewExceptionWithDoc(
      "mini.Unsupported", "capture met code it cannot trace (raised under fullgraph=True)",
      PyExc_RuntimeError, nullptr);
  m.attr("Unsupported") = py::handle(cap::g_unsupported_error);
}
