// store_server.h — the store's server: one thread of rank 0 that holds the keys and answers
// every rank's requests (store_protocol.h). TcpStore (tcp_store.h) starts and owns it.
//
// In: a port. Out: a thread serving set/get/add/wait until the server is destroyed.
// Guarantees: a wait is answered when its keys are all set or when its timeout passes (with
// the keys still missing), whichever comes first, without blocking any other client; a client
// that disconnects or sends garbage is dropped, the others are served on.
#pragma once
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "distributed/socket.h"

namespace mini::distributed {

class StoreServer {
 public:
  explicit StoreServer(int port);  // listens (a port in use is a DistError) and starts serving
  ~StoreServer();                  // stops the thread and closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return port_; }

 private:
  struct Client {
    Socket socket;
    std::string inbox;  // bytes received, not yet a whole frame
  };
  struct Waiter {  // a client waiting for keys
    int fd;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  void serve();
  int poll_timeout_ms() const;
  void accept_client();
  bool read_from(Client& client);  // false: drop the client
  bool handle(int fd, const std::string& payload);
  void answer_waiters();  // those whose keys came or whose time is up
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  Socket listener_;
  int port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to it to end poll()
  std::map<std::string, std::string> values_;
  std::vector<Client> clients_;
  std::vector<Waiter> waiters_;
  std::thread thread_;
};

}  // namespace mini::distributed
