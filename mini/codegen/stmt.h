// stmt.h — a kernel as statements: what a planner decided, before a renderer spells it.
//
// In:  a LoopKernel (loop_ir.h): the values, their expressions and the reductions' phases.
// Out: a Plan: the kernel's statements (loops, accumulators, folds, reductions across threads,
//      barriers, vector loads and stores, guarded stores), each a small struct of data.
// One planner per target decides them (plan_cpp in cpp_plan.cpp, plan_cuda in cuda_plan.cpp,
// each kernel shape a named planner of its own); a renderer (cpp_kernel.cpp, cuda_kernel.cpp)
// then only spells statements, through its Target's tables (c_style.h). The planners decide
// from index data (a load's buffer and index terms, a value's node), never from spelled text;
// what stays text here is only a name (a variable) or index arithmetic over the kernel's
// space (size_expr, product, unflatten: already spelled from shape data).
//
// A C++ unit test plans a kernel and checks the plan (tests/cpp/test_plan.cpp), not its text.
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
};

// Which threads combine a value a CUDA reduction holds one of per thread.
enum class ThreadScope { Warp, Block };

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
    // Appended for the C++ planner (cpp_plan.cpp):
    Unflatten,    // the flat index `text` split into the x<d> of `dims` (row-major)
    Index,        // const <dtype> <lets[0].first> = <lets[0].second>, ...: index values, one line
    Array,        // <dtype> <name>[<length>] (= {} where zeroed): a local array; `text`: a comment
    Alloc,        // <dtype>* <name>: `length` elements from the heap
    Free,         // the heap array <name> given back
    Reset,        // <name>[<index>] = the identity of `op` (and its NaN flag's element = 0)
    Result,       // const <dtype> <name> = the reduction's value from accumulator `array`
    Unused,       // (void)<name>: a variable some kernel forms do not read
    Return,       // the kernel returns here
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

}  // namespace mini::codegen
