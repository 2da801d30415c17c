// cuda_statements.cpp — the CUDA renderer's spelling of a plan (stmt.h): one function per
// statement kind, and what CUDA spells its own way (a thread's place in the grid, the grid's
// stride, the Vec type, the unroll pragma; a split row's shared memory, fences, arrival count,
// partials and block reduction; a column block's thread places, chunks among blocks in y and
// fold over a column's lanes; a row's lanes among a block's rows, warp reductions, alignment
// checks, the online softmax's rescaling and the pointer hidden from the optimizer) from one
// table, kCudaSpelling. A planner (plan_pointwise, cuda_pointwise.cpp; plan_split_reduction,
// plan_column_reduction and plan_vector_columns, cuda_columns.cpp; plan_row_reduction and
// plan_vector_rows, cuda_rows.cpp) decides the statements; nothing here decides.
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
  // the split row's (plan_split_reduction)
  const char* shared;        // memory a block's threads share
  const char* fence;         // a thread's writes visible to the grid
  const char* barrier;       // every thread of the block waits
  const char* thread;        // a thread's index in its block
  const char* block;         // a block's index in the grid
  const char* blocks;        // the blocks of the grid
  const char* block_threads;  // the threads of a block
  const char* arrive;        // counts a block in, giving the count before: atomicAdd(arrived, 1u)
  const char* reset;         // the count of arrived blocks, to be set back to 0
  const char* partials;      // a partial's slot of 8 bytes, read with...
  const char* read_past_cache;  // ... this load, which skips the cache a block's writes may miss
  const char* block_reduce;  // the fold of a value across a block: <this><A, combine<A>>
  const char* combine[3];    // sum (and mean), max, min: <this><A>(a, b)
  const char* lowest;        // a max's identity: <this><A>()
  const char* highest;       // a min's identity: <this><A>()
  // the column reduction's (plan_column_reduction)
  const char* column_thread;  // a thread's column: 32 a block along x
  const char* column_lane;   // a thread's lane in its column (32 lanes a block)
  const char* column_in_block;  // a thread's column in its block
  const char* warp_reduce;   // the fold of a value across a warp: <this><A, combine<A>>
  const char* strip_block;   // a block's index in its column strip (y)
  const char* strip_blocks;  // the blocks of a column strip
  const char* strip_arrive;  // counts a block of a strip in, giving the count before
  const char* strip_reset;   // the count of a strip's arrived blocks, to be set back to 0
  const char* min;           // the smaller of two indices
  // the rows' (plan_row_reduction, plan_vector_rows)
  const char* aligned;       // whether a pointer is aligned to a Vec of N elements of T: <this><T, N>(p)
  const char* online_scale;  // an online sum's scale from one max to another: <this><A>(m, m2)
  const char* online_finish;  // an online sum, NaN where its max is -inf: <this><A>(sum, m)
  const char* hide_pointer;  // an empty asm that "changes" a pointer: <this>(pointer));
};
constexpr CudaSpelling kCudaSpelling = {"blockIdx.x * (int64_t)blockDim.x + threadIdx.x",
                                        "(int64_t)gridDim.x * blockDim.x",
                                        "mini::Vec",
                                        "#pragma unroll",
                                        "__shared__",
                                        "__threadfence()",
                                        "__syncthreads()",
                                        "threadIdx.x",
                                        "blockIdx.x",
                                        "gridDim.x",
                                        "blockDim.x",
                                        "atomicAdd(arrived, 1u)",
                                        "*arrived",
                                        "partials",
                                        "__ldcg",
                                        "mini::block_reduce",
                                        {"mini::sum_of", "mini::max_of", "mini::min_of"},
                                        "mini::lowest",
                                        "mini::highest",
                                        "int64_t(blockIdx.x) * 32 + (threadIdx.x & 31)",
                                        "threadIdx.x >> 5",
                                        "threadIdx.x & 31",
                                        "mini::warp_reduce",
                                        "blockIdx.y",
                                        "gridDim.y",
                                        "atomicAdd(&arrived[blockIdx.x], 1u)",
                                        "arrived[blockIdx.x]",
                                        "min",
                                        "mini::aligned",
                                        "mini::online_scale",
                                        "mini::online_finish",
                                        "asm volatile(\"\" : \"+l\""};

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
// an accumulator's type: an int (a bool's max or min) where int_accumulator says, else `dtype`'s
std::string accumulator_type(const Speller& sp, const Stmt& s) { return s.int_accumulator ? "int" : sp.cs.type(s.dtype); }
// whether `pointer` is aligned to a Vec of `lanes` elements of `dtype`
std::string aligned(const Speller& sp, DType dtype, const std::string& lanes, const std::string& pointer) {
  return std::string(kCudaSpelling.aligned) + "<" + sp.cs.type(dtype) + ", " + lanes + ">(" + pointer + ")";
}

