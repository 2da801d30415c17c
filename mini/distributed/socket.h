// socket.h — the few TCP calls the rendezvous store makes, each with a deadline (POSIX, IPv4).
//
// In: host names and ports. Out: connected or listening Sockets (they close themselves), and
// whole byte strings sent or received. Guarantees: no call blocks past its deadline; a peer
// that went away is a return value (Closed, false), never a SIGPIPE; a port that is taken is a
// DistError (Network) naming it and the fix.
#pragma once
#include <chrono>
#include <string>

namespace mini::distributed {

using Clock = std::chrono::steady_clock;

class Socket {  // owns one file descriptor
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

// Listens on `port` of every interface (0: a free port the system picks).
Socket listen_on(int port);
int local_port(const Socket& socket);  // the port a listening socket got

// Connects to host:port, retrying while nothing listens there yet (rank 0 may start last);
// an invalid Socket once `deadline` passes. A host that does not resolve is a DistError.
Socket connect_to(const std::string& host, int port, Clock::time_point deadline);

// Sends every byte of `bytes`; false when the peer has gone.
bool send_all(int fd, const std::string& bytes);

enum class Received { Done, Closed, TimedOut };
// Appends exactly `n` bytes to `out`, waiting at most until `deadline`.
Received receive_exact(int fd, size_t n, std::string* out, Clock::time_point deadline);

}  // namespace mini::distributed
