// source.cpp — making Sources, printing them as Dynamo does (L['x'], G['y'], .attr, [i]),
// and fetch(): the value at a Source in a frame.
#include "source.h"

#include "size_expr.h"

namespace mini::guards {

std::string Source::str() const {
  switch (kind) {
    case Kind::Local: return "L['" + name + "']";
    case Kind::Global: return "G['" + name + "']";
    case Kind::Attr: return base->str() + "." + name;
    case Kind::Item: return base->str() + "[" + std::to_string(index) + "]";
    case Kind::DictItem: return base->str() + "['" + name + "']";
    case Kind::CellContents: return base->str() + ".cell_contents";
    case Kind::Stack: return "___stack" + std::to_string(index);
    case Kind::IterItems: return "___remaining(" + base->str() + ")";
    case Kind::Closure: return "___closure_cell('" + name + "')";
    case Kind::GlobalIn: return "___global_or_builtin(" + base->str() + ", '" + name + "')";
    case Kind::TensorClass: return "mini.Tensor";
    case Kind::Size: return size->str();
  }
  return "?";
}

SourceRef Source::size_of(const SizeExpr& expr) {
  auto s = std::make_shared<Source>(Source{Kind::Size, 0, "", nullptr});
  s->size = std::make_shared<const SizeExpr>(expr);
  return s;
}
SourceRef Source::local(int index, const std::string& name) {
  return std::make_shared<Source>(Source{Kind::Local, index, name, nullptr});
}
SourceRef Source::global(const std::string& name) {
  return std::make_shared<Source>(Source{Kind::Global, 0, name, nullptr});
}
SourceRef Source::attr(SourceRef base, const std::string& name) {
  return std::make_shared<Source>(Source{Kind::Attr, 0, name, std::move(base)});
}
SourceRef Source::item(SourceRef base, int index) {
  return std::make_shared<Source>(Source{Kind::Item, index, "", std::move(base)});
}
SourceRef Source::dict_item(SourceRef base, const std::string& key) {
  return std::make_shared<Source>(Source{Kind::DictItem, 0, key, std::move(base)});
}
SourceRef Source::stack(int index) {
  return std::make_shared<Source>(Source{Kind::Stack, index, "", nullptr});
}
SourceRef Source::iter_items(SourceRef base) {
  return std::make_shared<Source>(Source{Kind::IterItems, 0, "", std::move(base)});
}
SourceRef Source::closure(int index, const std::string& name) {
  return std::make_shared<Source>(Source{Kind::Closure, index, name, nullptr});
}
SourceRef Source::global_in(SourceRef globals, const std::string& name) {
  return std::make_shared<Source>(Source{Kind::GlobalIn, 0, name, std::move(globals)});
}
SourceRef Source::tensor_class() {
  static const SourceRef cls = std::make_shared<Source>(Source{Kind::TensorClass, 0, "", nullptr});
  return cls;
}

namespace {
PyObject* g_tensor_class = nullptr;
}  // namespace

void set_tensor_class(PyObject* type) { g_tensor_class = type; }

SourceRef Source::cell_contents(SourceRef base) {
  return std::make_shared<Source>(Source{Kind::CellContents, 0, "", std::move(base)});
}

PyObject* Source::key() const {
  if (!key_) key_ = PyUnicode_InternFromString(name.c_str());  // a new reference, never released
  return key_;
}

PyObject* fetch(const Source& s, const FrameValues& f) {
  if (!s.base) return fetch_from(s, nullptr, f);
  PyObject* base = fetch(*s.base, f);
  PyObject* v = base ? fetch_from(s, base, f) : nullptr;
  Py_XDECREF(base);
  return v;
}

namespace {

// `key` in the module globals `globals` (Borrowed), else in its builtins, as LOAD_GLOBAL finds
// it in a function of that module. New reference, or NULL (no error set).
PyObject* global_or_builtin(PyObject* globals, PyObject* key) {
  PyObject* v = nullptr;
  if (PyDict_Check(globals)) {
    v = PyDict_GetItemWithError(globals, key);
    PyObject* b = v ? nullptr : PyDict_GetItemString(globals, "__builtins__");
    if (b && PyModule_Check(b)) b = PyModule_GetDict(b);
    if (!v && !b) b = PyEval_GetBuiltins();
    if (!v && b && PyDict_Check(b)) v = PyDict_GetItemWithError(b, key);
    PyErr_Clear();
  }
  Py_XINCREF(v);
  return v;
}

// The items a tuple iterator (Borrowed) has left, as a tuple, read from its __reduce__():
// (iter, (tuple,), position). New reference, or NULL (no error set).
PyObject* remaining_items(PyObject* iterator) {
  PyObject* r = PyObject_CallMethod(iterator, "__reduce__", nullptr);
  PyObject* out = nullptr;
  if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) >= 2) {
    PyObject* args = PyTuple_GET_ITEM(r, 1);
    PyObject* seq = PyTuple_Check(args) && PyTuple_GET_SIZE(args) == 1 ? PyTuple_GET_ITEM(args, 0) : nullptr;
    Py_ssize_t pos = PyTuple_GET_SIZE(r) > 2 ? PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 2)) : 0;
    if (seq && PyTuple_Check(seq)) out = PyTuple_GetSlice(seq, pos, PyTuple_GET_SIZE(seq));
    else if (!seq) out = PyTuple_New(0);  // an exhausted iterator reduces to iter(())
  }
  Py_XDECREF(r);
  if (!out) PyErr_Clear();
  return out;
}

}  // namespace

