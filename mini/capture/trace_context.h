// trace_context.h — the state shared by every frame of one trace (the root frame and the
// functions it inlines), and the pieces of the interpreter split across files:
//   tracer.cpp       the instruction loop; interpret_*.cpp the opcode handlers
//                    (frame_interpreter.h); rebuild.cpp Vars back into objects
//   variables.cpp    Vars, cells, dicts made while tracing, stores into program state
//   wrap.cpp         turning a real object read from the frame into a Var (+ its guards)
//   calls.cpp        calling a Var: inlining functions and modules; attributes
//   builtins.cpp     Python's builtins over Vars
//   tensor_*.cpp     tensor methods and mini functions as graph ops (the op table, tensor_calls.h)
//   symbolic_sizes.cpp  arithmetic and decisions on dynamic sizes (SymInts)
//   functionalize.cpp in-place ops: the memory traced tensors share, and writes into it
// Internal to capture/.
#pragma once
#include <unordered_map>

#include "capture/tracer.h"

namespace mini::capture {

// Functionalization: the memory behind traced tensors (torch's storage). An op's result has
// memory of its own, a view (or detach) shares its input's, a graph input's is the real
// tensor's. An in-place op writes a new value of the whole memory (its base) and every
// tensor in that memory is recomputed from it by replaying its views, so the graph holds
// out-of-place ops only (torch's functionalization, done while tracing).
struct TracedStorage {
  int base = -1;         // node: the current value of the memory's base tensor
  int input = -1;        // position in graph.inputs when this is a graph input's memory
  bool mutated = false;  // written in place (an input's final value is written back)
};
struct Alias {
  std::shared_ptr<TracedStorage> storage;
  std::vector<int> views;  // the view nodes from the base to this value; empty: the base
  bool exact = true;       // false: a reshape of dynamic sizes, which may have copied
};
// One in-place write, undone when the instruction that made it ends the unit (a graph
// break: the instruction then runs again eagerly).
struct Write {
  std::shared_ptr<TracedStorage> storage;
  int base = -1;
  bool mutated = false;
  std::vector<std::pair<VarRef, int>> nodes;  // each Var recomputed, with its node before
};

struct TraceContext {
  Trace trace;
  guards::FrameValues root;
  PyObject* root_globals = nullptr;  // Borrowed
  TraceOptions options;
  DynamicPolicy dynamic;
  int depth = 0;                                  // inlining depth
  std::unordered_map<PyObject*, int> tensor_node; // input tensor object -> its graph node
  std::unordered_map<PyObject*, std::vector<bool>> tensor_dynamic;  // -> its dynamic dims
  std::unordered_map<int, Alias> aliases;         // tensor node -> the memory it is in
  std::vector<std::weak_ptr<Var>> tensor_vars;    // tensor Vars made, recomputed by writes
  std::vector<std::shared_ptr<TracedStorage>> input_storages;
  std::vector<Write> writes;                      // undo log of in-place writes
  std::string current_code;                       // the source line being traced
  std::string current_location;                   // "file:line in fn"
  // The grad mode the code being traced runs in: the caller's at the start (guarded), then
  // as with mini.no_grad() blocks and set_grad_enabled() calls change it (grad_mode.cpp).
  bool entry_grad_enabled = true, grad_enabled = true;

  // Side effects (Dynamo's SideEffects): stores into real cells, globals and attributes,
  // kept here so that later reads in the trace see them, and replayed after the graph.
  struct Store {
    SideEffect::Kind kind;
    PyObject* target;        // Global: the globals dict; Attr: the object (Borrowed)
    SourceRef target_source; // Global: null for the root frame's globals
    std::string name;
    VarRef value;
  };
  std::unordered_map<PyObject*, VarRef> cells;  // real cell -> its Var
  std::vector<VarRef> stored_cells;             // real cells written, in order
  std::vector<Store> stores;
  // Lists and dicts read from the frame, by source: every read of one in the trace is one Var,
  // so that after an append or a store into it (a side effect, replayed after the graph)
  // every later read sees its contents now.
  std::unordered_map<std::string, VarRef> containers;
  // Objects whose attributes the trace read or wrote, for the identity guards that keep
  // which of them alias what the trace assumed (see side_effects in tracer.cpp).
  std::vector<std::pair<SourceRef, PyObject*>> attr_objects;
  int mutations = 0;  // bumped by every in-place change of a Var or store (see trace_frame)
  bool device_fixed = false;  // graph().device set by an input or a factory's device=
  std::unordered_map<const Var*, int> alias_of;  // rebuild: mutable Vars already rebuilt

