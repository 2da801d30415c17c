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
#include <variant>
#include <vector>

#include "graph/graph.h"
#include "guards/size_expr.h"
#include "guards/source.h"

namespace mini::capture {

using guards::SourceRef;

struct Var;
using VarRef = std::shared_ptr<Var>;

// A Var is one of the kinds below (Dynamo's VariableTracker subclasses: TensorVariable,
// ConstantVariable, TupleVariable, ...), each a struct holding only its own fields, and what
// every kind has: the Source it was read from and the real object it stands for (`obj`; null
// for most values made while tracing).
// `v->is(Var::Kind::Tuple)` tests the kind; `v->as<Var::Tuple>()` is its fields or null;
// `v->get<Var::Tuple>()` its fields where the kind was tested before.
struct Var {
  struct Tensor {  // a graph value
    int node = -1;
    bool number = false;  // a Python int, float or bool of the user's code, carried in the
                          // graph as a 0-d "wrapped number" value
  };
  struct Constant {};  // obj: an immutable Python value (None, bool, int, float, str, slice,
                       // range, ...)
  struct Sequence {    // what a tuple and a list have (Dynamo's BaseListVariable)
    std::vector<VarRef> items;
  };
  struct Tuple : Sequence {
    bool size = false;  // a mini.Size (x.shape, x.size()), rebuilt as one
    // A record built while tracing (a namedtuple, a dataclass, a slice with a dynamic bound;
    // calls.cpp): its class, whose attributes `fields` name the items in order.
    VarRef record;
    std::vector<VarRef> fields;  // str constants
    bool object_record = false;  // the class is no tuple (a dataclass, slice): no indexing
  };
  struct List : Sequence {};  // a list made while tracing, or read from the frame
  // A function made while tracing (MAKE_FUNCTION): what CPython would have put in it.
  struct MadeFunction {
    VarRef defaults, kwdefaults;  // Tuple, Dict, or null
    std::vector<VarRef> closure;  // Cells
    SourceRef globals_source;     // null: the root frame's globals
  };
  struct Function {  // obj: a Python function (inlined when called)
    bool graph_function = false;  // a mini tensor function handled by the op table
    std::shared_ptr<MadeFunction> made;  // made while tracing: obj is a bare function of its
                                         // code and globals
  };
  struct Builtin {};  // obj: a builtin function or type (len, range, isinstance, print, ...)
  struct Method {     // a bound method of a tensor, module, list or constant: self.name
    VarRef self;
    std::string name;
  };
  struct Module {};  // obj: an nn.Module instance
  struct Object {    // obj: any other object (a Python module, a dtype, a super() object, a
                     // nullcontext, a grad mode): attribute reads only
    VarRef super_self, super_class;  // super(super_class, super_self) (interpret_locals.cpp)
    VarRef enter_result;  // contextlib.nullcontext(enter_result) made while tracing
  };
  struct Iterator {  // a for loop over a tuple, list, range or Sequential
    std::vector<VarRef> items;
    size_t position = 0;  // the next item
  };
  struct Null {};  // the NULL that CALL expects beside a callable
  // A dynamic size, or int arithmetic on dynamic sizes: x.shape[0] * 2 where dim 0 is
  // symbolic; obj is its value now (an int).
  struct SymInt {
    guards::SizeExpr expr;  // what it stands for
    int symbol = 0;         // the symbol's code when it is one input dim, else 0
  };
  struct Dict {  // obj: the real dict when read from the frame
    std::vector<VarRef> keys;    // constants
    std::vector<VarRef> values;  // in the keys' order; null: a value not read yet
  };
  struct DictView {  // dict.keys(), dict.values() or dict.items()
    VarRef dict;
    std::string name;  // "keys", "values" or "items"
  };
  // A closure cell: obj is the real cell (null for one made while tracing), source where its
  // contents are read on first use.
  struct Cell {
    VarRef contents;  // its value now (null: empty)
    bool contents_read = false;
    SourceRef cell_source;  // where the real cell is (a store into it is a side effect
                            // replayed there)
  };
  struct Partial {  // functools.partial made while tracing
    VarRef func;
    std::vector<VarRef> args;  // its leading arguments
    VarRef keywords;           // a Dict
  };
  // One alternative per Kind, in the same order.
  using Data = std::variant<Tensor, Constant, Tuple, List, Function, Builtin, Method, Module,
                            Object, Iterator, Null, SymInt, Dict, DictView, Cell, Partial>;
  enum class Kind {
    Tensor, Constant, Tuple, List, Function, Builtin, Method, Module, Object, Iterator, Null,
    SymInt, Dict, DictView, Cell, Partial,
  };

  Data data;
  SourceRef source;         // where it was read from; null for values made while tracing
  PyObject* obj = nullptr;  // owned (New reference)

  Var(Data d) : data(std::move(d)) {}  // NOLINT(google-explicit-constructor): a Var of one kind
  ~Var() { Py_XDECREF(obj); }
  Var(const Var&) = delete;
  Var& operator=(const Var&) = delete;

  Kind kind() const { return Kind(data.index()); }
  bool is(Kind k) const { return kind() == k; }
  // This Var's fields if it is of kind `K`, else null.
  template <class K>
  K* as() { return std::get_if<K>(&data); }
  template <class K>
  const K* as() const { return std::get_if<K>(&data); }
  // This Var's fields, where its kind is known to be `K` (else std::bad_variant_access).
  template <class K>
  K& get() { return std::get<K>(data); }
  Tensor& tensor() { return get<Tensor>(); }  // the kind is Tensor: its node, number
  // A Tuple's or a List's items, else null.
  Sequence* sequence();
  std::string describe() const;  // for error messages: "Tensor", "a Python number made dynamic",
                                 // "3", "<function helper ...>"
};

VarRef make_constant(PyObject* value /* New, stolen */);
VarRef make_tensor(int node);
// A Python number of the user's code carried in the graph (Var::Tensor::number) — or a constant.
bool is_python_number(const VarRef& v);
// A Python number of the user's code carried in the graph ("a Python number made dynamic").
inline bool is_dynamic_number(const VarRef& v) {
  const Var::Tensor* t = v->as<Var::Tensor>();
  return t && t->number;
}
// A tensor of the user's code (not a dynamic Python number, which the graph also holds).
inline bool is_tensor(const VarRef& v) {
  const Var::Tensor* t = v ? v->as<Var::Tensor>() : nullptr;
  return t && !t->number;
}
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
