// guards.cpp — one holds() per guard kind (the checks and torch's failure messages), the
// GuardSet's adders, check / check_verbose over the frame's values, and the guard printout.
#include "guards.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "tensor/autograd.h"
#include "tensor/errors.h"

namespace mini::guards {

namespace {
TensorUnwrap g_unwrap = nullptr;

std::string repr(PyObject* o) {
  PyObject* r = PyObject_Repr(o);
  if (!r) { PyErr_Clear(); return "?"; }
  std::string s = PyUnicode_AsUTF8(r);
  Py_DECREF(r);
  return s;
}

// Two floats are the same constant when they are equal with the same sign (0.0 and -0.0
// are == but give 1/x = inf and -inf), or both NaN.
bool same_float(double a, double b) {
  return (a == b && std::signbit(a) == std::signbit(b)) || (a != a && b != b);
}

// The name torch uses in tensor messages: the local's name, or the whole source.
std::string tensor_name(const Source& s) {
  const auto* local = s.as<Source::Local>();
  return local ? local->name : s.str();
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + (v[i] < 0 ? std::string("None") : std::to_string(v[i]));
  return s + "]";
}

// a == b for the ints and Nones a guarded slice holds (no Python objects made).
bool same_value(PyObject* a, PyObject* b) {
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

// What one guard is checked against: the value at its source, and what a failure says.
struct Checked {
  PyObject* value;          // at the guard's source (Borrowed; NULL if gone or global state)
  PyObject* other;          // at a DuplicateInput's other source (Borrowed, may be NULL)
  const Source* source;     // null for global state
  const FrameValues& frame;
  const std::string& code;  // the guard's code: the message of most failures
  std::string* reason;      // optional: gets the failure's message

  bool fail(const std::string& why) const {
    if (reason) *reason = why;
    return false;
  }
};

// One `holds` per guard kind: true when the guard holds, else false with c.fail(message).

bool holds(const GradMode& g, const Checked& c) {
  if (grad_enabled() != g.enabled)
    return c.fail(std::string("grad mode changed: compiled with grad ") + (g.enabled ? "enabled" : "disabled"));
  if (!(autocast_state() == g.autocast))
    return c.fail("autocast changed: compiled with autocast " + g.autocast.str() + ", now " +
                  autocast_state().str());
  return true;
}

bool holds(const NoneMatch&, const Checked& c) { return c.value == Py_None || c.fail(c.code); }

bool holds(const BoolMatch& g, const Checked& c) {
  return c.value == (g.value ? Py_True : Py_False) || c.fail(c.code);
}

bool holds(const TypeMatch& g, const Checked& c) {
  return (c.value && Py_TYPE(c.value) == g.type) || c.fail(c.code);
}

bool holds(const IdMatch& g, const Checked& c) {
  PyObject* target = g.weak ? PyWeakref_GetObject(g.target) : g.target;
  if (g.weak && target == Py_None) return c.fail(c.code + " (the object is gone)");
  return (c.value && c.value == target) || c.fail(c.code);
}

bool holds(const EqualsMatch& g, const Checked& c) {
  PyObject* v = c.value;
  if (!v || Py_TYPE(v) != Py_TYPE(g.constant)) return c.fail(c.code);
  if (PyComplex_CheckExact(v)) {
    Py_complex a = PyComplex_AsCComplex(v), b = PyComplex_AsCComplex(g.constant);
    return (same_float(a.real, b.real) && same_float(a.imag, b.imag)) || c.fail(c.code);
  }
  if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long long a = PyLong_AsLongLongAndOverflow(v, &overflow);
    long long b = PyLong_AsLongLongAndOverflow(g.constant, &overflow);
    if (!overflow) return a == b || c.fail(c.code);
  }
  if (PyFloat_CheckExact(v)) {
    return same_float(PyFloat_AS_DOUBLE(v), PyFloat_AS_DOUBLE(g.constant)) || c.fail(c.code);
  }
  if (PySlice_Check(v)) {  // field by field: slice == slice would build tuples
    auto *a = (PySliceObject*)v, *b = (PySliceObject*)g.constant;
    return (same_value(a->start, b->start) && same_value(a->stop, b->stop) &&
            same_value(a->step, b->step)) || c.fail(c.code);
  }
  int eq = PyObject_RichCompareBool(v, g.constant, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1 || c.fail(c.code);
}

bool holds(const SizeCompare& g, const Checked& c) {
  int64_t r = 0;
  return (g.comparison.evaluate(c.frame, &r) && r == 1) || c.fail(c.code);
}

bool holds(const NumberCompare& g, const Checked& c) {
  PyObject* v = c.value;
  int cmp;  // -1, 0, 1: v against the constant
  if (v && PyLong_CheckExact(v) && g.int_constant) {
    int overflow = 0;
    long long a = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) return c.fail(c.code);
    cmp = (a > g.int_value) - (a < g.int_value);
  } else if (v && (PyFloat_CheckExact(v) || PyLong_CheckExact(v))) {
    double a = PyFloat_CheckExact(v) ? PyFloat_AS_DOUBLE(v) : PyLong_AsDouble(v);
    if (a == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return c.fail(c.code); }
    double b = g.int_constant ? (double)g.int_value : g.float_value;
    if (a != a || b != b) return c.fail(c.code);  // NaN: a miss (a new trace decides it), never a stale hit
    cmp = (a > b) - (a < b);
  } else {
    return c.fail(c.code);
  }
  bool ok = g.op == Py_LT ? cmp < 0 : g.op == Py_LE ? cmp <= 0 : g.op == Py_EQ ? cmp == 0
          : g.op == Py_NE ? cmp != 0 : g.op == Py_GT ? cmp > 0 : cmp >= 0;
  return ok || c.fail(c.code);
}

bool holds(const LengthCheck& g, const Checked& c) {
  PyObject* v = c.value;
  if (!v || !(PyTuple_Check(v) || PyList_Check(v))) return c.fail(c.code);
  return Py_SIZE(v) == g.length || c.fail(c.code);
}

bool holds(const DictKeysMatch& g, const Checked& c) {
  PyObject* v = c.value;
  if (!v || !PyDict_Check(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(g.keys))
    return c.fail(c.code);
  PyObject *key, *value;
  Py_ssize_t pos = 0, i = 0;
  while (PyDict_Next(v, &pos, &key, &value)) {
    PyObject* want = PyTuple_GET_ITEM(g.keys, i++);
    bool same_str =
        PyUnicode_Check(key) && PyUnicode_Check(want) && PyUnicode_Compare(key, want) == 0;
    if (key != want && !same_str) return c.fail(c.code);
  }
  return true;
}

bool holds(const DictContains& g, const Checked& c) {
  PyObject* v = c.value;
  if (!v || !PyDict_Check(v)) return c.fail(c.code);
  int in = PyDict_Contains(v, g.key);  // a str key: no Python code runs
  if (in < 0) PyErr_Clear();
  return (in == 1) == g.present || c.fail(c.code);
}

bool holds(const DuplicateInput& g, const Checked& c) {
  return (c.value && c.other && (c.value == c.other) == g.same) || c.fail(c.code);
}

// The tensor guard (torch's TENSOR_MATCH): is c.value (Borrowed, may be NULL) still a tensor
// like the one the graph was compiled for? In order: its Python type, dtype, device,
// requires_grad, rank, each dynamic size (>= 2), each static size, each checked stride. The
// first mismatch returns c.fail(torch's sentence, notes/assignments/A5.md lists each one:
// "tensor 'x' size mismatch at index 0. expected 8, actual 16"), naming the tensor by its
// source; nothing is allocated while every check passes.
bool holds(const TensorMatch& spec, const Checked& c) {
  // A5 BEGIN: the tensor guard (TENSOR_MATCH)
  MINI_KIT_STUB(A5);
  PyObject* v = c.value;
  TensorImpl* t = v ? unwrap_tensor(v) : nullptr;
  // made on a failure only: a source's printed form is a new string
  auto name = [&] { return c.source ? tensor_name(*c.source) : std::string("?"); };
  if (!t)
    return c.fail("expected type of '" + name() + "' to be a tensor type, but found " +
                  (v ? std::string(Py_TYPE(v)->tp_name) : "nothing"));
  if (Py_TYPE(v) != spec.type)
    return c.fail("expected type of '" + name() + "' to be " + spec.type->tp_name +
                  ", but found " + Py_TYPE(v)->tp_name);
  if (t->dtype != spec.dtype)
    return c.fail("tensor '" + name() + "' dtype mismatch. expected " + dtype_name(spec.dtype) +
                  ", actual " + dtype_name(t->dtype));
  if (t->device() != spec.device)
    return c.fail("tensor '" + name() + "' device mismatch. expected " + spec.device.str() + ", actual " +
                  t->device().str());
  if (t->needs_grad() != spec.requires_grad)
    return c.fail("tensor '" + name() + "' requires_grad mismatch. expected requires_grad=" +
                  std::to_string(spec.requires_grad));
  if (t->sizes.size() != spec.sizes.size())
    return c.fail("tensor '" + name() + "' rank mismatch. expected " +
                  std::to_string(spec.sizes.size()) + ", actual " + std::to_string(t->sizes.size()));
  for (size_t i = 0; i < spec.sizes.size(); i++)
    if (spec.sizes[i] < 0 && t->sizes[i] < 2)  // dynamic dims exclude 0 and 1, as torch's
      return c.fail("tensor '" + name() + "' size mismatch at index " + std::to_string(i) +
                    ". expected a dynamic size >= 2, actual " + std::to_string(t->sizes[i]));
  for (size_t i = 0; i < spec.sizes.size(); i++)
    if (spec.sizes[i] >= 0 && t->sizes[i] != spec.sizes[i])
      return c.fail("tensor '" + name() + "' size mismatch at index " + std::to_string(i) +
                    ". expected " + std::to_string(spec.sizes[i]) +
                    ", actual " + std::to_string(t->sizes[i]));
  for (size_t i = 0; i < spec.strides.size(); i++)
    if (spec.strides[i] >= 0 && t->strides[i] != spec.strides[i])
      return c.fail("tensor '" + name() + "' stride mismatch at index " + std::to_string(i) +
                    ". expected " + std::to_string(spec.strides[i]) +
                    ", actual " + std::to_string(t->strides[i]));
  return true;
  // A5 END
}

// The strong reference a guard holds (released with its GuardSet), or null.
PyObject* held_object(const Guard& g) {
  if (auto* type = g.as<TypeMatch>()) return (PyObject*)type->type;
  if (auto* id = g.as<IdMatch>()) return id->target;
  if (auto* equals = g.as<EqualsMatch>()) return equals->constant;
  if (auto* keys = g.as<DictKeysMatch>()) return keys->keys;
  if (auto* contains = g.as<DictContains>()) return contains->key;
  return nullptr;
}
}  // namespace

void set_tensor_unwrap(TensorUnwrap fn) { g_unwrap = fn; }
TensorImpl* unwrap_tensor(PyObject* obj) { return g_unwrap ? g_unwrap(obj) : nullptr; }

GuardSet::~GuardSet() {
  for (auto& g : guards_) Py_XDECREF(held_object(g));
}

int GuardSet::source_index(const SourceRef& source) {
  // a map, not a scan: a model of N blocks has guards on thousands of sources
  auto [it, added] = source_ids_.emplace(source->str(), (int)sources_.size());
  if (added) {
    sources_.push_back(source);
    node_of_.push_back(node_index(source));
  }
  return it->second;
}

int GuardSet::node_index(const SourceRef& source) {
  std::string key = source->str();
  if (auto it = node_ids_.find(key); it != node_ids_.end()) return it->second;
  int base = source->base ? node_index(source->base) : -1;
  nodes_.push_back({source, base});
  return node_ids_[key] = (int)nodes_.size() - 1;
}

PyObject* GuardSet::node_value(int node, PyObject** values, char* done, const FrameValues& frame) const {
  if (!done[node]) {
    const FetchNode& n = nodes_[node];
    PyObject* base = n.base >= 0 ? node_value(n.base, values, done, frame) : nullptr;
    values[node] = fetch_from(*n.source, base, frame);
    done[node] = 1;
  }
  return values[node];
}

template <class Kind>
bool GuardSet::has(int source) const {
  for (const auto& g : guards_)
    if (g.as<Kind>() && g.source == source) return true;
  return false;
}

// The tensor guard's spec and its printed form (A5, with holds(TensorMatch) above).
// In:  the tensor the trace saw (`value`, its TensorImpl `t`), the dims the compile made
//      dynamic (dynamic[i]: dim i symbolic; may be shorter than the rank), and its source.
// Out: the spec holds() checks later: value's Python type (not held: the type lives as long as
//      the class), dtype, device, requires_grad (t.needs_grad()), the sizes with each dynamic
//      dim -1, and the strides, with -1 for every dim before a dynamic one (its stride grows
//      with that size, so it is not checked); *code, the guard as MINI_LOGS=guards prints it:
//        check_tensor(L['x'], mini._C.Tensor, mini.float32, device=cpu, requires_grad=False,
//                     size=[8, None], stride=[None, 1])
//      (one line; sizes and strides as ints() prints them, -1 as None, as torch prints an
//      unchecked one; the type's tp_name).
// Guarantees: a tensor equal in all of these to `value` (any size >= 2 at a dynamic dim)
//      passes holds(); the stride of a dynamic dim itself stays checked.
static TensorMatch tensor_match_of(PyObject* value, const TensorImpl& t, const std::vector<bool>& dynamic,
                                   const Source& source, std::string* code) {
  // A5 BEGIN: the tensor guard (TENSOR_MATCH)
  MINI_KIT_STUB(A5);
  TensorMatch spec;
  spec.type = Py_TYPE(value);
  spec.dtype = t.dtype;
  spec.device = t.device();
  spec.requires_grad = t.needs_grad();
  spec.sizes = t.sizes;
  spec.strides = t.strides;
  for (size_t i = 0; i < dynamic.size() && i < t.sizes.size(); i++)
    if (dynamic[i]) spec.sizes[i] = -1;
  // A dynamic dim changes the strides of the dims before it: check those loosely. Its own
  // stride depends only on the dims after it, and is checked as the graph assumes it.
  for (size_t i = 0; i < spec.sizes.size(); i++)
    for (size_t j = i + 1; j < spec.sizes.size(); j++)
      if (spec.sizes[j] < 0) spec.strides[i] = -1;
  std::ostringstream printed;
  printed << "check_tensor(" << source.str() << ", " << spec.type->tp_name << ", mini."
          << dtype_name(t.dtype) << ", device=" << t.device().str() << ", requires_grad="
          << (spec.requires_grad ? "True" : "False")
          << ", size=" << ints(spec.sizes) << ", stride=" << ints(spec.strides) << ")";
  *code = printed.str();
  return spec;
  // A5 END
}

void GuardSet::add_tensor_match(SourceRef source, PyObject* value, const std::vector<bool>& dynamic) {
  int s = source_index(source);
  TensorImpl* t = unwrap_tensor(value);
  if (!t) return;
  std::string code;
  TensorMatch spec;
  try {
    spec = tensor_match_of(value, *t, dynamic, *source, &code);
  } catch (const std::exception& e) {
    // A course kit's tree where A5 is still the stub: a guard that never holds (holds() is the
    // stub too, and a guard that raises counts as failing: cache.cpp, guards_hold)
    if (!is_assignment_stub(e)) throw;
    spec.type = Py_TYPE(value);
    code = "check_tensor(" + source->str() + ", ...)  # A5 is not written yet: never holds";
  }
  Guard g{s, std::move(spec), std::move(code)};
  for (auto& old : guards_)  // re-guarding a source (e.g. after marking a dim dynamic) replaces it
    if (old.as<TensorMatch>() && old.source == s) { old = std::move(g); return; }
  guards_.push_back(std::move(g));
}

void GuardSet::add_type_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has<TypeMatch>(s)) return;
  Py_INCREF(Py_TYPE(value));
  std::string code = "type(" + source->str() + ") is " + Py_TYPE(value)->tp_name;
  guards_.push_back({s, TypeMatch{Py_TYPE(value)}, code});
}

