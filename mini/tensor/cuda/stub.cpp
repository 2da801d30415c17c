// cuda/stub.cpp — the CUDA runtime and kernels of a build without the CUDA toolkit.
//
// Linked instead of the .cu files when CMake found no nvcc (or MINI_CUDA=OFF, or a sanitized
// build). Nothing here touches a GPU: is_available() is false, and every call that would need
// one throws the same Error, which says why and how to get a CUDA build.
#include "cuda.h"
#include "kernels.h"

namespace mini::cuda {

namespace {
constexpr const char* kReason =
    "this build of mini was compiled without CUDA (CMake found no CUDA toolkit, or was "
    "configured with -DMINI_CUDA=OFF). Install the CUDA toolkit (nvcc) and rebuild "
    "(scripts/setup.sh), or use device='cpu'";

[[noreturn]] void no_cuda(const char* what) { fail(what, ": ", kReason); }
}  // namespace

bool compiled() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return kReason; }
void require(const char* what, Device) { no_cuda(what); }
std::string device_name(int) { no_cuda("mini.cuda.get_device_name()"); }

void* allocate(size_t) { no_cuda("CUDA memory"); }
void release(void*) {}
MemoryStats memory_stats() { return {}; }
void reset_peak_memory_stats() {}
void empty_cache() {}

void copy_bytes(void*, Device, const void*, Device, size_t) { no_cuda("a copy to or from a CUDA device"); }
void check_launch(const char*) {}
void synchronize() { no_cuda("mini.cuda.synchronize()"); }
const char* last_op() { return ""; }
void test_fault(int) { no_cuda("mini._C._cuda._test_fault()"); }

uintptr_t event_create(bool) { no_cuda("mini.cuda.Event"); }
void event_destroy(uintptr_t) {}
void event_record(uintptr_t) { no_cuda("mini.cuda.Event.record()"); }
void event_synchronize(uintptr_t) { no_cuda("mini.cuda.Event.synchronize()"); }
bool event_query(uintptr_t) { no_cuda("mini.cuda.Event.query()"); }
float event_elapsed_ms(uintptr_t, uintptr_t) { no_cuda("mini.cuda.Event.elapsed_time()"); }

std::string device_arch(int) { no_cuda("the GPU's architecture"); }
int sm_count() { no_cuda("the GPU's multiprocessors"); }
uintptr_t load_cubin(const std::string&, const char* what) { no_cuda(what); }
void unload_cubin(uintptr_t) {}
uintptr_t cubin_kernel(uintptr_t, const char* name) { no_cuda(name); }
int64_t resident_blocks(uintptr_t, int) { no_cuda("the blocks a GPU holds at once"); }
void launch_kernel(uintptr_t, const unsigned*, const unsigned*, void**, size_t, const char* op) {
  no_cuda(op);
}
uintptr_t capture_graph(const std::function<void()>&, std::vector<void*>*) { no_cuda("a CUDA graph (mode='reduce-overhead')"); }
void replay_graph(uintptr_t) { no_cuda("a CUDA graph replay"); }
void destroy_graph(uintptr_t) {}
bool capturing() { return false; }

namespace {
bool g_allow_tf32 = false;
}
void set_allow_tf32(bool on) { g_allow_tf32 = on; }
bool allow_tf32() { return g_allow_tf32; }

void binary(OpKind, const Tensor&, const Tensor&, const Tensor&, DType, const std::string&) { no_cuda("a CUDA kernel"); }
void unary(OpKind, const Tensor&, const Tensor&, const Attrs&) { no_cuda("a CUDA kernel"); }
bool sweep_flat(OpKind, const Tensor&, const Tensor&, const Tensor&, int, bool) {
  no_cuda("a CUDA kernel");
}
void copy(const Tensor&, const Tensor&) { no_cuda("a CUDA kernel"); }
void where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("a CUDA kernel"); }
void fill(const Tensor&, double) { no_cuda("a CUDA kernel"); }
void arange(const Tensor&, double, double) { no_cuda("a CUDA kernel"); }
void random(const Tensor&, bool, uint64_t, uint64_t) { no_cuda("a CUDA kernel"); }
uint64_t random_offset_increment(int64_t) { return 0; }
void reduce(OpKind, const Tensor&, const Tensor&, const std::vector<int64_t>&) { no_cuda("a CUDA kernel"); }
void sweep_reduce_rows(OpKind, const Tensor&, const Tensor&, int, int, bool) {
  no_cuda("a CUDA kernel");
}
void max_min_dim(const Tensor&, const Tensor&, const Tensor&, int64_t, bool) { no_cuda("a CUDA kernel"); }
Tensor nonzero_flat(const Tensor&) { no_cuda("a CUDA kernel"); }
void softmax(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, bool) { no_cuda("a CUDA kernel"); }
void embedding(const Tensor&, const Tensor&, const Tensor&) { no_cuda("a CUDA kernel"); }
void attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double) {
  no_cuda("a CUDA kernel");
}
bool attention_supports(int64_t, int64_t) { return false; }
bool flash_attention_supports(DType, int64_t, int64_t) { return false; }
bool flash_attention_reads(const Tensor&) { return false; }
void flash_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double) {
  no_cuda("a CUDA kernel");
}
void flash_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double) {
  no_cuda("a CUDA kernel");
}
void embedding_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("a CUDA kernel"); }
void layer_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, double) {
  no_cuda("a CUDA kernel");
}
void layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         int64_t, int64_t, double) {
  no_cuda("a CUDA kernel");
}
void cross_entropy(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t) {
  no_cuda("a CUDA kernel");
}
void cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                            int64_t, int64_t) {
  no_cuda("a CUDA kernel");
}
void matmul(const Tensor&, const Tensor&, const Tensor&) { no_cuda("a CUDA kernel"); }
bool linear(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { no_cuda("a CUDA kernel"); }
int adam_steps(const std::vector<AdamOperands>&, const double*, bool, bool) { no_cuda("a CUDA kernel"); }

}  // namespace mini::cuda
