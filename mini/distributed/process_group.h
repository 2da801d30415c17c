// process_group.h — the distributed stage's interface: a process group (torch's c10d
// ProcessGroup) runs collectives among the processes of a job, over Gloo for CPU tensors and
// over NCCL for CUDA tensors.
//
// In:  the rendezvous store (tcp_store.h), this process's rank and the world size, a timeout;
//      then, per call, tensors: contiguous, of one dtype (float32, float64, bfloat16, int64),
//      on the backend's device, with sizes that fit the collective.
// Out: a Work per collective. Gloo runs the collectives one after another on a worker thread
//      of the group (gloo_group.cpp); NCCL enqueues them on a CUDA stream of its own, after
//      what mini's compute stream has queued so far (nccl_group.cpp). Work::wait() returns
//      once the result may be used: Gloo's has finished, NCCL's has the compute stream wait
//      for it (the host does not).
// Guarantees: every rank must call the same collectives in the same order (as in torch); a
// caller's mistake is an error before anything runs (its message names the argument and the
// fix), and what goes wrong among ranks is a DistError (errors.h) from wait(): a rank that
// never comes within the timeout is named, ranks that pass Gloo different sizes, dtypes or
// collectives are told so (NCCL does not check: that would cost a round trip per call). A
// Work's tensors stay alive until it completes, whoever drops it first.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "distributed/tcp_store.h"
#include "tensor/tensor.h"

namespace mini::distributed {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

// One collective call, as the group's checks and backends see it.
struct Collective {
  enum class Kind { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier };
  Kind kind;
  Tensor input;   // all_gather's and reduce_scatter's input; all_reduce's and broadcast's tensor
  Tensor output;  // where the result lands (the same tensor for all_reduce and broadcast)
  ReduceOp op = ReduceOp::Sum;
  int root = 0;     // broadcast's source rank
  int64_t seq = 0;  // its number in the group's order of calls: 0, 1, 2, ...
  // "all_reduce #3 of float32[1024] (sum)": how messages name it.
  std::string describe() const;
};
const char* collective_name(Collective::Kind kind);  // torch's: "all_reduce", "broadcast", ...

class Work {
 public:
  virtual ~Work() = default;
  // Returns once the result may be used (see above); raises the collective's error.
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;  // "gloo", "nccl"
  virtual Device::Type device_type() const = 0;

  // The collectives, torch's names and meanings. In place: all_reduce and broadcast write
  // `tensor`; all_gather_into_tensor fills `output` (size x input's elements, rank by rank);
  // reduce_scatter_tensor reduces `input` (size x output's elements) and keeps this rank's part.
  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op);
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int src);
  std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input);
  std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op);
  std::shared_ptr<Work> barrier();

 protected:
  // Runs (or queues) one checked collective.
  virtual std::shared_ptr<Work> launch(const Collective& c) = 0;

 private:
  std::shared_ptr<Work> checked_launch(Collective c);
  void check_tensor(const Collective& c, const Tensor& t, const char* arg) const;

  int rank_;
  int size_;
  std::mutex launch_mutex_;  // numbers and launches one call at a time (threads may call)
  int64_t next_seq_ = 0;
};

// The backends. Each joins the group's ranks through `store` under `prefix` (so that the
// Gloo and NCCL groups of one job keep apart) and returns once every rank has. Where this
// build of mini has no Gloo (or no CUDA and NCCL) the factory throws an Error saying so and
// how to get it; *_available() say it beforehand.
std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<TcpStore> store,
                                              const std::string& prefix, int rank, int size,
                                              std::chrono::milliseconds timeout);
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<TcpStore> store,
                                              const std::string& prefix, int rank, int size,
                                              std::chrono::milliseconds timeout);
bool gloo_available();
bool nccl_available();              // built with NCCL, and a GPU answers
std::string nccl_unavailable_reason();  // why not, with the fix ("" when it is available)

}  // namespace mini::distributed
