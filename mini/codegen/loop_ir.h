// loop_ir.h — a fused kernel lowered to data, before any target spells it.
//
// In:  a Schedule and one of its FusionGroups (mini/fusion).
// Out: a LoopKernel: the kernel's buffers, which of its values live over the full iteration
//      space and which once per row, the reductions' phases (a reduction that reads another
//      runs in a later pass over the row), the outer-reduction form, the row plan (values kept
//      in scratch between passes), stage cutting, and every value's expression as an Expr tree
//      whose loads carry their index arithmetic as data.
// A planner per target decides the loops from it (cpp_plan.cpp and cuda_pointwise.cpp: statements
// of stmt.h; the CUDA shapes not planned yet decide while printing, cuda_kernel.cpp) and the
// renderers spell the expressions through c_style.h's tables; nothing here is text. Index
// variables: x<d> is the position along dim d of the kernel's space; a flat loop's index is i.
// A planner finds loads by walking a tree (for_each_load), knows them by value (LoadKey), and
// puts a Local in place of a value it already holds (substitute) before the tree is spelled.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fusion/schedule.h"

namespace mini::codegen {

// x<dim> * stride, the stride a number or, where the graph's strides are not compile-time
// constants, strides[buffer][axis] (a kernel argument).
struct IndexTerm {
  int64_t dim = 0;
  int64_t stride = 0;
  int axis = -1;  // >= 0: the dynamic stride strides[buffer][axis]
};

// Where a load reads: the flat loop index i, or the sum of its terms (none: element 0).
// A padded load (slice_backward: a gradient placed at [lo, lo + len) of a longer dim, zeros
// around it) reads x<pad_dim> - pad_lo along pad_dim, clamped into [0, len) so that every
// address is in bounds, and its value is 0 where x<pad_dim> lies outside [lo, lo + len).
struct Index {
  bool flat = false;
  std::vector<IndexTerm> terms;
  int64_t pad_dim = -1;  // >= 0: a padded load; its term over pad_dim is the clamped one
  int64_t pad_lo = 0, pad_len = 0;
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind {
    Constant,  // value, of dtype
    Load,      // buffer `buffer` (in<buffer>) at `index`
    Temp,      // the value of node `node` computed earlier in the kernel: per element, or per row
    Cast,      // args[0] converted to dtype
    Op,        // op over args (each already converted to `compute`, but where's condition)
    Iota,      // an int64 arange's element at `index` (start + step * index), computed, not loaded
    Local,     // a value a renderer already holds in a named local (`name`: a vector's lane
               // l3.v[lane], a register k0[u], a running max), put in place of a Load or a Temp
               // by substitute() before the expression is spelled
  };
  Kind kind = Kind::Constant;
  DType dtype = DType::Float32;  // the type of the result
  double value = 0;              // Constant
  int64_t start = 0, step = 1;   // Iota
  int buffer = -1;               // Load, Iota (the arange's buffer, which it does not read)
  Index index;                   // Load, Iota
  int node = -1;                 // Temp, Op: the graph node
  bool row = false;              // Temp: a row value (r<node>) rather than a full one (t<node>)
  OpKind op = OpKind::Add;       // Op
  DType compute = DType::Float32;  // Op: the type it computes in
  const Attrs* attrs = nullptr;  // Op: the node's attributes (gelu's mode, ...)
  std::vector<ExprPtr> args;     // Cast, Op
  std::string name;              // Local: the local, as the renderer spells it
};

// Whether e is a numeric constant equal to v, or such a constant converted (pow's small
// integer exponents become multiplications).
bool is_constant(const ExprPtr& e, double v);

// A load's identity: its buffer and its index, compared by value (two loads of one buffer at
// one index read the same element, however often an expression spells them). Ordered by
// buffer, then index data: a renderer's map of loads lists them in that order.
struct LoadKey {
  int buffer = -1;
  Index index;
  bool operator<(const LoadKey& other) const;
  bool operator==(const LoadKey& other) const { return !(*this < other) && !(other < *this); }
};
LoadKey load_key(const Expr& load);

// Each Load of e, in the order a renderer spells them (arguments left to right).
void for_each_load(const ExprPtr& e, const std::function<void(const Expr& load)>& fn);
// e rebuilt with each node for which fn returns an expression replaced by it (its arguments
// not visited); nodes fn leaves (nullptr) are kept, and shared where nothing below changed.
ExprPtr substitute(const ExprPtr& e, const std::function<ExprPtr(const Expr& node)>& fn);
// A Local: the value of type dtype held in `name`.
ExprPtr local(std::string name, DType dtype);
// A Temp: node `node`'s value of type dtype, computed earlier (a row value r<node>, or t<node>).
ExprPtr temp(int node, DType dtype, bool row);

// Values a row plan keeps per row (in scratch arrays) rather than computing again, per phase.
struct RowPlan {
  std::vector<std::set<int>> compute, read;  // per phase: values computed, values read back
  std::set<int> scratch;                     // values with a scratch array
  std::map<int, int> computed_in;            // value -> the phase that computes it
};

class LoopKernel {
 public:
  // online_softmax: a sum of exp(x - m), m the row's max of the same x, runs in m's pass over
  // the row (online_max below) instead of the pass after it.
  LoopKernel(const fusion::Schedule& s, const fusion::FusionGroup& k, bool online_softmax = false);

