// store_protocol.h — the messages between the store's clients (every rank) and its server
// (a thread of rank 0): what tcp_store.cpp writes and store_server.cpp reads, and back.
//
// A frame is a 4-byte length, then that many bytes of payload; a payload is fields one after
// another: a byte, an 8-byte integer, or a string (its 4-byte length, then its bytes). The
// requests and their answers:
//   Set   key value                -> (nothing: an empty payload)
//   Get   key                      -> found(byte) value        (no waiting: Wait comes first)
//   Add   key delta                -> the new value            (a missing key counts as 0)
//   Wait  timeout_ms count keys... -> count, then the keys still missing when the timeout
//                                     passed (count 0: every key is there)
// Integers travel in the machine's byte order: every rank of a job is the same program.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace mini::distributed::protocol {

enum class Command : uint8_t { Set = 1, Get = 2, Add = 3, Wait = 4 };

class Writer {
 public:
  Writer& byte(uint8_t v) { return raw(&v, 1); }
  Writer& integer(int64_t v) { return raw(&v, 8); }
  Writer& text(const std::string& s) {
    uint32_t n = static_cast<uint32_t>(s.size());
    raw(&n, 4);
    payload_ += s;
    return *this;
  }
  std::string frame() const {  // the length, then the payload
    uint32_t n = static_cast<uint32_t>(payload_.size());
    return std::string(reinterpret_cast<const char*>(&n), 4) + payload_;
  }

 private:
  Writer& raw(const void* p, size_t n) {
    payload_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string payload_;
};

// Reads fields of a payload in order; ok() turns false (and stays) when one runs past the end.
class Reader {
 public:
  explicit Reader(const std::string& payload) : payload_(payload) {}
  uint8_t byte() {
    uint8_t v = 0;
    raw(&v, 1);
    return v;
  }
  int64_t integer() {
    int64_t v = 0;
    raw(&v, 8);
    return v;
  }
  std::string text() {
    uint32_t n = 0;
    raw(&n, 4);
    if (!ok_ || payload_.size() - at_ < n) {
      ok_ = false;
      return {};
    }
    std::string s = payload_.substr(at_, n);
    at_ += n;
    return s;
  }
  bool ok() const { return ok_; }

 private:
  void raw(void* p, size_t n) {
    if (!ok_ || payload_.size() - at_ < n) {
      ok_ = false;
      return;
    }
    std::memcpy(p, payload_.data() + at_, n);
    at_ += n;
  }
  const std::string& payload_;
  size_t at_ = 0;
  bool ok_ = true;
};

// The length in a frame's first 4 bytes.
inline uint32_t frame_length(const char* first_four) {
  uint32_t n;
  std::memcpy(&n, first_four, 4);
  return n;
}

}  // namespace mini::distributed::protocol
