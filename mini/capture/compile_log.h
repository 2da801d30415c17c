// compile_log.h — what mini tells about its compiles: the MINI_LOGS channels (log_write),
// the MINI_COMPILE_DEBUG folder (debug_write), and what explain() reads (the graphs compiled
// and the graph breaks). Any stage may write here; it depends on nothing of capture's.
#pragma once
#include <deque>
#include <memory>
#include <string>

#include "graph/graph.h"

namespace mini::capture {

// MINI_LOGS channels.
struct LogChannels {
  bool graph_breaks = false, recompiles = false, guards = false, graph_code = false,
       dynamic = false, output_code = false, fusion = false, aot_graphs = false, ddp = false;
};
LogChannels& log_channels();
void log_write(const std::string& text);  // to Python's sys.stderr
// A UserWarning (Python's warnings filters decide); where they make it an error, raises that
// error as a mini::Error.
void warn_user(const std::string& text);

// MINI_COMPILE_DEBUG=1: every artifact of every graph (captured graph, guards, graph break,
// joint, forward and backward graphs, fusion decisions, generated source) also goes to a file,
// ./mini_compile_debug/run_<date>_<time>-pid_<pid>/<graph title>/<name>, as torch's
// TORCH_COMPILE_DEBUG=1 writes torch_compile_debug/. On for 1, true, yes, on (any case); off
// when unset or 0, false, no, off, empty; any other value is off with a warning at import
// (compile_debug_warning). Callers check compile_debug() before building a text only the file
// would hold.
bool compile_debug();
const std::string& compile_debug_warning();  // "" when MINI_COMPILE_DEBUG is understood
void debug_write(const std::string& title, const std::string& name, const std::string& text);

// What explain() reads: the graphs compiled and the breaks since the last reset, the newest
// kMaxEvents of each (explain resets and reads back at once; a long run compiling many
// short-lived functions must not grow), and how many older ones were dropped.
struct CompileEvent {
  std::shared_ptr<graph::Graph> graph;
  std::string guards;      // the GuardSet, printed
  std::string function;    // "fn (file:line)"
};
struct BreakEvent {
  std::string reason;
  std::string location;    // "file:line in fn"
  std::string code;        // the user's source line
};
constexpr size_t kMaxEvents = 256;
std::deque<CompileEvent>& compile_events();
std::deque<BreakEvent>& break_events();
size_t dropped_events();
void clear_events();

void record_compile(CompileEvent event);
void record_break(BreakEvent event);
// The number of the next graph break's debug file (graph_breaks/break_<n>.txt): 1, 2, ... since
// the last reset.
size_t next_break_file();

}  // namespace mini::capture
