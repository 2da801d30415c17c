// gloo_missing.cpp — the Gloo backend of a build made without Gloo (CMake found no libgloo-dev):
// it says so, and how to get it.
#include "distributed/errors.h"
#include "distributed/process_group.h"

namespace mini::distributed {

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<TcpStore>, const std::string&, int,
                                              int, std::chrono::milliseconds) {
  fail("init_process_group(backend='gloo'): this build of mini has no Gloo (CMake found no "
       "GlooConfig.cmake). Install Debian's libgloo-dev (scripts/setup.sh does) and rebuild");
}

bool gloo_available() { return false; }

}  // namespace mini::distributed
