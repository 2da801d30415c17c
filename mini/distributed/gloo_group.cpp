// gloo_group.cpp — the Gloo backend: collectives of CPU tensors over TCP (Debian's libgloo).
//
// Setup: the ranks join (rendezvous.h), make a Gloo TCP device on the interface that reaches
// MASTER_ADDR, and connect every pair of ranks (connectFullMesh: each rank publishes its
// sockets' addresses in the store under "<prefix>mesh/"). Each collective then runs as a job
// on the group's worker thread (work.h), in two steps:
//   1. agreement: an allgather of a few integers per rank (which collective, dtype, element
//      count, op, root). Ranks that disagree all see it, all raise the same error naming each
//      rank's call, and stay in step: nothing else was sent.
//   2. the payload through Gloo's own algorithm: allreduce (ring) with mini's reduce function
//      for the dtype, broadcast, allgather, barrier; reduce_scatter_tensor is an allreduce of
//      a copy of the input, of which this rank keeps its part (as torch's Gloo group does
//      it); ReduceOp.AVG is the sum, divided by the world size.
// A Gloo failure (a timeout, a peer that exited) breaks the group: later collectives fail at
// once, saying why. On a timeout the ranks that did time out say so in the store, and the
// message names those that never reached the collective.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "distributed/errors.h"
#include "distributed/process_group.h"
#include "distributed/rendezvous.h"
#include "distributed/work.h"

namespace mini::distributed {

using std::chrono::milliseconds;

namespace {

// Gloo's view of the store: its keys under `prefix`, its values as bytes.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(TcpStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = store_.get(prefix_ + key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_.timeout()); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
    std::vector<std::string> missing = store_.wait(prefixed, timeout);
    if (!missing.empty())
      fail_store("Gloo's connection setup timed out after ", seconds_text(timeout),
                 " waiting for the address of rank ", missing[0].substr(prefix_.size()));
  }

 private:
  TcpStore& store_;
  std::string prefix_;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The TCP device: GLOO_SOCKET_IFNAME's interface if set (as torch), else the loopback when
// MASTER_ADDR is (one machine), else this machine's host name.
std::shared_ptr<gloo::transport::Device> make_device(const std::string& master_addr) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME")) {
    attr.iface = iface;
  } else if (is_loopback(master_addr)) {
    attr.hostname = "127.0.0.1";
  } else {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    attr.hostname = name;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    fail_network("Gloo cannot open a TCP device on ", attr.iface.empty() ? attr.hostname : attr.iface,
                 ": ", e.what(), ". Set GLOO_SOCKET_IFNAME to the network interface the ranks "
                 "share (e.g. eth0; lo on one machine)");
  }
}

// The reduce functions Gloo's allreduce calls, per dtype: out = a (op) b, element by element,
// computed in float for bfloat16 (and rounded once).
template <class T>
using Accumulator = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

template <class T>
void sum_into(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  auto *x = static_cast<const T*>(a), *y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; i++) o[i] = T(Accumulator<T>(x[i]) + Accumulator<T>(y[i]));
}

template <class T>
void max_into(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  auto *x = static_cast<const T*>(a), *y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; i++) o[i] = T(std::max(Accumulator<T>(x[i]), Accumulator<T>(y[i])));
}

template <class T>
void divide(T* data, int64_t n, int by) {  // ReduceOp.AVG's last step
  for (int64_t i = 0; i < n; i++) data[i] = T(Accumulator<T>(data[i]) / Accumulator<T>(by));
}

// Calls fn with a value of the C++ type of `dtype` (its type is what fn needs).
template <class Fn>
void with_element_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::BFloat16: return fn(bfloat16{});
    case DType::Int64: return fn(int64_t{});
    case DType::Bool: break;
  }
  fail_type("Gloo collectives take float32, float64, bfloat16 or int64, not ", dtype_name(dtype));
}

// A Collective without its tensors: what the worker thread may touch.
struct Job {
  Collective::Kind kind;
  ReduceOp op;
  int root;
  int64_t seq;
  DType dtype;
  void* input;
  void* output;
  int64_t input_numel;
  int64_t output_numel;
  std::string description;
};

constexpr size_t kHeaderFields = 5;
using Header = std::array<int64_t, kHeaderFields>;  // kind, dtype, elements, op, root

Header header_of(const Job& job) {
  return {int64_t(job.kind), int64_t(job.dtype), job.input_numel, int64_t(job.op), job.root};
}

