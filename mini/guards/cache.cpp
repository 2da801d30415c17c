// cache.cpp — the CodeCache in each code object's co_extra slot, and a unit's entries:
// lookup, the recompile reason, add and the cache size limit under each policy (torch's
// "recent", "oldest", and "yours": the course kit's assignment A6; contracts in cache.h), reset.
#include "cache.h"

#include <algorithm>
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

// ---- the guard cache ------------------------------------------------------------------------

CacheEntry* UnitCache::lookup(const FrameValues& frame, PyObject* backend_key, CachePolicy policy) {
  ++clock;
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->backend_key != backend_key) continue;
    ++entries_checked;
    if (!guards_hold(*it, frame)) continue;
    CacheEntry* hit = &*it;  // a list node: splice relinks it, the address stays
    hit->hits++;
    hit->last_used = clock;
    if (policy == CachePolicy::Recent && it != entries.begin())
      entries.splice(entries.begin(), entries, it);
    else if (policy == CachePolicy::Yours)
      return checked_your_hit(it);
    return hit;
  }
  return nullptr;
}

std::string UnitCache::recompile_reason(const FrameValues& frame, PyObject* backend_key) const {
  for (const auto& e : entries) {
    if (e.backend_key != backend_key) continue;
    std::string why = failing_guard(e, frame);
    if (!why.empty()) return std::to_string(frame_id) + "/" + std::to_string(e.compile_id) + ": " + why;
  }
  return "";
}

// your_hit, and then its contract checked: the entry is still in the list at the address it had
// (a copy, a move or an erase would leave the caller running freed memory).
CacheEntry* UnitCache::checked_your_hit(std::list<CacheEntry>::iterator hit) {
  const CacheEntry* where = &*hit;
  int id = hit->compile_id;
  your_hit(hit);
  for (CacheEntry& e : entries)
    if (e.compile_id == id) {
      if (&e == where) return &e;
      break;
    }
  throw Error(Error::Kind::Runtime,
              "mini.config.cache_policy 'yours' (A6, your_hit in mini/guards/cache.cpp) broke its contract: "
              "entry " + std::to_string(frame_id) + "/" + std::to_string(id) + " is no longer where it was; "
              "reorder entries with std::list::splice, which moves no entry, never by copying, moving from "
              "or erasing one");
}

CacheEntry& UnitCache::add(CacheEntry&& entry, CachePolicy policy) {
  auto where = policy == CachePolicy::Recent ? entries.begin()
             : policy == CachePolicy::Oldest ? entries.end()
                                             : your_place();
  if (policy == CachePolicy::Yours && where != entries.end() &&
      std::none_of(entries.begin(), entries.end(), [&](const CacheEntry& e) { return &e == &*where; }))
    throw Error(Error::Kind::Runtime,
                "mini.config.cache_policy 'yours' (A6, your_place in mini/guards/cache.cpp) broke its "
                "contract: the position it returned is not in this unit's entries (return entries.begin(), "
                "entries.end() or an iterator of `entries`)");
  entry.compile_id = compiles++;
  entry.last_used = clock;
  return *entries.insert(where, std::move(entry));
}

bool UnitCache::may_compile(int limit, CachePolicy policy) {
  bool compile = policy == CachePolicy::Yours ? your_room(limit) : compiles < limit;
  if (!compile) {
    run_only = true;  // every later miss runs eagerly without asking again
    return false;
  }
  if (policy != CachePolicy::Yours) return true;
  std::string broken;  // your_room's contract, checked: the cache stays bounded whatever it does
  if (int(entries.size()) >= limit)
    broken = "it returned true with " + std::to_string(entries.size()) + " entries kept; room means "
             "fewer than cache_size_limit (" + std::to_string(limit) + ") before a compile: evict first";
  else if (compiles >= 2 * limit)
    broken = "it returned true after " + std::to_string(compiles) + " compiles; a unit compiles at most "
             "2 * cache_size_limit (" + std::to_string(2 * limit) + ") times, so that a recompile storm ends";
  if (!broken.empty())
    throw Error(Error::Kind::Runtime, "mini.config.cache_policy 'yours' (A6, your_room in "
                                      "mini/guards/cache.cpp) broke its contract: " + broken);
  return true;
}

void UnitCache::evict(std::list<CacheEntry>::iterator victim) {
  entries.erase(victim);
  evictions++;
}

// ---- the policy "yours" (A6; its contract in cache.h) -------------------------------------------

void UnitCache::your_hit(std::list<CacheEntry>::iterator hit) {
  // A6 BEGIN: a guard cache policy
  MINI_KIT_STUB(A6);
  // The reference's design: the order is torch's (a hit and a new compile go to the front), and
  // at the limit it evicts the least recently used entry, but only one that has sat unused for
  // 2 * limit lookups (the workload moved on), and at most `limit` times. A storm whose shapes
  // all keep coming back stops compiling as torch's does; a workload that changed phase
  // compiles again.
  if (hit != entries.begin()) entries.splice(entries.begin(), entries, hit);
  // A6 END
}

std::list<CacheEntry>::iterator UnitCache::your_place() {
  // A6 BEGIN: a guard cache policy
  MINI_KIT_STUB(A6);
  return entries.begin();
  // A6 END
}

bool UnitCache::your_room(int limit) {
  // A6 BEGIN: a guard cache policy
  MINI_KIT_STUB(A6);
  if (int(entries.size()) < limit) return true;
  if (limit == 0 || evictions >= limit) return false;
  auto lru = std::min_element(entries.begin(), entries.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.last_used < b.last_used;
  });
  if (clock - lru->last_used < 2L * limit) return false;  // still in use: a storm, not a new phase
  evict(lru);
  return true;
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