std::string first_thread() { return std::string("if (") + kCudaSpelling.thread + " == 0) "; }
// what runs `s` only in some threads: its block's first thread, or where its guard holds
std::string only(const Stmt& s) { return s.first_thread ? first_thread() : s.guard.empty() ? "" : "if (" + s.guard + ") "; }

void spell_range(const Speller& sp, const Stmt& s, const std::string& pad) {
  if (!s.guard.empty()) {  // the loop only where the guard holds
    sp.o << pad << "if (" << s.guard << ")\n";
    Stmt loop = s;
    loop.guard.clear();
    return spell_range(sp, loop, pad + "  ");
  }
  const std::string T = index_type(s.int32), v = s.text, open = s.unbraced ? "\n" : " {" + note(s) + "\n";
  // a stride of threads or rows, spelled as such even where it is 1 (a thread a row)
  const bool by_threads = s.range == RangeKind::BlockStride || s.range == RangeKind::RowStride;
  switch (s.range) {
    case RangeKind::GridStride: {
      const std::string first = (s.begin.empty() ? "" : s.begin + " + ") + kCudaSpelling.grid_thread;
      sp.o << pad << "for (" << T << " " << v << " = " << first << "; " << v << " < " << s.end << ";"
           << (s.wrapped ? "\n" + pad + "     " : " ") << v << " += " << kCudaSpelling.grid_threads << ") {\n";
      break;
    }
    case RangeKind::Unrolled:
    case RangeKind::Serial:
    case RangeKind::BlockStride:  // from the thread's lane by the row's threads
    case RangeKind::RowStride:    // from the block's (or warp's) first row by the grid's rows
      if (s.range == RangeKind::Unrolled)
        sp.o << pad << kCudaSpelling.unroll << (s.unroll ? " " + std::to_string(s.unroll) : "") << "\n";
      sp.o << pad << "for (" << T << " " << v << " = " << s.begin << "; " << v << " < " << s.end << "; "
           << (s.step == "1" && !by_threads ? v + "++" : v + " += " + s.step) << ")";
      if (s.compact) {  // its one statement on the same line
        sp.o << " ";
        return spell_body(sp, s.body, "");
      }
      sp.o << open;
      break;
    case RangeKind::GridBlocks:  // a block a thread
      sp.o << pad << "for (unsigned " << v << " = " << kCudaSpelling.thread << "; " << v << " < " << kCudaSpelling.blocks
           << "; " << v << " += " << kCudaSpelling.block_threads << ") {\n";
      break;
    case RangeKind::StripBlocks:  // a block a lane
      sp.o << pad << "for (unsigned " << v << " = " << s.begin << "; " << v << " < " << kCudaSpelling.strip_blocks << "; "
           << v << " += " << s.step << ") {\n";
      break;
    default: fail("codegen: no CUDA spelling for this kind of range");
  }
  spell_body(sp, s.body, pad + "  ");
  if (!s.unbraced) sp.o << pad << "}\n";
}

void spell_vector_load(const Speller& sp, const Stmt& s, const std::string& pad) {
  const std::string V = vector_type(sp, s);
  const std::string read = s.value ? vector_read(sp.cs, *s.value, lanes(s))
                                   : "*reinterpret_cast<const " + V + "*>(in" + std::to_string(s.buffer) + " + " +
                                         s.index + ")";
  sp.o << pad << (s.assign ? "" : "const " + V + " ") << s.name << " = " << read << ";" << note(s) << "\n";
}

