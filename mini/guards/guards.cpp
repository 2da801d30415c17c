#include "guards.h"

#include <cmath>
#include <sstream>

#include "tensor/autograd.h"

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
std::string tensor_name(const Source& s) { return s.kind == Source::Kind::Local ? s.name : s.str(); }

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

// Checks one guard against the value at its source (Borrowed, may be NULL); `other` is the
// value at a DuplicateInput's other source.
bool holds(const Guard& g, PyObject* v, PyObject* other, const Source* src, const FrameValues& frame,
           std::string* reason) {
  auto fail = [&](const std::string& why) {
    if (reason) *reason = why;
    return false;
  };
  switch (g.kind) {
    case GuardKind::GradMode:
      return grad_enabled() == g.flag ||
             fail(std::string("grad mode changed: compiled with grad ") + (g.flag ? "enabled" : "disabled"));
    case GuardKind::NoneMatch: return v == Py_None || fail(g.code);
    case GuardKind::BoolMatch: return v == (g.flag ? Py_True : Py_False) || fail(g.code);
    case GuardKind::TypeMatch: return (v && (PyObject*)Py_TYPE(v) == g.object) || fail(g.code);
    case GuardKind::IdMatch: {
      PyObject* target = g.weak ? PyWeakref_GetObject(g.object) : g.object;
      if (g.weak && target == Py_None) return fail(g.code + " (the object is gone)");
      return (v && v == target) || fail(g.code);
    }
    case GuardKind::EqualsMatch: {
      if (!v || Py_TYPE(v) != Py_TYPE(g.object)) return fail(g.code);
      if (PyComplex_CheckExact(v)) {
        Py_complex a = PyComplex_AsCComplex(v), b = PyComplex_AsCComplex(g.object);
        return (same_float(a.real, b.real) && same_float(a.imag, b.imag)) || fail(g.code);
      }
      if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long a = PyLong_AsLongLongAndOverflow(v, &overflow);
        long long b = PyLong_AsLongLongAndOverflow(g.object, &overflow);
        if (!overflow) return a == b || fail(g.code);
      }
      if (PyFloat_CheckExact(v)) {
        return same_float(PyFloat_AS_DOUBLE(v), PyFloat_AS_DOUBLE(g.object)) || fail(g.code);
      }
      if (PySlice_Check(v)) {  // field by field: slice == slice would build tuples
        auto *a = (PySliceObject*)v, *b = (PySliceObject*)g.object;
        return (same_value(a->start, b->start) && same_value(a->stop, b->stop) &&
                same_value(a->step, b->step)) || fail(g.code);
      }
      int eq = PyObject_RichCompareBool(v, g.object, Py_EQ);
      if (eq < 0) PyErr_Clear();
      return eq == 1 || fail(g.code);
    }
    case GuardKind::SizeCompare: {
      int64_t r = 0;
      return (g.expr.evaluate(frame, &r) && r == 1) || fail(g.code);
    }
    case GuardKind::LengthCheck: {
      if (!v || !(PyTuple_Check(v) || PyList_Check(v))) return fail(g.code);
      return Py_SIZE(v) == g.length || fail(g.code);
    }
    case GuardKind::DictKeysMatch: {
      if (!v || !PyDict_Check(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(g.object)) return fail(g.code);
      PyObject *key, *value;
      Py_ssize_t pos = 0, i = 0;
      while (PyDict_Next(v, &pos, &key, &value)) {
        PyObject* want = PyTuple_GET_ITEM(g.object, i++);
        bool same_str = PyUnicode_Check(key) && PyUnicode_Check(want) && PyUnicode_Compare(key, want) == 0;
        if (key != want && !same_str) return fail(g.code);
      }
      return true;
    }
    case GuardKind::DuplicateInput:
      return (v && other && (v == other) == g.flag) || fail(g.code);
    case GuardKind::TensorMatch: {
      // A5 BEGIN: the tensor guard (TENSOR_MATCH)
      const TensorSpec& spec = g.tensor;
      TensorImpl* t = v ? unwrap_tensor(v) : nullptr;
      std::string name = src ? tensor_name(*src) : "?";
      if (!t) return fail("expected type of '" + name + "' to be a tensor type, ' but found " +
                          (v ? std::string(Py_TYPE(v)->tp_name) : "nothing"));
      if (Py_TYPE(v) != spec.type)
        return fail("expected type of '" + name + "' to be " + spec.type->tp_name + ", but found " +
                    Py_TYPE(v)->tp_name);
      if (t->dtype != spec.dtype)
        return fail("tensor '" + name + "' dtype mismatch. expected " + dtype_name(spec.dtype) +
                    ", actual " + dtype_name(t->dtype));
      if (t->needs_grad() != spec.requires_grad)
        return fail("tensor '" + name + "' requires_grad mismatch. expected requires_grad=" +
                    std::to_string(spec.requires_grad));
      if (t->sizes.size() != spec.sizes.size())
        return fail("tensor '" + name + "' rank mismatch. expected " + std::to_string(spec.sizes.size()) +
                    ", actual " + std::to_string(t->sizes.size()));
      for (size_t i = 0; i < spec.sizes.size(); i++)
        if (spec.sizes[i] < 0 && t->sizes[i] < 2)  // dynamic dims exclude 0 and 1, as torch's
          return fail("tensor '" + name + "' size mismatch at index " + std::to_string(i) +
                      ". expected a dynamic size >= 2, actual " + std::to_string(t->sizes[i]));
      for (size_t i = 0; i < spec.sizes.size(); i++)
        if (spec.sizes[i] >= 0 && t->sizes[i] != spec.sizes[i])
          return fail("tensor '" + name + "' size mismatch at index " + std::to_string(i) + ". expected " +
                      std::to_string(spec.sizes[i]) + ", actual " + std::to_string(t->sizes[i]));
      for (size_t i = 0; i < spec.strides.size(); i++)
        if (spec.strides[i] >= 0 && t->strides[i] != spec.strides[i])
          return fail("tensor '" + name + "' stride mismatch at index " + std::to_string(i) + ". expected " +
                      std::to_string(spec.strides[i]) + ", actual " + std::to_string(t->strides[i]));
      return true;
      // A5 END
    }
  }
  return fail("unknown guard");
}
}  // namespace