  graph::Graph& graph() { return *trace.graph; }
  guards::GuardSet& guards() { return *trace.guards; }
};

[[noreturn]] void unsupported(const std::string& reason);

// A graph holds tensors of one device: the first tensor input (or factory device=) fixes it,
// and `what` on another device ends the graph there (a graph break; eager runs the rest).
void use_device(TraceContext& ctx, Device device, const std::string& what);
// A device= argument or a .to() target (a str, a mini.device, an int ordinal) as a Device;
// false where `obj` is none of these.
bool device_from(PyObject* obj, Device* out);

// wrap.cpp: a real object found at `source` (Borrowed `value`) as a Var, with guards.
VarRef wrap(TraceContext& ctx, PyObject* value, SourceRef source);
// A value computed while tracing (no source, no guards): constants, tuples of them.
VarRef wrap_untracked(TraceContext& ctx, PyObject* value);
bool is_module(PyObject* value);
// The value of the dict's values[i], read from the real dict (and guarded) on first use.
VarRef dict_value(TraceContext& ctx, const VarRef& dict, size_t i);

// variables.cpp: cells, dicts, stores
// The Var of a real cell (one per cell in a trace); its contents are read through
// `contents_source` on first use, and stores into it are replayed at `cell_source`.
VarRef cell_var(TraceContext& ctx, PyObject* cell, SourceRef contents_source, SourceRef cell_source);
VarRef new_cell(VarRef contents);  // a cell made while tracing (MAKE_CELL)
VarRef cell_get(TraceContext& ctx, const VarRef& cell);
void cell_set(TraceContext& ctx, const VarRef& cell, VarRef value);
// A List or Dict made while tracing (no source, no real object): the only ones the trace
// may change in place.
bool made_in_trace(const VarRef& v);
int dict_find(const VarRef& dict, const VarRef& key);  // -1: missing
void dict_set(TraceContext& ctx, const VarRef& dict, const VarRef& key, VarRef value);
VarRef find_store(TraceContext& ctx, SideEffect::Kind kind, PyObject* target, const std::string& name);
void record_store(TraceContext& ctx, SideEffect::Kind kind, PyObject* target, SourceRef target_source,
                  const std::string& name, VarRef value);

// builtins.cpp
VarRef call_builtin(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args,
                    const std::vector<std::pair<std::string, VarRef>>& kwargs);
// Calls a real callable on constant arguments; the result is untracked (a constant).
VarRef call_on_constants(TraceContext& ctx, PyObject* fn, const std::vector<VarRef>& args,
                         const std::vector<std::pair<std::string, VarRef>>& kwargs, const std::string& what);
bool all_constant(const std::vector<VarRef>& args, const std::vector<std::pair<std::string, VarRef>>& kwargs);

// calls.cpp
// Calls `module.name(*args)` as Python would (module.forward(...), a ModuleList's __len__).
VarRef call_module_method(TraceContext& ctx, const VarRef& module, const std::string& name,
                          std::vector<VarRef> args, std::vector<std::pair<std::string, VarRef>> kwargs);
VarRef call_var(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args,
                std::vector<std::pair<std::string, VarRef>> kwargs);
VarRef get_attr(TraceContext& ctx, const VarRef& obj, const std::string& name);
// obj.name = value: a side effect on a plain object or module (replayed after the graph).
void store_attr(TraceContext& ctx, const VarRef& obj, const std::string& name, const VarRef& value);
// The items of a tuple, list, iterator, dict (its keys) or dict view.
std::vector<VarRef> items_of(TraceContext& ctx, const VarRef& v);
// Runs an inlined function's code: the interpreter (interpret_control.cpp). `made`: the function was
// made while tracing (its defaults and closure are Vars).
// Globals of mini's own Python modules (mini, mini.nn, ...): read unguarded (interpret_locals.cpp).
bool is_mini_library(PyObject* globals);
VarRef inline_function(TraceContext& ctx, PyObject* function, SourceRef function_source,
                       std::vector<VarRef> args, std::vector<std::pair<std::string, VarRef>> kwargs,
                       const Var::MadeFunction* made = nullptr);

// tensor_calls.cpp
using Kwargs = std::vector<std::pair<std::string, VarRef>>;
// A dataclass instance built while tracing (a Tuple of its fields whose self is its class
// and name "object"; a namedtuple's has no name: it is a tuple)
bool is_object_record(const VarRef& v);
// contextlib.nullcontext(): an object of that class, and what its with block's `as` receives
bool is_null_context(const VarRef& v);
VarRef null_context_enter(TraceContext& ctx, const VarRef& cm);
VarRef call_tensor_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                          std::vector<VarRef> args, const Kwargs& kwargs);
// x.name(...) in the user's code: what Python finds on type(x), guarded by identity there
// (mini.Tensor.name, or L['p'].__class__.name for an input of a subclass): mini's own method
// is call_tensor_method's op, a function the program put there (mini.Tensor.relu = f) inlined.
VarRef call_tensor_method_as_found(TraceContext& ctx, const std::string& name, const VarRef& self,
                                   std::vector<VarRef> args, const Kwargs& kwargs);
