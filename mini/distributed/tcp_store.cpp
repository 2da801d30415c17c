// tcp_store.cpp — see tcp_store.h. The client side: one connection to rank 0's server, one
// request and its answer at a time (store_protocol.h says what travels).
#include "distributed/tcp_store.h"

#include <algorithm>

#include "distributed/errors.h"
#include "distributed/store_protocol.h"
#include "distributed/store_server.h"

namespace mini::distributed {

using protocol::Command;
using std::chrono::milliseconds;

TcpStore::TcpStore(const std::string& host, int port, bool is_server, milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  if (is_server) {
    server_ = std::make_unique<StoreServer>(port);
    port_ = server_->port();
  }
  // rank 0 reaches its own server through the loopback, whatever MASTER_ADDR names
  connection_ = connect_to(is_server ? "127.0.0.1" : host, port_, Clock::now() + timeout);
  if (!connection_.valid())
    fail_store("could not reach the rendezvous store at ", host, ":", port, " (MASTER_ADDR:",
               "MASTER_PORT) within ", seconds_text(timeout), ": rank 0, which hosts it, never "
               "started listening there (missing rank: 0). Start rank 0 with the same "
               "MASTER_ADDR and MASTER_PORT as this rank, or give it longer with "
               "init_process_group(timeout=...)");
}

TcpStore::~TcpStore() = default;  // the connection closes, then rank 0's server stops

std::string TcpStore::request(const std::string& frame, milliseconds reply_within) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string where = host_ + ":" + std::to_string(port_);
  if (!connection_.valid())
    fail_store("the rendezvous store at ", where, " is unusable after an earlier error");
  std::string reply;
  Received got = Received::Closed;
  if (send_all(connection_.fd(), frame)) {
    auto deadline = Clock::now() + reply_within;
    got = receive_exact(connection_.fd(), 4, &reply, deadline);
    if (got == Received::Done) {
      size_t length = protocol::frame_length(reply.data());
      reply.clear();
      got = receive_exact(connection_.fd(), length, &reply, deadline);
    }
  }
  if (got == Received::Done) return reply;
  connection_.close();  // a late answer would be read as the next request's
  if (got == Received::Closed)
    fail_store("lost the connection to the rendezvous store at ", where, ": rank 0, which hosts "
               "it, has exited or destroyed its process group (its own output says why)");
  fail_store("the rendezvous store at ", where, " did not answer within ",
             seconds_text(reply_within));
}

void TcpStore::set(const std::string& key, const std::string& value) {
  request(protocol::Writer().byte(uint8_t(Command::Set)).text(key).text(value).frame(), timeout_);
}

bool TcpStore::try_get(const std::string& key, std::string* value) {
  std::string reply = request(protocol::Writer().byte(uint8_t(Command::Get)).text(key).frame(), timeout_);
  protocol::Reader in(reply);
  bool found = in.byte() != 0;
  *value = in.text();
  return found && in.ok();
}

std::string TcpStore::get(const std::string& key) {
  if (!wait({key}, timeout_).empty())
    fail_store("timed out after ", seconds_text(timeout_), " waiting for the key '", key,
               "' in the rendezvous store: the rank that sets it never did");
  std::string value;
  try_get(key, &value);
  return value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string reply = request(
      protocol::Writer().byte(uint8_t(Command::Add)).text(key).integer(delta).frame(), timeout_);
  return protocol::Reader(reply).integer();
}

std::vector<std::string> TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  protocol::Writer out;
  out.byte(uint8_t(Command::Wait)).integer(timeout.count()).integer(int64_t(keys.size()));
  for (const std::string& key : keys) out.text(key);
  // the server answers when the keys are there or at the timeout: allow it a margin
  std::string reply = request(out.frame(), timeout + std::chrono::seconds(30));
  protocol::Reader in(reply);
  std::vector<std::string> missing(static_cast<size_t>(std::max<int64_t>(in.integer(), 0)));
  for (std::string& key : missing) key = in.text();
  return missing;
}

}  // namespace mini::distributed
