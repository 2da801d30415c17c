// compiled_graph.cpp — compiling generated C++ with the system compiler into a shared
// object, cached on disk under a hash of the source and the command (each entry checked
// before it is loaded), loading it, and running a compiled graph.
#include "runtime/compiled_graph.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/c_style.h"
#include "codegen/cpp_kernel.h"
#include "runtime/cache_entry.h"
#include "runtime/cuda_graph.h"
#include "tensor/metrics.h"

namespace mini::runtime {

namespace {

std::atomic<bool> g_inject_codegen_error{false};
std::atomic<int> g_temp_counter{0};  // for names used once

// Checks and loads the entry at `lib` into cg (handle and kernels); false with `why` set when
// it is missing (why empty), fails a check, or does not load.
bool load_entry(CompiledGraph& cg, const std::string& lib, const std::string& key, std::string* why) {
  static std::mutex mu;
  static std::map<std::string, void*> loaded;  // entry -> the library this process loaded from it
  void* handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (loaded.count(lib)) handle = loaded[lib];
  }
  if (!handle) {
    std::string bytes;
    if (!check_entry(lib, key, why, bytes)) return false;
    // dlopen maps a copy of the bytes just checked, made under a name used once and unlinked
    // at once: what runs is what was checked, a later change to the entry's file (even in
    // place, which would SIGBUS a process mapping it) cannot reach this process, and glibc's
    // dlopen, which hands back any object already loaded under the same path or inode, never
    // answers with an older library.
    std::string copy = cat(lib.substr(0, lib.size() - 3), ".", getpid(), ".", g_temp_counter++, ".load.so");
    std::ofstream out(copy, std::ios::binary);
    out.write(bytes.data(), (std::streamsize)(bytes.size() - trailer_bytes()));
    out.close();
    if (!out.fail()) handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    *why = out.fail() ? cat("cannot be copied to ", copy, " for loading") : handle ? "" : cat("does not load: ", dlerror());
    std::remove(copy.c_str());
    if (!handle) return false;
  }
  std::vector<KernelFn> kernels;
  for (const auto& k : cg.schedule.groups) {
    auto fn = (KernelFn)dlsym(handle, k.name.c_str());
    if (!fn) {
      *why = cat("has no kernel ", k.name);
      return false;
    }
    kernels.push_back(fn);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    loaded[lib] = handle;
  }
  cg.handle = handle;
  cg.kernels = std::move(kernels);
  return true;
}

// Runs the compiler on `source`, writing `out`; its output goes to `log`. Returns the shell's status.
int run_compiler(const std::string& command, const std::string& source, const std::string& src,
                 const std::string& out, const std::string& log) {
  { std::ofstream(src) << source; }
  return std::system((command + " " + src + " -o " + out + " > " + log + " 2>&1").c_str());
}

// Compiles a large source as several translation units at once (split_source), each to an
// object file on its own thread, and links them: GCC's time grows with the code of one unit,
// and a machine with cores to spare compiles the units side by side (Inductor compiles its
// kernels in a pool of workers for the same reason). Returns false when a unit fails, and
// the caller compiles the whole source once more for the report.
bool compile_units(const std::string& command, const std::vector<std::string>& units, const std::string& stem,
                   const std::string& out, const std::string& log) {
  std::vector<int> rcs(units.size(), -1);
  std::vector<std::thread> workers;
  std::string objects;
  for (size_t i = 0; i < units.size(); i++) {
    std::string unit = cat(stem, ".u", i);
    objects += " " + unit + ".o";
    workers.emplace_back([&, i, unit] { rcs[i] = run_compiler(command + " -c", units[i], unit + ".cpp", unit + ".o", unit + ".log"); });
  }
  for (auto& w : workers) w.join();
  bool ok = std::all_of(rcs.begin(), rcs.end(), [](int rc) { return rc == 0; }) &&
            std::system((command + objects + " -o " + out + " > " + log + " 2>&1").c_str()) == 0;
  for (size_t i = 0; i < units.size(); i++)
    for (const char* ext : {".cpp", ".o", ".log"}) std::remove(cat(stem, ".u", i, ext).c_str());
  return ok;
}

// How many units to compile `source` as: one per core (at most 8, or MINI_COMPILE_THREADS,
// as torch's compile_threads), past about 24 KB of kernels each (below that the prelude every
// unit repeats costs more than the split saves).
int compile_jobs(const std::string& source) {
  size_t kernels = source.size() - std::min(source.size(), source.find(codegen::kPreludeEnd));
  int threads = (int)std::min(8u, std::thread::hardware_concurrency());
  if (const char* env = getenv("MINI_COMPILE_THREADS")) threads = atoi(env);
  return std::max(1, std::min(threads, (int)(kernels / (24 << 10))));
}

// The report of a failed compile: a compiler that is missing or fails on mini's prelude alone
// (a problem of the machine), or one that rejects a kernel (a bug in mini's code generation).
[[noreturn]] void compile_failed(const CompiledGraph& cg, const std::string& command, int rc, std::string out,
                                 const std::string& stem, const std::string& src) {
  std::remove((stem + ".so").c_str());
  std::remove((stem + ".log").c_str());
  for (size_t at; (at = out.find(stem + ".cpp")) != std::string::npos;) out.replace(at, stem.size() + 4, src);
  if (out.size() > 2000) out = out.substr(0, 2000) + "...";
  std::string fallback = "To run meanwhile: mini.compile(fn, backend='eager'), or mini.config.suppress_errors = True "
                         "(each graph that fails to compile runs eagerly, with a warning).";
  std::string compiler = command.substr(0, command.find(' '));
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127)  // the shell found no compiler
    fail("no C++ compiler for generated code: `", compiler, "` was not found. Install g++ (apt-get install g++) "
         "or set CXX to a compiler. ", fallback, "\n", out);
  std::string prelude = cg.source.substr(0, cg.source.find(codegen::kPreludeEnd));
  int probe = run_compiler(command, prelude, stem + ".probe.cpp", stem + ".probe.so", stem + ".probe.log");
  for (const char* ext : {".probe.cpp", ".probe.so", ".probe.log"}) std::remove((stem + ext).c_str());
  if (probe != 0)
    fail("the C++ compiler fails: `", command, " ", src, " -o <library>` exited with status ",
         WIFEXITED(rc) ? WEXITSTATUS(rc) : rc, " and fails the same on mini's prelude alone, so the compiler "
         "or its setup is at fault, not the generated code. Fix the compiler or set CXX to one that works. ",
         fallback, "\nIts output:\n", out.empty() ? "(none)\n" : out);
  // The first error and the two lines after it (the source line and gcc's caret), and the
  // kernel whose definition holds that line.
  size_t first = out.find("error:");
  size_t begin = first == std::string::npos ? 0 : out.rfind('\n', first) + 1, end = begin;
  for (int lines = 0; lines < 3 && end != std::string::npos; lines++) end = out.find('\n', end + 1);
  std::string first_error = out.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  std::string kernel = "(outside any kernel)";
  size_t at = first_error.find(src + ":");
  if (at != std::string::npos) {
    long line = atol(first_error.c_str() + at + src.size() + 1);
    size_t best = 0;
    for (const auto& k : cg.schedule.groups) {
      size_t def = cg.source.find(" " + k.name + "(");
      long def_line = def == std::string::npos ? 0 : 1 + (long)std::count(cg.source.begin(), cg.source.begin() + def, '\n');
      if (def != std::string::npos && def_line <= line && def >= best) best = def, kernel = k.name;
    }
  }
  fail("mini generated C++ that does not compile, in kernel ", kernel, " (a bug in mini's code generation). "
       "The compiler's first error:\n", first_error, "\nThe source: ", src, "\n", fallback);
}

}  // namespace

