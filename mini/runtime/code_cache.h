// code_cache.h — the kernel code cache (Inductor's codecache): compiled kernels on disk, shared
// by the C++ (a shared object) and CUDA (a CUBIN) programs: keys, entries that are checked
// before use, and the folder.
//
// An entry is one file, <key>.<ext>: the compiled bytes, then a trailer holding the key, their
// size and a checksum. Guarantees:
//  * check_entry accepts a file only when it is whole and is the entry of this key: a truncated,
//    garbage, corrupted or misplaced (another key's) file is refused, with the reason;
//  * publish_entry writes under a name of this process's own and renames into place: a file
//    another process may have mapped or be reading is never changed in place;
//  * usable_cache_dir falls back to a temporary folder of this process's own, with a warning
//    once, when the requested one cannot hold files;
//  * the files a process killed mid-compile left (<key>.<pid>.<n>.*) are removed when a
//    folder is first used by a process, once their pid is gone and they are an hour old;
//  * a write that fails names the file and the cause; a full disk says so, with the cache
//    folder and the fix.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mini::runtime {

uint64_t fnv1a(const char* p, size_t n);  // 64 bits: stable across processes
std::string hex_hash(const std::string& s);  // fnv1a as 16 hex digits
std::string read_file(const std::string& path);  // "" when it cannot be read

// Writes `bytes` to `path` (created or truncated). Throws a mini::Error naming the file and
// the cause (write_failure) when it cannot, with nothing left at `path`.
void write_file(const std::string& path, const std::string& bytes);

// The message of a write to `path` in the kernel cache failing with errno `err`: a full disk
// or quota (ENOSPC, EDQUOT) names the folder and the fix (free space there, or point
// mini.config.cache_dir / MINI_CACHE_DIR at another disk).
std::string write_failure(const std::string& path, int err);

// Bytes of the trailer at the end of every entry.
size_t trailer_bytes();

// Whether `path` is a whole entry for `key`; its whole content (compiled bytes, then the
// trailer) in `bytes`. False with `why` saying what is wrong ("" for a missing file).
bool check_entry(const std::string& path, const std::string& key, std::string* why, std::string& bytes);

// Appends the trailer for `key` to the file `tmp` (a name of this process's own) and renames it
// to `path`. Throws a mini::Error naming the file when either step fails.
void publish_entry(const std::string& tmp, const std::string& path, const std::string& key);

// The folder entries go to: `requested`, or a temporary one of this process's own (announced
// once, in `warnings`, with the reason and the fix) when `requested` cannot hold files.
std::string usable_cache_dir(const std::string& requested, std::vector<std::string>* warnings);

// How many compiles may run at once: one per core, at most 8, or MINI_COMPILE_THREADS (as
// torch's compile_threads); at least 1. The C++ units of a graph, and its NVRTC programs.
int compile_threads();

}  // namespace mini::runtime
