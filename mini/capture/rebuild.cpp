// rebuild.cpp — reconstruction (Dynamo's PyCodegen): how each Var becomes a real object
// again after the graph ran (rebuild: a Var -> an OutputSpec, at trace time), and the
// stores the trace made, as side effects to replay.
#include "capture/frame_interpreter.h"
#include "capture/unit.h"

namespace mini::capture {

// A value never read while tracing, as it was: a local slot as it is (unbound stays
// unbound), anything else read again from its source.
OutputSpec unchanged(const SourceRef& source) {
  OutputSpec s;
  const auto* local = source->as<guards::Source::Local>();
  s.kind = local ? OutputSpec::Kind::Local : OutputSpec::Kind::Source;
  if (local) s.index = local->index;
  s.source = source;
  return s;
}

namespace {

// A list, dict, cell or function made while tracing is built once per run, however many
// places hold it (a later place, or a cycle through a closure, is an Alias of it): true when
// `s` is made that Alias; else `s` is numbered as the object's first place (where it is one).
bool alias_of_built(TraceContext& ctx, const VarRef& v, OutputSpec& s) {
  bool mutable_made = (v->is(Var::Kind::List) || v->is(Var::Kind::Dict)) ? made_in_trace(v)
                      : v->is(Var::Kind::Cell) ? !v->obj : v->is(Var::Kind::Function) && v->made;
  if (!mutable_made) return false;
  auto found = ctx.alias_of.find(v.get());
  if (found != ctx.alias_of.end()) {
    s.kind = OutputSpec::Kind::Alias;
    s.index = found->second;
    return true;
  }
  s.alias = (int)ctx.alias_of.size();
  ctx.alias_of[v.get()] = s.alias;
  return false;
}

// The position of `node` among the graph's outputs, made an output if it is not one yet.
int output_index(TraceContext& ctx, int node) {
  auto& outs = ctx.graph().outputs;
  auto it = std::find(outs.begin(), outs.end(), node);
  int index = (int)(it - outs.begin());
  if (it == outs.end()) outs.push_back(node);
  return index;
}

// The views `alias` takes of its storage's base, as ops `s` replays; one with dynamic sizes
// (`where`: of what) cannot be replayed.
void add_views(TraceContext& ctx, const Alias& alias, OutputSpec& s, const std::string& where) {
  for (int view : alias.views) {
    const graph::Node& n = ctx.graph().nodes[view];
    if (n.symbolic_attrs) unsupported("a view with dynamic sizes " + where);
    s.views.push_back({n.op, n.attrs});
  }
}

// A tensor: the real input where it is one (handed on as it is, or written in place), a view
// made again where an instruction that raises must see eager's tensors, else a graph output.
void rebuild_tensor(TraceContext& ctx, const VarRef& v, OutputSpec& s) {
  const Alias& alias = alias_of(ctx, v->node);
  // An input handed on as it is: the real input (AOTAutograd's output-is-input), not a
  // graph output, which a training graph would make a new tensor with an autograd history
  const graph::Node& n = ctx.graph().nodes[v->node];
  if (n.kind == graph::NodeKind::Input && !n.wrapped_number && !alias.storage->mutated) {
    const auto& inputs = ctx.graph().inputs;
    s.kind = OutputSpec::Kind::Source;
    s.source = ctx.trace.input_sources.at(std::find(inputs.begin(), inputs.end(), v->node) - inputs.begin());
    return;
  }
  // Before an instruction that raises a user error, a view is rebuilt as a view (of the
  // input, or of the graph output of its base): the instruction must see eager's tensors.
  bool as_view = ctx.trace.user_error && alias.exact;
  if (as_view && alias.storage->input < 0 && !alias.views.empty()) {
    s.kind = OutputSpec::Kind::View;
    s.index = output_index(ctx, alias.storage->base);
    add_views(ctx, alias, s, "before an instruction that raises");
    return;
  }
  if (alias.storage->input >= 0 && (alias.storage->mutated || as_view)) {
    // a graph input written in place (or a view of it): the real input, which the
    // write-back updates, so that it keeps sharing memory with what eager code holds
    s.source = ctx.trace.input_sources.at(alias.storage->input);
    s.kind = alias.views.empty() ? OutputSpec::Kind::Source : OutputSpec::Kind::View;
    add_views(ctx, alias, s, "of an input written in place");
    return;
  }
  s.kind = v->number ? OutputSpec::Kind::Number : OutputSpec::Kind::GraphOutput;
  s.index = output_index(ctx, v->node);
}

// A tuple, a size, or a list made while tracing: its items rebuilt; a record (a tuple of a
// class) as cls(*fields). False for the caller's own list: it is read again.
bool rebuild_sequence(TraceContext& ctx, const VarRef& v, OutputSpec& s) {
  if (v->is(Var::Kind::List) && !made_in_trace(v)) return false;
  s.kind = v->is(Var::Kind::Tuple) ? (v->size ? OutputSpec::Kind::Size : OutputSpec::Kind::Tuple)
                                   : OutputSpec::Kind::List;
  for (auto& item : v->items) s.items.push_back(rebuild(ctx, item));
  if (v->is(Var::Kind::Tuple) && v->self) {  // a record: cls(*fields)
    s.value = v->self->obj;
    Py_INCREF(s.value);
  }
  return true;
}

// A dict made while tracing: its keys and values in order. False for a dict from the frame,
// unchanged: it is read again.
bool rebuild_dict(TraceContext& ctx, const VarRef& v, OutputSpec& s) {
  if (!made_in_trace(v)) return false;
  s.kind = OutputSpec::Kind::Dict;
  for (size_t i = 0; i < v->keys.size(); i++) {
    s.items.push_back(rebuild(ctx, v->keys[i]));
    s.items.push_back(rebuild(ctx, v->items[i]));
  }
  return true;
}

// A cell: a real cell is the same cell (stores into it are replayed); one made while tracing
// is a new cell of its contents.
void rebuild_cell(TraceContext& ctx, const VarRef& v, OutputSpec& s) {
  if (v->obj) {
    s.kind = OutputSpec::Kind::Source;
    s.source = v->cell_source;
    return;
  }
  s.kind = OutputSpec::Kind::Cell;
  if (!v->contents_read) s.items.push_back(unchanged(v->source));  // a root argument never read
  else if (v->contents) s.items.push_back(rebuild(ctx, v->contents));
}

// A function made while tracing (MAKE_FUNCTION): its code, with its defaults, keyword defaults
// and closure rebuilt. False for a function from the frame: it is read again.
bool rebuild_function(TraceContext& ctx, const VarRef& v, OutputSpec& s) {
  if (!v->made) return false;
  s.kind = OutputSpec::Kind::Function;
  s.value = v->obj;
  Py_INCREF(s.value);
  for (const VarRef& part : {v->made->defaults, v->made->kwdefaults}) {
    OutputSpec p;
    p.kind = OutputSpec::Kind::Null;
    s.items.push_back(part ? rebuild(ctx, part) : std::move(p));
  }
  OutputSpec closure;
  closure.kind = v->made->closure.empty() ? OutputSpec::Kind::Null : OutputSpec::Kind::Tuple;
  for (auto& c : v->made->closure) closure.items.push_back(rebuild(ctx, c));
  s.items.push_back(std::move(closure));
  return true;
}

// An object capture did not make or change: read again from its source (no reference kept),
// else the constant it is; anything else cannot be rebuilt.
OutputSpec rebuild_as_found(const VarRef& v, OutputSpec s) {
  if (v->source) {
    s.kind = OutputSpec::Kind::Source;
    s.source = v->source;
    return s;
  }
  if (v->obj) {
    s.kind = OutputSpec::Kind::Constant;
    s.value = v->obj;
    Py_INCREF(s.value);
    return s;
  }
  unsupported("cannot rebuild " + v->describe() + " after the graph");
}

}  // namespace

// How to rebuild a Var as a real object after the graph has run.
OutputSpec rebuild(TraceContext& ctx, const VarRef& v) {
  OutputSpec s;
  if (alias_of_built(ctx, v, s)) return s;
  switch (v->kind) {
    case Var::Kind::Tensor:
      rebuild_tensor(ctx, v, s);
      return s;
    case Var::Kind::Tuple: case Var::Kind::List:
      if (rebuild_sequence(ctx, v, s)) return s;
      break;
    case Var::Kind::Dict:
      if (rebuild_dict(ctx, v, s)) return s;
      break;
    case Var::Kind::Cell:
      rebuild_cell(ctx, v, s);
      return s;
    case Var::Kind::Function:
      if (rebuild_function(ctx, v, s)) return s;
      break;
    case Var::Kind::DictView: case Var::Kind::Method:  // d.keys() called, obj.method read again
      s.kind = v->is(Var::Kind::DictView) ? OutputSpec::Kind::Call : OutputSpec::Kind::Method;
      s.name = v->name;
      s.items.push_back(rebuild(ctx, v->self));
      return s;
    case Var::Kind::Null:
      s.kind = OutputSpec::Kind::Null;
      return s;
    case Var::Kind::SymInt:  // a size: computed from the frame's tensors on each run
      s.kind = OutputSpec::Kind::SizeExpr;
      s.expr = v->expr;
      return s;
    case Var::Kind::Iterator:
      s.kind = OutputSpec::Kind::Iterator;
      for (size_t i = v->position; i < v->items.size(); i++) s.items.push_back(rebuild(ctx, v->items[i]));
      return s;
    default:
      break;
  }
  return rebuild_as_found(v, std::move(s));
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
    e.target = cell->cell_source;
    e.value = rebuild(ctx, cell->contents);
    out.push_back(std::move(e));
  }
  std::vector<PyTypeObject*> stored_types;
  for (auto& st : ctx.stores) {
    SideEffect e;
    e.kind = st.kind;
    e.target = st.target_source;
    e.name = st.name;
    if (st.kind == SideEffect::Kind::Contents) {  // a list of the frame's: its items now, as a new list
      e.value.kind = OutputSpec::Kind::List;
      for (auto& item : st.value->items) e.value.items.push_back(rebuild(ctx, item));
    } else {
      e.value = rebuild(ctx, st.value);
    }
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
    bool root = !v->cell_source->as<guards::Source::Item>();
    root_cells = root_cells || root;
    other_cells = other_cells || !root;
  }
  if (!ctx.stored_cells.empty() && root_cells && other_cells)
    for (auto& [cell, v] : ctx.cells)
      if (!v->cell_source->as<guards::Source::Item>()) ctx.guards().add_id_match(v->cell_source, cell);
  return out;
}

