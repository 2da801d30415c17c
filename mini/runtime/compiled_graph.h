// compiled_graph.h — running generated C++: compile the source with the system compiler into a
// shared object, cache it on disk, dlopen it, and execute a Schedule.
//
// In:  a Schedule and its rendered source, as the inductor made them (mini/inductor/compile_fx.h).
// Out: a CompiledGraph whose run() takes the graph's inputs and returns its outputs.
// Guarantees:
//  * the .so is cached under `cache_dir`, keyed by a hash of the source and the compiler
//    command, so an identical graph in a new process loads without compiling;
//  * a cache entry is checked before dlopen (a trailer holds its key, size and a checksum of
//    the library), so a truncated, garbage or misplaced file is compiled again, never loaded;
//  * entries are written under a name of their own and renamed into place: a file another
//    process may have mapped is never changed;
//  * a cache_dir that cannot hold files becomes a temporary folder, with a warning once;
//  * a large source compiles as several translation units side by side, one per core
//    (MINI_COMPILE_THREADS caps them), linked into the one library of the entry;
//  * symbolic sizes are kernel arguments: one compiled graph serves every size;
//  * every generated kernel run counts in metrics (launches, bytes of its loads and stores);
//  * the compiler runs without a shell: any character in the cache folder's name is safe;
//  * the key names the CPU's features too (-march=native), so a folder shared by machines of
//    different CPUs never loads a library built for another CPU;
//  * a missing, failing or killed compiler or a full disk is a mini::Error naming the command,
//    its output and the fix (a compiler killed by SIGINT, or Ctrl-C while it runs, is an
//    Interrupted one: KeyboardInterrupt); generated code that does not compile is one naming
//    the kernel, the compiler's first error, the source and the fallbacks (backend="eager",
//    mini.config.suppress_errors).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "fusion/schedule.h"

namespace mini::runtime {

using KernelFn = void (*)(char* const* buffers, const int64_t* const* strides, const int64_t* symbols);

struct CompiledGraph {
  fusion::Schedule schedule;
  std::string source;
  std::string library_path;
  bool from_disk_cache = false;
  std::string rejected;  // why the disk cache's entry for this graph was compiled again ("": none, or it was used)
  std::vector<std::string> warnings;  // for the user, once per process (an unusable cache_dir)
  double compile_seconds = 0;  // codegen + compiler + dlopen
  // compile_seconds by stage (labs/bench/bench_compile.py): decompose + fusion + buffer plan,
  // rendering the C++ source, and the C++ compiler + dlopen (0 for a disk-cache hit)
  double schedule_seconds = 0, codegen_seconds = 0, cxx_seconds = 0;
  int compile_units = 0;  // translation units compiled side by side (0: loaded from the cache)
  std::vector<KernelFn> kernels;  // one per FusionGroup
  std::vector<std::string> functions;  // per FusionGroup: the function it runs (render_cpp: one per body)
  std::vector<std::vector<int>> frees;  // per step: the buffers no later step reads
  void* handle = nullptr;

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
};

// Compiles cg's source with the system compiler into one shared object (unless the code cache
// under `cache_dir` holds it), loads it and finds each kernel (cg->schedule.groups' names):
// fills library_path, from_disk_cache, rejected, warnings, compile_units, kernels, frees and
// cxx_seconds. The inductor (mini/inductor/compile_fx.h) made the schedule and the source.
void build_library(CompiledGraph* cg, const std::string& cache_dir);

// The step profiler (mini.profiler): while on, every CPU compiled graph's run times each of its
// steps, a generated kernel by its name, an extern op (a matmul) by its op and operand shapes,
// and adds them up across calls. Off by default: one branch a step when off.
struct StepProfile {
  std::string name;   // cpp_poi_fused_add_relu_0, or "extern mm [256, 1024] x [1024, 1024]"
  std::string graph;  // the library the kernel is in (its cache key), "" for an extern op
  int64_t calls = 0;
  double seconds = 0;
  int64_t bytes = 0;  // operands read + outputs written, as mini.metrics counts them
};
void set_profiling(bool on);
bool profiling();
std::vector<StepProfile> profile_entries();  // in the order first seen
void reset_profile();

// Test hook: the next generated source gets a line that is not C++ in its first kernel, so
// tests reach the report of a code generation bug (mini._C._inject_codegen_error()).
void inject_codegen_error();

// The compiler's argument vector: CXX (or c++) split on whitespace, then mini's flags. It is
// run without a shell (posix_spawnp), the paths of sources, outputs and logs added as words.
std::vector<std::string> compiler_words();
// compiler_words() joined by spaces, for cache keys and messages.
std::string compiler_command();

// Asked while the compiler runs, from the thread that waits for it: true when the process was
// interrupted (the Python module's asks PyErr_CheckSignals, which leaves KeyboardInterrupt, or
// what a signal handler raised, pending). The compile then kills its compilers and throws an
// Error of kind Interrupted; a compiler that died of SIGINT throws one too.
using InterruptCheck = bool (*)();
void set_interrupt_check(InterruptCheck check);

}  // namespace mini::runtime
