// cuda_graph_replay.cpp — see cuda_graph_replay.h.
#include "runtime/cuda_graph_replay.h"

#include "tensor/cuda/cuda.h"
#include "tensor/metrics.h"
#include "tensor/ops.h"

namespace mini::runtime {

std::string CudaGraphReplay::why_not(const CompiledCudaGraph& cg) {
  for (const auto& n : cg.schedule.graph.nodes)
    if (n.kind == graph::NodeKind::Op && (n.op == OpKind::Rand || n.op == OpKind::Randn))
      return n.name + " draws random numbers, and a CUDA graph's replay would draw the same ones";
  return "";
}

CudaGraphReplay::~CudaGraphReplay() {
  for (auto& [key, r] : recordings_) {
    cuda::destroy_graph(r.exec);
    for (void* p : r.freed) cuda::release(p);
  }
}

int CudaGraphReplay::recordings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int n = 0;
  for (auto& [key, r] : recordings_) n += r.exec != 0;
  return n;
}

std::vector<Tensor> CudaGraphReplay::run(const std::vector<Tensor>& inputs) {
  if (inputs.size() != cg_->schedule.graph.inputs.size())
    fail("compiled graph expects ", cg_->schedule.graph.inputs.size(), " inputs, got ", inputs.size());
  // the key: each input's dtype, sizes and strides; and where a parameter lives
  std::string key;
  for (const Tensor& t : inputs) {
    key += std::to_string((int)t->dtype) + (t->is_cuda() ? "c" : "h") + "[";
    for (int64_t s : t->sizes) key += std::to_string(s) + ",";
    key += "][";
    for (int64_t s : t->strides) key += std::to_string(s) + ",";
    key += "]";
    if (t->requires_grad) key += "@" + std::to_string(reinterpret_cast<uintptr_t>(t->device_raw()));
    key += ";";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Recording& r = recordings_[key];
  if (!r.warmed || !r.why_not.empty()) {  // the warm-up call, or a graph that cannot be recorded
    r.warmed = true;
    return cg_->run(inputs);
  }
  if (!r.exec) {
    for (const Tensor& t : inputs) {
      if (t->requires_grad && t->is_cuda()) {
        r.inputs.push_back(t);  // read where it is
        continue;
      }
      r.inputs.push_back(same_layout(t, false));
    }
    for (size_t i = 0; i < inputs.size(); i++)
      if (r.inputs[i] != inputs[i]) copy_(r.inputs[i], inputs[i]);
    try {
      r.exec = cuda::capture_graph([&] { r.outputs = cg_->run_keeping(r.inputs, &r.values); }, &r.freed);
    } catch (const Error& e) {
      // work a graph cannot replay (a copy from the host): these inputs run in default mode from
      // now on, as the error says; the recording's buffers go back
      for (void* p : r.freed) cuda::release(p);
      r.freed.clear();
      r.inputs.clear();
      r.outputs.clear();
      r.values.clear();
      r.why_not = e.what();
      return cg_->run(inputs);
    } catch (...) {
      for (void* p : r.freed) cuda::release(p);
      recordings_.erase(key);
      throw;
    }
  } else {
    for (size_t i = 0; i < inputs.size(); i++)
      if (r.inputs[i] != inputs[i]) copy_(r.inputs[i], inputs[i]);
  }
  cuda::replay_graph(r.exec);
  count_kernel(0);
  std::vector<Tensor> out;
  for (const Tensor& o : r.outputs) out.push_back(clone(o));
  return out;
}

}  // namespace mini::runtime
