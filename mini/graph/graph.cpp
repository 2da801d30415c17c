// graph.cpp — building a Graph (inputs, constants, op nodes), printing it as torch's
// graph_code log does, meta inference without running anything (infer_meta, symbolic sizes
// included), and the interpreter run_graph.
#include "graph.h"

#include <algorithm>
#include <sstream>

#include "tensor/autograd.h"

namespace mini::graph {

// ---- names and printing ------------------------------------------------------------------

std::string Graph::unique_name(const std::string& base) {
  int count = name_counts_[base]++;  // a map, not a scan of every name: linear graph building
  return count ? base + "_" + std::to_string(count) : base;
}

static const char* short_dtype(DType d) {
  switch (d) {
    case DType::Bool: return "b8";
    case DType::Int64: return "i64";
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
    case DType::BFloat16: return "bf16";
  }
  return "?";
}

std::string size_str(int64_t s) {
  if (s == kUnbacked) return "u";
  if (is_symbol(s)) return "s" + std::to_string(symbol_index(s));
  return std::to_string(s);
}

static std::string sizes_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + size_str(v[i]);
  return s + "]";
}

std::string meta_str(const TensorMeta& m, Device device) {
  return std::string(short_dtype(m.dtype)) + sizes_str(m.sizes) + sizes_str(m.strides) + device.str();
}

// "L['x']" -> "l_x_", as Dynamo names placeholders.
static std::string placeholder_name(const std::string& source) {
  std::string out;
  for (char c : source) {
    if (std::isalnum((unsigned char)c)) out += (char)std::tolower((unsigned char)c);
    else if (out.empty() || out.back() != '_') out += '_';
  }
  if (out.empty() || std::isdigit((unsigned char)out[0])) out = "arg_" + out;
  return out;
}

int Graph::add_input(const TensorMeta& meta, const std::string& source) {
  Node n;
  n.kind = NodeKind::Input;
  n.meta = meta;
  n.source = source;
  n.name = unique_name(placeholder_name(source));
  nodes.push_back(std::move(n));
  inputs.push_back((int)nodes.size() - 1);
  return (int)nodes.size() - 1;
}

// A Python number as Python prints it: True, 3, 2.0.
static std::string number_str(double value, DType dtype) {
  std::ostringstream s;
  if (dtype == DType::Bool) s << (value ? "True" : "False");
  else if (dtype == DType::Int64) s << (int64_t)value;
  else {
    s << value;
    if (s.str().find_first_of(".einf") == std::string::npos) s << ".0";
  }
  return s.str();
}

int Graph::add_constant(double value, DType dtype) {
  Node n;
  n.kind = NodeKind::Constant;
  n.value = value;
  n.constant = scalar_tensor(value, dtype, /*wrapped_number=*/true);
  n.meta = {{}, {}, dtype, false};
  n.name = number_str(value, dtype);  // constants print inline, as their value
  nodes.push_back(std::move(n));
  return (int)nodes.size() - 1;
}

int Graph::add_op(OpKind op, const std::vector<int>& in, const Attrs& attrs, const std::string& code) {
  std::vector<TensorMeta> metas;
  std::vector<bool> wrapped;
  for (int i : in) {
    metas.push_back(i >= 0 ? nodes[i].meta : TensorMeta{});
    wrapped.push_back(i >= 0 && (nodes[i].kind == NodeKind::Constant || nodes[i].wrapped_number));
  }
  Node n;
  n.kind = NodeKind::Op;
  n.op = op;
  n.attrs = attrs;
  n.inputs = in;
  n.code = code;
  n.meta = infer_meta(op, metas, wrapped, attrs);
  // an element count past int64 fails here, as the eager op would (symbols are left out:
  // the kernel checks the real sizes when it runs)
  Shape known;
  for (int64_t s : n.meta.sizes)
    if (s >= 0) known.push_back(s);
  numel_of(known);
  // an op on Python numbers only (dynamic numbers, constants) is itself a number
  n.wrapped_number = !in.empty() && std::all_of(wrapped.begin(), wrapped.end(), [](bool w) { return w; });
  n.name = unique_name(op_name(op));
  for (int64_t v : attrs.shape) n.symbolic_attrs |= is_symbol(v);
  n.symbolic_attrs |= is_symbol(attrs.end);
  nodes.push_back(std::move(n));
  return (int)nodes.size() - 1;
}