// The same lookup and guard, for a name whose own method capture traces itself (an operator:
// x + y is type(x).__add__): the replacement's result, or nullptr where it is mini's own.
VarRef call_replaced_tensor_method(TraceContext& ctx, const std::string& name, const VarRef& self,
                                   std::vector<VarRef> args, const Kwargs& kwargs);
// mini.<name>(...) for the registered graph functions.
VarRef call_graph_function(TraceContext& ctx, const std::string& name, std::vector<VarRef> args,
                           const Kwargs& kwargs);
VarRef tensor_attr(TraceContext& ctx, const VarRef& self, const std::string& name);
// a <op> b for BINARY_OP / COMPARE_OP / unary ops where a tensor is involved.
VarRef tensor_binary(TraceContext& ctx, OpKind op, const VarRef& a, const VarRef& b);
VarRef tensor_unary(TraceContext& ctx, OpKind op, const VarRef& a);
VarRef tensor_getitem(TraceContext& ctx, const VarRef& t, const VarRef& index);
const graph::TensorMeta& meta_of(TraceContext& ctx, const VarRef& t);
// x += y, x -= y, x *= y, x /= y on a tensor (Tensor.__iadd__ ...): written in place.
VarRef tensor_inplace_binary(TraceContext& ctx, OpKind op, const VarRef& self, const VarRef& other);

// functionalize.cpp
// A tensor Var for `node` (every tensor Var is made here, so that writes can find it).
VarRef tensor_var(TraceContext& ctx, int node);
// Appends an op whose result requires grad as eager's would (grad mode on, a floating
// result, an input that requires grad; detach never).
int add_tensor_op(TraceContext& ctx, OpKind op, const std::vector<int>& inputs, const Attrs& attrs);
const Alias& alias_of(TraceContext& ctx, int node);
// `value` (a node of self's shape and dtype) written into self's memory, as an in-place op
// writes: the base gets its new value (through scatters when self is a view) and every
// tensor in the memory is recomputed from it. `op` names the op in errors.
void write_in_place(TraceContext& ctx, const VarRef& self, int value, const std::string& op);
// Before an in-place op computes: eager's error for a tensor whose elements share memory (an
// expanded one), raised where eager raises it; fill_/zero_, which eager allows there, end the
// graph instead (functionalization cannot scatter through an expand).
void check_writable(TraceContext& ctx, const VarRef& self, const std::string& op);
void undo_writes(TraceContext& ctx, size_t mark);  // back to ctx.writes.size() == mark
// TensorImpl::is_contiguous on meta (size-1 dims may have any stride; dynamic sizes: false).
bool is_contiguous(const graph::TensorMeta& m);
// requires_grad as eager reads it (a graph input keeps its own flag after writes).
bool tensor_requires_grad(TraceContext& ctx, const VarRef& t);
// The graph input `t` itself (not a view of it): its position in graph.inputs, or -1.
int input_itself(TraceContext& ctx, const VarRef& t);
// The Python type of a traced tensor, as isinstance and __class__ see it: a graph input's own
// (nn.Parameter, a user's subclass; its TENSOR_MATCH guards it, in place writes keep it),
// mini.Tensor for what an op made.
PyTypeObject* tensor_type_of(TraceContext& ctx, const VarRef& t);
// At the end of a trace: each written graph input's final value becomes a graph output,
// recorded in trace.input_mutations for the write-back.
void add_input_mutations(TraceContext& ctx);

// A size of a tensor as a Var: a constant, or a SymInt when the dim is symbolic.
VarRef size_var(TraceContext& ctx, const VarRef& tensor, int64_t dim);
// A tuple or list whose items are all constants (SymInts specialized) as one Constant, for
// the Python operations on it (x.shape == (3, 4), max(x.shape)); nullptr otherwise.
VarRef as_constant(TraceContext& ctx, const VarRef& v);