// The Vec <name> to buffer `buffer` from `index` (at_element: the address of that element);
// checked: one Vec where the output is aligned, else lane by lane.
void spell_vector_store(const Speller& sp, const Stmt& s, const std::string& pad) {
  const std::string out = "out" + std::to_string(s.buffer);
  const std::string at = s.at_element ? "&" + out + "[" + s.index + "]" : out + " + " + s.index;
  const std::string store = "*reinterpret_cast<" + vector_type(sp, s) + "*>(" + at + ") = " + s.name + ";\n";
  if (!s.checked) {
    sp.o << pad << only(s) << store;
    return;
  }
  sp.o << pad << "if (" << aligned(sp, s.dtype, lanes(s), out) << ") " << store;
  sp.o << pad << "else\n" << pad << "  " << kCudaSpelling.unroll << "\n";
  sp.o << pad << "  for (int l = 0; l < " << lanes(s) << "; l++) (" << at << ")[l] = " << s.name << ".v[l];\n";
}

// if (<text>) { body } else { orelse }; an alignment condition (`aligned`): true, and each
// buffer's pointer aligned
void spell_if(const Speller& sp, const Stmt& s, const std::string& pad) {
  std::string condition = s.text;
  if (!s.aligned.empty()) {
    condition = "true";
    for (auto& [buffer, dtype] : s.aligned)
      condition += " && " + aligned(sp, dtype, std::to_string(s.width), "&in" + std::to_string(buffer) + "[0]");
  }
  sp.o << pad << "if (" << condition << ") {" << note(s) << "\n";
  spell_body(sp, s.body, pad + "  ");
  if (!s.orelse.empty()) {
    sp.o << pad << "} else {\n";
    spell_body(sp, s.orelse, pad + "  ");
  }
  sp.o << pad << "}\n";
}

void spell_declare(const Speller& sp, const Stmt& s, const std::string& pad) {
  const bool vector = !s.lanes.empty() || s.width > 1;
  sp.o << pad << (vector ? vector_type(sp, s) : accumulator_type(sp, s)) << " " << s.name;
  if (s.value) sp.o << " = " << sp.cs.expr(s.value);
  sp.o << ";" << note(s) << "\n";
}

// The split row's statements (plan_split_reduction): accumulators, partials, the arrival count.
std::string combine(const Speller& sp, const Stmt& s) {
  const bool sum = s.op == OpKind::Sum || s.op == OpKind::Mean;
  return std::string(kCudaSpelling.combine[sum ? 0 : s.op == OpKind::Amax ? 1 : 2]) + "<" + accumulator_type(sp, s) + ">";
}
std::string identity(const Speller& sp, const Stmt& s) {
  const std::string A = accumulator_type(sp, s);
  if (s.op == OpKind::Sum || s.op == OpKind::Mean) return A + "(0)";
  return std::string(s.op == OpKind::Amax ? kCudaSpelling.lowest : kCudaSpelling.highest) + "<" + A + ">()";
}
// partials[slot * <blocks> + block]: slot `slot` of block `block`, 8 bytes, of any accumulator;
// a column strip's: partials[(slot * <blocks in y> + block) * <columns> + column]
std::string partial(const Stmt& s, const std::string& block) {
  const std::string slot = std::to_string(s.slot);
  if (s.column.empty()) return std::string(kCudaSpelling.partials) + "[" + slot + " * " + kCudaSpelling.blocks + " + " + block + "]";
  return std::string(kCudaSpelling.partials) + "[(" + slot + " * " + kCudaSpelling.strip_blocks + " + " + block + ") * " +
         s.index + " + " + s.column + "]";
}