void set_tensor_unwrap(TensorUnwrap fn) { g_unwrap = fn; }
TensorImpl* unwrap_tensor(PyObject* obj) { return g_unwrap ? g_unwrap(obj) : nullptr; }

GuardSet::~GuardSet() {
  for (auto& g : guards_) Py_XDECREF(g.object);
}

int GuardSet::source_index(const SourceRef& source) {
  // a map, not a scan: a model of N blocks has guards on thousands of sources
  auto [it, added] = source_ids_.emplace(source->str(), (int)sources_.size());
  if (added) sources_.push_back(source);
  return it->second;
}

bool GuardSet::has(GuardKind kind, int source) const {
  for (const auto& g : guards_)
    if (g.kind == kind && g.source == source) return true;
  return false;
}

void GuardSet::add_tensor_match(SourceRef source, PyObject* value, const std::vector<bool>& dynamic) {
  int s = source_index(source);
  TensorImpl* t = unwrap_tensor(value);
  if (!t) return;
  Guard g{GuardKind::TensorMatch, s};
  g.tensor.type = Py_TYPE(value);
  g.tensor.dtype = t->dtype;
  g.tensor.requires_grad = t->needs_grad();
  g.tensor.sizes = t->sizes;
  g.tensor.strides = t->strides;
  for (size_t i = 0; i < dynamic.size() && i < t->sizes.size(); i++)
    if (dynamic[i]) g.tensor.sizes[i] = g.tensor.strides[i] = -1;
  // A dynamic dim changes the strides of the dims before it: check those loosely too.
  for (size_t i = 0; i < g.tensor.sizes.size(); i++)
    for (size_t j = i + 1; j < g.tensor.sizes.size(); j++)
      if (g.tensor.sizes[j] < 0) g.tensor.strides[i] = -1;
  std::ostringstream code;
  code << "check_tensor(" << source->str() << ", " << g.tensor.type->tp_name << ", mini."
       << dtype_name(t->dtype) << ", device=cpu, requires_grad=" << (g.tensor.requires_grad ? "True" : "False")
       << ", size=" << ints(g.tensor.sizes) << ", stride=" << ints(g.tensor.strides) << ")";
  g.code = code.str();
  for (auto& old : guards_)  // re-guarding a source (e.g. after marking a dim dynamic) replaces it
    if (old.kind == GuardKind::TensorMatch && old.source == s) { old = g; return; }
  guards_.push_back(g);
}

