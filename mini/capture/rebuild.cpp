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
  s.kind = source->kind == guards::Source::Kind::Local ? OutputSpec::Kind::Local : OutputSpec::Kind::Source;
  s.index = source->index;
  s.source = source;
  return s;
}

// How to rebuild a Var as a real object after the graph has run.
OutputSpec rebuild(TraceContext& ctx, const VarRef& v) {
  OutputSpec s;
  // A list, dict, cell or function made while tracing is built once per run, however many
  // places hold it (a later place, or a cycle through a closure, is an Alias of it).
  bool mutable_made = (v->is(Var::Kind::List) || v->is(Var::Kind::Dict)) ? made_in_trace(v)
                      : v->is(Var::Kind::Cell) ? !v->obj : v->is(Var::Kind::Function) && v->made;
  if (mutable_made) {
    auto found = ctx.alias_of.find(v.get());
    if (found != ctx.alias_of.end()) {
      s.kind = OutputSpec::Kind::Alias;
      s.index = found->second;
      return s;
    }
    s.alias = (int)ctx.alias_of.size();
    ctx.alias_of[v.get()] = s.alias;
  }
  switch (v->kind) {
    case Var::Kind::Tensor: {
      const Alias& alias = alias_of(ctx, v->node);
      // An input handed on as it is: the real input (AOTAutograd's output-is-input), not a
      // graph output, which a training graph would make a new tensor with an autograd history
      const graph::Node& n = ctx.graph().nodes[v->node];
      if (n.kind == graph::NodeKind::Input && !n.wrapped_number && !alias.storage->mutated) {
        const auto& inputs = ctx.graph().inputs;
        s.kind = OutputSpec::Kind::Source;
        s.source = ctx.trace.input_sources.at(std::find(inputs.begin(), inputs.end(), v->node) - inputs.begin());
        return s;
      }
      // Before an instruction that raises a user error, a view is rebuilt as a view (of the
      // input, or of the graph output of its base): the instruction must see eager's tensors.
      bool as_view = ctx.trace.user_error && alias.exact;
      if (as_view && alias.storage->input < 0 && !alias.views.empty()) {
        auto& outs = ctx.graph().outputs;
        auto it = std::find(outs.begin(), outs.end(), alias.storage->base);
        s.kind = OutputSpec::Kind::View;
        s.index = (int)(it - outs.begin());
        if (it == outs.end()) outs.push_back(alias.storage->base);
        for (int view : alias.views) {
          const graph::Node& n = ctx.graph().nodes[view];
          if (n.symbolic_attrs) unsupported("a view with dynamic sizes before an instruction that raises");
          s.views.push_back({n.op, n.attrs});
        }
        return s;
      }
      if (alias.storage->input >= 0 && (alias.storage->mutated || as_view)) {
        // a graph input written in place (or a view of it): the real input, which the
        // write-back updates, so that it keeps sharing memory with what eager code holds
        s.source = ctx.trace.input_sources.at(alias.storage->input);
        s.kind = alias.views.empty() ? OutputSpec::Kind::Source : OutputSpec::Kind::View;
        for (int view : alias.views) {
          const graph::Node& n = ctx.graph().nodes[view];
          if (n.symbolic_attrs) unsupported("a view with dynamic sizes of an input written in place");
          s.views.push_back({n.op, n.attrs});
        }
        return s;
      }
      auto& outs = ctx.graph().outputs;
      auto it = std::find(outs.begin(), outs.end(), v->node);
      s.kind = v->number ? OutputSpec::Kind::Number : OutputSpec::Kind::GraphOutput;
      s.index = (int)(it - outs.begin());
      if (it == outs.end()) outs.push_back(v->node);
      return s;
    }
    case Var::Kind::Tuple: case Var::Kind::List:
      if (v->is(Var::Kind::List) && !made_in_trace(v)) break;  // the caller's own list: read it again
      s.kind = v->is(Var::Kind::Tuple) ? (v->size ? OutputSpec::Kind::Size : OutputSpec::Kind::Tuple)
                                       : OutputSpec::Kind::List;
      for (auto& item : v->items) s.items.push_back(rebuild(ctx, item));
      if (v->is(Var::Kind::Tuple) && v->self) {  // a record: cls(*fields)
        s.value = v->self->obj;
        Py_INCREF(s.value);
      }
      return s;
    case Var::Kind::Dict:
      if (!made_in_trace(v)) break;  // a dict from the frame, unchanged
      s.kind = OutputSpec::Kind::Dict;
      for (size_t i = 0; i < v->keys.size(); i++) {
        s.items.push_back(rebuild(ctx, v->keys[i]));
        s.items.push_back(rebuild(ctx, v->items[i]));
      }
      return s;
    case Var::Kind::Cell:
      if (v->obj) {  // a real cell: the same cell (stores into it are replayed)
        s.kind = OutputSpec::Kind::Source;
        s.source = v->cell_source;
        return s;
      }
      s.kind = OutputSpec::Kind::Cell;
      if (!v->contents_read) s.items.push_back(unchanged(v->source));  // a root argument never read
      else if (v->contents) s.items.push_back(rebuild(ctx, v->contents));
      return s;
    case Var::Kind::Function:
      if (!v->made) break;
      s.kind = OutputSpec::Kind::Function;
      s.value = v->obj;
      Py_INCREF(s.value);
      for (const VarRef& part : {v->made->defaults, v->made->kwdefaults}) {
        OutputSpec p;
        p.kind = OutputSpec::Kind::Null;
        s.items.push_back(part ? rebuild(ctx, part) : std::move(p));
      }
      {
        OutputSpec closure;
        closure.kind = v->made->closure.empty() ? OutputSpec::Kind::Null : OutputSpec::Kind::Tuple;
        for (auto& c : v->made->closure) closure.items.push_back(rebuild(ctx, c));
        s.items.push_back(std::move(closure));
      }
      return s;
    case Var::Kind::DictView:
      s.kind = OutputSpec::Kind::Call;
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
    case Var::Kind::Method:
      s.kind = OutputSpec::Kind::Method;
      s.name = v->name;
      s.items.push_back(rebuild(ctx, v->self));
      return s;
    case Var::Kind::Iterator:
      s.kind = OutputSpec::Kind::Iterator;
      for (size_t i = v->position; i < v->items.size(); i++) s.items.push_back(rebuild(ctx, v->items[i]));
      return s;
    default:
      break;
  }
  if (v->source) {  // an object read from the frame, unchanged: read it again (no reference kept)
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
    bool root = v->cell_source->kind != guards::Source::Kind::Item;
    root_cells = root_cells || root;
    other_cells = other_cells || !root;
  }
  if (!ctx.stored_cells.empty() && root_cells && other_cells)
    for (auto& [cell, v] : ctx.cells)
      if (v->cell_source->kind != guards::Source::Kind::Item) ctx.guards().add_id_match(v->cell_source, cell);
  return out;
}

