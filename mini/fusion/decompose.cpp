// decompose.cpp — composite ops rewritten into the ops fusion understands (Inductor's
// decompositions): softmax = amax, sub, exp, sum, div; log_softmax; layer_norm = mean,
// sub, mul, mean, add, rsqrt, mul (and the affine mul/add); mse_loss = sub, mul, mean/sum;
// a reduction of a 0-d tensor, and a softmax of an empty one = a cast; for cuBLAS, a copy of a
// matmul operand it cannot read as it is, a bias add folded into the matmul before it (the
// GEMM's epilogue adds it), and for the fused attention kernels a copy of an operand that is
// not dense, as a clone fusion sees.
#include "fusion/schedule.h"

#include <algorithm>

#include "tensor/cuda/kernels.h"

namespace mini::fusion {

namespace {
struct Builder {
  graph::Graph& g;
  std::string code;
  int op(OpKind k, std::vector<int> in, Attrs a = {}) { return g.add_op(k, in, a, code); }
  int cast(int x, DType dtype) {
    Attrs a;
    a.dtype = dtype;
    return op(OpKind::Cast, {x}, a);
  }
  // A reduction of a 0-d tensor reduces no dim: its one value, as a cast (a kernel's loops
  // come from its reduced dims, and this one has none).
  int reduce(OpKind k, int x, std::vector<int64_t> dims, bool keepdim) {
    if (g.nodes[x].meta.sizes.empty()) return cast(x, g.nodes[x].meta.dtype);
    Attrs a;
    a.dims = std::move(dims);
    a.keepdim = keepdim;
    return op(k, {x}, a);
  }
  int number(double v) { return g.add_constant(v, DType::Float64); }
};

// How BLAS reads a matmul operand of this meta without a copy, as the extern call decides at
// run time (matmul.cpp, cuda/matmul.cu): its last two dims row-major ("N") or column-major
// ("T"), and its batch dims one run at one stride. Unknown sizes or strides (symbols), and
// batches that broadcast, are left to the run time.
enum class BlasRead { AsIs, CopyRowMajor, CopyColumnMajor };

BlasRead blas_read(const graph::TensorMeta& m, const graph::TensorMeta& other) {
  const Shape& size = m.sizes;
  const Strides& stride = m.strides;
  const size_t r = size.size();
  if (r < 3 || stride.size() != r || other.sizes.size() != r) return BlasRead::AsIs;
  for (size_t d = 0; d < r; d++)
    if (graph::is_symbol(size[d]) || graph::is_symbol(stride[d]) || stride[d] < 0 ||
        (d + 2 < r && size[d] != other.sizes[d]))
      return BlasRead::AsIs;
  const int64_t rows = size[r - 2], cols = size[r - 1], rs = stride[r - 2], cs = stride[r - 1];
  const bool row_major = (cs == 1 || cols == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1));
  const bool col_major = (rs == 1 || rows == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1));
  bool one_stride = true;  // the batch dims of size > 1, each at its inner neighbour's span
  int64_t inner = -1;      // the last batch dim of size > 1 seen, walking outwards
  for (size_t d = r - 2; d-- > 0;) {
    if (size[d] == 1) continue;
    if (stride[d] == 0) return BlasRead::AsIs;  // a broadcast batch: the run time decides
    if (inner >= 0 && stride[d] != stride[inner] * size[inner]) one_stride = false;
    inner = (int64_t)d;
  }
  if ((row_major || col_major) && one_stride) return BlasRead::AsIs;
  return col_major && !row_major ? BlasRead::CopyColumnMajor : BlasRead::CopyRowMajor;
}

// Whether a tensor of this meta is row-major and dense (dims of size 1 at any stride), as the
// fused attention kernels read their operands; unknown sizes or strides count as dense (the
// extern call copies at run time what is not).
bool dense(const graph::TensorMeta& m) {
  int64_t expected = 1;
  for (size_t d = m.sizes.size(); d-- > 0;) {
    if (graph::is_symbol(m.sizes[d]) || d >= m.strides.size() || graph::is_symbol(m.strides[d])) return true;
    if (m.sizes[d] != 1 && m.strides[d] != expected) return false;
    expected *= m.sizes[d];
  }
  return true;
}

// Ops whose extern call reads dense operands (a copy otherwise, one launch per operand).
bool reads_dense(OpKind op) { return op == OpKind::Attention || op == OpKind::AttentionBackward; }

