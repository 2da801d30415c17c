// cuda_writer.h — the CUDA renderer's writer of one kernel, shared by its files (internal to
// mini/codegen: cuda_kernel.h is the renderer's interface).
//
// A CudaKernelWriter renders one fused group under one CudaLayout. write() decides the kernel's
// shape once and hands it to the planner of that shape, each in a file of its own; every shape
// is planned as statements (stmt.h), which cuda_statements.cpp spells:
//   pointwise                        cuda_pointwise.cpp  (a grid-stride loop, 16-byte vectors:
//                                                         plan_pointwise)
//   rows (a block, a warp or a few   cuda_rows.cpp       (held in registers, or looped over:
//   lanes a row)                                          plan_row_reduction; looped over in
//                                                         vectors, the online softmax:
//                                                         plan_vector_rows)
//   columns, and one row split over  cuda_columns.cpp    (a block per 32 kept elements; partials
//   many blocks                                           folded by the block that arrives last:
//                                                         the split row by plan_split_reduction,
//                                                         columns one a thread by
//                                                         plan_column_reduction, vector columns
//                                                         by plan_vector_columns)
// The shared helpers (accumulator types, int32 indexing, the row values) are in cuda_kernel.cpp;
// the spelling of a plan's statements, and of a vector read, in cuda_statements.cpp.
//
// The planners decide from index data, never from spelled text: which loads are contiguous, run
// along a row or a column, or are kept in registers, they find by walking the expressions'
// trees (loop_ir.h for_each_load), each load known by its buffer and index (LoadKey); a load
// or row value the kernel holds in a local of its own (a Vec's lane, a register array, a
// running max) is substituted into the expression as a Local (Locals) before it is spelled.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/c_style.h"
#include "codegen/cuda_kernel.h"
#include "codegen/loop_ir.h"
#include "codegen/stmt.h"

namespace mini::codegen {

using fusion::FusionGroup;
using fusion::Schedule;
using graph::Node;

// The most inlined copies of transcendental functions one unrolled row pass may hold (layouts
// 9 and 10): NVRTC's compile time, not the kernel's speed, is what more copies cost.
constexpr int kUnrolledTranscendentals = 8;

inline std::string cuda_type(DType d) { return kCudaTarget.type(d); }

// The loads and row values a pass holds in locals of its own (a vector's lanes, a thread's
// registers, a running max), found by their identity (a load's buffer and index, a value's
// node): apply() substitutes a Local for each in an expression before it is spelled.
struct Locals {
  std::map<LoadKey, std::string> loads;  // a load -> the local holding it (k0[u], l3.v[lane])
  std::map<int, std::string> row_values;  // a row value r<id> -> ... (mini::online_shift(m5))
  ExprPtr apply(const ExprPtr& e) const;
};

// The statements of `body` (stmt.h) as CUDA, each line at `pad` or deeper; `space` is the
// kernel's (cuda_statements.cpp: one function per statement kind, CUDA's words from one table).
std::string spell_cuda(const Body& body, const CStyle& cs, const Shape& space, const std::string& pad);
// A Vec of `width` elements of load e from the element it reads; for a padded load, zeros
// where the vector lies outside its slice (runs_along_innermost: wholly in or out).
std::string vector_read(const CStyle& cs, const Expr& e, const std::string& width);

class CudaKernelWriter {
 public:
  CudaKernelWriter(const Schedule& s, const FusionGroup& k, const CudaLayout& layout);
  std::string write();     // the kernel's comment and its __global__ function
  Plan plan_pointwise();    // plan_cuda's, for a pointwise kernel (cuda_pointwise.cpp)
  Plan plan_split_reduction();  // ... for one row split over the blocks (cuda_columns.cpp)
  Plan plan_column_reduction();  // ... for columns one a thread (not in vectors; cuda_columns.cpp)
  Plan plan_vector_columns(int CV);  // ... for CV columns a thread (cuda_columns.cpp)
  Plan plan_row_kernel();  // ... for rows, a block, a warp or a few lanes each (cuda_rows.cpp):
                           // plan_vector_rows where they are looped over in vectors, else
  Plan plan_row_reduction();  // ... for rows held in registers, or looped over element by element
  bool assumes_aligned();  // cuda_assumes_aligned
  int column_vector();     // cuda_column_vector

