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

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "capture/bytecode.h"
#include "capture/variables.h"
#include "graph/graph.h"
#include "guards/guards.h"

namespace mini::capture {

// How to rebuild a Python value after the graph ran: the return value, and at a graph
// break every live stack slot and local (Dynamo's reconstruction by PyCodegen).
struct OutputSpec {
  enum class Kind {
    GraphOutput,  // graph.outputs[index]
    Number,       // graph.outputs[index].item(): a Python number computed in the graph
    Constant,     // value
    Tuple, List,  // items
    Source,       // read `source` again from the frame's values (unchanged objects)
    Null,         // the NULL of a call sequence
    Absent,       // an unbound local
    Method,       // getattr(items[0], name): a bound method
    Iterator,     // iter(tuple(items)): a for loop's iterator, as far as it got
    View,         // `views` replayed on the tensor at `source`: a view of an input the graph
                  // wrote, rebuilt on the real input so that it shares its memory
  } kind = Kind::Constant;
  int index = 0;
  PyObject* value = nullptr;  // Constant (owned)
  SourceRef source;
  std::string name;
  std::vector<OutputSpec> items;
  std::vector<std::pair<OpKind, Attrs>> views;  // View
  OutputSpec() = default;
  OutputSpec(OutputSpec&& o) noexcept { *this = std::move(o); }
  OutputSpec& operator=(OutputSpec&& o) noexcept {
    std::swap(kind, o.kind); std::swap(index, o.index); std::swap(value, o.value);
    std::swap(source, o.source); std::swap(name, o.name); std::swap(items, o.items);
    std::swap(views, o.views);
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
  std::vector<bool> scalar_inputs;       // input i is a Python number made a 0-d tensor
  // Graph inputs written in place: (input position, graph output holding its final value),
  // copied into the real input after the graph runs (AOTAutograd's epilogue).
  std::vector<std::pair<int, int>> input_mutations;
  // Another source that held the very tensor of graph input i while tracing: the graph reads
  // both through that one input (torch's DUPLICATE_INPUT).
  std::vector<std::pair<int, SourceRef>> duplicate_inputs;

  // How the unit ends: returning `output`; or a graph break at `exit_instruction`, which
  // then runs eagerly (Break: a call or a branch on a tensor, done with real objects) or
  // natively in CPython to the end of the frame (Native: an instruction capture cannot run).
  enum class Exit { Return, Break, Native } exit = Exit::Return;
  OutputSpec output;
  Instruction exit_instruction{};
  std::vector<OutputSpec> exit_stack;   // the live stack before exit_instruction
  std::vector<OutputSpec> exit_locals;  // every localsplus slot
  PyObject* exit_kw_names = nullptr;    // a pending KW_NAMES tuple (Borrowed from co_consts)
  std::string break_reason, break_location, break_code;
};

struct TraceOptions {
  int max_inline_depth = 32;
};

// Automatic dynamic decisions for one trace: which dims and scalars are symbolic.
struct DynamicPolicy {
  bool all_dims = false;                                 // dynamic=True
  const std::map<std::string, std::vector<bool>>* dims = nullptr;  // source -> dynamic dims
  const std::map<std::string, bool>* scalars = nullptr;  // source -> dynamic scalar
};

// Traces the unit of `code` (Borrowed) starting at byte `start_offset`, with the frame's
// values (locals, and at a resume point the stack) in `frame`. Unsupported code at the top
// level becomes a graph break (Trace::exit); only internal failures throw Unsupported.
Trace trace_frame(PyCodeObject* code, const guards::FrameValues& frame, int start_offset,
                  const DynamicPolicy& dynamic, const TraceOptions& options);

}  // namespace mini::capture
