// size_expr.h — integer expressions over the sizes of a frame's tensors: what a dynamic size
// (a SymInt) stands for while tracing, and what a shape guard checks on each call (torch
// keeps sympy expressions over s0, s1, ... in its ShapeEnv).
//
// In:  Size terms (a tensor's Source and a dim), int constants, + - * // % and unary -,
//      and the comparisons < <= == != > >=.
// Out: the value on a frame's tensors (evaluate), and the expression as torch prints it
//      (`L['x'].size()[0]*L['x'].size()[1] > 16`).
// Guarantees: arithmetic is Python's on ints (floor division and modulo round toward
// -inf); evaluation fails (returns false) on a missing tensor, a division by zero or an
// int64 overflow, never gives a wrapped value; it creates no Python objects for sources
// that are locals, globals, cells or items (attributes call getattr).
#pragma once
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

#include "guards/source.h"

namespace mini::guards {

struct SizeTerm {
  enum class Op { Size, Constant, Add, Sub, Mul, FloorDiv, Mod, Neg, Lt, Le, Eq, Ne, Gt, Ge };
  Op op = Op::Constant;
  SourceRef source;   // Size: the tensor (dim -1: an int, its own value)
  int dim = 0;        // Size
  int64_t value = 0;  // Constant
};

// Postfix: a Size term pushes `source`.size()[dim], a Constant pushes its value, an
// operator pops its operands and pushes the result (a comparison pushes 1 or 0).
struct SizeExpr {
  // Longer expressions are not built (capture specializes instead): evaluation then needs
  // no allocation.
  static constexpr size_t kMaxTerms = 32;

  std::vector<SizeTerm> terms;

  static SizeExpr size(SourceRef source, int dim);
  static SizeExpr constant(int64_t value);
  // a <op> b for a binary operator or a comparison; -a for Neg (b unused).
  static SizeExpr apply(SizeTerm::Op op, const SizeExpr& a, const SizeExpr& b = {});

  // The value on `frame`'s tensors; false when a tensor is missing or has too few dims, on a
  // division by zero or on an int64 overflow.
  bool evaluate(const FrameValues& frame, int64_t* out) const;
  std::string str() const;
  // The source of the first Size term (null if none).
  SourceRef first_source() const;
};

// One operator of a SizeExpr on values, with Python's semantics; false on a division by
// zero or an int64 overflow.
bool apply_size_op(SizeTerm::Op op, int64_t a, int64_t b, int64_t* out);
// Py_LT .. Py_GE as a comparison Op, and the comparison that holds when `op` does not.
SizeTerm::Op compare_op(int richcmp);
SizeTerm::Op negated_compare(SizeTerm::Op op);

}  // namespace mini::guards