// The rows' statements (plan_row_reduction, plan_vector_rows).
// A warp (or a few lanes, or a thread) a row: this thread's lane in its row, its warp's first
// row and the rows the grid takes at once, and (several rows a warp) its row in its warp's.
void spell_row_thread(const Speller& sp, const Stmt& s, const std::string& pad) {
  std::ostringstream& o = sp.o;
  const int lanes = s.width, per_warp = 32 / lanes;
  const std::string rows = std::to_string(s.block_rows), thread = kCudaSpelling.thread;
  if (lanes == 32)
    o << pad << "// a warp per row: " << rows << " rows a block, each warp its own (lane: the thread's place in it)\n";
  else if (lanes == 1)
    o << pad << "// a thread per row: " << rows << " rows a block\n";
  else
    o << pad << "// " << lanes << " lanes per row: " << per_warp << " rows a warp, " << rows
      << " a block (lane: the thread's place in its row)\n";
  o << pad << "const int lane = " << (lanes == 1 ? "0" : thread + " & " + std::to_string(lanes - 1)) << ";\n";
  o << pad << "const int64_t first_row = int64_t(" << kCudaSpelling.block << ") * " << rows << " + (" << thread
    << " >> 5) * " << per_warp << ", row_step = int64_t(" << kCudaSpelling.blocks << ") * " << rows << ";\n";
  if (per_warp > 1)
    o << pad << "const int sub_row = (" << thread << " & 31) / " << lanes << ";  // this thread's row in its warp's\n";
}

void spell_rows(const Speller& sp, const Stmt& s, const std::string& pad) {
  std::ostringstream& o = sp.o;
  const std::string A = accumulator_type(sp, s), n = s.name;
  switch (s.kind) {
    case Stmt::Kind::RowThread: spell_row_thread(sp, s, pad); break;
    case Stmt::Kind::Continue: o << pad << "if (" << s.guard << ") continue;\n"; break;
    case Stmt::Kind::OnlineScale:
      o << pad << n << " *= " << kCudaSpelling.online_scale << "<" << A << ">(" << A << "(" << s.text << "), " << A << "("
        << s.to << "));\n";
      break;
    case Stmt::Kind::OnlineFinish:
      o << pad << n << " = " << kCudaSpelling.online_finish << "<" << A << ">(" << n << ", " << A << "(" << s.text
        << "));\n";
      break;
    case Stmt::Kind::Reread: o << pad << kCudaSpelling.hide_pointer << "(in" << s.buffer << "));" << note(s) << "\n"; break;
    default: fail("codegen: the CUDA renderer spells no such statement yet");
  }
}

// The column reduction's statements (plan_column_reduction).
// The 32 lanes of each column fold accumulator <name> through page `slot` of the shared array
// <text>, in the step `fold_step` names (plan_column_folds places the barriers between them):
// 1 each lane writes its partial; 2 warp w folds column w's 32 partials with shuffles and
// leaves the result in the spare 33rd slot of row w; 3 every lane of the column reads it.
void spell_column_fold(const Speller& sp, const Stmt& s, const std::string& pad) {
  const std::string A = accumulator_type(sp, s), n = s.name, f = s.text;
  const std::string at = "reinterpret_cast<" + A + "*>(&" + f + "[" + std::to_string(s.slot) + "]";
  switch (s.fold_step) {
    case 1: sp.o << pad << at << "[lane][c])[0] = " << n << ";\n"; break;
    case 2:
      sp.o << pad << "{\n";
      sp.o << pad << "  const " << A << " v = " << kCudaSpelling.warp_reduce << "<" << A << ", " << combine(sp, s) << ">("
           << at << "[c][lane])[0]);\n";
      sp.o << pad << "  if (c == 0) " << at << "[lane][32])[0] = v;\n";
      sp.o << pad << "}\n";
      break;
    default: sp.o << pad << n << " = " << at << "[c][32])[0];\n";  // step 3
  }
}

