// nvrtc.cpp — see nvrtc.h. Linked against the toolkit's libnvrtc.
#include "runtime/nvrtc.h"

#include <nvrtc.h>

#include "tensor/tensor.h"

namespace mini::runtime::nvrtc {

namespace {

void check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) fail("NVRTC: ", call, " failed: ", nvrtcGetErrorString(r));
}

// Frees the program however compile() leaves.
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

}  // namespace

bool available() { return true; }
std::string unavailable_reason() { return ""; }

std::string version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return cat(major, ".", minor);
}

std::string compile(const std::string& source, const std::string& name, const std::string& arch,
                    const std::vector<std::string>& options, std::string* log) {
  if (arch.rfind("sm_", 0) != 0)
    fail("NVRTC: the architecture must be a real one such as sm_90 (a CUBIN of SASS), got '",
         arch, "'");
  Program prog;
  check(nvrtcCreateProgram(&prog.p, source.c_str(), name.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  std::vector<std::string> all = {"--gpu-architecture=" + arch, "-std=c++17"};
  all.insert(all.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& o : all) argv.push_back(o.c_str());
  nvrtcResult compiled = nvrtcCompileProgram(prog.p, int(argv.size()), argv.data());
  size_t log_size = 0;
  check(nvrtcGetProgramLogSize(prog.p, &log_size), "nvrtcGetProgramLogSize");
  std::string text(log_size, '\0');
  if (log_size) check(nvrtcGetProgramLog(prog.p, text.data()), "nvrtcGetProgramLog");
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
  if (log) *log = text;
  if (compiled != NVRTC_SUCCESS)
    fail("NVRTC could not compile ", name, " for ", arch, " (", nvrtcGetErrorString(compiled),
         "):\n", text);
  size_t size = 0;
  check(nvrtcGetCUBINSize(prog.p, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check(nvrtcGetCUBIN(prog.p, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace mini::runtime::nvrtc
