// compiled_graph.cpp — compiling generated C++ with the system compiler into a shared
// object, cached on disk under a hash of the source and the command, loading it, and running
// a compiled graph.
#include "runtime/compiled_graph.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "codegen/cpp_kernel.h"
#include "tensor/metrics.h"

namespace mini::runtime {

namespace {

std::string hex_hash(const std::string& s) {  // FNV-1a, 64 bits: stable across processes
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

void make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    mkdir(cur.c_str(), 0755);
  }
}

bool file_exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

// -mprefer-vector-width=512: GCC's tuning for Intel CPUs with AVX-512 uses 256-bit vectors
// unless told otherwise; generated kernels are where the arithmetic is, and the wider vectors
// ran chain8 27% faster on one core of a Sapphire Rapids (notes/perf.md). Ignored by CPUs
// without AVX-512, and already the default of GCC's AMD Zen 4/5 tuning.
std::string compiler_command() {
  const char* cxx = getenv("CXX");
  return std::string(cxx && *cxx ? cxx : "c++") +
         " -O3 -march=native -mprefer-vector-width=512 -fopenmp -std=c++17 -shared -fPIC";
}

std::shared_ptr<CompiledGraph> compile_graph(const graph::Graph& g, const std::string& cache_dir) {
  auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  auto cg = std::make_shared<CompiledGraph>();
  cg->schedule = fusion::schedule(g);
  cg->schedule_seconds = since(start);
  cg->source = codegen::render_cpp(cg->schedule);
  cg->codegen_seconds = since(start) - cg->schedule_seconds;
  metrics().generated_kernel_count += (int64_t)cg->schedule.groups.size();
  if (!cg->schedule.groups.empty()) {
    std::string command = compiler_command();
    std::string key = hex_hash(cg->source + "||" + command);
    std::string dir = cache_dir.empty() ? "/tmp/mini-cache" : cache_dir;
    make_dirs(dir);
    std::string lib = dir + "/" + key + ".so";
    cg->library_path = lib;
    cg->from_disk_cache = file_exists(lib);
    if (!cg->from_disk_cache) {
      std::string src = dir + "/" + key + ".cpp";
      std::string tmp = dir + "/" + key + "." + std::to_string(getpid()) + ".tmp.so";
      std::string log = dir + "/" + key + ".log";
      { std::ofstream(src) << cg->source; }
      std::string cmd = command + " " + src + " -o " + tmp + " > " + log + " 2>&1";
      int rc = std::system(cmd.c_str());
      if (rc != 0) {
        std::string out = read_file(log);
        if (out.size() > 2000) out = out.substr(0, 2000) + "...";
        bool missing = WIFEXITED(rc) && WEXITSTATUS(rc) == 127;  // the shell found no compiler
        if (missing)
          fail("no C++ compiler for generated code: `", command.substr(0, command.find(' ')),
               "` was not found. Install g++ (apt-get install g++), set CXX to a compiler, or use "
               "backend='eager'.\n", out);
        fail("mini generated C++ that does not compile (a bug in mini's code generation; the source is ",
             src, "):\n", out, "\nUse backend='eager' for this function meanwhile.");
      }
      if (std::rename(tmp.c_str(), lib.c_str()) != 0) fail("cannot move ", tmp, " to ", lib);
    }
    cg->handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!cg->handle) fail("cannot load generated kernels ", lib, ": ", dlerror());
    for (const auto& k : cg->schedule.groups) {
      auto fn = (KernelFn)dlsym(cg->handle, k.name.c_str());
      if (!fn) fail("generated library ", lib, " has no kernel ", k.name);
      cg->kernels.push_back(fn);
    }
  }
  // What to release after each step, decided once here rather than on every run.
  const graph::Graph& planned = cg->schedule.graph;  // the decomposed graph the steps run
  std::set<int> outputs(planned.outputs.begin(), planned.outputs.end());
  cg->frees.resize(cg->schedule.steps.size());
  for (size_t id = 0; id < planned.nodes.size(); id++) {
    int last = cg->schedule.last_use[id];
    if (last >= 0 && !outputs.count((int)id) && planned.nodes[id].kind != graph::NodeKind::Input)
      cg->frees[last].push_back((int)id);
  }
  cg->compile_seconds = since(start);
  cg->cxx_seconds = cg->compile_seconds - cg->schedule_seconds - cg->codegen_seconds;
  return cg;
}

std::vector<Tensor> CompiledGraph::run(const std::vector<Tensor>& inputs) const {
  const graph::Graph& g = schedule.graph;
  if (inputs.size() != g.inputs.size()) fail("compiled graph expects ", g.inputs.size(), " inputs, got ", inputs.size());
  std::vector<Tensor> values(g.nodes.size());
  for (size_t i = 0; i < inputs.size(); i++) values[g.inputs[i]] = inputs[i];
  std::vector<int64_t> symbols;
  for (const auto& s : g.symbols) symbols.push_back(inputs[s.input]->sizes[s.dim]);
  auto resolve = [&](Shape shape) {
    for (auto& v : shape)
      if (graph::is_symbol(v)) v = symbols[graph::symbol_index(v)];
    return shape;
  };
  std::vector<char*> buffers;
  std::vector<const int64_t*> strides;
  for (size_t si = 0; si < schedule.steps.size(); si++) {
    const fusion::Step& st = schedule.steps[si];
    if (st.kind == fusion::StepKind::Kernel) {
      const fusion::FusionGroup& k = schedule.groups[st.group];
      buffers.clear();
      strides.clear();
      int64_t bytes = 0;
      for (int id : k.loads) {
        const Tensor& t = values[id] ? values[id] : g.nodes[id].constant;
        buffers.push_back((char*)t->raw());
        strides.push_back(t->strides.data());
        bytes += t->wrapped_number ? 0 : t->nbytes();
      }
      for (int id : k.stores) {
        values[id] = TensorImpl::empty(resolve(g.nodes[id].meta.sizes), g.nodes[id].meta.dtype);
        buffers.push_back((char*)values[id]->raw());
        bytes += values[id]->nbytes();
      }
      kernels[st.group](buffers.data(), strides.data(), symbols.data());
      count_kernel(bytes);
    } else {
      const graph::Node& n = g.nodes[st.node];
      std::vector<Tensor> args;
      for (int i : n.inputs) args.push_back(i < 0 ? nullptr : values[i] ? values[i] : g.nodes[i].constant);
      Attrs a = n.attrs;
      a.shape = resolve(a.shape);
      if (graph::is_symbol(a.end)) a.end = symbols[graph::symbol_index(a.end)];
      values[st.node] = call_op(n.op, args, a);  // a view (no kernel) or an extern call
    }
    for (int id : frees[si]) values[id].reset();  // what no later step reads
  }
  std::vector<Tensor> out;
  for (int o : g.outputs) out.push_back(values[o] ? values[o] : g.nodes[o].constant);
  return out;
}

}  // namespace mini::runtime
