// cuda_statements.cpp — the CUDA renderer's spelling of a plan (stmt.h): one function per
// statement kind, and what CUDA spells its own way (a thread's place in the grid, the grid's
// stride, the Vec type, the unroll pragma) from one table, kCudaSpelling. A planner
// (plan_pointwise, cuda_pointwise.cpp) decides the statements; nothing here decides.
#include <sstream>

#include "codegen/cuda_writer.h"

namespace mini::codegen {

namespace {

// What a CUDA kernel spells that a C++ one has no word for.
struct CudaSpelling {
  const char* grid_thread;   // a thread's index in the grid
  const char* grid_threads;  // the threads of the grid: a grid-stride loop's step
  const char* vector;        // the vector of N elements of T: <vector><T, N>
  const char* unroll;        // the pragma of an unrolled loop
};
constexpr CudaSpelling kCudaSpelling = {"blockIdx.x * (int64_t)blockDim.x + threadIdx.x",
                                        "(int64_t)gridDim.x * blockDim.x", "mini::Vec", "#pragma unroll"};

struct Speller {
  const CStyle& cs;
  const Shape& space;  // the kernel's: Unflatten's extents
  std::ostringstream& o;
};

void spell_body(const Speller& sp, const Body& body, const std::string& pad);

std::string index_type(bool int32) { return int32 ? "int" : "int64_t"; }
std::string note(const Stmt& s) { return s.note.empty() ? "" : "  // " + s.note; }
std::string lanes(const Stmt& s) { return s.lanes.empty() ? std::to_string(s.width) : s.lanes; }
std::string vector_type(const Speller& sp, const Stmt& s) {
  return std::string(kCudaSpelling.vector) + "<" + sp.cs.type(s.dtype) + ", " + lanes(s) + ">";
}

void spell_range(const Speller& sp, const Stmt& s, const std::string& pad) {
  const std::string T = index_type(s.int32), v = s.text;
  switch (s.range) {
    case RangeKind::GridStride: {
      const std::string first = (s.begin.empty() ? "" : s.begin + " + ") + kCudaSpelling.grid_thread;
      sp.o << pad << "for (" << T << " " << v << " = " << first << "; " << v << " < " << s.end << ";"
           << (s.wrapped ? "\n" + pad + "     " : " ") << v << " += " << kCudaSpelling.grid_threads << ") {\n";
      break;
    }
    case RangeKind::Unrolled:
    case RangeKind::Serial:
      if (s.range == RangeKind::Unrolled) sp.o << pad << kCudaSpelling.unroll << "\n";
      sp.o << pad << "for (" << T << " " << v << " = " << s.begin << "; " << v << " < " << s.end << "; "
           << (s.step == "1" ? v + "++" : v + " += " + s.step) << ") {\n";
      break;
    default: fail("codegen: no CUDA spelling for this kind of range");
  }
  spell_body(sp, s.body, pad + "  ");
  sp.o << pad << "}\n";
}

void spell_vector_load(const Speller& sp, const Stmt& s, const std::string& pad) {
  const std::string V = vector_type(sp, s);
  const std::string read = s.value ? vector_read(sp.cs, *s.value, lanes(s))
                                   : "*reinterpret_cast<const " + V + "*>(in" + std::to_string(s.buffer) + " + " +
                                         s.index + ")";
  sp.o << pad << (s.assign ? "" : "const " + V + " ") << s.name << " = " << read << ";" << note(s) << "\n";
}

void spell_declare(const Speller& sp, const Stmt& s, const std::string& pad) {
  const bool vector = !s.lanes.empty() || s.width > 1;
  sp.o << pad << (vector ? vector_type(sp, s) : sp.cs.type(s.dtype)) << " " << s.name;
  if (s.value) sp.o << " = " << sp.cs.expr(s.value);
  sp.o << ";" << note(s) << "\n";
}

void spell(const Speller& sp, const Stmt& s, const std::string& pad) {
  std::ostringstream& o = sp.o;
  switch (s.kind) {
    case Stmt::Kind::Comment: o << pad << "// " << s.text << "\n"; break;
    case Stmt::Kind::Index:
      o << pad << (s.constant ? "constexpr " : "const ") << index_type(s.int32) << " " << s.name << " = " << s.index
        << ";" << note(s) << "\n";
      break;
    case Stmt::Kind::Unflatten: o << unflatten(sp.space, s.text, s.dims, pad, index_type(s.int32)); break;
    case Stmt::Kind::Let:
      o << pad << "const " << sp.cs.type(s.dtype) << " " << s.name << " = " << sp.cs.expr(s.value) << ";" << note(s)
        << "\n";
      break;
    case Stmt::Kind::Declare: spell_declare(sp, s, pad); break;
    case Stmt::Kind::Range: spell_range(sp, s, pad); break;
    case Stmt::Kind::VectorLoad: spell_vector_load(sp, s, pad); break;
    case Stmt::Kind::VectorStore:
      o << pad << "*reinterpret_cast<" << vector_type(sp, s) << "*>(out" << s.buffer << " + " << s.index
        << ") = " << s.name << ";\n";
      break;
    case Stmt::Kind::VectorLane: o << pad << s.name << ".v[" << s.text << "] = " << sp.cs.expr(s.value) << ";\n"; break;
    case Stmt::Kind::Store: o << pad << "out" << s.buffer << "[" << s.index << "] = " << sp.cs.expr(s.value) << ";\n"; break;
    case Stmt::Kind::Scope:
      o << pad << "{\n";
      spell_body(sp, s.body, pad + "  ");
      o << pad << "}\n";
      break;
    case Stmt::Kind::If:
      o << pad << "if (" << s.text << ") {\n";
      spell_body(sp, s.body, pad + "  ");
      o << pad << "}\n";
      break;
    default: fail("codegen: the CUDA renderer spells no such statement yet");
  }
}

void spell_body(const Speller& sp, const Body& body, const std::string& pad) {
  for (const Stmt& s : body) spell(sp, s, pad);
}

}  // namespace

std::string spell_cuda(const Body& body, const CStyle& cs, const Shape& space, const std::string& pad) {
  std::ostringstream o;
  spell_body(Speller{cs, space, o}, body, pad);
  return o.str();
}

// A Vec of `width` elements of load e from the element it reads; for a padded load, zeros
// where the vector lies outside its slice (runs_along_innermost: wholly in or out).
std::string vector_read(const CStyle& cs, const Expr& e, const std::string& width) {
  const std::string V = std::string(kCudaSpelling.vector) + "<" + cs.type(e.dtype) + ", " + width + ">";
  const std::string read = "*reinterpret_cast<const " + V + "*>(&" + cs.element(e) + ")";
  if (e.index.pad_dim < 0) return read;
  const std::string x = "x" + std::to_string(e.index.pad_dim);
  return "(" + x + " >= " + std::to_string(e.index.pad_lo) + " && " + x + " < " +
         std::to_string(e.index.pad_lo + e.index.pad_len) + ") ? " + read + " : " + V + "{}";
}

}  // namespace mini::codegen
