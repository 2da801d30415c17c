// source.cpp — making Sources, printing them as Dynamo does (L['x'], G['y'], .attr, [i]),
// and fetch(): the value at a Source in a frame.
#include "source.h"

#include <type_traits>

#include "size_expr.h"

namespace mini::guards {

namespace {

// Each kind printed as Dynamo prints it, given its base printed (`base`, "" for no base).
std::string print(const Source::Local& s, const std::string&) { return "L['" + s.name + "']"; }
std::string print(const Source::Global& s, const std::string&) { return "G['" + s.name + "']"; }
std::string print(const Source::Attr& s, const std::string& base) { return base + "." + s.name; }
std::string print(const Source::Item& s, const std::string& base) {
  return base + "[" + std::to_string(s.index) + "]";
}
std::string print(const Source::DictItem& s, const std::string& base) { return base + "['" + s.key + "']"; }
std::string print(const Source::CellContents&, const std::string& base) { return base + ".cell_contents"; }
std::string print(const Source::Stack& s, const std::string&) { return "___stack" + std::to_string(s.index); }
std::string print(const Source::IterItems&, const std::string& base) { return "___remaining(" + base + ")"; }
std::string print(const Source::Closure& s, const std::string&) { return "___closure_cell('" + s.name + "')"; }
std::string print(const Source::GlobalIn& s, const std::string& base) {
  return "___global_or_builtin(" + base + ", '" + s.name + "')";
}
std::string print(const Source::TensorClass&, const std::string&) { return "mini.Tensor"; }
std::string print(const Source::Size& s, const std::string&) { return s.expr->str(); }

SourceRef make(Source::Kind kind, SourceRef base = nullptr) {
  return std::make_shared<Source>(Source{std::move(kind), std::move(base)});
}

}  // namespace

std::string Source::str() const {
  std::string printed_base = base ? base->str() : "";
  return std::visit([&](const auto& s) { return print(s, printed_base); }, kind);
}

SourceRef Source::size_of(const SizeExpr& expr) { return make(Size{std::make_shared<const SizeExpr>(expr)}); }
SourceRef Source::local(int index, const std::string& name) { return make(Local{index, name}); }
SourceRef Source::global(const std::string& name) { return make(Global{name}); }
SourceRef Source::attr(SourceRef base, const std::string& name) { return make(Attr{name}, std::move(base)); }
SourceRef Source::item(SourceRef base, int index) { return make(Item{index}, std::move(base)); }
SourceRef Source::dict_item(SourceRef base, const std::string& key) {
  return make(DictItem{key}, std::move(base));
}
SourceRef Source::stack(int index) { return make(Stack{index}); }
SourceRef Source::iter_items(SourceRef base) { return make(IterItems{}, std::move(base)); }
SourceRef Source::closure(int index, const std::string& name) { return make(Closure{index, name}); }
SourceRef Source::global_in(SourceRef globals, const std::string& name) {
  return make(GlobalIn{name}, std::move(globals));
}
SourceRef Source::tensor_class() {
  static const SourceRef cls = make(TensorClass{});
  return cls;
}

namespace {
PyObject* g_tensor_class = nullptr;
}  // namespace

void set_tensor_class(PyObject* type) { g_tensor_class = type; }

SourceRef Source::cell_contents(SourceRef base) { return make(CellContents{}, std::move(base)); }

PyObject* Source::key() const {
  if (key_) return key_;
  const std::string* name = nullptr;
  if (auto* g = as<Global>()) name = &g->name;
  else if (auto* a = as<Attr>()) name = &a->name;
  else if (auto* d = as<DictItem>()) name = &d->key;
  else if (auto* in = as<GlobalIn>()) name = &in->name;
  key_ = PyUnicode_InternFromString(name ? name->c_str() : "");  // a new reference, never released
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

namespace {

// One step of fetch for each kind: the value given its base's value (`base`, Borrowed, null
// for the kinds without a base) and, for the named kinds, the name's interned str (`key`,
// Borrowed). New reference, or NULL (no error set).
PyObject* fetch_kind(const Source::Local& s, PyObject*, PyObject*, const FrameValues& f) {
  if (s.index >= f.nlocals) return nullptr;
  PyObject* v = f.locals[s.index];
  Py_XINCREF(v);
  return v;
}
PyObject* fetch_kind(const Source::Global&, PyObject* key, PyObject*, const FrameValues& f) {
  PyObject* v = PyDict_GetItemWithError(f.globals, key);
  if (!v && !PyErr_Occurred()) v = PyDict_GetItemWithError(f.builtins, key);
  PyErr_Clear();
  Py_XINCREF(v);
  return v;
}
PyObject* fetch_kind(const Source::GlobalIn&, PyObject* key, PyObject* base, const FrameValues&) {
  return global_or_builtin(base, key);
}
PyObject* fetch_kind(const Source::Attr&, PyObject* key, PyObject* base, const FrameValues&) {
  PyObject* v = PyObject_GetAttr(base, key);
  if (!v) PyErr_Clear();
  return v;
}
PyObject* fetch_kind(const Source::Item& s, PyObject*, PyObject* base, const FrameValues&) {
  PyObject* v = nullptr;
  if (PyTuple_Check(base) && s.index < PyTuple_GET_SIZE(base)) v = PyTuple_GET_ITEM(base, s.index);
  else if (PyList_Check(base) && s.index < PyList_GET_SIZE(base)) v = PyList_GET_ITEM(base, s.index);
  Py_XINCREF(v);
  return v;
}
PyObject* fetch_kind(const Source::DictItem&, PyObject* key, PyObject* base, const FrameValues&) {
  PyObject* v = PyDict_Check(base) ? PyDict_GetItemWithError(base, key) : nullptr;
  if (!v) PyErr_Clear();
  Py_XINCREF(v);
  return v;
}
PyObject* fetch_kind(const Source::Stack& s, PyObject*, PyObject*, const FrameValues& f) {
  if (s.index >= f.nstack) return nullptr;
  PyObject* v = f.stack[s.index];
  Py_XINCREF(v);
  return v;
}
PyObject* fetch_kind(const Source::IterItems&, PyObject*, PyObject* base, const FrameValues&) {
  return remaining_items(base);
}
PyObject* fetch_kind(const Source::Closure& s, PyObject*, PyObject*, const FrameValues& f) {
  if (!f.closure || !PyTuple_Check(f.closure) || s.index >= PyTuple_GET_SIZE(f.closure)) return nullptr;
  PyObject* v = PyTuple_GET_ITEM(f.closure, s.index);
  Py_INCREF(v);
  return v;
}
PyObject* fetch_kind(const Source::CellContents&, PyObject*, PyObject* base, const FrameValues&) {
  PyObject* v = PyCell_Check(base) ? PyCell_GET(base) : nullptr;
  Py_XINCREF(v);
  return v;
}
PyObject* fetch_kind(const Source::TensorClass&, PyObject*, PyObject*, const FrameValues&) {
  Py_XINCREF(g_tensor_class);
  return g_tensor_class;
}
PyObject* fetch_kind(const Source::Size& s, PyObject*, PyObject*, const FrameValues& f) {
  int64_t v = 0;
  return s.expr->evaluate(f, &v) ? PyLong_FromLongLong(v) : nullptr;
}

// The kinds whose step looks a name up (fetch_kind's `key`).
template <class K>
constexpr bool looks_up_name = std::is_same_v<K, Source::Global> || std::is_same_v<K, Source::GlobalIn> ||
                               std::is_same_v<K, Source::Attr> || std::is_same_v<K, Source::DictItem>;

}  // namespace

PyObject* fetch_from(const Source& s, PyObject* base, const FrameValues& f) {
  if (s.base && !base) return nullptr;
  return std::visit(
      [&](const auto& kind) {
        using K = std::decay_t<decltype(kind)>;
        PyObject* key = looks_up_name<K> ? s.key() : nullptr;
        return fetch_kind(kind, key, base, f);
      },
      s.kind);
}

}  // namespace mini::guards
