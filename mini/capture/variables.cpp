// variables.cpp — Vars (variables.h): how they print and are made, and the state the traced
// code changes: cells, dicts made while tracing, and stores into program state (replayed
// after the graph as side effects).
#include "capture/trace_context.h"

namespace mini::capture {

// Var::Kind names the alternatives of Var::Data, in order.
template <Var::Kind k, class K>
constexpr bool kind_is = std::is_same_v<std::variant_alternative_t<size_t(k), Var::Data>, K>;
static_assert(kind_is<Var::Kind::Tensor, Var::Tensor> && kind_is<Var::Kind::Constant, Var::Constant> &&
              kind_is<Var::Kind::Tuple, Var::Tuple> && kind_is<Var::Kind::List, Var::List> &&
              kind_is<Var::Kind::Function, Var::Function> && kind_is<Var::Kind::Builtin, Var::Builtin> &&
              kind_is<Var::Kind::Method, Var::Method> && kind_is<Var::Kind::Module, Var::Module> &&
              kind_is<Var::Kind::Object, Var::Object> && kind_is<Var::Kind::Iterator, Var::Iterator> &&
              kind_is<Var::Kind::Null, Var::Null> && kind_is<Var::Kind::SymInt, Var::SymInt> &&
              kind_is<Var::Kind::Dict, Var::Dict> && kind_is<Var::Kind::DictView, Var::DictView> &&
              kind_is<Var::Kind::Cell, Var::Cell> && kind_is<Var::Kind::Partial, Var::Partial> &&
              std::variant_size_v<Var::Data> == size_t(Var::Kind::Partial) + 1);

Var::Sequence* Var::sequence() {
  if (auto* t = as<Tuple>()) return t;
  if (auto* l = as<List>()) return l;
  return nullptr;
}

std::string Var::describe() const {
  switch (kind()) {
    case Kind::Tensor: return as<Tensor>()->number ? "a Python number made dynamic" : "Tensor";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Null: return "NULL";
    case Kind::Method: return "method " + as<Method>()->name;
    case Kind::Iterator: return "iterator";
    case Kind::Dict: return "dict";
    case Kind::DictView: return "dict." + as<DictView>()->name + "()";
    case Kind::Cell: return "cell";
    case Kind::Partial: return "functools.partial(" + as<Partial>()->func->describe() + ", ...)";
    default: break;
  }
  if (!obj) return "?";
  PyObject* r = PyObject_Repr(obj);
  std::string s = r ? PyUnicode_AsUTF8(r) : "?";
  Py_XDECREF(r);
  PyErr_Clear();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

VarRef make_constant(PyObject* value) {
  auto v = std::make_shared<Var>(Var::Constant{});
  v->obj = value;
  return v;
}
VarRef make_tensor(int node) {
  return std::make_shared<Var>(Var::Tensor{node});
}
bool is_python_number(const VarRef& v) {
  if (auto* t = v->as<Var::Tensor>()) return t->number;
  return v->is(Var::Kind::Constant) && (PyLong_Check(v->obj) || PyFloat_Check(v->obj));
}
VarRef make_tuple_var(std::vector<VarRef> items, bool list) {
  if (list) return std::make_shared<Var>(Var::List{{std::move(items)}});
  return std::make_shared<Var>(Var::Tuple{{std::move(items)}});
}
VarRef make_method(VarRef self, const std::string& name) {
  return std::make_shared<Var>(Var::Method{std::move(self), name});
}
VarRef make_dict(std::vector<VarRef> keys, std::vector<VarRef> values) {
  return std::make_shared<Var>(Var::Dict{std::move(keys), std::move(values)});
}
VarRef null_var() {
  static VarRef null = std::make_shared<Var>(Var::Null{});
  return null;
}

// ---- cells, dicts and stores: the state the traced code changes ---------------------------

VarRef cell_var(TraceContext& ctx, PyObject* cell, SourceRef contents_source, SourceRef cell_source) {
  auto found = ctx.cells.find(cell);
  if (found != ctx.cells.end()) return found->second;  // one Var per real cell: every closure sees each store
  auto v = std::make_shared<Var>(Var::Cell{nullptr, false, std::move(cell_source)});
  v->obj = cell;
  Py_INCREF(cell);
  v->source = std::move(contents_source);
  ctx.cells[cell] = v;
  return v;
}

VarRef new_cell(VarRef contents) {
  return std::make_shared<Var>(Var::Cell{std::move(contents), true, nullptr});
}

VarRef cell_get(TraceContext& ctx, const VarRef& cell) {
  if (!cell || !cell->is(Var::Kind::Cell)) unsupported("internal: a closure variable without its cell");
  Var::Cell& c = cell->get<Var::Cell>();
  if (!c.contents_read) {  // first read of a real cell: its value at entry, guarded
    PyObject* v = cell->source ? guards::fetch(*cell->source, ctx.root) : nullptr;
    if (v) {
      VarRef wrapped;
      try {
        wrapped = wrap(ctx, v, cell->source);
      } catch (...) {
        Py_DECREF(v);
        throw;
      }
      Py_DECREF(v);
      c.contents = wrapped;
    }
    c.contents_read = true;
  }
  if (!c.contents)
    unsupported("a closure variable referenced before assignment (an empty cell)");
  return c.contents;
}

void cell_set(TraceContext& ctx, const VarRef& cell, VarRef value) {
  if (!cell || !cell->is(Var::Kind::Cell)) unsupported("internal: a store into a closure variable without its cell");
  Var::Cell& c = cell->get<Var::Cell>();
  c.contents = std::move(value);
  c.contents_read = true;
  ctx.mutations++;
  if (c.cell_source && std::find(ctx.stored_cells.begin(), ctx.stored_cells.end(), cell) == ctx.stored_cells.end())
    ctx.stored_cells.push_back(cell);
}

int dict_find(const VarRef& dict, const VarRef& key) {
  if (!key->is(Var::Kind::Constant)) unsupported("a dict key that is not a Python constant (" + key->describe() + ")");
  const Var::Dict* d = dict->as<Var::Dict>();
  for (size_t i = 0; d && i < d->keys.size(); i++) {
    PyObject* k = d->keys[i]->obj;
    if (k == key->obj) return (int)i;
    int eq = PyObject_RichCompareBool(k, key->obj, Py_EQ);
    if (eq < 0) { PyErr_Clear(); unsupported("comparing dict keys raised an error"); }
    if (eq) return (int)i;
  }
  return -1;
}

void dict_set(TraceContext& ctx, const VarRef& dict, const VarRef& key, VarRef value) {
  if (!made_in_trace(dict)) {
    // a dict of the frame's (a global, an argument): the Var changes, so that the trace reads
    // what it stored, and the store is a side effect replayed into the real dict
    if (!dict->source || !dict->obj || !PyDict_CheckExact(dict->obj) || !key->is(Var::Kind::Constant) ||
        !PyUnicode_Check(key->obj))
      unsupported("a store into a dict that comes from outside the compiled code (other than a plain dict of str "
                  "keys read from the frame) is not supported by mini's capture");
    int i = dict_find(dict, key);
    Var::Dict& d = dict->get<Var::Dict>();
    if (i < 0) {
      d.keys.push_back(key);
      d.values.push_back(value);
    } else {
      d.values[i] = value;
    }
    record_store(ctx, SideEffect::Kind::Item, dict->obj, dict->source, PyUnicode_AsUTF8(key->obj), value);
    return;
  }
  int i = dict_find(dict, key);
  if (PyObject_Hash(key->obj) == -1) { PyErr_Clear(); unsupported("an unhashable dict key"); }
  Var::Dict& d = dict->get<Var::Dict>();
  if (i >= 0) d.values[i] = std::move(value);
  else { d.keys.push_back(key); d.values.push_back(std::move(value)); }
  ctx.mutations++;
}

bool made_in_trace(const VarRef& v) { return !v->source && !v->obj; }

VarRef find_store(TraceContext& ctx, SideEffect::Kind kind, PyObject* target, const std::string& name) {
  for (auto& s : ctx.stores)
    if (s.kind == kind && s.target == target && s.name == name) return s.value;
  return nullptr;
}

void record_store(TraceContext& ctx, SideEffect::Kind kind, PyObject* target, SourceRef target_source,
                  const std::string& name, VarRef value) {
  ctx.mutations++;
  for (auto& s : ctx.stores)
    if (s.kind == kind && s.target == target && s.name == name) { s.value = std::move(value); return; }
  ctx.stores.push_back({kind, target, std::move(target_source), name, std::move(value)});
}

}  // namespace mini::capture
