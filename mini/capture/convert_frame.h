// convert_frame.h — the driver: what happens to a frame that enters a compiled region
// (Dynamo's convert_frame + eval_frame callback).
//
// On each frame: skip it (mini's own code, generators, frames without tensors), or run it
// unit by unit (convert_frame.cpp: on_frame). For each unit, lookup_or_compile looks up its
// UnitCache; on a hit it runs the stored artifact; on a miss it traces the unit, hands the
// graph to the backend and stores a new CacheEntry at the front. run_unit runs the artifact
// and rebuilds the frame; at a graph break resume_after_break runs the breaking instruction
// and the next unit starts after it. Past the cache size limit, warn once and run the code
// eagerly from then on. What capture cannot trace runs eagerly with the reason logged (or
// raises, under fullgraph=True).
#pragma once
#include <Python.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "capture/compile_log.h"
#include "capture/compile_stats.h"
#include "capture/config.h"
#include "capture/tracer.h"
#include "guards/cache.h"

namespace mini::capture {

// One mini.compile(...) wrapper's settings, active while its function runs.
struct CompileRequest {
  PyObject* backend = nullptr;  // a Python callable, or nullptr for a built-in backend
  backends::Backend* builtin = nullptr;  // a built-in backend (backends/backend.h), or nullptr
  std::string builtin_name;     // its name: "eager", "aot_eager", "inductor"
  PyObject* backend_key = nullptr;  // identity of the backend for cache entries (not owned)
  bool fullgraph = false;
  int dynamic = -1;  // -1 None, 0 False, 1 True
  std::string mode = "default";  // "reduce-overhead": CUDA graphs; "max-autotune": layouts timed
};

void enter_compiled_region(CompileRequest* request);
void exit_compiled_region();

// mini.reset()
void reset_all();


// The compiled form of one resume unit.
struct Artifact : guards::CompiledArtifact {
  std::shared_ptr<graph::Graph> graph;
  std::vector<SourceRef> input_sources;
  std::vector<bool> scalar_inputs;  // input i is a Python number passed as a 0-d tensor
  std::vector<std::pair<int, int>> input_mutations;  // Trace::input_mutations
  PyObject* compiled_fn = nullptr;  // the backend's callable (owned), or null: run_graph
  std::string backend_label;        // "backend 'name'", for errors about what compiled_fn returns
  backends::Runner compiled;        // what the built-in backend made, or empty: the interpreter
  Trace::Exit exit = Trace::Exit::Return;
  OutputSpec output;                // Return
  Instruction exit_instruction{};   // Break / Native
  std::vector<OutputSpec> exit_stack, exit_locals;
  PyObject* exit_kw_names = nullptr;  // Borrowed from the code's constants
  int native_resume_offset = -1;      // Trace::native_resume_offset
  std::vector<SideEffect> side_effects;  // replayed after the graph runs
  bool grad_enabled_after = true;     // see Trace
  int grad_enabled_on_raise = -1;
  std::string break_reason;           // Skip: why CPython runs the unit
  mutable bool ran = false;           // called once already (compile_stats' first run)
  ~Artifact() override { Py_XDECREF(compiled_fn); }
};

// Sets the Python error for a mini::Error (the exception torch would raise); for PythonErrorSet,
// leaves the Python error that is set standing.
void set_python_error(const std::exception& e);

// Thrown through C++ frames (a Runner) by code whose Python call raised: that Python error is
// set, and it is the one the user sees (set_python_error keeps it).
struct PythonErrorSet : std::runtime_error {
  PythonErrorSet() : std::runtime_error("a Python error is set") {}
};


}  // namespace mini::capture
