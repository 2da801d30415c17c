// symbolic_sizes.cpp — dynamic sizes in the user's Python code (torch's SymInt). A size of a
// symbolic dim stays an expression over the input dims through int arithmetic
// (x.shape[0] * 2, x.numel(), len(x)); a decision on it (a comparison, a branch) is made
// with the values seen while tracing, under a shape guard that keeps the decision; where a
// plain int is needed (a range bound, an index), specialize() guards it to its value.
#include "capture/convert_frame.h"
#include "capture/trace_context.h"

namespace mini::capture {

using guards::SizeExpr;
using SizeOp = guards::SizeTerm::Op;

namespace {

VarRef make_sym_int(SizeExpr expr, int64_t value) {
  auto v = std::make_shared<Var>(Var::Kind::SymInt);
  v->expr = std::move(expr);
  v->obj = PyLong_FromLongLong(value);
  v->node = 0;  // not one input dim
  return v;
}

// A SymInt, or an int constant that fits in int64, as an expression and its value now.
bool size_operand(const VarRef& v, SizeExpr* expr, int64_t* value) {
  if (v->is(Var::Kind::SymInt)) {
    *expr = v->expr;
    *value = PyLong_AsLongLong(v->obj);
    return true;
  }
  if (!v->is(Var::Kind::Constant) || !PyLong_Check(v->obj)) return false;
  int overflow = 0;
  *value = PyLong_AsLongLongAndOverflow(v->obj, &overflow);
  if (overflow) return false;
  *expr = SizeExpr::constant(*value);
  return true;
}

bool is_int(const VarRef& v, int64_t value) {
  SizeExpr e;
  int64_t got;
  return v->is(Var::Kind::Constant) && size_operand(v, &e, &got) && got == value;
}

}  // namespace

VarRef sym_binary(TraceContext& ctx, SizeOp op, const VarRef& a, const VarRef& b) {
  if (!a->is(Var::Kind::SymInt) && !b->is(Var::Kind::SymInt)) return nullptr;
  SizeExpr ea, eb;
  int64_t va, vb, result;
  if (!size_operand(a, &ea, &va) || !size_operand(b, &eb, &vb)) return nullptr;
  if ((op == SizeOp::Mul && is_int(a, 1)) || (op == SizeOp::Add && is_int(a, 0))) return b;
  if ((op == SizeOp::Mul || op == SizeOp::FloorDiv) && is_int(b, 1)) return a;
  if ((op == SizeOp::Add || op == SizeOp::Sub) && is_int(b, 0)) return a;
  if (ea.terms.size() + eb.terms.size() >= SizeExpr::kMaxTerms) return nullptr;
  // a division by zero (Python raises) or a value past int64 (Python's ints grow): the
  // caller specializes and lets Python compute it
  if (!guards::apply_size_op(op, va, vb, &result)) return nullptr;
  return make_sym_int(SizeExpr::apply(op, ea, eb), result);
}

VarRef sym_negate(TraceContext& ctx, const VarRef& a) {
  int64_t result;
  if (!a->is(Var::Kind::SymInt)) return nullptr;
  if (!guards::apply_size_op(SizeOp::Neg, PyLong_AsLongLong(a->obj), 0, &result)) return nullptr;
  return make_sym_int(SizeExpr::apply(SizeOp::Neg, a->expr), result);
}

VarRef sym_compare(TraceContext& ctx, int richcmp, const VarRef& a, const VarRef& b) {
  if (!a->is(Var::Kind::SymInt) && !b->is(Var::Kind::SymInt)) return nullptr;
  SizeExpr ea, eb;
  int64_t va, vb, result;
  if (!size_operand(a, &ea, &va) || !size_operand(b, &eb, &vb)) return nullptr;
  if (ea.terms.size() + eb.terms.size() >= SizeExpr::kMaxTerms) return nullptr;
  SizeOp op = guards::compare_op(richcmp);
  guards::apply_size_op(op, va, vb, &result);
  // the guard states what held: x.numel() > 16 seen false guards x.numel() <= 16
  ctx.guards().add_size_compare(SizeExpr::apply(result ? op : guards::negated_compare(op), ea, eb));
  if (log_channels().dynamic)
    log_write("shape guard: " + SizeExpr::apply(op, ea, eb).str() + " was " +
              (result ? "True" : "False"));
  return make_constant(PyBool_FromLong(result));
}

VarRef numel_var(TraceContext& ctx, const VarRef& tensor) {
  VarRef n = make_constant(PyLong_FromLong(1));
  for (size_t d = 0; d < meta_of(ctx, tensor).sizes.size(); d++) {
    VarRef size = size_var(ctx, tensor, (int64_t)d);
    VarRef product = sym_binary(ctx, SizeOp::Mul, n, size);
    if (!product) {  // two constants (or an expression too long): Python's ints
      VarRef a = specialize(ctx, n), b = specialize(ctx, size);
      PyObject* r = PyNumber_Multiply(a->obj, b->obj);
      if (!r) { PyErr_Clear(); unsupported("numel(): cannot multiply the sizes"); }
      product = make_constant(r);
    }
    n = product;
  }
  return n;
}

Shape hinted(TraceContext& ctx, const Shape& sizes) {
  Shape out = sizes;
  for (int64_t& s : out)
    if (graph::is_symbol(s)) s = ctx.graph().symbols[graph::symbol_index(s)].hint;
  return out;
}

namespace {
SizeExpr size_expr(TraceContext& ctx, int64_t size) {
  if (!graph::is_symbol(size)) return SizeExpr::constant(size);
  const graph::Symbol& sym = ctx.graph().symbols[graph::symbol_index(size)];
  return SizeExpr::size(ctx.trace.input_sources.at(sym.input), sym.dim);
}
}  // namespace

bool sizes_equal(TraceContext& ctx, int64_t a, int64_t b) {
  if (a == b || a == graph::kUnbacked || b == graph::kUnbacked) return true;
  if (!graph::is_symbol(a) && !graph::is_symbol(b)) return false;
  int64_t ha = hinted(ctx, {a})[0], hb = hinted(ctx, {b})[0];
  if (ha != hb) return false;
  ctx.guards().add_size_compare(SizeExpr::apply(SizeOp::Eq, size_expr(ctx, a), size_expr(ctx, b)));
  return true;
}

void guard_broadcast(TraceContext& ctx, const std::vector<int>& inputs) {
  const graph::Graph& g = ctx.graph();
  Shape out;  // the broadcast so far: a symbol stands for the sizes guarded equal to it
  for (int i : inputs) {
    if (i < 0) continue;
    const Shape& in = g.nodes[i].meta.sizes;
    size_t n = std::max(out.size(), in.size());
    Shape next(n);
    for (size_t d = 0; d < n; d++) {
      int64_t a = d < n - out.size() ? 1 : out[d - (n - out.size())];
      int64_t b = d < n - in.size() ? 1 : in[d - (n - in.size())];
      next[d] = a == 1 ? b : a;
      if (a == 1 || b == 1 || sizes_equal(ctx, a, b)) continue;
      Shape hinted_out = hinted(ctx, out);  // eager's error, with this call's sizes
      broadcast_shapes(hinted_out, hinted(ctx, in));
    }
    out = next;
  }
}

}  // namespace mini::capture
