// rebuild.cpp — reconstruction (Dynamo's PyCodegen): how each Var becomes a real object
// again after the graph ran (rebuild: a Var -> an OutputSpec, at trace time), and the
// stores the trace made, as side effects to replay.
#include "capture/frame_interpreter.h"
#include "capture/unit.h"

#include <optional>

namespace mini::capture {

// A value never read while tracing, as it was: a local slot as it is (unbound stays
// unbound), anything else read again from its source.
OutputSpec unchanged(const SourceRef& source) {
  if (const auto* local = source->as<guards::Source::Local>()) return OutputSpec::Local{local->index};
  return OutputSpec::Read{source};
}

namespace {

// A list, dict, cell or function made while tracing is built once per run, however many
// places hold it (a later place, or a cycle through a closure, is an Alias of it). Returns
// that alias's number where `v` is such a later place; else -1, numbering `v` as the object's
// first place in *first (where it is one; else *first is -1).
int alias_of_built(TraceContext& ctx, const VarRef& v, int* first) {
  *first = -1;
  const Var::Function* function = v->as<Var::Function>();
  bool mutable_made = (v->is(Var::Kind::List) || v->is(Var::Kind::Dict)) ? made_in_trace(v)
                      : v->is(Var::Kind::Cell) ? !v->obj : function && function->made;
  if (!mutable_made) return -1;
  auto found = ctx.alias_of.find(v.get());
  if (found != ctx.alias_of.end()) return found->second;
  *first = (int)ctx.alias_of.size();
  ctx.alias_of[v.get()] = *first;
  return -1;
}

// The position of `node` among the graph's outputs, made an output if it is not one yet.
int output_index(TraceContext& ctx, int node) {
  auto& outs = ctx.graph().outputs;
  auto it = std::find(outs.begin(), outs.end(), node);
  int index = (int)(it - outs.begin());
  if (it == outs.end()) outs.push_back(node);
  return index;
}

// The views `alias` takes of its storage's base, as ops to replay on `source` (null: on graph
// output `index`); one with dynamic sizes (`where`: of what) cannot be replayed.
OutputSpec::View view_of(TraceContext& ctx, const Alias& alias, SourceRef source, int index, const std::string& where) {
  OutputSpec::View view{std::move(source), index, {}};
  for (int id : alias.views) {
    const graph::Node& n = ctx.graph().nodes[id];
    if (n.symbolic_attrs) unsupported("a view with dynamic sizes " + where);
    view.views.push_back({n.op, n.attrs});
  }
  return view;
}

// A tensor: the real input where it is one (handed on as it is, or written in place), a view
// made again where an instruction that raises must see eager's tensors, else a graph output.
OutputSpec rebuild_tensor(TraceContext& ctx, const Var::Tensor& v) {
  const Alias& alias = alias_of(ctx, v.node);
  // An input handed on as it is: the real input (AOTAutograd's output-is-input), not a
  // graph output, which a training graph would make a new tensor with an autograd history
  const graph::Node& n = ctx.graph().nodes[v.node];
  if (n.kind == graph::NodeKind::Input && !n.wrapped_number && !alias.storage->mutated) {
    const auto& inputs = ctx.graph().inputs;
    return OutputSpec::Read{
        ctx.trace.input_sources.at(std::find(inputs.begin(), inputs.end(), v.node) - inputs.begin())};
  }
  // Before an instruction that raises a user error, a view is rebuilt as a view (of the
  // input, or of the graph output of its base): the instruction must see eager's tensors.
  bool as_view = ctx.trace.user_error && alias.exact;
  if (as_view && alias.storage->input < 0 && !alias.views.empty())
    return view_of(ctx, alias, nullptr, output_index(ctx, alias.storage->base), "before an instruction that raises");
  if (alias.storage->input >= 0 && (alias.storage->mutated || as_view)) {
    // a graph input written in place (or a view of it): the real input, which the
    // write-back updates, so that it keeps sharing memory with what eager code holds
    SourceRef input = ctx.trace.input_sources.at(alias.storage->input);
    if (alias.views.empty()) return OutputSpec::Read{input};
    return view_of(ctx, alias, input, 0, "of an input written in place");
  }
  int index = output_index(ctx, v.node);
  if (v.number) return OutputSpec::Number{index};
  return OutputSpec::GraphOutput{index};
}

std::vector<OutputSpec> rebuild_all(TraceContext& ctx, const std::vector<VarRef>& vars, size_t from = 0) {
  std::vector<OutputSpec> specs;
  for (size_t i = from; i < vars.size(); i++) specs.push_back(rebuild(ctx, vars[i]));
  return specs;
}

// A tuple, a size, or a list made while tracing: its items rebuilt; a record (a tuple of a
// class) as cls(*fields). Null for the caller's own list: it is read again.
std::optional<OutputSpec> rebuild_sequence(TraceContext& ctx, const VarRef& v) {
  if (const Var::List* list = v->as<Var::List>()) {
    if (!made_in_trace(v)) return std::nullopt;
    return OutputSpec(OutputSpec::List{rebuild_all(ctx, list->items)});
  }
  const Var::Tuple& tuple = v->get<Var::Tuple>();
  if (tuple.size) return OutputSpec(OutputSpec::Size{rebuild_all(ctx, tuple.items)});
  // a record: cls(*fields)
  return OutputSpec(OutputSpec::Tuple{rebuild_all(ctx, tuple.items), OwnedRef(tuple.record ? tuple.record->obj : nullptr)});
}

// A dict made while tracing: its keys and values in order. Null for a dict from the frame,
// unchanged: it is read again.
std::optional<OutputSpec> rebuild_dict(TraceContext& ctx, const VarRef& v) {
  if (!made_in_trace(v)) return std::nullopt;
  const Var::Dict& made = v->get<Var::Dict>();
  OutputSpec::Dict dict;
  for (size_t i = 0; i < made.keys.size(); i++) {
    dict.items.push_back(rebuild(ctx, made.keys[i]));
    dict.items.push_back(rebuild(ctx, made.values[i]));
  }
  return OutputSpec(std::move(dict));
}

std::unique_ptr<OutputSpec> boxed(OutputSpec s) { return std::make_unique<OutputSpec>(std::move(s)); }

// A cell: a real cell is the same cell (stores into it are replayed); one made while tracing
// is a new cell of its contents.
OutputSpec rebuild_cell(TraceContext& ctx, const VarRef& v) {
  const Var::Cell& c = v->get<Var::Cell>();
  if (v->obj) return OutputSpec::Read{c.cell_source};
  OutputSpec::Cell cell;
  if (!c.contents_read) cell.contents = boxed(unchanged(v->source));  // a root argument never read
  else if (c.contents) cell.contents = boxed(rebuild(ctx, c.contents));
  return cell;
}

// A function made while tracing (MAKE_FUNCTION): its code, with its defaults, keyword defaults
// and closure rebuilt. Null for a function from the frame: it is read again.
std::optional<OutputSpec> rebuild_function(TraceContext& ctx, const VarRef& v) {
  const Var::MadeFunction* made = v->get<Var::Function>().made.get();
  if (!made) return std::nullopt;
  OutputSpec::Function fn;
  fn.bare = OwnedRef(v->obj);
  if (made->defaults) fn.defaults = boxed(rebuild(ctx, made->defaults));
  if (made->kwdefaults) fn.kwdefaults = boxed(rebuild(ctx, made->kwdefaults));
  if (!made->closure.empty()) fn.closure = boxed(OutputSpec::Tuple{rebuild_all(ctx, made->closure), {}});
  return OutputSpec(std::move(fn));
}

// An object capture did not make or change: read again from its source (no reference kept),
// else the constant it is; anything else cannot be rebuilt.
OutputSpec rebuild_as_found(const VarRef& v) {
  if (v->source) return OutputSpec::Read{v->source};
  if (v->obj) return OutputSpec::Constant{OwnedRef(v->obj)};
  unsupported("cannot rebuild " + v->describe() + " after the graph");
}

// rebuild, for the kinds that may be built or read again (null: read again as found).
std::optional<OutputSpec> rebuild_kind(TraceContext& ctx, const VarRef& v) {
  switch (v->kind()) {
    case Var::Kind::Tensor: return rebuild_tensor(ctx, v->tensor());
    case Var::Kind::Tuple: case Var::Kind::List: return rebuild_sequence(ctx, v);
    case Var::Kind::Dict: return rebuild_dict(ctx, v);
    case Var::Kind::Cell: return rebuild_cell(ctx, v);
    case Var::Kind::Function: return rebuild_function(ctx, v);
    case Var::Kind::DictView: {  // d.keys() called again
      const Var::DictView& view = v->get<Var::DictView>();
      return OutputSpec(OutputSpec::Call{boxed(rebuild(ctx, view.dict)), view.name});
    }
    case Var::Kind::Method: {  // obj.method read again
      const Var::Method& method = v->get<Var::Method>();
      return OutputSpec(OutputSpec::Method{boxed(rebuild(ctx, method.self)), method.name});
    }
    case Var::Kind::Null: return OutputSpec(OutputSpec::Null{});
    case Var::Kind::SymInt:  // a size: computed from the frame's tensors on each run
      return OutputSpec(OutputSpec::SizeValue{v->get<Var::SymInt>().expr});
    case Var::Kind::Iterator: {
      const Var::Iterator& it = v->get<Var::Iterator>();
      return OutputSpec(OutputSpec::Iterator{rebuild_all(ctx, it.items, it.position)});
    }
    default: return std::nullopt;
  }
}

}  // namespace

// How to rebuild a Var as a real object after the graph has run.
OutputSpec rebuild(TraceContext& ctx, const VarRef& v) {
  int first;
  int alias = alias_of_built(ctx, v, &first);
  if (alias >= 0) return OutputSpec::AliasOf{alias};
  std::optional<OutputSpec> s = rebuild_kind(ctx, v);
  OutputSpec spec = s ? std::move(*s) : rebuild_as_found(v);
  spec.alias = first;
  return spec;
}

// The stores the trace made into cells, globals and attributes, as side effects to replay.
// Which objects alias is part of what the trace assumed: when it stored an attribute of an
// object of some class and touched objects of that class at two or more sources, those are
// guarded by identity (objects of different classes cannot be one object); when it stored
// into a cell and also used a cell of another function, the root's cells are.
std::vector<SideEffect> side_effects(TraceContext& ctx) {
  std::vector<SideEffect> out;
  for (auto& cell : ctx.stored_cells) {
    SideEffect e;
    e.kind = SideEffect::Kind::Cell;
    e.target = cell->get<Var::Cell>().cell_source;
    e.value = rebuild(ctx, cell->get<Var::Cell>().contents);
    out.push_back(std::move(e));
  }
  std::vector<PyTypeObject*> stored_types;
  for (auto& st : ctx.stores) {
    SideEffect e;
    e.kind = st.kind;
    e.target = st.target_source;
    e.name = st.name;
    if (st.kind == SideEffect::Kind::Contents)  // a list of the frame's: its items now, as a new list
      e.value = OutputSpec::List{rebuild_all(ctx, st.value->get<Var::List>().items)};
    else
      e.value = rebuild(ctx, st.value);
    out.push_back(std::move(e));
    if (st.kind == SideEffect::Kind::Attr) stored_types.push_back(Py_TYPE(st.target));
  }
  for (PyTypeObject* type : stored_types) {
    std::vector<std::pair<SourceRef, PyObject*>> touched;
    for (auto& [src, obj] : ctx.attr_objects) {
      bool seen = false;
      for (auto& t : touched) seen = seen || t.first->str() == src->str();
      if (Py_TYPE(obj) == type && !seen) touched.emplace_back(src, obj);
    }
    if (touched.size() >= 2)
      for (auto& [src, obj] : touched) ctx.guards().add_id_match(src, obj);
  }
  bool root_cells = false, other_cells = false;
  for (auto& [cell, v] : ctx.cells) {
    bool root = !v->get<Var::Cell>().cell_source->as<guards::Source::Item>();
    root_cells = root_cells || root;
    other_cells = other_cells || !root;
  }
  if (!ctx.stored_cells.empty() && root_cells && other_cells)
    for (auto& [cell, v] : ctx.cells)
      if (const SourceRef& at = v->get<Var::Cell>().cell_source; !at->as<guards::Source::Item>())
        ctx.guards().add_id_match(at, cell);
  return out;
}

// ---- at run time: an OutputSpec -> a real object ---------------------------------------------

namespace {

// One spec's objects being built: what build reads (the graph's outputs, the frame's values,
// the spec's alias number) and writes (whether something failed, the objects built so far for
// each alias); one call operator per kind of spec.
struct Building {
  const std::vector<PyObject*>& outs;
  const guards::FrameValues& fv;
  bool* failed;
  std::vector<PyObject*>& made;
  int alias;

