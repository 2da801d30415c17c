// schedule.h — Inductor's middle for the CPU: decompose, fuse greedily, plan buffers.
//
// In:  a captured graph (mini/graph).
// Out: a Schedule — the graph's nodes grouped into steps: fused kernels (FusionGroup),
//      extern calls (matmul through BLAS, ops without a lowering), and views (index
//      rewrites, no kernel) — plus which values live in memory and where.
// Guarantees:
//  * a pointwise chain is one kernel; a reduction absorbs the pointwise producers of its
//    input; pointwise consumers of a row reduction over the same rows join it (decomposed
//    softmax and layer norm are one kernel each); independent ops over the same iteration
//    space share a kernel; a matmul is an extern call and its pointwise epilogue one kernel;
//  * every decision not to fuse has a reason (FusionDecision), printed by MINI_LOGS=fusion;
//  * values produced and consumed inside one kernel are never allocated (`realized` is
//    false); buffers whose last reader has run are reused by later ones of the same size.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"

namespace mini::fusion {

// Softmax, log_softmax, layer_norm and mse_loss rewritten into pointwise ops and
// reductions (Inductor's decompositions), so that fusion sees their parts. With
// `one_batch_stride` (cuBLAS, whose batched GEMM steps through a batch at one stride), a matmul
// operand that BLAS cannot read as it is (a batch of views such as attention's heads, [B, T, H,
// D] transposed to [B, H, T, D]) gets a clone made right where the operand is, a pointwise
// node that fusion merges with its neighbours (the clones of q, k and v become one kernel),
// instead of the extern call's eager copy, a launch each.
graph::Graph decompose(const graph::Graph& g, bool one_batch_stride = false);

enum class StepKind { Kernel, Extern, View };

// One fused kernel: its nodes run over one iteration space `space`; if `reduced` is not
// empty they form a reduction kernel whose rows are the kept dims.
struct FusionGroup {
  std::vector<int> nodes;           // graph node ids, in program order
  Shape space;                      // the full iteration space (symbols allowed)
  std::vector<int64_t> reduced;     // dims of `space` reduced (sorted); empty: pointwise
  std::vector<int> loads;           // nodes read from memory (inputs, earlier kernels' outputs)
  std::vector<int> stores;          // nodes written to memory (used later or returned)
  std::string name;                 // poi_fused_add_mul_relu_0, red_..., per_...; a renderer
                                    // prefixes its target (codegen::name_kernels: cpp_poi_...)
};

struct Step {
  StepKind kind;
  int node = -1;       // Extern/View: the node it computes
  int group = -1;      // Kernel: index into Schedule::groups
  std::vector<int> also;  // Extern of a multi-output op: the call's other nodes (graph::same_call),
                          // which this step fills (they have no step of their own)
};

struct FusionDecision {
  std::string text;    // "fuse mul into cpp_poi_0: same iteration space [64, 64] (saves 16384 bytes)"
};

struct Schedule {
  graph::Graph graph;                   // the decomposed graph the steps refer to
  std::vector<FusionGroup> groups;
  std::vector<Step> steps;
  std::vector<bool> realized;           // node -> has a buffer (input, extern, stored)
  std::vector<int> last_use;            // node -> index of the last step that reads it
  std::vector<FusionDecision> decisions;
  int64_t peak_bytes = 0;               // the buffer plan's peak (symbols at their hints)
  int64_t unplanned_bytes = 0;          // every buffer alive at once, for comparison
  int buffers = 0, reused = 0;
};

// max_loads: the most tensors one kernel may read (0: no limit), for a target that passes them
// in a fixed table (CUDA: codegen::kCudaMaxLoads); a node that would read more starts a kernel.
// one_batch_stride: decompose's, for a target whose matmuls are cuBLAS's.
Schedule schedule(const graph::Graph& g, int max_loads = 0, bool one_batch_stride = false);

// Bytes of a tensor of this meta (symbols at the hints of `g`).
int64_t meta_bytes(const graph::Graph& g, const graph::TensorMeta& m);

}  // namespace mini::fusion
