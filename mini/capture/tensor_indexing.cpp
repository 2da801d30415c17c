// tensor_indexing.cpp — the op table's indexing (tensor_calls.h): x[i, 1:, None, ...] as the
// eager indexing does it, each item a Select, Slice or Unsqueeze node; a slice whose bounds
// are dynamic sizes stays symbolic where graph sizes can hold it.
#include <algorithm>

#include "capture/tensor_calls.h"

namespace mini::capture {

namespace {

// A slice's bounds as the graph holds them (graph size codes where they are symbolic).
struct SliceBounds {
  int64_t start = 0, end = 0, step = 1;
};

// A slice whose bounds are dynamic sizes (sym_slice), as graph size codes where graph_size
// takes each (None: 0 and an open end), each >= 0 by a size fact; false where one is not (a
// negative int, an expression graph sizes cannot hold): the caller specializes the slice.
bool symbolic_slice_bounds(TraceContext& ctx, const VarRef& slice, int64_t* start, int64_t* end) {
  int64_t* bounds[2] = {start, end};
  for (int k = 0; k < 2; k++) {
    const VarRef& b = slice->get<Var::Tuple>().items[k];
    if (b->obj == Py_None && b->is(Var::Kind::Constant)) *bounds[k] = k == 0 ? 0 : PY_SSIZE_T_MAX;
    else if (!graph_size(ctx, b, bounds[k])) return false;
  }
  for (int64_t code : {*start, *end})
    if (graph::is_symbol(code)) ctx.graph().assume(0, '<', code);  // Python would count from the end
  return true;
}

// The items of an index: x[i, j] has two, x[i] one, and a constant tuple (x[..., 1]) one per
// element.
std::vector<VarRef> index_items(const VarRef& index) {
  if (index->is(Var::Kind::Constant) && PyTuple_Check(index->obj)) {
    std::vector<VarRef> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(index->obj); i++) {
      PyObject* o = PyTuple_GET_ITEM(index->obj, i);
      Py_INCREF(o);
      items.push_back(make_constant(o));
    }
    return items;
  }
  bool tuple = index->is(Var::Kind::Tuple) && !is_sym_slice(index);
  return tuple ? index->get<Var::Tuple>().items : std::vector<VarRef>{index};
}

// Whether an index item is one mini supports (an int, a slice, None or ...) once specialized.
bool basic_index(const VarRef& it) {
  PyObject* o = it->obj;
  return it->is(Var::Kind::Constant) && !PyBool_Check(o) &&
         (PyLong_Check(o) || PySlice_Check(o) || o == Py_None || o == Py_Ellipsis);
}

// Decides which items stay symbolic slices (their bounds into `sym_bounds`) and specializes
// the others, refusing what mini does not support. Returns how many dims the items consume.
int64_t resolve_index_items(TraceContext& ctx, std::vector<VarRef>& items,
                            std::vector<SliceBounds>& sym_bounds) {
  int64_t consuming = 0;
  for (size_t i = 0; i < items.size(); i++) {
    VarRef& it = items[i];
    if (is_sym_slice(it)) {
      SliceBounds& b = sym_bounds[i];
      VarRef step = specialize(ctx, it->get<Var::Tuple>().items[2]);
      if (step->obj != Py_None) b.step = PyLong_Check(step->obj) ? PyLong_AsLongLong(step->obj) : 0;
      if (b.step < 1 || !symbolic_slice_bounds(ctx, it, &b.start, &b.end))
        it = specialize(ctx, it);  // eager's step check, or bounds graph sizes cannot hold
    } else {
      it = specialize(ctx, it);
    }
    if (is_sym_slice(it)) {
      consuming++;
      continue;
    }
    if (!basic_index(it))
      unsupported("indexing a tensor with " + it->describe() + " (mini supports ints, slices, None and ...)");
    if (PyLong_Check(it->obj) || PySlice_Check(it->obj)) consuming++;
  }
  return consuming;
}

// A Slice node of `r` along `dim`.
VarRef slice_node(TraceContext& ctx, const VarRef& r, int64_t dim, const SliceBounds& b) {
  Attrs a;
  a.dim = dim;
  a.start = b.start;
  a.end = b.end;
  a.step = b.step;
  return node(ctx, OpKind::Slice, {r->tensor().node}, a);
}

// The size of `r` along `dim`, specialized where `specialize_it` (a negative index or bound
// counts from an end that must be known); negative while it stays dynamic.
int64_t index_dim_size(TraceContext& ctx, const VarRef& r, int64_t dim, bool specialize_it) {
  int64_t n = meta_of(ctx, r).sizes.at(dim);
  if (n < 0 && specialize_it) n = PyLong_AsLongLong(specialize(ctx, size_var(ctx, r, dim))->obj);
  return n;
}

// r[..., i, ...] at `dim`: a Select, its index checked against a static size (a dynamic
// size's bound is a fact meta inference keeps, guarded).
VarRef select_at(TraceContext& ctx, const VarRef& r, int64_t dim, PyObject* o) {
  Attrs a;
  a.dim = dim;
  a.index = PyLong_AsLongLong(o);
  int64_t n = index_dim_size(ctx, r, dim, a.index < 0);
  if (n >= 0) {
    if (a.index < -n || a.index >= n)
      fail_index("index ", a.index, " is out of bounds for dimension ", dim, " with size ", n);
    if (a.index < 0) a.index += n;
  }
  return node(ctx, OpKind::Select, {r->tensor().node}, a);
}

// r[..., start:stop:step, ...] at `dim`: a Slice, its bounds clamped now on a static size
// (on a dynamic one when the kernel runs).
VarRef slice_at(TraceContext& ctx, const VarRef& r, int64_t dim, PyObject* o) {
  Py_ssize_t start, stop, step;
  PySlice_Unpack(o, &start, &stop, &step);
  if (step <= 0) fail_value("step must be greater than zero");
  int64_t n = index_dim_size(ctx, r, dim, start < 0 || stop < 0);
  if (n < 0) return slice_node(ctx, r, dim, {start, stop, step});  // PY_SSIZE_T_MAX: an open end
  PySlice_AdjustIndices(n, &start, &stop, step);
  return slice_node(ctx, r, dim, {start, std::max<Py_ssize_t>(stop, start), step});
}

}  // namespace

VarRef tensor_getitem(TraceContext& ctx, const VarRef& t, const VarRef& index) {
  std::vector<VarRef> items = index_items(index);
  int64_t rank = (int64_t)meta_of(ctx, t).sizes.size();
  std::vector<SliceBounds> sym_bounds(items.size());  // each symbolic slice's
  int64_t consuming = resolve_index_items(ctx, items, sym_bounds);
  check_index_count(consuming, rank);
  VarRef r = t;
  int64_t dim = 0;
  for (size_t i = 0; i < items.size(); i++) {
    PyObject* o = items[i]->obj;
    if (is_sym_slice(items[i])) {  // bounds that are graph symbols, resolved when the graph runs
      r = slice_node(ctx, r, dim++, sym_bounds[i]);
    } else if (o == Py_None) {
      Attrs a;
      a.dim = dim++;
      r = node(ctx, OpKind::Unsqueeze, {r->tensor().node}, a);
    } else if (o == Py_Ellipsis) {
      dim += rank - consuming;
    } else if (PyLong_Check(o)) {
      r = select_at(ctx, r, dim, o);
    } else {
      r = slice_at(ctx, r, dim++, o);
    }
  }
  return r;
}

}  // namespace mini::capture
