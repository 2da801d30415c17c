// decompose.cpp — composite ops rewritten into the ops fusion understands (Inductor's
// decompositions): softmax = amax, sub, exp, sum, div; log_softmax; layer_norm = mean,
// sub, mul, mean, add, rsqrt, mul (and the affine mul/add); mse_loss = sub, mul, mean/sum;
// a reduction of a 0-d tensor, and a softmax of an empty one = a cast.
#include "fusion/schedule.h"

namespace mini::fusion {

namespace {
struct Builder {
  graph::Graph& g;
  std::string code;
  int op(OpKind k, std::vector<int> in, Attrs a = {}) { return g.add_op(k, in, a, code); }
  int reduce(OpKind k, int x, std::vector<int64_t> dims, bool keepdim) {
    Attrs a;
    a.dims = std::move(dims);
    a.keepdim = keepdim;
    return op(k, {x}, a);
  }
  int number(double v) { return g.add_constant(v, DType::Float64); }
};
}  // namespace

graph::Graph decompose(const graph::Graph& src) {
  graph::Graph g;
  g.symbols = src.symbols;
  g.device = src.device;
  std::vector<int> map(src.nodes.size(), -1);
  for (size_t id = 0; id < src.nodes.size(); id++) {
    const graph::Node& n = src.nodes[id];
    if (n.kind == graph::NodeKind::Input) {
      map[id] = g.add_input(n.meta, n.source);
      g.nodes[map[id]].wrapped_number = n.wrapped_number;
      continue;
    }
    if (n.kind == graph::NodeKind::Constant) {
      map[id] = g.add_constant(n.value, n.meta.dtype);
      continue;
    }
    std::vector<int> in;
    for (int i : n.inputs) in.push_back(i >= 0 ? map[i] : -1);
    Builder b{g, n.code};
    const Attrs& a = n.attrs;
    switch (n.op) {
      case OpKind::Softmax: case OpKind::LogSoftmax: {
        if (numel_of(n.meta.sizes) == 0) {  // nothing to compute (and amax has no identity)
          Attrs c;
          c.dtype = n.meta.dtype;
          map[id] = b.op(OpKind::Cast, {in[0]}, c);
          break;
        }
        int m = b.reduce(OpKind::Amax, in[0], {a.dim}, true);
        int s = b.op(OpKind::Sub, {in[0], m});
        int e = b.op(OpKind::Exp, {s});
        int z = b.reduce(OpKind::Sum, e, {a.dim}, true);
        map[id] = n.op == OpKind::Softmax ? b.op(OpKind::Div, {e, z})
                                          : b.op(OpKind::Sub, {s, b.op(OpKind::Log, {z})});
        break;
      }
      case OpKind::LayerNorm: {
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
        map[id] = y;
        break;
      }
      case OpKind::MseLoss: {
        int d = b.op(OpKind::Sub, {in[0], in[1]});
        int sq = b.op(OpKind::Mul, {d, d});
        map[id] = a.mode == "none" ? sq : b.reduce(a.mode == "mean" ? OpKind::Mean : OpKind::Sum, sq, {}, false);
        break;
      }
      case OpKind::Sum: case OpKind::Mean: case OpKind::Amax: case OpKind::Amin:
        // A reduction of a 0-d tensor reduces no dim: its one value, in the result's dtype
        // (a kernel's loops come from its reduced dims, and this one has none).
        if (g.nodes[in[0]].meta.sizes.empty()) {
          Attrs c;
          c.dtype = n.meta.dtype;
          map[id] = b.op(OpKind::Cast, {in[0]}, c);
          break;
        }
        [[fallthrough]];
      default:
        map[id] = g.add_op(n.op, in, a, n.code);
        g.nodes[map[id]].wrapped_number = n.wrapped_number;  // item()'s number, marked by capture
    }
  }
  for (int o : src.outputs) g.outputs.push_back(map[o]);
  return g;
}

}  // namespace mini::fusion
