// c_style.cpp — the spelling tables of c_style.h.
#include "codegen/c_style.h"

#include <cctype>
#include <cmath>
#include <map>
#include <sstream>

namespace mini::codegen {

namespace {

std::string cpp_type(DType d) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::Int64: return "int64_t";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::BFloat16:  // the inductor backend runs such graphs eagerly (mini/inductor/compile_fx.cpp)
      fail("bfloat16 code generation for the CPU is not implemented");
  }
  return "float";
}

// C++: mini/tensor/scalar_math.h's vectorizable float math where it has it, libm otherwise.
std::string cpp_math(OpKind op, const std::string& T) {
  switch (op) {
    case OpKind::Exp: return "mini::exp_of<" + T + ">";
    case OpKind::Sin: return "mini::sin_of<" + T + ">";
    case OpKind::Cos: return "mini::cos_of<" + T + ">";
    case OpKind::Sigmoid: return "mini::sigmoid_of<" + T + ">";
    case OpKind::Gelu: return "mini::gelu_of<" + T + ">";
    case OpKind::GeluBackward: return "mini::gelu_grad_of<" + T + ">";
    case OpKind::Log: return "std::log";
    case OpKind::Tanh: return "std::tanh";
    case OpKind::Sqrt: return "std::sqrt";
    case OpKind::Pow: return "std::pow";
    default: fail("codegen: ", op_name(op), " calls no library function");
  }
}

std::string cuda_type(DType d) {
  return d == DType::BFloat16 ? "mini::bf16" : cpp_type(d);  // the prelude's (cuda_prelude.cuh)
}

// CUDA: scalar_math.h's float32 sin, cos and sigmoid, as the C++ kernels and eager mini compute
// them (the device library's sinf and cosf carry a Payne-Hanek reduction for |x| > 105615
// that NVRTC inlined into every lane: a third of chain8's compile time), and gelu; the device
// library's overloads for the rest (its expf is a few instructions) and for double. bfloat16
// computes in float, by the float name (a bf16 argument converts to float, not to double).
std::string cuda_math(OpKind op, const std::string& T) {
  std::string f = T == "mini::bf16" ? "f" : "";
  std::string C = T == "mini::bf16" ? "float" : T;
  switch (op) {
    case OpKind::Exp: return "::exp" + f;
    case OpKind::Sin: return "mini::sin_of<" + C + ">";
    case OpKind::Cos: return "mini::cos_of<" + C + ">";
    case OpKind::Log: return "::log" + f;
    case OpKind::Tanh: return "::tanh" + f;
    case OpKind::Sqrt: return "::sqrt" + f;
    case OpKind::Pow: return "::pow" + f;
    case OpKind::Sigmoid: return "mini::sigmoid_of<" + C + ">";
    case OpKind::Gelu: return "mini::gelu_of<" + C + ">";
    case OpKind::GeluBackward: return "mini::gelu_grad_of<" + C + ">";
    default: fail("codegen: ", op_name(op), " calls no library function");
  }
}

}  // namespace

const Target kCppTarget = {"cpp", cpp_type, "std::numeric_limits<double>::quiet_NaN()",
                           "std::numeric_limits<double>::infinity()", cpp_math, /*bool_as_byte=*/true};
const Target kCudaTarget = {"cuda", cuda_type, "__longlong_as_double(0x7ff8000000000000LL)",
                            "__longlong_as_double(0x7ff0000000000000LL)", cuda_math, /*bool_as_byte=*/false};

std::string size_expr(int64_t s) {
  if (graph::is_symbol(s)) return "symbols[" + std::to_string(graph::symbol_index(s)) + "]";
  return std::to_string(s) + "LL";
}

std::string product(const Shape& space, const std::vector<int64_t>& dims) {
  std::string p;
  for (int64_t d : dims) p += (p.empty() ? "" : " * ") + size_expr(space[d]);
  return p.empty() ? "1LL" : p;
}

