// backend.cpp — see backend.h: the registry of built-in backends, and "eager".
#include "backends/backend.h"

#include <map>
#include <memory>

namespace mini::backends {

namespace {

// backend="eager": nothing to compile; the graph runs with the eager kernels.
class Eager : public Backend {
 public:
  Runner compile(const graph::Graph&, const CompileOptions&) override { return {}; }
};

std::map<std::string, std::unique_ptr<Backend>>& registry() {
  static std::map<std::string, std::unique_ptr<Backend>> backends = [] {
    std::map<std::string, std::unique_ptr<Backend>> m;
    m["eager"] = std::make_unique<Eager>();
    return m;
  }();
  return backends;
}

}  // namespace

Backend* find_backend(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second.get();
}

void register_backend(const std::string& name, std::unique_ptr<Backend> backend) {
  registry()[name] = std::move(backend);
}

Runner interpret(std::shared_ptr<graph::Graph> g) {
  return [g](const std::vector<Tensor>& inputs) { return graph::run_graph(*g, inputs); };
}

}  // namespace mini::backends