// grad_mode.cpp: `with mini.no_grad():` / `enable_grad()` blocks, set_grad_enabled() and
// @mini.no_grad() functions, traced by switching TraceContext::grad_enabled; the graph's ops
// carry the mode they were traced in (graph::GradMode).
// mini.no_grad(), enable_grad(), set_grad_enabled(), is_grad_enabled() called in traced code;
// nullptr if `name` is none of them.
VarRef call_grad_mode_function(TraceContext& ctx, const std::string& name,
                               const std::vector<VarRef>& args, const Kwargs& kwargs);
bool is_grad_mode(const VarRef& v);       // an object mini.no_grad() & co. return
bool is_grad_mode_exit(const VarRef& v);  // the __exit__ BEFORE_WITH pushed for one
// BEFORE_WITH on a grad-mode object: sets the mode; returns the __exit__ to push.
VarRef enter_grad_mode(TraceContext& ctx, const VarRef& mode);
// The mode a grad-mode __exit__ restores (and, when `apply`, restores it).
bool exit_grad_mode(TraceContext& ctx, const VarRef& exit, bool apply);
// A call of a @mini.no_grad() function: its wrapped function inlined in that mode; nullptr
// if `fn` is no such wrapper.
VarRef call_grad_mode_wrapper(TraceContext& ctx, const VarRef& fn, std::vector<VarRef> args,
                              Kwargs kwargs);

// A SymInt used where a plain int is needed (a range bound, an index, a float): its value
// now, guarded to stay that value (torch calls this specializing). Others pass through.
VarRef specialize(TraceContext& ctx, const VarRef& v);
// A Python number that automatic dynamic made a graph input, as the constant it is now, with
// a guard on its value; anything else unchanged.
VarRef specialize_number(TraceContext& ctx, const VarRef& v);
// The graph input position of a Python number of the frame's made dynamic, as it came in
// (an int; or a float too unless ints_only), else -1.
int number_input(TraceContext& ctx, const VarRef& v, bool ints_only);
// a <richcmp> b where one is a Python number of the frame's made dynamic (a graph input) and
// the other an int or float constant: decided with the value seen, under a guard on the
// number that keeps the outcome (L['a'] <= 0.5); null for anything else.
VarRef number_compare(TraceContext& ctx, int richcmp, const VarRef& a, const VarRef& b);

// symbolic_sizes.cpp. Each takes a SymInt and an int (or two SymInts); null when neither
// side is a SymInt or the result cannot stay symbolic (the caller specializes).
// a <op> b for + - * // %: a SymInt.
VarRef sym_binary(TraceContext& ctx, guards::SizeTerm::Op op, const VarRef& a, const VarRef& b);
VarRef sym_negate(TraceContext& ctx, const VarRef& a);
// a <richcmp> b: decided with the values seen, a SHAPE_ENV guard keeps the outcome.
VarRef sym_compare(TraceContext& ctx, int richcmp, const VarRef& a, const VarRef& b);
// max(...) / min(...) of ints where one at least is a SymInt: the winning operand, under shape
// guards that it still wins (null: not such a call).
VarRef sym_extreme(TraceContext& ctx, bool largest, const std::vector<VarRef>& args);
// start:stop:step where a bound is a SymInt (x[:n], x[: x.shape[0] // 2] on a dynamic dim):
// a record of slice's three fields (rebuilt as slice(start, stop, step)), so a tensor's
// getitem can keep the bound a graph symbol; specialize() turns it into a constant slice.
// `parts` are the bounds and step, each None, an int or a SymInt. Null when none is a SymInt.
VarRef sym_slice(TraceContext& ctx, std::vector<VarRef> parts);
bool is_sym_slice(const VarRef& v);
// A SymInt as a graph value (a 0-d int64 input computed from the frame's sizes on each call,
// one per expression), so that x * x.shape[0] keeps the size symbolic; anything else as it is.
VarRef sym_as_number(TraceContext& ctx, const VarRef& v);
// x.numel(): the product of the sizes (a SymInt when a dim is symbolic).
VarRef numel_var(TraceContext& ctx, const VarRef& tensor);
// A SymInt (or an int >= 0) as a graph size code: its symbol, or a derived symbol for + - *
// over input dims and ints (graph::Graph::derive); an int argument made dynamic, as a symbol
// of its value (>= 2 under a guard, as a dynamic dim; 0 and 1 stay specialized); false for
// anything else (the caller specializes it).
bool graph_size(TraceContext& ctx, const VarRef& v, int64_t* code);
// What a size code stands for, over the frame's tensors.
guards::SizeExpr size_expr_of(TraceContext& ctx, int64_t code);
// At the end of a trace: a shape guard for each relation meta inference assumed
// (graph.size_facts), so a call whose sizes break one misses the cache.
void guard_size_facts(TraceContext& ctx);

}  // namespace mini::capture
