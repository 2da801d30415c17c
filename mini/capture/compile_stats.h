// compile_stats.h — what the frame hook did with the frames it saw, and where compile time went,
// stage by stage (mini.compiler.stats(); torch's counters and compile_times()). Counted since
// the last mini.compiler.reset_stats() (or mini.reset()).
//
// Frames: every frame that starts while a compiled function runs is *seen*; it is *skipped*
// (run by CPython untouched, with the reason: mini's own code, a module body, no tensors, ...)
// or *captured*: run unit by unit, each unit a cache hit, a compile, or run natively (with the
// reason: capture cannot trace it, the cache size limit, inputs that alias differently).
//
// Stages, in the order a compile runs them (seconds summed over compiles, and how many):
//   capture     symbolic bytecode evaluation into a graph, collecting its guards
//   joint graph AOT: the joint forward/backward graph and its partition (training graphs)
//   fusion      decompositions, the fusion scheduler, the buffer plan
//   codegen     rendering C++ or CUDA source
//   compile     the C++ compiler (and dlopen), or NVRTC
//   disk cache  a compile served by the on-disk kernel cache instead (reading, checking, loading)
//   first run   an artifact's first call (allocations, first-touch, lazy CUDA module loads); a
//               training graph's forward and, inside backward(), its backward: two
// Guard checks are not a compile stage: a lookup that hits costs guards, nothing else
// (labs/bench/bench_cache_hit.py measures it).
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mini::capture {

enum class Stage { Capture, JointGraph, Fusion, Codegen, Compile, DiskCache, FirstRun, kCount };
const char* stage_name(Stage s);

struct StageTotal {
  double seconds = 0;
  long count = 0;
};

struct CompileStats {
  long frames_seen = 0, frames_captured = 0;
  // reason -> frames; the reasons are string literals, counted by address: a skipped frame (most
  // frames a compiled call starts are mini's own) costs no string and no map lookup
  std::vector<std::pair<const char*, long>> frames_skipped;
  void skipped(const char* why) {
    for (auto& [reason, n] : frames_skipped)
      if (reason == why) return void(n++);
    frames_skipped.emplace_back(why, 1);
  }
  long cache_hits = 0, compiles = 0, recompiles = 0;
  long entries_checked = 0;  // entries whose guards a lookup ran (a hit at depth d checks d)
  long evictions = 0;        // entries a cache policy dropped to make room
  std::map<std::string, long> units_run_natively;  // reason -> unit runs
  StageTotal stages[int(Stage::kCount)];
  void add(Stage s, double seconds) {
    stages[int(s)].seconds += seconds;
    stages[int(s)].count += 1;
  }
};

// Under the GIL, as the hook and the compiles run.
CompileStats& compile_stats();
void reset_compile_stats();

// Adds the time from its construction to stop() (or its end) to a stage, once.
class StageTimer {
 public:
  explicit StageTimer(Stage s) : stage_(s), start_(std::chrono::steady_clock::now()) {}
  ~StageTimer() { stop(); }
  void stop() {
    if (done_) return;
    done_ = true;
    compile_stats().add(stage_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  Stage stage_;
  std::chrono::steady_clock::time_point start_;
  bool done_ = false;
};

}  // namespace mini::capture
