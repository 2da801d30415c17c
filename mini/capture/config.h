// config.h — capture's settings (mini.config), read by the driver and the tracer alike.
#pragma once
#include <Python.h>

#include <string>

#include "guards/cache.h"

namespace mini::capture {

struct CompileConfig {
  std::string cache_dir;
  int cache_size_limit = 8;
  guards::CachePolicy cache_policy = guards::CachePolicy::Recent;  // "recent", "oldest", "yours" (A6)
  bool automatic_dynamic_shapes = true;
  bool capture_scalar_outputs = false;
  bool suppress_errors = false;  // a graph inductor fails to compile runs eagerly, with a warning
  std::string partitioner = "recompute";  // inductor's training graphs: "recompute" or "min-cut"
  // F.scaled_dot_product_attention in a graph: one fused node ("auto": where FlashAttention runs;
  // "always": wherever the fused kernel does; "never": its matmuls and softmax)
  std::string fused_attention = "auto";
  // a graph captured inside a DistributedDataParallel forward is split at DDP's bucket
  // boundaries, each piece compiled on its own (DDPOptimizer, capture/ddp_optimizer.h)
  bool optimize_ddp = true;
};
CompileConfig& compile_config();

// The exception type raised under fullgraph=True (mini.Unsupported), set by the module.
extern PyObject* g_unsupported_error;

// Files under this prefix are mini's own: never captured.
extern std::string g_skip_prefix;

// Code of mini.nn.parallel (DistributedDataParallel): never traced, not even inlined. Its forward
// runs as it is, a call to it from traced code is a graph break, and the frame captured is the
// inner module's (Dynamo skips torch.nn.parallel the same way; capture/ddp_optimizer.h).
bool is_parallel_code(PyCodeObject* code);
extern const char* const kParallelCodeBreak;  // the graph break's reason

}  // namespace mini::capture
