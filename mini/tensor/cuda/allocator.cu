// cuda/allocator.cu — the caching allocator: device memory for every CUDA Storage.
//
// Why cache: cudaMalloc costs microseconds to milliseconds and cudaFree synchronizes the
// whole device, so an eager program that frees and reallocates its temporaries on every op
// would stall the GPU on every op. Like torch's CUDACachingAllocator, mini keeps freed
// blocks and hands them out again; cudaMalloc runs only when no cached block fits, cudaFree
// only in empty_cache() (or to retry a failed cudaMalloc).
//
// The design, simplified from torch's (c10/cuda/CUDACachingAllocator.cpp):
//  * Two pools. Small: requests up to 1 MiB; large: the rest (torch's kSmallSize split),
//    so small temporaries never pin a large block.
//  * Rounding: a request is rounded up to a multiple of 512 bytes (torch's kMinBlockSize);
//    that size is what memory_allocated() counts, as torch. A large block is obtained from
//    cudaMalloc rounded up to 2 MiB (torch's kRoundLarge), so requests of nearby sizes can
//    share it; memory_reserved() counts the cudaMalloc sizes.
//  * Reuse: freed blocks sit in a set per pool ordered by size; a request takes the
//    smallest cached block that fits (best fit), but only one at most twice its rounded
//    size: mini never splits a block (torch splits a large block and hands out the rest
//    later), so a much larger block would waste most of itself on a small request.
//  * One stream (the default stream): a block freed by the host may still be read by a
//    kernel queued before, but any kernel that gets the block next is queued after that
//    one on the same stream, so it cannot overtake it. torch records, per block, the
//    streams that used it; mini has nothing to record.
//  * Out of memory: on cudaErrorMemoryAllocation every cached block is returned to the
//    driver and cudaMalloc retried once; if that fails too, an OutOfMemory error (Python's
//    mini.OutOfMemoryError) names the request and the pool sizes, in torch's words. Nothing
//    already allocated is touched, so the program can catch it and carry on.
//  * Thread safety: one mutex around the pools and the statistics.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "common.cuh"

