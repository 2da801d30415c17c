// cuda_program.cpp — see cuda_program.h.
#include "runtime/cuda_program.h"

#include <cstdlib>
#include <sstream>

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <exception>
#include <fstream>
#include <set>
#include <thread>

#include "codegen/c_style.h"
#include "runtime/code_cache.h"
#include "runtime/nvrtc.h"
#include "tensor/cuda/cuda.h"
#include "tensor/tensor.h"

namespace mini::runtime {

namespace {
std::atomic<int> g_counter{0};  // names used once
std::atomic<int64_t> g_nvrtc_compiles{0}, g_disk_hits{0}, g_memory_hits{0};

// Every program compile_cuda_kernels made in this process, by "<cache folder>|<key>": the
// memory in front of that folder's CUBINs.
std::mutex g_programs_mutex;
std::map<std::string, std::shared_ptr<CudaProgram>> g_programs;

std::string program_key(const std::string& keyed_by, const std::string& arch, const std::vector<std::string>& options) {
  std::string described = keyed_by + "||nvrtc " + nvrtc::version() + "||" + arch;
  for (const std::string& o : options) described += "||" + o;
  return hex_hash(described);
}

// `text` with every whole-word `from` spelled `to`.
std::string renamed(std::string text, const std::string& from, const std::string& to) {
  auto word_char = [&](size_t at) { return at < text.size() && (std::isalnum((unsigned char)text[at]) || text[at] == '_'); };
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    if ((at > 0 && word_char(at - 1)) || word_char(at + from.size())) {
      at += from.size();
      continue;
    }
    text.replace(at, from.size(), to);
    at += to.size();
  }
  return text;
}
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
                                          const std::string& cache_dir, const std::string& keyed_by) {
  auto start = std::chrono::steady_clock::now();
  if (!nvrtc::available()) fail("cannot compile CUDA code: ", nvrtc::unavailable_reason());
  auto p = std::make_shared<CudaProgram>();
  p->arch = arch_in.empty() ? default_cuda_arch() : arch_in;
  std::vector<std::string> options = cuda_compile_options();
  p->key = program_key(keyed_by.empty() ? source : keyed_by, p->arch, options);
  std::string dir = usable_cache_dir(cache_dir.empty() ? "/tmp/mini-cache" : cache_dir, &p->warnings);
  p->path = dir + "/" + p->key + ".cubin";
  std::string bytes;
  if (check_entry(p->path, p->key, &p->rejected, bytes)) {
    g_disk_hits++;
    p->from_disk_cache = true;
    p->cubin = bytes.substr(0, bytes.size() - trailer_bytes());
  } else {
    g_nvrtc_compiles++;
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

CudaKernels compile_cuda_kernels(const std::string& prelude, const std::vector<std::string>& names,
                                 const std::vector<std::string>& texts, const std::string& arch_in,
                                 const std::string& cache_dir) {
  auto start = std::chrono::steady_clock::now();
  if (!nvrtc::available()) fail("cannot compile CUDA code: ", nvrtc::unavailable_reason());
  const std::string arch = arch_in.empty() ? default_cuda_arch() : arch_in;
  const std::vector<std::string> options = cuda_compile_options();
  struct Job {
    std::string key, body, source;
    std::vector<size_t> users;  // the kernels it serves
    std::shared_ptr<CudaProgram> program;
    std::exception_ptr error;
  };
  std::vector<Job> jobs;
  std::map<std::string, size_t> job_of;  // key -> its job
  CudaKernels out;
  out.arch = arch;
  out.cache_dir = cache_dir;
  std::vector<CudaKernel>& kernels = out.kernels;
  kernels.resize(texts.size());
  std::set<std::string> keys;
  for (size_t i = 0; i < texts.size(); i++) {
    std::string stem = names[i];  // cuda_red_fused_gelu_backward_sum_183 -> ..._sum
    size_t digits = stem.find_last_not_of("0123456789");
    if (digits + 1 < stem.size() && stem[digits] == '_') stem.resize(digits);
    std::string body = stem + "\n" + codegen::kernel_body(texts[i], names[i]);
    std::string key = program_key(body, arch, options);
    keys.insert(key);
    kernels[i].function = stem + "_" + key.substr(0, 8);
    {
      std::lock_guard<std::mutex> lock(g_programs_mutex);
      auto known = g_programs.find(cache_dir + "|" + key);
      if (known != g_programs.end()) {
        kernels[i].program = known->second;
        g_memory_hits++;
        continue;
      }
    }
    auto [at, fresh] = job_of.emplace(key, jobs.size());
    if (fresh) jobs.push_back({key, body, prelude + "\n" + renamed(texts[i], names[i], kernels[i].function), {}, nullptr, nullptr});
    else g_memory_hits++;  // a copy of a body this graph compiles once
    jobs[at->second].users.push_back(i);
  }
  // NVRTC programs are independent (NVRTC is thread-safe): one thread a program at a time
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t j; (j = next++) < jobs.size();) {
      try {
        jobs[j].program = compile_cuda(jobs[j].source, arch, cache_dir, jobs[j].body);
      } catch (...) {
        jobs[j].error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min(compile_threads(), (int)jobs.size()); t++) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (Job& job : jobs) {
    if (job.error) std::rethrow_exception(job.error);
    std::lock_guard<std::mutex> lock(g_programs_mutex);  // another graph's thread may have made it meanwhile
    auto kept = g_programs.emplace(cache_dir + "|" + job.key, job.program).first->second;
    for (size_t i : job.users) kernels[i].program = kept;
    out.nvrtc_runs += !job.program->from_disk_cache;
  }
  out.programs = (int)keys.size();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

CudaKernelCacheStats cuda_kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(g_programs_mutex);
  return {g_nvrtc_compiles.load(), g_disk_hits.load(), g_memory_hits.load(), (int64_t)g_programs.size()};
}

void CudaProgram::load(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(load_mutex_);
  if (!library) library = cuda::load_cubin(cubin, ("generated CUDA program " + key).c_str());
  for (const std::string& name : names)
    if (!kernels.count(name)) kernels[name] = cuda::cubin_kernel(library, name.c_str());
}

CudaProgram::~CudaProgram() { cuda::unload_cubin(library); }

}  // namespace mini::runtime