void GuardSet::add_type_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has(GuardKind::TypeMatch, s)) return;
  Guard g{GuardKind::TypeMatch, s};
  g.object = (PyObject*)Py_TYPE(value);
  Py_INCREF(g.object);
  g.code = "type(" + source->str() + ") is " + Py_TYPE(value)->tp_name;
  guards_.push_back(g);
}

void GuardSet::add_id_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has(GuardKind::IdMatch, s)) return;
  Guard g{GuardKind::IdMatch, s};
  g.object = PyWeakref_NewRef(value, nullptr);
  g.weak = g.object != nullptr;
  if (!g.weak) {  // not weak-referenceable (builtins, ints): those are not user data
    PyErr_Clear();
    g.object = value;
    Py_INCREF(value);
  }
  g.code = "id(" + source->str() + ") == " + std::to_string((uintptr_t)value);
  guards_.push_back(g);
}

void GuardSet::add_constant_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  Guard g{GuardKind::EqualsMatch, s};
  if (value == Py_None) {
    g.kind = GuardKind::NoneMatch;
    g.code = source->str() + " is None";
  } else if (PyBool_Check(value)) {
    g.kind = GuardKind::BoolMatch;
    g.flag = value == Py_True;
    g.code = source->str() + (g.flag ? " is True" : " is False");
  } else {
    g.object = value;
    Py_INCREF(value);
    g.code = source->str() + " == " + repr(value);
  }
  if (has(g.kind, s)) {
    Py_XDECREF(g.object);
    return;
  }
  guards_.push_back(g);
}

void GuardSet::add_length_check(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has(GuardKind::LengthCheck, s)) return;
  add_type_match(source, value);
  Guard g{GuardKind::LengthCheck, s};
  g.length = Py_SIZE(value);
  g.code = "len(" + source->str() + ") == " + std::to_string(g.length);
  guards_.push_back(g);
}

void GuardSet::add_dict_keys_match(SourceRef source, PyObject* value) {
  int s = source_index(source);
  if (has(GuardKind::DictKeysMatch, s)) return;
  Guard g{GuardKind::DictKeysMatch, s};
  g.object = PySequence_Tuple(value);  // iterating a dict yields its keys, in order
  if (!g.object) { PyErr_Clear(); g.object = PyTuple_New(0); }
  PyObject* keys = PySequence_List(g.object);
  g.code = "list(" + source->str() + ".keys()) == " + (keys ? repr(keys) : "?");
  Py_XDECREF(keys);
  guards_.push_back(g);
}

void GuardSet::add_duplicate_input(SourceRef source, SourceRef other, bool same) {
  Guard g{GuardKind::DuplicateInput, source_index(source)};
  g.other_source = source_index(other);
  if (g.source == g.other_source) return;  // `m is m`: nothing to guard
  g.flag = same;
  g.code = source->str() + (same ? " is " : " is not ") + other->str();
  for (const auto& old : guards_)
    if (old.kind == GuardKind::DuplicateInput && old.code == g.code) return;
  guards_.push_back(g);
}

