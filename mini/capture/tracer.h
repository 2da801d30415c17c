// tracer.h — symbolic bytecode evaluation: a frame's instructions run over Vars instead of
// objects, appending tensor operations to a Graph and guards to a GuardSet (Dynamo's
// InstructionTranslator).
//
// In:  a frame (its code and its values at entry, read through Sources).
// Out: a Trace — the graph, the guards that make it reusable, the Sources of its inputs,
//      and how to rebuild the function's return value from the graph's outputs.
// Guarantees: tracing never runs user code except attribute reads the user's code would
// also make, and never changes program state; whatever it cannot trace raises
// Unsupported with a reason and the user's source line, and leaves nothing behind.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "capture/bytecode.h"
#include "capture/variables.h"
#include "graph/graph.h"
#include "guards/guards.h"

namespace mini::capture {

// How to rebuild the return value: a graph output, a constant, or a tuple/list of these.
struct OutputSpec {
  enum class Kind { GraphOutput, Constant, Tuple, List } kind = Kind::Constant;
  int index = 0;               // GraphOutput: position in graph.outputs
  PyObject* value = nullptr;   // Constant (owned)
  std::vector<OutputSpec> items;
  OutputSpec() = default;
  OutputSpec(OutputSpec&& o) noexcept { *this = std::move(o); }
  OutputSpec& operator=(OutputSpec&& o) noexcept {
    std::swap(kind, o.kind); std::swap(index, o.index); std::swap(value, o.value);
    std::swap(items, o.items);
    return *this;
  }
  ~OutputSpec() { Py_XDECREF(value); }
};

// What the interpreter needs from the Python layer (set once by mini._C).
struct PythonBridge {
  PyObject* (*wrap_tensor)(const Tensor& t) = nullptr;  // New reference
  PyObject* module_class = nullptr;   // mini.nn.Module (Borrowed, lives forever)
  PyObject* tensor_type = nullptr;    // mini.Tensor
  PyObject* dtype_objects[4] = {};    // mini.bool, int64, float32, float64 by DType code
  PyObject* graph_functions = nullptr;  // dict: function object -> op-table name
  // A Python GraphModule for a backend callable (New reference, NULL on error).
  PyObject* (*make_graph_module)(std::shared_ptr<graph::Graph> graph, const std::string& name) = nullptr;
};
PythonBridge& python_bridge();

struct Trace {
  std::shared_ptr<graph::Graph> graph = std::make_shared<graph::Graph>();
  std::unique_ptr<guards::GuardSet> guards = std::make_unique<guards::GuardSet>();
  std::vector<SourceRef> input_sources;  // one per graph input
  std::vector<PyObject*> example_inputs; // Borrowed: the tensors seen while tracing
  OutputSpec output;
};

struct TraceOptions {
  int max_inline_depth = 32;
};

// Traces the frame whose code is `code` (Borrowed), globals/builtins and entry values are
// `frame`. Throws Unsupported.
Trace trace_frame(PyCodeObject* code, PyObject* function, const guards::FrameValues& frame,
                  const TraceOptions& options);

}  // namespace mini::capture
