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
#include <type_traits>
#include <variant>
#include <vector>

#include "capture/bytecode.h"
#include "capture/variables.h"
#include "graph/graph.h"
#include "guards/guards.h"

namespace mini::capture {

// A reference this spec owns (the constant, a record's class, a bare function): released with it.
class OwnedRef {
 public:
  OwnedRef() = default;
  explicit OwnedRef(PyObject* borrowed) : o_(borrowed) { Py_XINCREF(o_); }
  OwnedRef(OwnedRef&& r) noexcept : o_(r.o_) { r.o_ = nullptr; }
  OwnedRef& operator=(OwnedRef&& r) noexcept {
    std::swap(o_, r.o_);
    return *this;
  }
  ~OwnedRef() { Py_XDECREF(o_); }
  PyObject* get() const { return o_; }

 private:
  PyObject* o_ = nullptr;
};

// How to rebuild a Python value after the graph ran: the return value, and at a graph
// break every live stack slot and local (Dynamo's reconstruction by PyCodegen). One struct
// per kind, holding only what that kind needs (the cure Source got, guards/source.h); what
// every kind has is `alias`.
struct OutputSpec {
  struct GraphOutput {  // graph.outputs[index]
    int index = 0;
  };
  struct Number {  // graph.outputs[index].item(): a Python number computed in the graph
    int index = 0;
  };
  struct Constant {  // the object itself
    OwnedRef value;
  };
  struct Tuple {  // a tuple of the items; with `record`, record(*items) (a namedtuple-like class)
    std::vector<OutputSpec> items;
    OwnedRef record;
  };
  struct List {  // a new list of the items
    std::vector<OutputSpec> items;
  };
  struct Size {  // mini.Size(items): a tensor's shape
    std::vector<OutputSpec> items;
  };
  struct Iterator {  // iter(tuple(items)): a for loop's iterator, as far as it got
    std::vector<OutputSpec> items;
  };
  struct Dict {  // a new dict: items = key, value, key, value, ...
    std::vector<OutputSpec> items;
  };
  struct Cell {  // a new cell holding *contents (empty without)
    std::unique_ptr<OutputSpec> contents;
  };
  struct Function {  // a new function of the bare one (its code, globals and name), with its
                     // defaults, keyword defaults and closure (each null where absent)
    OwnedRef bare;
    std::unique_ptr<OutputSpec> defaults, kwdefaults, closure;
  };
  struct Read {  // `source` read again from the frame's values (an unchanged object)
    SourceRef source;
  };
  struct Local {  // the frame's local slot `index` as it is (an unbound one stays unbound)
    int index = 0;
  };
  struct Null {};    // the NULL of a call sequence
  struct Absent {};  // an unbound local
  struct Method {    // getattr(*self, name): a bound method
    std::unique_ptr<OutputSpec> self;
    std::string name;
  };
  struct Call {  // getattr(*self, name)(): a dict view
    std::unique_ptr<OutputSpec> self;
    std::string name;
  };
  struct AliasOf {  // the object built earlier for alias `index`
    int index = 0;
  };
  struct SizeValue {  // expr evaluated on the frame's tensors: a dynamic size as a Python int
    guards::SizeExpr expr;
  };
  struct View {  // `views` replayed on the tensor at `source` (null: on graph output `index`):
                 // a view of an input the graph wrote, rebuilt on the real input so that it
                 // shares its memory
    SourceRef source;
    int index = 0;
    std::vector<std::pair<OpKind, Attrs>> views;
  };
  using Kind = std::variant<GraphOutput, Number, Constant, Tuple, List, Size, Iterator, Dict, Cell, Function, Read,
                            Local, Null, Absent, Method, Call, AliasOf, SizeValue, View>;

  Kind kind = Null{};
  int alias = -1;  // >= 0: a mutable object made while tracing, built once per run so that
                   // every place holding it gets the same object

