// cache.h — per code object, the compiled entries and how they are looked up (Dynamo's
// cache entries and ExtraState; the article's guard cache).
//
// In:  a unit's frame values on each call, the backend asking, and config.cache_size_limit.
// Out: the entry to run (lookup), or why none holds (recompile_reason), whether one more
//      compile is allowed (may_compile), and the new entry's place (add).
// Guarantees: a hit never runs an entry of another backend or one whose guards fail; entries
//      are checked most recently hit first (a hit moves to the front, a new compile goes in at
//      the front); past the cache size limit the code runs eagerly on every miss ("run only"),
//      still using the entries it has.
//
// Each code object that mini has seen carries a CodeCache in its co_extra slot (as Dynamo's
// ExtraState). lookup, recompile_reason, add and may_compile are assignment A6 of the course
// kit (notes/assignments/A6.md): their contracts are below.
//
// Ownership: the CodeCache belongs to the code object (freed with it, or by clear_all());
// an entry owns its GuardSet and its compiled artifact.
#pragma once
#include <Python.h>

#include <exception>
#include <list>
#include <map>
#include <vector>
#include <memory>
#include <string>

#include "guards/guards.h"

namespace mini::guards {

// What a backend produced; defined by capture, opaque here.
struct CompiledArtifact {
  virtual ~CompiledArtifact() = default;
};

struct CacheEntry {
  std::unique_ptr<GuardSet> guards;
  std::shared_ptr<CompiledArtifact> artifact;
  int compile_id = 0;  // the k of Dynamo's "frame/k"
  PyObject* backend_key = nullptr;  // the backend that compiled it (owned: a new backend
                                    // can never take a dead one's address and its entries)
  CacheEntry() = default;
  CacheEntry(CacheEntry&& o) noexcept { *this = std::move(o); }
  CacheEntry& operator=(CacheEntry&& o) noexcept {
    std::swap(guards, o.guards); std::swap(artifact, o.artifact);
    std::swap(compile_id, o.compile_id); std::swap(backend_key, o.backend_key);
    return *this;
  }
  ~CacheEntry() { Py_XDECREF(backend_key); }
};

// One resume unit: the code of a frame from one instruction offset on (offset 0 is the
// whole function; a graph break starts a unit after the breaking instruction). Each unit
// has its own entries, compile count and limit, as each Dynamo resume function does.
struct UnitCache {
  std::list<CacheEntry> entries;  // most recently hit first
  int frame_id = -1;              // the frame of "frame/k", numbered in order of first compile
  int compiles = 0;
  bool run_only = false;          // hit the cache size limit: never compile again
  std::string skip_reason;        // non-empty: capture cannot handle this unit, run it natively

  // Automatic dynamic: what earlier compiles saw at each source ("L['x']" -> sizes, or the
  // scalar's repr), and which sources/dims turned dynamic after a change.
  struct Seen {
    SourceRef source;
    bool tensor = false;
    std::vector<int64_t> sizes;  // tensor
    std::string scalar;          // repr of an int or float
  };
  std::map<std::string, Seen> seen;
  std::map<std::string, std::vector<bool>> dynamic_dims;
  std::map<std::string, bool> dynamic_scalars;

  // ---- the guard cache (A6) -------------------------------------------------------------
  // Check an entry's guards with guards_hold / failing_guard (below), never with its
  // GuardSet directly: they make a guard that is still a course kit's stub count as failing.

  // lookup: the entry to run for this call, or null on a miss.
  //   in:  the frame's values; backend_key, the backend asking (Borrowed; compared by address).
  //   out: the first entry, in `entries` order, whose backend_key is `backend_key` and whose
  //        guards hold (guards_hold); it is moved to the front of `entries` (std::list::splice:
  //        the other entries keep their order, no entry is copied or freed) and returned.
  //        Null when none holds; `entries` is then unchanged.
  //   guarantees: most recently hit first — a shape that comes back runs after one guard
  //        check; an entry of another backend is never returned nor checked; guards run
  //        only until the first entry that holds.
  CacheEntry* lookup(const FrameValues& frame, PyObject* backend_key);

  // recompile_reason: after a miss, why this call recompiles, in torch's form
  //   "<frame_id>/<compile_id>: <sentence>", e.g.
  //   "0/1: tensor 'x' size mismatch at index 0. expected 16, actual 32".
  //   in:  the frame's values and the backend, as lookup had them.
  //   out: for the first entry in `entries` order of `backend_key` whose guards fail, its
  //        frame and compile ids and the sentence of its first failing guard (failing_guard);
  //        "" when the unit has no entry of that backend (a first compile).
  //   guarantees: the entry named is the most recently hit or added one; nothing changes.
  std::string recompile_reason(const FrameValues& frame, PyObject* backend_key) const;

  // add: stores a new compile.
  //   in:  the entry (guards, artifact, backend_key set by the caller), moved from.
  //   out: the stored entry, at the front of `entries`, its compile_id the number of
  //        compiles this unit made before it (0, 1, 2, ...: the k of "frame/k"); `compiles`
  //        counts it.
  //   guarantees: the newest compile is checked first on the next call.
  CacheEntry& add(CacheEntry&& entry);

  // may_compile: the cache size limit (config.cache_size_limit; torch's recompile_limit).
  //   in:  limit >= 0, asked after a miss, before compiling.
  //   out: true while the unit has made fewer than `limit` compiles; otherwise false, and the
  //        unit turns run-only (run_only = true): the caller warns once and runs the code
  //        eagerly, and no later call compiles it again.
  //   guarantees: at most `limit` compiles per unit; the entries it has keep hitting.
  bool may_compile(int limit);

  void clear();
};

// An entry's guards, as the cache checks them: guards_hold is GuardSet::check (true when every
// guard holds) and failing_guard is GuardSet::check_verbose (the first failing guard's
// sentence, or ""). A guard that raises a course kit's stub (the tensor guard, A5, not written
// yet) counts as failing, said once as a UserWarning: the call recompiles, and past the cache
// size limit runs eagerly (mini/tensor/errors.h, is_assignment_stub). Other errors propagate;
// so does a warning that raised (its Python error stays set).
bool guards_hold(CacheEntry& entry, const FrameValues& frame);
std::string failing_guard(const CacheEntry& entry, const FrameValues& frame);

// A stage of the course kit is still a stub (`stub`, is_assignment_stub) and `instead` runs
// in its place: says so once per `instead`, as a UserWarning naming the assignment. False
// with the Python error set when the warning raised (warnings turned into errors).
bool warn_stub_fallback(const std::exception& stub, const std::string& instead);

struct CodeCache {
  std::map<int, UnitCache> units;  // by start offset
  UnitCache& unit(int offset) { return units[offset]; }
  void clear();  // the units are freed once no UnitsInUse is alive
};

// Held while a unit is looked up and compiled: mini.reset() meanwhile (from another thread
// while this one runs Python code, or from the backend) must not free the unit under it.
struct UnitsInUse {
  UnitsInUse();
  ~UnitsInUse();
};

// The CodeCache of `code` (Borrowed), created on first use when `create`.
CodeCache* code_cache(PyCodeObject* code, bool create);
// The next frame number ("frame/k"), counted from 0 after each reset.
int next_frame_id();
// mini.reset(): every code object forgets its entries and counters.
void clear_all_code_caches();

}  // namespace mini::guards