  // One spec of the objects being built (an item, a part).
  PyObject* part(const OutputSpec& spec) { return build(spec, outs, fv, failed, made); }

  // A mutable object made while tracing is built once: kept as alias `alias`'s object.
  PyObject* remember(PyObject* o) {
    if (alias < 0 || !o) return o;
    if ((int)made.size() <= alias) made.resize(alias + 1, nullptr);
    made[alias] = o;
    Py_INCREF(o);
    return o;
  }

  // Fails the build with a RuntimeError: "mini: cannot <what> <of> again".
  PyObject* cannot_again(const char* what, const std::string& of) {
    *failed = true;
    PyErr_Format(PyExc_RuntimeError, "mini: cannot %s %s again", what, of.c_str());
    return nullptr;
  }

  PyObject* operator()(const OutputSpec::GraphOutput& s) {
    PyObject* o = outs.at(s.index);
    Py_INCREF(o);
    return o;
  }
  PyObject* operator()(const OutputSpec::Number& s) {  // a number that went through the graph as a 0-d tensor
    PyObject* o = PyObject_CallMethod(outs.at(s.index), "item", nullptr);
    if (!o) *failed = true;
    return o;
  }
  PyObject* operator()(const OutputSpec::Constant& s) {
    Py_INCREF(s.value.get());
    return s.value.get();
  }
  PyObject* operator()(const OutputSpec::SizeValue& s) {  // a dynamic size, evaluated on this call's tensors
    int64_t v;
    if (s.expr.evaluate(fv, &v)) return PyLong_FromLongLong(v);
    return cannot_again("evaluate", s.expr.str());
  }
  PyObject* operator()(const OutputSpec::Read& s) {  // an object read again from its source in the frame
    PyObject* o = guards::fetch(*s.source, fv);
    if (!o) cannot_again("read", s.source->str());
    return o;
  }
  PyObject* operator()(const OutputSpec::Local& s) {  // the slot as it is: an unbound one stays unbound
    PyObject* o = s.index < fv.nlocals ? fv.locals[s.index] : nullptr;
    Py_XINCREF(o);
    return o;
  }
  PyObject* operator()(const OutputSpec::AliasOf& s) {  // the object built earlier for alias `index`
    PyObject* o = s.index < (int)made.size() ? made[s.index] : nullptr;
    if (!o) {
      *failed = true;
      PyErr_SetString(PyExc_SystemError, "mini: an object rebuilt after the graph was used before it was built");
    }
    Py_XINCREF(o);
    return o;
  }
  PyObject* operator()(const OutputSpec::Null&) { return nullptr; }
  PyObject* operator()(const OutputSpec::Absent&) { return nullptr; }
  PyObject* operator()(const OutputSpec::View& s);
  PyObject* operator()(const OutputSpec::Method& s) { return attribute(*s.self, s.name, false); }
  PyObject* operator()(const OutputSpec::Call& s) { return attribute(*s.self, s.name, true); }
  PyObject* operator()(const OutputSpec::Tuple& s);
  PyObject* operator()(const OutputSpec::List& s) { return sequence(s.items, true); }
  PyObject* operator()(const OutputSpec::Size& s) {  // mini.Size(items)
    return finish(sequence(s.items, false), Then::Call, python_bridge().size_type);
  }
  PyObject* operator()(const OutputSpec::Iterator& s) { return finish(sequence(s.items, false), Then::Iter); }
  PyObject* operator()(const OutputSpec::Dict& s);
  PyObject* operator()(const OutputSpec::Cell& s);
  PyObject* operator()(const OutputSpec::Function& s);