void spell_columns(const Speller& sp, const Stmt& s, const std::string& pad) {
  std::ostringstream& o = sp.o;
  switch (s.kind) {
    case Stmt::Kind::ColumnComment:
      if (s.width > 1) {
        o << pad << "// columns in vectors: " << s.width << " consecutive kept elements a thread, 32 threads a strip ("
          << kCudaSpelling.column_in_block << "),\n"
          << pad << "// 32 lanes over the reduced ones (" << kCudaSpelling.column_lane << "), shared in chunks among "
          << kCudaSpelling.strip_blocks << " blocks\n";
        break;
      }
      o << pad << "// columns: 32 kept elements a block (" << kCudaSpelling.column_in_block
        << "), 32 lanes over the reduced ones (" << kCudaSpelling.column_lane << ")";
      if (s.chunked) o << ",\n" << pad << "// the reduced ones shared in chunks among " << kCudaSpelling.strip_blocks << " blocks";
      o << "\n";
      break;
    case Stmt::Kind::Chunk: {
      const std::string& blocks = kCudaSpelling.strip_blocks;
      o << pad << "const int64_t chunk = (" << s.end << " + " << blocks << " - 1) / " << blocks << ";\n";
      o << pad << "const int64_t " << s.name << "_begin = " << kCudaSpelling.strip_block << " * chunk, " << s.name
        << "_end = " << kCudaSpelling.min << "(" << s.end << ", " << s.name << "_begin + chunk);\n";
      break;
    }
    case Stmt::Kind::ColumnThread: {
      const std::string first = s.lanes.empty() ? kCudaSpelling.column_thread
                                                : "(" + std::string(kCudaSpelling.column_thread) + ") * " + s.lanes;
      o << pad << "const int64_t " << s.name << " = " << first << ";\n";
      o << pad << "const bool live = " << s.name << " < " << s.index << ";\n";
      o << pad << "const int64_t r = live ? " << s.name << " : " << s.index << " - " << (s.lanes.empty() ? "1" : s.lanes)
        << ";" << note(s) << "\n";
      o << pad << "const int lane = " << kCudaSpelling.column_lane << ", c = " << kCudaSpelling.column_in_block << ";\n";
      break;
    }
    case Stmt::Kind::Registers:  // a kept load's: the element of the row it holds, in its comment
      o << pad << accumulator_type(sp, s) << " " << s.name << "[" << s.lanes << "];"
        << (s.value ? "  // " + sp.cs.element(*s.value) + " along the row" : note(s)) << "\n";
      break;
    case Stmt::Kind::Assign: o << pad << s.name << " = " << sp.cs.expr(s.value) << ";\n"; break;
    default: spell_rows(sp, s, pad);
  }
}

