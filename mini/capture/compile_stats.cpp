// compile_stats.cpp — the counters of compile_stats.h.
#include "capture/compile_stats.h"

namespace mini::capture {

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::Capture: return "capture";
    case Stage::JointGraph: return "joint graph";
    case Stage::Fusion: return "fusion";
    case Stage::Codegen: return "codegen";
    case Stage::Compile: return "compile";
    case Stage::DiskCache: return "disk cache";
    case Stage::FirstRun: return "first run";
    case Stage::kCount: break;
  }
  return "?";
}

namespace {
CompileStats g_stats;
}

CompileStats& compile_stats() { return g_stats; }
void reset_compile_stats() { g_stats = CompileStats{}; }

}  // namespace mini::capture
