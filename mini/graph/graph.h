// graph.h — the graph IR: what capture produces and every backend consumes (torch.fx's role).
//
// In:  inputs (typed placeholders), constants (Python numbers) and op nodes appended in
//      program order, each op an OpKind of mini/tensor/op.h with its Attrs.
// Out: a Graph that prints like TORCH_LOGS=graph_code, runs with eager ops (run_graph),
//      and carries each node's meta (sizes, strides, dtype) computed without running it.
// Guarantees: nodes are in topological order (an op's inputs come before it); names are
// unique and readable (l_x_, mul, mul_1, ...); meta matches what the eager op would give.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace mini::graph {

// Sizes in graph meta are ints; a dynamic size is a symbol, encoded as a negative int:
// -1 is an "unbacked" size known only at run time (nonzero's length), and -2 - k is the
// symbol s_k, a dimension of a graph input (automatic dynamic, dynamic=True, mark_dynamic).
constexpr int64_t kUnbacked = -1;
inline bool is_symbol(int64_t size) { return size <= -2; }
inline int64_t symbol_code(int k) { return -2 - k; }
inline int symbol_index(int64_t size) { return (int)(-2 - size); }
std::string size_str(int64_t size);  // "8", "s0", "u"

// A symbol is a dimension of a graph input, or a size computed from other sizes (`cat`'s
// s0 + 1, a reshape's element count): `lhs op rhs` over size codes (ints >= 0 or earlier
// symbols), recomputed from the inputs' sizes on each run, in order.
struct Symbol {
  int input = 0;     // position in graph.inputs; -1: derived
  int dim = 0;       // -1: the value of input `input`, a Python int's 0-d graph input (>= 2 by a guard)
  int64_t hint = 0;  // the size seen while tracing
  char op = 0;       // derived: '+', '-', '*' or '/' (of sizes >= 0: floor division)
  int64_t lhs = 0, rhs = 0;
};

// A relation between two sizes that the graph relies on (torch's ShapeEnv guards): a
// broadcast of a symbol against another size, a matmul's inner dims, a reshape's element
// count, an expand, a slice inside its base. Meta inference decides each with the sizes seen
// while tracing and records the outcome; capture keeps each by a shape guard, so that a call
// whose sizes break it misses the cache and is traced again (where eager's error is raised).
struct SizeFact {
  int64_t lhs = 0, rhs = 0;  // size codes
  char op = '=';             // '=': equal, '!': not equal, '<': lhs <= rhs, '>': lhs > rhs
};

struct TensorMeta {
  Shape sizes;
  Strides strides;
  DType dtype = DType::Float32;
  bool requires_grad = false;
};

enum class NodeKind { Input, Constant, Op };

// The grad mode an op runs in. Capture sets Off / On for ops traced inside a
// `with mini.no_grad()` or `enable_grad()` block (or after set_grad_enabled()) that changed
// the mode; Ambient ops run in the mode the graph is called in, which the grad-mode guard
// fixes to the mode at the start of the captured code (torch's graphs hold
// _set_grad_enabled calls instead).
enum class GradMode { Ambient, Off, On };

struct Node {
  NodeKind kind = NodeKind::Op;
  std::string name;             // unique, printable
  TensorMeta meta;
  // Op
  OpKind op = OpKind::Add;
  Attrs attrs;
  std::vector<int> inputs;      // node ids
  std::string code;             // the user's source line that made it ("" if unknown)
  GradMode grad_mode = GradMode::Ambient;  // an Off op's value carries no gradient
  bool symbolic_attrs = false;  // attrs hold symbols, resolved from the inputs on each run
  // Input
  std::string source;           // where the value comes from, e.g. "L['x']"
  bool wrapped_number = false;  // a Python number passed as a 0-d tensor (promotes like one)
  // Constant: a Python number, materialized once as a 0-d "wrapped number" tensor
  double value = 0;
  Tensor constant;
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<int> inputs;   // Input node ids, in the order run_graph takes them
  std::vector<int> outputs;  // node ids of the returned tensors
  std::vector<Symbol> symbols;  // s0, s1, ...: dynamic sizes and the input dims they are
  std::vector<SizeFact> size_facts;  // what meta inference assumed about the symbols
  // A symbol found equal to an int or an earlier symbol -> that size (torch's ShapeEnv
  // replacements): applied to every node by apply_replacements, so generated code sees a
  // broadcast symbol as the 1 it is.
  std::map<int64_t, int64_t> replacements;
  // Where every tensor of the graph lives (one device per graph; a 0-d CPU number input is
  // the only exception, as in eager). Backends compile for it: C++ for the CPU, CUDA else.
  Device device;

