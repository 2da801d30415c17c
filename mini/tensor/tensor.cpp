// tensor.cpp — the metrics counters, Storage allocation (with a cache of freed mid-sized
// blocks), TensorImpl::empty, and the few TensorImpl methods that are not data
// (is_contiguous, scalar_value).
#include "tensor.h"

#include <omp.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/cuda.h"
#include "metrics.h"

namespace mini {

namespace {
// A forked child runs its parallel loops on one thread. libgomp's thread pool does not survive
// fork (its workers are gone from the child), and the child's first parallel region of more
// than one thread waits for them forever: a fork-isolated fuzz test hung so in a small batched
// matmul. With one thread, mini's loops and OpenBLAS (on OpenMP) run serially and a generated
// kernel's parallel loop is a team of one; torch's DataLoader workers run with one thread too.
const int g_fork_handler = pthread_atfork(nullptr, nullptr, [] { omp_set_num_threads(1); });
}  // namespace


Metrics& metrics() {
  static Metrics m;
  return m;
}

namespace {

std::atomic<int64_t> g_cpu_allocated{0}, g_cpu_peak{0};

void count_cpu_allocation(int64_t bytes) {
  int64_t now = g_cpu_allocated.fetch_add(bytes) + bytes;
  for (int64_t peak = g_cpu_peak.load(); now > peak && !g_cpu_peak.compare_exchange_weak(peak, now);) {
  }
}

}  // namespace

int64_t cpu_memory_allocated() { return g_cpu_allocated.load(); }
int64_t cpu_memory_peak() { return g_cpu_peak.load(); }
void reset_cpu_memory_peak() { g_cpu_peak.store(g_cpu_allocated.load()); }

namespace {

// Freed buffers of a size worth keeping wait here to be reused by the next allocation of
// the same rounded size. Without it every mid-sized eager op would mmap and munmap (glibc
// serves large requests that way) and pay a page fault per 4 KiB page it touches.
class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t(64) << 10;   // smaller blocks: malloc is fine
  static constexpr size_t kCapBytes = size_t(1) << 30;    // never hold more than this

  void* take(size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(rounded);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    held_ -= rounded;
    return p;
  }
  bool give(void* p, size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ + rounded > kCapBytes) return false;
    free_[rounded].push_back(p);
    held_ += rounded;
    return true;
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t held_ = 0;
};

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache();  // never destroyed: storages may outlive statics
  return *cache;
}

}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  auto s = std::make_shared<Storage>();
  if (device.is_cuda()) {  // the caching allocator (cuda/allocator.cu)
    s->device = device;
    s->nbytes = nbytes;
    if (nbytes == 0) return s;
    s->data = cuda::allocate(nbytes);
    s->release = [](void* p) { cuda::release(p); };
    return s;
  }
  // 64-byte alignment: whole cache lines, and aligned vector loads in the kernels. Large
  // buffers are aligned to 2 MiB and advised onto transparent huge pages, as numpy does:
  // first-touch page faults on 4 KiB pages otherwise cost more than the kernel itself.
  constexpr size_t kHuge = size_t(2) << 20;
  size_t align = nbytes >= 2 * kHuge ? kHuge : 64;
  size_t rounded = nbytes >= BlockCache::kMinBytes ? ((nbytes + 4095) / 4096) * 4096 : nbytes;
  rounded = ((rounded + align - 1) / align) * align;
  s->nbytes = nbytes;
  if (rounded == 0) return s;
  bool cacheable = rounded >= BlockCache::kMinBytes;
  s->data = cacheable ? block_cache().take(rounded) : nullptr;
  if (!s->data) {
    // More than the machine's memory and swap can never be backed: where the kernel overcommits
    // (vm.overcommit_memory=1, as on the lent GPU machine) aligned_alloc would still succeed and
    // the first writes would get the process killed, so refuse it here, as an error
    static const uint64_t machine_bytes = [] {
      struct sysinfo info {};
      return sysinfo(&info) == 0 ? (uint64_t(info.totalram) + info.totalswap) * info.mem_unit
                                 : UINT64_MAX;
    }();
    if (rounded > machine_bytes)
      fail("out of memory allocating ", nbytes, " bytes (", nbytes >> 30,
           " GiB): more than this machine's memory and swap (", machine_bytes >> 30,
           " GiB); make the tensor smaller");
    s->data = std::aligned_alloc(align, rounded);
    if (!s->data) fail("out of memory allocating ", nbytes, " bytes");
    if (align == kHuge) madvise(s->data, rounded, MADV_HUGEPAGE);
  }
  count_cpu_allocation((int64_t)nbytes);
  if (cacheable) {
    s->release = [rounded, nbytes](void* p) {
      count_cpu_allocation(-(int64_t)nbytes);
      if (!block_cache().give(p, rounded)) std::free(p);
    };
  } else {
    s->release = [nbytes](void* p) {
      count_cpu_allocation(-(int64_t)nbytes);
      std::free(p);
    };
  }
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::function<void(void*)> release) {
  auto s = std::make_shared<Storage>();
  s->data = data;
  s->nbytes = nbytes;
  s->release = std::move(release);
  return s;
}

Tensor TensorImpl::empty(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes)
    if (s < 0) fail("negative dimension ", s, " in shape ", shape_str(sizes));
  auto t = std::make_shared<TensorImpl>();
  t->sizes = sizes;
  t->strides = contiguous_strides(sizes);
  t->dtype = dtype;
  int64_t nbytes;
  if (__builtin_mul_overflow(numel_of(sizes), static_cast<int64_t>(itemsize(dtype)), &nbytes))
    fail("the storage of shape ", shape_str(sizes), " (", dtype_name(dtype),
         ") needs more bytes than int64 can count");
  t->storage = Storage::allocate(static_cast<size_t>(nbytes), device);
  return t;
}

Tensor TensorImpl::view_of(const Tensor& base, const Shape& sizes, const Strides& strides,
                           int64_t offset) {
  auto t = std::make_shared<TensorImpl>();
  t->storage = base->storage;
  t->sizes = sizes;
  t->strides = strides;
  t->offset = offset;
  t->dtype = base->dtype;
  return t;
}

bool TensorImpl::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

double TensorImpl::scalar_value() const {
  if (numel() != 1)
    fail("a Tensor with ", numel(), " elements cannot be converted to Scalar");
  if (is_cuda()) {  // one element to the host: synchronizes, as torch's item()
    alignas(8) unsigned char bytes[8];
    cuda::copy_bytes(bytes, Device::cpu(), device_raw(), device(), itemsize(dtype));
    return MINI_DISPATCH(dtype, T, [&] { return static_cast<double>(*reinterpret_cast<T*>(bytes)); });
  }
  return MINI_DISPATCH(dtype, T, [&] { return static_cast<double>(*data<T>()); });
}

void TensorImpl::fail_device_access() const {
  fail("internal error: a CPU kernel was given a tensor on ", device().str(), " (shape ",
       shape_str(sizes), ", ", dtype_name(dtype), "). This op has no CUDA path yet; move the "
       "tensor to the CPU first (.cpu()) and please report it");
}

}  // namespace mini
