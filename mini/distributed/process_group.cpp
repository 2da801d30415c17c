// process_group.cpp — see process_group.h. What every backend shares: the checks of a
// collective's arguments (before anything runs, on the caller's thread) and its numbering.
#include "distributed/process_group.h"

#include "distributed/errors.h"

namespace mini::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

const char* collective_name(Collective::Kind kind) {
  switch (kind) {
    case Collective::Kind::AllReduce: return "all_reduce";
    case Collective::Kind::Broadcast: return "broadcast";
    case Collective::Kind::AllGather: return "all_gather_into_tensor";
    case Collective::Kind::ReduceScatter: return "reduce_scatter_tensor";
    case Collective::Kind::Barrier: return "barrier";
  }
  return "?";
}

namespace {

std::string sizes_text(const Tensor& t) {  // "float32[4, 3]"
  std::string out = std::string(dtype_name(t->dtype)) + "[";
  for (size_t d = 0; d < t->sizes.size(); d++) out += (d ? ", " : "") + std::to_string(t->sizes[d]);
  return out + "]";
}

std::string strides_text(const Tensor& t) {
  std::string out = "(";
  for (size_t d = 0; d < t->strides.size(); d++) out += (d ? ", " : "") + std::to_string(t->strides[d]);
  return out + ")";
}

bool reduces(Collective::Kind kind) {
  return kind == Collective::Kind::AllReduce || kind == Collective::Kind::ReduceScatter;
}

}  // namespace

std::string Collective::describe() const {
  std::string out = cat(collective_name(kind), " #", seq);
  if (kind == Kind::Barrier) return out;
  out += " of " + sizes_text(input);
  if (reduces(kind)) out += cat(" (", reduce_op_name(op), ")");
  if (kind == Kind::Broadcast) out += cat(" (from rank ", root, ")");
  return out;
}

void ProcessGroup::check_tensor(const Collective& c, const Tensor& t, const char* arg) const {
  const char* name = collective_name(c.kind);
  if (!t) fail_type(name, "(): the ", arg, " must be a tensor");
  if (t->device().type != device_type()) {
    if (device_type() == Device::Type::CPU)
      fail_value(name, "(): the ", arg, " is on ", t->device().str(), ", but this process "
                 "group's backend, gloo, moves CPU tensors. Pass a CPU tensor (.cpu(), then copy "
                 "the result back), or init_process_group(backend='nccl') for CUDA tensors "
                 "('cpu:gloo,cuda:nccl' serves both)");
    fail_value(name, "(): the ", arg, " is on the CPU, but this process group's backend, nccl, "
               "moves CUDA tensors. Pass t.cuda(), or init_process_group(backend='gloo') for "
               "CPU tensors ('cpu:gloo,cuda:nccl' serves both)");
  }
  if (!t->is_contiguous())
    fail_value(name, "(): the ", arg, " is not contiguous (", sizes_text(t), " with strides ",
               strides_text(t), "): a collective moves a tensor's memory as one block. Pass "
               "t.contiguous() and copy the result back into t (t.copy_(result))");
  DType d = t->dtype;
  if (d != DType::Float32 && d != DType::Float64 && d != DType::BFloat16 && d != DType::Int64)
    fail_type(name, "(): tensors of dtype ", dtype_name(d), " are not supported; use float32, "
              "float64, bfloat16 or int64");
  if (reduces(c.kind) && c.op == ReduceOp::Avg && d == DType::Int64)
    fail_type(name, "(): ReduceOp.AVG needs a floating tensor (an int64 average would be "
              "truncated): reduce with ReduceOp.SUM and divide, or pass a float tensor");
}

std::shared_ptr<Work> ProcessGroup::checked_launch(Collective c) {
  if (c.kind != Collective::Kind::Barrier) {
    check_tensor(c, c.input, c.input == c.output ? "tensor" : "input");
    if (c.output != c.input) check_tensor(c, c.output, "output");
    if (c.output->dtype != c.input->dtype)
      fail_type(collective_name(c.kind), "(): the output is ", dtype_name(c.output->dtype),
                " and the input ", dtype_name(c.input->dtype), ": they must have one dtype");
    c.output->storage->version++;  // written in place (autograd's check of saved tensors)
  }
  std::lock_guard<std::mutex> lock(launch_mutex_);  // the numbers in the order of the queue
  c.seq = next_seq_++;
  return launch(c);
}

std::shared_ptr<Work> ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  return checked_launch({Collective::Kind::AllReduce, tensor, tensor, op});
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& tensor, int src) {
  if (src < 0 || src >= size_)
    fail_value("broadcast(): src=", src, " is not a rank of this group (0 to ", size_ - 1, ")");
  return checked_launch({Collective::Kind::Broadcast, tensor, tensor, ReduceOp::Sum, src});
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor(const Tensor& output, const Tensor& input) {
  if (output && input && output->numel() != input->numel() * size_)
    fail_value("all_gather_into_tensor(): the output has ", output->numel(), " elements, but it "
               "must hold the input's ", input->numel(), " from each of the ", size_, " ranks: ",
               input->numel() * size_, " (e.g. mini.empty(", size_, " * n, ...))");
  return checked_launch({Collective::Kind::AllGather, input, output});
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                                                          ReduceOp op) {
  if (output && input && input->numel() != output->numel() * size_)
    fail_value("reduce_scatter_tensor(): the input has ", input->numel(), " elements, but it "
               "must hold one output's worth (", output->numel(), ") for each of the ", size_,
               " ranks: ", output->numel() * size_);
  return checked_launch({Collective::Kind::ReduceScatter, input, output, op});
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  return checked_launch({Collective::Kind::Barrier, nullptr, nullptr});
}

}  // namespace mini::distributed
