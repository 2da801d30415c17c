// socket.cpp — see socket.h.
#include "distributed/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "distributed/errors.h"

namespace mini::distributed {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

int milliseconds_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT); false at the deadline.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, milliseconds_until(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

void set_no_delay(int fd) {  // the store's messages are small: send each at once
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int err = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (err != 0 || !found)
    fail_network("cannot resolve MASTER_ADDR '", host, "' (", gai_strerror(err),
                 "): set MASTER_ADDR to the address of the machine that runs rank 0 "
                 "(127.0.0.1 when every rank runs on this machine)");
  sockaddr_in address = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  freeaddrinfo(found);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

// One non-blocking connect, given until `deadline`; true when connected.
bool try_connect(int fd, const sockaddr_in& address, Clock::time_point deadline) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  if (rc != 0 && errno == EINPROGRESS && wait_ready(fd, POLLOUT, deadline)) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
  }
  fcntl(fd, F_SETFL, flags);
  return rc == 0;
}

}  // namespace

Socket listen_on(int port) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) fail_network("cannot open a socket: ", std::strerror(errno));
  int one = 1;  // a port left in TIME_WAIT by an earlier job may be reused; one in use may not
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    int err = errno;
    if (err == EADDRINUSE)
      fail_network("rank 0 cannot host the rendezvous store on port ", port,
                   " (MASTER_PORT): the port is already in use, by another program or another "
                   "job's process group. Choose a free port (MASTER_PORT=..., or let "
                   "`python -m mini.distributed.run` pick one)");
    fail_network("rank 0 cannot listen on port ", port, " (MASTER_PORT): ", std::strerror(err));
  }
  if (::listen(s.fd(), 128) != 0)
    fail_network("rank 0 cannot listen on port ", port, ": ", std::strerror(errno));
  return s;
}

int local_port(const Socket& socket) {
  sockaddr_in address{};
  socklen_t len = sizeof address;
  getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &len);
  return ntohs(address.sin_port);
}

Socket connect_to(const std::string& host, int port, Clock::time_point deadline) {
  const sockaddr_in address = resolve(host, port);
  for (;;) {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) fail_network("cannot open a socket: ", std::strerror(errno));
    auto attempt_end = std::min(deadline, Clock::now() + std::chrono::seconds(2));
    if (try_connect(s.fd(), address, attempt_end)) {
      set_no_delay(s.fd());
      return s;
    }
    if (Clock::now() >= deadline) return Socket();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // nobody listens yet
  }
}

bool send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

Received receive_exact(int fd, size_t n, std::string* out, Clock::time_point deadline) {
  char buffer[4096];
  while (n > 0) {
    if (!wait_ready(fd, POLLIN, deadline)) return Received::TimedOut;
    ssize_t got = ::recv(fd, buffer, std::min(n, sizeof buffer), 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return Received::Closed;
    out->append(buffer, static_cast<size_t>(got));
    n -= static_cast<size_t>(got);
  }
  return Received::Done;
}

}  // namespace mini::distributed