PyObject* fetch_from(const Source& s, PyObject* base, const FrameValues& f) {
  if (s.base && !base) return nullptr;
  switch (s.kind) {
    case Source::Kind::Local: {
      if (s.index >= f.nlocals) return nullptr;
      PyObject* v = f.locals[s.index];
      Py_XINCREF(v);
      return v;
    }
    case Source::Kind::Global: {
      PyObject* v = PyDict_GetItemWithError(f.globals, s.key());
      if (!v && !PyErr_Occurred()) v = PyDict_GetItemWithError(f.builtins, s.key());
      PyErr_Clear();
      Py_XINCREF(v);
      return v;
    }
    case Source::Kind::GlobalIn: return global_or_builtin(base, s.key());
    case Source::Kind::Attr: {
      PyObject* v = PyObject_GetAttr(base, s.key());
      if (!v) PyErr_Clear();
      return v;
    }
    case Source::Kind::Item: {
      PyObject* v = nullptr;
      if (PyTuple_Check(base) && s.index < PyTuple_GET_SIZE(base)) v = PyTuple_GET_ITEM(base, s.index);
      else if (PyList_Check(base) && s.index < PyList_GET_SIZE(base)) v = PyList_GET_ITEM(base, s.index);
      Py_XINCREF(v);
      return v;
    }
    case Source::Kind::DictItem: {
      PyObject* v = PyDict_Check(base) ? PyDict_GetItemWithError(base, s.key()) : nullptr;
      if (!v) PyErr_Clear();
      Py_XINCREF(v);
      return v;
    }
    case Source::Kind::Stack: {
      if (s.index >= f.nstack) return nullptr;
      PyObject* v = f.stack[s.index];
      Py_XINCREF(v);
      return v;
    }
    case Source::Kind::IterItems: return remaining_items(base);
    case Source::Kind::Closure: {
      if (!f.closure || !PyTuple_Check(f.closure) || s.index >= PyTuple_GET_SIZE(f.closure)) return nullptr;
      PyObject* v = PyTuple_GET_ITEM(f.closure, s.index);
      Py_INCREF(v);
      return v;
    }
    case Source::Kind::CellContents: {
      PyObject* v = PyCell_Check(base) ? PyCell_GET(base) : nullptr;
      Py_XINCREF(v);
      return v;
    }
    case Source::Kind::TensorClass:
      Py_XINCREF(g_tensor_class);
      return g_tensor_class;
    case Source::Kind::Size: {
      int64_t v = 0;
      return s.size->evaluate(f, &v) ? PyLong_FromLongLong(v) : nullptr;
    }
  }
  return nullptr;
}

}  // namespace mini::guards