  const graph::Graph& graph() const { return g_; }
  const fusion::FusionGroup& group() const { return k_; }
  const graph::Node& node(int id) const { return g_.nodes[id]; }
  int rank() const { return rank_; }
  const std::vector<int64_t>& kept_dims() const { return kept_dims_; }
  const std::vector<int64_t>& red_dims() const { return red_dims_; }
  // Buffer numbers: the loads first (FusionGroup::loads order), then the stores.
  const std::map<int, int>& load_index() const { return load_index_; }
  const std::map<int, int>& store_index() const { return store_index_; }
  bool is_store(int id) const { return store_index_.count(id) > 0; }
  int buffer_of_store(int id) const { return store_index_.at(id); }

  bool in_kernel(int id) const { return in_kernel_.count(id) > 0; }
  bool is_reduction(int id) const;
  // A value over the kernel's whole space (not a reduction, not a row value).
  bool is_full(int id) const;
  // In-kernel reductions value `id` depends on.
  const std::set<int>& reductions_below(int id) const { return below_.at(id); }
  int phases() const { return phases_; }
  // The online softmax (Milakov and Gimelshein 2018; Inductor's prepare_softmax_online): for a
  // reduction sum(exp(x - m)) (or mean) with m = amax(x) over the same row, m when the kernel
  // was lowered with online_softmax (the sum then folds in m's pass, rescaling its running
  // value whenever the running max rises), else -1.
  int online_max(int sum) const;
  bool has_online_pairs() const { return !online_.empty(); }
  // Whether full value `id`, computed in pass p, reads the running max of an online pair of
  // that pass (it is then not the value later passes see, and never kept for them).
  bool reads_running_max(int id, int p) const;
  int phase(int reduction) const { return phase_.at(reduction); }
  // The pass over the row after which a stored full value can be written.
  int store_phase(int id) const;
  // Reductions (in program order) and full-space stores of phase p; returns both as one set.
  std::set<int> phase_targets(int p, std::vector<int>* reds, std::vector<int>* stores) const;
  // Product of the space's extents over dims, as a number (-1 when a symbol is among them).
  int64_t static_extent(const std::vector<int64_t>& dims) const;

  // The expression of node `id` (in the kernel): its op over its inputs' values. flat_ok: the
  // loop runs over i, and loads contiguous over the whole space read in[i].
  ExprPtr expr(int id, bool flat_ok) const;
  // The value a reduction folds in: its input over the kernel's full space.
  ExprPtr reduction_input(int id) const;

  // A pointwise kernel whose flat loop needs the index split into x0, x1, ... (a load that is
  // neither contiguous over the space nor a scalar).
  bool flat_uses_index() const { return flat_uses_index_; }
  // The outer-reduction form: the reduced dims lead, every reduction is in the first phase,
  // and what else is stored is a row value after them or a full value before them.
  bool is_outer_reduction() const;
  // Full-space values needed to compute `targets`, in program order (targets included).
  std::vector<int> full_values_for(const std::set<int>& targets) const;
  // `order` cut after each transcendental op that has another after it, into at most
  // max_stages stages.
  std::vector<std::vector<int>> cut_stages(const std::vector<int>& order, int max_stages) const;
  // Which values each phase computes and which it reads back from a scratch array of the row,
  // within scratch_budget bytes of arrays.
  RowPlan plan_rows(int64_t scratch_budget) const;

 private:
  ExprPtr value(int id, bool flat_ok, bool row_context) const;
  ExprPtr load(int id, bool flat_ok, bool row_context) const;
  ExprPtr padded_load(const graph::Node& n, bool row_context) const;
  int find_online_max(int sum) const;

  const graph::Graph& g_;
  const fusion::FusionGroup& k_;
  std::set<int> in_kernel_;
  std::map<int, int> load_index_, store_index_;
  std::map<int, int> phase_;
  std::map<int, std::set<int>> below_;  // node -> reductions_below(node)
  std::map<int, int> online_;           // online sum -> its max
  int phases_ = 0;
  int rank_ = 0;
  bool flat_uses_index_ = false;
  std::vector<int64_t> all_dims_, kept_dims_, red_dims_;
};

// The type an op computes in: the promoted type of its inputs (comparisons compute in it and
// return bool).
DType compute_type(const graph::Graph& g, const graph::Node& n);

}  // namespace mini::codegen