// -mprefer-vector-width=512: GCC's tuning for Intel CPUs with AVX-512 uses 256-bit vectors
// unless told otherwise; generated kernels are where the arithmetic is, and the wider vectors
// ran chain8 27% faster on one core of a Sapphire Rapids (notes/perf.md). Ignored by CPUs
// without AVX-512, and already the default of GCC's AMD Zen 4/5 tuning.
std::string compiler_command() {
  const char* cxx = getenv("CXX");
  return std::string(cxx && *cxx ? cxx : "c++") +
         " -O3 -march=native -mprefer-vector-width=512 -fopenmp -std=c++17 -shared -fPIC";
}

std::shared_ptr<CompiledGraph> compile_graph(const graph::Graph& g, const std::string& cache_dir) {
  auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  require_known_sizes(g);
  auto cg = std::make_shared<CompiledGraph>();
  cg->schedule = fusion::schedule(g);
  codegen::name_kernels(cg->schedule, codegen::kCppTarget);
  cg->schedule_seconds = since(start);
  cg->source = codegen::render_cpp(cg->schedule);
  cg->codegen_seconds = since(start) - cg->schedule_seconds;
  if (!cg->schedule.groups.empty() && g_inject_codegen_error.exchange(false)) {  // a test's code generation bug
    size_t body = cg->source.find('{', cg->source.find(" " + cg->schedule.groups[0].name + "("));
    cg->source.insert(body + 1, "\n  mini_injected_error;");
  }
  metrics().generated_kernel_count += (int64_t)cg->schedule.groups.size();
  if (!cg->schedule.groups.empty()) {
    std::string command = compiler_command();
    std::string key = hex_hash(cg->source + "||" + command);
    std::string dir = usable_cache_dir(cache_dir.empty() ? "/tmp/mini-cache" : cache_dir, &cg->warnings);
    std::string lib = dir + "/" + key + ".so";
    cg->library_path = lib;
    cg->from_disk_cache = load_entry(*cg, lib, key, &cg->rejected);
    if (!cg->from_disk_cache) {
      // Files of this compile only (another process or thread may compile the same key), renamed
      // into place when whole: a file another process may have mapped is never rewritten.
      std::string stem = cat(dir, "/", key, ".", getpid(), ".", g_temp_counter++);
      std::string src = dir + "/" + key + ".cpp", tmp = stem + ".so", log = stem + ".log";
      std::vector<std::string> units = codegen::split_source(cg->source, cg->schedule, compile_jobs(cg->source));
      int rc = 0;
      cg->compile_units = (int)units.size();
      if (units.size() > 1 && compile_units(command, units, stem, tmp, log))
        std::ofstream(stem + ".cpp") << cg->source;
      else
        rc = run_compiler(command, cg->source, stem + ".cpp", tmp, log);
      std::rename((stem + ".cpp").c_str(), src.c_str());  // kept beside the entry, for reading
      if (rc != 0) compile_failed(*cg, command, rc, read_file(log), stem, src);
      std::remove(log.c_str());
      publish_entry(tmp, lib, key);
      std::string why;
      if (!load_entry(*cg, lib, key, &why)) fail("cannot load generated kernels: ", lib, " ", why);
    }
  }
  cg->frees = plan_frees(cg->schedule);  // what to release after each step, decided once here
  cg->compile_seconds = since(start);
  cg->cxx_seconds = cg->compile_seconds - cg->schedule_seconds - cg->codegen_seconds;
  return cg;
}

