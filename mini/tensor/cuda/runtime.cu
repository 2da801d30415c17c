// cuda/runtime.cu — cuda.h's runtime with the CUDA toolkit (the allocator is allocator.cu):
// availability, copies, launch checks and asynchronous errors, events, and the host
// helpers of common.cuh every kernel file uses.
//
// Errors: a CUDA runtime call that fails throws mini::Error with CUDA's error string. A fault
// inside a kernel (an illegal address, a device-side assert) is not seen at launch: the
// launch returns at once and the error surfaces at the next synchronizing call, where it is
// reported with the last op launched (torch's message says the same:
// "CUDA kernel errors might be asynchronously reported at some other API call").
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common.cuh"

namespace mini::cuda {

// ---- availability ------------------------------------------------------------------------
namespace {

struct Availability {
  int count = 0;
  std::string reason;  // empty when a device answered
};

// Asked once: cudaGetDeviceCount initializes the runtime, and an answer does not change
// while the process runs. Never throws: no driver or no device is an answer, not a crash.
const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // leave no error behind for the next call to find
      r.reason = cat("no CUDA GPU is usable: cudaGetDeviceCount() failed with ",
                     cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
      if (err == cudaErrorInsufficientDriver)
        r.reason += cat("; the NVIDIA driver is missing, or older than the CUDA ",
                        CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10,
                        " runtime this build uses: install or update the driver");
      else if (err == cudaErrorNoDevice)
        r.reason += "; this machine has no NVIDIA GPU, or its driver cannot see one";
    } else if (n == 0) {
      r.reason = "cudaGetDeviceCount() found no CUDA device on this machine";
    }
    r.count = r.reason.empty() ? n : 0;
    return r;
  }();
  return a;
}

}  // namespace

bool compiled() { return true; }
bool is_available() { return availability().count > 0; }
int device_count() { return availability().count; }
std::string unavailable_reason() { return availability().reason; }

void require(const char* what, Device device) {
  if (!is_available())
    fail(what, " needs a CUDA GPU, but ", unavailable_reason(),
         ". Use device='cpu', or run on a machine with an NVIDIA GPU and its driver");
  if (device.index < 0 || device.index >= device_count())
    fail("CUDA error: invalid device ordinal (", what, " names device ", device.str(),
         ", but this machine has ", device_count(), " CUDA device",
         device_count() == 1 ? "" : "s", "; mini uses cuda:0)");
}

std::string device_name(int index) {
  require("mini.cuda.get_device_name()", Device::cuda(index));
  cudaDeviceProp prop;
  MINI_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), "mini.cuda.get_device_name()");
  return prop.name;
}

std::string device_arch(int index) {
  require("the GPU's architecture", Device::cuda(index));
  int major = 0, minor = 0;
  MINI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index), "device_arch");
  MINI_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index), "device_arch");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

uintptr_t load_cubin(const std::string& cubin, const char* what) {
  require(what);
  cudaLibrary_t library = nullptr;
  cudaError_t e = cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr,
                                      nullptr, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    fail("CUDA could not load the CUBIN of ", what, " on ", device_name(0), " (", device_arch(0),
         "): ", cudaGetErrorString(e), ". A CUBIN runs only on the architecture it was compiled "
         "for: compile it for this GPU's");
  }
  return reinterpret_cast<uintptr_t>(library);
}

void unload_cubin(uintptr_t library) {
  if (library) cudaLibraryUnload(reinterpret_cast<cudaLibrary_t>(library));
}

uintptr_t cubin_kernel(uintptr_t library, const char* name) {
  cudaKernel_t kernel = nullptr;
  cudaError_t e = cudaLibraryGetKernel(&kernel, reinterpret_cast<cudaLibrary_t>(library), name);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidKernelImage)  // loading is lazy
      fail("kernel ", name, " of the loaded CUBIN cannot run on ", device_name(0), " (", device_arch(0),
           "): ", cudaGetErrorString(e), ". A CUBIN runs only on the architecture it was compiled "
           "for: compile it for this GPU's");
    fail("the loaded CUBIN has no kernel ", name, ": ", cudaGetErrorString(e));
  }
  return reinterpret_cast<uintptr_t>(kernel);
}

