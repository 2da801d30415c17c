// cache.cpp — the CodeCache in each code object's co_extra slot, and a unit's entries:
// lookup (most recently hit first), the recompile reason, add, the cache size limit (the
// guard cache, assignment A6: contracts in cache.h), reset.
#include "cache.h"

#include <set>
#include <unordered_set>

#include "tensor/errors.h"

namespace mini::guards {

namespace {
std::unordered_set<CodeCache*>& live_caches() {
  static auto* s = new std::unordered_set<CodeCache*>();
  return *s;
}
int g_next_frame_id = 0;

void free_code_cache(void* p) {
  auto* cache = static_cast<CodeCache*>(p);
  live_caches().erase(cache);
  delete cache;
}

int g_units_in_use = 0;
std::vector<std::map<int, UnitCache>>& retired_units() {  // cleared while in use
  static auto* v = new std::vector<std::map<int, UnitCache>>();
  return *v;
}

void free_retired_units() {
  if (g_units_in_use > 0 || retired_units().empty()) return;  // the second: every cache hit
  auto dead = std::move(retired_units());  // freeing runs Python code, which may reset again
  retired_units().clear();
}

Py_ssize_t extra_index() {
  static Py_ssize_t index = _PyEval_RequestCodeExtraIndex(free_code_cache);
  return index;
}
}  // namespace

bool warn_stub_fallback(const std::exception& stub, const std::string& instead) {
  static auto* told = new std::set<std::string>();
  if (!told->insert(instead).second) return true;
  std::string message =
      assignment_of(stub) + " is not written yet (" + stub.what() + "); until it is, " + instead;
  return PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) == 0;
}

namespace {
const char* kGuardStubFallback =
    "a guard that raises counts as failing: every call recompiles, and past "
    "mini.config.cache_size_limit runs eagerly";
}  // namespace

bool guards_hold(CacheEntry& entry, const FrameValues& frame) {
  try {
    return entry.guards->check(frame);
  } catch (const std::exception& e) {
    if (!is_assignment_stub(e)) throw;
    if (!warn_stub_fallback(e, kGuardStubFallback))
      throw Error(Error::Kind::Runtime, "a warning raised");  // its Python error stays set
    return false;
  }
}

std::string failing_guard(const CacheEntry& entry, const FrameValues& frame) {
  try {
    return entry.guards->check_verbose(frame);
  } catch (const std::exception& e) {
    if (!is_assignment_stub(e)) throw;
    return assignment_of(e) + " is not written yet, so its guard counts as failing";
  }
}

// ---- the guard cache (A6) ---------------------------------------------------------------------

CacheEntry* UnitCache::lookup(const FrameValues& frame, PyObject* backend_key) {
  // A6 BEGIN: the guard cache
  MINI_KIT_STUB(A6);
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->backend_key != backend_key) continue;
    if (!guards_hold(*it, frame)) continue;
    if (it != entries.begin()) entries.splice(entries.begin(), entries, it);  // relinks the node
    return &entries.front();
  }
  return nullptr;
  // A6 END
}

std::string UnitCache::recompile_reason(const FrameValues& frame, PyObject* backend_key) const {
  // A6 BEGIN: the guard cache
  MINI_KIT_STUB(A6);
  for (const auto& e : entries) {
    if (e.backend_key != backend_key) continue;
    std::string why = failing_guard(e, frame);
    if (!why.empty()) return std::to_string(frame_id) + "/" + std::to_string(e.compile_id) + ": " + why;
  }
  return "";
  // A6 END
}

CacheEntry& UnitCache::add(CacheEntry&& entry) {
  // A6 BEGIN: the guard cache
  MINI_KIT_STUB(A6);
  entry.compile_id = compiles++;
  entries.push_front(std::move(entry));
  return entries.front();
  // A6 END
}

bool UnitCache::may_compile(int limit) {
  // A6 BEGIN: the guard cache
  MINI_KIT_STUB(A6);
  if (compiles < limit) return true;
  run_only = true;  // every later miss runs eagerly without asking again
  return false;
  // A6 END
}

int next_frame_id() { return g_next_frame_id++; }

void CodeCache::clear() {
  retired_units().push_back(std::move(units));  // the nodes move: references to units hold
  units.clear();
  free_retired_units();
}

UnitsInUse::UnitsInUse() { g_units_in_use++; }
UnitsInUse::~UnitsInUse() {
  if (--g_units_in_use == 0) free_retired_units();
}

void UnitCache::clear() { *this = UnitCache(); }

CodeCache* code_cache(PyCodeObject* code, bool create) {
  void* extra = nullptr;
  if (_PyCode_GetExtra((PyObject*)code, extra_index(), &extra) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  if (extra || !create) return static_cast<CodeCache*>(extra);
  auto* cache = new CodeCache();
  if (_PyCode_SetExtra((PyObject*)code, extra_index(), cache) < 0) {
    PyErr_Clear();
    delete cache;
    return nullptr;
  }
  live_caches().insert(cache);
  return cache;
}

void clear_all_code_caches() {
  // Clearing releases artifacts, which can free code objects and so erase from the set:
  // walk a copy, skipping caches freed meanwhile.
  std::vector<CodeCache*> caches(live_caches().begin(), live_caches().end());
  for (CodeCache* c : caches)
    if (live_caches().count(c)) c->clear();
  g_next_frame_id = 0;
}

}  // namespace mini::guards