void GuardSet::add_id_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has<IdMatch>(s)) return;
  IdMatch id{PyWeakref_NewRef(value, nullptr), true};
  if (!id.target) {  // not weak-referenceable (builtins, ints): those are not user data
    PyErr_Clear();
    id = {value, false};
    Py_INCREF(value);
  }
  guards_.push_back({s, id, "id(" + source->str() + ") == " + std::to_string((uintptr_t)value)});
}

void GuardSet::add_constant_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (value == Py_None) {
    if (!has<NoneMatch>(s)) guards_.push_back({s, NoneMatch{}, source->str() + " is None"});
  } else if (PyBool_Check(value)) {
    bool is_true = value == Py_True;
    std::string code = source->str() + (is_true ? " is True" : " is False");
    if (!has<BoolMatch>(s)) guards_.push_back({s, BoolMatch{is_true}, code});
  } else if (!has<EqualsMatch>(s)) {
    Py_INCREF(value);
    guards_.push_back({s, EqualsMatch{value}, source->str() + " == " + repr(value)});
  }
}

void GuardSet::add_length_check(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has<LengthCheck>(s)) return;
  add_type_match(source, value);
  int64_t length = Py_SIZE(value);
  std::string code = "len(" + source->str() + ") == " + std::to_string(length);
  guards_.push_back({s, LengthCheck{length}, code});
}

