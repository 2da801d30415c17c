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
  for (;;) {  // a map of counts, not a scan of every name: linear graph building
    int count = name_counts_[base]++;
    std::string name = count ? base + "_" + std::to_string(count) : base;
    if (names_.insert(name).second) return name;  // else taken by a name given as it was (a saved value's)
  }
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
  n.meta = infer_meta(op, metas, wrapped, attrs, this);
  for (int64_t& s : n.meta.sizes) s = canonical(s);  // a symbol found equal to a size is that size
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
  n.symbolic_attrs |= is_symbol(attrs.start) || is_symbol(attrs.end);
  nodes.push_back(std::move(n));
  return (int)nodes.size() - 1;
}

// ---- sizes: symbols derived from others, and the facts meta inference relies on ----------

int64_t Graph::hint(int64_t size) const {
  if (size == kUnbacked) fail("a size known only at run time has no value while tracing");
  if (is_symbol(size) && (size_t)symbol_index(size) >= symbols.size()) fail("the size ", size, " is negative");
  return is_symbol(size) ? symbols[symbol_index(size)].hint : size;
}

Shape Graph::hints(const Shape& sizes) const {
  Shape out;
  for (int64_t s : sizes) out.push_back(s == kUnbacked ? s : hint(s));  // unbacked: printed as -1
  return out;
}

// a op b on values; false on an int64 overflow (or a division by zero)
static bool apply_size(char op, int64_t a, int64_t b, int64_t* r) {
  switch (op) {
    case '+': return !__builtin_add_overflow(a, b, r);
    case '-': return !__builtin_sub_overflow(a, b, r);
    case '*': return !__builtin_mul_overflow(a, b, r);
    default: return b > 0 && (*r = a / b, true);
  }
}

int64_t Graph::derive(char op, int64_t a, int64_t b) {
  if ((op == '+' || op == '*') && b < a) std::swap(a, b);  // they commute: one definition per pair
  int64_t r;
  if (a >= 0 && b >= 0 && apply_size(op, a, b, &r) && r >= 0) return r;
  if ((op == '+' && a == 0) || (op == '*' && a == 1)) return b;
  if ((op == '-' && b == 0) || (op == '/' && b == 1)) return a;
  if (op == '-' && is_symbol(a)) {  // (x + y) - y = x, as a cat's second slice measures
    const Symbol& s = symbols[symbol_index(a)];
    if (s.input < 0 && s.op == '+' && (s.lhs == b || s.rhs == b)) return s.lhs == b ? s.rhs : s.lhs;
  }
  for (size_t k = 0; k < symbols.size(); k++)
    if (symbols[k].input < 0 && symbols[k].op == op && symbols[k].lhs == a && symbols[k].rhs == b)
      return symbol_code((int)k);
  int64_t x = hint(a), y = hint(b);
  r = 0;
  if (!apply_size(op, x, y, &r)) fail("a size computed from the sizes ", x, " and ", y, " overflows int64");
  Symbol s;
  s.input = -1;
  s.hint = r;
  s.op = op;
  s.lhs = a;
  s.rhs = b;
  symbols.push_back(s);
  return symbol_code((int)symbols.size() - 1);
}

bool Graph::assume(int64_t a, char op, int64_t b) {
  auto compare = [op](int64_t x, int64_t y) { return op == '=' ? x == y : op == '!' ? x != y : x <= y; };
  bool holds = compare(hint(a), hint(b));
  if ((a >= 0 && b >= 0) || a == b) return holds;  // nothing to keep
  // an input dim is >= 2 by its tensor guard: a comparison with an int c that has one outcome
  // for every size from 2 up (s != 1, 2 <= s; it can change only at 2, at c and past c)
  // needs no fact
  auto input_dim = [&](int64_t s) { return is_symbol(s) && symbols[symbol_index(s)].input >= 0; };
  auto implied = [](int64_t c, auto outcome) {
    constexpr int64_t kLarge = int64_t(1) << 62;
    bool at2 = outcome(2);
    return outcome(std::max<int64_t>(c, 2)) == at2 && outcome(c + 1 > 2 ? c + 1 : 3) == at2 && outcome(kLarge) == at2;
  };
  if (input_dim(a) && b >= 0 && implied(b, [&](int64_t s) { return compare(s, b); })) return holds;
  if (input_dim(b) && a >= 0 && implied(a, [&](int64_t s) { return compare(a, s); })) return holds;
  int64_t x = canonical(a), y = canonical(b);
  if (x == y) return holds;  // an earlier fact made them one size
  SizeFact fact{a, b, holds ? op : op == '=' ? '!' : op == '!' ? '=' : '>'};
  for (const SizeFact& f : size_facts)
    if (f.lhs == fact.lhs && f.rhs == fact.rhs && f.op == fact.op) return holds;
  size_facts.push_back(fact);
  if (holds && op == '=' && x != y) {  // the later symbol is replaced by the int or the earlier one
    if (x >= 0 || (is_symbol(y) && y < x)) std::swap(x, y);
    replacements[x] = y;
  }
  return holds;
}