void launch_kernel(uintptr_t kernel, const unsigned grid[3], const unsigned block[3], void** args,
                   size_t shared_bytes, const char* op) {
  cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid[0], grid[1], grid[2]),
                   dim3(block[0], block[1], block[2]), args, shared_bytes, current_stream());
  check_launch(op);
}

// ---- CUDA graphs -----------------------------------------------------------------------------
namespace {
cudaStream_t g_stream = nullptr;  // current_stream(): null (the legacy default) unless capturing
std::mutex g_capture_mutex;       // one capture at a time
}  // namespace

cudaStream_t current_stream() { return g_stream; }
bool capturing() { return g_stream != nullptr; }

void keep_freed_blocks(std::vector<void*>* blocks);  // allocator.cu

uintptr_t capture_graph(const std::function<void()>& work, std::vector<void*>* freed) {
  require("a CUDA graph (mode='reduce-overhead')");
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  synchronize();  // what came before is done: the capture stream does not wait for it
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    MINI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "capture_graph");
    return s;
  }();
  // relaxed: the caching allocator may cudaMalloc while the graph is recorded (the memory is
  // real, and the graph's: its owner keeps every tensor the recording made)
  MINI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "capture_graph");
  g_stream = stream;
  keep_freed_blocks(freed);
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    g_stream = nullptr;
    keep_freed_blocks(nullptr);
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  g_stream = nullptr;
  keep_freed_blocks(nullptr);
  MINI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph), "capture_graph");
  cudaGraphExec_t exec = nullptr;
  cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) fail_cuda(err, "cudaGraphInstantiate", "capture_graph");
  return reinterpret_cast<uintptr_t>(exec);
}

void replay_graph(uintptr_t exec) {
  cudaError_t err = cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(exec), nullptr);
  if (err != cudaSuccess) fail_cuda(err, "cudaGraphLaunch", "a CUDA graph replay");
  check_launch("cuda_graph_replay");
}

void destroy_graph(uintptr_t exec) {
  if (exec) cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(exec));
}