std::string unflatten(const Shape& space, const std::string& flat, const std::vector<int64_t>& dims, const std::string& pad,
                      const std::string& index_type) {
  std::string o;
  if (dims.empty()) return o;
  bool wide = index_type == "int64_t";  // else 32-bit: static extents, without the LL
  o += pad + index_type + " rest_" + flat + " = " + flat + ";\n";
  for (size_t i = dims.size(); i-- > 0;) {
    int64_t extent = space[dims[i]];
    std::string sz = wide || graph::is_symbol(extent) ? size_expr(extent) : std::to_string(extent);
    o += pad + "const " + index_type + " x" + std::to_string(dims[i]) + " = " + (i ? "rest_" + flat + " % " + sz : "rest_" + flat) + ";\n";
    if (i) o += pad + "rest_" + flat + " /= " + sz + ";\n";
  }
  return o;
}

std::string linear_index(const Shape& space, const std::vector<int64_t>& dims) {
  std::string idx;
  for (size_t a = 0; a < dims.size(); a++) {
    std::string stride;
    for (size_t b = a + 1; b < dims.size(); b++) stride += (stride.empty() ? "" : " * ") + size_expr(space[dims[b]]);
    idx += (idx.empty() ? "" : " + ") + std::string("x") + std::to_string(dims[a]) + (stride.empty() ? "" : " * " + stride);
  }
  return idx.empty() ? "0" : idx;
}

std::string linear_full(const Shape& space) {
  std::vector<int64_t> all;
  for (int64_t d = 0; d < (int64_t)space.size(); d++) all.push_back(d);
  return linear_index(space, all);
}

void name_kernels(fusion::Schedule& s, const Target& t,
                  const std::function<std::string(const fusion::FusionGroup&)>& shape) {
  auto word_char = [](char c) { return std::isalnum((unsigned char)c) || c == '_'; };
  for (auto& k : s.groups) {
    std::string old = k.name;
    std::string base = shape ? shape(k) + old.substr(old.find('_')) : old;
    k.name = std::string(t.name) + "_" + base;
    for (auto& d : s.decisions) {  // every whole-word mention, left to right
      for (size_t at = d.text.find(old); at != std::string::npos; at = d.text.find(old, at)) {
        size_t end = at + old.size();
        bool whole = (at == 0 || !word_char(d.text[at - 1])) && (end == d.text.size() || !word_char(d.text[end]));
        if (!whole) {
          at = end;
          continue;
        }
        d.text.replace(at, old.size(), k.name);
        at += k.name.size();
      }
    }
  }
}

std::string kernel_body(const std::string& text, const std::string& name) {
  auto word_char = [](char c) { return std::isalnum((unsigned char)c) || c == '_'; };
  std::map<std::string, std::string> renamed;  // identifier -> _<first appearance>
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {  // a comment, to the end of its line
      i = text.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (!word_char(c)) {
      out += c, i++;
      continue;
    }
    size_t end = i;
    while (end < text.size() && word_char(text[end])) end++;
    std::string word = text.substr(i, end - i);
    i = end;
    size_t letters = 0, digits;
    while (letters < word.size() && std::islower((unsigned char)word[letters])) letters++;
    for (digits = letters; digits < word.size() && std::isdigit((unsigned char)word[digits]);) digits++;
    bool numbered = letters > 0 && digits > letters;  // a literal (1024LL) starts with a digit
    for (size_t j = digits; numbered && j < word.size(); j++) numbered = std::islower((unsigned char)word[j]);
    if (word == name) out += "KERNEL";
    else if (!numbered) out += word;
    else out += renamed.emplace(word, "_" + std::to_string(renamed.size())).first->second;
  }
  return out;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    out += pad + text.substr(start, end - start);
    start = end;
  }
  return out;
}

std::string CStyle::constant(const Expr& c) const {
  std::ostringstream s;
  s.precision(17);
  if (c.dtype == DType::Bool) s << (c.value ? "true" : "false");
  else if (c.dtype == DType::Int64) s << (int64_t)c.value << "LL";
  else if (std::isnan(c.value)) s << t_.nan;
  else if (std::isinf(c.value)) s << (c.value < 0 ? "-" : "") << t_.inf;
  else if (c.value == 0 && std::signbit(c.value)) s << "double(-0.0)";  // "-0" would be int zero
  else s << "double(" << c.value << ")";
  return s.str();
}