std::string header_text(const int64_t* h) {  // "all_reduce of 4 float32 elements (sum)"
  auto kind = Collective::Kind(h[0]);
  std::string out = collective_name(kind);
  if (kind == Collective::Kind::Barrier) return out;
  out += cat(" of ", h[2], " ", dtype_name(DType(h[1])), " elements");
  if (kind == Collective::Kind::AllReduce || kind == Collective::Kind::ReduceScatter)
    out += cat(" (", reduce_op_name(ReduceOp(h[3])), ")");
  if (kind == Collective::Kind::Broadcast) out += cat(" from rank ", h[4]);
  return out;
}

class GlooGroup : public ProcessGroup {
 public:
  GlooGroup(std::shared_ptr<TcpStore> store, const std::string& prefix, int rank, int size,
            milliseconds timeout);
  const char* backend() const override { return "gloo"; }
  Device::Type device_type() const override { return Device::Type::CPU; }

 protected:
  std::shared_ptr<Work> launch(const Collective& c) override;

 private:
  void run(const Job& job);  // on the worker thread, as every function below
  void check_agreement(const Job& job);
  template <class T> void run_payload(const Job& job);
  template <class T> void all_reduce(T* data, int64_t n, ReduceOp op, uint32_t tag);
  [[noreturn]] void fail_collective(const Job& job, const std::exception& e);
  std::string who_is_missing(const Job& job);

  std::shared_ptr<TcpStore> store_;
  std::string prefix_;
  milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::string broken_;  // the first failure; after it nothing runs
  WorkQueue queue_;     // last member: its thread stops before the context goes
};

GlooGroup::GlooGroup(std::shared_ptr<TcpStore> store, const std::string& prefix, int rank,
                     int size, milliseconds timeout)
    : ProcessGroup(rank, size), store_(std::move(store)), prefix_(prefix), timeout_(timeout) {
  join(*store_, prefix_ + "join/", rank, size, "init_process_group");
  device_ = make_device(store_->host());
  context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context_->setTimeout(timeout);
  GlooStore mesh_store(*store_, prefix_ + "mesh/");
  try {
    context_->connectFullMesh(mesh_store, device_);
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    fail_network("Gloo could not connect rank ", rank, " with the others: ", e.what(), ". If "
                 "the ranks run on several machines, set GLOO_SOCKET_IFNAME to the network "
                 "interface they share");
  }
  join(*store_, prefix_ + "ready/", rank, size, "init_process_group");  // nobody still needs the mesh keys
}

std::shared_ptr<Work> GlooGroup::launch(const Collective& c) {
  Job job{c.kind, c.op, c.root, c.seq, DType::Float32, nullptr, nullptr, 0, 0, c.describe()};
  std::vector<Tensor> tensors;
  if (c.kind != Collective::Kind::Barrier) {
    job.dtype = c.input->dtype;
    job.input = c.input->raw();
    job.output = c.output->raw();
    job.input_numel = c.input->numel();
    job.output_numel = c.output->numel();
    tensors = {c.input, c.output};
  }
  auto completion = queue_.submit([this, job] { run(job); });
  return std::make_shared<QueuedWork>(std::move(completion), std::move(tensors));
}

void GlooGroup::run(const Job& job) {
  if (!broken_.empty())
    fail_backend(job.description, " did not run: this process group failed earlier (",
                 broken_, "). Call destroy_process_group() and init_process_group() again");
  try {
    check_agreement(job);
    if (job.kind == Collective::Kind::Barrier) {
      gloo::BarrierOptions options(context_);
      options.setTag(uint32_t(2 * job.seq + 1));
      gloo::barrier(options);
    } else if (job.input_numel > 0) {
      with_element_type(job.dtype, [&](auto zero) { run_payload<decltype(zero)>(job); });
    }
  } catch (const mini::Error&) {
    throw;  // ours: the ranks disagree, and all of them know it (still in step)
  } catch (const std::exception& e) {
    fail_collective(job, e);
  }
}

void GlooGroup::check_agreement(const Job& job) {
  Header mine = header_of(job);
  std::vector<int64_t> all(kHeaderFields * size());
  gloo::AllgatherOptions options(context_);
  options.setInput<int64_t>(mine.data(), kHeaderFields);
  options.setOutput<int64_t>(all.data(), all.size());
  options.setTag(uint32_t(2 * job.seq));
  gloo::allgather(options);
  bool agree = true;
  for (int r = 0; r < size(); r++)
    agree = agree && std::equal(mine.begin(), mine.end(), all.begin() + r * kHeaderFields);
  if (agree) return;
  std::string calls;
  for (int r = 0; r < size(); r++)
    calls += cat(r ? "; " : "", "rank ", r, ": ", header_text(all.data() + r * kHeaderFields));
  fail_backend(job.description, ": the ranks called different collectives (", calls, "). Every "
               "rank must call the same collectives in the same order, with tensors of the same "
               "dtype and number of elements");
}