// ---- errors ------------------------------------------------------------------------------
namespace {

// The op of the last launch, copied (callers may pass a temporary string): what an
// asynchronous error names. One device, one stream: one last op for the process.
std::mutex g_last_op_mutex;
char g_last_op[96] = "";

bool launch_blocking() {
  static const bool on = [] {
    const char* v = std::getenv("CUDA_LAUNCH_BLOCKING");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// Errors that a running kernel leaves behind (they stick to the context: every later call
// returns them too). They belong to an earlier launch, not to the call that returned them.
bool is_kernel_fault(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void fail_async(cudaError_t err) {
  const char* op = last_op();
  fail("CUDA error: ", cudaGetErrorString(err), "; it happened asynchronously in a kernel ",
       *op ? cat("launched by ", op, " or before it") : std::string("launched before it"),
       " (CUDA kernel errors are reported at the next synchronizing call; set "
       "CUDA_LAUNCH_BLOCKING=1 to find the op)");
}

// A synchronizing call's error: a kernel's fault, or the call's own.
[[noreturn]] void fail_sync_call(cudaError_t err, const char* call, const char* op) {
  if (is_kernel_fault(err)) fail_async(err);
  fail_cuda(err, call, op);
}

}  // namespace

void fail_cuda(cudaError_t err, const char* call, const char* op) {
  if (is_kernel_fault(err)) fail_async(err);
  (void)cudaGetLastError();  // a non-sticky error must not resurface at the next launch
  fail("CUDA error: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), " from ", call,
       " in ", op, ")");
}

const char* last_op() {
  std::lock_guard<std::mutex> lock(g_last_op_mutex);
  return g_last_op;
}

namespace {
__global__ void empty_kernel() {}
__global__ void illegal_write_kernel(int* p) { *p = 1; }
}  // namespace

void test_fault(int kind) {
  require("mini._C._cuda._test_fault()");
  if (kind == 0) {
    empty_kernel<<<1, 4096, 0, ::mini::cuda::current_stream()>>>();  // more threads than a block may have: a launch error
    check_launch("test_bad_launch");
  } else {
    illegal_write_kernel<<<1, 1, 0, ::mini::cuda::current_stream()>>>(reinterpret_cast<int*>(uintptr_t{16}));
    check_launch("test_illegal_address");
  }
}

void check_launch(const char* op) {
  {
    std::lock_guard<std::mutex> lock(g_last_op_mutex);
    std::strncpy(g_last_op, op, sizeof(g_last_op) - 1);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    if (is_kernel_fault(err)) fail_async(err);
    fail("CUDA error: ", cudaGetErrorString(err), " (launching the ", op, " kernel)");
  }
  if (launch_blocking()) {
    err = cudaDeviceSynchronize();
    if (err != cudaSuccess)
      fail("CUDA error: ", cudaGetErrorString(err), " (in the ", op,
           " kernel, found with CUDA_LAUNCH_BLOCKING=1)");
  }
}

void synchronize() {
  require("mini.cuda.synchronize()");
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) fail_async(err);
}

// ---- copies ------------------------------------------------------------------------------
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (n == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
  if (dst_device.is_cuda() && src_device.is_cuda()) {  // ordered on the stream, as a kernel
    cudaError_t err = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, current_stream());
    if (err != cudaSuccess) fail_sync_call(err, "cudaMemcpyAsync", "a copy between devices");
    return;
  }
  if (capturing())
    fail("a copy between the GPU and the CPU inside a CUDA graph (mode='reduce-overhead'): a graph "
         "replays GPU work only; such a region runs in default mode");
  cudaMemcpyKind kind = dst_device.is_cpu()   ? cudaMemcpyDeviceToHost
                        : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToDevice;
  // cudaMemcpy on the legacy default stream: ordered after every kernel launched before it.
  // To the host it returns once the bytes are there; from pageable host memory it returns
  // once the bytes are staged, so the caller may reuse its buffer at once.
  cudaError_t err = cudaMemcpy(dst, src, n, kind);
  if (err != cudaSuccess) fail_sync_call(err, "cudaMemcpy", "a copy between devices");
}

// ---- events ------------------------------------------------------------------------------
namespace {

struct Event {
  cudaEvent_t event = nullptr;
  bool timing = false;
  bool recorded = false;
};

Event* as_event(uintptr_t handle) {
  MINI_CHECK(handle != 0, "internal error: a null CUDA event handle");
  return reinterpret_cast<Event*>(handle);
}

}  // namespace

uintptr_t event_create(bool enable_timing) {
  require("mini.cuda.Event");
  auto* e = new Event;
  e->timing = enable_timing;
  cudaError_t err = cudaEventCreateWithFlags(
      &e->event, enable_timing ? cudaEventDefault : cudaEventDisableTiming);
  if (err != cudaSuccess) {
    delete e;
    fail_cuda(err, "cudaEventCreateWithFlags", "mini.cuda.Event");
  }
  return reinterpret_cast<uintptr_t>(e);
}

void event_destroy(uintptr_t handle) {
  if (handle == 0) return;
  Event* e = reinterpret_cast<Event*>(handle);
  // Called from destructors, also at interpreter exit when the runtime may be unloading:
  // an error here has nobody to report to.
  if (e->event && cudaEventDestroy(e->event) != cudaSuccess) (void)cudaGetLastError();
  delete e;
}

void event_record(uintptr_t handle) {
  Event* e = as_event(handle);
  MINI_CUDA_CHECK(cudaEventRecord(e->event, 0), "mini.cuda.Event.record()");
  e->recorded = true;
}

void event_synchronize(uintptr_t handle) {
  Event* e = as_event(handle);
  if (!e->recorded) return;  // as torch: an event never recorded has nothing to wait for
  cudaError_t err = cudaEventSynchronize(e->event);
  if (err != cudaSuccess) fail_sync_call(err, "cudaEventSynchronize", "mini.cuda.Event.synchronize()");
}

bool event_query(uintptr_t handle) {
  Event* e = as_event(handle);
  if (!e->recorded) return true;
  cudaError_t err = cudaEventQuery(e->event);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error (torch clears it too)
    return false;
  }
  if (err != cudaSuccess) fail_sync_call(err, "cudaEventQuery", "mini.cuda.Event.query()");
  return true;
}