namespace mini::cuda {

namespace {

constexpr size_t kMinBlockSize = 512;         // every request is a multiple of this
constexpr size_t kSmallSize = size_t(1) << 20;  // largest request of the small pool
constexpr size_t kRoundLarge = size_t(2) << 20;  // cudaMalloc granularity of the large pool

struct Block {
  size_t size = 0;       // bytes obtained from cudaMalloc
  size_t requested = 0;  // the rounded request it serves now (memory_allocated counts this)
  bool small = false;    // its pool
};

size_t round_request(size_t n) {
  return n < kMinBlockSize ? kMinBlockSize : (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

// torch's format_size: bytes, KiB, MiB or GiB with two decimals.
std::string format_size(double bytes) {
  char buf[64];
  if (bytes < 1024.0)
    std::snprintf(buf, sizeof(buf), "%.0f bytes", bytes);
  else if (bytes < 1048576.0)
    std::snprintf(buf, sizeof(buf), "%.2f KiB", bytes / 1024.0);
  else if (bytes < 1073741824.0)
    std::snprintf(buf, sizeof(buf), "%.2f MiB", bytes / 1048576.0);
  else
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

class CachingAllocator {
 public:
  void* allocate(size_t nbytes) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t requested = round_request(nbytes);
    bool small = requested <= kSmallSize;
    if (void* p = take_cached(requested, small)) return p;
    size_t size = small ? requested : (requested + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    if (size < requested) size = requested;  // rounding overflowed: let cudaMalloc refuse it
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      // Clear the error (it would resurface at the next launch check), give the cache back
      // to the driver and try once more.
      (void)cudaGetLastError();
      stats_.oom_retries++;
      free_cached();
      err = cudaMalloc(&p, size);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        fail_out_of_memory(nbytes);
      }
    }
    if (err != cudaSuccess) fail_cuda(err, "cudaMalloc", "the CUDA caching allocator");
    stats_.cuda_mallocs++;
    stats_.reserved += static_cast<int64_t>(size);
    stats_.max_reserved = std::max(stats_.max_reserved, stats_.reserved);
    hand_out(p, Block{size, requested, small});
    return p;
  }

  // Never throws: it runs in Storage's destructor, also at interpreter exit.
  void release(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = active_.find(p);
    if (it == active_.end()) return;  // not ours (cannot happen: Storage pairs the calls)
    Block b = it->second;
    active_.erase(it);
    stats_.allocated -= static_cast<int64_t>(b.requested);
    b.requested = 0;
    pool(b.small).insert({b.size, p});
    cached_.emplace(p, b);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    free_cached();
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.max_allocated = stats_.allocated;
    stats_.max_reserved = stats_.reserved;
  }

 private:
  using Pool = std::set<std::pair<size_t, void*>>;  // (block size, address): best fit first
  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }

  void* take_cached(size_t requested, bool small) {
    Pool& p = pool(small);
    auto it = p.lower_bound({requested, nullptr});
    if (it == p.end() || it->first / 2 > requested) return nullptr;  // none, or over twice the size
    void* ptr = it->second;
    p.erase(it);
    auto c = cached_.find(ptr);
    Block b = c->second;
    cached_.erase(c);
    b.requested = requested;
    stats_.cache_hits++;
    hand_out(ptr, b);
    return ptr;
  }

  void hand_out(void* p, const Block& b) {
    active_.emplace(p, b);
    stats_.allocated += static_cast<int64_t>(b.requested);
    stats_.max_allocated = std::max(stats_.max_allocated, stats_.allocated);
  }

  // cudaFree of every cached block (it synchronizes the device first). At interpreter exit
  // the runtime may already be unloading (cudaErrorCudartUnloading): the driver reclaims
  // the memory with the process, so the error is dropped.
  // Another error (a kernel's fault, sticky) is reported once the pools are consistent.
  void free_cached() {
    cudaError_t first = cudaSuccess;
    for (auto& [ptr, b] : cached_) {
      cudaError_t err = cudaFree(ptr);
      if (err != cudaSuccess && err != cudaErrorCudartUnloading &&
          err != cudaErrorContextIsDestroyed && first == cudaSuccess)
        first = err;
      stats_.reserved -= static_cast<int64_t>(b.size);
    }
    cached_.clear();
    small_pool_.clear();
    large_pool_.clear();
    if (first != cudaSuccess) fail_cuda(first, "cudaFree", "the CUDA caching allocator");
  }

  [[noreturn]] void fail_out_of_memory(size_t nbytes) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    int64_t unallocated = stats_.reserved - stats_.allocated;
    fail_oom("CUDA out of memory. Tried to allocate ", format_size(double(nbytes)),
             ". GPU 0 has a total capacity of ", format_size(double(total_bytes)), " of which ",
             format_size(double(free_bytes)), " is free. Of the allocated memory ",
             format_size(double(stats_.allocated)), " is allocated by mini, and ",
             format_size(double(unallocated)),
             " is reserved by mini but unallocated. Free tensors you no longer need (del x), "
             "or use smaller batches or shapes");
  }

  std::mutex mu_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block> cached_;  // blocks in the pools
  std::unordered_map<void*, Block> active_;  // blocks held by storages
  MemoryStats stats_;
};

// Never destroyed: storages released during static destruction (at interpreter exit) must
// still find it.
CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace

void* allocate(size_t nbytes) {
  require("CUDA memory");
  if (nbytes == 0) return nullptr;
  return allocator().allocate(nbytes);
}

namespace {
// While a CUDA graph is recorded, a block freed goes here, not back to the cache: the graph
// replays its writes later, so nothing else may be handed that memory (capture_graph's caller
// owns these blocks then, and releases them with the graph).
std::vector<void*>* g_graph_blocks = nullptr;
}  // namespace

void keep_freed_blocks(std::vector<void*>* blocks) { g_graph_blocks = blocks; }

void release(void* ptr) {
  if (g_graph_blocks && ptr && capturing()) {
    g_graph_blocks->push_back(ptr);
    return;
  }
  allocator().release(ptr);
}
MemoryStats memory_stats() { return allocator().stats(); }
void reset_peak_memory_stats() { allocator().reset_peaks(); }
void empty_cache() { allocator().empty_cache(); }

}  // namespace mini::cuda