void GuardSet::add_dict_keys_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has<DictKeysMatch>(s)) return;
  PyObject* keys = PySequence_Tuple(value);  // iterating a dict yields its keys, in order
  if (!keys) { PyErr_Clear(); keys = PyTuple_New(0); }
  PyObject* key_list = PySequence_List(keys);
  std::string code = "list(" + source->str() + ".keys()) == " + (key_list ? repr(key_list) : "?");
  Py_XDECREF(key_list);
  guards_.push_back({s, DictKeysMatch{keys}, code});
}

void GuardSet::add_dict_contains(SourceRef source, const std::string& key, bool present) {
  int s = source_index(source);
  std::string code = std::string(present ? "" : "not ") + "___dict_contains('" + key + "', " + source->str() + ")";
  for (const auto& old : guards_)
    if (old.as<DictContains>() && old.code == code) return;
  guards_.push_back({s, DictContains{PyUnicode_FromString(key.c_str()), present}, code});
}

void GuardSet::add_duplicate_input(SourceRef source, SourceRef other, bool same) {
  int s = source_index(source), o = source_index(other);
  if (s == o) return;  // `m is m`: nothing to guard
  std::string code = source->str() + (same ? " is " : " is not ") + other->str();
  for (const auto& old : guards_)
    if (old.as<DuplicateInput>() && old.code == code) return;
  guards_.push_back({s, DuplicateInput{o, same}, code});
}