float event_elapsed_ms(uintptr_t start, uintptr_t end) {
  Event* s = as_event(start);
  Event* e = as_event(end);
  if (!s->timing || !e->timing)
    fail("Both events must be created with argument 'enable_timing=True'.");
  if (!s->recorded || !e->recorded)
    fail("Both events must be recorded before calculating elapsed time.");
  // torch leaves waiting to the caller (and fails with "device not ready"); waiting here
  // gives the same number once the end event completes.
  event_synchronize(end);
  float ms = 0;
  MINI_CUDA_CHECK(cudaEventElapsedTime(&ms, s->event, e->event), "mini.cuda.Event.elapsed_time()");
  return ms;
}

// ---- math library settings ----------------------------------------------------------------
namespace {
std::atomic<bool> g_allow_tf32{false};
}
void set_allow_tf32(bool on) { g_allow_tf32 = on; }
bool allow_tf32() { return g_allow_tf32; }

// ---- common.cuh's host helpers -------------------------------------------------------------
StridedIndex strided_index(const Tensor& t, const Shape& shape) {
  return strided_index(shape, broadcast_strides(t->sizes, t->strides, shape));
}

// Innermost first; size-1 dims dropped (they add nothing to an offset) and neighbouring
// dims merged where the outer one steps exactly over the inner one (a contiguous [4, 8]
// becomes one dim of 32): fewer divisions per element, and more dims fit kMaxDims.
StridedIndex strided_index(const Shape& shape, const Strides& strides) {
  StridedIndex ix;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (ix.rank > 0 && strides[i] == ix.strides[ix.rank - 1] * ix.sizes[ix.rank - 1]) {
      ix.sizes[ix.rank - 1] *= shape[i];
      continue;
    }
    if (ix.rank == kMaxDims)
      fail("a CUDA kernel indexes at most ", kMaxDims, " dims that cannot be merged, but shape ",
           shape_str(shape), " with strides ", shape_str(strides),
           " has more; call .contiguous() first");
    ix.sizes[ix.rank] = shape[i];
    ix.strides[ix.rank] = strides[i];
    ix.rank++;
  }
  return ix;
}

int sm_count() {
  static const int n = [] {
    int v = 0;
    MINI_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0), "sm_count");
    return v;
  }();
  return n;
}

int64_t resident_blocks(uintptr_t kernel, int threads) {
  int per_sm = 0;
  MINI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reinterpret_cast<const void*>(kernel), threads, 0),
                  "resident_blocks");
  return int64_t(std::max(per_sm, 1)) * sm_count();
}

int64_t grid_for(int64_t n, int per_thread, int threads) {
  int64_t per_block = static_cast<int64_t>(per_thread) * threads;
  int64_t needed = n <= 0 ? 1 : (n + per_block - 1) / per_block;
  // Two waves of as many blocks as an SM holds at full occupancy (2048 threads): every SM
  // busy with room to hide memory latency; the grid-stride loop does the rest of the work.
  int64_t full = static_cast<int64_t>(sm_count()) * (2048 / threads) * 2;
  return needed < full ? needed : full;
}

bool is_host_scalar(const Tensor& t) { return t->device().is_cpu() && t->numel() == 1; }

double host_scalar(const Tensor& t) {
  MINI_CHECK(is_host_scalar(t), "internal error: host_scalar() of a tensor of shape ",
             shape_str(t->sizes), " on ", t->device().str());
  const void* p = t->raw();
  switch (t->dtype) {
    case DType::Bool: return *static_cast<const bool*>(p) ? 1.0 : 0.0;
    case DType::Int64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::Float32: return *static_cast<const float*>(p);
    case DType::Float64: return *static_cast<const double*>(p);
    case DType::BFloat16: return float(*static_cast<const bfloat16*>(p));
  }
  fail("unknown dtype code ", static_cast<int>(t->dtype));
}

}  // namespace mini::cuda
