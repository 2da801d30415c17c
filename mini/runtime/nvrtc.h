// nvrtc.h — CUDA C++ source to a CUBIN, in process, with NVRTC (no GPU needed).
//
// Built from nvrtc.cpp where the CUDA toolkit was found at configure time, from nvrtc_stub.cpp
// otherwise (available() false; compile() raises saying so and how to get it).
#pragma once
#include <string>
#include <vector>

namespace mini::runtime::nvrtc {

bool available();
// Why available() is false: the build had no CUDA toolkit. "" when it is true.
std::string unavailable_reason();
// NVRTC's version, "13.0" ("" when unavailable): part of every CUBIN cache key.
std::string version();

// Compiles `source` (named `name` in messages) to a CUBIN for `arch` ("sm_90": SASS for that
// GPU, never PTX, which the driver would JIT-compile at load for ~190 ms), with `options` after
// mini's (-std=c++17, the architecture). NVRTC's log (warnings) in `log`. A source that does not
// compile is a mini::Error holding NVRTC's log.
std::string compile(const std::string& source, const std::string& name, const std::string& arch,
                    const std::vector<std::string>& options, std::string* log);

}  // namespace mini::runtime::nvrtc