int64_t Graph::canonical(int64_t size) const {
  for (auto it = replacements.find(size); it != replacements.end(); it = replacements.find(size)) size = it->second;
  return size;
}

void Graph::apply_replacements() {
  if (replacements.empty()) return;
  auto apply = [&](int64_t& v) { v = canonical(v); };
  for (Node& n : nodes) {
    for (int64_t& v : n.meta.sizes) apply(v);
    for (int64_t& v : n.attrs.shape) apply(v);
    apply(n.attrs.start);
    apply(n.attrs.end);
  }
}

std::vector<int64_t> Graph::symbol_values(const std::vector<Tensor>& in) const {
  std::vector<int64_t> v(symbols.size());
  auto value = [&](int64_t s) { return is_symbol(s) ? v[symbol_index(s)] : s; };
  for (size_t k = 0; k < symbols.size(); k++) {
    const Symbol& s = symbols[k];
    if (s.input >= 0 && s.dim < 0) v[k] = (int64_t)in[s.input]->scalar_value();  // an int argument's value
    else if (s.input >= 0) v[k] = in[s.input]->sizes[s.dim];
    else if (!apply_size(s.op, value(s.lhs), value(s.rhs), &v[k]))  // the facts keep operands in range
      fail("the size ", size_str(symbol_code((int)k)), " of this call overflows int64");
  }
  return v;
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
    case OpKind::Attention: case OpKind::AttentionBackward:
      return std::string(a.mode == "causal" ? ", is_causal=True" : "") + ", scale=" + number_str(a.value, DType::Float64) +
             ", output=" + std::to_string(a.index);
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
  for (size_t k = 0; k < symbols.size(); k++)  // sizes computed from others, as torch's Sym(s0 + 1)
    if (symbols[k].input < 0)
      s << "        # s" << k << " = " << size_str(symbols[k].lhs) << " " << symbols[k].op << " "
        << size_str(symbols[k].rhs) << "\n";
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

// ---- size relations with symbols -----------------------------------------------------------
// Where a symbol meets another size, the relation is decided with the hints (Graph::assume,
// which records it as a fact for a shape guard), and a relation that fails raises the eager
// op's error for the sizes seen. An unbacked size has no hint: a graph holding one runs with
// eager kernels, which check it when they run.

// The size a and b broadcast to (a's code where they are equal); false where they do not.
static bool broadcast_dim(Graph& g, int64_t a, int64_t b, int64_t* out) {
  if (a == b || b == 1) *out = a;
  else if (a == 1) *out = b;
  else if (a == kUnbacked || b == kUnbacked) *out = a == kUnbacked ? b : a;
  else if (g.assume(a, '=', b)) *out = a;
  else if (g.assume(a, '=', 1)) *out = b;
  else if (g.assume(b, '=', 1)) *out = a;
  else return false;
  return true;
}

static Shape broadcast_meta(Graph& g, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; i++) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (!broadcast_dim(g, sa, sb, &out[i])) {
      broadcast_shapes(g.hints(a), g.hints(b));  // eager's error, for the sizes seen
      fail("shapes ", shape_str(g.hints(a)), " and ", shape_str(g.hints(b)), " cannot be broadcast together");
    }
  }
  return out;
}

static bool same_size(Graph& g, int64_t a, int64_t b) {
  return a == kUnbacked || b == kUnbacked || g.assume(a, '=', b);
}

