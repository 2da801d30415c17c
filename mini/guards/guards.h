// guards.h — the assumptions a compiled graph was made under, checked on every call.
//
// In:  guards added by capture as it reads values from the frame (each on a Source).
// Out: check() — true when every guard holds — and, after a miss, check_verbose() — the
//      first failing guard in torch's words ("tensor 'x' size mismatch at index 0.
//      expected 32, actual 64").
// Guarantees:
//  * check() creates no Python objects and calls no Python code for guards on locals,
//    globals, cells, tuple/list items and dict items (attributes call getattr);
//  * a stale hit is impossible for what is guarded: a tensor's dtype, device, rank, sizes,
//    strides and requires_grad; a constant's type and value; a dict's keys; whether two
//    sources hold one object; an object's identity (via a
//    weak reference, so a dead object never matches a new one at the same address);
//  * a GuardSet keeps no user tensor or module alive (identity guards hold weak references;
//    constants it holds are ints, floats, strs, bools, None, and ranges and slices of ints);
//  * guards are checked in insertion order until the first failure; each failure bumps
//    the guard's fail_count.
#pragma once
#include <Python.h>

#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "guards/size_expr.h"
#include "guards/source.h"
#include "tensor/autograd.h"
#include "tensor/tensor.h"

namespace mini::guards {

// What each kind of guard checks: one struct per kind, holding only what that kind needs
// (torch's LeafGuard subclasses). `kind` is the name torch prints. The Python objects of
// TypeMatch, IdMatch, EqualsMatch, DictKeysMatch and DictContains are strong references, released by the
// GuardSet (held_object in guards.cpp); TensorMatch's type is not held.
struct TensorMatch {  // a mini.Tensor of this Python type, dtype, requires_grad, sizes, strides
  static constexpr const char* kind = "TENSOR_MATCH";
  PyTypeObject* type = nullptr;  // mini.Tensor or a subclass (nn.Parameter)
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
  std::vector<int64_t> sizes;    // -1: dynamic, not checked
  std::vector<int64_t> strides;  // -1: not checked
};
struct TypeMatch {  // type(v) is type
  static constexpr const char* kind = "TYPE_MATCH";
  PyTypeObject* type = nullptr;
};
struct IdMatch {  // v is this very object
  static constexpr const char* kind = "ID_MATCH";
  PyObject* target = nullptr;  // a weak reference to the object; the object itself when it
                               // has none (a builtin, a cell)
  bool weak = false;           // `target` is a weak reference
};
struct EqualsMatch {  // type(v) is type(constant) and v == constant
  static constexpr const char* kind = "EQUALS_MATCH";
  PyObject* constant = nullptr;  // an int, float, str, range or slice
};
struct NoneMatch {  // v is None
  static constexpr const char* kind = "NONE_MATCH";
};
struct BoolMatch {  // v is True / v is False
  static constexpr const char* kind = "BOOL_MATCH";
  bool value = false;
};
struct LengthCheck {  // a tuple or list of this length
  static constexpr const char* kind = "LENGTH_CHECK";
  int64_t length = 0;
};
struct GradMode {  // mini.is_grad_enabled() and the autocast state have these values (global state: no source)
  static constexpr const char* kind = "GLOBAL_STATE";
  bool enabled = true;
  AutocastState autocast;  // the graph holds the casts autocast made (tensor/autograd.h)
};
struct SizeCompare {  // a comparison of dynamic sizes that holds: L['x'].size()[0]*2 > 64
  static constexpr const char* kind = "SHAPE_ENV";
  SizeExpr comparison;  // evaluates to 1 when the guard holds
};
struct NumberCompare {  // a comparison of a Python number with a constant that holds: L['a'] <= 0.5
  static constexpr const char* kind = "SHAPE_ENV";  // torch keeps it on the SymFloat / SymInt
  int op = Py_LT;               // Py_LT .. Py_GE
  bool int_constant = false;    // compare as int64 when the value is an int too
  int64_t int_value = 0;
  double float_value = 0;
};
struct DictKeysMatch {  // a dict whose keys are these strs, in this order (a module's _modules)
  static constexpr const char* kind = "DICT_KEYS_MATCH";
  PyObject* keys = nullptr;  // a tuple
};
struct DictContains {  // key in v (present) / not in v (!present): v a dict, an instance's __dict__
  static constexpr const char* kind = "DICT_CONTAINS";
  PyObject* key = nullptr;  // a str
  bool present = false;
};
struct DuplicateInput {  // v is (same) / is not (!same) the value at other_source: aliasing
  static constexpr const char* kind = "DUPLICATE_INPUT";
  int other_source = -1;  // index into GuardSet::sources
  bool same = false;
};
using GuardCheck = std::variant<TensorMatch, TypeMatch, IdMatch, EqualsMatch, NoneMatch, BoolMatch,
                                LengthCheck, GradMode, SizeCompare, NumberCompare, DictKeysMatch, DictContains,
                                DuplicateInput>;

// One guard: what every kind has, and its kind's check.
struct Guard {
  int source = -1;         // index into GuardSet::sources; -1 for global state
  GuardCheck check;
  std::string code;        // the guard as torch prints it: "L['n'] == 2"
  int64_t fail_count = 0;

