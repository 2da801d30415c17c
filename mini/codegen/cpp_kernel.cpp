// cpp_kernel.cpp — the C++ renderer: a kernel's plan (cpp_plan.h: the loops, OpenMP kinds,
// accumulators, folds and stages plan_cpp decided from the LoopKernel) spelled as C++. Each
// statement kind is one function of CppPrinter; how each op and value is spelled is c_style.h's
// table (kCppTarget). Nothing here decides a loop: a change of layout is a change of planner.
#include "codegen/cpp_kernel.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "codegen/c_style.h"
#include "codegen/cpp_plan.h"
#include "codegen/loop_ir.h"
#include "codegen/scalar_math_source.h"

namespace mini::codegen {

using fusion::FusionGroup;
using fusion::Schedule;

namespace {

// The out-of-line vector versions of float sin, cos, exp and sigmoid (OpenMP simd clones) a
// source with many transcendental ops calls (cpp_outlines_math) instead of inlining a copy each.
constexpr const char* kOutlinedMath =
    "namespace mini {  // out-of-line vector versions: this source has many transcendental ops\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float sin_v(float x) { return sin_f32(x); }\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float cos_v(float x) { return cos_f32(x); }\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float exp_v(float x) { return exp_f32(x); }\n"
    "#pragma omp declare simd notinbranch\n"
    "static __attribute__((noinline)) float sigmoid_v(float x) { return sigmoid_f32(x); }\n"
    "}  // namespace mini\n";

// The statements of a plan (stmt.h) as C++: one function per kind. What OpenMP calls each
// range kind and how an accumulator starts and ends are this file's; how an op or value is
// spelled is CStyle's.
class CppPrinter {
 public:
  CppPrinter(const LoopKernel& kernel, bool outline) : L_(kernel), cs_(kCppTarget) {
    if (outline) cs_.outlined = cpp_outlined_math();
  }

  std::string body(const Body& statements, const std::string& pad) const {
    std::string text;
    for (const Stmt& s : statements) text += statement(s, pad);
    return text;
  }

 private:
  std::string statement(const Stmt& s, const std::string& pad) const {
    switch (s.kind) {
      case Stmt::Kind::Comment: return comment(s, pad);
      case Stmt::Kind::Let: return let(s, pad);
      case Stmt::Kind::Index: return index(s, pad);
      case Stmt::Kind::Declare: return declare(s, pad);
      case Stmt::Kind::Fold: return pad + fold(s) + "\n";
      case Stmt::Kind::Range: return range(s, pad);
      case Stmt::Kind::Store: return pad + target(s) + " = " + value(s) + ";\n";
      case Stmt::Kind::If: return branch(s, pad);
      case Stmt::Kind::Unflatten: return unflatten(L_.group().space, s.text, s.dims, pad);
      case Stmt::Kind::Array: return array(s, pad);
      case Stmt::Kind::Alloc: return alloc(s, pad);
      case Stmt::Kind::Free: return pad + "std::free(" + s.name + ");\n";
      case Stmt::Kind::Reset: return reset(s, pad);
      case Stmt::Kind::Result: return result(s, pad);
      case Stmt::Kind::Unused: return pad + "(void)" + s.name + ";\n";
      case Stmt::Kind::Return: return pad + "return;\n";
      default: fail("codegen: the C++ renderer has no spelling for this statement kind");
    }
  }

  std::string type(DType d) const { return kCppTarget.type(d); }
  // A variable, or its element `at` where at is not empty.
  static std::string element(const std::string& name, const std::string& at) {
    return at.empty() ? name : name + "[" + at + "]";
  }
  std::string value(const Stmt& s) const { return s.value ? cs_.expr(s.value) : s.spelled; }
  std::string target(const Stmt& s) const {
    return element(s.buffer >= 0 ? "out" + std::to_string(s.buffer) : s.array, s.index);
  }
  // Where an accumulator of `op` starts.
  std::string identity(OpKind op, DType d) const {
    const std::string A = type(d);
    if (op == OpKind::Sum || op == OpKind::Mean) return A + "(0)";
    bool max = op == OpKind::Amax;
    if (d == DType::Float32 || d == DType::Float64)
      return std::string(max ? "-" : "") + "std::numeric_limits<" + A + ">::infinity()";
    return "std::numeric_limits<" + A + ">::" + (max ? "lowest()" : "max()");
  }

