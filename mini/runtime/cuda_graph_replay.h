// cuda_graph_replay.h — mode="reduce-overhead": a compiled graph recorded once as a CUDA graph
// and replayed, one launch a call (torch's cudagraphs).
//
// In:  a CompiledCudaGraph (compiled_cuda_graph.h) and each call's inputs.
// Out: the graph's outputs, from a replay where the inputs' layout was recorded before.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/compiled_cuda_graph.h"

namespace mini::runtime {

// mode="reduce-overhead": a compiled graph's launches recorded into a CUDA graph, one per
// input layout, and replayed: one launch a call instead of one per kernel (torch's
// cudagraphs). The first call of a layout runs as usual (a warm-up: kernels load, cuBLAS
// makes its workspace); the second records. Inputs that require grad (parameters) are read
// where they are, and a new address records again; the others are copied into the recording's
// own buffers before each replay. Outputs are copies (a replay overwrites the recording's own):
// a later call never changes a tensor an earlier one returned. Graphs with random ops (a
// replay would repeat their numbers) are refused by why_not; a recording that meets work a
// graph cannot replay (a copy from the host) is dropped, and those inputs run in default mode.
class CudaGraphReplay {
 public:
  explicit CudaGraphReplay(std::shared_ptr<CompiledCudaGraph> cg) : cg_(std::move(cg)) {}
  ~CudaGraphReplay();
  CudaGraphReplay(const CudaGraphReplay&) = delete;
  CudaGraphReplay& operator=(const CudaGraphReplay&) = delete;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  int recordings() const;  // CUDA graphs recorded so far
  // "" if `cg` can be replayed, else why not (a random op, a copy to the host).
  static std::string why_not(const CompiledCudaGraph& cg);

 private:
  struct Recording {
    std::vector<Tensor> inputs, outputs, values;  // the graph's own buffers, kept while it lives
    std::vector<void*> freed;                     // blocks freed while recording (capture_graph)
    uintptr_t exec = 0;
    bool warmed = false;
    std::string why_not;  // why these inputs cannot be recorded (they run in default mode)
  };
  std::shared_ptr<CompiledCudaGraph> cg_;
  std::map<std::string, Recording> recordings_;  // by the inputs' layouts and static addresses
  mutable std::mutex mutex_;
};

}  // namespace mini::runtime
