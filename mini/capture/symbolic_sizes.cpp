// symbolic_sizes.cpp — dynamic sizes in the user's Python code (torch's SymInt). A size of a
// symbolic dim stays an expression over the input dims through int arithmetic
// (x.shape[0] * 2, x.numel(), len(x)); a decision on it (a comparison, a branch) is made
// with the values seen while tracing, under a shape guard that keeps the decision; where a
// plain int is needed (a range bound, an index), specialize() guards it to its value.
// A SymInt used as a size of the graph (a factory's size, a slice bound) becomes a graph
// symbol (graph_size), and the relations meta inference assumed between symbols become
// shape guards at the end of the trace (guard_size_facts).
#include "capture/compile_log.h"
#include "capture/config.h"
#include "capture/trace_context.h"
#include <unordered_map>

namespace mini::capture {

using guards::SizeExpr;
using SizeOp = guards::SizeTerm::Op;

namespace {

VarRef make_sym_int(SizeExpr expr, int64_t value) {
  auto v = std::make_shared<Var>(Var::SymInt{std::move(expr), 0});  // not one input dim
  v->obj = PyLong_FromLongLong(value);
  return v;
}

// A SymInt, or an int constant that fits in int64, as an expression and its value now.
bool size_operand(const VarRef& v, SizeExpr* expr, int64_t* value) {
  if (v->is(Var::Kind::SymInt)) {
    *expr = v->get<Var::SymInt>().expr;
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
  return make_sym_int(SizeExpr::apply(SizeOp::Neg, a->get<Var::SymInt>().expr), result);
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

VarRef sym_as_number(TraceContext& ctx, const VarRef& v) {
  if (!v->is(Var::Kind::SymInt)) return v;
  // one graph input per expression, however often the code uses it
  guards::SourceRef src = guards::Source::size_of(v->get<Var::SymInt>().expr);
  std::string key = src->str();
  for (size_t i = 0; i < ctx.trace.input_sources.size(); i++)
    if (ctx.trace.scalar_inputs[i] && ctx.trace.input_sources[i]->str() == key) {
      VarRef r = tensor_var(ctx, ctx.graph().inputs[i]);
      r->tensor().number = true;
      return r;
    }
  // the example value, kept for the process: the trace's examples are borrowed (sizes repeat)
  static std::unordered_map<int64_t, PyObject*> examples;
  int64_t value = PyLong_AsLongLong(v->obj);
  PyObject*& example = examples[value];
  if (!example) example = PyLong_FromLongLong(value);
  graph::TensorMeta meta{{}, {}, DType::Int64, false};
  int node = ctx.graph().add_input(meta, key);
  ctx.graph().nodes[node].wrapped_number = true;
  ctx.trace.input_sources.push_back(src);
  ctx.trace.example_inputs.push_back(example);
  ctx.trace.scalar_inputs.push_back(true);
  if (log_channels().dynamic) log_write("the dynamic size " + key + " enters the graph as a number");
  VarRef r = tensor_var(ctx, node);
  r->tensor().number = true;
  return r;
}

VarRef sym_extreme(TraceContext& ctx, bool largest, const std::vector<VarRef>& args) {
  bool symbolic = false;
  std::vector<std::pair<SizeExpr, int64_t>> operands;
  for (const VarRef& a : args) {
    SizeExpr e;
    int64_t value;
    if (!size_operand(a, &e, &value)) return nullptr;
    symbolic = symbolic || a->is(Var::Kind::SymInt);
    operands.emplace_back(std::move(e), value);
  }
  if (!symbolic) return nullptr;
  // the first of the largest (smallest) now, as Python's max (min); a shape guard keeps it
  // the one: the result stays an expression, and only a call that changes which operand
  // wins compiles again
  size_t best = 0;
  for (size_t i = 1; i < operands.size(); i++)
    if (largest ? operands[i].second > operands[best].second : operands[i].second < operands[best].second) best = i;
  for (size_t i = 0; i < operands.size(); i++) {
    if (i == best) continue;
    // before the winner: strictly beaten (Python keeps the first of equals); after: at most equal
    SizeOp op = largest ? (i < best ? SizeOp::Gt : SizeOp::Ge) : (i < best ? SizeOp::Lt : SizeOp::Le);
    ctx.guards().add_size_compare(SizeExpr::apply(op, operands[best].first, operands[i].first));
  }
  return args[best];
}

VarRef sym_slice(TraceContext& ctx, std::vector<VarRef> parts) {
  auto symbolic_part = [&](const VarRef& p) { return p->is(Var::Kind::SymInt) || number_input(ctx, p, true) >= 0; };
  bool symbolic = false;
  for (const VarRef& p : parts) symbolic = symbolic || symbolic_part(p);
  if (!symbolic) return nullptr;
  while (parts.size() < 3) parts.push_back(make_constant((Py_INCREF(Py_None), Py_None)));
  for (VarRef& p : parts) {
    if (symbolic_part(p)) continue;
    p = specialize(ctx, p);
    if (!p->is(Var::Kind::Constant) || !(p->obj == Py_None || (PyLong_Check(p->obj) && !PyBool_Check(p->obj))))
      unsupported("a slice bound that is not a Python int or None");
  }
  Var::Tuple r{{std::move(parts)}};
  r.record = make_constant((Py_INCREF(&PySlice_Type), (PyObject*)&PySlice_Type));
  r.object_record = true;  // not a sequence: indexing or iterating it is Python's TypeError
  for (const char* field : {"start", "stop", "step"}) r.fields.push_back(make_constant(PyUnicode_FromString(field)));
  return std::make_shared<Var>(std::move(r));
}

bool is_sym_slice(const VarRef& v) {
  const Var::Tuple* tuple = v ? v->as<Var::Tuple>() : nullptr;
  return tuple && tuple->record && tuple->record->obj == (PyObject*)&PySlice_Type;
}

// An int argument made dynamic used as a size (ones(n)): a symbol standing for the number's
// value (Symbol::dim -1), read from its 0-d input on each run, as torch's SymInt of an int
// input. A value of 0 or 1 is not made a symbol (torch specializes those too), and `n >= 2`
// is guarded, so size 1's broadcasting and size 0's emptiness never meet a symbol.
static bool number_symbol(TraceContext& ctx, const VarRef& v, int64_t* code) {
  int pos = number_input(ctx, v, true);
  if (pos < 0) return false;
  int overflow = 0;
  int64_t value = PyLong_AsLongLongAndOverflow(ctx.trace.example_inputs[pos], &overflow);
  if (overflow || value < 2) return false;
  graph::Graph& g = ctx.graph();
  for (size_t k = 0; k < g.symbols.size(); k++)
    if (g.symbols[k].input == pos && g.symbols[k].dim < 0) return *code = graph::symbol_code((int)k), true;
  g.symbols.push_back({pos, -1, value});
  *code = graph::symbol_code((int)g.symbols.size() - 1);
  const guards::SourceRef& src = ctx.trace.input_sources[pos];
  ctx.guards().add_size_compare(SizeExpr::apply(SizeOp::Ge, SizeExpr::size(src, -1), SizeExpr::constant(2)));
  if (log_channels().dynamic)
    log_write("create_symbol " + graph::size_str(*code) + " = " + std::to_string(value) + " for " + src->str() +
              " (a dynamic int used as a size)");
  return true;
}

bool graph_size(TraceContext& ctx, const VarRef& v, int64_t* code) {
  if (is_dynamic_number(v)) return number_symbol(ctx, v, code);
  graph::Graph& g = ctx.graph();
  SizeExpr e;
  int64_t value;
  if (!size_operand(v, &e, &value) || value < 0) return false;
  if (const Var::SymInt* s = v->as<Var::SymInt>(); s && graph::is_symbol(s->symbol)) return *code = s->symbol, true;
  std::vector<int64_t> stack;
  for (const auto& t : e.terms) {
    if (t.op == SizeOp::Constant) {
      if (t.value < 0) return false;
      stack.push_back(t.value);
    } else if (t.op == SizeOp::Size) {
      size_t k = 0;
      for (; k < g.symbols.size(); k++) {
        const graph::Symbol& s = g.symbols[k];
        if (s.input >= 0 && s.dim == t.dim && ctx.trace.input_sources[s.input]->str() == t.source->str()) break;
      }
      if (k == g.symbols.size()) return false;
      stack.push_back(graph::symbol_code((int)k));
    } else if (t.op == SizeOp::Add || t.op == SizeOp::Sub || t.op == SizeOp::Mul) {
      if (stack.size() < 2) return false;
      int64_t b = stack.back();
      stack.pop_back();
      stack.back() = g.derive(t.op == SizeOp::Add ? '+' : t.op == SizeOp::Sub ? '-' : '*', stack.back(), b);
    } else if (t.op == SizeOp::FloorDiv) {  // by a positive int: a size's floor, as C++'s / of sizes
      if (stack.size() < 2 || graph::is_symbol(stack.back()) || stack.back() <= 0) return false;
      int64_t b = stack.back();
      stack.pop_back();
      if (graph::is_symbol(stack.back()) ? false : stack.back() < 0) return false;
      stack.back() = g.derive('/', stack.back(), b);
    } else {
      return false;  // % and unary -: graph symbols are sums, differences, products and quotients
    }
  }
  if (stack.size() != 1 || g.hint(stack[0]) != value) return false;
  *code = stack[0];
  return true;
}

SizeExpr size_expr_of(TraceContext& ctx, int64_t code) {
  if (!graph::is_symbol(code)) return SizeExpr::constant(code);
  const graph::Symbol& s = ctx.graph().symbols[graph::symbol_index(code)];
  if (s.input >= 0) return SizeExpr::size(ctx.trace.input_sources.at(s.input), s.dim);
  SizeOp op = s.op == '+' ? SizeOp::Add : s.op == '-' ? SizeOp::Sub : s.op == '*' ? SizeOp::Mul : SizeOp::FloorDiv;
  return SizeExpr::apply(op, size_expr_of(ctx, s.lhs), size_expr_of(ctx, s.rhs));
}

void guard_size_facts(TraceContext& ctx) {
  graph::Graph& g = ctx.graph();
  for (const graph::SizeFact& f : g.size_facts) {
    SizeOp op = f.op == '=' ? SizeOp::Eq : f.op == '!' ? SizeOp::Ne : f.op == '<' ? SizeOp::Le : SizeOp::Gt;
    SizeExpr holds = SizeExpr::apply(op, size_expr_of(ctx, f.lhs), size_expr_of(ctx, f.rhs));
    if (log_channels().dynamic) log_write("size relation the graph relies on: " + holds.str());
    if (holds.terms.size() <= SizeExpr::kMaxTerms) {
      ctx.guards().add_size_compare(holds);
      continue;
    }
    // too long to evaluate without allocating: each input dim in it keeps its value
    std::vector<int64_t> codes{f.lhs, f.rhs};
    while (!codes.empty()) {
      int64_t c = codes.back();
      codes.pop_back();
      if (!graph::is_symbol(c)) continue;
      const graph::Symbol& s = g.symbols[graph::symbol_index(c)];
      if (s.input < 0) codes.insert(codes.end(), {s.lhs, s.rhs});
      else ctx.guards().add_size_compare(SizeExpr::apply(SizeOp::Eq, size_expr_of(ctx, c), SizeExpr::constant(s.hint)));
    }
  }
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

}  // namespace mini::capture