// Whether the extern call of attention node `n` reads operand `m` as it is: the flash kernels
// (CUDA bfloat16 or float32, head dim 64 or 128) take strided heads of their dtype
// (cuda::flash_attention_reads); the others read dense rows.
bool attention_reads(const graph::Node& n, const graph::Graph& g, const graph::TensorMeta& m) {
  const graph::TensorMeta& q = g.nodes[n.inputs[0]].meta;
  const graph::TensorMeta& v = g.nodes[n.inputs[2]].meta;
  if (!q.sizes.empty() && !v.sizes.empty() &&
      cuda::flash_attention_supports(q.dtype, q.sizes.back(), v.sizes.back()) && m.dtype == q.dtype)
    return cuda::flash_attention_reads(graph::meta_tensor(m));
  return dense(m);
}

// softmax = exp(x - amax) / sum; log_softmax = (x - amax) - log(sum).
int softmax(Builder& b, const graph::Node& n, const std::vector<int>& in) {
  const Attrs& a = n.attrs;
  // nothing to compute (and amax has no identity)
  if (numel_of(n.meta.sizes) == 0) return b.cast(in[0], n.meta.dtype);
  int m = b.reduce(OpKind::Amax, in[0], {a.dim}, true);
  int s = b.op(OpKind::Sub, {in[0], m});
  int e = b.op(OpKind::Exp, {s});
  int z = b.reduce(OpKind::Sum, e, {a.dim}, true);
  return n.op == OpKind::Softmax ? b.op(OpKind::Div, {e, z}) : b.op(OpKind::Sub, {s, b.op(OpKind::Log, {z})});
}

// layer_norm = (x - mean) * rsqrt(var + eps), then the affine weight and bias.
int layer_norm(Builder& b, const graph::Node& n, const std::vector<int>& in) {
  const Attrs& a = n.attrs;
  int64_t rank = (int64_t)n.meta.sizes.size();
  std::vector<int64_t> dims;
  for (int64_t d = rank - a.dim; d < rank; d++) dims.push_back(d);
  // The mean and x - mean in float64 for a float32 x: a float32 mean of a row with mean
  // 100 and std 0.01 is off by a few 1e-6 (its rounding, and float partial sums), 1e-4
  // to 1e-3 of a standard deviation in every output. The casts stay in the kernel.
  bool f32 = n.meta.dtype == DType::Float32;
  Attrs to64, to32;
  to64.dtype = DType::Float64;
  to32.dtype = DType::Float32;
  int x = f32 ? b.op(OpKind::Cast, {in[0]}, to64) : in[0];
  int mu = b.reduce(OpKind::Mean, x, dims, true);
  int xc = b.op(OpKind::Sub, {x, mu});
  if (f32) xc = b.op(OpKind::Cast, {xc}, to32);
  int var = b.reduce(OpKind::Mean, b.op(OpKind::Mul, {xc, xc}), dims, true);
  int rstd = b.op(OpKind::Rsqrt, {b.op(OpKind::Add, {var, b.number(a.eps)})});
  int y = b.op(OpKind::Mul, {xc, rstd});
  if (in.size() > 1 && in[1] >= 0) y = b.op(OpKind::Mul, {y, in[1]});
  if (in.size() > 2 && in[2] >= 0) y = b.op(OpKind::Add, {y, in[2]});
  return y;
}

// mse_loss = (x - y)^2, then its mean or sum.
int mse_loss(Builder& b, const graph::Node& n, const std::vector<int>& in) {
  const Attrs& a = n.attrs;
  int d = b.op(OpKind::Sub, {in[0], in[1]});
  int sq = b.op(OpKind::Mul, {d, d});
  return a.mode == "none" ? sq : b.reduce(a.mode == "mean" ? OpKind::Mean : OpKind::Sum, sq, {}, false);
}

// A gradient placed in the slice it came from, zeros around it: generated code (a padded
// load, codegen/loop_ir.h), so that the qkv split's three gradients and their sum are one
// kernel, not three extern fills and copies. Its input is read from memory: a view of
// whatever computes it (a kernel reads a view only once the value is stored). A step
// other than 1 or a symbolic size along the sliced dim stays an extern call: a slice_scatter
// into zeros.
int slice_backward(Builder& b, const graph::Node& n, const std::vector<int>& in) {
  const Attrs& a = n.attrs;
  graph::Graph& g = b.g;
  const graph::TensorMeta& gm = g.nodes[in[0]].meta;
  const int64_t rank = (int64_t)gm.sizes.size(), d = a.dim < 0 ? a.dim + rank : a.dim;
  bool padded = a.step == 1 && d >= 0 && d < rank && (int64_t)a.shape.size() == rank && a.start >= 0 &&
                !graph::is_symbol(a.start);  // the sliced dim static (any other may be a symbol)
  padded = padded && gm.sizes[d] >= 0 && a.shape[d] >= 0 && a.start + gm.sizes[d] <= a.shape[d];
  if (!padded) {
    Attrs z;
    z.shape = a.shape;
    z.dtype = n.meta.dtype;
    z.device = g.device;
    return b.op(OpKind::SliceScatter, {b.op(OpKind::Full, {}, z), in[0]}, a);
  }
  int x = in[0];
  const graph::Node& made = g.nodes[x];
  if (made.kind == graph::NodeKind::Op && op_class(made.op) != OpClass::View) {
    Attrs same;
    same.shape = gm.sizes;
    x = b.op(OpKind::Reshape, {x}, same);
  }
  return b.op(OpKind::SliceBackward, {x}, a);
}

