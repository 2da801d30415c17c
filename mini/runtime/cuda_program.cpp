// cuda_program.cpp — see cuda_program.h.
#include "runtime/cuda_program.h"

#include <cstdlib>
#include <sstream>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>

#include "runtime/cache_entry.h"
#include "runtime/nvrtc.h"
#include "tensor/cuda/cuda.h"
#include "tensor/tensor.h"

namespace mini::runtime {

namespace {
std::atomic<int> g_counter{0};  // names used once
}  // namespace

std::string default_cuda_arch() { return cuda::is_available() ? cuda::device_arch(0) : "sm_90"; }

// -lineinfo: ncu and compute-sanitizer then point at lines of the generated source.
// MINI_NVRTC_OPTIONS, where set (even empty), replaces them: NVRTC options separated by spaces,
// for measuring what an option costs or saves (bench_cuda_inductor.py --nvrtc-variants).
std::vector<std::string> cuda_compile_options() {
  const char* env = std::getenv("MINI_NVRTC_OPTIONS");
  if (!env) return {"-lineinfo"};
  std::vector<std::string> options;
  std::istringstream words(env);
  for (std::string w; words >> w;) options.push_back(w);
  return options;
}

std::shared_ptr<CudaProgram> compile_cuda(const std::string& source, const std::string& arch_in,
                                          const std::string& cache_dir) {
  auto start = std::chrono::steady_clock::now();
  if (!nvrtc::available()) fail("cannot compile CUDA code: ", nvrtc::unavailable_reason());
  auto p = std::make_shared<CudaProgram>();
  p->arch = arch_in.empty() ? default_cuda_arch() : arch_in;
  std::vector<std::string> options = cuda_compile_options();
  std::string described = source + "||nvrtc " + nvrtc::version() + "||" + p->arch;
  for (const std::string& o : options) described += "||" + o;
  p->key = hex_hash(described);
  std::string dir = usable_cache_dir(cache_dir.empty() ? "/tmp/mini-cache" : cache_dir, &p->warnings);
  p->path = dir + "/" + p->key + ".cubin";
  std::string bytes;
  if (check_entry(p->path, p->key, &p->rejected, bytes)) {
    p->from_disk_cache = true;
    p->cubin = bytes.substr(0, bytes.size() - trailer_bytes());
  } else {
    try {
      p->cubin = nvrtc::compile(source, "generated_" + p->key + ".cu", p->arch, options, &p->log);
    } catch (const Error& e) {  // the source NVRTC refused, kept for reading beside the message
      std::string kept = dir + "/" + p->key + ".refused.cu";
      std::ofstream(kept) << source;
      fail(e.what(), "\n(the generated source: ", kept, ")");
    }
    std::string tmp = cat(dir, "/", p->key, ".", getpid(), ".", g_counter++, ".cubin");
    write_file(tmp, p->cubin);  // a full disk says so, with the folder and the fix
    publish_entry(tmp, p->path, p->key);
    std::ofstream(dir + "/" + p->key + ".cu") << source;  // beside the entry, for reading
  }
  p->compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return p;
}

void CudaProgram::load(const std::vector<std::string>& names) {
  if (!library) library = cuda::load_cubin(cubin, ("generated CUDA program " + key).c_str());
  for (const std::string& name : names)
    if (!kernels.count(name)) kernels[name] = cuda::cubin_kernel(library, name.c_str());
}

CudaProgram::~CudaProgram() { cuda::unload_cubin(library); }

}  // namespace mini::runtime
