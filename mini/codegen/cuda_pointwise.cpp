// cuda_pointwise.cpp — the CUDA writer's pointwise kernels (cuda_writer.h): a grid-stride loop
// over 16-byte vectors of the flat index, or one element a thread (layout 1).
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
void CudaKernelWriter::write_pointwise(std::ostringstream& o) {
  std::set<int> targets(k_.stores.begin(), k_.stores.end());
  std::vector<int> full = L_.full_values_for(targets);
  if (!layout_.vector_pointwise) {
    o << "  const int64_t numel = " << product(k_.space, L_.kept_dims()) << ";\n";
    write_elements(o, "", full);
    return;
  }
  std::map<int, std::string> flat;  // buffer -> its element type, for contiguous loads
  std::map<LoadKey, Expr> padded;   // padded loads (slice_backward)
  for (int id : full)
    for_each_load(L_.expr(id, true), [&](const Expr& e) {
      if (e.index.flat) flat[e.buffer] = cuda_type(e.dtype);
      if (e.index.pad_dim >= 0) padded.emplace(load_key(e), e);
    });
  size_t widest = 1;
  for (auto& [b, T] : flat) widest = std::max(widest, (size_t)itemsize(g_.nodes[load_node(b)].meta.dtype));
  for (int id : k_.stores) widest = std::max(widest, (size_t)itemsize(g_.nodes[id].meta.dtype));
  const int V = (int)(16 / widest);
  // A padded load reads a Vec too where every vector lies in one row of the innermost dim and
  // wholly inside or outside its slice: from where lane 0 reads, or zeros.
  std::map<LoadKey, std::string> pad_vectors;
  const int64_t last = k_.space.empty() ? -1 : k_.space.back();
  for (auto& [key, e] : padded)
    if (last > 0 && last % V == 0 && itemsize(e.dtype) * V <= 16 && runs_along_innermost(e, V))
      pad_vectors[key] = "p" + std::to_string(pad_vectors.size());
  const std::string index_type = fits_int32() ? "int" : "int64_t";

  o << "  const int64_t numel = " << product(k_.space, L_.kept_dims()) << ";\n";
  o << "  constexpr int V = " << V << ";\n";
  o << "  const int64_t nvec = numel / V;  // every pointer aligned to its Vec (cuda_assumes_aligned)\n";
  o << "  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {\n";
  o << "    const int64_t i = v * V;\n";
  for (auto& [b, T] : flat)
    o << "    const mini::Vec<" << T << ", V> l" << b << " = *reinterpret_cast<const mini::Vec<" << T << ", V>*>(in" << b
      << " + i);\n";
  if (!pad_vectors.empty()) {  // at lane 0's index: the vector's row and first column
    for (auto& [key, name] : pad_vectors)
      o << "    mini::Vec<" << cuda_type(padded.at(key).dtype) << ", V> " << name << ";\n";
    o << "    {\n";
    o << "      const " << index_type << " il = " << index_type << "(i);\n";
    o << unflatten(k_.space, "il", L_.kept_dims(), "      ", index_type);
    for (auto& [key, name] : pad_vectors)
      o << "      " << name << " = " << vector_read(padded.at(key), "V")
        << ";  // a slice's gradient, or the zeros around it\n";
    o << "    }\n";
  }
  for (int id : k_.stores) o << "    mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", V> s" << id << ";\n";
  o << "    #pragma unroll\n";
  o << "    for (int lane = 0; lane < V; lane++) {\n";
  if (L_.flat_uses_index()) {
    o << "      const " << index_type << " il = " << index_type << "(i + lane);\n";
    o << unflatten(k_.space, "il", L_.kept_dims(), "      ", index_type);
  }
  Locals lanes;  // each contiguous load and each padded vector read lane by lane
  for (int id : full)
    for_each_load(L_.expr(id, true), [&](const Expr& e) {
      if (e.index.flat) lanes.loads[load_key(e)] = "l" + std::to_string(e.buffer) + ".v[lane]";
    });
  for (auto& [key, name] : pad_vectors) lanes.loads[key] = name + ".v[lane]";
  for (int id : full) o << define("      ", 't', id, true, lanes);
  for (int id : k_.stores) o << "      s" << id << ".v[lane] = t" << id << ";\n";
  o << "    }\n";
  for (int id : k_.stores)
    o << "    *reinterpret_cast<mini::Vec<" << cuda_type(g_.nodes[id].meta.dtype) << ", V>*>(" << out(id) << " + i) = s" << id
      << ";\n";
  o << "  }\n";
  int64_t numel = 1;
  for (int64_t d : L_.kept_dims()) numel = graph::is_symbol(k_.space[d]) || numel < 0 ? -1 : numel * k_.space[d];
  if (numel < 0 || numel % V) write_elements(o, "nvec * V + ", full);
}

// One element a thread, grid-strided from `first` (the vector loop's tail, or every element).
void CudaKernelWriter::write_elements(std::ostringstream& o, const std::string& first, const std::vector<int>& full) {
  o << "  for (int64_t i = " << first << "blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < numel;\n"
    << "       i += (int64_t)gridDim.x * blockDim.x) {\n";
  if (L_.flat_uses_index()) o << unflatten(k_.space, "i", L_.kept_dims(), "    ");
  for (int id : full) o << define("    ", 't', id, true);
  for (int id : k_.stores) o << "    " << out(id) << "[i] = t" << id << ";\n";
  o << "  }\n";
}

}  // namespace mini::codegen