  PyObject* attribute(const OutputSpec& self_spec, const std::string& name, bool call);
  PyObject* sequence(const std::vector<OutputSpec>& items, bool list);
  // What a built tuple of items becomes: callable(items), callable(*items), iter(items).
  enum class Then { Call, CallUnpacked, Iter };
  PyObject* finish(PyObject* items, Then then, PyObject* callable = nullptr);
};

// A view of an input written in place, made on the input (without a source: a view of graph
// output `index`), by replaying the view ops.
PyObject* Building::operator()(const OutputSpec::View& s) {
  PyObject* base = s.source ? guards::fetch(*s.source, fv) : outs.at(s.index);
  if (!s.source) Py_INCREF(base);
  TensorImpl* t = base ? guards::unwrap_tensor(base) : nullptr;
  if (!t) {
    Py_XDECREF(base);
    return cannot_again("read", s.source ? s.source->str() : "graph output " + std::to_string(s.index));
  }
  Tensor v = t->shared_from_this();
  Py_DECREF(base);
  try {
    for (const auto& [op, attrs] : s.views) v = call_op(op, {v}, attrs);
  } catch (const std::exception& e) {
    *failed = true;
    set_python_error(e);
    return nullptr;
  }
  return python_bridge().wrap_tensor(v);
}

// getattr(self, name) (a bound method), or getattr(self, name)() (call: a dict view).
PyObject* Building::attribute(const OutputSpec& self_spec, const std::string& name, bool call) {
  PyObject* self = part(self_spec);
  if (!self) return nullptr;
  PyObject* m = call ? PyObject_CallMethod(self, name.c_str(), nullptr) : PyObject_GetAttrString(self, name.c_str());
  Py_DECREF(self);
  if (!m) *failed = true;
  return m;
}

// A tuple or a list of the built items.
PyObject* Building::sequence(const std::vector<OutputSpec>& items, bool list) {
  PyObject* r = list ? PyList_New((Py_ssize_t)items.size()) : PyTuple_New((Py_ssize_t)items.size());
  if (list) remember(r);  // before its items: an item may hold the list itself
  for (size_t i = 0; i < items.size(); i++) {
    PyObject* item = part(items[i]);
    if (*failed) { Py_DECREF(r); return nullptr; }
    if (list) PyList_SET_ITEM(r, i, item);
    else PyTuple_SET_ITEM(r, i, item);
  }
  return r;
}

// The built tuple `items` made a size, a record or an iterator (`then`); consumes `items`.
PyObject* Building::finish(PyObject* items, Then then, PyObject* callable) {
  if (!items) return nullptr;
  PyObject* made_one = then == Then::Iter           ? PyObject_GetIter(items)
                       : then == Then::CallUnpacked ? PyObject_CallObject(callable, items)
                                                    : PyObject_CallOneArg(callable, items);
  Py_DECREF(items);
  if (!made_one) *failed = true;
  return made_one;
}

// A tuple of the built items; a record built in the trace as cls(*fields).
PyObject* Building::operator()(const OutputSpec::Tuple& s) {
  PyObject* items = sequence(s.items, false);
  if (!s.record.get()) return items;
  return finish(items, Then::CallUnpacked, s.record.get());
}

// A new dict of the built keys and values.
PyObject* Building::operator()(const OutputSpec::Dict& s) {
  PyObject* d = remember(PyDict_New());
  for (size_t i = 0; i + 1 < s.items.size(); i += 2) {
    PyObject* k = part(s.items[i]);
    PyObject* v = *failed ? nullptr : part(s.items[i + 1]);
    if (!*failed && PyDict_SetItem(d, k, v) < 0) *failed = true;
    Py_XDECREF(k);
    Py_XDECREF(v);
    if (*failed) { Py_DECREF(d); return nullptr; }
  }
  return d;
}

// A new cell, holding its built contents (empty without).
PyObject* Building::operator()(const OutputSpec::Cell& s) {
  PyObject* cell = remember(PyCell_New(nullptr));
  if (s.contents) {
    PyObject* v = part(*s.contents);
    if (*failed) { Py_DECREF(cell); return nullptr; }
    PyCell_Set(cell, v);
    Py_XDECREF(v);
  }
  return cell;
}

// A new function, as MAKE_FUNCTION would have made it: the bare function's code, globals and
// name, with the built defaults, keyword defaults and closure.
PyObject* Building::operator()(const OutputSpec::Function& s) {
  auto* bare = (PyFunctionObject*)s.bare.get();
  PyObject* fn = remember(PyFunction_NewWithQualName(bare->func_code, bare->func_globals, bare->func_qualname));
  if (!fn) { *failed = true; return nullptr; }
  if (bare->func_annotations) PyFunction_SetAnnotations(fn, bare->func_annotations);
  const OutputSpec* parts[] = {s.defaults.get(), s.kwdefaults.get(), s.closure.get()};
  int (*setters[])(PyObject*, PyObject*) = {PyFunction_SetDefaults, PyFunction_SetKwDefaults, PyFunction_SetClosure};
  for (int i = 0; i < 3 && !*failed; i++) {
    if (!parts[i]) continue;
    PyObject* built = part(*parts[i]);
    if (!*failed && setters[i](fn, built) < 0) *failed = true;
    Py_XDECREF(built);
  }
  if (*failed) { Py_DECREF(fn); return nullptr; }
  return fn;
}

}  // namespace

// A real object from its reconstruction spec (unit.h says who owns what).
PyObject* build(const OutputSpec& spec, const std::vector<PyObject*>& outs, const guards::FrameValues& fv,
                bool* failed, std::vector<PyObject*>& made) {
  Building b{outs, fv, failed, made, spec.alias};
  return std::visit(b, spec.kind);
}

}  // namespace mini::capture
