// cache.h — per code object, the compiled entries and how they are looked up.
//
// Each code object that mini has seen carries a CodeCache in its co_extra slot (as Dynamo's
// ExtraState). Its entries are checked most recently hit first; a hit moves to the front;
// a new compile goes in at the front. Past the cache size limit the code runs eagerly on
// every miss ("run only"), still using the entries it has.
//
// Ownership: the CodeCache belongs to the code object (freed with it, or by clear_all());
// an entry owns its GuardSet and its compiled artifact.
#pragma once
#include <Python.h>

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

  // The first entry (for `backend_key`) whose guards hold, moved to the front; or null.
  CacheEntry* lookup(const FrameValues& frame, PyObject* backend_key);
  // After a miss: the newest entry's first failing guard, "frame/k: reason" (torch's form).
  std::string recompile_reason(const FrameValues& frame, PyObject* backend_key) const;
  CacheEntry& add(CacheEntry entry);  // at the front
  void clear();
};

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
