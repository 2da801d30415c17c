// cuda/cuda.h — mini's CUDA runtime as the rest of mini sees it: availability, the caching
// allocator, copies, synchronization, asynchronous errors and events.
//
// This header compiles in every build. With CUDA (MINI_WITH_CUDA, the toolkit found by
// CMake) runtime.cu and allocator.cu implement it; without, stub.cpp does, and every call
// that needs a GPU throws an Error saying that this build has no CUDA and what to do.
// One device (ordinal 0) and one stream (the legacy default stream) are used throughout:
// notes/cuda.md says why and what torch does instead.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/device.h"

namespace mini::cuda {

// ---- availability ------------------------------------------------------------------------
bool compiled();             // this build of mini was compiled with the CUDA toolkit
bool is_available();         // compiled() and a CUDA device answers (never throws)
int device_count();          // 0 when not available
std::string unavailable_reason();  // why is_available() is false, with the fix ("" if it is true)
// Throws Error (RuntimeError) naming `what` (e.g. "device='cuda'"), the reason and the fix
// when CUDA is not available; also checks the device index exists.
void require(const char* what, Device device = Device::cuda(0));
std::string device_name(int index);

// ---- the caching allocator (allocator.cu) -------------------------------------------------
// Device memory for a Storage. Freed blocks stay cached by size and are reused; on
// cudaErrorMemoryAllocation the cache is emptied and the cudaMalloc retried once, then an
// OutOfMemory error (mini.OutOfMemoryError in Python) names the request and the pool sizes.
void* allocate(size_t nbytes);
void release(void* ptr);
struct MemoryStats {
  int64_t allocated = 0;       // bytes in blocks handed to tensors (requested sizes, rounded)
  int64_t max_allocated = 0;   // peak of allocated since the last reset
  int64_t reserved = 0;        // bytes obtained from cudaMalloc (cached + in use)
  int64_t max_reserved = 0;
  int64_t cuda_mallocs = 0;    // cudaMalloc calls (a cache hit makes none)
  int64_t cache_hits = 0;      // allocations served from the cache
  int64_t oom_retries = 0;     // times the cache was emptied to retry a failed cudaMalloc
};
MemoryStats memory_stats();
void reset_peak_memory_stats();
void empty_cache();          // returns every cached (unused) block to the driver

// ---- copies -----------------------------------------------------------------------------
// n bytes between any two of host and device memory, on the default stream; returns when
// the bytes are at `dst` (a copy to the host synchronizes, as torch's .cpu()).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);

// ---- synchronization and errors ------------------------------------------------------------
// Every eager kernel launch is followed by check_launch(op): a launch that fails (bad
// configuration, too many resources) throws an Error with CUDA's error string and the op.
// An error that happens while a kernel runs is only seen later; synchronize() and every
// other synchronizing call (copies to the host, item()) report it with the name of the
// last op launched before it.
void check_launch(const char* op);
void synchronize();
const char* last_op();

// For the tests of the two error paths above (mini._C._cuda._test_fault): kind 0 launches a
// kernel with an impossible configuration (a launch error, reported at once, naming the op
// "test_bad_launch"; the context stays usable); kind 1 launches a kernel that writes to an
// illegal address (reported at the next synchronizing call; the context is then unusable, so
// only a child process may call it).
void test_fault(int kind);

// ---- events (mini.cuda.Event) --------------------------------------------------------------
// Opaque handles to cudaEvent_t, recorded on the default stream.
uintptr_t event_create(bool enable_timing);
void event_destroy(uintptr_t event);
void event_record(uintptr_t event);
void event_synchronize(uintptr_t event);
bool event_query(uintptr_t event);
float event_elapsed_ms(uintptr_t start, uintptr_t end);  // torch's elapsed_time: milliseconds

// ---- generated kernels (runtime/cuda_program.h) ---------------------------------------------
// The device's compute capability as "sm_XY" (sm_90 for an H200).
std::string device_arch(int index = 0);
int sm_count();  // multiprocessors of device 0, read once
// Loads a CUBIN (cudaLibraryLoadData, on the primary context the eager ops use); an opaque
// handle, released with unload_cubin. A CUBIN for another architecture is a mini::Error.
uintptr_t load_cubin(const std::string& cubin, const char* what);
void unload_cubin(uintptr_t library);
// The kernel `name` (an extern "C" __global__ function) of a loaded CUBIN.
uintptr_t cubin_kernel(uintptr_t library, const char* name);
// The blocks of `threads` threads of `kernel` the whole GPU holds at once: its SMs times the
// blocks an SM holds (at least one), which the kernel's registers and shared memory decide.
int64_t resident_blocks(uintptr_t kernel, int threads);
// Launches `kernel` on the default stream with `args` (pointers to each parameter's value, as
// cudaLaunchKernel takes them) and checks the launch, naming `op`.
void launch_kernel(uintptr_t kernel, const unsigned grid[3], const unsigned block[3],
                   void** args, size_t shared_bytes, const char* op);

// ---- CUDA graphs (mode="reduce-overhead", runtime/cuda_graph_replay.h) ----------------------------
// Runs `work` with every launch, cuBLAS call and device copy recorded into a CUDA graph (on
// mini's capture stream, in relaxed mode) instead of run, and returns the graph instantiated:
// an opaque handle for replay_graph (one launch on the default stream replays all of it) and
// destroy_graph. A copy to or from the CPU while recording raises; an exception from `work`
// ends the recording and propagates.
// `freed` receives the blocks released while recording (the graph still writes them): release
// each when the graph is destroyed.
uintptr_t capture_graph(const std::function<void()>& work, std::vector<void*>* freed);
void replay_graph(uintptr_t exec);
void destroy_graph(uintptr_t exec);
bool capturing();

// ---- math library settings ----------------------------------------------------------------
// torch.backends.cuda.matmul.allow_tf32 (False by default, as torch).
void set_allow_tf32(bool on);
bool allow_tf32();

}  // namespace mini::cuda
