// store_server.cpp — see store_server.h. One thread, one poll() over the listening socket, the
// clients and a wake-up pipe; waits are kept as Waiters and answered from that loop.
#include "distributed/store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "distributed/errors.h"
#include "distributed/store_protocol.h"

namespace mini::distributed {

using protocol::Command;

StoreServer::StoreServer(int port) : listener_(listen_on(port)) {
  port_ = local_port(listener_);
  if (::pipe2(wake_, O_CLOEXEC) != 0) fail_network("cannot make a pipe: ", std::strerror(errno));
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  char byte = 0;
  if (::write(wake_[1], &byte, 1) < 0) {}  // the loop sees it and returns
  thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void StoreServer::serve() {
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
    for (const Client& c : clients_) fds.push_back({c.socket.fd(), POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // the destructor asks to stop
    // the clients first (their indices match fds[2...] only before accept adds one)
    for (size_t i = clients_.size(); i-- > 0;) {
      if (!fds[i + 2].revents) continue;
      if (!read_from(clients_[i])) {
        int fd = clients_[i].socket.fd();
        waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(),
                                      [fd](const Waiter& w) { return w.fd == fd; }),
                       waiters_.end());
        clients_.erase(clients_.begin() + static_cast<long>(i));
      }
    }
    if (fds[1].revents & POLLIN) accept_client();
    answer_waiters();
  }
}

int StoreServer::poll_timeout_ms() const {
  if (waiters_.empty()) return -1;
  auto first = std::min_element(waiters_.begin(), waiters_.end(), [](const Waiter& a, const Waiter& b) {
    return a.deadline < b.deadline;
  })->deadline;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(first - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30));
}

void StoreServer::accept_client() {
  int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  Client client;
  client.socket = Socket(fd);
  clients_.push_back(std::move(client));
}

bool StoreServer::read_from(Client& client) {
  char buffer[65536];
  ssize_t got = ::recv(client.socket.fd(), buffer, sizeof buffer, 0);
  if (got < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (got <= 0) return false;  // the client closed its end (its process exited)
  client.inbox.append(buffer, static_cast<size_t>(got));
  while (client.inbox.size() >= 4) {
    size_t length = protocol::frame_length(client.inbox.data());
    if (client.inbox.size() < 4 + length) break;
    std::string payload = client.inbox.substr(4, length);
    client.inbox.erase(0, 4 + length);
    if (!handle(client.socket.fd(), payload)) return false;
  }
  return true;
}

// One request; false when it is not one (the client is dropped).
bool StoreServer::handle(int fd, const std::string& payload) {
  protocol::Reader in(payload);
  protocol::Writer out;
  switch (static_cast<Command>(in.byte())) {
    case Command::Set: {
      std::string key = in.text();
      values_[key] = in.text();
      break;
    }
    case Command::Get: {
      auto it = values_.find(in.text());
      out.byte(it != values_.end()).text(it != values_.end() ? it->second : "");
      break;
    }
    case Command::Add: {
      std::string& value = values_[in.text()];
      int64_t now = std::strtoll(value.c_str(), nullptr, 10) + in.integer();  // "" counts as 0
      value = std::to_string(now);
      out.integer(now);
      break;
    }
    case Command::Wait: {
      auto timeout = std::chrono::milliseconds(in.integer());
      std::vector<std::string> keys(static_cast<size_t>(std::max<int64_t>(in.integer(), 0)));
      for (std::string& key : keys) key = in.text();
      if (!in.ok()) return false;
      waiters_.push_back({fd, std::move(keys), Clock::now() + timeout});
      return true;  // answered by answer_waiters(), now or later
    }
    default:
      return false;
  }
  return in.ok() && send_all(fd, out.frame());
}

std::vector<std::string> StoreServer::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const std::string& key : keys)
    if (!values_.count(key)) out.push_back(key);
  return out;
}

void StoreServer::answer_waiters() {
  const auto now = Clock::now();
  for (size_t i = waiters_.size(); i-- > 0;) {
    std::vector<std::string> still = missing(waiters_[i].keys);
    if (!still.empty() && now < waiters_[i].deadline) continue;
    protocol::Writer out;
    out.integer(static_cast<int64_t>(still.size()));
    for (const std::string& key : still) out.text(key);
    send_all(waiters_[i].fd, out.frame());  // a client gone is dropped at its next read
    waiters_.erase(waiters_.begin() + static_cast<long>(i));
  }
}

}  // namespace mini::distributed