  const char* kind() const {
    return std::visit([](const auto& c) { return c.kind; }, check);
  }
  // This guard's check if it is of kind `Kind`, else null.
  template <class Kind>
  const Kind* as() const { return std::get_if<Kind>(&check); }
};

// How guards find the C++ tensor behind a Python object (set by the Python module):
// returns nullptr when `obj` is not a mini.Tensor.
using TensorUnwrap = TensorImpl* (*)(PyObject* obj);
void set_tensor_unwrap(TensorUnwrap fn);
TensorImpl* unwrap_tensor(PyObject* obj);

class GuardSet {
 public:
  GuardSet() = default;
  GuardSet(const GuardSet&) = delete;
  GuardSet& operator=(const GuardSet&) = delete;
  ~GuardSet();

  // Adders. `value` is the object found at `source` now (Borrowed).
  void add_tensor_match(SourceRef source, PyObject* value, const std::vector<bool>& dynamic_dims = {});
  void add_type_match(SourceRef source, PyObject* value);
  void add_id_match(SourceRef source, PyObject* value);
  // Picks NoneMatch, BoolMatch or EqualsMatch (+ type) for an immutable constant.
  void add_constant_match(SourceRef source, PyObject* value);
  void add_length_check(SourceRef source, PyObject* value);
  // `value` (a dict with str keys) keeps its keys and their order.
  void add_dict_keys_match(SourceRef source, PyObject* value);
  // `key` (a str) is (present) or is not a key of the dict at `source`: a module attribute
  // found in _modules while the instance's __dict__ would shadow it.
  void add_dict_contains(SourceRef source, const std::string& key, bool present);
  // The objects at `source` and `other` are the same object (same = true) or two (false).
  void add_duplicate_input(SourceRef source, SourceRef other, bool same);
  void add_grad_mode(bool enabled, const AutocastState& autocast = {});
  // A comparison of dynamic sizes that held while tracing (a shape guard: a branch on a
  // dynamic size, or a size used as a plain int, `== value`). `holds` ends in a comparison.
  void add_size_compare(const SizeExpr& holds);
  // `source` <op> `constant` holds (op Py_LT .. Py_GE; constant an int or a float): a branch
  // on a Python number made dynamic, decided with the value seen
  void add_number_compare(SourceRef source, int op, PyObject* constant);

  bool check(const FrameValues& frame);
  // "" if every guard holds; else the first failure as torch words it.
  std::string check_verbose(const FrameValues& frame) const;
  // MINI_LOGS=guards: the tree of sources and their guards.
  std::string print() const;

  size_t size() const { return guards_.size(); }
  const std::vector<Guard>& guards() const { return guards_; }
  const std::vector<SourceRef>& sources() const { return sources_; }

 private:
  int source_index(const SourceRef& source);
  int node_index(const SourceRef& source);
  template <class Kind>
  bool has(int source) const;
  // First failing guard index, or -1. `reason` (optional) gets its message.
  int first_failure(const FrameValues& frame, std::string* reason) const;
  // The value at node `node` (New reference owned by `values`, or NULL), fetched once a check:
  // its base's value first, then one step from it.
  PyObject* node_value(int node, PyObject** values, char* done, const FrameValues& frame) const;

  std::vector<SourceRef> sources_;
  std::unordered_map<std::string, int> source_ids_;  // printed source -> index in sources_
  std::vector<Guard> guards_;
  // Every source a check reads and every base on their chains, each once, with its base's
  // index: a check fetches L['self']._modules['h'] once for all the guards below it, not
  // once per guard (a GPT's 573 guarded sources are chains of up to 10 steps).
  struct FetchNode {
    SourceRef source;
    int base;  // index in nodes_, or -1
  };
  std::vector<FetchNode> nodes_;
  std::unordered_map<std::string, int> node_ids_;  // printed source -> index in nodes_
  std::vector<int> node_of_;                       // sources_[i]'s node
};

}  // namespace mini::guards
