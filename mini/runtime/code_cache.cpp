// code_cache.cpp — see code_cache.h.
#include "runtime/code_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "tensor/tensor.h"

namespace mini::runtime {

uint64_t fnv1a(const char* p, size_t n) {  // 64 bits: stable across processes
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex_hash(const std::string& s) {
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", (unsigned long long)fnv1a(s.data(), s.size()));
  return buf;
}

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string write_failure(const std::string& path, int err) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (err == ENOSPC || err == EDQUOT)
    return cat("cannot write ", path, ": ", strerror(err), ": the kernel cache folder ", dir, " is on a full disk "
               "(or over its quota). Free space there, or set mini.config.cache_dir (or MINI_CACHE_DIR) to a folder "
               "on another disk.");
  return cat("cannot write ", path, " in the kernel cache folder ", dir, ": ", strerror(err));
}

void write_file(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = fd < 0 ? errno : 0;
  for (size_t done = 0; !err && done < bytes.size();) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno != EINTR) err = errno;
    done += n > 0 ? (size_t)n : 0;
  }
  if (fd >= 0 && close(fd) != 0 && !err) err = errno;  // NFS reports a full disk at close
  if (!err) return;
  unlink(path.c_str());
  fail(write_failure(path, err));
}

namespace {

// An entry: the bytes the compiler wrote (a shared object, a CUBIN), then this trailer.
// The loader reads only what the ELF headers point at, so the trailer does not change what
// dlopen maps; it lets a process check, before dlopen, that the file is whole (a truncated
// library maps pages past its end: SIGBUS on first touch) and is the library of this key
// (a file copied over another's name would run another graph's kernels).
struct Trailer {
  char magic[8];
  char key[16];
  uint64_t size;  // bytes of the library before the trailer
  uint64_t hash;  // fnv1a of those bytes
};
constexpr char kTrailerMagic[8] = {'m', 'i', 'n', 'i', 'k', 'c', '0', '1'};

}  // namespace

size_t trailer_bytes() { return sizeof(Trailer); }

bool check_entry(const std::string& lib, const std::string& key, std::string* why, std::string& bytes) {
  int fd = open(lib.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ENOENT ? "" : cat("cannot be read (", strerror(errno), ")");
    return false;
  }
  struct stat st;
  bool read_all = fstat(fd, &st) == 0;
  if (read_all) {
    bytes.resize((size_t)st.st_size);
    size_t got = 0;
    while (got < bytes.size()) {
      ssize_t r = pread(fd, &bytes[got], bytes.size() - got, (off_t)got);
      if (r <= 0) break;
      got += (size_t)r;
    }
    read_all = got == bytes.size();
  }
  close(fd);
  Trailer t;
  if (!read_all) *why = "cannot be read";
  else if (bytes.size() < sizeof t) *why = cat("has ", bytes.size(), " bytes, too few for an entry (a truncated or foreign file)");
  else {
    memcpy(&t, bytes.data() + bytes.size() - sizeof t, sizeof t);
    if (memcmp(t.magic, kTrailerMagic, sizeof t.magic) != 0)
      *why = "does not end with mini's trailer (a truncated or foreign file)";
    else if (std::string(t.key, sizeof t.key) != key)
      *why = cat("holds the library of another graph (key ", std::string(t.key, sizeof t.key), ")");
    else if (t.size != bytes.size() - sizeof t)
      *why = cat("has ", bytes.size() - sizeof t, " bytes of library where its trailer says ", t.size);
    else if (t.hash != fnv1a(bytes.data(), t.size))
      *why = "does not match its checksum (a corrupted file)";
    else return true;
  }
  return false;
}

void publish_entry(const std::string& tmp, const std::string& path, const std::string& key) {
  std::string bytes = read_file(tmp);
  Trailer t;
  memcpy(t.magic, kTrailerMagic, sizeof t.magic);
  memset(t.key, 0, sizeof t.key);
  memcpy(t.key, key.data(), std::min(key.size(), sizeof t.key));
  t.size = bytes.size();
  t.hash = fnv1a(bytes.data(), bytes.size());
  write_file(tmp, bytes + std::string((const char*)&t, sizeof t));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail("cannot write the kernel cache entry ", path, ": ", strerror(err));
  }
}

