// variables.h — what the symbolic interpreter keeps on its stack and in its locals instead
// of real Python objects (Dynamo's VariableTrackers).
//
// A Var is a tensor in the graph being built, a Python constant, a container of Vars, or
// an opaque Python object the interpreter knows how to use (a function to inline, an
// nn.Module, a Python module, a builtin). A Var read from the frame carries its Source,
// and reading it installed the guards that make reusing the graph safe.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "guards/size_expr.h"
#include "guards/source.h"

namespace mini::capture {

using guards::SourceRef;

struct Var;
using VarRef = std::shared_ptr<Var>;

struct Var {
  enum class Kind {
    Tensor,    // node: a graph value
    Constant,  // obj: an immutable Python value (None, bool, int, float, str, slice, range, ...)
    Tuple,     // items
    List,      // items (a list made while tracing)
    Function,  // obj: a Python function (inlined when called)
    Builtin,   // obj: a builtin function or type (len, range, isinstance, print, ...)
    Method,    // self + name: a bound method of a tensor, module, list or constant
    Module,    // obj: an nn.Module instance
    Object,    // obj: any other object (a Python module, a dtype): attribute reads only
    Iterator,  // items + position: a for loop over a tuple, list, range or Sequential
    Null,      // the NULL that CALL expects beside a callable
    SymInt,    // a dynamic size, or int arithmetic on dynamic sizes: x.shape[0] * 2 where
               // dim 0 is symbolic (expr = what it stands for, obj = its value now, an int;
               // node = the symbol's code when it is one input dim, else 0)
    Dict,      // keys (constants) + items (their values, in order); obj: the real dict when
               // read from the frame (a null item is a value not read yet)
    DictView,  // self: the Dict, name: "keys", "values" or "items"
    Cell,      // a closure cell: see contents
    Partial,   // functools.partial made while tracing: self the callable, items its leading
               // arguments, contents a Dict of its keywords
  };
  Kind kind;
  SourceRef source;            // where it was read from; null for values made while tracing
  PyObject* obj = nullptr;     // owned (New reference)
  int node = -1;               // Tensor: the graph node
  std::vector<VarRef> items;   // Tuple, List, Iterator
  size_t position = 0;         // Iterator
  VarRef self;                 // Method
  std::string name;            // Method
  bool graph_function = false; // Function: a mini tensor function handled by the op table
  std::vector<VarRef> keys;    // Dict

  // Cell: obj is the real cell (null for one made while tracing), source where its contents
  // are read on first use, cell_source where the real cell is (a store into it is a side
  // effect replayed there), contents its value now (null: empty).
  VarRef contents;
  bool contents_read = false;
  SourceRef cell_source;

  // Function made while tracing (MAKE_FUNCTION): obj is a bare function of its code and
  // globals; what CPython would have put in it lives here.
  struct MadeFunction {
    VarRef defaults, kwdefaults;  // Tuple, Dict, or null
    std::vector<VarRef> closure;  // Cells
    SourceRef globals_source;     // null: the root frame's globals
  };
  std::shared_ptr<MadeFunction> made;
  bool number = false;         // Tensor: a Python int, float or bool of the user's code,
                               // carried in the graph as a 0-d "wrapped number" value
  guards::SizeExpr expr;       // SymInt
  bool size = false;           // Tuple: a mini.Size (x.shape, x.size()), rebuilt as one

  Var(Kind k) : kind(k) {}
  ~Var() { Py_XDECREF(obj); }
  Var(const Var&) = delete;
  Var& operator=(const Var&) = delete;

  bool is(Kind k) const { return kind == k; }
  std::string describe() const;  // for error messages: "Tensor", "a Python number made dynamic",
                                 // "3", "<function helper ...>"
};

VarRef make_constant(PyObject* value /* New, stolen */);
VarRef make_tensor(int node);
// A Python number of the user's code carried in the graph (Var::number) — or a constant.
bool is_python_number(const VarRef& v);
VarRef make_tuple_var(std::vector<VarRef> items, bool list = false);
VarRef make_method(VarRef self, const std::string& name);
VarRef null_var();
VarRef make_dict(std::vector<VarRef> keys, std::vector<VarRef> values);

// Raised when capture meets something it cannot trace. `reason` says what and why.
struct Unsupported {
  std::string reason;
  // The whole unit runs in CPython (nothing of it compiled), not only from this instruction
  // on: for what no part of the unit can be compiled with (a CUDA tensor, until issue 13).
  bool skip_unit = false;
  // Raised inside a function being inlined (the call is where the unit breaks), not by the
  // unit's own instruction.
  bool in_callee = false;
};

}  // namespace mini::capture
