// compiled_graph.cpp — compiling generated C++ with the system compiler into a shared
// object, cached on disk under a hash of the source and the command (each entry checked
// before it is loaded), loading it, and running a compiled graph.
#include "runtime/compiled_graph.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
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
#include "runtime/code_cache.h"
#include "runtime/compiled_cuda_graph.h"
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
    try {
      write_file(copy, bytes.substr(0, bytes.size() - trailer_bytes()));
    } catch (const Error& e) {  // a full disk: said with the folder and the fix
      *why = cat("cannot be copied for loading: ", e.what());
      return false;
    }
    handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    *why = handle ? "" : cat("does not load: ", dlerror());
    std::remove(copy.c_str());
    if (!handle) return false;
  }
  std::vector<KernelFn> kernels;
  for (const std::string& name : cg.functions) {
    auto fn = (KernelFn)dlsym(handle, name.c_str());
    if (!fn) {
      *why = cat("has no kernel ", name);
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

InterruptCheck g_interrupted = nullptr;

// Starts the compiler, `words` (compiler_words()) then `args`, with stdout and stderr to `log`.
// No shell: every path mini passes (the cache folder, sources, outputs, logs) is one word of
// the argument vector or a file action, whatever characters it holds. The child starts with
// every signal at its default (Python ignores SIGPIPE, which exec would keep), in a process
// group of its own, which an interrupted wait kills whole (the driver and its cc1plus, as and
// ld). Returns the child's pid, or -errno when it cannot be started (ENOENT: no such compiler).
pid_t spawn_compiler(const std::vector<std::string>& words, const std::vector<std::string>& args,
                     const std::string& log) {
  std::vector<char*> argv;
  for (const auto* list : {&words, &args})
    for (const std::string& w : *list) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  int err = posix_spawnp(&pid, argv[0], &files, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  return err ? -err : pid;
}

// Waits for the compilers `pids` (a negative one, which did not start, stays as it is) and
// returns their wait statuses. While they run, the interrupt check is asked every 1 ms at
// first, then less often up to every 20 ms; when the process was interrupted, the compilers'
// process groups are killed, the compilers reaped and an Interrupted error thrown.
std::vector<int> wait_compilers(const std::vector<pid_t>& pids) {
  std::vector<int> statuses(pids.begin(), pids.end());
  std::vector<bool> running(pids.size());
  for (size_t i = 0; i < pids.size(); i++) running[i] = pids[i] > 0;
  for (int delay_ms = 1; std::count(running.begin(), running.end(), true); delay_ms = std::min(2 * delay_ms, 20)) {
    for (size_t i = 0; i < pids.size(); i++) {
      pid_t r = running[i] ? waitpid(pids[i], &statuses[i], g_interrupted ? WNOHANG : 0) : 0;
      if (r == pids[i] || (r < 0 && errno != EINTR)) running[i] = false;
    }
    if (!std::count(running.begin(), running.end(), true)) break;
    if (g_interrupted && g_interrupted()) {
      for (size_t i = 0; i < pids.size(); i++)
        if (running[i]) kill(-pids[i], SIGKILL), waitpid(pids[i], nullptr, 0);
      throw Error(Error::Kind::Interrupted, "interrupted while the C++ compiler ran");
    }
    if (g_interrupted) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
  return statuses;
}

// Runs the compiler on `source` (written to `src`), writing `out`; its output goes to `log`.
// Returns its wait status, or -errno when it could not be started.
int run_compiler(const std::vector<std::string>& words, const std::string& source, const std::string& src,
                 const std::string& out, const std::string& log) {
  write_file(src, source);
  return wait_compilers({spawn_compiler(words, {src, "-o", out}, log)})[0];
}

// Compiles a large source as several translation units at once (split_source), each to an
// object file by a compiler of its own, and links them: GCC's time grows with the code of one
// unit, and a machine with cores to spare compiles the units side by side (Inductor compiles
// its kernels in a pool of workers for the same reason). Returns the wait status of the first
// unit that failed (its output then in `log`) or of the link; the caller compiles the whole
// source once more for the report of a unit the compiler rejected.
int compile_units(const std::vector<std::string>& words, const std::vector<std::string>& units,
                  const std::string& stem, const std::string& out, const std::string& log) {
  auto unit = [&](size_t i, const char* ext) { return cat(stem, ".u", i, ext); };
  auto remove_units = [&] {
    for (size_t i = 0; i < units.size(); i++)
      for (const char* ext : {".cpp", ".o", ".log"}) std::remove(unit(i, ext).c_str());
  };
  std::vector<pid_t> pids;
  std::vector<std::string> link = {"-o", out};
  try {
    for (size_t i = 0; i < units.size(); i++) write_file(unit(i, ".cpp"), units[i]);
    for (size_t i = 0; i < units.size(); i++) {
      pids.push_back(spawn_compiler(words, {"-c", unit(i, ".cpp"), "-o", unit(i, ".o")}, unit(i, ".log")));
      link.push_back(unit(i, ".o"));
    }
    std::vector<int> statuses = wait_compilers(pids);
    int rc = 0;
    for (size_t i = 0; i < units.size() && rc == 0; i++)
      if ((rc = statuses[i]) != 0) std::rename(unit(i, ".log").c_str(), log.c_str());
    if (rc == 0) rc = wait_compilers({spawn_compiler(words, link, log)})[0];
    remove_units();
    return rc;
  } catch (...) {
    remove_units();
    throw;
  }
}

// How many units to compile `source` as: one per compile thread (compile_threads), past about 24 KB of kernels each (below that the prelude every
// unit repeats costs more than the split saves).
int compile_jobs(const std::string& source) {
  size_t kernels = source.size() - std::min(source.size(), source.find(codegen::kPreludeEnd));
  return std::max(1, std::min(compile_threads(), (int)(kernels / (24 << 10))));
}

// The report of a failed compile: a compiler that is missing, was killed by a signal (Ctrl-C:
// an Interrupted error, Python's KeyboardInterrupt), ran out of disk or fails on mini's
// prelude alone (a problem of the machine), or one that rejects a kernel (a bug in mini's
// code generation).
[[noreturn]] void compile_failed(const CompiledGraph& cg, const std::vector<std::string>& words, int rc,
                                 std::string out, const std::string& stem, const std::string& src) {
  std::remove((stem + ".so").c_str());
  std::remove((stem + ".log").c_str());
  for (size_t at; (at = out.find(stem + ".cpp")) != std::string::npos;) out.replace(at, stem.size() + 4, src);
  if (out.size() > 2000) out = out.substr(0, 2000) + "...";
  std::string fallback = "To run meanwhile: mini.compile(fn, backend='eager'), or mini.config.suppress_errors = True "
                         "(each graph that fails to compile runs eagerly, with a warning).";
  std::string command = compiler_command();
  if (rc == -ENOENT)
    fail("no C++ compiler for generated code: `", words[0], "` was not found. Install g++ (apt-get install g++) "
         "or set CXX to a compiler. ", fallback, "\n", out);
  if (rc < 0)
    fail("the C++ compiler `", words[0], "` cannot be started: ", strerror(-rc), ". Set CXX to a compiler. ", fallback);
  if (WIFSIGNALED(rc) && WTERMSIG(rc) == SIGINT) {
    if (g_interrupted) g_interrupted();  // the SIGINT the process got too (Ctrl-C) is the one raised
    throw Error(Error::Kind::Interrupted, "the C++ compiler was interrupted (SIGINT)");
  }
  if (WIFSIGNALED(rc))
    fail("the C++ compiler was killed by signal ", WTERMSIG(rc), " (", strsignal(WTERMSIG(rc)), ") while compiling ",
         src, ": something outside mini stopped it (the kernel's OOM killer when memory ran out: SIGKILL; a "
         "time limit; a user), not a problem of the generated code. Compile again with more memory free, or "
         "fewer units at once (MINI_COMPILE_THREADS=1). ", fallback, "\nIts output:\n", out.empty() ? "(none)\n" : out);
  if (out.find(strerror(ENOSPC)) != std::string::npos)
    fail("the C++ compiler ran out of disk: ", write_failure(src, ENOSPC), " ", fallback, "\nIts output:\n", out);
  std::string prelude = cg.source.substr(0, cg.source.find(codegen::kPreludeEnd));
  int probe = run_compiler(words, prelude, stem + ".probe.cpp", stem + ".probe.so", stem + ".probe.log");
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
//
// CXX is split on whitespace into words, as make and CMake read it: it may name a launcher
// and a compiler ("ccache g++") or hold options ("g++ -g"). No quoting is understood; a
// compiler whose path holds a space is reached through PATH or a link.
std::vector<std::string> compiler_words() {
  const char* cxx = getenv("CXX");
  std::vector<std::string> words;
  std::istringstream in(cxx ? cxx : "");
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) words = {"c++"};
  for (const char* flag :
       {"-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-std=c++17", "-shared", "-fPIC"})
    words.push_back(flag);
  return words;
}

std::string compiler_command() {
  std::string command;
  for (const std::string& w : compiler_words()) command += (command.empty() ? "" : " ") + w;
  return command;
}

// The CPU the kernels are compiled for, as -march=native stands for it: /proc/cpuinfo's
// vendor, family, model and feature flags of the first processor (x86's "flags", Arm's
// "Features" and part numbers). Read once per process. MINI_CPU_FEATURES, where set, replaces
// it (a test's other CPU, or a cluster's own name for one kind of machine).
static const std::string& cpu_features() {
  static const std::string features = [] {
    if (const char* env = getenv("MINI_CPU_FEATURES")) return std::string(env);
    std::ifstream in("/proc/cpuinfo");
    std::string described;
    for (std::string line; std::getline(in, line) && !line.empty();) {  // the first processor's block
      std::string key = line.substr(0, line.find_first_of("\t:"));
      for (const char* k : {"vendor_id", "cpu family", "model", "model name", "flags", "CPU implementer",
                            "CPU architecture", "CPU variant", "CPU part", "Features"})
        if (key == k) described += line + "\n";
    }
    return described;
  }();
  return features;
}

void set_interrupt_check(InterruptCheck check) { g_interrupted = check; }

void build_library(CompiledGraph* cg, const std::string& cache_dir) {
  auto start = std::chrono::steady_clock::now();
  if (!cg->schedule.groups.empty() && g_inject_codegen_error.exchange(false)) {  // a test's code generation bug
    size_t body = cg->source.find('{', cg->source.find(" " + cg->schedule.groups[0].name + "("));
    cg->source.insert(body + 1, "\n  mini_injected_error;");
  }
  if (!cg->schedule.groups.empty()) {
    std::vector<std::string> words = compiler_words();
    std::string key = hex_hash(cg->source + "||" + compiler_command() + "||" + cpu_features());
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
      cg->compile_units = (int)units.size();
      try {
        int rc = units.size() > 1 ? compile_units(words, units, stem, tmp, log) : -1;  // -1: not yet compiled
        bool killed = rc > 0 && WIFSIGNALED(rc);  // not compiled again: the report says who stopped it
        if (rc == 0 || killed)
          write_file(stem + ".cpp", cg->source);
        else
          rc = run_compiler(words, cg->source, stem + ".cpp", tmp, log);
        std::rename((stem + ".cpp").c_str(), src.c_str());  // kept beside the entry, for reading
        if (rc != 0) compile_failed(*cg, words, rc, read_file(log), stem, src);
        std::remove(log.c_str());
        publish_entry(tmp, lib, key);
      } catch (...) {  // this compile's files go with it (an interrupt, a full disk, a failure)
        for (const std::string& f : {stem + ".cpp", tmp, log}) std::remove(f.c_str());
        throw;
      }
      std::string why;
      if (!load_entry(*cg, lib, key, &why)) fail("cannot load generated kernels: ", lib, " ", why);
    }
  }
  cg->frees = plan_frees(cg->schedule);  // what to release after each step, decided once here
  cg->cxx_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
      run_extern(g, st, args, symbols, values);
      if (timed) record_step(extern_label(n, args), "", seconds(), metrics().bytes_moved - before);
    }
    for (int id : frees[si]) values[id].reset();  // what no later step reads
  }
  std::vector<Tensor> out;
  for (int o : g.outputs) out.push_back(values[o] ? values[o] : g.nodes[o].constant);
  return out;
}

}  // namespace mini::runtime