  int add_input(const TensorMeta& meta, const std::string& source);
  int add_constant(double value, DType dtype);
  // Appends an op, computing its meta (throws mini::Error if the op is invalid for its
  // inputs, with the same message the eager op would give).
  int add_op(OpKind op, const std::vector<int>& inputs, const Attrs& attrs,
             const std::string& code = "");

  // The value seen while tracing of a size code (a constant is itself; kUnbacked has none).
  int64_t hint(int64_t size) const;
  Shape hints(const Shape& sizes) const;
  // The size code of `a op b` ('+', '-', '*', '/'): folded where the operands are constants or
  // the result is one of them, one symbol per definition.
  int64_t derive(char op, int64_t a, int64_t b);
  // Decides `a op b` ('=', '!', '<' for <=) with the hints and records the outcome as a
  // SizeFact where a symbol takes part (and the outcome is not already known).
  bool assume(int64_t a, char op, int64_t b);
  // `size` with the replacements applied.
  int64_t canonical(int64_t size) const;
  // Rewrites every node's sizes and size attributes with their canonical codes (at the end of
  // a trace, once the facts that justify them are guarded).
  void apply_replacements();
  // Every symbol's value for these inputs (graph.inputs' order): input dims, then derived.
  std::vector<int64_t> symbol_values(const std::vector<Tensor>& inputs) const;

  int op_count() const;  // Op nodes: torch's "call_function" count
  // Drops op and constant nodes no output depends on (left over from an instruction that
  // was traced part way before a graph break). Inputs stay: they are the calling convention;
  // random ops stay too (their draws advance the generator), except those from node
  // `drop_random_from` on: the nodes of an instruction that runs again for real.
  void eliminate_dead_code(size_t drop_random_from = SIZE_MAX);
  // The graph as TORCH_LOGS=graph_code prints it, under a "===== title =====" banner.
  std::string print(const std::string& title) const;
  // One node as Python-like source: `mul: "f32[8]" = mini.mul(l_x_, 2)`.
  std::string node_str(int id) const;

 private:
  std::string unique_name(const std::string& base);
  std::map<std::string, int> name_counts_;  // base name -> nodes named from it so far
  std::set<std::string> names_;             // every name given: "reshape_1" of a saved value is not reshape's second
};

// Output meta of `op` applied to inputs of these metas (with attrs), without running it.
// `wrapped` marks inputs that are Python numbers (they promote with the lowest priority).
// Symbolic sizes are decided with `graph`'s hints, each decision a SizeFact of it (null: the
// inputs have static sizes).
TensorMeta infer_meta(OpKind op, const std::vector<TensorMeta>& inputs,
                      const std::vector<bool>& wrapped, const Attrs& attrs, Graph* graph = nullptr);

// A data-less tensor of this meta (sizes, strides, dtype; symbols as they are): what the eager
// ops' argument checks (tensor/ops.h) and view functions are run on while tracing.
Tensor meta_tensor(const TensorMeta& meta, bool wrapped = false);

// "f32[8, 8][8, 1]cpu": dtype, sizes and strides, as torch prints graph meta.
std::string meta_str(const TensorMeta& meta, Device device = {});

// Whether op nodes `a` and `b` are outputs of one call of a multi-output op (op_outputs > 1):
// the same op on the same inputs with the same attributes but attrs.index. Executors run such a
// call once and hand each node its output.
bool same_call(const Node& a, const Node& b);

// Runs the graph with eager ops. `inputs` follow graph.inputs; returns graph.outputs.
std::vector<Tensor> run_graph(const Graph& graph, const std::vector<Tensor>& inputs);

}  // namespace mini::graph
