// tcp_store.h — the rendezvous's key-value store over TCP (torch's TCPStore): rank 0 hosts it
// on MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) is its client.
//
// In:  the host and port, whether this process hosts the server, a timeout.
// Out: set/get/add/wait on string keys and binary values, shared by every rank of a job:
//      the ranks announce themselves through it (rendezvous.h), Gloo exchanges its sockets'
//      addresses (gloo_group.cpp) and NCCL its unique id (nccl_group.cpp) through it.
// Guarantees: a call returns or throws a DistError within the store's timeout (a wait within
// its own); a wait that times out says which keys are still missing; a server that went away
// (rank 0 exited) is an error naming it, never a hang. Calls from several threads are served
// one at a time. The server answers until the TcpStore that hosts it is destroyed.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/socket.h"

namespace mini::distributed {

class StoreServer;  // store_server.h

class TcpStore {
 public:
  // With `is_server` this process listens on `port` (0: a free one; port() says which) and
  // serves from a thread; then it connects to host:port, retrying until `timeout` passes.
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key);          // waits for the key, up to timeout()
  int64_t add(const std::string& key, int64_t delta);  // the new value (a new key starts at 0)
  // Waits until every key is set or `timeout` passes; returns the keys still missing then
  // (empty: all are there).
  std::vector<std::string> wait(const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout);
  // The value of `key` if it is set now, without waiting.
  bool try_get(const std::string& key, std::string* value);

  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  std::string request(const std::string& frame, std::chrono::milliseconds reply_within);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<StoreServer> server_;  // rank 0 only
  Socket connection_;
  std::mutex mutex_;  // one request and its answer at a time
};

}  // namespace mini::distributed