// decompose's state: the graph being built, where each source node went, and the copies made
// of operands that an extern call cannot read as they are.
struct Decomposition {
  const graph::Graph& src;
  graph::Graph& g;
  std::vector<int> map = std::vector<int>(src.nodes.size(), -1);  // source node -> its value in g
  // matmul operands BLAS cannot read as they are: the layout of their copy, made where the
  // operand is made (beside its siblings, for fusion to merge), and then the copy's node
  std::vector<BlasRead> copy = std::vector<BlasRead>(src.nodes.size(), BlasRead::AsIs);
  std::vector<int> copied = std::vector<int>(src.nodes.size(), -1);
  // bias adds folded into their matmul: add node -> the matmul it absorbs (-1: none); the
  // matmul itself is then not emitted, the add becomes matmul(a, b, bias)
  std::vector<int> folds = std::vector<int>(src.nodes.size(), -1);
  std::vector<bool> folded = std::vector<bool>(src.nodes.size(), false);

  // matmul(x, w) + bias as one GEMM with the bias in its epilogue (cuBLASLt's, as torch's
  // addmm), where w is a matrix, bias a vector along the output's last dim, all three of one
  // dtype, and nothing else reads the matmul's output: the add would otherwise be a kernel of
  // its own where nothing fuses with it (the qkv projection, read by attention), or a bias load
  // in the kernel that follows.
  void plan_bias_folds() {
    std::vector<int> readers(src.nodes.size(), 0);
    for (const graph::Node& n : src.nodes)
      for (int i : n.inputs)
        if (i >= 0) readers[i]++;
    for (int o : src.outputs) readers[o] += 2;  // an output is read outside: never folded
    for (size_t id = 0; id < src.nodes.size(); id++) {
      const graph::Node& add = src.nodes[id];
      if (add.kind != graph::NodeKind::Op || add.op != OpKind::Add || add.inputs.size() != 2) continue;
      for (int side = 0; side < 2; side++) {
        const int m = add.inputs[side], bias = add.inputs[1 - side];
        if (m < 0 || bias < 0 || readers[m] != 1) continue;
        const graph::Node& mm = src.nodes[m];
        if (mm.kind != graph::NodeKind::Op || mm.op != OpKind::Matmul || mm.inputs.size() != 2) continue;
        const graph::TensorMeta &x = src.nodes[mm.inputs[0]].meta, &w = src.nodes[mm.inputs[1]].meta,
                                &b = src.nodes[bias].meta;
        const DType t = add.meta.dtype;
        if (x.sizes.size() < 2 || w.sizes.size() != 2 || b.sizes.size() != 1 || b.sizes[0] != w.sizes[1] ||
            x.dtype != t || w.dtype != t || b.dtype != t || src.nodes[bias].wrapped_number ||
            mm.meta.sizes != add.meta.sizes)
          continue;
        folds[id] = m;
        folded[m] = true;
        break;
      }
    }
  }

  // Which operands get a copy (one_batch_stride: cuBLAS's matmuls and the fused attention).
  void plan_copies() {
    for (const graph::Node& n : src.nodes)
      if (n.kind == graph::NodeKind::Op && n.op == OpKind::Matmul && n.inputs.size() == 2)
        for (int side = 0; side < 2; side++) {
          int i = n.inputs[side], j = n.inputs[1 - side];
          BlasRead how = blas_read(src.nodes[i].meta, src.nodes[j].meta);
          if (how != BlasRead::AsIs) copy[i] = how;
        }
    // the fused attention's operands likewise: q, k and v as heads of one projection (transposed
    // views) get their copies as one generated kernel, not three extern copies
    for (const graph::Node& n : src.nodes)
      if (n.kind == graph::NodeKind::Op && reads_dense(n.op))
        for (int i : n.inputs)
          if (i >= 0 && copy[i] == BlasRead::AsIs && !attention_reads(n, src, src.nodes[i].meta))
            copy[i] = BlasRead::CopyRowMajor;
  }

