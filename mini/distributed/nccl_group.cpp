// nccl_group.cpp — the NCCL backend: collectives of CUDA tensors (NCCL of the CUDA toolkit),
// built where CMake builds mini's CUDA runtime and finds nccl.h.
//
// Setup: the ranks join (rendezvous.h) and check that no two of them share a GPU (mini uses
// its cuda:0 in every process: the launcher gives each process its own through
// CUDA_VISIBLE_DEVICES); rank 0 makes NCCL's unique id, the others read it from the store, and
// all of them make the communicator.
// Streams: every collective runs on the group's own stream. Before it, that stream waits for
// an event recorded on mini's compute stream (so it reads what the kernels queued before the
// call wrote); after it, an event is recorded there, and Work::wait() has the compute stream
// wait for that event: the host never blocks (except barrier(), which torch's blocks too). A
// Work dropped unwaited makes the compute stream wait too, before its tensors are freed: the
// caching allocator hands their memory to the compute stream's next kernels.
// The watchdog: a thread that polls the collectives in flight; one that has not finished
// within the timeout (a rank never called it), or an error NCCL reports for the communicator
// (a peer exited), aborts the communicator (its kernels then end) and breaks the group: every
// later call and wait() raise the reason, which is also printed at once.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "distributed/errors.h"
#include "distributed/process_group.h"
#include "distributed/rendezvous.h"
#include "tensor/cuda/cuda.h"

namespace mini::cuda {
cudaStream_t current_stream();  // runtime.cu; what common.cuh declares for the eager kernels
}

namespace mini::distributed {

using std::chrono::milliseconds;

namespace {

void check_cuda(cudaError_t err, const char* call) {
  if (err != cudaSuccess) fail_backend("the NCCL process group's ", call, " failed: ", cudaGetErrorString(err));
}

void check_nccl(ncclResult_t result, const char* call) {
  if (result != ncclSuccess && result != ncclInProgress)
    fail_backend("NCCL's ", call, " failed: ", ncclGetErrorString(result), ". NCCL_DEBUG=INFO "
                 "prints what NCCL saw");
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int64: return ncclInt64;
    case DType::Bool: break;
  }
  fail_type("NCCL collectives take float32, float64, bfloat16 or int64, not ", dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

struct Event {  // a cudaEvent_t, shared by a Work and the watchdog
  cudaEvent_t event = nullptr;
  Event() { check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(event); }
  bool done() const { return cudaEventQuery(event) != cudaErrorNotReady; }
};

// What the caller's thread and the watchdog share, under `mutex`.
struct Communicator {
  std::mutex mutex;
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  std::string broken;         // why the group is unusable ("" while it is fine)
  struct InFlight {
    std::shared_ptr<Event> done;
    Clock::time_point started;
    std::string description;
  };
  std::vector<InFlight> in_flight;

  void abort(const std::string& why, int rank) {  // holding `mutex`
    broken = why;
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
    in_flight.clear();
    std::fprintf(stderr, "[rank %d] mini.distributed: %s\n", rank, why.c_str());
  }
  void raise_if_broken(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken.empty())
      fail_backend(what, ": this process group failed (", broken, "). Call "
                   "destroy_process_group() and init_process_group() again");
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<Communicator> comm, std::shared_ptr<Event> done,
           std::vector<Tensor> tensors, bool blocking, std::string description)
      : comm_(std::move(comm)), done_(std::move(done)), tensors_(std::move(tensors)),
        blocking_(blocking), description_(std::move(description)) {}
  ~NcclWork() override {
    if (!waited_) cudaStreamWaitEvent(cuda::current_stream(), done_->event, 0);
  }
  void wait() override {
    comm_->raise_if_broken(description_);
    check_cuda(cudaStreamWaitEvent(cuda::current_stream(), done_->event, 0), "cudaStreamWaitEvent");
    waited_ = true;
    while (blocking_ && !done_->done()) {  // barrier(): the host waits, the watchdog may abort
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      comm_->raise_if_broken(description_);
    }
  }
  bool is_completed() override { return done_->done(); }

 private:
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Event> done_;
  std::vector<Tensor> tensors_;  // alive until the compute stream is ordered after the collective
  bool blocking_;
  bool waited_ = false;
  std::string description_;
};

class NcclGroup : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<TcpStore> store, const std::string& prefix, int rank, int size,
            milliseconds timeout);
  ~NcclGroup() override;
  const char* backend() const override { return "nccl"; }
  Device::Type device_type() const override { return Device::Type::CUDA; }