int Graph::op_count() const {
  return (int)std::count_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.kind == NodeKind::Op; });
}

void Graph::eliminate_dead_code(size_t drop_random_from) {
  std::vector<bool> live(nodes.size(), false);
  for (int o : outputs) live[o] = true;
  for (size_t i = nodes.size(); i-- > 0;) {
    if (nodes[i].kind == NodeKind::Input) live[i] = true;
    if (nodes[i].kind == NodeKind::Op && is_random(nodes[i].op) && i < drop_random_from) live[i] = true;
    if (!live[i]) continue;
    for (int in : nodes[i].inputs)
      if (in >= 0) live[in] = true;
  }
  std::vector<int> remap(nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); i++) {
    if (!live[i]) continue;
    remap[i] = (int)kept.size();
    kept.push_back(std::move(nodes[i]));
  }
  for (auto& n : kept)
    for (int& in : n.inputs)
      if (in >= 0) in = remap[in];
  for (int& i : inputs) i = remap[i];
  for (int& o : outputs) o = remap[o];
  nodes = std::move(kept);
}

// dims are plain ints (dim=-1 is the last dim, not a size); shapes print symbols by name
static std::string ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The attributes an op was called with, as keyword arguments.
// A factory's device=, printed where it is not the CPU (as torch's graph code does).
static std::string device_str(Device d) { return d.is_cpu() ? "" : ", device=device(type='cuda', index=" + std::to_string(d.index) + ")"; }

static std::string attrs_str(OpKind op, const Attrs& a) {
  switch (op_class(op)) {
    case OpClass::Reduction:
      return (a.dims.empty() ? "" : ", dim=" + ints_str(a.dims)) + (a.keepdim ? ", keepdim=True" : "");
    default: break;
  }
  switch (op) {
    case OpKind::Reshape: case OpKind::Expand: return ", " + sizes_str(a.shape);
    case OpKind::Permute: return ", " + ints_str(a.dims);
    case OpKind::Transpose: return ", " + std::to_string(a.dim) + ", " + std::to_string(a.dim2);
    case OpKind::Unsqueeze: case OpKind::Softmax: case OpKind::LogSoftmax:
      return ", dim=" + std::to_string(a.dim);
    case OpKind::Squeeze: return a.dims.empty() ? "" : ", dim=" + ints_str(a.dims);
    case OpKind::Select: return ", " + std::to_string(a.dim) + ", " + std::to_string(a.index);
    case OpKind::Slice: case OpKind::SliceScatter:
      return ", " + std::to_string(a.dim) + ", " + std::to_string(a.start) + ", " +
             std::to_string(a.end) + ", " + std::to_string(a.step);
    case OpKind::Cast: return std::string(", dtype=mini.") + dtype_name(a.dtype);
    case OpKind::Gelu: return a.mode == "tanh" ? ", approximate='tanh'" : "";
    case OpKind::MseLoss: return ", reduction='" + a.mode + "'";
    case OpKind::SliceBackward: case OpKind::EmbeddingBackward: return ", " + sizes_str(a.shape);
    case OpKind::LayerNorm: return ", normalized_dims=" + std::to_string(a.dim) + ", eps=" + std::to_string(a.eps);
    case OpKind::Full:
      return ", " + sizes_str(a.shape) + ", " + number_str(a.value, a.dtype) + ", dtype=mini." +
             dtype_name(a.dtype) + device_str(a.device);
    case OpKind::Empty: case OpKind::Rand: case OpKind::Randn:
      return ", " + sizes_str(a.shape) + ", dtype=mini." + dtype_name(a.dtype) + device_str(a.device);
    case OpKind::Arange:
      return ", " + std::to_string(a.start) + ", " + size_str(a.end) + ", " + std::to_string(a.step) +
             ", dtype=mini." + dtype_name(a.dtype) + device_str(a.device);
    default: return "";
  }
}

