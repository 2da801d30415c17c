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
//    by rename (cache_entry.h): a truncated or foreign file is compiled again, never loaded;
//  * compiling needs no GPU (the "null device": CI compiles every generated kernel); loading and
//    launching raise, naming the cause, where there is no GPU or no CUDA build.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
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

  // Loads the CUBIN on the GPU and looks up `names`; a no-op when already loaded.
  void load(const std::vector<std::string>& names);
  ~CudaProgram();
};

// The architecture to compile for: the GPU's where one answers, else sm_90 (the H200 the
// article measures, and what CI's compile-only tests target).
std::string default_cuda_arch();

// NVRTC's options for every generated source (part of the cache key).
std::vector<std::string> cuda_compile_options();

// Compiles `source` for `arch` ("": default_cuda_arch()) or reads it from the cache under
// `cache_dir` ("": /tmp/mini-cache). A source NVRTC rejects is a mini::Error with its log.
std::shared_ptr<CudaProgram> compile_cuda(const std::string& source, const std::string& arch,
                                          const std::string& cache_dir);

}  // namespace mini::runtime