 private:
  // ---- the shape, and what every shape uses (cuda_kernel.cpp) ----
  CudaLayout without_online() const;
  Plan plan_shape(bool split, bool columns);
  std::vector<ExprPtr> pass_exprs(const RowPlan& plan, int p) const;
  void plan_unreduced_row_values(Body& body, std::set<int>* done);
  void plan_ready_row_values(Body& body, std::set<int>* done);
  std::string out(int id) { return "out" + std::to_string(L_.buffer_of_store(id)); }
  std::string linear_full() { return codegen::linear_full(k_.space); }
  int load_node(int buffer) const;
  bool fits_int32() const;
  static bool is_sum(const Node& n) { return n.op == OpKind::Sum || n.op == OpKind::Mean; }
  bool runs_along_innermost(const Expr& e, int cv) const;

  // ---- pointwise (cuda_pointwise.cpp): the planner plan_pointwise ----
  // What the vector loop reads in Vecs: each contiguous load (by buffer, of its element type),
  // and the padded loads (slice_backward), those read as a Vec named in pad_vectors.
  struct PointwiseVectors {
    std::map<int, DType> flat;
    std::map<LoadKey, Expr> padded;
    std::map<LoadKey, std::string> pad_vectors;
  };
  Body plan_vector_loop(const PointwiseVectors& vectors, const std::vector<int>& full);
  Stmt plan_elements(const std::string& first, const std::vector<int>& full);

  // ---- columns, and one row split over blocks (cuda_columns.cpp) ----
  void plan_partials_fold(Body& body, size_t r, int id);
  Stmt as_accumulator(Stmt s, int id);
  Stmt accumulator(int id, bool assign);
  Stmt fold(int id, ExprPtr value);
  Stmt block_reduce(int id);
  void plan_column_phase(Body& body, int p, bool split, std::set<int>* done);
  void plan_strip_arrival(Body& body);
  void plan_strip_partials(Body& body, size_t r, int id, const std::string& acc, const std::string& col);
  void plan_column_folds(Body& body, const std::vector<std::pair<int, std::string>>& accs);
  Stmt result(int id, const std::string& acc);
  void plan_vector_columns_start(Body& body, int CV, const std::string& X, const std::vector<int>& reds,
                                 const std::vector<int>& column_values);
  void plan_vector_columns_pass(Body& body, int CV, const std::string& X, const std::vector<int>& column_values);
  void plan_vector_columns_fold(Body& body, int CV, const std::vector<int>& reds);
  void plan_vector_columns_results(Body& body, const std::string& X, const std::vector<int>& reds,
                                   const std::vector<int>& column_values);