std::string Graph::node_str(int id) const {
  const Node& n = nodes[id];
  std::string s = n.name + ": \"" + meta_str(n.meta, device) + "\" = mini." + op_name(n.op) + "(";
  for (size_t i = 0; i < n.inputs.size(); i++)
    s += (i ? ", " : "") + (n.inputs[i] >= 0 ? nodes[n.inputs[i]].name : std::string("None"));
  std::string attrs = attrs_str(n.op, n.attrs);
  if (n.inputs.empty() && !attrs.empty()) attrs = attrs.substr(2);  // a factory: no ", " first
  return s + attrs + ")";
}

std::string Graph::print(const std::string& title) const {
  std::ostringstream s;
  s << "===== " << title << " =====\n";
  s << " class GraphModule(mini.nn.Module):\n    def forward(self";
  for (int i : inputs) s << ", " << nodes[i].name << ": \"" << meta_str(nodes[i].meta, device) << "\"";
  s << "):\n";
  std::string last_code;
  GradMode mode = GradMode::Ambient;
  for (size_t i = 0; i < nodes.size(); i++) {
    if (nodes[i].kind != NodeKind::Op) continue;
    if (!nodes[i].code.empty() && nodes[i].code != last_code) {
      s << "\n         # " << nodes[i].code << "\n";
      last_code = nodes[i].code;
    }
    if (nodes[i].grad_mode != mode) {  // where torch's graph calls _set_grad_enabled
      mode = nodes[i].grad_mode;
      const char* what = mode == GradMode::Off ? "off" : mode == GradMode::On ? "on" : "as called";
      s << "        # grad mode: " << what << "\n";
    }
    s << "        " << node_str((int)i) << "\n";
  }
  s << "        return (";
  for (size_t i = 0; i < outputs.size(); i++) s << (i ? ", " : "") << nodes[outputs[i]].name;
  s << (outputs.size() == 1 ? ",)" : ")") << "\n";
  return s.str();
}

// ---- meta inference ---------------------------------------------------------------------
// Views run the real view functions on data-less tensors (they only compute sizes and
// strides); everything else computes its output shape by its rule. Kernel outputs are
// contiguous.

Tensor meta_tensor(const TensorMeta& m, bool wrapped) {
  auto t = std::make_shared<TensorImpl>();
  t->storage = std::make_shared<Storage>();
  t->sizes = m.sizes;
  t->strides = m.strides.size() == m.sizes.size() ? m.strides : contiguous_strides(m.sizes);
  t->dtype = m.dtype;
  t->wrapped_number = wrapped;
  return t;
}

static TensorMeta contiguous_meta(const Shape& sizes, DType dtype) {
  Strides st(sizes.size(), -1);
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {  // strides right of every symbol are known
    if (acc < 0) break;
    st[i] = acc;
    // unsigned: a zero-size shape's strides may pass int64 (never used to address memory)
    acc = sizes[i] < 0 ? -1 : (int64_t)((uint64_t)acc * (uint64_t)std::max<int64_t>(sizes[i], 1));
  }
  return {sizes, st, dtype, false};
}

static Shape reduced_shape(const Shape& in, const Attrs& a) {
  std::vector<int64_t> dims = wrap_dims(a.dims, (int64_t)in.size());
  Shape out;
  for (int64_t d = 0; d < (int64_t)in.size(); d++) {
    bool red = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!red) out.push_back(in[d]);
    else if (a.keepdim) out.push_back(1);
  }
  return out;
}

