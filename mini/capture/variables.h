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
    SymInt,    // a dynamic size: x.shape[d] where d is symbolic (node = the symbol's code,
               // position = d, source = the tensor's source, obj = its value now, an int)
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
  bool size = false;           // Tuple: a mini.Size (x.shape, x.size()), rebuilt as one

  Var(Kind k) : kind(k) {}
  ~Var() { Py_XDECREF(obj); }
  Var(const Var&) = delete;
  Var& operator=(const Var&) = delete;

  bool is(Kind k) const { return kind == k; }
  std::string describe() const;  // for error messages: "Tensor", "int 3", "function helper"
};

VarRef make_constant(PyObject* value /* New, stolen */);
VarRef make_tensor(int node);
VarRef make_tuple_var(std::vector<VarRef> items, bool list = false);
VarRef make_method(VarRef self, const std::string& name);
VarRef null_var();

// Raised when capture meets something it cannot trace. `reason` says what and why.
struct Unsupported {
  std::string reason;
};

}  // namespace mini::capture
