// test_cuda_runtime.cpp — runtime.cu and allocator.cu: availability and its errors (also on
// a machine without a GPU), the caching allocator's reuse, statistics and out-of-memory
// recovery, copies, events and launch errors.
#include <cstring>

#include "cuda_helpers.h"

using namespace mini_cuda_test;
using mini::Error;
namespace cuda = mini::cuda;

TEST_CASE("availability is an answer, never a crash", "[cuda][runtime]") {
  REQUIRE(cuda::compiled());
  if (cuda::is_available()) {
    CHECK(cuda::device_count() >= 1);
    CHECK(cuda::unavailable_reason().empty());
    CHECK_NOTHROW(cuda::require("device='cuda'"));
    CHECK(!cuda::device_name(0).empty());
    try {
      cuda::require("device='cuda:64'", Device::cuda(64));
      FAIL("require() accepted a device index past the last device");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("invalid device ordinal"));
      CHECK_THAT(e.what(), Catch::Contains("cuda:64"));
    }
    return;
  }
  // No GPU here: every entry point that needs one says so, naming the reason and the fix.
  CHECK(cuda::device_count() == 0);
  std::string reason = cuda::unavailable_reason();
  REQUIRE(!reason.empty());
  CHECK_THAT(reason, Catch::Contains("cudaGetDeviceCount"));
  try {
    cuda::require("device='cuda'");
    FAIL("require() did not throw without a GPU");
  } catch (const Error& e) {
    CHECK(e.kind == Error::Kind::Runtime);
    CHECK_THAT(e.what(), Catch::Contains("device='cuda' needs a CUDA GPU"));
    CHECK_THAT(e.what(), Catch::Contains(reason));
    CHECK_THAT(e.what(), Catch::Contains("Use device='cpu'"));
  }
  CHECK_THROWS_WITH(TensorImpl::empty({4}, DType::Float32, Device::cuda(0)),
                    Catch::Contains("needs a CUDA GPU"));
  CHECK_THROWS_WITH(cuda::synchronize(), Catch::Contains("needs a CUDA GPU"));
  CHECK_THROWS_WITH(cuda::event_create(true), Catch::Contains("needs a CUDA GPU"));
  // what runs at exit or in destructors stays quiet
  CHECK_NOTHROW(cuda::release(nullptr));
  CHECK_NOTHROW(cuda::empty_cache());
  CHECK(cuda::memory_stats().reserved == 0);
}

TEST_CASE("allocator: a freed block is reused without cudaMalloc", "[cuda][allocator]") {
  MINI_REQUIRE_GPU();
  void* p = cuda::allocate(1000);
  cuda::release(p);
  cuda::MemoryStats before = cuda::memory_stats();
  void* q = cuda::allocate(900);  // rounds to the same 1024-byte block
  cuda::MemoryStats after = cuda::memory_stats();
  CHECK(q == p);
  CHECK(after.cache_hits == before.cache_hits + 1);
  CHECK(after.cuda_mallocs == before.cuda_mallocs);
  CHECK(after.allocated == before.allocated + 1024);
  cuda::release(q);
  CHECK(cuda::memory_stats().allocated == before.allocated);
  CHECK_NOTHROW(cuda::release(nullptr));
}

TEST_CASE("allocator: a much larger cached block is not handed out", "[cuda][allocator]") {
  MINI_REQUIRE_GPU();
  cuda::empty_cache();
  void* big = cuda::allocate(size_t(64) << 20);
  cuda::release(big);
  int64_t mallocs = cuda::memory_stats().cuda_mallocs;
  void* small = cuda::allocate(size_t(4) << 20);  // 64 MiB is over twice 4 MiB: a new block
  CHECK(small != big);
  CHECK(cuda::memory_stats().cuda_mallocs == mallocs + 1);
  void* mid = cuda::allocate(size_t(40) << 20);  // the cached 64 MiB block fits 40 MiB
  CHECK(mid == big);
  CHECK(cuda::memory_stats().cuda_mallocs == mallocs + 1);
  cuda::release(small);
  cuda::release(mid);
}