namespace {

// The pid in the name of a file one compile or load of a process writes, <key>.<pid>.<n>.<ext>
// (compiled_graph.cpp, cuda_program.cpp), or the folder probe, .probe.<pid>; 0 for any other.
pid_t temp_file_pid(const std::string& name) {
  static const std::regex temp(R"([0-9a-f]{16}\.([0-9]{1,9})\.[0-9]+\..+|\.probe\.([0-9]{1,9}))");
  std::smatch m;
  if (!std::regex_match(name, m, temp)) return 0;
  return (pid_t)atol((m[1].matched ? m[1] : m[2]).str().c_str());
}

// Removes the files a process killed mid-compile left in `dir` (a compile's source, object,
// library and log, a load's copy): those whose pid is gone (kill(pid, 0): ESRCH) and that
// were last written an hour ago or more. The age keeps the files of a live compile on another
// machine or container sharing the folder, whose pid means nothing here.
void remove_stale_files(const std::string& dir) {
  std::error_code ec;
  std::time_t hour_ago = std::time(nullptr) - 3600;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    pid_t pid = temp_file_pid(name);
    struct stat st;
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH && lstat(it->path().c_str(), &st) == 0 &&
        st.st_mtime <= hour_ago)
      unlink(it->path().c_str());
  }
}

}  // namespace

// `requested` cannot hold files when it is a file, cannot be created, is not writable, or lies
// in /proc.
std::string usable_cache_dir(const std::string& requested, std::vector<std::string>* warnings) {
  struct Fallbacks : std::map<std::string, std::string> {
    pid_t owner = getpid();
    std::set<std::string> temporary;  // the folders mkdtemp made in place of unusable ones
    ~Fallbacks() {  // at exit, by the process that made them (not a forked child)
      for (const std::string& dir : temporary)
        if (getpid() == owner) std::filesystem::remove_all(dir);
    }
  };
  static std::mutex mu;
  static Fallbacks chosen;
  std::lock_guard<std::mutex> lock(mu);
  auto it = chosen.find(requested);
  if (it != chosen.end()) return it->second;
  std::error_code ec;
  // A relative folder is made absolute (from the working folder of its first use): every path
  // mini passes to the compiler then starts with '/', so a folder named "-o" or "-fplugin=x"
  // is never read as one of its options.
  std::string dir = requested;
  if (!dir.empty() && dir[0] != '/') {
    std::filesystem::path abs = std::filesystem::absolute(dir, ec);
    dir = ec ? "./" + dir : abs.lexically_normal().string();  // no working folder: ./-o is a path too
  }
  std::filesystem::create_directories(dir, ec);
  std::string why;
  if (!std::filesystem::is_directory(dir))
    why = std::filesystem::exists(dir) ? "it is not a folder" : "it cannot be created: " + ec.message();
  else {
    std::string probe = dir + "/.probe." + std::to_string(getpid());
    int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) why = cat("a file cannot be created in it: ", strerror(errno));
    else {
      close(fd);
      unlink(probe.c_str());
    }
  }
  if (why.empty()) {
    remove_stale_files(dir);  // once per folder and process: `chosen` remembers it
    return chosen[requested] = dir;
  }
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/mini-cache-" + std::to_string(getpid()) + "-XXXXXX";
  if (!mkdtemp(&pattern[0]))
    fail("mini.config.cache_dir '", requested, "' cannot hold generated kernels (", why, "), and neither can a "
         "temporary folder (", pattern, ": ", strerror(errno), "). Set mini.config.cache_dir or MINI_CACHE_DIR to a "
         "writable folder.");
  warnings->push_back(cat("mini.config.cache_dir '", requested, "' cannot hold generated kernels (", why,
                          "); this process uses ", pattern, " instead, which the next process does not reuse. "
                          "Set mini.config.cache_dir or MINI_CACHE_DIR to a writable folder."));
  chosen.temporary.insert(pattern);
  return chosen[requested] = pattern;
}

int compile_threads() {
  int threads = (int)std::min(8u, std::thread::hardware_concurrency());
  if (const char* env = getenv("MINI_COMPILE_THREADS")) threads = atoi(env);
  return std::max(1, threads);
}

}  // namespace mini::runtime