// ---- at run time: an OutputSpec -> a real object ---------------------------------------------

namespace {

// What build reads and writes while it builds one spec's objects: the graph's outputs, the
// frame's values, whether something failed, and the objects built so far for each alias.
struct Building {
  const std::vector<PyObject*>& outs;
  const guards::FrameValues& fv;
  bool* failed;
  std::vector<PyObject*>& made;
};

// One spec of the objects being built (an item, a part).
PyObject* build_spec(const OutputSpec& spec, Building& b) {
  return build(spec, b.outs, b.fv, b.failed, b.made);
}

// A mutable object made while tracing is built once: kept as alias `spec.alias`'s object.
PyObject* remember(const OutputSpec& spec, Building& b, PyObject* o) {
  if (spec.alias < 0 || !o) return o;
  if ((int)b.made.size() <= spec.alias) b.made.resize(spec.alias + 1, nullptr);
  b.made[spec.alias] = o;
  Py_INCREF(o);
  return o;
}

// Fails the build with a RuntimeError: "mini: cannot <what> again".
PyObject* cannot_again(Building& b, const char* what, const std::string& of) {
  *b.failed = true;
  PyErr_Format(PyExc_RuntimeError, "mini: cannot %s %s again", what, of.c_str());
  return nullptr;
}

// A dynamic size, evaluated on this call's tensors.
PyObject* build_size_expr(const OutputSpec& spec, Building& b) {
  int64_t v;
  if (spec.expr.evaluate(b.fv, &v)) return PyLong_FromLongLong(v);
  return cannot_again(b, "evaluate", spec.expr.str());
}

// An object read again from its source in the frame.
PyObject* build_source(const OutputSpec& spec, Building& b) {
  PyObject* o = guards::fetch(*spec.source, b.fv);
  if (!o) cannot_again(b, "read", spec.source->str());
  return o;
}

// The object built earlier for alias `spec.index`.
PyObject* build_alias(const OutputSpec& spec, Building& b) {
  PyObject* o = spec.index < (int)b.made.size() ? b.made[spec.index] : nullptr;
  if (!o) {
    *b.failed = true;
    PyErr_SetString(PyExc_SystemError, "mini: an object rebuilt after the graph was used before it was built");
  }
  Py_XINCREF(o);
  return o;
}

// A view of an input written in place, made on the input (without a source: a view of graph
// output `index`), by replaying the view ops.
PyObject* build_view(const OutputSpec& spec, Building& b) {
  PyObject* base = spec.source ? guards::fetch(*spec.source, b.fv) : b.outs.at(spec.index);
  if (!spec.source) Py_INCREF(base);
  TensorImpl* t = base ? guards::unwrap_tensor(base) : nullptr;
  if (!t) {
    Py_XDECREF(base);
    return cannot_again(b, "read", spec.source ? spec.source->str() : "graph output " + std::to_string(spec.index));
  }
  Tensor v = t->shared_from_this();
  Py_DECREF(base);
  try {
    for (const auto& [op, attrs] : spec.views) v = call_op(op, {v}, attrs);
  } catch (const std::exception& e) {
    *b.failed = true;
    set_python_error(e);
    return nullptr;
  }
  return python_bridge().wrap_tensor(v);
}

// getattr(self, name) (a bound method), or getattr(self, name)() (a dict view).
PyObject* build_attribute(const OutputSpec& spec, Building& b) {
  PyObject* self = build_spec(spec.items[0], b);
  if (!self) return nullptr;
  PyObject* m = spec.kind == OutputSpec::Kind::Call ? PyObject_CallMethod(self, spec.name.c_str(), nullptr)
                                                    : PyObject_GetAttrString(self, spec.name.c_str());
  Py_DECREF(self);
  if (!m) *b.failed = true;
  return m;
}

// A tuple or list of the built items; a record as cls(*items), a size as mini.Size(items),
// an iterator over the items.
PyObject* build_sequence(const OutputSpec& spec, Building& b) {
  bool list = spec.kind == OutputSpec::Kind::List;
  PyObject* r = list ? PyList_New((Py_ssize_t)spec.items.size()) : PyTuple_New((Py_ssize_t)spec.items.size());
  if (list) remember(spec, b, r);  // before its items: an item may hold the list itself
  for (size_t i = 0; i < spec.items.size(); i++) {
    PyObject* item = build_spec(spec.items[i], b);
    if (*b.failed) { Py_DECREF(r); return nullptr; }
    if (list) PyList_SET_ITEM(r, i, item);
    else PyTuple_SET_ITEM(r, i, item);
  }
  if (spec.kind == OutputSpec::Kind::Tuple && spec.value) {  // a record built in the trace: cls(*fields)
    PyObject* record = PyObject_CallObject(spec.value, r);
    Py_DECREF(r);
    if (!record) *b.failed = true;
    return record;
  }
  if (spec.kind == OutputSpec::Kind::Tuple || spec.kind == OutputSpec::Kind::List) return r;
  PyObject* made = spec.kind == OutputSpec::Kind::Size ? PyObject_CallOneArg(python_bridge().size_type, r)
                                                        : PyObject_GetIter(r);
  Py_DECREF(r);
  if (!made) *b.failed = true;
  return made;
}

// A new dict of the built keys and values.
PyObject* build_dict(const OutputSpec& spec, Building& b) {
  PyObject* d = remember(spec, b, PyDict_New());
  for (size_t i = 0; i + 1 < spec.items.size(); i += 2) {
    PyObject* k = build_spec(spec.items[i], b);
    PyObject* v = *b.failed ? nullptr : build_spec(spec.items[i + 1], b);
    if (!*b.failed && PyDict_SetItem(d, k, v) < 0) *b.failed = true;
    Py_XDECREF(k);
    Py_XDECREF(v);
    if (*b.failed) { Py_DECREF(d); return nullptr; }
  }
  return d;
}

// A new cell, holding its built contents (empty without).
PyObject* build_cell(const OutputSpec& spec, Building& b) {
  PyObject* cell = remember(spec, b, PyCell_New(nullptr));
  if (!spec.items.empty()) {
    PyObject* v = build_spec(spec.items[0], b);
    if (*b.failed) { Py_DECREF(cell); return nullptr; }
    PyCell_Set(cell, v);
    Py_XDECREF(v);
  }
  return cell;
}

// A new function, as MAKE_FUNCTION would have made it: the bare function's code, globals and
// name, with the built defaults, keyword defaults and closure.
PyObject* build_function(const OutputSpec& spec, Building& b) {
  auto* bare = (PyFunctionObject*)spec.value;
  PyObject* bare_copy = PyFunction_NewWithQualName(bare->func_code, bare->func_globals, bare->func_qualname);
  PyObject* fn = remember(spec, b, bare_copy);
  if (!fn) { *b.failed = true; return nullptr; }
  if (bare->func_annotations) PyFunction_SetAnnotations(fn, bare->func_annotations);
  int (*setters[])(PyObject*, PyObject*) = {PyFunction_SetDefaults, PyFunction_SetKwDefaults, PyFunction_SetClosure};
  for (int i = 0; i < 3 && !*b.failed; i++) {
    if (spec.items[i].kind == OutputSpec::Kind::Null) continue;
    PyObject* part = build_spec(spec.items[i], b);
    if (!*b.failed && setters[i](fn, part) < 0) *b.failed = true;
    Py_XDECREF(part);
  }
  if (*b.failed) { Py_DECREF(fn); return nullptr; }
  return fn;
}

}  // namespace

