// size_expr.cpp — building, evaluating (on a frame's tensors, without Python objects) and
// printing SizeExprs, the expressions over tensor sizes behind dynamic sizes and shape guards.
#include "guards/size_expr.h"

#include "guards/guards.h"

namespace mini::guards {

namespace {
using Op = SizeTerm::Op;

// Printing precedence, as Python's: atoms bind tightest, comparisons loosest.
int precedence(Op op) {
  switch (op) {
    case Op::Size: case Op::Constant: return 4;
    case Op::Neg: return 3;
    case Op::Mul: case Op::FloorDiv: case Op::Mod: return 2;
    case Op::Add: case Op::Sub: return 1;
    default: return 0;
  }
}

const char* symbol(Op op) {
  switch (op) {
    case Op::Add: return " + ";
    case Op::Sub: return " - ";
    case Op::Mul: return "*";
    case Op::FloorDiv: return "//";
    case Op::Mod: return "%";
    case Op::Lt: return " < ";
    case Op::Le: return " <= ";
    case Op::Eq: return " == ";
    case Op::Ne: return " != ";
    case Op::Gt: return " > ";
    case Op::Ge: return " >= ";
    default: return "?";
  }
}
}  // namespace

SizeExpr SizeExpr::size(SourceRef source, int dim) {
  SizeTerm t;
  t.op = Op::Size;
  t.source = std::move(source);
  t.dim = dim;
  return SizeExpr{{t}};
}

SizeExpr SizeExpr::constant(int64_t value) {
  SizeTerm t;
  t.value = value;
  return SizeExpr{{t}};
}

SizeExpr SizeExpr::apply(Op op, const SizeExpr& a, const SizeExpr& b) {
  SizeExpr e = a;
  if (op != Op::Neg) e.terms.insert(e.terms.end(), b.terms.begin(), b.terms.end());
  SizeTerm t;
  t.op = op;
  e.terms.push_back(t);
  return e;
}

SourceRef SizeExpr::first_source() const {
  for (const auto& t : terms)
    if (t.op == Op::Size) return t.source;
  return nullptr;
}

bool apply_size_op(Op op, int64_t a, int64_t b, int64_t* out) {
  switch (op) {
    case Op::Add: return !__builtin_add_overflow(a, b, out);
    case Op::Sub: return !__builtin_sub_overflow(a, b, out);
    case Op::Mul: return !__builtin_mul_overflow(a, b, out);
    case Op::Neg: return !__builtin_sub_overflow(int64_t(0), a, out);
    case Op::FloorDiv: case Op::Mod: {
      if (b == 0 || (a == INT64_MIN && b == -1)) return false;
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {  // C++ truncates; Python floors
        q -= 1;
        r += b;
      }
      *out = op == Op::FloorDiv ? q : r;
      return true;
    }
    case Op::Lt: *out = a < b; return true;
    case Op::Le: *out = a <= b; return true;
    case Op::Eq: *out = a == b; return true;
    case Op::Ne: *out = a != b; return true;
    case Op::Gt: *out = a > b; return true;
    case Op::Ge: *out = a >= b; return true;
    default: return false;
  }
}

Op compare_op(int richcmp) {
  switch (richcmp) {
    case Py_LT: return Op::Lt;
    case Py_LE: return Op::Le;
    case Py_EQ: return Op::Eq;
    case Py_NE: return Op::Ne;
    case Py_GT: return Op::Gt;
    default: return Op::Ge;
  }
}

Op negated_compare(Op op) {
  switch (op) {
    case Op::Lt: return Op::Ge;
    case Op::Le: return Op::Gt;
    case Op::Eq: return Op::Ne;
    case Op::Ne: return Op::Eq;
    case Op::Gt: return Op::Le;
    default: return Op::Lt;
  }
}

bool SizeExpr::evaluate(const FrameValues& frame, int64_t* out) const {
  if (terms.empty() || terms.size() > kMaxTerms) return false;
  int64_t stack[kMaxTerms];
  size_t n = 0;
  for (const SizeTerm& t : terms) {
    if (t.op == Op::Constant) {
      stack[n++] = t.value;
    } else if (t.op == Op::Size) {
      PyObject* o = fetch(*t.source, frame);
      bool ok;
      if (t.dim < 0) {  // an int's own value
        int overflow = 0;
        ok = o && PyLong_CheckExact(o);
        if (ok) stack[n] = PyLong_AsLongLongAndOverflow(o, &overflow);
        ok = ok && !overflow;
        if (ok) n++;
      } else {
        TensorImpl* tensor = o ? unwrap_tensor(o) : nullptr;
        ok = tensor && t.dim < tensor->dim();
        if (ok) stack[n++] = tensor->sizes[t.dim];
      }
      Py_XDECREF(o);
      if (!ok) return false;
    } else if (t.op == Op::Neg) {
      if (n < 1 || !apply_size_op(Op::Neg, stack[n - 1], 0, &stack[n - 1])) return false;
    } else {
      if (n < 2 || !apply_size_op(t.op, stack[n - 2], stack[n - 1], &stack[n - 2])) return false;
      n--;
    }
  }
  if (n != 1) return false;
  *out = stack[0];
  return true;
}

std::string SizeExpr::str() const {
  struct Part {
    std::string text;
    int precedence;
  };
  std::vector<Part> parts;
  auto operand = [](const Part& p, bool paren) { return paren ? "(" + p.text + ")" : p.text; };
  for (const SizeTerm& t : terms) {
    int p = precedence(t.op);
    if (t.op == Op::Constant) {
      parts.push_back({std::to_string(t.value), t.value < 0 ? 3 : p});
    } else if (t.op == Op::Size) {
      parts.push_back({t.source->str() + (t.dim < 0 ? "" : ".size()[" + std::to_string(t.dim) + "]"), p});
    } else if (t.op == Op::Neg) {
      if (parts.empty()) return "?";
      parts.back() = {"-" + operand(parts.back(), parts.back().precedence < p), p};
    } else {
      if (parts.size() < 2) return "?";
      Part b = parts.back();
      parts.pop_back();
      Part& a = parts.back();
      // left-associative: the right operand needs parentheses at equal precedence too
      a = {operand(a, a.precedence < p) + symbol(t.op) + operand(b, b.precedence <= p), p};
    }
  }
  return parts.size() == 1 ? parts[0].text : "?";
}

}  // namespace mini::guards
