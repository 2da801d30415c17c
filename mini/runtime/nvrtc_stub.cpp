// nvrtc_stub.cpp — nvrtc.h in a build without the CUDA toolkit.
#include "runtime/nvrtc.h"

#include "tensor/tensor.h"

namespace mini::runtime::nvrtc {

bool available() { return false; }

std::string unavailable_reason() {
  return "this build of mini has no CUDA toolkit, so no NVRTC to compile CUDA code: install it "
         "(/usr/local/cuda) and rebuild (cmake -DMINI_CUDA=ON), or use the C++ backend";
}

std::string version() { return ""; }

std::string compile(const std::string&, const std::string& name, const std::string&,
                    const std::vector<std::string>&, std::string*) {
  fail("cannot compile ", name, " for CUDA: ", unavailable_reason());
}

}  // namespace mini::runtime::nvrtc