  std::string comment(const Stmt& s, const std::string& pad) const {
    std::string text;
    size_t start = 0;
    while (start <= s.text.size()) {
      size_t end = std::min(s.text.find('\n', start), s.text.size());
      text += pad + "// " + s.text.substr(start, end - start) + "\n";
      start = end + 1;
    }
    return text;
  }
  std::string let(const Stmt& s, const std::string& pad) const {
    std::string v = s.value ? cs_.expr(s.value) : element(s.array, s.index);
    return pad + "const " + type(s.dtype) + " " + s.name + " = " + v + ";\n";
  }
  std::string index(const Stmt& s, const std::string& pad) const {
    std::string text = pad + "const " + type(s.dtype) + " ";
    for (size_t k = 0; k < s.lets.size(); k++) text += (k ? ", " : "") + s.lets[k].first + " = " + s.lets[k].second;
    return text + ";\n";
  }
  std::string declare(const Stmt& s, const std::string& pad) const {
    std::string init = s.spelled.empty() ? identity(s.op, s.dtype) : s.spelled;
    std::string text = pad + type(s.dtype) + " " + s.name + " = " + init + ";\n";
    if (!s.flag.empty()) text += pad + "int " + s.flag + " = 0;  // max/min propagate NaN, as eager\n";
    return text;
  }
  std::string array(const Stmt& s, const std::string& pad) const {
    std::string text = pad + type(s.dtype) + " " + s.name + "[" + s.length + "]" + (s.zeroed ? " = {}" : "") + ";" +
                       (s.text.empty() ? "" : "  // " + s.text) + "\n";
    if (!s.flag.empty()) text += pad + "int " + s.flag + "[" + s.length + "];\n";
    return text;
  }
  // A sum adds; a max or min keeps the larger (smaller) and records a NaN in its flag.
  std::string fold(const Stmt& s) const {
    const std::string acc = element(s.name, s.index), v = value(s);
    if (s.op == OpKind::Sum || s.op == OpKind::Mean) return acc + " += " + v + ";";
    const std::string keeps = s.op == OpKind::Amax ? " > " : " < ";
    const std::string keep = acc + " = " + v + keeps + acc + " ? " + v + " : " + acc + ";";
    return s.flag.empty() ? keep : keep + " " + element(s.flag, s.index) + " |= " + v + " != " + v + ";";
  }
  std::string alloc(const Stmt& s, const std::string& pad) const {
    const std::string T = type(s.dtype);
    return pad + T + "* " + s.name + " = static_cast<" + T + "*>(std::malloc(sizeof(" + T + ") * " + s.length +
           "));\n";
  }
  std::string reset(const Stmt& s, const std::string& pad) const {
    return pad + element(s.name, s.index) + " = " + identity(s.op, s.dtype) +
           (s.flag.empty() ? "" : ", " + element(s.flag, s.index) + " = 0") + ";\n";
  }
  std::string result(const Stmt& s, const std::string& pad) const {
    std::string v = element(s.array, s.index);
    if (!s.flag.empty())
      v = "(" + element(s.flag, s.index) + " ? std::numeric_limits<" + type(s.accumulator) +
          ">::quiet_NaN() : " + v + ")";
    if (s.op == OpKind::Mean) v = "(" + v + " / double(" + s.length + "))";
    return pad + "const " + type(s.dtype) + " " + s.name + " = " + type(s.dtype) + "(" + v + ");\n";
  }
  std::string branch(const Stmt& s, const std::string& pad) const {
    std::string text = pad + "if (" + s.text + ") {\n" + body(s.body, pad + "  ");
    if (!s.orelse.empty()) text += pad + "} else {\n" + body(s.orelse, pad + "  ");
    return text + pad + "}\n";
  }

  // The OpenMP pragma of a range's kind ("" for a serial one), with its clauses.
  static std::string pragma(const Stmt& s) {
    std::string p;
    switch (s.range) {
      case RangeKind::Simd: p = "#pragma omp simd"; break;
      case RangeKind::Parallel: p = "#pragma omp parallel for"; break;
      case RangeKind::ParallelSimd: p = "#pragma omp parallel for simd"; break;
      case RangeKind::Serial: return "";
      default: fail("codegen: the C++ renderer has no loop of this range kind");
    }
    if (s.collapse) p += " collapse(" + std::to_string(s.collapse) + ")";
    for (const Reduction& r : s.reductions) {
      const char* combine = r.op == OpKind::Amax ? "max" : r.op == OpKind::Amin ? "min" : "+";
      p += std::string(" reduction(") + combine + " : " + r.name + ")";
      if (!r.flag.empty()) p += " reduction(| : " + r.flag + ")";
    }
    // a combined construct's `if` names its parallel part: a bare `if` would turn simd off too
    if (!s.parallel_if.empty())
      p += (s.range == RangeKind::ParallelSimd ? " if (parallel: " : " if (") + s.parallel_if + ")";
    return p;
  }
  std::string range(const Stmt& s, const std::string& pad) const {
    const std::string step = s.step == "1" ? s.text + "++" : s.text + " += " + s.step;
    const std::string head =
        "for (int64_t " + s.text + " = " + s.begin + "; " + s.text + " < " + s.end + "; " + step + ")";
    if (s.compact) {  // one statement, no braces
      const Stmt& one = s.body.at(0);
      if (one.kind == Stmt::Kind::Range) return pad + head + "\n" + statement(one, pad + "  ");
      return pad + head + " " + statement(one, "");
    }
    std::string text, p = pragma(s), in = s.nest_in ? pad + "  " : pad;
    if (!p.empty()) text += pad + p + "\n";
    return text + in + head + " {\n" + body(s.body, in + "  ") + in + "}\n";
  }

