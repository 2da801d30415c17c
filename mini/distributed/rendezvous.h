// rendezvous.h — the ranks of a job find each other: every rank announces itself in the store
// and waits until all have.
//
// In:  the store (tcp_store.h), a key prefix (one per step, so a step can be repeated), this
//      rank, the world size this process was given.
// Out: returns once every rank 0 .. world_size-1 has announced itself.
// Guarantees: within the store's timeout, or an error that says what to fix: the ranks that
// never came (DistStoreError, "rank(s) 1, 3 of 4 never joined"), two processes started with
// one RANK, or ranks started with different WORLD_SIZEs (ValueError, naming both).
#pragma once
#include <string>

#include "distributed/tcp_store.h"

namespace mini::distributed {

// `what` names the step in messages ("init_process_group").
void join(TcpStore& store, const std::string& prefix, int rank, int world_size, const char* what);

// "1, 3" from {1, 3}: ranks as messages list them.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace mini::distributed