// The element count of `sizes` as a size code: the symbols in code order, then the
// constant part (so [s0, 3] and [3, s0] give one code).
static int64_t numel_code(Graph& g, const Shape& sizes) {
  int64_t known = 1, code = 1;
  std::vector<int64_t> symbols;
  for (int64_t v : sizes) {
    if (v < 0) symbols.push_back(v);
    else if (__builtin_mul_overflow(known, v, &known)) fail("the element count of shape ", shape_str(sizes), " overflows int64");
  }
  std::sort(symbols.begin(), symbols.end());
  for (int64_t v : symbols) code = g.derive('*', code, v);
  return g.derive('*', code, known);
}

// The length of the slice start:end:step of a dim of size n, where a symbol takes part, as
// eager clamps the bounds (end to n, start to end), each clamp decided with the hints; bounds
// are ints >= 0 or symbols here (capture specializes a dim that a negative bound counts from).
static int64_t slice_length(Graph& g, int64_t n, int64_t start, int64_t end, int64_t step) {
  for (int64_t v : {n, start, end})
    if (v == kUnbacked || (v < 0 && !is_symbol(v))) return kUnbacked;
  if (step < 1) return kUnbacked;
  if (end >= (int64_t(1) << 62) || !g.assume(end, '<', n)) end = n;  // x[1:] ends at a huge int
  if (!g.assume(start, '<', end)) start = end;
  int64_t span = g.derive('-', end, start);
  return step == 1 ? span : g.derive('/', g.derive('+', span, step - 1), step);  // ceil(span / step)
}

