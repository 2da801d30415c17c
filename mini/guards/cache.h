// cache.h — per code object, the compiled entries and how they are looked up (Dynamo's
// cache entries and ExtraState; the article's guard cache).
//
// In:  a unit's frame values on each call, the backend asking, config.cache_size_limit and
//      config.cache_policy.
// Out: the entry to run (lookup), or why none holds (recompile_reason), whether one more
//      compile is allowed (may_compile), and the new entry's place (add).
// Guarantees: a hit never runs an entry of another backend or one whose guards fail; entries
//      are checked front to back, and the policy decides the order: "recent" (torch's) moves a
//      hit and puts a new compile at the front, "oldest" never moves an entry; past the cache
//      size limit the code runs eagerly on every miss ("run only"), still using the entries it
//      has. The third policy, "yours", is assignment A6 of the course kit
//      (notes/assignments/A6.md): where a hit moves, where a compile goes, and what happens at
//      the limit, within the contract of its three declarations below.
//
// Each code object that mini has seen carries a CodeCache in its co_extra slot (as Dynamo's
// ExtraState).
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

// How a unit orders its entries and what it does at the cache size limit (mini.config.cache_policy).
//   Recent: torch's. A hit moves to the front, a compile goes in at the front; at the limit the
//           unit runs eagerly from then on.
//   Oldest: entries stay in the order they were compiled (a shape walks past the guards of every
//           entry compiled before its own); the same limit.
//   Yours:  the course kit's A6 (your_hit, your_place, your_room below).
enum class CachePolicy { Recent, Oldest, Yours };

struct CacheEntry {
  std::unique_ptr<GuardSet> guards;
  std::shared_ptr<CompiledArtifact> artifact;
  int compile_id = 0;  // the k of Dynamo's "frame/k"
  long hits = 0;       // the lookups it answered
  long last_used = 0;  // the unit's clock at its last hit, or at the miss that compiled it
  PyObject* backend_key = nullptr;  // the backend that compiled it (owned: a new backend
                                    // can never take a dead one's address and its entries)
  CacheEntry() = default;
  CacheEntry(CacheEntry&& o) noexcept { *this = std::move(o); }
  CacheEntry& operator=(CacheEntry&& o) noexcept {
    std::swap(guards, o.guards); std::swap(artifact, o.artifact);
    std::swap(compile_id, o.compile_id); std::swap(backend_key, o.backend_key);
    std::swap(hits, o.hits); std::swap(last_used, o.last_used);
    return *this;
  }
  ~CacheEntry() { Py_XDECREF(backend_key); }
};

// One resume unit: the code of a frame from one instruction offset on (offset 0 is the
// whole function; a graph break starts a unit after the breaking instruction). Each unit
// has its own entries, compile count and limit, as each Dynamo resume function does.
struct UnitCache {
  std::list<CacheEntry> entries;  // in lookup order (the policy's)
  int frame_id = -1;              // the frame of "frame/k", numbered in order of first compile
  int compiles = 0;
  int evictions = 0;              // entries `evict` dropped to make room (policy "yours")
  long clock = 0;                 // counts lookups (a compile's entry takes the clock of its miss)
  long entries_checked = 0;       // entries whose guards lookup ran, over every lookup
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

  // ---- the guard cache -------------------------------------------------------------------
  // Check an entry's guards with guards_hold / failing_guard (below), never with its
  // GuardSet directly: they make a guard that is still a course kit's stub count as failing.

  // lookup: the entry to run for this call, or null on a miss.
  //   in:  the frame's values; backend_key, the backend asking (Borrowed; compared by address).
  //   out: the first entry, in `entries` order, whose backend_key is `backend_key` and whose
  //        guards hold; its hits and last_used are updated and the policy places it (Recent:
  //        the front; Oldest: where it was; Yours: your_hit). Null when none holds; `entries` is
  //        then unchanged.
  //   guarantees: guards run only until the first entry that holds, and never those of
  //        another backend's entry (a guard can run user code: a property it reads).
  CacheEntry* lookup(const FrameValues& frame, PyObject* backend_key, CachePolicy policy);

  // recompile_reason: after a miss, why this call recompiles, in torch's form
  //   "<frame_id>/<compile_id>: <sentence>", e.g.
  //   "0/1: tensor 'x' size mismatch at index 0. expected 16, actual 32".
  //   out: for the first entry in `entries` order of `backend_key` (under Recent, the most
  //        recently hit or added one), its frame and compile ids and the sentence of its first
  //        failing guard; "" when the unit has no entry of that backend (a first compile).
  std::string recompile_reason(const FrameValues& frame, PyObject* backend_key) const;

  // add: stores a new compile (guards, artifact, backend_key set by the caller; moved from).
  //   out: the stored entry, its compile_id the number of compiles this unit made before it
  //        (0, 1, 2, ...: the k of "frame/k"), placed by the policy (Recent: the front; Oldest:
  //        the back; Yours: before your_place()); `compiles` counts it.
  CacheEntry& add(CacheEntry&& entry, CachePolicy policy);

  // may_compile: asked after a miss, before compiling; `limit` is config.cache_size_limit >= 0
  //   (torch's recompile_limit).
  //   out: Recent and Oldest: true while the unit has made fewer than `limit` compiles. Yours:
  //        your_room(limit). False turns the unit run-only (run_only = true): the caller warns
  //        once and runs the code eagerly, and no later miss asks again.
  //   guarantees: at most `limit` entries at any time, and at most `limit` compiles (Recent,
  //        Oldest) or 2 * limit (Yours) per unit: a policy that breaks this raises an Error
  //        naming the broken rule, never a storm without end.
  bool may_compile(int limit, CachePolicy policy);

  // ---- the policy "yours": the course kit's assignment A6 -------------------------------------
  // A design of your own, measured against Recent and Oldest by labs/cache_storm.py. Reorder
  // `entries` only with std::list::splice and drop one only with `evict`: an entry is never
  // copied or moved from (a reference to it stays valid while it is in the list).

  // your_hit: lookup found `hit` (its hits and last_used already counted); move it, or leave it.
  void your_hit(std::list<CacheEntry>::iterator hit);
  // your_place: where a new compile goes: add inserts it before the returned position
  //   (entries.begin(): the front; entries.end(): the back).
  std::list<CacheEntry>::iterator your_place();
  // your_room: a miss wants to compile. True: compile, after making room (once it returns,
  //   fewer than `limit` entries are left; `evict` drops one). False: run this call eagerly,
  //   and every later miss too. Over the unit's life at most 2 * limit compiles: a recompile
  //   storm must end.
  bool your_room(int limit);
  // your_hit, then its contract checked (the entry stays where it was): the entry to run.
  CacheEntry* checked_your_hit(std::list<CacheEntry>::iterator hit);
  // evict: drops `victim` from `entries` (its artifact lives on while a call runs it) and
  // counts it in `evictions`.
  void evict(std::list<CacheEntry>::iterator victim);

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
