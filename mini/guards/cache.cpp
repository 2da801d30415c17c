// cache.cpp — the CodeCache in each code object's co_extra slot, and a unit's entries:
// lookup (most recently hit first), the recompile reason, add, reset.
#include "cache.h"

#include <unordered_set>

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

CacheEntry* UnitCache::lookup(const FrameValues& frame, PyObject* backend_key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->backend_key != backend_key) continue;
    if (!it->guards->check(frame)) continue;
    if (it != entries.begin()) entries.splice(entries.begin(), entries, it);
    return &entries.front();
  }
  return nullptr;
}

std::string UnitCache::recompile_reason(const FrameValues& frame, PyObject* backend_key) const {
  for (const auto& e : entries) {
    if (e.backend_key != backend_key) continue;
    std::string why = e.guards->check_verbose(frame);
    if (!why.empty()) return std::to_string(frame_id) + "/" + std::to_string(e.compile_id) + ": " + why;
  }
  return "";
}

CacheEntry& UnitCache::add(CacheEntry entry) {
  entries.push_front(std::move(entry));
  return entries.front();
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