void GuardSet::add_grad_mode(bool enabled, const AutocastState& autocast) {
  if (has<GradMode>(-1)) return;
  std::string code = std::string("___check_global_state() (grad_mode=") + (enabled ? "True" : "False") +
                     (autocast == AutocastState{} ? "" : ", autocast=" + autocast.str()) + ")";
  guards_.insert(guards_.begin(), Guard{-1, GradMode{enabled, autocast}, code});
}

void GuardSet::add_size_compare(const SizeExpr& holds) {
  SourceRef first = holds.first_source();  // the guard is listed under its first tensor
  std::string code = holds.str();
  for (const auto& old : guards_)
    if (old.as<SizeCompare>() && old.code == code) return;
  guards_.push_back({first ? source_index(first) : -1, SizeCompare{holds}, code});
}

void GuardSet::add_number_compare(SourceRef source, int op, PyObject* constant) {
  static const char* symbols[] = {"<", "<=", "==", "!=", ">", ">="};
  NumberCompare g;
  g.op = op;
  g.int_constant = PyLong_CheckExact(constant);
  if (g.int_constant) g.int_value = PyLong_AsLongLong(constant);
  else g.float_value = PyFloat_AsDouble(constant);
  std::string code = source->str() + " " + symbols[op] + " " + repr(constant);
  for (const auto& old : guards_)
    if (old.as<NumberCompare>() && old.code == code) return;
  guards_.push_back({source_index(source), g, code});
}