template <class T>
void GlooGroup::all_reduce(T* data, int64_t n, ReduceOp op, uint32_t tag) {
  gloo::AllreduceOptions options(context_);
  options.setOutput<T>(data, size_t(n));
  options.setReduceFunction(op == ReduceOp::Max ? &max_into<T> : &sum_into<T>);
  options.setTag(tag);
  gloo::allreduce(options);
  if (op == ReduceOp::Avg) divide(data, n, size());
}

template <class T>
void GlooGroup::run_payload(const Job& job) {
  auto* input = static_cast<T*>(job.input);
  auto* output = static_cast<T*>(job.output);
  const uint32_t tag = uint32_t(2 * job.seq + 1);
  switch (job.kind) {
    case Collective::Kind::AllReduce:
      return all_reduce(output, job.output_numel, job.op, tag);
    case Collective::Kind::Broadcast: {
      gloo::BroadcastOptions options(context_);
      options.setOutput<T>(output, size_t(job.output_numel));  // the root's input too
      options.setRoot(job.root);
      options.setTag(tag);
      return gloo::broadcast(options);
    }
    case Collective::Kind::AllGather: {
      gloo::AllgatherOptions options(context_);
      options.setInput<T>(input, size_t(job.input_numel));
      options.setOutput<T>(output, size_t(job.output_numel));
      options.setTag(tag);
      return gloo::allgather(options);
    }
    case Collective::Kind::ReduceScatter: {
      std::vector<T> reduced(input, input + job.input_numel);
      all_reduce(reduced.data(), job.input_numel, job.op, tag);
      const T* part = reduced.data() + rank() * job.output_numel;
      std::copy(part, part + job.output_numel, output);
      return;
    }
    case Collective::Kind::Barrier:
      return;
  }
}

void GlooGroup::fail_collective(const Job& job, const std::exception& e) {
  const std::string what = e.what();
  std::string message;
  if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos)
    message = cat(job.description, " timed out after ", seconds_text(timeout_), " on rank ",
                  rank(), ": ", who_is_missing(job), ". Every rank must call the same "
                  "collectives in the same order; give slow ranks longer with "
                  "init_process_group(timeout=...)");
  else
    message = cat(job.description, " failed on rank ", rank(), ": ", what, ". Another rank has "
                  "probably exited or crashed: its own output says why");
  broken_ = message;
  fail_backend(message);
}

// Says in the store which collective this rank timed out in, gives the others a moment to do
// the same, and names who did not.
std::string GlooGroup::who_is_missing(const Job& job) {
  try {
    const std::string key = prefix_ + "timed_out/";
    store_->set(key + std::to_string(rank()), job.description);
    std::vector<std::string> others;
    for (int r = 0; r < size(); r++)
      if (r != rank()) others.push_back(key + std::to_string(r));
    store_->wait(others, std::min(timeout_, milliseconds(2000)));
    std::vector<int> absent;
    std::string elsewhere;
    for (int r = 0; r < size(); r++) {
      std::string theirs;
      if (r == rank()) continue;
      if (!store_->try_get(key + std::to_string(r), &theirs)) absent.push_back(r);
      else if (theirs != job.description) elsewhere += cat("; rank ", r, " waits in ", theirs, " instead");
    }
    if (absent.empty() && elsewhere.empty()) return "every rank reached it, and it still did not finish";
    std::string out = absent.empty() ? "" : cat(absent.size() == 1 ? "rank " : "ranks ", rank_list(absent),
                                                " never reached it (still busy, hung, or past its last collective)");
    return out + (out.empty() ? elsewhere.substr(2) : elsewhere);
  } catch (const std::exception& e) {
    return cat("the store could not tell which rank is missing (", e.what(), ")");
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<TcpStore> store, const std::string& prefix,
                                              int rank, int size, milliseconds timeout) {
  return std::make_shared<GlooGroup>(std::move(store), prefix, rank, size, timeout);
}

bool gloo_available() { return true; }

}  // namespace mini::distributed