// Views of tensors with symbolic sizes: sizes follow the op's rule, strides that would
// depend on a symbol are unknown (-1).
static TensorMeta symbolic_view_meta(OpKind op, const TensorMeta& in, const Attrs& a) {
  Shape s = in.sizes;
  int64_t r = (int64_t)s.size();
  switch (op) {
    case OpKind::Reshape: {
      // numel as (concrete product, symbols); a -1 entry is what is left when they cancel
      int64_t known_in = 1, known_out = 1;
      std::vector<int64_t> sym_in, sym_out;
      bool overflow = false;
      for (int64_t v : s) {
        if (v < 0) sym_in.push_back(v);
        else overflow |= __builtin_mul_overflow(known_in, v, &known_in);
      }
      int infer_at = -1;
      for (size_t i = 0; i < a.shape.size(); i++) {
        int64_t v = a.shape[i];
        if (v == -1) infer_at = (int)i;
        else if (v < 0) sym_out.push_back(v);
        else overflow |= __builtin_mul_overflow(known_out, v, &known_out);
      }
      if (overflow) fail("the element count of shape ", shape_str(a.shape), " overflows int64");
      s = a.shape;
      if (infer_at >= 0) {
        std::sort(sym_in.begin(), sym_in.end());
        std::sort(sym_out.begin(), sym_out.end());
        bool cancels = sym_in == sym_out && known_out && known_in % known_out == 0;
        s[infer_at] = cancels ? known_in / known_out : kUnbacked;
      }
      break;
    }
    case OpKind::Expand:
      s = Shape(a.shape.size(), 0);
      for (size_t i = 0; i < a.shape.size(); i++) {
        size_t off = a.shape.size() - in.sizes.size();
        s[i] = (a.shape[i] == -1 && i >= off) ? in.sizes[i - off] : a.shape[i];
      }
      break;
    case OpKind::Transpose: std::swap(s[wrap_dim(a.dim, r)], s[wrap_dim(a.dim2, r)]); break;
    case OpKind::Permute: {
      Shape p;
      for (int64_t d : a.dims) p.push_back(s[wrap_dim(d, r)]);
      s = p;
      break;
    }
    case OpKind::Unsqueeze: s.insert(s.begin() + wrap_dim(a.dim, r + 1), 1); break;
    case OpKind::Squeeze: {
      Shape out;
      std::vector<int64_t> dims = wrap_dims(a.dims, r);
      for (int64_t d = 0; d < r; d++) {
        bool listed = a.dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
        if (!(listed && s[d] == 1)) out.push_back(s[d]);
      }
      s = out;
      break;
    }
    case OpKind::Select: s.erase(s.begin() + wrap_dim(a.dim, r)); break;
    case OpKind::Slice: {
      int64_t d = wrap_dim(a.dim, r);
      if (s[d] >= 0) {
        int64_t n = s[d], st = std::min(std::max<int64_t>(a.start, 0), n), en = std::min(std::max(a.end, st), n);
        s[d] = (en - st + a.step - 1) / a.step;
      } else if (!(a.start == 0 && a.step == 1 && a.end >= (int64_t(1) << 62))) {
        s[d] = kUnbacked;
      }
      break;
    }
    default: fail("no symbolic meta rule for ", op_name(op));
  }
  // strides of a view of a tensor with symbolic sizes depend on those symbols (an expand's
  // zeros, a slice's steps): unknown here; the kernel reads them at run time
  return {s, Strides(s.size(), -1), in.dtype, false};
}