  // ---- rows (cuda_rows.cpp) ----
  // A persistent row (a static row of at most layout.row_registers elements a thread): each
  // thread reads its `per_thread` elements of every load that runs along the row once, into
  // registers, and each phase's pass reads them there (softmax and layer norm read the row from
  // memory once, not 3 times). With vector rows a thread's elements come in runs of `vector`
  // consecutive ones (16 bytes of the widest kept load), read as one Vec where every kept load
  // runs contiguously along the row from an aligned start: element u of a thread is
  // j = (threadIdx.x + u / vector * threads) * vector + u % vector. per_thread 0: a looped row.
  struct KeptLoad {
    Expr load;         // its buffer, index and element type
    std::string name;  // its register array, k<n>
  };
  struct PersistentRow {
    int threads = 0, per_thread = 0, vector = 1;
    std::map<LoadKey, KeptLoad> kept;  // the loads kept in registers
    Locals locals() const;             // ... read in a pass as k<n>[u]
  };
  // A load that runs along the row (an index term over a reduced dim), as a walk of every
  // pass's expressions finds it: the load (buffer, index, element type), the passes reading it.
  struct RowLoad {
    Expr load;
    std::set<int> passes;
    // a slice_backward's read (Index::pad_dim): element by element, masked
    bool padded() const { return load.index.pad_dim >= 0; }
  };
  // The looped vector rows' plan: the loads along the row (each read as Vec k<n>), V lanes.
  struct VectorRows {
    RowPlan plan;
    std::vector<RowLoad> loads;
    std::map<LoadKey, std::string> names;  // a load -> its Vec variable
    int V = 0;
  };
  // Whether rows of this kernel can be persistent (static, within the layout's registers).
  bool persistent_rows() { return cuda_kernel_shape(k_, layout_) == "per"; }
  // ---- the rows' planners and what both shapes share (cuda_rows.cpp) ----
  void plan_row_start(Body& body, const std::string& rnumel) const;
  Stmt plan_row_loop(bool int32) const;
  std::vector<RowLoad> row_loads(const RowPlan& plan);
  bool runs_in_vectors(const std::vector<const RowLoad*>& loads, int V) const;
  PersistentRow plan_persistent_row(const RowPlan& plan);
  Stmt each_row_element(const PersistentRow& row, bool int32) const;
  Stmt each_row_vector(const PersistentRow& row, bool int32) const;
  void plan_row_reads(Body& body, const PersistentRow& row, bool int32);
  std::set<int> running_maxes(const std::vector<int>& reds) const;
  void plan_block_reductions(Body& body, const std::vector<int>& reds, std::set<int>* done);
  void plan_row_phase(Body& body, const RowPlan& plan, const PersistentRow& row, int p, bool int32,
                      std::set<int>* done);
  void plan_vector_row_stores(Body& body, const PersistentRow& row, const std::vector<int>& stores, bool int32);
  void plan_row_value_stores(Body& body);
  // ---- the looped vector rows (cuda_rows.cpp) ----
  bool vector_loop_shape(VectorRows* rows);
  Plan plan_vector_rows(const VectorRows& rows);  // plan_row_kernel's, for rows looped over in vectors
  void plan_vector_rows_pass(Body& body, const VectorRows& rows, int p, bool* reread, std::set<int>* done);
  Stmt vector_pass_loop(const VectorRows& rows, int p, bool int32);
  void plan_reread(Body& body, const std::vector<RowLoad>& loads, int p);
  int row_unroll(const RowPlan& plan, int p, int64_t trips, int V) const;
  void plan_vector_pass_loads(Body& body, const VectorRows& rows, int p, bool int32);
  void plan_running_maxes(Body& body, const std::vector<int>& reds, const std::set<int>& running, int V, bool int32,
                          const Locals& lanes);
  void plan_lane_fold(Body& body, const std::set<int>& compute, const std::vector<int>& reds,
                      const std::set<int>& running, const std::vector<int>& stores, const Locals& lanes);

  const LoopKernel L_;
  const Schedule& s_;
  const graph::Graph& g_;
  const FusionGroup& k_;
  CStyle cs_;
  const int rank_;
  const CudaLayout layout_;
  // A warp per row (warp_rows_ rows a block, cuda_rows_per_block) or a block per row: how the
  // row planners name a thread's place in its row, the threads of a row, and the rows a block
  // takes in turn (a warp's: the names RowThread defines; a block's: CUDA's own).
  const int warp_rows_;
  int column_vector_ = -1;  // column_vector(), once decided
  const int row_lanes_;  // a reduction's threads per row (cuda_reduction_threads)
  std::string lane_ = "threadIdx.x", row_threads_ = "blockDim.x", first_row_ = "blockIdx.x", row_step_ = "gridDim.x";
};

}  // namespace mini::codegen