void GuardSet::add_grad_mode(bool enabled) {
  if (has(GuardKind::GradMode, -1)) return;
  Guard g{GuardKind::GradMode, -1};
  g.flag = enabled;
  g.code = std::string("___check_global_state() (grad_mode=") + (enabled ? "True" : "False") + ")";
  guards_.insert(guards_.begin(), g);
}

void GuardSet::add_size_compare(const SizeExpr& holds) {
  SourceRef first = holds.first_source();  // the guard is listed under its first tensor
  Guard g{GuardKind::SizeCompare, first ? source_index(first) : -1};
  g.expr = holds;
  g.code = holds.str();
  for (const auto& old : guards_)
    if (old.kind == GuardKind::SizeCompare && old.code == g.code) return;
  guards_.push_back(g);
}

int GuardSet::first_failure(const FrameValues& frame, std::string* reason) const {
  // Sources are fetched on first use and released at the end. Local sources are a slot
  // read; nothing here allocates for them.
  PyObject* fetched[64];
  std::vector<PyObject*> spill;
  PyObject** values = sources_.size() <= 64 ? fetched : (spill.resize(sources_.size()), spill.data());
  uint64_t done = 0;
  auto value_at = [&](int s) {
    bool have = s < 64 ? (done >> s) & 1 : false;
    if (!have) {
      values[s] = fetch(*sources_[s], frame);
      if (s < 64) done |= uint64_t(1) << s;
    }
    return values[s];
  };
  int failed = -1;
  for (size_t i = 0; i < guards_.size() && failed < 0; i++) {
    const Guard& g = guards_[i];
    PyObject* v = g.source >= 0 ? value_at(g.source) : nullptr;
    PyObject* other = g.other_source >= 0 ? value_at(g.other_source) : nullptr;
    const Source* src = g.source >= 0 ? sources_[g.source].get() : nullptr;
    if (!holds(g, v, other, src, frame, reason)) failed = (int)i;
    if (g.source >= 64) Py_XDECREF(v);
    if (g.other_source >= 64) Py_XDECREF(other);
  }
  for (size_t s = 0; s < sources_.size() && s < 64; s++)
    if ((done >> s) & 1) Py_XDECREF(values[s]);
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

static const char* kind_name(GuardKind k) {
  switch (k) {
    case GuardKind::TensorMatch: return "TENSOR_MATCH";
    case GuardKind::TypeMatch: return "TYPE_MATCH";
    case GuardKind::IdMatch: return "ID_MATCH";
    case GuardKind::EqualsMatch: return "EQUALS_MATCH";
    case GuardKind::NoneMatch: return "NONE_MATCH";
    case GuardKind::BoolMatch: return "BOOL_MATCH";
    case GuardKind::LengthCheck: return "LENGTH_CHECK";
    case GuardKind::GradMode: return "GLOBAL_STATE";
    case GuardKind::SizeCompare: return "SHAPE_ENV";
    case GuardKind::DictKeysMatch: return "DICT_KEYS_MATCH";
    case GuardKind::DuplicateInput: return "DUPLICATE_INPUT";
  }
  return "?";
}

std::string GuardSet::print() const {
  std::ostringstream s;
  s << "GUARDS:\n\nTREE_GUARD_MANAGER:\n+- RootGuardManager\n";
  for (const auto& g : guards_)
    if (g.source < 0) s << "| +- " << kind_name(g.kind) << ": " << g.code << "\n";
  std::vector<std::vector<const Guard*>> by_source(sources_.size());
  for (const auto& g : guards_)
    if (g.source >= 0) by_source[g.source].push_back(&g);
  for (size_t i = 0; i < sources_.size(); i++) {
    s << "| +- GuardManager: source=" << sources_[i]->str() << "\n";
    for (const Guard* g : by_source[i]) s << "| | +- " << kind_name(g->kind) << ": " << g->code << "\n";
  }
  return s.str();
}

}  // namespace mini::guards