 protected:
  std::shared_ptr<Work> launch(const Collective& c) override;

 private:
  void check_distinct_gpus(TcpStore& store, const std::string& prefix);
  void finish_or_abort();
  void enqueue(const Collective& c, ncclComm_t comm);
  void watch();  // the watchdog thread

  milliseconds timeout_;
  std::shared_ptr<Communicator> comm_ = std::make_shared<Communicator>();
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;
  void* barrier_scratch_ = nullptr;  // one float on the GPU: barrier() all-reduces it
  std::mutex watch_mutex_;
  std::condition_variable stop_watching_;
  bool stopping_ = false;
  std::thread watchdog_;
};

NcclGroup::NcclGroup(std::shared_ptr<TcpStore> store, const std::string& prefix, int rank,
                     int size, milliseconds timeout)
    : ProcessGroup(rank, size), timeout_(timeout) {
  cuda::require("init_process_group(backend='nccl')");
  join(*store, prefix + "join/", rank, size, "init_process_group");
  check_distinct_gpus(*store, prefix);
  ncclUniqueId id;
  if (rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store->set(prefix + "unique_id", std::string(id.internal, sizeof id.internal));
  } else {
    std::string bytes = store->get(prefix + "unique_id");
    std::memcpy(id.internal, bytes.data(), std::min(bytes.size(), sizeof id.internal));
  }
  // every connection made now, while every rank is here: not at a later collective, where
  // a missing rank would block the caller's thread inside NCCL (the user's setting wins)
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  check_nccl(ncclCommInitRank(&comm_->comm, size, id, rank), "ncclCommInitRank");
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming), "cudaEventCreate");
  barrier_scratch_ = cuda::allocate(sizeof(float));
  join(*store, prefix + "ready/", rank, size, "init_process_group");
  watchdog_ = std::thread([this] { watch(); });
}

NcclGroup::~NcclGroup() {
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    stopping_ = true;
  }
  stop_watching_.notify_all();
  watchdog_.join();
  finish_or_abort();
  cuda::release(barrier_scratch_);
  cudaEventDestroy(compute_ready_);
  cudaStreamDestroy(stream_);
}

// What is queued finishes (within the timeout), then the communicator goes; a collective
// still pending then (a rank never called it) is aborted instead of waited for.
void NcclGroup::finish_or_abort() {
  std::lock_guard<std::mutex> lock(comm_->mutex);
  if (!comm_->comm) return;
  const auto deadline = Clock::now() + timeout_;
  while (cudaStreamQuery(stream_) == cudaErrorNotReady && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(1));
  if (cudaStreamQuery(stream_) == cudaErrorNotReady)
    comm_->abort("destroy_process_group(): a collective was still pending after the timeout", rank());
  else if (ncclCommFinalize(comm_->comm) == ncclSuccess)
    ncclCommDestroy(comm_->comm);
  else
    ncclCommAbort(comm_->comm);
  comm_->comm = nullptr;
}

// Two ranks on one GPU would make NCCL fail with a cryptic error (or hang): say it plainly.
void NcclGroup::check_distinct_gpus(TcpStore& store, const std::string& prefix) {
  char host[256] = {}, bus[64] = {};
  gethostname(host, sizeof host - 1);
  check_cuda(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), "cudaDeviceGetPCIBusId");
  const std::string mine = std::string(host) + " " + bus;
  store.set(prefix + "gpu/" + std::to_string(rank()), mine);
  for (int r = 0; r < size(); r++) {
    if (r == rank() || store.get(prefix + "gpu/" + std::to_string(r)) != mine) continue;
    fail_value("init_process_group(backend='nccl'): ranks ", std::min(r, rank()), " and ",
               std::max(r, rank()), " both use the GPU ", bus, " on ", host, ". mini uses one GPU "
               "per process, its cuda:0: start the job with `python -m mini.distributed.run`, "
               "which gives each process its own GPU, or set CUDA_VISIBLE_DEVICES=<LOCAL_RANK> "
               "in each process");
  }
}