std::string CStyle::define(const LoopKernel& k, const std::string& pad, char prefix, int id, bool flat_ok) const {
  return pad + "const " + type(k.node(id).meta.dtype) + " " + prefix + std::to_string(id) + " = " +
         expr(k.expr(id, flat_ok)) + ";\n";
}

std::string CStyle::index(const Expr& load) const {
  if (load.index.flat) return "i";
  std::string idx;
  for (const IndexTerm& term : load.index.terms) {
    std::string stride = term.axis >= 0 ? "strides[" + std::to_string(load.buffer) + "][" + std::to_string(term.axis) + "]"
                                        : std::to_string(term.stride);
    std::string x = "x" + std::to_string(term.dim);
    if (term.dim == load.index.pad_dim) {  // x - lo, clamped into the input's [0, len)
      const std::string lo = std::to_string(load.index.pad_lo), last = std::to_string(load.index.pad_len - 1);
      x = "(" + x + " < " + lo + " ? 0 : " + x + " - " + lo + " > " + last + " ? " + last + " : " + x + " - " + lo + ")";
    }
    idx += (idx.empty() ? "" : " + ") + x + " * " + stride;
  }
  return idx.empty() ? "0" : idx;
}

std::string CStyle::element(const Expr& load) const {
  return "in" + std::to_string(load.buffer) + "[" + index(load) + "]";
}

std::string CStyle::expr(const ExprPtr& e) const {
  switch (e->kind) {
    case Expr::Kind::Constant: return constant(*e);
    case Expr::Kind::Load: {
      std::string spelled = element(*e);
      if (e->dtype == DType::Bool && t_.bool_as_byte) spelled = "(" + spelled + " != 0)";
      if (e->index.pad_dim >= 0) {  // 0 outside [lo, lo + len): a select of two evaluated values
        const std::string T = type(e->dtype), x = "x" + std::to_string(e->index.pad_dim);
        const int64_t lo = e->index.pad_lo, hi = e->index.pad_lo + e->index.pad_len;
        return "mini::select<" + T + ">(" + x + " >= " + std::to_string(lo) + " && " + x + " < " + std::to_string(hi) +
               ", " + T + "(" + spelled + "), " + T + "(0))";
      }
      return spelled;
    }
    case Expr::Kind::Iota: {  // start + step * index, each part only where it is not 0 or 1
      std::string v = "int64_t(" + index(*e) + ")";
      if (e->step != 1) v = std::to_string(e->step) + "LL * " + v;
      if (e->start != 0) v = std::to_string(e->start) + "LL + " + v;
      return "(" + v + ")";
    }
    case Expr::Kind::Temp: return (e->row ? "r" : "t") + std::to_string(e->node);
    case Expr::Kind::Local: return e->name;
    case Expr::Kind::Cast: return type(e->dtype) + "(" + expr(e->args[0]) + ")";
    case Expr::Kind::Op: {
      std::vector<std::string> a;
      for (const ExprPtr& arg : e->args) a.push_back(expr(arg));
      auto outlined_call = outlined.find(e->op);
      if (e->compute == DType::Float32 && outlined_call != outlined.end())
        return outlined_call->second + "(" + a[0] + ")";
      return op(*e, a);
    }
  }
  return "";
}

// pow's exponent where it is the constant 1, 2 or 3 (spelled as products), else 0.
static int small_power(const Expr& e) {
  for (int n = 1; n <= 3; n++)
    if (is_constant(e.args[1], n)) return n;
  return 0;
}

// Whether evaluating e can do no harm when its value is not used: every load of a fused kernel
// is in bounds for every element, and float arithmetic does not trap; an integer division
// could (by zero), so a branch holding one stays behind its condition.
static bool speculatable(const Expr& e) {
  if (e.kind == Expr::Kind::Op && e.op == OpKind::Div && !is_floating(e.compute)) return false;
  for (const ExprPtr& arg : e.args)
    if (!speculatable(*arg)) return false;
  return true;
}

bool CStyle::calls_math(const Expr& e) {
  return e.kind == Expr::Kind::Op && is_transcendental(e.op) && !(e.op == OpKind::Pow && small_power(e));
}