// A real object from its reconstruction spec (unit.h says who owns what).
PyObject* build(const OutputSpec& spec, const std::vector<PyObject*>& outs, const guards::FrameValues& fv,
                bool* failed, std::vector<PyObject*>& made) {
  Building b{outs, fv, failed, made};
  switch (spec.kind) {
    case OutputSpec::Kind::GraphOutput: {
      PyObject* o = outs.at(spec.index);
      Py_INCREF(o);
      return o;
    }
    case OutputSpec::Kind::Number: {  // a number that went through the graph as a 0-d tensor
      PyObject* o = PyObject_CallMethod(outs.at(spec.index), "item", nullptr);
      if (!o) *failed = true;
      return o;
    }
    case OutputSpec::Kind::Constant:
      Py_INCREF(spec.value);
      return spec.value;
    case OutputSpec::Kind::SizeExpr: return build_size_expr(spec, b);
    case OutputSpec::Kind::Source: return build_source(spec, b);
    case OutputSpec::Kind::Local: {  // the slot as it is: an unbound one stays unbound
      PyObject* o = spec.index < fv.nlocals ? fv.locals[spec.index] : nullptr;
      Py_XINCREF(o);
      return o;
    }
    case OutputSpec::Kind::Alias: return build_alias(spec, b);
    case OutputSpec::Kind::Null: case OutputSpec::Kind::Absent: return nullptr;
    case OutputSpec::Kind::View: return build_view(spec, b);
    case OutputSpec::Kind::Method: case OutputSpec::Kind::Call: return build_attribute(spec, b);
    case OutputSpec::Kind::Tuple: case OutputSpec::Kind::List: case OutputSpec::Kind::Iterator:
    case OutputSpec::Kind::Size:
      return build_sequence(spec, b);
    case OutputSpec::Kind::Dict: return build_dict(spec, b);
    case OutputSpec::Kind::Cell: return build_cell(spec, b);
    case OutputSpec::Kind::Function: return build_function(spec, b);
  }
  return nullptr;
}

}  // namespace mini::capture