TEST_CASE("allocator: peaks, their reset, and empty_cache", "[cuda][allocator]") {
  MINI_REQUIRE_GPU();
  cuda::empty_cache();
  cuda::reset_peak_memory_stats();
  int64_t base = cuda::memory_stats().allocated;
  void* a = cuda::allocate(size_t(8) << 20);
  void* b = cuda::allocate(size_t(2) << 20);
  cuda::MemoryStats s = cuda::memory_stats();
  CHECK(s.allocated == base + (int64_t(10) << 20));
  CHECK(s.max_allocated == s.allocated);
  CHECK(s.reserved >= s.allocated);
  cuda::release(a);
  s = cuda::memory_stats();
  CHECK(s.allocated == base + (int64_t(2) << 20));
  CHECK(s.max_allocated == base + (int64_t(10) << 20));  // the peak stays until reset
  cuda::reset_peak_memory_stats();
  CHECK(cuda::memory_stats().max_allocated == s.allocated);
  cuda::release(b);
  if (base == 0) {  // nothing else alive: emptying the cache returns every byte
    cuda::empty_cache();
    CHECK(cuda::memory_stats().reserved == 0);
  }
}

TEST_CASE("allocator: out of memory throws OutOfMemory and the process carries on", "[cuda][allocator]") {
  MINI_REQUIRE_GPU();
  Tensor kept = device({1, 2, 3, 4, 5}, {5});
  void* cached = cuda::allocate(size_t(4) << 20);
  cuda::release(cached);  // a cached block: the failed request empties the cache and retries
  int64_t retries = cuda::memory_stats().oom_retries;
  try {
    cuda::allocate(size_t(1) << 50);  // 1 PiB
    FAIL("allocating 1 PiB succeeded");
  } catch (const Error& e) {
    CHECK(e.kind == Error::Kind::OutOfMemory);
    CHECK_THAT(e.what(), Catch::Contains("CUDA out of memory. Tried to allocate 1048576.00 GiB"));
    CHECK_THAT(e.what(), Catch::Contains("total capacity of"));
    CHECK_THAT(e.what(), Catch::Contains("is allocated by mini"));
  }
  CHECK(cuda::memory_stats().oom_retries == retries + 1);
  Tensor after = device({6, 7}, {2});  // allocation still works
  check_close(values(after), {6, 7});
  check_close(values(kept), {1, 2, 3, 4, 5});  // and nothing allocated before was touched
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("copies between host and device round-trip", "[cuda][runtime]") {
  MINI_REQUIRE_GPU();
  std::vector<double> v;
  for (int i = 0; i < 1000; i++) v.push_back(i * 0.5 - 17);
  Tensor d = device(v, {10, 100}, DType::Float64);
  Tensor d2 = empty_device({10, 100}, DType::Float64);
  cuda::copy_bytes(d2->device_raw(), d2->device(), d->device_raw(), d->device(), size_t(d->nbytes()));
  check_close(values(d2), v, 0, 0);
}

TEST_CASE("events time the default stream", "[cuda][runtime]") {
  MINI_REQUIRE_GPU();
  uintptr_t start = cuda::event_create(true), end = cuda::event_create(true);
  cuda::event_record(start);
  Tensor t = empty_device({1 << 20}, DType::Float32);
  cuda::fill(t, 1.0);
  cuda::event_record(end);
  cuda::event_synchronize(end);
  CHECK(cuda::event_query(end));
  CHECK(cuda::event_elapsed_ms(start, end) >= 0);
  uintptr_t untimed = cuda::event_create(false);
  cuda::event_record(untimed);
  CHECK_THROWS_WITH(cuda::event_elapsed_ms(start, untimed),
                    Catch::Contains("enable_timing=True"));
  uintptr_t unrecorded = cuda::event_create(true);
  CHECK_THROWS_WITH(cuda::event_elapsed_ms(start, unrecorded), Catch::Contains("recorded"));
  for (uintptr_t e : {start, end, untimed, unrecorded}) cuda::event_destroy(e);
}

TEST_CASE("a launch records its op; synchronize reports no error after good kernels", "[cuda][runtime]") {
  MINI_REQUIRE_GPU();
  Tensor t = empty_device({16}, DType::Float32);
  cuda::fill(t, 2.0);
  CHECK(std::strcmp(cuda::last_op(), "fill") == 0);
  CHECK_NOTHROW(cuda::synchronize());
}