  const LoopKernel& L_;
  CStyle cs_;
};

// A kernel's opening: its comment (what it fused, over which space), its signature and its
// buffers, named in<b> (loads) and out<b> (stores).
std::string signature(const LoopKernel& L) {
  const FusionGroup& k = L.group();
  const graph::Graph& g = L.graph();
  std::ostringstream o;
  o << "// " << k.name << ": graph nodes";
  for (int id : k.nodes) o << " " << g.nodes[id].name;
  std::string space = "[", reduced = " [";
  for (size_t d = 0; d < k.space.size(); d++) space += (d ? ", " : "") + graph::size_str(k.space[d]);
  for (size_t i = 0; i < k.reduced.size(); i++) reduced += (i ? ", " : "") + std::to_string(k.reduced[i]);
  o << "\n//   over " << space << "]" << (k.reduced.empty() ? "" : ", reducing dims" + reduced + "]") << "\n";
  for (int id : k.nodes)
    if (!g.nodes[id].code.empty()) {
      o << "//   " << g.nodes[id].code << "\n";
      break;
    }
  o << "extern \"C\" void " << k.name << "(char* const* buffers, const int64_t* const* strides, const int64_t* symbols) {\n";
  o << "  (void)strides; (void)symbols;\n";
  for (auto& [id, i] : L.load_index()) {  // bool buffers as bytes: a load reads `in[j] != 0` (c_style.cpp)
    DType d = g.nodes[id].meta.dtype;
    std::string T = d == DType::Bool ? "unsigned char" : kCppTarget.type(d);
    o << "  const " << T << "* in" << i << " = (const " << T << "*)buffers[" << i << "];\n";
  }
  for (auto& [id, i] : L.store_index()) {
    std::string T = kCppTarget.type(g.nodes[id].meta.dtype);
    o << "  " << T << "* out" << i << " = (" << T << "*)buffers[" << i << "];\n";
  }
  return o.str();
}

}  // namespace

std::string scalar_math_prelude() {
  std::string text = kScalarMathSource;  // a header's text: its include guard has no use here
  size_t guard = text.find("#pragma once");
  if (guard != std::string::npos) text.erase(guard, std::string("#pragma once").size());
  return text;
}

std::string render_cpp(const Schedule& s, std::vector<std::string>* functions) {
  std::ostringstream o;
  o << "// Generated by mini's inductor (mini/codegen/cpp_kernel.cpp). Do not edit.\n";
  o << "#include <omp.h>\n\n#include <cmath>\n#include <cstdint>\n#include <cstdlib>\n#include <cstring>\n#include <limits>\n\n";
  o << kPreludeBegin << "\n" << scalar_math_prelude() << kPreludeEnd << "\n";
  bool outline = cpp_outlines_math(s);
  if (outline) o << "\n" << kOutlinedMath;
  std::map<std::string, std::string> first_of;  // a body -> the kernel that holds it
  for (const auto& k : s.groups) {
    LoopKernel kernel(s, k);
    std::string text = signature(kernel) + CppPrinter(kernel, outline).body(plan_cpp(kernel).body, "  ") + "}\n";
    auto [first, fresh] = first_of.emplace(kernel_body(text, k.name), k.name);
    if (functions) functions->push_back(first->second);
    if (fresh) o << "\n" << text;
    else o << "\n" << text.substr(0, text.find('\n') + 1) << "//   runs " << first->second << " (the same body, compiled once)\n";
  }
  return o.str();
}

std::vector<std::string> split_source(const std::string& source, const Schedule& s, int n) {
  std::vector<size_t> starts;  // where each kernel's text begins: its comment line
  for (const auto& k : s.groups) {
    size_t at = source.find("\n// " + k.name + ":", starts.empty() ? 0 : starts.back());
    if (at == std::string::npos) return {source};  // not render_cpp's text: one unit
    starts.push_back(at + 1);
  }
  if (starts.empty() || n <= 1) return {source};
  std::string header = source.substr(0, starts[0]);
  starts.push_back(source.size());
  size_t target = (source.size() - starts[0]) / (size_t)std::min<int>(n, (int)s.groups.size()) + 1;
  std::vector<std::string> units;
  for (size_t k = 0, begin = starts[0]; k + 1 < starts.size(); k++) {
    bool last = k + 2 == starts.size();
    if (last || starts[k + 1] - begin >= target) {  // close the unit after kernel k
      units.push_back(header + source.substr(begin, starts[k + 1] - begin));
      begin = starts[k + 1];
    }
  }
  return units;
}

std::string without_prelude(const std::string& source) {
  size_t begin = source.find(kPreludeBegin), end = source.find(kPreludeEnd);
  if (begin == std::string::npos || end == std::string::npos) return source;
  end += std::string(kPreludeEnd).size();
  int64_t lines = std::count(source.begin() + begin, source.begin() + end, '\n');
  return source.substr(0, begin) + "// (the prelude, mini/tensor/scalar_math.h: " + std::to_string(lines) +
         " lines, omitted here; MINI_COMPILE_DEBUG=1 writes the whole source)" + source.substr(end);
}

}  // namespace mini::codegen
