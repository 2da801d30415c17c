// test_store.cpp — the rendezvous store (mini/distributed/tcp_store.h) and the join of ranks
// (rendezvous.h), server and clients in one process on a free port: values travel, add counts,
// a wait answers when its keys come and names those that never did, a taken port and a
// missing server are errors that say so, and a join names the ranks that never came.
#include <thread>

#include "distributed/errors.h"
#include "distributed/rendezvous.h"
#include "distributed/socket.h"
#include "distributed/tcp_store.h"
#include "helpers.h"

using mini::distributed::DistError;
using mini::distributed::TcpStore;
using std::chrono::milliseconds;

namespace {
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("the store sets, gets and adds across clients", "[distributed][store]") {
  TcpStore server("127.0.0.1", 0, true, milliseconds(5000));
  TcpStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  std::string binary("a\0b", 3);
  server.set("k", binary);
  CHECK(client.get("k") == binary);
  CHECK(client.add("n", 2) == 2);
  CHECK(server.add("n", 5) == 7);
  CHECK(client.get("n") == "7");
  std::string value;
  CHECK_FALSE(client.try_get("absent", &value));
}

TEST_CASE("a wait answers when the keys come, or names those still missing", "[distributed][store]") {
  TcpStore server("127.0.0.1", 0, true, milliseconds(5000));
  TcpStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(50));
    client.set("b", "2");
  });
  server.set("a", "1");
  CHECK(server.wait({"a", "b"}, milliseconds(5000)).empty());  // b comes from the other client
  later.join();
  auto started = std::chrono::steady_clock::now();
  std::vector<std::string> missing = client.wait({"a", "c", "d"}, milliseconds(100));
  CHECK(missing == std::vector<std::string>{"c", "d"});
  CHECK(std::chrono::steady_clock::now() - started < milliseconds(3000));
  CHECK(message_of([&] { TcpStore("127.0.0.1", server.port(), false, milliseconds(100)).get("zzz"); })
            .find("waiting for the key 'zzz'") != std::string::npos);
}

TEST_CASE("a taken port and a missing server are errors that say so", "[distributed][store]") {
  TcpStore server("127.0.0.1", 0, true, milliseconds(5000));
  std::string taken = message_of([&] { TcpStore("127.0.0.1", server.port(), true, milliseconds(100)); });
  CHECK(taken.find("already in use") != std::string::npos);
  mini::distributed::Socket probe = mini::distributed::listen_on(0);  // a free port, closed again
  int free_port = mini::distributed::local_port(probe);
  probe.close();
  std::string missing = message_of([&] { TcpStore("127.0.0.1", free_port, false, milliseconds(200)); });
  CHECK(missing.find("missing rank: 0") != std::string::npos);
}

TEST_CASE("a client learns that the server went away", "[distributed][store]") {
  auto server = std::make_unique<TcpStore>("127.0.0.1", 0, true, milliseconds(5000));
  TcpStore client("127.0.0.1", server->port(), false, milliseconds(5000));
  server.reset();
  CHECK(message_of([&] { client.set("k", "v"); }).find("lost the connection") != std::string::npos);
}

TEST_CASE("join returns once every rank came, and names the ranks that did not", "[distributed][store]") {
  TcpStore rank0("127.0.0.1", 0, true, milliseconds(3000));
  TcpStore rank1("127.0.0.1", rank0.port(), false, milliseconds(3000));
  std::thread other([&] { mini::distributed::join(rank1, "j/", 1, 2, "test"); });
  mini::distributed::join(rank0, "j/", 0, 2, "test");
  other.join();

  TcpStore short_wait("127.0.0.1", rank0.port(), false, milliseconds(300));
  std::string message = message_of([&] { mini::distributed::join(short_wait, "k/", 0, 4, "test"); });
  CHECK(message.find("ranks 1, 2, 3 of 4 never joined") != std::string::npos);
  std::string twice = message_of([&] { mini::distributed::join(short_wait, "k/", 0, 4, "test"); });
  CHECK(twice.find("two processes were started with RANK=0") != std::string::npos);
}
