// nccl_missing.cpp — the NCCL backend of a build made without it (no CUDA, or no nccl.h and
// libnccl where CMake looked): it says so, and how to get it. MINI_NCCL_MISSING says why.
#include "distributed/errors.h"
#include "distributed/process_group.h"

namespace mini::distributed {

std::string nccl_unavailable_reason() {
  return cat("this build of mini has no NCCL (", MINI_NCCL_MISSING, "). NCCL moves CUDA "
             "tensors: build mini with the CUDA toolkit and NCCL (nccl.h, libnccl.so), or use "
             "backend='gloo' for CPU tensors");
}

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<TcpStore>, const std::string&, int,
                                              int, std::chrono::milliseconds) {
  fail("init_process_group(backend='nccl'): ", nccl_unavailable_reason());
}

bool nccl_available() { return false; }

}  // namespace mini::distributed
