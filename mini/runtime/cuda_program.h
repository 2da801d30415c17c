// cuda_program.h — generated CUDA C++ to kernels on the GPU: NVRTC to a CUBIN, cached on disk,
// loaded on the eager runtime's context (the C++ side of the Program seam is compiled_graph.h).
//
// In:  a CUDA C++ source of extern "C" __global__ kernels, the architecture ("sm_90").
// Out: a CudaProgram: the CUBIN (compiled, or read from the disk cache) and, once load() has run
//      on a machine with a GPU, its kernels to launch.
// Guarantees:
//  * a CUBIN of SASS for the one architecture, never PTX (the driver's JIT costs ~190 ms a load);
//  * the cache key is a hash of the source, NVRTC's options, the architecture and NVRTC's
//    version; the entry (<key>.cubin under the cache folder) is checked before use and written
//    by rename (code_cache.h): a truncated or foreign file is compiled again, never loaded;
//  * a graph's kernels compile one program per distinct body (compile_cuda_kernels): keyed by
//    codegen::kernel_body, not by name or position, in memory (one CudaProgram per key in the
//    process, shared by every graph and layer) and on disk, NVRTC running in parallel threads;
//  * compiling needs no GPU (the "null device": CI compiles every generated kernel); loading and
//    launching raise, naming the cause, where there is no GPU or no CUDA build.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mini::runtime {

struct CudaProgram {
  std::string arch;            // "sm_90"
  std::string key;             // the cache key (16 hex digits)
  std::string path;            // the cache entry
  std::string cubin;           // the ELF bytes NVRTC wrote
  std::string log;             // NVRTC's log ("" when read from the cache)
  bool from_disk_cache = false;
  std::string rejected;        // why the cache's entry was compiled again ("": none, or used)
  std::vector<std::string> warnings;  // for the user, once per process (an unusable cache_dir)
  double compile_seconds = 0;  // NVRTC, or reading and checking the entry

  uintptr_t library = 0;       // the loaded CUBIN (load()), 0 before
  std::map<std::string, uintptr_t> kernels;  // name -> kernel handle, after load()

  // Loads the CUBIN on the GPU and looks up `names`; a no-op when already loaded. Graphs that
  // share the program may load it from several threads at once.
  void load(const std::vector<std::string>& names);
  ~CudaProgram();

 private:
  std::mutex load_mutex_;
};

// The architecture to compile for: the GPU's where one answers, else sm_90 (the H200 the
// article measures, and what CI's compile-only tests target).
std::string default_cuda_arch();

// NVRTC's options for every generated source (part of the cache key).
std::vector<std::string> cuda_compile_options();

// Compiles `source` for `arch` ("": default_cuda_arch()) or reads it from the cache under
// `cache_dir` ("": /tmp/mini-cache). A source NVRTC rejects is a mini::Error with its log.
// `keyed_by`, where given, is hashed for the key instead of `source` (a kernel's body).
std::shared_ptr<CudaProgram> compile_cuda(const std::string& source, const std::string& arch,
                                          const std::string& cache_dir, const std::string& keyed_by = "");

// One generated kernel compiled: its program and the function in it to launch.
struct CudaKernel {
  std::shared_ptr<CudaProgram> program;
  std::string function;
};

// The kernels of a graph compiled: kernels[i] for texts[i].
struct CudaKernels {
  std::vector<CudaKernel> kernels;
  int programs = 0;      // distinct bodies among them
  int nvrtc_runs = 0;    // programs NVRTC compiled for this call (the rest: memory, or disk)
  double seconds = 0;    // the wall time of it all
  std::string arch, cache_dir;
};

// The kernels of a graph (texts[i] names its function names[i]; each needs `prelude`), one
// program per distinct body: a body compiled before in this process is its program again; the
// others compile (or are read from the disk cache) in parallel threads (compile_threads()).
// Each program holds its kernel named <name's stem>_<8 hex digits of its key>
// (cuda_red_fused_gelu_backward_sum_3fa2c1d0): every copy of one body shares a name and a
// function, and a profile still says what the kernel computes.
CudaKernels compile_cuda_kernels(const std::string& prelude, const std::vector<std::string>& names,
                                 const std::vector<std::string>& texts, const std::string& arch,
                                 const std::string& cache_dir);

// What the kernel caches did in this process (mini._C._cuda_kernel_cache_stats): NVRTC runs,
// programs read from the disk cache, kernels served by a program already in memory, and the
// programs in memory (the distinct bodies).
struct CudaKernelCacheStats {
  int64_t nvrtc_compiles = 0, disk_hits = 0, memory_hits = 0, programs = 0;
};
CudaKernelCacheStats cuda_kernel_cache_stats();

}  // namespace mini::runtime
