// source.h — where a value of a frame comes from: a local, a global, an attribute or item
// of another source. Capture attaches a Source to every value it reads from the frame;
// guards check the value found there on each call, and compiled code fetches its graph
// inputs from the same Sources.
//
// Printed the way Dynamo prints them: L['x'], G['SCALE'], L['self'].weight, L['xs'][0].
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace mini::guards {

struct Source;
using SourceRef = std::shared_ptr<const Source>;
struct SizeExpr;

// Where a value comes from: one struct per kind, holding only what that kind needs (torch's
// Source subclasses: LocalSource, AttrSource, GetItemSource, ...), and what every kind has:
// the source it reads from (`base`) and its name as an interned str. `kind` is the name
// of each kind.
struct Source {
  struct Local {  // the frame's localsplus slot (free variables read through their cell)
    static constexpr const char* kind = "Local";
    int index = 0;
    std::string name;
  };
  struct Global {  // the frame's globals, then builtins
    static constexpr const char* kind = "Global";
    std::string name;
  };
  struct Attr {  // base.name
    static constexpr const char* kind = "Attr";
    std::string name;
  };
  struct Item {  // base[index] (a tuple or list)
    static constexpr const char* kind = "Item";
    int index = 0;
  };
  struct DictItem {  // base[key] (a dict with str keys)
    static constexpr const char* kind = "DictItem";
    std::string key;
  };
  struct CellContents {  // base.cell_contents (base is a cell)
    static constexpr const char* kind = "CellContents";
  };
  struct Stack {  // the value stack at the start of a resume unit
    static constexpr const char* kind = "Stack";
    int index = 0;
  };
  struct IterItems {  // the items the tuple iterator `base` has left, as a tuple (not consumed)
    static constexpr const char* kind = "IterItems";
  };
  struct Closure {  // the cell at position `index` of the frame's function's closure
    static constexpr const char* kind = "Closure";
    int index = 0;
    std::string name;
  };
  struct GlobalIn {  // name in the globals dict `base` (another module's), then in its builtins
    static constexpr const char* kind = "GlobalIn";
    std::string name;
  };
  struct TensorClass {  // mini.Tensor itself (set_tensor_class), whose methods a program may replace
    static constexpr const char* kind = "TensorClass";
  };
  struct Size {  // an int computed from the frame's tensors' sizes (a dynamic size used as a
                 // number in tensor math: x * x.shape[0])
    static constexpr const char* kind = "Size";
    std::shared_ptr<const SizeExpr> expr;
  };
  using Kind = std::variant<Local, Global, Attr, Item, DictItem, CellContents, Stack, IterItems,
                            Closure, GlobalIn, TensorClass, Size>;

  Kind kind;
  SourceRef base;  // the source this one reads from (Attr, Item, DictItem, CellContents,
                   // IterItems, GlobalIn); null for the others
  // The kind's name (Global, Attr, DictItem, GlobalIn) as an interned Python str, made on first
  // use (key()) and kept for the process: guards and input fetches look the same names up on
  // every call, and making the str each time (decode, allocate, hash) was a third of a guard
  // check's time.
  mutable PyObject* key_ = nullptr;

  // This source's kind if it is `K`, else null.
  template <class K>
  const K* as() const { return std::get_if<K>(&kind); }
  std::string str() const;
  PyObject* key() const;  // Borrowed; needs the GIL
  static SourceRef local(int index, const std::string& name);
  static SourceRef global(const std::string& name);
  static SourceRef attr(SourceRef base, const std::string& name);
  static SourceRef item(SourceRef base, int index);
  static SourceRef dict_item(SourceRef base, const std::string& key);
  static SourceRef cell_contents(SourceRef base);
  static SourceRef stack(int index);
  static SourceRef iter_items(SourceRef base);
  static SourceRef closure(int index, const std::string& name);
  static SourceRef global_in(SourceRef globals, const std::string& name);
  static SourceRef tensor_class();
  static SourceRef size_of(const SizeExpr& expr);
};

// The class TensorClass sources read (mini.Tensor; set once by the Python module, lives forever).
void set_tensor_class(PyObject* type);

// What a Source is read against: the frame's values at entry. All Borrowed.
struct FrameValues {
  PyObject* const* locals = nullptr;  // one per localsplus slot (free vars: the cell contents)
  int nlocals = 0;
  PyObject* globals = nullptr;
  PyObject* builtins = nullptr;
  PyObject* const* stack = nullptr;   // a resume unit's entry stack (NULL entries allowed)
  int nstack = 0;
  PyObject* closure = nullptr;        // the function's closure tuple (cells), or NULL
};

// The value at `source`: New reference, or NULL with no Python error set if it is missing
// (an unbound local, a missing attribute). Never runs user code for Local/Global/Item/
// DictItem/CellContents; Attr calls getattr (the same call the traced code made).
PyObject* fetch(const Source& source, const FrameValues& frame);
// One step of fetch: the value at `source` given the value at its base (Borrowed; ignored for
// the sources without a base, NULL where the base is missing). New reference or NULL.
PyObject* fetch_from(const Source& source, PyObject* base, const FrameValues& frame);

}  // namespace mini::guards