std::shared_ptr<Work> NcclGroup::launch(const Collective& c) {
  if (cuda::capturing())
    fail(c.describe(), ": collectives cannot be recorded into a CUDA graph "
         "(mode='reduce-overhead') in mini; run that region in the default mode");
  std::lock_guard<std::mutex> lock(comm_->mutex);
  if (!comm_->broken.empty())
    fail_backend(c.describe(), " did not run: this process group failed earlier (",
                 comm_->broken, "). Call destroy_process_group() and init_process_group() again");
  check_cuda(cudaEventRecord(compute_ready_, cuda::current_stream()), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_, compute_ready_, 0), "cudaStreamWaitEvent");
  enqueue(c, comm_->comm);
  auto done = std::make_shared<Event>();
  check_cuda(cudaEventRecord(done->event, stream_), "cudaEventRecord");
  comm_->in_flight.push_back({done, Clock::now(), c.describe()});
  std::vector<Tensor> tensors;
  if (c.input) tensors = {c.input, c.output};
  return std::make_shared<NcclWork>(comm_, done, std::move(tensors),
                                    c.kind == Collective::Kind::Barrier, c.describe());
}

void NcclGroup::enqueue(const Collective& c, ncclComm_t comm) {
  if (c.kind == Collective::Kind::Barrier) {
    check_nccl(ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm,
                             stream_), "ncclAllReduce (barrier)");
    return;
  }
  void* in = c.input->device_raw();
  void* out = c.output->device_raw();
  ncclDataType_t type = nccl_type(c.input->dtype);
  switch (c.kind) {
    case Collective::Kind::AllReduce:
      check_nccl(ncclAllReduce(in, out, size_t(c.input->numel()), type, nccl_op(c.op), comm, stream_),
                 "ncclAllReduce");
      break;
    case Collective::Kind::Broadcast:
      check_nccl(ncclBroadcast(in, out, size_t(c.input->numel()), type, c.root, comm, stream_),
                 "ncclBroadcast");
      break;
    case Collective::Kind::AllGather:
      check_nccl(ncclAllGather(in, out, size_t(c.input->numel()), type, comm, stream_), "ncclAllGather");
      break;
    case Collective::Kind::ReduceScatter:
      check_nccl(ncclReduceScatter(in, out, size_t(c.output->numel()), type, nccl_op(c.op), comm,
                                   stream_), "ncclReduceScatter");
      break;
    case Collective::Kind::Barrier:
      break;
  }
}

void NcclGroup::watch() {
  std::unique_lock<std::mutex> watching(watch_mutex_);
  while (!stop_watching_.wait_for(watching, milliseconds(100), [this] { return stopping_; })) {
    std::lock_guard<std::mutex> lock(comm_->mutex);
    if (!comm_->comm) continue;
    auto& flights = comm_->in_flight;
    for (size_t i = flights.size(); i-- > 0;)
      if (flights[i].done->done()) flights.erase(flights.begin() + long(i));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      comm_->abort(cat("NCCL reported an error for the communicator: ", ncclGetErrorString(async),
                       " (another rank has probably exited or crashed: its own output says why)"),
                   rank());
    } else if (!flights.empty() && Clock::now() - flights.front().started > timeout_) {
      comm_->abort(cat(flights.front().description, " did not finish within ", seconds_text(timeout_),
                       " on rank ", rank(), ": a rank never called it, or called another "
                       "collective. The communicator was aborted"), rank());
    }
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<TcpStore> store, const std::string& prefix,
                                              int rank, int size, milliseconds timeout) {
  return std::make_shared<NcclGroup>(std::move(store), prefix, rank, size, timeout);
}

bool nccl_available() { return cuda::is_available(); }

std::string nccl_unavailable_reason() {
  if (cuda::is_available()) return "";
  return "backend='nccl' needs a CUDA GPU, but " + cuda::unavailable_reason() +
         ". Use backend='gloo' for CPU tensors";
}

}  // namespace mini::distributed