TensorMeta infer_meta(OpKind op, const std::vector<TensorMeta>& in, const std::vector<bool>& wrapped,
                      const Attrs& a) {
  NoGradGuard no_grad;
  std::vector<Tensor> t;
  for (size_t i = 0; i < in.size(); i++) t.push_back(meta_tensor(in[i], wrapped[i]));
  switch (op_class(op)) {
    case OpClass::Pointwise: {
      if (op == OpKind::Where) check_where(t[0]);
      else if (t.size() == 2) check_binary(op, t[0], t[1]);
      else if (t.size() == 1) check_unary(op, t[0]);
      Shape shape;
      for (auto& m : in) shape = broadcast_shapes(shape, m.sizes);
      std::vector<Tensor> operands = t;
      if (op == OpKind::Where) operands.erase(operands.begin());  // the condition does not promote
      DType dt = result_type(operands);
      switch (op) {
        case OpKind::Eq: case OpKind::Ne: case OpKind::Lt: case OpKind::Le:
        case OpKind::Gt: case OpKind::Ge:
          dt = DType::Bool;
          break;
        case OpKind::Div: case OpKind::Exp: case OpKind::Log: case OpKind::Sin: case OpKind::Cos:
        case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Sqrt: case OpKind::Rsqrt:
        case OpKind::Gelu: case OpKind::GeluBackward:
          if (is_floating(dt)) break;  // true division of two numbers: a Python float
          dt = op == OpKind::Div && wrapped[0] && wrapped[1] ? DType::Float64 : DType::Float32;
          break;
        case OpKind::Cast: dt = a.dtype; break;
        default: break;
      }
      return contiguous_meta(shape, dt);
    }
    case OpClass::Reduction: {
      check_reduce(op, t[0], a.dims);
      DType dt = in[0].dtype;
      if (op == OpKind::Sum && !is_floating(dt)) dt = DType::Int64;
      return contiguous_meta(reduced_shape(in[0].sizes, a), dt);
    }
    case OpClass::View: {
      if (op == OpKind::Detach) return {in[0].sizes, in[0].strides, in[0].dtype, false};
      bool symbolic = false;
      for (int64_t s : in[0].sizes) symbolic |= s < 0;
      for (int64_t s : a.shape) symbolic |= s < -1 || (op == OpKind::Expand && s < -1);
      if (symbolic) return symbolic_view_meta(op, in[0], a);
      Tensor v;
      if (op == OpKind::Reshape) {
        Shape target = infer_reshape(a.shape, numel_of(in[0].sizes));
        Strides st;
        if (!view_strides(t[0]->sizes, t[0]->strides, target, &st)) st = contiguous_strides(target);
        return {target, st, in[0].dtype, false};
      }
      v = call_op(op, t, a);  // sizes/strides only: views never touch data
      return {v->sizes, v->strides, v->dtype, false};
    }
    default: break;
  }
  switch (op) {
    case OpKind::Matmul: {
      check_matmul(t[0], t[1]);  // inner sizes that are symbols: checked by the kernel at run time
      const Shape &x = in[0].sizes, &y = in[1].sizes;
      Shape xs = x.size() == 1 ? Shape{1, x[0]} : x, ys = y.size() == 1 ? Shape{y[0], 1} : y;
      Shape batch = broadcast_shapes(Shape(xs.begin(), xs.end() - 2), Shape(ys.begin(), ys.end() - 2));
      if (x.size() > 1) batch.push_back(xs[xs.size() - 2]);
      if (y.size() > 1) batch.push_back(ys.back());
      return contiguous_meta(batch, in[0].dtype);
    }
    case OpKind::Softmax: case OpKind::LogSoftmax:
      check_softmax(t[0], a.dim, op == OpKind::LogSoftmax);
      return contiguous_meta(in[0].sizes, in[0].dtype);
    case OpKind::LayerNorm: return contiguous_meta(in[0].sizes, in[0].dtype);
    case OpKind::MseLoss: {
      check_mse_loss(t[0], t[1], a.mode);
      Shape s = broadcast_shapes(in[0].sizes, in[1].sizes);
      return contiguous_meta(a.mode == "none" ? s : Shape{}, result_type(t));
    }
    case OpKind::SliceBackward: return contiguous_meta(a.shape, in[0].dtype);
    case OpKind::SliceScatter: {
      bool symbolic = false;
      for (int64_t s : in[0].sizes) symbolic |= s < 0;
      if (!symbolic) {  // src must broadcast to the slice it is written into
        Tensor part = slice(t[0], a.dim, a.start, a.end, a.step);
        Shape b = broadcast_shapes(part->sizes, in[1].sizes);
        if (b != part->sizes)
          fail("slice_scatter: src of shape ", shape_str(in[1].sizes), " does not broadcast to the ",
               "slice of shape ", shape_str(part->sizes));
      }
      return contiguous_meta(in[0].sizes, in[0].dtype);
    }
    case OpKind::Embedding: {
      if (in[1].dtype != DType::Int64) fail("embedding(): indices must be int64, got ", dtype_name(in[1].dtype));
      if (in[0].sizes.size() != 2) fail("embedding(): weight must be 2-D, got ", shape_str(in[0].sizes));
      Shape s = in[1].sizes;
      s.push_back(in[0].sizes[1]);
      return contiguous_meta(s, in[0].dtype);
    }
    case OpKind::EmbeddingBackward: return contiguous_meta(a.shape, in[0].dtype);
    case OpKind::Nonzero:  // data-dependent length: -1 marks a size only known at run time
      return contiguous_meta({-1, (int64_t)in[0].sizes.size()}, DType::Int64);
    case OpKind::Full: case OpKind::Empty: case OpKind::Rand: case OpKind::Randn:
      for (int64_t s : a.shape)
        if (s < 0 && !is_symbol(s))
          fail("Trying to create tensor with negative dimension ", s, ": ", shape_str(a.shape));
      if ((op == OpKind::Rand || op == OpKind::Randn) && !is_floating(a.dtype))
        fail(op_name(op), " is only defined for floating point dtypes, got ", dtype_name(a.dtype));
      return contiguous_meta(a.shape, a.dtype);
    case OpKind::Arange: {
      if (a.step == 0) fail("arange: step must be nonzero");
      if (is_symbol(a.end)) {  // arange(s0): the only symbolic form capture makes
        if (a.start != 0 || a.step != 1) fail("arange with a symbolic end needs start 0 and step 1");
        return contiguous_meta({a.end}, a.dtype);
      }
      if ((a.step > 0 && a.start > a.end) || (a.step < 0 && a.start < a.end))
        fail("arange: upper bound and larger bound inconsistent with step sign (start ", a.start,
             ", end ", a.end, ", step ", a.step, ")");
      int64_t n = (a.end - a.start + a.step + (a.step > 0 ? -1 : 1)) / a.step;  // ceil
      return contiguous_meta({n}, a.dtype);
    }
    default: break;
  }
  fail("no meta rule for ", op_name(op));
}