void inject_codegen_error() { g_inject_codegen_error = true; }

namespace {
std::atomic<bool> g_profiling{false};
std::mutex g_profile_mutex;  // compiled graphs may run on several Python threads at once
std::vector<StepProfile> g_profile;           // in the order first seen
std::map<std::string, size_t> g_profile_index;  // graph + name -> g_profile's index

void record_step(const std::string& name, const std::string& graph, double seconds, int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  auto [it, fresh] = g_profile_index.try_emplace(graph + "|" + name, g_profile.size());
  if (fresh) g_profile.push_back(StepProfile{name, graph});
  StepProfile& p = g_profile[it->second];
  p.calls += 1;
  p.seconds += seconds;
  p.bytes += bytes;
}

std::string extern_label(const graph::Node& n, const std::vector<Tensor>& args) {
  std::string label = cat("extern ", op_name(n.op));
  const char* sep = " ";
  for (const Tensor& a : args) {
    if (!a) continue;
    label += sep + shape_str(a->sizes);
    sep = " x ";
  }
  return label;
}
}  // namespace

void set_profiling(bool on) { g_profiling = on; }
bool profiling() { return g_profiling; }
std::vector<StepProfile> profile_entries() {
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  return g_profile;
}
void reset_profile() {
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  g_profile.clear();
  g_profile_index.clear();
}

std::vector<Tensor> CompiledGraph::run(const std::vector<Tensor>& inputs) const {
  const graph::Graph& g = schedule.graph;
  if (inputs.size() != g.inputs.size()) fail("compiled graph expects ", g.inputs.size(), " inputs, got ", inputs.size());
  std::vector<Tensor> values(g.nodes.size());
  for (size_t i = 0; i < inputs.size(); i++) values[g.inputs[i]] = inputs[i];
  std::vector<int64_t> symbols = g.symbol_values(inputs);
  std::vector<char*> buffers;
  std::vector<const int64_t*> strides;
  const bool timed = g_profiling;
  for (size_t si = 0; si < schedule.steps.size(); si++) {
    const fusion::Step& st = schedule.steps[si];
    auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    if (st.kind == fusion::StepKind::Kernel) {
      const fusion::FusionGroup& k = schedule.groups[st.group];
      buffers.clear();
      strides.clear();
      int64_t bytes = 0;
      for (int id : k.loads) {
        const Tensor& t = values[id] ? values[id] : g.nodes[id].constant;
        buffers.push_back((char*)t->raw());
        strides.push_back(t->strides.data());
        bytes += t->wrapped_number ? 0 : t->nbytes();
      }
      for (int id : k.stores) {
        values[id] = TensorImpl::empty(resolve_shape(g.nodes[id].meta.sizes, symbols), g.nodes[id].meta.dtype);
        buffers.push_back((char*)values[id]->raw());
        bytes += values[id]->nbytes();
      }
      kernels[st.group](buffers.data(), strides.data(), symbols.data());
      count_kernel(bytes);
      if (timed) record_step(k.name, library_path, seconds(), bytes);
    } else {
      const graph::Node& n = g.nodes[st.node];
      std::vector<Tensor> args;
      for (int i : n.inputs) args.push_back(i < 0 ? nullptr : values[i] ? values[i] : g.nodes[i].constant);
      int64_t before = metrics().bytes_moved;
      values[st.node] = run_extern(n, args, symbols);
      if (timed) record_step(extern_label(n, args), "", seconds(), metrics().bytes_moved - before);
    }
    for (int id : frees[si]) values[id].reset();  // what no later step reads
  }
  std::vector<Tensor> out;
  for (int o : g.outputs) out.push_back(values[o] ? values[o] : g.nodes[o].constant);
  return out;
}

}  // namespace mini::runtime
