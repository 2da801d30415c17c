// graph.cpp — building a Graph (inputs, constants, op nodes), printing it as torch's
// graph_code log does, and the interpreter run_graph. Each op node's meta comes from
// infer_meta (meta.cpp), computed without running anything, symbolic sizes included.
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