// ---- the interpreter ----------------------------------------------------------------------

namespace {
// Runs one op in its node's grad mode (Ambient: leaves the mode as it is).
struct GradModeGuard {
  bool prev = grad_enabled();
  explicit GradModeGuard(GradMode mode) {
    if (mode != GradMode::Ambient) set_grad_enabled(mode == GradMode::On);
  }
  ~GradModeGuard() { set_grad_enabled(prev); }
};
}  // namespace

std::vector<Tensor> run_graph(const Graph& g, const std::vector<Tensor>& inputs) {
  if (inputs.size() != g.inputs.size())
    fail("graph expects ", g.inputs.size(), " inputs but got ", inputs.size());
  std::vector<Tensor> values(g.nodes.size());
  for (size_t i = 0; i < inputs.size(); i++) values[g.inputs[i]] = inputs[i];
  std::vector<Tensor> args;
  for (size_t id = 0; id < g.nodes.size(); id++) {
    const Node& n = g.nodes[id];
    if (n.kind == NodeKind::Constant) {
      values[id] = n.constant;
    } else if (n.kind == NodeKind::Op) {
      GradModeGuard mode(n.grad_mode);
      args.clear();
      for (int i : n.inputs) args.push_back(i >= 0 ? values[i] : nullptr);
      if (n.symbolic_attrs) {
        Attrs a = n.attrs;  // sizes given as symbols: this call's values
        auto resolve = [&](int64_t& v) {
          if (is_symbol(v)) {
            const Symbol& s = g.symbols[symbol_index(v)];
            v = inputs[s.input]->sizes[s.dim];
          }
        };
        for (auto& v : a.shape) resolve(v);
        resolve(a.end);
        values[id] = call_op(n.op, args, a);
      } else {
        values[id] = call_op(n.op, args, n.attrs);
      }
      if (op_class(n.op) == OpClass::Factory && n.meta.requires_grad) values[id]->requires_grad = true;
      // a number computed in the graph (item(), arithmetic on numbers) promotes like one
      if (n.wrapped_number) values[id]->wrapped_number = true;
    }
  }
  std::vector<Tensor> out;
  out.reserve(g.outputs.size());
  for (int i : g.outputs) out.push_back(values[i]);
  return out;
}

}  // namespace mini::graph