int GuardSet::first_failure(const FrameValues& frame, std::string* reason) const {
  // Sources are fetched on first use, each once (node_value), and released at the end. Local
  // sources are a slot read; nothing here allocates for a set of up to 512 sources.
  constexpr size_t kOnStack = 512;
  PyObject* on_stack[kOnStack];
  char done_on_stack[kOnStack];
  std::vector<PyObject*> heap;
  std::vector<char> done_heap;
  const size_t n = nodes_.size();
  PyObject** values = n <= kOnStack ? on_stack : (heap.resize(n), heap.data());
  char* done = n <= kOnStack ? done_on_stack : (done_heap.resize(n), done_heap.data());
  std::memset(done, 0, n);
  auto value_at = [&](int s) { return node_value(node_of_[s], values, done, frame); };
  auto release = [&] {
    for (size_t i = 0; i < n; i++)
      if (done[i]) Py_XDECREF(values[i]);
  };
  int failed = -1;
  try {  // a guard may raise (a course kit's stub: cache.cpp, guards_hold): release what it fetched
    for (size_t i = 0; i < guards_.size() && failed < 0; i++) {
      const Guard& g = guards_[i];
      const DuplicateInput* duplicate = g.as<DuplicateInput>();
      int other_source = duplicate ? duplicate->other_source : -1;
      PyObject* v = g.source >= 0 ? value_at(g.source) : nullptr;
      PyObject* other = other_source >= 0 ? value_at(other_source) : nullptr;
      const Source* src = g.source >= 0 ? sources_[g.source].get() : nullptr;
      Checked checked{v, other, src, frame, g.code, reason};
      bool held = std::visit([&](const auto& check) { return holds(check, checked); }, g.check);
      if (!held) failed = (int)i;
    }
  } catch (...) {
    release();
    throw;
  }
  release();
  return failed;
}

bool GuardSet::check(const FrameValues& frame) {
  int f = first_failure(frame, nullptr);
  if (f >= 0) guards_[f].fail_count++;
  return f < 0;
}

std::string GuardSet::check_verbose(const FrameValues& frame) const {
  std::string reason;
  return first_failure(frame, &reason) < 0 ? "" : reason;
}

std::string GuardSet::print() const {
  std::ostringstream s;
  s << "GUARDS:\n\nTREE_GUARD_MANAGER:\n+- RootGuardManager\n";
  for (const auto& g : guards_)
    if (g.source < 0) s << "| +- " << g.kind() << ": " << g.code << "\n";
  std::vector<std::vector<const Guard*>> by_source(sources_.size());
  for (const auto& g : guards_)
    if (g.source >= 0) by_source[g.source].push_back(&g);
  for (size_t i = 0; i < sources_.size(); i++) {
    s << "| +- GuardManager: source=" << sources_[i]->str() << "\n";
    for (const Guard* g : by_source[i]) s << "| | +- " << g->kind() << ": " << g->code << "\n";
  }
  return s.str();
}

}  // namespace mini::guards
