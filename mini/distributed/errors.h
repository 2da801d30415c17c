// errors.h — what goes wrong between processes, as torch.distributed names it.
//
// A DistError is a mini::Error (a RuntimeError in Python) that also says where it happened, so
// that the Python module raises torch's class for it (mini/python/bind_distributed.cpp):
//   Store    the rendezvous's key-value store: a rank that never joined, a key that never came,
//            the store's host (rank 0) gone                                 -> DistStoreError
//   Network  a socket that cannot be opened: MASTER_PORT in use, rank 0 unreachable
//                                                                           -> DistNetworkError
//   Backend  a collective that failed in Gloo or NCCL: a timeout, a peer that exited, ranks
//            that disagree on a collective's arguments                      -> DistBackendError
// Every message names the cause and the fix; errors of the caller's own arguments (a bad
// rank, a tensor on the wrong device) are plain mini::Error (ValueError, RuntimeError).
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

#include "tensor/errors.h"

namespace mini::distributed {

struct DistError : Error {
  enum class Where { Store, Network, Backend };
  Where where;
  DistError(Where w, const std::string& msg) : Error(Error::Kind::Runtime, msg), where(w) {}
};

template <class... Args>
[[noreturn]] void fail_store(const Args&... args) {
  throw DistError(DistError::Where::Store, cat(args...));
}
template <class... Args>
[[noreturn]] void fail_network(const Args&... args) {
  throw DistError(DistError::Where::Network, cat(args...));
}
template <class... Args>
[[noreturn]] void fail_backend(const Args&... args) {
  throw DistError(DistError::Where::Backend, cat(args...));
}

// "300 s", "1.5 s": a timeout as the messages print it.
inline std::string seconds_text(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(t.count()) / 1000.0);
  return text;
}

}  // namespace mini::distributed