  // The copy of source node id, where plan_copies asked for one, right after the node.
  void make_copy(size_t id) {
    if (copy[id] == BlasRead::AsIs) return;
    Builder b{g, src.nodes[id].code};
    int x = map[id];
    if (copy[id] == BlasRead::CopyRowMajor) {
      copied[id] = b.op(OpKind::Clone, {x});
      return;
    }
    // column-major in its last two dims (a transposed view, k^T): copied as the transpose of a
    // row-major copy, which BLAS reads with "T"; the copy then has q's and v's layout
    Attrs t;
    t.dim = (int64_t)src.nodes[id].meta.sizes.size() - 2;
    t.dim2 = t.dim + 1;
    copied[id] = b.op(OpKind::Transpose, {b.op(OpKind::Clone, {b.op(OpKind::Transpose, {x}, t)})}, t);
  }

  // The values op node n reads in g: an operand's copy where n's extern call needs it.
  std::vector<int> inputs_of(const graph::Node& n) const {
    std::vector<int> in;
    for (int i : n.inputs)
      in.push_back(i < 0                                                                  ? -1
                   : n.op == OpKind::Matmul && copied[i] >= 0                              ? copied[i]
                   : reads_dense(n.op) && copy[i] == BlasRead::CopyRowMajor && copied[i] >= 0 ? copied[i]
                                                                                           : map[i]);
    return in;
  }

  // Op node id of src in g: a composite as its parts, any other op as it is.
  int op(size_t id) {
    const graph::Node& n = src.nodes[id];
    if (folded[id]) return -1;  // emitted by the add that folds it
    if (folds[id] >= 0) {       // matmul(x, w, bias): the matmul's operands (or their copies), then the bias
      const graph::Node& mm = src.nodes[folds[id]];
      std::vector<int> in = inputs_of(mm);
      in.push_back(map[n.inputs[0] == folds[id] ? n.inputs[1] : n.inputs[0]]);
      return g.add_op(OpKind::Matmul, in, mm.attrs, mm.code);
    }
    std::vector<int> in = inputs_of(n);
    Builder b{g, n.code};
    switch (n.op) {
      case OpKind::Softmax: case OpKind::LogSoftmax: return softmax(b, n, in);
      case OpKind::LayerNorm: return layer_norm(b, n, in);
      case OpKind::MseLoss: return mse_loss(b, n, in);
      case OpKind::SliceBackward: return slice_backward(b, n, in);
      case OpKind::Detach:  // inside the graph only autograd tells it from its input
        if (std::find(src.outputs.begin(), src.outputs.end(), (int)id) != src.outputs.end())
          return g.add_op(n.op, in, n.attrs, n.code);  // an output: its own tensor, no history
        return in[0];
      case OpKind::Sum: case OpKind::Mean: case OpKind::Amax: case OpKind::Amin:
        // A reduction of a 0-d tensor: a cast (Builder::reduce), to the result's dtype.
        if (g.nodes[in[0]].meta.sizes.empty()) return b.cast(in[0], n.meta.dtype);
        [[fallthrough]];
      default: {
        int out = g.add_op(n.op, in, n.attrs, n.code);
        g.nodes[out].wrapped_number = n.wrapped_number;  // item()'s number, marked by capture
        return out;
      }
    }
  }
};

}  // namespace

graph::Graph decompose(const graph::Graph& src, bool one_batch_stride) {
  graph::Graph g;
  g.symbols = src.symbols;
  g.replacements = src.replacements;  // meta inferred again stays as canonical as the source's
  g.device = src.device;
  Decomposition d{src, g};
  if (one_batch_stride) {
    d.plan_copies();
    d.plan_bias_folds();
  }
  for (size_t id = 0; id < src.nodes.size(); id++) {
    const graph::Node& n = src.nodes[id];
    if (n.kind == graph::NodeKind::Constant) {
      d.map[id] = g.add_constant(n.value, n.meta.dtype);
      continue;
    }
    if (n.kind == graph::NodeKind::Input) {
      d.map[id] = g.add_input(n.meta, n.source);
      g.nodes[d.map[id]].wrapped_number = n.wrapped_number;
    } else {
      d.map[id] = d.op(id);
    }
    d.make_copy(id);  // an operand an extern call cannot read as it is: its copy, right after it
  }
  for (int o : src.outputs) g.outputs.push_back(d.map[o]);
  return g;
}

}  // namespace mini::fusion