// Views of tensors with symbolic sizes: sizes follow the op's rule, strides that would
// depend on a symbol are unknown (-1).
static TensorMeta symbolic_view_meta(Graph& g, OpKind op, const TensorMeta& in, const Attrs& a) {
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
      bool unbacked = std::count(in.sizes.begin(), in.sizes.end(), kUnbacked) > 0;
      if (infer_at < 0 && !unbacked && !g.assume(numel_code(g, in.sizes), '=', numel_code(g, a.shape)))
        infer_reshape(g.hints(a.shape), numel_of(g.hints(in.sizes)));  // eager's error
      if (infer_at >= 0) {
        std::sort(sym_in.begin(), sym_in.end());
        std::sort(sym_out.begin(), sym_out.end());
        bool cancels = sym_in == sym_out && known_out && known_in % known_out == 0;
        s[infer_at] = cancels ? known_in / known_out : kUnbacked;
        Shape rest = a.shape;
        rest.erase(rest.begin() + infer_at);
        if (!cancels && !unbacked && g.assume(numel_code(g, rest), '!', 0)) {
          // the -1 is the element count over the rest: a derived symbol, and the division exact
          int64_t total = numel_code(g, in.sizes), others = numel_code(g, rest);
          int64_t q = g.derive('/', total, others);
          if (!g.assume(g.derive('*', q, others), '=', total))
            infer_reshape(g.hints(a.shape), numel_of(g.hints(in.sizes)));  // eager's error
          s[infer_at] = q;
        }
      }
      break;
    }
    case OpKind::Expand: {
      bool ok = a.shape.size() >= in.sizes.size();
      size_t off = ok ? a.shape.size() - in.sizes.size() : 0;
      s = Shape(a.shape.size(), 0);
      for (size_t i = 0; ok && i < a.shape.size(); i++) {
        int64_t t = a.shape[i], v = i >= off ? in.sizes[i - off] : 1;
        s[i] = t == -1 && i >= off ? v : t;
        ok = t == -1 ? i >= off : v == t || v == 1 || v == kUnbacked || g.assume(v, '=', t) || g.assume(v, '=', 1);
      }
      if (!ok) {  // eager's error, for the sizes seen
        TensorMeta seen{g.hints(in.sizes), {}, in.dtype, false};
        expand(meta_tensor(seen, false), g.hints(a.shape));
        fail("cannot expand ", shape_str(seen.sizes), " to ", shape_str(g.hints(a.shape)));
      }
      break;
    }
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
    case OpKind::Select: {  // the index inside a dynamic dim: index + 1 <= s, a fact
      int64_t d = wrap_dim(a.dim, r);
      if (is_symbol(s[d]) && a.index >= 0 && !g.assume(a.index + 1, '<', s[d]))
        fail_index("index ", a.index, " is out of bounds for dimension ", d, " with size ", g.hint(s[d]));
      s.erase(s.begin() + d);
      break;
    }
    case OpKind::Slice: {
      int64_t d = wrap_dim(a.dim, r);
      if (s[d] >= 0 && !is_symbol(a.start) && !is_symbol(a.end)) {
        int64_t n = s[d], st = std::min(std::max<int64_t>(a.start, 0), n), en = std::min(std::max(a.end, st), n);
        s[d] = (en - st + a.step - 1) / a.step;
      } else {
        s[d] = slice_length(g, s[d], a.start, a.end, a.step);
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
                      const Attrs& a, Graph* graph) {
  NoGradGuard no_grad;
  Graph scratch;  // static sizes: no symbol to decide on
  Graph& g = graph ? *graph : scratch;
  std::vector<Tensor> t;
  for (size_t i = 0; i < in.size(); i++) t.push_back(meta_tensor(in[i], wrapped[i]));
  switch (op_class(op)) {
    case OpClass::Pointwise: {
      if (op == OpKind::Where) check_where(t[0]);
      else if (t.size() == 2) check_binary(op, t[0], t[1]);
      else if (t.size() == 1) check_unary(op, t[0]);
      Shape shape;  // in eager's order (where: the values, then the condition), for its message
      if (op == OpKind::Where) shape = broadcast_meta(g, in[0].sizes, broadcast_meta(g, in[1].sizes, in[2].sizes));
      else for (auto& m : in) shape = broadcast_meta(g, shape, m.sizes);
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
      if (op == OpKind::Slice) symbolic |= is_symbol(a.start) || is_symbol(a.end);  // bounds of a dynamic size
      if (symbolic) return symbolic_view_meta(g, op, in[0], a);
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
      // eager's checks and words on this call's sizes (a symbol's value seen); the inner sizes
      // are then equal, a fact of the graph where a symbol takes part
      Tensor lhs = meta_tensor(in[0], wrapped[0]), rhs = meta_tensor(in[1], wrapped[1]);
      lhs->sizes = g.hints(lhs->sizes), rhs->sizes = g.hints(rhs->sizes);
      check_matmul(lhs, rhs);
      const Shape &x = in[0].sizes, &y = in[1].sizes;
      Shape xs = x.size() == 1 ? Shape{1, x[0]} : x, ys = y.size() == 1 ? Shape{y[0], 1} : y;
      same_size(g, xs.back(), ys[ys.size() - 2]);
      Shape batch = broadcast_meta(g, Shape(xs.begin(), xs.end() - 2), Shape(ys.begin(), ys.end() - 2));
      if (x.size() > 1) batch.push_back(xs[xs.size() - 2]);
      if (y.size() > 1) batch.push_back(ys.back());
      return contiguous_meta(batch, in[0].dtype);
    }
    case OpKind::Attention: {  // the fused kernel's checks, eager's words
      std::string why;
      if (!fused_attention_supports(t[0], t[1], t[2], &why)) fail("scaled_dot_product_attention (fused): ", why);
      const Shape& q = in[0].sizes;
      if (a.index == 1)  // each query row's log-sum-exp, in the softmax's precision
        return contiguous_meta(Shape(q.begin(), q.end() - 1),
                               in[0].dtype == DType::Float64 ? DType::Float64 : DType::Float32);
      Shape s = q;
      s.back() = in[2].sizes.back();
      return {s, attention_out_strides(s, q, in[0].strides), in[0].dtype, false};  // the kernel's layout
    }
    case OpKind::AttentionBackward: {  // inputs q, k, v, out, lse, grad_out: the gradient of input `index`
      if (in.size() != 6 || a.index < 0 || a.index > 2) fail("attention_backward: 6 inputs and an output 0-2");
      const TensorMeta& like = in[a.index];
      return {like.sizes, attention_out_strides(like.sizes, like.sizes, like.strides), in[0].dtype, false};
    }
    case OpKind::Softmax: case OpKind::LogSoftmax:
      check_softmax(t[0], a.dim, op == OpKind::LogSoftmax);
      return contiguous_meta(in[0].sizes, in[0].dtype);
    case OpKind::LayerNorm: {
      // a weight and a bias (an absent one has no sizes) are shaped as the normalized dims
      const Shape& x = in[0].sizes;
      for (size_t i = 1; i < in.size(); i++) {
        const Shape& w = in[i].sizes;
        bool ok = w.empty() || (w.size() == (size_t)a.dim && x.size() >= w.size());
        for (size_t d = 0; ok && d < w.size(); d++) ok = same_size(g, w[d], x[x.size() - w.size() + d]);
        if (!ok)
          fail("layer_norm: ", i == 1 ? "weight" : "bias", " of shape ", shape_str(g.hints(w)),
               " does not match normalized_shape ",
               shape_str(g.hints(Shape(x.end() - std::min<size_t>(a.dim, x.size()), x.end()))));
      }
      return contiguous_meta(x, in[0].dtype);
    }
    case OpKind::MseLoss: {
      check_mse_loss(t[0], t[1], a.mode);
      Shape s = broadcast_meta(g, in[0].sizes, in[1].sizes);
      return contiguous_meta(a.mode == "none" ? s : Shape{}, result_type(t));
    }
    case OpKind::SliceBackward: return contiguous_meta(a.shape, in[0].dtype);
    case OpKind::SliceScatter: {
      bool symbolic = is_symbol(a.start) || is_symbol(a.end);
      for (int64_t s : in[0].sizes) symbolic |= s < 0;
      for (int64_t s : in[1].sizes) symbolic |= s < 0;
      if (symbolic) {  // the slice's length from the symbols; src must broadcast to the slice
        const Shape& src = in[1].sizes;
        Shape part = in[0].sizes;
        int64_t d = wrap_dim(a.dim, (int64_t)part.size());
        part[d] = slice_length(g, part[d], a.start, a.end, a.step);
        bool ok = src.size() <= part.size();
        for (size_t i = 0; ok && i < src.size(); i++) {
          int64_t t = part[part.size() - src.size() + i], b = 0;
          ok = broadcast_dim(g, t, src[i], &b) && (b == t || t == kUnbacked || b == kUnbacked || g.hint(b) == g.hint(t));
        }
        if (!ok)
          fail("slice_scatter: src of shape ", shape_str(g.hints(src)), " does not broadcast to the ",
               "slice of shape ", shape_str(g.hints(part)));
      } else {  // src must broadcast to the slice it is written into
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
      for (int64_t s : a.shape)  // a size computed from symbols (zeros(n - 3)) may be negative
        if ((s < 0 && !is_symbol(s)) || (is_symbol(s) && !g.assume(0, '<', s)))
          fail("Trying to create tensor with negative dimension ", g.hint(s), ": ", shape_str(g.hints(a.shape)));
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

bool same_call(const Node& a, const Node& b) {
  return a.kind == NodeKind::Op && b.kind == NodeKind::Op && a.op == b.op && op_outputs(a.op) > 1 &&
         a.inputs == b.inputs && a.attrs.mode == b.attrs.mode && a.attrs.value == b.attrs.value;
}

std::vector<Tensor> run_graph(const Graph& g, const std::vector<Tensor>& inputs) {
  if (inputs.size() != g.inputs.size())
    fail("graph expects ", g.inputs.size(), " inputs but got ", inputs.size());
  std::vector<Tensor> values(g.nodes.size());
  for (size_t i = 0; i < inputs.size(); i++) values[g.inputs[i]] = inputs[i];
  std::vector<Tensor> args;
  std::vector<int64_t> symbols;  // this call's sizes, computed at the first node that needs them
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
        if (symbols.empty()) symbols = g.symbol_values(inputs);
        auto resolve = [&](int64_t& v) {
          if (is_symbol(v)) v = symbols[symbol_index(v)];
        };
        for (auto& v : a.shape) resolve(v);
        resolve(a.start);
        resolve(a.end);
        values[id] = call_op(n.op, args, a);
      } else if (op_outputs(n.op) > 1) {  // one call for every node of it (same_call)
        if (!values[id]) {
          std::vector<Tensor> outs = call_op_outputs(n.op, args, n.attrs);
          for (size_t other = id; other < g.nodes.size(); other++)
            if (other == id || same_call(n, g.nodes[other])) values[other] = outs.at(g.nodes[other].attrs.index);
        }
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
