// cuda_pointwise.cpp — the CUDA writer's pointwise kernels (cuda_writer.h): plan_pointwise, the
// planner of the pointwise shape (a grid-stride loop over 16-byte vectors of the flat index, or
// one element a thread in layout 1), as statements (stmt.h) that cuda_statements.cpp spells.
#include "codegen/cuda_writer.h"

#include <algorithm>

namespace mini::codegen {

// Pointwise: a grid-stride loop over vectors of V elements (V: 16 bytes of the widest
// contiguous load or store), each contiguous load and each store one Vec instruction and
// the rest per lane, the lanes unrolled; then, where the element count is not a static
// multiple of V, the last few elements one at a time. Every pointer is aligned
// (cuda_assumes_aligned: the runtime copies a misaligned input first), so there is no
// element-by-element path for another address: a second copy of the expressions cost chain8
// 26% of its NVRTC time (sin, cos and exp inlined again). (One loop with lane-by-lane edges
// wrote the expressions once, compiled 15% faster, and ran chain8 11% slower on the H200: the
// predicates cost the fast path.) The index is split into x0, x1, ... only where a load needs
// it (a load contiguous over the whole space reads in[i]); 32-bit index arithmetic where
// every offset fits.
Plan CudaKernelWriter::plan_pointwise() {
  Plan plan;
  plan.shape = "pointwise";
  std::set<int> targets(k_.stores.begin(), k_.stores.end());
  const std::vector<int> full = L_.full_values_for(targets);
  plan.body.push_back(index_let("numel", product(k_.space, L_.kept_dims()), false));
  if (!layout_.vector_pointwise) {
    plan.body.push_back(plan_elements("", full));
    return plan;
  }
  PointwiseVectors vectors;
  for (int id : full)
    for_each_load(L_.expr(id, true), [&](const Expr& e) {
      if (e.index.flat) vectors.flat[e.buffer] = e.dtype;
      if (e.index.pad_dim >= 0) vectors.padded.emplace(load_key(e), e);
    });
  size_t widest = 1;
  for (auto& [b, T] : vectors.flat) widest = std::max(widest, (size_t)itemsize(g_.nodes[load_node(b)].meta.dtype));
  for (int id : k_.stores) widest = std::max(widest, (size_t)itemsize(g_.nodes[id].meta.dtype));
  const int V = (int)(16 / widest);
  // A padded load reads a Vec too where every vector lies in one row of the innermost dim and
  // wholly inside or outside its slice: from where lane 0 reads, or zeros.
  const int64_t last = k_.space.empty() ? -1 : k_.space.back();
  for (auto& [key, e] : vectors.padded)
    if (last > 0 && last % V == 0 && itemsize(e.dtype) * V <= 16 && runs_along_innermost(e, V))
      vectors.pad_vectors[key] = "p" + std::to_string(vectors.pad_vectors.size());
  Stmt lanes_constant = index_let("V", std::to_string(V), true);
  lanes_constant.constant = true;
  plan.body.push_back(lanes_constant);
  plan.body.push_back(index_let("nvec", "numel / V", false, "every pointer aligned to its Vec (cuda_assumes_aligned)"));
  Stmt loop = range(RangeKind::GridStride, "v", "", "nvec", plan_vector_loop(vectors, full));
  plan.body.push_back(loop);
  int64_t numel = 1;
  for (int64_t d : L_.kept_dims()) numel = graph::is_symbol(k_.space[d]) || numel < 0 ? -1 : numel * k_.space[d];
  if (numel < 0 || numel % V) plan.body.push_back(plan_elements("nvec * V", full));
  return plan;
}

// One vector of the grid-stride loop: its Vec loads (at i, or at lane 0's index for a padded
// load), the lanes unrolled (each contiguous load read from its Vec's lane), the Vec stores.
Body CudaKernelWriter::plan_vector_loop(const PointwiseVectors& vectors, const std::vector<int>& full) {
  const bool int32 = fits_int32();
  const std::string I = int32 ? "int" : "int64_t";
  Body loop = {index_let("i", "v * V", false)};
  for (auto& [b, dtype] : vectors.flat) loop.push_back(vector_load("l" + std::to_string(b), dtype, b, "i", "V"));
  if (!vectors.pad_vectors.empty()) {  // at lane 0's index: the vector's row and first column
    Body at_lane0 = {index_let("il", I + "(i)", int32), unflatten_index("il", L_.kept_dims(), int32)};
    for (auto& [key, name] : vectors.pad_vectors) {
      const Expr& e = vectors.padded.at(key);
      loop.push_back(declare_vector(name, e.dtype, "V"));
      Stmt read = vector_load(name, e.dtype, key.buffer, "", "V");
      read.value = std::make_shared<const Expr>(e);
      read.assign = true;
      read.note = "a slice's gradient, or the zeros around it";
      at_lane0.push_back(read);
    }
    loop.push_back(scope(at_lane0));
  }
  for (int id : k_.stores) loop.push_back(declare_vector("s" + std::to_string(id), g_.nodes[id].meta.dtype, "V"));
  Locals lanes;  // each contiguous load and each padded vector read lane by lane
  for (int id : full)
    for_each_load(L_.expr(id, true), [&](const Expr& e) {
      if (e.index.flat) lanes.loads[load_key(e)] = "l" + std::to_string(e.buffer) + ".v[lane]";
    });
  for (auto& [key, name] : vectors.pad_vectors) lanes.loads[key] = name + ".v[lane]";
  Body lane;
  if (L_.flat_uses_index()) {
    lane.push_back(index_let("il", I + "(i + lane)", int32));
    lane.push_back(unflatten_index("il", L_.kept_dims(), int32));
  }
  for (int id : full) lane.push_back(let("t" + std::to_string(id), g_.nodes[id].meta.dtype, lanes.apply(L_.expr(id, true))));
  for (int id : k_.stores) lane.push_back(vector_lane("s" + std::to_string(id), "lane", temp(id, g_.nodes[id].meta.dtype, false)));
  Stmt lane_loop = range(RangeKind::Unrolled, "lane", "0", "V", lane);
  lane_loop.int32 = true;
  loop.push_back(lane_loop);
  for (int id : k_.stores)
    loop.push_back(vector_store("s" + std::to_string(id), g_.nodes[id].meta.dtype, L_.buffer_of_store(id), "i", "V"));
  return loop;
}

// One element a thread, grid-strided from `first` (the vector loop's tail, or every element).
Stmt CudaKernelWriter::plan_elements(const std::string& first, const std::vector<int>& full) {
  Body element;
  if (L_.flat_uses_index()) element.push_back(unflatten_index("i", L_.kept_dims(), false));
  for (int id : full) element.push_back(let("t" + std::to_string(id), g_.nodes[id].meta.dtype, L_.expr(id, true)));
  for (int id : k_.stores) element.push_back(store(L_.buffer_of_store(id), "i", temp(id, g_.nodes[id].meta.dtype, false)));
  Stmt loop = range(RangeKind::GridStride, "i", first, "numel", element);
  loop.wrapped = true;
  return loop;
}

}  // namespace mini::codegen
