// unit.h — the parts of the frame driver (convert_frame.cpp) that act on one resume unit,
// each in a file of its own. Internal to capture/.
//   compile_unit.cpp       trace a unit and compile its graph; report its graph break
//   run_unit.cpp           run a unit's artifact, write back inputs, replay side effects,
//                          rebuild the frame after it
//   rebuild.cpp            build: an OutputSpec back into a real object (its trace-time half,
//                          rebuild, makes the OutputSpec)
//   resume.cpp             the resume point after a graph break (assignment A9)
//   automatic_dynamic.cpp  what a unit's compiles saw; what a recompile makes symbolic (A7)
//   skip_rules.cpp         which frames are captured at all
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "capture/convert_frame.h"
#include "capture/frame_hook.h"

namespace mini::capture {

// How a unit runs on this call, as lookup_or_compile decided.
enum class UnitPlan {
  Run,          // run the artifact found in the cache or just compiled
  RunNatively,  // CPython runs the unit capture cannot handle; what it calls is captured
  RunOnly,      // past the cache size limit: CPython runs the unit with the hook off for
                // the functions it calls (torch's RUN_ONLY for them: no new compiles)
  Error,        // a Python error is set
};

// convert_frame.cpp
// Sets `e` as the Python error, unless one is set already (a warning turned into an error).
UnitPlan python_error(const std::exception& e);
void release_all(std::vector<PyObject*>& v);  // Py_XDECREF each, then clear
std::string function_label(PyCodeObject* code);  // "'fn' (file:line)"

// compile_unit.cpp
// Traces one unit and hands its graph to the backend: the artifact that runs the unit, its
// guards in *guards_out. Null with a Python error when the backend or the user's code (a bad
// shape, say) raised.
std::shared_ptr<Artifact> compile_unit(PyCodeObject* code, guards::UnitCache& unit, int offset,
                                       const guards::FrameValues& fv, CompileRequest* req,
                                       std::unique_ptr<guards::GuardSet>* guards_out);
// Adds the user's line to the traceback of the error being raised: CPython's loop adds one for
// each frame it runs, and mini ran this one (a call at a break raised, or a trace found the
// user's error), so the traceback would skip the user's frame. `location` ("file:line in fn",
// maybe of an inlined function) overrides the code's file, `line` and name.
void add_user_frame(PyCodeObject* code, int line, const std::string& location = "");
// Graph titles (__compiled_fn_<n>) count from 1 again (mini.reset()).
void reset_graph_counter();

// rebuild.cpp
// A real object from its reconstruction spec. New reference; NULL for Null/Absent slots
// (no error set); NULL with an error set when something cannot be rebuilt. `made` holds
// the objects built so far for each alias (New references, released by the caller).
PyObject* build(const OutputSpec& spec, const std::vector<PyObject*>& outs, const guards::FrameValues& fv,
                bool* failed, std::vector<PyObject*>& made);

// run_unit.cpp
// True (after logging why) when the unit's inputs alias differently from the traced call's:
// the unit then runs eagerly (torch's NO_TENSOR_ALIASING guard).
bool inputs_alias_differently(const Artifact& art, const guards::FrameValues& fv, PyCodeObject* code);
// Runs one unit's artifact on the frame's values and rebuilds what follows it: the return
// value (*result, New) or, at a break, the frame's new locals and stack, which replace
// `locals` and `stack`. False with a Python error set, and nothing replaced.
bool run_unit(const Artifact& art, const guards::FrameValues& fv, std::vector<PyObject*>& locals,
              std::vector<PyObject*>& stack, PyObject** result);

// resume.cpp
// While A9 is a stub (exit_at or run_instruction), every break is left to CPython: said once.
extern const char* const kResumeStubFallback;
// The breaking instruction, run for real: the next unit's offset, or -1 with a Python error.
int run_instruction(const Instruction& in, std::vector<PyObject*>& stack, PyObject* kw_names);
// Next: *offset is the next unit's start; Native: CPython runs the rest of the frame (A9 is
// a stub); Error: a Python error is set.
enum class ResumePlan { Next, Native, Error };
ResumePlan resume_after_break(const Artifact& art, std::vector<PyObject*>& stack, int* offset);

// skip_rules.cpp
// Why the hook leaves a frame to CPython (not a function's code, mini's own file, zero-argument
// super()), or null.
const char* skip_reason(const FrameView& view);
// Dynamo compiles a frame only if it can see a tensor or module in it: in its locals, or a
// global it names that is one or is the mini module.
bool frame_has_tensors(const FrameView& view, const std::vector<PyObject*>& locals);

// automatic_dynamic.cpp
// Whether `src` reads through a global (G['SCALE'], or an attribute or item of one): a number
// read so is specialized, one graph per value, as Dynamo specializes globals; automatic dynamic
// neither records it nor turns it into a graph input.
bool reads_a_global(const guards::Source& src);
void record_seen(guards::UnitCache& unit, const guards::FrameValues& fv, const guards::GuardSet& gs);
void automatic_dynamic_on_recompile(guards::UnitCache& unit, const guards::FrameValues& fv);
// Before a recompile: automatic dynamic's decision (automatic_dynamic_on_recompile) unless it
// is off; after a compile: record_seen. Both true to go on, false with a Python error set
// (while A7 is a stub they say so once and recompiles stay static).
bool decide_dynamic(guards::UnitCache& unit, const guards::FrameValues& fv, const CompileRequest* req);
bool remember_seen(guards::UnitCache& unit, const guards::FrameValues& fv, const guards::GuardSet& gs);

}  // namespace mini::capture
