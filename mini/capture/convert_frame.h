// convert_frame.h — the driver: what happens to a frame that enters a compiled region
// (Dynamo's convert_frame + eval_frame callback).
//
// On each frame: skip it (mini's own code, generators, frames without tensors), or run it
// unit by unit (convert_frame.cpp: on_frame). For each unit, lookup_or_compile looks up its
// UnitCache; on a hit it runs the stored artifact; on a miss it traces the unit, hands the
// graph to the backend and stores a new CacheEntry at the front. run_unit runs the artifact
// and rebuilds the frame; at a graph break resume_after_break runs the breaking instruction
// and the next unit starts after it. Past the cache size limit, warn once and run the code
// eagerly from then on. What capture cannot trace runs eagerly with the reason logged (or
// raises, under fullgraph=True).
#pragma once
#include <Python.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "capture/compile_stats.h"
#include "capture/tracer.h"
#include "guards/cache.h"

namespace mini::capture {

// A graph compiled by a built-in compiler backend (inductor): runs the graph's inputs to
// its outputs. Set by the Python module, which sees every stage.
using GraphRunner = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using GraphCompiler = GraphRunner (*)(const graph::Graph& graph, const std::string& title, const std::string& mode);
extern GraphCompiler g_inductor;
// A graph whose inputs require grad, for "aot_eager" (inductor = false) or "inductor": the
// joint forward/backward graph, partitioned, each half run by the interpreter or compiled
// (mini/autograd). Returns an empty runner (after logging why) when the graph cannot be
// differentiated as a graph; it then runs with eager kernels, which record autograd.
using TrainingCompiler = GraphRunner (*)(const graph::Graph& graph, const std::string& title, bool inductor);
extern TrainingCompiler g_training;

struct CompileConfig {
  std::string cache_dir;
  int cache_size_limit = 8;
  bool automatic_dynamic_shapes = true;
  bool capture_scalar_outputs = false;
  bool suppress_errors = false;  // a graph inductor fails to compile runs eagerly, with a warning
  std::string partitioner = "recompute";  // inductor's training graphs: "recompute" or "min-cut"
  // F.scaled_dot_product_attention in a graph: one fused node ("auto": where FlashAttention runs;
  // "always": wherever the fused kernel does; "never": its matmuls and softmax)
  std::string fused_attention = "auto";
};
CompileConfig& compile_config();

// MINI_LOGS channels.
struct LogChannels {
  bool graph_breaks = false, recompiles = false, guards = false, graph_code = false,
       dynamic = false, output_code = false, fusion = false, aot_graphs = false;
};
LogChannels& log_channels();
void log_write(const std::string& text);  // to Python's sys.stderr

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

// One mini.compile(...) wrapper's settings, active while its function runs.
struct CompileRequest {
  PyObject* backend = nullptr;  // a Python callable, or nullptr for a built-in backend
  bool inductor = false;        // built-in "inductor": fuse, generate C++, compile
  bool aot = false;             // built-in "aot_eager": training graphs, run by the interpreter
  PyObject* backend_key = nullptr;  // identity of the backend for cache entries (not owned)
  bool fullgraph = false;
  int dynamic = -1;  // -1 None, 0 False, 1 True
  std::string mode = "default";  // "reduce-overhead": CUDA graphs; "max-autotune": layouts timed
};

void enter_compiled_region(CompileRequest* request);
void exit_compiled_region();

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

// mini.reset()
void reset_all();

// The exception type raised under fullgraph=True (mini.Unsupported), set by the module.
extern PyObject* g_unsupported_error;
// Files under this prefix are mini's own: never captured.
extern std::string g_skip_prefix;

// The compiled form of one resume unit.
struct Artifact : guards::CompiledArtifact {
  std::shared_ptr<graph::Graph> graph;
  std::vector<SourceRef> input_sources;
  std::vector<bool> scalar_inputs;  // input i is a Python number passed as a 0-d tensor
  std::vector<std::pair<int, int>> input_mutations;  // Trace::input_mutations
  PyObject* compiled_fn = nullptr;  // the backend's callable (owned), or null: run_graph
  std::string backend_label;        // "backend 'name'", for errors about what compiled_fn returns
  GraphRunner compiled;             // inductor's generated code, or empty
  Trace::Exit exit = Trace::Exit::Return;
  OutputSpec output;                // Return
  Instruction exit_instruction{};   // Break / Native
  std::vector<OutputSpec> exit_stack, exit_locals;
  PyObject* exit_kw_names = nullptr;  // Borrowed from the code's constants
  int native_resume_offset = -1;      // Trace::native_resume_offset
  std::vector<SideEffect> side_effects;  // replayed after the graph runs
  bool grad_enabled_after = true;     // see Trace
  int grad_enabled_on_raise = -1;
  std::string break_reason;           // Skip: why CPython runs the unit
  mutable bool ran = false;           // called once already (compile_stats' first run)
  ~Artifact() override { Py_XDECREF(compiled_fn); }
};

// Sets the Python error for a mini::Error (the exception torch would raise).
void set_python_error(const std::exception& e);

// A Python int (Borrowed) as int64; throws mini::Error (a RuntimeError, as eager ops and
// torch raise) when it is outside int64.
int64_t python_int64(PyObject* number);
// A Python int or float (Borrowed) as the 0-d "wrapped number" tensor eager ops make of it:
// int64 exactly, or float64. Throws as python_int64 does.
Tensor wrapped_number_tensor(PyObject* number);

}  // namespace mini::capture
