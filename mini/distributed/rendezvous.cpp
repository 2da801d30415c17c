// rendezvous.cpp — see rendezvous.h. Each rank sets "<prefix><rank>" to the world size it was
// given, then waits for every rank's key in short slices, checking after each slice that the
// ranks already there agree on the world size: a disagreement is seen at once, not at the end
// of a wait for a rank that does not exist.
#include "distributed/rendezvous.h"

#include <algorithm>
#include <set>
#include <thread>

#include "distributed/errors.h"

namespace mini::distributed {

using std::chrono::milliseconds;

constexpr milliseconds kSlice(250);  // how often a waiting rank looks at who has joined

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

namespace {

int rank_of_key(const std::string& key, const std::string& prefix) {
  return std::stoi(key.substr(prefix.size()));
}

// Compares the world size of every rank that joined (and was not checked yet) with ours.
void check_world_sizes(TcpStore& store, const std::string& prefix, int rank, int world_size,
                       const std::vector<std::string>& missing, std::set<int>* checked) {
  for (int r = 0; r < world_size; r++) {
    const std::string key = prefix + std::to_string(r);
    if (checked->count(r) || std::find(missing.begin(), missing.end(), key) != missing.end())
      continue;
    checked->insert(r);
    std::string theirs;
    if (!store.try_get(key, &theirs) || theirs == std::to_string(world_size)) continue;
    // rank 0's store must outlive the others' next look (a slice away), so that they say the
    // same rather than "lost the connection"
    std::this_thread::sleep_for(kSlice + milliseconds(100));
    fail_value("the ranks disagree on the world size: rank ", r, " was started with WORLD_SIZE=",
               theirs, ", this rank (", rank, ") with WORLD_SIZE=", world_size, ". Give every "
               "process of the job the same WORLD_SIZE (the launcher, python -m "
               "mini.distributed.run, or torchrun does)");
  }
}

}  // namespace

void join(TcpStore& store, const std::string& prefix, int rank, int world_size, const char* what) {
  if (store.add(prefix + "claim/" + std::to_string(rank), 1) > 1)
    fail_value(what, ": two processes were started with RANK=", rank, ". Every process of a job "
               "needs its own rank, 0 to WORLD_SIZE-1 (", world_size - 1, " here)");
  store.set(prefix + std::to_string(rank), std::to_string(world_size));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; r++) keys.push_back(prefix + std::to_string(r));

  const auto deadline = Clock::now() + store.timeout();
  std::set<int> checked{rank};
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    std::vector<std::string> missing = store.wait(keys, std::clamp(left, milliseconds(0), kSlice));
    check_world_sizes(store, prefix, rank, world_size, missing, &checked);
    if (missing.empty()) return;
    if (Clock::now() < deadline) continue;
    std::vector<int> absent, present;
    for (const std::string& key : missing) absent.push_back(rank_of_key(key, prefix));
    for (int r = 0; r < world_size; r++)
      if (std::find(absent.begin(), absent.end(), r) == absent.end()) present.push_back(r);
    fail_store(what, " timed out after ", seconds_text(store.timeout()), " on rank ", rank, ": ",
               absent.size() == 1 ? "rank " : "ranks ", rank_list(absent), " of ", world_size,
               " never joined (joined: ", rank_list(present), "). Start every rank with the "
               "same MASTER_ADDR, MASTER_PORT and WORLD_SIZE and its own RANK, or give slow "
               "starters longer with init_process_group(timeout=...)");
  }
}

}  // namespace mini::distributed
