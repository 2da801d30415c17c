// stmt.h — a kernel as statements: what a planner decided, before a renderer spells it.
//
// In:  a LoopKernel (loop_ir.h): the values, their expressions and the reductions' phases.
// Out: a Plan: the kernel's statements (loops, accumulators, folds, reductions across threads,
//      barriers, vector loads and stores, guarded stores), each a small struct of data.
// One planner per target decides them (plan_cpp in cpp_plan.cpp; plan_cuda in cuda_kernel.cpp,
// which hands each kernel shape to a named planner of its own in that shape's file, every shape
// planned: plan_pointwise in cuda_pointwise.cpp; plan_split_reduction, plan_column_reduction and
// plan_vector_columns in cuda_columns.cpp; plan_row_reduction and plan_vector_rows in
// cuda_rows.cpp); a renderer (cpp_kernel.cpp; cuda_statements.cpp for CUDA) then only spells
// statements, through its Target's tables (c_style.h, kCudaSpelling). The planners decide
// from index data (a load's buffer and index terms, a value's node), never from spelled text;
// what stays text here is only a name (a variable) or index arithmetic over the kernel's
// space (size_expr, product, unflatten: already spelled from shape data).
//
// A C++ unit test plans a kernel and checks the plan, not its text (tests/cpp/test_plan.cpp
// for the C++ planner, tests/cpp/test_cuda_plan.cpp for the CUDA one).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "codegen/loop_ir.h"

