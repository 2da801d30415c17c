// training.h — the joint forward/backward graph and its partition (AOTAutograd's role).
//
// In:  a captured forward Graph whose inputs carry requires_grad in their meta.
// Out: TrainingGraphs: a *forward* graph (the user's outputs, then the values backward needs,
//      "saved") and a *backward* graph (inputs: those saved values, then one incoming
//      gradient per differentiable output, "tangents"; outputs: one gradient per input that
//      requires grad and is reached). Both are ordinary Graphs: any backend runs them (the
//      graph interpreter for "aot_eager", fusion + generated C++ for "inductor").
// How: the backward is traced by running derivatives.h's rules with a builder whose values
//      are graph nodes — the same rules eager autograd runs on tensors — so compiled and
//      eager gradients are computed by the same formulas. The joint graph (forward nodes,
//      tangents, backward nodes) is then cut in two. Partitioners: save-all keeps every
//      forward value backward reads; recompute saves only inputs and the outputs of
//      expensive ops (matmul, reductions, transcendentals) and recomputes the cheap
//      pointwise and view ops in backward, where fusion makes them nearly free (torch's
//      min-cut partitioner decides the same trade with a max-flow over bytes).
// At run time (make_training_runner) the forward graph runs without recording autograd, and
// one autograd node (CompiledFunctionBackward) with one slot per differentiable output is
// attached to the outputs; eager backward() runs the backward graph through it. An input
// whose gradient reads only tangents of outputs that got no gradient (a logit beside the
// loss, a value handed across a graph break and not used) gets none, as in eager mode: its
// .grad stays None (a zero-filled tangent stands in only for the graph's arithmetic).
// Not covered: graphs with symbolic sizes (the caller runs them with eager kernels),
// double backward (the backward graph does not record autograd).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace mini::autograd {

// SaveAll: every forward value the backward reads is saved ("aot_eager"). Recompute: a greedy
// rule per value (recompute_in_backward: cheap pointwise and view ops are recomputed, the rest
// saved; "inductor"'s default). MinCut: torch's min-cut rematerialization: a max-flow over the
// forward graph whose cut saves the fewest bytes, given that matmuls, reductions, composites,
// factories (random numbers) and ops with symbolic attributes are never recomputed
// (mini.config.partitioner = "min-cut").
enum class Partitioner { SaveAll, Recompute, MinCut };

struct TrainingGraphs {
  std::shared_ptr<graph::Graph> joint;     // forward nodes, tangents, backward nodes
  std::shared_ptr<graph::Graph> forward;   // outputs: user outputs, then saved values
  std::shared_ptr<graph::Graph> backward;  // inputs: saved..., tangents...; outputs: gradients
  int num_user_outputs = 0;
  std::vector<int> tangent_of_output;      // per user output: its tangent's index, or -1
  std::vector<int> grad_inputs;            // per backward output: the forward input (position)
  std::vector<std::vector<int>> tangents_of_grad;  // per backward output: the tangents it is
                                           // computed from (a path in the joint graph); with
                                           // none of them given, the input was not reached
  std::vector<graph::TensorMeta> tangents; // the meta of each tangent (contiguous)
  int64_t saved_bytes = 0;                 // bytes of saved intermediates (inputs excluded: the
                                           // caller keeps them alive anyway)
  Partitioner partitioner = Partitioner::SaveAll;  // the one that partitioned these graphs
  std::vector<std::string> warnings;       // for the user, once per process: the partitioner
                                           // asked for and why another stood in (a student
                                           // tree whose min-cut, A8, is still the stub)
};

// True when some input of `g` requires grad, so training graphs are needed.
bool needs_training_graphs(const graph::Graph& g);

// Builds the joint graph and partitions it. Throws mini::Error when an op on the gradient
// path has no derivative rule, or when the graph has symbolic sizes. MinCut whose max-flow is
// still an assignment stub (is_assignment_stub) partitions with Recompute instead, saying so
// in `warnings`.
TrainingGraphs make_training_graphs(const graph::Graph& forward, Partitioner partitioner);

// The backward graph of a call in which only the tangents marked in `given` arrive (an output
// the loss did not read, the logits returned beside it, gets no gradient). Its inputs are the
// saved values, then the given tangents only. A tangent that does not arrive is zero, and eager
// autograd never computes with it: the zero flows through sums, differences, products, casts,
// views, reductions, matmuls and the backward ops linear in their incoming gradient without
// being made (the [tokens, vocabulary] zeros of the logits, and the add of them to the loss's
// gradient, are gone); where it meets any other op it is made there, a full() of its size.
std::shared_ptr<graph::Graph> backward_for_given(const TrainingGraphs& tg, const std::vector<bool>& given);

using Runner = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// Compiles a backward graph (backward_for_given's) as the backend compiles tg.backward; `which`
// names it for logs and debug files ("missing tangents 1").
using BackwardCompiler = std::function<Runner(std::shared_ptr<graph::Graph> graph, const std::string& which)>;

// A runner with the forward graph's calling convention (the captured graph's inputs -> its
// outputs) that runs `forward` and, when grad mode is on and an input needs grad, attaches
// the backward (`backward` running tg.backward) to the differentiable outputs. A backward call
// missing some tangents runs backward_for_given's graph, compiled by `compile_backward` once for
// each such set; without a compiler (or where that graph fails to build) the missing tangents
// are zero-filled and `backward` runs.
Runner make_training_runner(std::shared_ptr<const TrainingGraphs> tg, Runner forward, Runner backward,
                            BackwardCompiler compile_backward = nullptr);

}  // namespace mini::autograd
