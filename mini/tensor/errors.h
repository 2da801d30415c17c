// errors.h — the exceptions a user can cause. The Python module translates each to the
// Python exception torch would raise (RuntimeError, TypeError, ValueError, IndexError),
// keeping the message, which must name the shapes or types involved and, where there is
// one, the fix.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace mini {

struct Error : std::runtime_error {
  // OutOfMemory: a device allocation failed even after the allocator emptied its cache
  // (mini.OutOfMemoryError, a RuntimeError, as torch.OutOfMemoryError).
  enum class Kind { Runtime, Type, Value, Index, OutOfMemory };
  Kind kind;
  Error(Kind k, const std::string& msg) : std::runtime_error(msg), kind(k) {}
};

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

template <class... Args>
[[noreturn]] void fail(const Args&... args) { throw Error(Error::Kind::Runtime, cat(args...)); }
template <class... Args>
[[noreturn]] void fail_type(const Args&... args) { throw Error(Error::Kind::Type, cat(args...)); }
template <class... Args>
[[noreturn]] void fail_value(const Args&... args) { throw Error(Error::Kind::Value, cat(args...)); }
template <class... Args>
[[noreturn]] void fail_oom(const Args&... args) { throw Error(Error::Kind::OutOfMemory, cat(args...)); }
template <class... Args>
[[noreturn]] void fail_index(const Args&... args) { throw Error(Error::Kind::Index, cat(args...)); }

#define MINI_CHECK(cond, ...) \
  do { if (!(cond)) ::mini::fail(__VA_ARGS__); } while (0)

}  // namespace mini