namespace mini::codegen {

struct Stmt;
using Body = std::vector<Stmt>;

// How a loop's iterations are shared out.
enum class RangeKind {
  Serial,        // one thread runs them in order
  Unrolled,      // ... unrolled by the compiler (#pragma unroll)
  Simd,          // one thread, in vector lanes (#pragma omp simd)
  Parallel,      // over threads (#pragma omp parallel for)
  ParallelSimd,  // over threads, each in vector lanes (#pragma omp parallel for simd)
  GridStride,    // CUDA: every thread of the grid from its global id, stepping by the grid
  BlockStride,   // CUDA: the threads of a row (a block or a warp) from their lane, stepping by them
  GridBlocks,    // CUDA: the blocks of the grid (unsigned), shared among the threads of a block
  // appended for plan_column_reduction:
  StripBlocks,   // CUDA: the blocks of a column strip (in y, unsigned), from `begin` by `step`
  // appended for plan_row_reduction (BlockStride, spelled since: from `begin` by `step`):
  RowStride,     // CUDA: the rows a block (or a warp, or a few lanes) takes in turn, from its
                 // first row `begin` by the rows the grid takes at once, `step`
};

// Which threads combine a value a CUDA reduction holds one of per thread.
enum class ThreadScope {
  Warp,    // the `width` lanes of a row (a warp's 32, or fewer: a warp holds several rows)
  Block,
  Column,  // appended: the 32 lanes of each column of a column block, through a page of the
           // shared array <text> (a lane's partial per column, and each column's result)
};

struct Stmt {
  enum class Kind {
    Comment,      // text
    Let,          // const <dtype> <name> = <value>;            a value computed once
    Declare,      // <dtype> <name> = <value>;                  a mutable accumulator (value: its identity)
    Fold,         // <name> = combine(op, <name>, <value>)     one step of a reduction
    Range,        // for <var> in [begin, end) by step, as `range`, over body
    ThreadReduce, // <name> combined by `op` across the threads of `scope` (shuffles, or shared memory)
    Barrier,      // every thread of the block waits here (__syncthreads)
    VectorLoad,   // Vec<dtype, width> <name> = the `width` elements of buffer `buffer` from `index`
    VectorStore,  // the `width` lanes of <name> to buffer `buffer` from `index`
    Store,        // buffer `buffer` at `index` = <value>
    If,           // if (<cond>) body: a guarded statement (a tail, a row past the end)
    // Appended for the planners (cpp_plan.cpp, cuda_pointwise.cpp):
    Unflatten,    // the flat index `text` split into the x<d> of `dims` (row-major, codegen::unflatten)
    Index,        // index values: C++ const <dtype> <lets[i].first> = <lets[i].second>, ... on one
                  // line; CUDA const <int|int64_t> <name> = <index>; (constexpr: `constant`)
    Array,        // <dtype> <name>[<length>] (= {} where zeroed): a local array; `text`: a comment
    Alloc,        // <dtype>* <name>: `length` elements from the heap
    Free,         // the heap array <name> given back
    Reset,        // <name>[<index>] = the identity of `op` (and its NaN flag's element = 0)
    Result,       // const <dtype> <name> = the reduction's value from its accumulator: C++ `array`
                  // (its element `index` where set); CUDA <text> (a Mean: divided by `index`)
    Unused,       // (void)<name>: a variable some kernel forms do not read
    Return,       // the kernel returns here; CUDA: the threads not needed further end here: all of
                  // a block whose flag <text> is false, or (first_thread) all but the block's first
    VectorLane,   // <name>.v[<text>] = <value>;              one lane of a Vec declared before
    Scope,        // { body }: names that end with it
    // appended for the split row (plan_split_reduction): a row shared among the blocks of the
    // grid, each folding a partial, the block that arrives last folding the partials
    Shared,       // <dtype> <name>[dims]: memory the threads of a block share (no dims: one value)
    Accumulator,  // <acc> <name> = the identity of `op`   (assign: the name is declared before)
    Fence,        // this thread's writes visible to the whole grid before what follows
    Arrive,       // <name> = whether this block is the last of the grid to count itself in (an atomic count)
    Partial,      // accumulator <name> into this block's slot of the partials of reduction `slot`
    FoldPartial,  // <name> = combine(op, <name>, block <text>'s partial of reduction `slot`), read past the cache
    ResetArrivals,  // the count of arrived blocks back to 0, for the next launch
    // appended for the column reduction (plan_column_reduction): a block of 32 kept elements
    // (columns), 32 lanes over the reduced ones, chunked among the blocks in y where split
    ColumnComment,  // the comment saying how the threads share the columns (chunked: among blocks in y too)
    Chunk,        // <name>_begin, <name>_end: this block's chunk of [0, end) among the blocks in y
    ColumnThread, // <name>: this thread's column; `live`: it is one of the `index` columns; r: the one it
                  // computes (the last, past the end); lane, c: its lane and its column in the block
                  // (`lanes`: its first of that many consecutive columns, vector columns)
    // appended for the vector columns (plan_vector_columns): CV columns a thread
    Registers,    // <dtype> <name>[<lanes>]: a register array, an element a column, or (rows) one of
                  // a thread's elements of the row (an accumulator's type where int_accumulator or
                  // as_accumulator says)
    Assign,       // <name> = <value>;                         a local declared before
    // appended for the rows (plan_row_reduction, plan_vector_rows): a block, a warp or a few
    // lanes a row, the row held in registers or looped over
    RowThread,    // lane, first_row, row_step (sub_row where a warp holds several rows): this
                  // thread's place among the `block_rows` rows of its block, `width` lanes a row
    Continue,     // the rest of the loop's iteration skipped where <guard> holds (past the row's end)
    OnlineScale,  // <name>, an online pair's sum folded against the max <text>, rescaled to the max <to>
    OnlineFinish, // <name>, an online pair's sum: NaN where the row's max <text> is -inf (as eager's
                  // exp(x - max))
    Reread,       // input `buffer`'s pointer hidden from the optimizer: this pass reads the row from
                  // memory again, not from the registers an earlier pass read it into
  };
  Kind kind = Kind::Comment;
  std::string name;          // Let, Declare, Fold, ThreadReduce, VectorLoad, VectorStore: the variable
  std::string text;          // Comment; Range: its loop variable; If: the condition
  DType dtype = DType::Float32;
  ExprPtr value;             // Let, Declare, Fold, Store
  OpKind op = OpKind::Sum;   // Fold, ThreadReduce: how values combine
  int buffer = -1;           // VectorLoad, VectorStore, Store
  std::string index;         // VectorLoad, VectorStore, Store: the first element's offset
  std::string begin, end, step = "1";  // Range
  RangeKind range = RangeKind::Serial;
  ThreadScope scope = ThreadScope::Block;  // ThreadReduce
  int width = 1;             // VectorLoad, VectorStore: lanes
  Body body;                 // Range, If
  // Appended for the C++ planner (cpp_plan.cpp):
  std::vector<int64_t> dims;  // Unflatten
  std::vector<std::pair<std::string, std::string>> lets;  // Index: (name, index arithmetic)
  std::string array;         // Let: read from it at `index`; Store (buffer -1): write it at `index`;
                             // Result: the accumulator (its element `index` where set)
  std::string spelled;       // Declare, Fold, Store: the value as a variable or an array's element,
                             // where `value` is null (Declare: empty, the identity of `op`)
  std::string flag;          // Declare, Array, Fold, Reset, Result: the int that records a NaN met
                             // (a max or min propagates NaN; OpenMP reduces the flag with |)
  std::string length;        // Array, Alloc: its elements; Result of a Mean: the count it divides by
  DType accumulator = DType::Float64;  // Result: the accumulator's type
  bool zeroed = false;       // Array: every element 0
  std::vector<struct Reduction> reductions;  // Range: the accumulators its iterations combine
  std::string parallel_if;   // Range (Parallel, ParallelSimd): threads only where this holds
  int collapse = 0;          // Range (Parallel): how many nested ranges its threads share
  bool compact = false;      // Range: no braces, its one statement on the same line (or, a compact
                             // range itself, on the next line one level in)
  bool nest_in = false;      // Range: the loop and its body one level in from its pragma
  Body orelse;               // If: what runs where the condition does not hold
  // Appended for plan_cuda:
  std::string note;          // any: a comment at the end of its (first) line
  bool int32 = false;        // Index, Range, Unflatten: index arithmetic in int (every offset fits), not int64_t
  bool constant = false;     // Index: a compile-time constant (constexpr)
  std::string lanes;         // Declare, VectorLoad, VectorStore: the lanes by the constant that names
                             // them (V, CV), where `width` is not spelled
  bool assign = false;       // VectorLoad: into a Vec declared before (not a definition)
  bool wrapped = false;      // Range: its header spelled over two lines
  // appended for plan_split_reduction:
  bool int_accumulator = false;  // Accumulator, Fold, ThreadReduce, Partial, FoldPartial: the accumulator
                                 // is an int (a bool's max or min), not of `dtype`
  bool first_thread = false;  // Scope, Partial, Arrive, ResetArrivals: run by the block's first thread only;
                              // Return: every thread but the first returns
  int slot = -1;             // Partial, FoldPartial: which reduction's partials (its place in the pass)
  bool unused_ok = false;    // Index: a name some kernels never read (the compiler is told so)
  // appended for plan_column_reduction (Index: `body` holds more Index statements declared in
  // the same line, `, <name> = <index>`):
  int unroll = 0;            // Range (Unrolled): the unroll count (0: the compiler's choice)
  std::string guard;         // Store, Partial: run only where <guard> holds (on the same line)
  std::string column;        // Partial, FoldPartial: a column strip's partial of column <column>, of
                             // `index` columns (empty: the split row's, a block's)
  bool per_strip = false;    // Arrive, ResetArrivals: the count of the block's column strip (its blocks
                             // in y), not the grid's; run by the block's first thread (first_thread)
  bool chunked = false;      // ColumnComment: the reduced elements shared among the blocks in y too
                             // (`width` > 1: vector columns, that many a thread)
  // appended for plan_vector_columns (guard: also Range, the loop run only where it holds, and
  // Return, the threads where it holds return):
  bool at_element = false;   // VectorStore: to the address of out<buffer>[index]
  bool unbraced = false;     // Range: a body of one statement, spelled without braces
  // appended for batched column folds (plan_column_folds): ThreadReduce (Column) in one step of
  // three, the planner placing the barriers: 1 each lane writes its partial to page `slot` of the
  // shared array, 2 warp w folds column w of that page, 3 each lane reads its column's result
  int fold_step = 1;
  // appended for plan_row_reduction and plan_vector_rows (note: spelled on Range and Registers
  // too; compact: also on CUDA's Range; orelse: also on CUDA's If; width: also ThreadReduce of a Warp,
  // the lanes of a row; int_accumulator: also Let and Declare; Registers: `value` where set, the
  // load whose elements of the row it keeps, named in its comment):
  int block_rows = 0;        // RowThread: the rows a block takes at once
  std::string to;            // OnlineScale: the max the sum is rescaled to
  bool checked = false;      // VectorStore: the output's alignment checked at run time (one Vec
                             // where aligned, else lane by lane)
  std::vector<std::pair<int, DType>> aligned;  // If: the condition where set: each input buffer,
                                               // of that element type, aligned to a Vec of `width`
};

// An accumulator a range's iterations combine (an OpenMP reduction clause): `name` by `op`, and
// where `flag` is set, the NaN flag beside it by |.
struct Reduction {
  OpKind op = OpKind::Sum;
  std::string name, flag;
};

// The statements of one kernel and what its launch needs.
struct Plan {
  std::string shape;         // the planner that made it: "pointwise", "rows", "columns", ...
  Body body;
};

// Builders, so a planner reads as the loop it makes.
inline Stmt comment(std::string text) {
  Stmt s;
  s.kind = Stmt::Kind::Comment;
  s.text = std::move(text);
  return s;
}
inline Stmt let(std::string name, DType dtype, ExprPtr value) {
  Stmt s;
  s.kind = Stmt::Kind::Let;
  s.name = std::move(name);
  s.dtype = dtype;
  s.value = std::move(value);
  return s;
}
inline Stmt store(int buffer, std::string index, ExprPtr value) {
  Stmt s;
  s.kind = Stmt::Kind::Store;
  s.buffer = buffer;
  s.index = std::move(index);
  s.value = std::move(value);
  return s;
}
inline Stmt range(RangeKind kind, std::string var, std::string begin, std::string end, Body body) {
  Stmt s;
  s.kind = Stmt::Kind::Range;
  s.range = kind;
  s.text = std::move(var);
  s.begin = std::move(begin);
  s.end = std::move(end);
  s.body = std::move(body);
  return s;
}

// Builders of plan_cuda's statements.
inline Stmt index_let(std::string name, std::string index, bool int32, std::string note = "") {
  Stmt s;
  s.kind = Stmt::Kind::Index;
  s.name = std::move(name);
  s.index = std::move(index);
  s.int32 = int32;
  s.note = std::move(note);
  return s;
}
inline Stmt unflatten_index(std::string flat, std::vector<int64_t> dims, bool int32) {
  Stmt s;
  s.kind = Stmt::Kind::Unflatten;
  s.text = std::move(flat);
  s.dims = std::move(dims);
  s.int32 = int32;
  return s;
}
// A Vec of `lanes` elements of `dtype`, declared and not yet written (its lanes come later).
inline Stmt declare_vector(std::string name, DType dtype, std::string lanes) {
  Stmt s = let(std::move(name), dtype, nullptr);
  s.kind = Stmt::Kind::Declare;
  s.lanes = std::move(lanes);
  return s;
}
// A Vec read from buffer `buffer` at offset `index` (value null), or from the element a Load
// expression `value` reads (a padded load: zeros outside its slice).
inline Stmt vector_load(std::string name, DType dtype, int buffer, std::string index, std::string lanes) {
  Stmt s;
  s.kind = Stmt::Kind::VectorLoad;
  s.name = std::move(name);
  s.dtype = dtype;
  s.buffer = buffer;
  s.index = std::move(index);
  s.lanes = std::move(lanes);
  return s;
}
inline Stmt vector_store(std::string name, DType dtype, int buffer, std::string index, std::string lanes) {
  Stmt s = vector_load(std::move(name), dtype, buffer, std::move(index), std::move(lanes));
  s.kind = Stmt::Kind::VectorStore;
  return s;
}
inline Stmt vector_lane(std::string name, std::string lane, ExprPtr value) {
  Stmt s;
  s.kind = Stmt::Kind::VectorLane;
  s.name = std::move(name);
  s.text = std::move(lane);
  s.value = std::move(value);
  return s;
}
inline Stmt scope(Body body) {
  Stmt s;
  s.kind = Stmt::Kind::Scope;
  s.body = std::move(body);
  return s;
}

// Builders of the split row's statements. A statement of a kind alone, with a note.
inline Stmt statement(Stmt::Kind kind, std::string name = "", std::string note = "") {
  Stmt s;
  s.kind = kind;
  s.name = std::move(name);
  s.note = std::move(note);
  return s;
}
// Block memory <dtype> <name>[dims] (no dims: one value).
inline Stmt shared(std::string name, DType dtype, std::vector<int64_t> dims, std::string note = "") {
  Stmt s = statement(Stmt::Kind::Shared, std::move(name), std::move(note));
  s.dtype = dtype;
  s.dims = std::move(dims);
  return s;
}

// <name> = <value>: a local declared before (a register array's element, an accumulator).
inline Stmt assign(std::string name, ExprPtr value) {
  Stmt s = statement(Stmt::Kind::Assign, std::move(name));
  s.value = std::move(value);
  return s;
}

}  // namespace mini::codegen