// How each op is spelled, over its (already converted) operands a and compute type T.
std::string CStyle::op(const Expr& e, const std::vector<std::string>& a) const {
  // A4 BEGIN: how each op is spelled in C++
  MINI_KIT_STUB(A4);
  const std::string T = type(e.compute);
  auto call = [&](OpKind op) { return t_.math(op, T) + "(" + a[0] + ")"; };
  std::string mode = e.attrs && e.attrs->mode == "tanh" ? "true" : "false";
  switch (e.op) {
    case OpKind::Add: return "(" + a[0] + " + " + a[1] + ")";
    case OpKind::Sub: return "(" + a[0] + " - " + a[1] + ")";
    case OpKind::Mul: return "(" + a[0] + " * " + a[1] + ")";
    case OpKind::Div: return "(" + a[0] + " / " + a[1] + ")";
    case OpKind::Pow:  // small integer exponents as multiplications (pow is a library call)
      switch (small_power(e)) {
        case 1: return a[0];
        case 2: return "(" + a[0] + " * " + a[0] + ")";
        case 3: return "(" + a[0] + " * " + a[0] + " * " + a[0] + ")";
      }
      return T + "(" + t_.math(OpKind::Pow, T) + "(" + a[0] + ", " + a[1] + "))";
    case OpKind::Maximum: return "((" + a[0] + " > " + a[1] + " || " + a[0] + " != " + a[0] + ") ? " + a[0] + " : " + a[1] + ")";
    case OpKind::Minimum: return "((" + a[0] + " < " + a[1] + " || " + a[0] + " != " + a[0] + ") ? " + a[0] + " : " + a[1] + ")";
    case OpKind::Eq: return "(" + a[0] + " == " + a[1] + ")";
    case OpKind::Ne: return "(" + a[0] + " != " + a[1] + ")";
    case OpKind::Lt: return "(" + a[0] + " < " + a[1] + ")";
    case OpKind::Le: return "(" + a[0] + " <= " + a[1] + ")";
    case OpKind::Gt: return "(" + a[0] + " > " + a[1] + ")";
    case OpKind::Ge: return "(" + a[0] + " >= " + a[1] + ")";
    case OpKind::Neg: return "(-" + a[0] + ")";
    case OpKind::Abs: return "(" + a[0] + " < 0 ? " + T + "(-" + a[0] + ") : " + a[0] + ")";
    case OpKind::Exp: return call(OpKind::Exp);
    case OpKind::Log: return call(OpKind::Log);
    case OpKind::Sin: return call(OpKind::Sin);
    case OpKind::Cos: return call(OpKind::Cos);
    case OpKind::Tanh: return call(OpKind::Tanh);
    case OpKind::Sigmoid: return call(OpKind::Sigmoid);
    case OpKind::Relu: return "(" + a[0] + " < 0 ? " + T + "(0) : " + a[0] + ")";  // NaN passes through
    case OpKind::Sqrt: return call(OpKind::Sqrt);
    case OpKind::Rsqrt: return "(" + T + "(1) / " + t_.math(OpKind::Sqrt, T) + "(" + a[0] + "))";
    case OpKind::Sign: return T + "((" + a[0] + " > 0) - (" + a[0] + " < 0))";
    case OpKind::Gelu: return t_.math(OpKind::Gelu, T) + "(" + a[0] + ", " + mode + ")";
    case OpKind::GeluBackward:
      return "(" + a[0] + " * " + t_.math(OpKind::GeluBackward, T) + "(" + a[1] + ", " + mode + "))";
    case OpKind::Cast:
      return e.dtype == DType::Bool ? "(" + a[0] + " != 0)" : type(e.dtype) + "(" + a[0] + ")";
    case OpKind::Clone: return a[0];
    case OpKind::Where:  // both operands evaluated first where that is safe (scalar_math.h select)
      if (speculatable(*e.args[1]) && speculatable(*e.args[2]))
        return "mini::select<" + T + ">(" + a[0] + ", " + a[1] + ", " + a[2] + ")";
      return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";
    default: fail("codegen: no ", t_.name, " spelling for ", op_name(e.op));
  }
  // A4 END
}

}  // namespace mini::codegen
