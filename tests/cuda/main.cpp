// main.cpp — Catch2's runner for the CUDA tests. Without a usable GPU every test that needs
// one returns at once (cuda_helpers.h's MINI_REQUIRE_GPU); the tests that need none still
// run, and the executable then exits 77, which ctest reports as skipped, with the reason.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "tensor/cuda/cuda.h"

int main(int argc, char** argv) {
  int rc = Catch::Session().run(argc, argv);
  if (rc == 0 && !mini::cuda::is_available()) {
    std::printf("CUDA tests skipped: no CUDA device: %s\n", mini::cuda::unavailable_reason().c_str());
    return 77;
  }
  return rc;
}