  OutputSpec() = default;
  template <class K, class = std::enable_if_t<!std::is_same_v<std::decay_t<K>, OutputSpec>>>
  OutputSpec(K k) : kind(std::move(k)) {}  // NOLINT(google-explicit-constructor): a spec of one kind
  // This spec's kind if it is `K`, else null.
  template <class K>
  const K* as() const { return std::get_if<K>(&kind); }
  template <class K>
  K* as() { return std::get_if<K>(&kind); }
};

// What the interpreter needs from the Python layer (set once by mini._C).
struct PythonBridge {
  PyObject* (*wrap_tensor)(const Tensor& t) = nullptr;  // New reference
  PyObject* module_class = nullptr;   // mini.nn.Module (Borrowed, lives forever)
  PyObject* tensor_type = nullptr;    // mini.Tensor
  PyObject* tensor_methods = nullptr;  // dict: name -> getattr(mini.Tensor, name) when mini was imported
  PyObject* dtype_objects[kNumDTypes] = {};  // mini.bool, int64, float32, float64, bfloat16 by DType code
  PyObject* graph_functions = nullptr;  // dict: function object -> op-table name
  PyObject* size_type = nullptr;        // mini.Size: what x.shape and x.size() are
  PyObject* grad_mode_type = nullptr;   // what mini.no_grad(), enable_grad(), set_grad_enabled() return
  PyObject* grad_mode_wrapper_code = nullptr;  // the code of a @mini.no_grad() function's wrapper
  // A Python GraphModule for a backend callable (New reference, NULL on error).
  PyObject* (*make_graph_module)(std::shared_ptr<graph::Graph> graph, const std::string& name) = nullptr;
};
PythonBridge& python_bridge();

// A store into program state made by the traced code, replayed after the graph ran (and
// before the breaking instruction runs): Dynamo's SideEffects. Tracing itself changes nothing.
struct SideEffect {
  enum class Kind {
    Cell,    // target: the cell; stores value into it (a nonlocal or closure variable)
    Global,  // target: the globals dict (null: the frame's); name = value
    Attr,    // target: the object; setattr(object, name, value)
    Item,    // target: a dict of the frame's; target[name] = value
    Contents,  // target: a list of the frame's; target[:] = value (its items after the trace)
  } kind = Kind::Cell;
  SourceRef target;
  std::string name;
  OutputSpec value;
};

struct Trace {
  std::shared_ptr<graph::Graph> graph = std::make_shared<graph::Graph>();
  std::unique_ptr<guards::GuardSet> guards = std::make_unique<guards::GuardSet>();
  std::vector<SourceRef> input_sources;  // one per graph input
  std::vector<PyObject*> example_inputs; // Borrowed: the tensors seen while tracing
  std::vector<bool> scalar_inputs;       // input i is a Python number made a 0-d tensor
  // Graph inputs written in place: (input position, graph output holding its final value),
  // copied into the real input after the graph runs (AOTAutograd's epilogue).
  std::vector<std::pair<int, int>> input_mutations;

  // How the unit ends: returning `output`; or a graph break at `exit_instruction`, which
  // then runs eagerly (Break: a call or a branch on a tensor, done with real objects) or
  // natively in CPython to the end of the frame (Native: an instruction capture cannot run).
  // Skip: nothing of the unit is compiled, CPython runs it and the rest of the frame (Dynamo
  // skips such a frame): a break of the unit's own inside a loop, one inside a handler of the
  // user's (a try block), or a unit the capture asked to leave whole.
  enum class Exit { Return, Break, Native, Skip } exit = Exit::Return;
  OutputSpec output;
  Instruction exit_instruction{};
  std::vector<OutputSpec> exit_stack;   // the live stack before exit_instruction
  std::vector<OutputSpec> exit_locals;  // every localsplus slot; for a frame with cell
                                        // variables, cell and free slots hold the cells
  std::vector<SideEffect> side_effects;  // replayed after the graph, in this order
  PyObject* exit_kw_names = nullptr;    // a pending KW_NAMES tuple (Borrowed from co_consts)
  // Where CPython resumes a Native exit (or a Break mini cannot run): exit_instruction's
  // offset, except at a CALL with a pending KW_NAMES (3.11, 3.12), whose names live in
  // CPython's eval loop, not on the stack: resuming at the CALL would pass the keyword
  // arguments as positional ones, so CPython resumes at the KW_NAMES (which changes no stack).
  int native_resume_offset = -1;
  std::string break_reason, break_location, break_code;
  bool skip_unit = false;  // Exit::Skip for the whole unit (Unsupported::skip_unit), not a loop
  // Exit::Skip at a break the unit cannot resume after: where it is ("inside a try block",
  // "inside a loop"), for the log and explain()
  std::string skip_where;
  std::string stub_fallback;  // a course kit's stub (A9's exit_at) stood aside: its message
  // The Break is at an instruction whose trace raised this user error (eager's own error,
  // which the instruction raises when it runs; fullgraph=True raises it instead).
  std::shared_ptr<const Error> user_error;
  // The grad mode the traced code leaves (a with mini.no_grad() block open at the break, a
  // set_grad_enabled() call): set after the graph runs, as running the code would have.
  bool grad_enabled_after = true;
  // A Break inside grad-mode with blocks: the mode their ends restore if the breaking
  // instruction raises (-1: no block is open).
  int grad_enabled_on_raise = -1;
};

struct TraceOptions {
  int max_inline_depth = 32;
  bool capture_scalar_outputs = false;  // Tensor.item() as a graph value (config, or fullgraph)
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

// wrap.cpp
// A Python int (Borrowed) as int64; throws mini::Error (a RuntimeError, as eager ops and
// torch raise) when it is outside int64.
int64_t python_int64(PyObject* number);
// A Python int or float (Borrowed) as the 0-d "wrapped number" tensor eager ops make of it:
// int64 exactly, or float64. Throws as python_int64 does.
Tensor wrapped_number_tensor(PyObject* number);

}  // namespace mini::capture
