// metrics.h — counters every kernel bumps: launches and bytes moved (operands read + output
// written). The labs read them through mini.metrics. Plain globals: the eager runtime is
// single-threaded at the op level (kernels parallelize inside).
#pragma once
#include <cstdint>

#include "dtype.h"

namespace mini {

struct Metrics {
  int64_t kernel_launches = 0;
  int64_t bytes_moved = 0;
  int64_t generated_kernel_count = 0;
  // matrix products run (BLAS / cuBLAS calls of matmul, eager or a compiled graph's extern), by
  // their operands' dtype: what shows whether autocast reached every GEMM
  int64_t matmuls[kNumDTypes] = {};
  void reset() { *this = Metrics{}; }
};

Metrics& metrics();

// Bytes a kernel reads for one operand: its storage as laid out. A Python number (a
// "wrapped number" tensor) is a kernel argument held in a register, so it counts 0.
#define MINI_OPERAND_BYTES(t) ((t)->wrapped_number ? 0 : (t)->nbytes())

inline void count_kernel(int64_t bytes) {
  metrics().kernel_launches += 1;
  metrics().bytes_moved += bytes;
}

// Bytes of CPU tensor storage alive now, and the most alive at once since the last
// reset_cpu_memory_peak(): what mini's tensors hold (not the block cache's idle buffers), the
// CPU's answer to torch.cuda.max_memory_allocated. Atomic: storages die on any thread.
int64_t cpu_memory_allocated();
int64_t cpu_memory_peak();
void reset_cpu_memory_peak();

}  // namespace mini