void spell_split_row(const Speller& sp, const Stmt& s, const std::string& pad) {
  std::ostringstream& o = sp.o;
  const std::string A = accumulator_type(sp, s), n = s.name;
  switch (s.kind) {
    case Stmt::Kind::Shared:
      o << pad << kCudaSpelling.shared << " " << sp.cs.type(s.dtype) << " " << n;
      for (int64_t d : s.dims) o << "[" << d << "]";
      o << ";" << note(s) << "\n";
      break;
    case Stmt::Kind::Accumulator: o << pad << (s.assign ? "" : A + " ") << n << " = " << identity(sp, s) << ";\n"; break;
    case Stmt::Kind::Fold:
      o << pad << n << " = " << combine(sp, s) << "(" << n << ", " << A << "(" << sp.cs.expr(s.value) << "));\n";
      break;
    case Stmt::Kind::ThreadReduce:
      if (s.scope == ThreadScope::Column) return spell_column_fold(sp, s, pad);
      if (s.scope == ThreadScope::Warp) {  // the lanes of a row, fewer than a warp's 32 named
        o << pad << n << " = " << kCudaSpelling.warp_reduce << "<" << A << ", " << combine(sp, s)
          << (s.width < 32 ? ", " + std::to_string(s.width) : "") << ">(" << n << ");\n";
        break;
      }
      o << pad << n << " = " << kCudaSpelling.block_reduce << "<" << A << ", " << combine(sp, s) << ">(" << n
        << ", reinterpret_cast<" << A << "*>(" << s.text << "));\n";
      break;
    case Stmt::Kind::Partial:
      o << pad << only(s) << "reinterpret_cast<" << A << "*>(&"
        << partial(s, s.column.empty() ? kCudaSpelling.block : kCudaSpelling.strip_block) << ")[0] = " << n << ";\n";
      break;
    case Stmt::Kind::FoldPartial:
      o << pad << "const unsigned long long bits = " << kCudaSpelling.read_past_cache << "(&" << partial(s, s.text)
        << ");\n";
      o << pad << n << " = " << combine(sp, s) << "(" << n << ", reinterpret_cast<const " << A << "*>(&bits)[0]);\n";
      break;
    case Stmt::Kind::Fence: o << pad << kCudaSpelling.fence << ";" << note(s) << "\n"; break;
    case Stmt::Kind::Barrier: o << pad << kCudaSpelling.barrier << ";" << note(s) << "\n"; break;
    case Stmt::Kind::Arrive:
      o << pad << only(s) << n << " = " << (s.per_strip ? kCudaSpelling.strip_arrive : kCudaSpelling.arrive) << " == "
        << (s.per_strip ? kCudaSpelling.strip_blocks : kCudaSpelling.blocks) << " - 1;\n";
      break;
    case Stmt::Kind::Return:
      if (!s.guard.empty()) o << pad << "if (" << s.guard << ") return;\n";
      else if (s.first_thread) o << pad << "if (" << kCudaSpelling.thread << " != 0) return;\n";
      else o << pad << "if (!" << s.text << ") return;" << note(s) << "\n";
      break;
    case Stmt::Kind::ResetArrivals:
      o << pad << only(s) << (s.per_strip ? kCudaSpelling.strip_reset : kCudaSpelling.reset) << " = 0;" << note(s) << "\n";
      break;
    case Stmt::Kind::Result: {
      const std::string T = sp.cs.type(s.dtype);
      const std::string value = s.op == OpKind::Mean ? "(" + s.text + " / double(" + s.index + "))" : s.text;
      o << pad << "const " << T << " " << n << " = " << T << "(" << value << ");\n";
      break;
    }
    default: spell_columns(sp, s, pad);
  }
}

void spell(const Speller& sp, const Stmt& s, const std::string& pad) {
  std::ostringstream& o = sp.o;
  switch (s.kind) {
    case Stmt::Kind::Comment: o << pad << "// " << s.text << "\n"; break;
    case Stmt::Kind::Index:
      o << pad << (s.constant ? "constexpr " : "const ") << index_type(s.int32) << " " << s.name << " = " << s.index;
      for (const Stmt& more : s.body) o << ", " << more.name << " = " << more.index;
      o << ";" << (s.unused_ok ? "  (void)" + s.name + ";" : "") << note(s) << "\n";
      break;
    case Stmt::Kind::Unflatten: o << unflatten(sp.space, s.text, s.dims, pad, index_type(s.int32)); break;
    case Stmt::Kind::Let:
      o << pad << "const " << accumulator_type(sp, s) << " " << s.name << " = " << sp.cs.expr(s.value) << ";" << note(s)
        << "\n";
      break;
    case Stmt::Kind::Declare: spell_declare(sp, s, pad); break;
    case Stmt::Kind::Range: spell_range(sp, s, pad); break;
    case Stmt::Kind::VectorLoad: spell_vector_load(sp, s, pad); break;
    case Stmt::Kind::VectorStore: spell_vector_store(sp, s, pad); break;
    case Stmt::Kind::VectorLane: o << pad << s.name << ".v[" << s.text << "] = " << sp.cs.expr(s.value) << ";\n"; break;
    case Stmt::Kind::Store: o << pad << only(s) << "out" << s.buffer << "[" << s.index << "] = " << sp.cs.expr(s.value) << ";\n"; break;
    case Stmt::Kind::Scope:
      o << pad << (s.first_thread ? first_thread() : "") << "{\n";
      spell_body(sp, s.body, pad + "  ");
      o << pad << "}\n";
      break;
    case Stmt::Kind::If: spell_if(sp, s, pad); break;
    default: spell_split_row(sp, s, pad);
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
