// training_steps.h — the three steps of make_training_graphs, one file each (internal to
// autograd/; training.h is the stage's interface):
//   joint.cpp           step 1, trace: the joint forward/backward graph, from derivatives.h's
//                       rules (trace_joint)
//   partition.cpp       step 2, partition: the fate of each forward value the backward reads,
//                       saved or recomputed (the recompute partitioner, the min-cut, PartitionWalk)
//   backward_graph.cpp  step 3, build: the backward graph, its recomputed ops placed where they
//                       are read (build_backward); and the backward of a call missing tangents
// training.cpp runs them in that order and holds the runner that calls the two graphs as one
// autograd node.
#pragma once
#include <vector>

#include "autograd/training.h"

namespace mini::autograd {

// The graph IR's names, as the step files use them.
using graph::Graph;
using graph::Node;
using graph::NodeKind;
using graph::TensorMeta;

// Step 1, trace (joint.cpp).
// In:  fwd, the forward graph, and J, a copy of it (add_other_outputs already applied).
// Out: J with one tangent input per distinct differentiable output and the backward's nodes
//      appended; J's outputs the gradients of the forward inputs that carry one. Fills tg's
//      tangents, tangent_of_output, num_user_outputs, grad_inputs and tangents_of_grad.
//      Returns first_backward: J's nodes below it are the forward's.
int trace_joint(const Graph& fwd, Graph& J, TrainingGraphs& tg);

// Appends to `g` a node for every output of a multi-output call that has none (joint.cpp).
void add_other_outputs(Graph& g);

// The bytes of a value of meta `m` (partition.cpp).
int64_t meta_bytes(const TensorMeta& m);

// What the backward does with a forward value it reaches: a constant is made again, a
// recomputed value's op is copied into the backward, a saved one is read from the forward.
enum class Fate { Unseen, Constant, Recompute, Saved };

// Step 2, partition (partition.cpp): the walk that gives each forward value the backward
// reaches its fate. Made by partition_walk; build_backward asks fate_of for each forward value
// it reads.
struct PartitionWalk {
  const Graph& J;
  const int first_backward;
  Partitioner partitioner;
  std::vector<bool> cut_saved;    // the min-cut partitioner's choice
  std::vector<bool> far;          // used_far_apart
  std::vector<bool> for_externs;  // read_by_externs_only
  std::vector<Fate> fate = std::vector<Fate>(first_backward, Fate::Unseen);
  std::vector<int> chain = std::vector<int>(first_backward, 0);  // a recomputed value: the recomputed
                                                                 // ops it waits on, itself included

  // What the partitioner would do with op node n (id) on its own: recompute it (true) or save it.
  bool partitioner_recomputes(int id) const;
  // Decides fate[id], and the fates of what a recomputed value is computed from (A2: the
  // contract is above its definition).
  void decide(int id);
  // fate[id], decided.
  Fate fate_of(int id);
};

// The walk for tg.partitioner over joint graph J; runs the min-cut first where it is asked for
// (tg.partitioner becomes Recompute, with a warning, where the min-cut is a student's stub).
PartitionWalk partition_walk(const Graph& J, int first_backward, TrainingGraphs& tg);

// Step 3, build (backward_graph.cpp).
// In:  the joint graph J and the walk over its forward.
// Out: bwd, the backward graph (inputs: the saved values, then the tangents; outputs: J's);
//      tg.saved_bytes. Returns the forward ids the forward graph must also return (saved).
std::vector<int> build_backward(const Graph& J, int first_backward, PartitionWalk& walk, Graph& bwd,
                                TrainingGraphs& tg);

}  // namespace mini::autograd