// ---- at run time: an OutputSpec -> a real object ---------------------------------------------

// A real object from its reconstruction spec. New reference; NULL for Null/Absent slots
// (no error set); NULL with an error set when something cannot be rebuilt. `made` holds
// the objects built so far for each alias (New references, released by the caller).
PyObject* build(const OutputSpec& spec, const std::vector<PyObject*>& outs, const guards::FrameValues& fv,
                bool* failed, std::vector<PyObject*>& made) {
  auto remember = [&](PyObject* o) {  // a mutable object made while tracing: built once
    if (spec.alias < 0 || !o) return o;
    if ((int)made.size() <= spec.alias) made.resize(spec.alias + 1, nullptr);
    made[spec.alias] = o;
    Py_INCREF(o);
    return o;
  };
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
    case OutputSpec::Kind::SizeExpr: {  // a dynamic size, from this call's tensors
      int64_t v;
      if (spec.expr.evaluate(fv, &v)) return PyLong_FromLongLong(v);
      *failed = true;
      PyErr_Format(PyExc_RuntimeError, "mini: cannot evaluate %s again", spec.expr.str().c_str());
      return nullptr;
    }
    case OutputSpec::Kind::Source: {
      PyObject* o = guards::fetch(*spec.source, fv);
      if (!o) {
        *failed = true;
        PyErr_Format(PyExc_RuntimeError, "mini: cannot read %s again", spec.source->str().c_str());
      }
      return o;
    }
    case OutputSpec::Kind::Local: {
      PyObject* o = spec.index < fv.nlocals ? fv.locals[spec.index] : nullptr;
      Py_XINCREF(o);
      return o;
    }
    case OutputSpec::Kind::Alias: {
      PyObject* o = spec.index < (int)made.size() ? made[spec.index] : nullptr;
      if (!o) {
        *failed = true;
        PyErr_SetString(PyExc_SystemError, "mini: an object rebuilt after the graph was used before it was built");
      }
      Py_XINCREF(o);
      return o;
    }
    case OutputSpec::Kind::Null: case OutputSpec::Kind::Absent:
      return nullptr;
    case OutputSpec::Kind::View: {  // a view of an input written in place, made on the input
      // (without a source: a view of graph output `index`)
      PyObject* base = spec.source ? guards::fetch(*spec.source, fv) : outs.at(spec.index);
      if (!spec.source) Py_INCREF(base);
      TensorImpl* t = base ? guards::unwrap_tensor(base) : nullptr;
      if (!t) {
        Py_XDECREF(base);
        *failed = true;
        PyErr_Format(PyExc_RuntimeError, "mini: cannot read %s again", spec.source->str().c_str());
        return nullptr;
      }
      Tensor v = t->shared_from_this();
      Py_DECREF(base);
      try {
        for (const auto& [op, attrs] : spec.views) v = call_op(op, {v}, attrs);
      } catch (const std::exception& e) {
        *failed = true;
        set_python_error(e);
        return nullptr;
      }
      return python_bridge().wrap_tensor(v);
    }
    case OutputSpec::Kind::Method: case OutputSpec::Kind::Call: {
      PyObject* self = build(spec.items[0], outs, fv, failed, made);
      if (!self) return nullptr;
      PyObject* m = spec.kind == OutputSpec::Kind::Call ? PyObject_CallMethod(self, spec.name.c_str(), nullptr)
                                                        : PyObject_GetAttrString(self, spec.name.c_str());
      Py_DECREF(self);
      if (!m) *failed = true;
      return m;
    }
    case OutputSpec::Kind::Tuple: case OutputSpec::Kind::List: case OutputSpec::Kind::Iterator:
    case OutputSpec::Kind::Size: {
      bool list = spec.kind == OutputSpec::Kind::List;
      PyObject* r = list ? PyList_New((Py_ssize_t)spec.items.size()) : PyTuple_New((Py_ssize_t)spec.items.size());
      if (list) remember(r);  // before its items: an item may hold the list itself
      for (size_t i = 0; i < spec.items.size(); i++) {
        PyObject* item = build(spec.items[i], outs, fv, failed, made);
        if (*failed) { Py_DECREF(r); return nullptr; }
        if (list) PyList_SET_ITEM(r, i, item);
        else PyTuple_SET_ITEM(r, i, item);
      }
      if (spec.kind == OutputSpec::Kind::Tuple && spec.value) {  // a record built in the trace: cls(*fields)
        PyObject* record = PyObject_CallObject(spec.value, r);
        Py_DECREF(r);
        if (!record) *failed = true;
        return record;
      }
      if (spec.kind == OutputSpec::Kind::Tuple || spec.kind == OutputSpec::Kind::List) return r;
      PyObject* made = spec.kind == OutputSpec::Kind::Size ? PyObject_CallOneArg(python_bridge().size_type, r)
                                                            : PyObject_GetIter(r);
      Py_DECREF(r);
      if (!made) *failed = true;
      return made;
    }
    case OutputSpec::Kind::Dict: {
      PyObject* d = remember(PyDict_New());
      for (size_t i = 0; i + 1 < spec.items.size(); i += 2) {
        PyObject* k = build(spec.items[i], outs, fv, failed, made);
        PyObject* v = *failed ? nullptr : build(spec.items[i + 1], outs, fv, failed, made);
        if (!*failed && PyDict_SetItem(d, k, v) < 0) *failed = true;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (*failed) { Py_DECREF(d); return nullptr; }
      }
      return d;
    }
    case OutputSpec::Kind::Cell: {
      PyObject* cell = remember(PyCell_New(nullptr));
      if (!spec.items.empty()) {
        PyObject* v = build(spec.items[0], outs, fv, failed, made);
        if (*failed) { Py_DECREF(cell); return nullptr; }
        PyCell_Set(cell, v);
        Py_XDECREF(v);
      }
      return cell;
    }
    case OutputSpec::Kind::Function: {  // as MAKE_FUNCTION would have made it
      auto* bare = (PyFunctionObject*)spec.value;
      PyObject* fn = remember(PyFunction_NewWithQualName(bare->func_code, bare->func_globals, bare->func_qualname));
      if (!fn) { *failed = true; return nullptr; }
      if (bare->func_annotations) PyFunction_SetAnnotations(fn, bare->func_annotations);
      int (*setters[])(PyObject*, PyObject*) = {PyFunction_SetDefaults, PyFunction_SetKwDefaults, PyFunction_SetClosure};
      for (int i = 0; i < 3 && !*failed; i++) {
        if (spec.items[i].kind == OutputSpec::Kind::Null) continue;
        PyObject* part = build(spec.items[i], outs, fv, failed, made);
        if (!*failed && setters[i](fn, part) < 0) *failed = true;
        Py_XDECREF(part);
      }
      if (*failed) { Py_DECREF(fn); return nullptr; }
      return fn;
    }
  }
  return nullptr;
}

}  // namespace mini::capture
