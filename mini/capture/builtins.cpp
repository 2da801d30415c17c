// builtins.cpp — Python's builtins while tracing (Dynamo's BuiltinVariable): one handler per
// builtin that capture traces over Vars (len of a tensor, isinstance, zip, sum of tensors,
// sorted of a dict's keys, ...), named in one table; any other builtin (and math's and
// operator's functions) runs now on constant arguments, or the call is unsupported.
#include <algorithm>

#include "capture/trace_context.h"

namespace mini::capture {

bool all_constant(const std::vector<VarRef>& args, const Kwargs& kwargs) {
  for (auto& a : args)
    if (!a->is(Var::Kind::Constant)) return false;
  for (auto& [k, v] : kwargs)
    if (!v->is(Var::Kind::Constant)) return false;
  return true;
}

// Calls a real callable on constant arguments; the result is untracked (a constant).
VarRef call_on_constants(TraceContext& ctx, PyObject* fn, const std::vector<VarRef>& args,
                         const Kwargs& kwargs, const std::string& what) {
  PyObject* tuple = PyTuple_New((Py_ssize_t)args.size());
  for (size_t i = 0; i < args.size(); i++) {
    Py_INCREF(args[i]->obj);
    PyTuple_SET_ITEM(tuple, i, args[i]->obj);
  }
  PyObject* kw = kwargs.empty() ? nullptr : PyDict_New();
  for (auto& [k, v] : kwargs) PyDict_SetItemString(kw, k.c_str(), v->obj);
  PyObject* r = PyObject_Call(fn, tuple, kw);
  Py_DECREF(tuple);
  Py_XDECREF(kw);
  if (!r) {
    PyErr_Clear();
    unsupported(what + " raised an error on constant arguments");
  }
  VarRef v = wrap_untracked(ctx, r);
  Py_DECREF(r);
  return v;
}

namespace {

std::string builtin_name(PyObject* fn) {
  PyObject* n = PyObject_GetAttrString(fn, "__name__");
  std::string s = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : "?";
  Py_XDECREF(n);
  PyErr_Clear();
  return s;
}

bool sequence_or_dict(const std::vector<VarRef>& args) {
  if (args.empty()) return false;
  const VarRef& a = args[0];
  return a->is(Var::Kind::Iterator) || a->is(Var::Kind::Tuple) || a->is(Var::Kind::List) || a->is(Var::Kind::Dict) ||
         a->is(Var::Kind::DictView);
}

// One call of a builtin: its name, its arguments (specialized to constants where they can be:
// `args`, `kwargs`) and its keyword arguments as given (`kwargs_in`, whose values some
// builtins keep as Vars: dict(a=x)).
struct BuiltinCall {
  TraceContext& ctx;
  const VarRef& callee;
  std::string name;
  std::vector<VarRef> args;
  const Kwargs& kwargs_in;
  Kwargs kwargs;
  // sum(), all(), any() over a sequence capture holds
  bool sequence() const {
    return !args.empty() && (args[0]->is(Var::Kind::Iterator) || args[0]->is(Var::Kind::Tuple) ||
                             args[0]->is(Var::Kind::List));
  }
};
// A builtin's handler: its result, or null when this call is not one it traces (the generic
// rule then runs it on constants, or refuses).
using BuiltinHandler = VarRef (*)(BuiltinCall& c);

// Before the arguments are specialized: the builtins that keep dynamic sizes symbolic.
VarRef builtin_on_sizes(BuiltinCall& c) {
  if (c.name == "int" && c.args.size() == 1 && c.kwargs_in.empty() && c.args[0]->is(Var::Kind::SymInt))
    return c.args[0];  // a dynamic size is an int already
  if ((c.name == "max" || c.name == "min") && c.args.size() >= 2 && c.kwargs_in.empty())
    return sym_extreme(c.ctx, c.name == "max", c.args);  // max(x.shape[0], y.shape[0])
  return nullptr;
}

VarRef builtin_print(BuiltinCall&) {
  unsupported("Failed to trace builtin operator `print`: printing is a side effect that must run "
              "in Python; move the print out of the compiled function");
}

VarRef builtin_len(BuiltinCall& c) {
  if (c.args.size() != 1) return nullptr;
  const VarRef& a = c.args[0];
  if (auto* seq = a->sequence()) return make_constant(PyLong_FromSize_t(seq->items.size()));
  if (auto* d = a->as<Var::Dict>()) return make_constant(PyLong_FromSize_t(d->keys.size()));
  if (auto* view = a->as<Var::DictView>())
    return make_constant(PyLong_FromSize_t(view->dict->get<Var::Dict>().keys.size()));
  if (a->is(Var::Kind::Tensor)) {
    if (meta_of(c.ctx, a).sizes.empty()) unsupported("len() of a 0-d tensor");
    return size_var(c.ctx, a, 0);
  }
  if (a->is(Var::Kind::Module)) return call_module_method(c.ctx, a, "__len__", {}, {});  // ModuleList's: inlined
  return nullptr;
}

// hasattr(module, name): a module's attribute lives in one of its dicts (or its class, which
// its type guard fixes): the answer is guarded on each dict holding the name or not.
VarRef builtin_hasattr(BuiltinCall& c) {
  const auto& args = c.args;
  if (args.size() != 2 || !args[0]->is(Var::Kind::Module) || !args[1]->obj || !PyUnicode_Check(args[1]->obj))
    return nullptr;
  const char* attr = PyUnicode_AsUTF8(args[1]->obj);
  int r = PyObject_HasAttr(args[0]->obj, args[1]->obj);
  if (args[0]->source) {
    for (const char* d : {"__dict__", "_parameters", "_buffers", "_modules"}) {
      PyObject* dict = PyObject_GetAttrString(args[0]->obj, d);
      if (dict && PyDict_Check(dict))
        c.ctx.guards().add_dict_contains(guards::Source::attr(args[0]->source, d), attr,
                                         PyDict_GetItemString(dict, attr) != nullptr);
      Py_XDECREF(dict);
      PyErr_Clear();
    }
  }
  return make_constant(PyBool_FromLong(r));
}

// isinstance(x, (A, B)) with the tuple built in the traced code: a tuple of its classes.
VarRef classes_tuple(const VarRef& tuple) {
  const std::vector<VarRef>& items = tuple->get<Var::Tuple>().items;
  PyObject* classes = PyTuple_New((Py_ssize_t)items.size());
  for (size_t i = 0; i < items.size(); i++) {
    PyObject* c = items[i]->obj;
    if (!c || !PyType_Check(c)) {  // a class read from a global or builtin (guarded there)
      Py_DECREF(classes);
      unsupported("isinstance with a tuple holding " + items[i]->describe());
    }
    Py_INCREF(c);
    PyTuple_SET_ITEM(classes, (Py_ssize_t)i, c);
  }
  return make_constant(classes);
}

VarRef builtin_isinstance(BuiltinCall& c) {
  auto& args = c.args;
  if (args.size() != 2) return nullptr;
  if (args[1]->is(Var::Kind::Tuple)) args[1] = classes_tuple(args[1]);
  if (!args[1]->obj) return nullptr;
  PyObject* cls = nullptr;  // the class of args[0], where capture knows it without an object
  if (args[0]->is(Var::Kind::Tensor)) {
    cls = (PyObject*)tensor_type_of(c.ctx, args[0]);
    if (args[0]->tensor().number) {  // a dynamic Python number: its dtype says int, float or bool
      DType d = meta_of(c.ctx, args[0]).dtype;
      cls = d == DType::Bool ? (PyObject*)&PyBool_Type : is_floating(d) ? (PyObject*)&PyFloat_Type
                                                                          : (PyObject*)&PyLong_Type;
    }
  } else if (args[0]->is(Var::Kind::Tuple) || args[0]->is(Var::Kind::List) || args[0]->is(Var::Kind::Dict)) {
    const Var::Tuple* tuple = args[0]->as<Var::Tuple>();
    cls = tuple && tuple->record ? tuple->record->obj  // a record: its class
          : tuple ? (PyObject*)&PyTuple_Type
          : args[0]->is(Var::Kind::List) ? (PyObject*)&PyList_Type : (PyObject*)&PyDict_Type;
  } else if (!args[0]->obj) {
    return nullptr;
  }
  int r = cls ? PyObject_IsSubclass(cls, args[1]->obj) : PyObject_IsInstance(args[0]->obj, args[1]->obj);
  if (r < 0) {
    PyErr_Clear();
    unsupported(args[0]->is(Var::Kind::Tensor) ? "isinstance on a tensor" : "isinstance");
  }
  return make_constant(PyBool_FromLong(r));
}

VarRef builtin_sequence(BuiltinCall& c) {  // tuple(xs), list(xs) of a Var
  if (c.args.size() != 1 || c.args[0]->is(Var::Kind::Constant)) return nullptr;
  return make_tuple_var(items_of(c.ctx, c.args[0]), c.name == "list");
}

VarRef builtin_dict(BuiltinCall& c) {  // dict(), dict(d), dict(pairs), dict(a=1, ...)
  if (c.args.size() > 1) return nullptr;
  VarRef d = make_dict({}, {});
  if (!c.args.empty() && c.args[0]->is(Var::Kind::Dict)) {
    const std::vector<VarRef>& keys = c.args[0]->get<Var::Dict>().keys;
    for (size_t i = 0; i < keys.size(); i++) dict_set(c.ctx, d, keys[i], dict_value(c.ctx, c.args[0], i));
  } else if (!c.args.empty()) {
    for (auto& pair : items_of(c.ctx, c.args[0])) {
      std::vector<VarRef> kv = items_of(c.ctx, pair);
      if (kv.size() != 2) unsupported("dict() of a sequence whose items are not pairs");
      dict_set(c.ctx, d, kv[0], kv[1]);
    }
  }
  for (auto& [k, v] : c.kwargs_in) dict_set(c.ctx, d, make_constant(PyUnicode_FromString(k.c_str())), v);
  return d;
}

VarRef builtin_enumerate(BuiltinCall& c) {
  if (c.args.empty()) return nullptr;
  if (c.args.size() > 1 && !(c.args[1]->is(Var::Kind::Constant) && PyLong_Check(c.args[1]->obj)))
    unsupported("enumerate() with a start that is not an int constant");
  long start = c.args.size() > 1 ? PyLong_AsLong(c.args[1]->obj) : 0;
  std::vector<VarRef> items = items_of(c.ctx, c.args[0]), out;
  for (size_t i = 0; i < items.size(); i++)
    out.push_back(make_tuple_var({make_constant(PyLong_FromLong(start + (long)i)), items[i]}));
  return make_tuple_var(out);
}

// The items of each of `lists` side by side, as far as the shortest goes (zip, map).
std::vector<std::vector<VarRef>> rows_of(TraceContext& ctx, const std::vector<VarRef>& lists_in) {
  std::vector<std::vector<VarRef>> lists, rows;
  for (auto& a : lists_in) lists.push_back(items_of(ctx, a));
  size_t n = lists.empty() ? 0 : lists[0].size();
  for (auto& l : lists) n = std::min(n, l.size());
  for (size_t i = 0; i < n; i++) {
    rows.emplace_back();
    for (auto& l : lists) rows.back().push_back(l[i]);
  }
  return rows;
}

VarRef builtin_zip(BuiltinCall& c) {
  std::vector<VarRef> out;
  for (auto& row : rows_of(c.ctx, c.args)) out.push_back(make_tuple_var(row));
  return make_tuple_var(out);
}

VarRef builtin_abs(BuiltinCall& c) {  // of a tensor (of a constant: the generic rule)
  if (c.args.size() != 1 || !c.args[0]->is(Var::Kind::Tensor)) return nullptr;
  VarRef r = tensor_unary(c.ctx, OpKind::Abs, c.args[0]);
  r->tensor().number = c.args[0]->tensor().number;
  return r;
}

VarRef builtin_getattr(BuiltinCall& c) {
  if (c.args.size() != 2 || !c.args[1]->obj || !PyUnicode_Check(c.args[1]->obj)) return nullptr;
  return get_attr(c.ctx, c.args[0], PyUnicode_AsUTF8(c.args[1]->obj));
}

// sum(t * w for t in xs): Python's left fold from `start` (0), tensors added in the graph.
VarRef builtin_sum(BuiltinCall& c) {
  if (!c.sequence() || c.args.size() > 2 || c.kwargs_in.size() > 1) return nullptr;
  VarRef acc = c.args.size() > 1 ? c.args[1] : make_constant(PyLong_FromLong(0));
  for (auto& [k, v] : c.kwargs_in) {
    if (k != "start") unsupported("sum() got an unexpected keyword argument '" + k + "'");
    acc = v;
  }
  for (const VarRef& item : items_of(c.ctx, c.args[0])) {
    VarRef a = as_constant(c.ctx, acc), b = as_constant(c.ctx, item);
    if (a && b) {
      PyObject* r = PyNumber_Add(a->obj, b->obj);
      if (!r) {
        PyErr_Clear();
        unsupported("sum() adding " + a->describe() + " and " + b->describe());
      }
      acc = make_constant(r);
    } else if (acc->is(Var::Kind::Tensor) || item->is(Var::Kind::Tensor)) {
      acc = tensor_binary(c.ctx, OpKind::Add, acc, item);
    } else {
      unsupported("sum() adding " + acc->describe() + " and " + item->describe());
    }
  }
  return acc;
}

VarRef builtin_map(BuiltinCall& c) {  // map(f, xs, ...): f called per item, now
  if (c.args.size() < 2 || !c.kwargs_in.empty()) return nullptr;
  Var::Iterator it;
  for (auto& row : rows_of(c.ctx, std::vector<VarRef>(c.args.begin() + 1, c.args.end())))
    it.items.push_back(call_var(c.ctx, c.args[0], std::move(row), {}));
  return std::make_shared<Var>(std::move(it));
}

VarRef builtin_reduce(BuiltinCall& c) {  // functools.reduce(f, xs[, initial]): the left fold, f inlined per item
  if ((c.args.size() != 2 && c.args.size() != 3) || !c.kwargs_in.empty()) return nullptr;
  std::vector<VarRef> items = items_of(c.ctx, c.args[1]);
  if (c.args.size() == 2 && items.empty()) unsupported("reduce() of an empty iterable with no initial value");
  size_t first = c.args.size() == 3 ? 0 : 1;
  VarRef acc = c.args.size() == 3 ? c.args[2] : items[0];
  for (size_t i = first; i < items.size(); i++) acc = call_var(c.ctx, c.args[0], {acc, items[i]}, {});
  return acc;
}

// reversed(xs); sorted(xs) of values known while tracing (a dict's keys, sizes), with its key=
// and reverse=.
VarRef builtin_sorted(BuiltinCall& c) {
  if (!sequence_or_dict(c.args) || c.args.size() != 1) return nullptr;
  std::vector<VarRef> items = items_of(c.ctx, c.args[0]);
  if (c.name == "reversed") return make_tuple_var(std::vector<VarRef>(items.rbegin(), items.rend()), true);
  PyObject* list = PyList_New(0);
  for (const VarRef& item : items) {
    VarRef k = as_constant(c.ctx, item);
    if (!k) {
      Py_DECREF(list);
      unsupported("sorted() of " + item->describe());
    }
    PyList_Append(list, k->obj);
  }
  VarRef sorted_list = call_on_constants(c.ctx, c.callee->obj, {make_constant(list)}, c.kwargs_in, "sorted()");
  std::vector<VarRef> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sorted_list->obj); i++) {
    PyObject* v = PyList_GET_ITEM(sorted_list->obj, i);
    VarRef found;  // the item itself where it is one of the inputs (a dict key keeps its Var)
    for (const VarRef& item : items)
      if (VarRef k = as_constant(c.ctx, item); k && k->obj == v) found = item;
    out.push_back(found ? found : make_constant((Py_INCREF(v), v)));
  }
  return make_tuple_var(out, true);
}

// all(xs), any(xs): each item's truth known while tracing (constants, static sizes); stops
// where Python does.
VarRef builtin_all_any(BuiltinCall& c) {
  if (!c.sequence() || c.args.size() != 1) return nullptr;
  bool all = c.name == "all";
  for (const VarRef& item : items_of(c.ctx, c.args[0])) {
    VarRef k = as_constant(c.ctx, item);
    if (!k) unsupported(c.name + "() of " + item->describe() + ", whose truth is known only when the graph runs");
    int t = PyObject_IsTrue(k->obj);
    if (t < 0) {
      PyErr_Clear();
      unsupported(c.name + "() of " + item->describe());
    }
    if (all != (t != 0)) return make_constant(PyBool_FromLong(!all));
  }
  return make_constant(PyBool_FromLong(all));
}

const std::pair<const char*, BuiltinHandler> kBuiltins[] = {
    {"print", builtin_print},       {"len", builtin_len},       {"hasattr", builtin_hasattr},
    {"isinstance", builtin_isinstance}, {"tuple", builtin_sequence}, {"list", builtin_sequence},
    {"dict", builtin_dict},         {"enumerate", builtin_enumerate}, {"zip", builtin_zip},
    {"abs", builtin_abs},           {"getattr", builtin_getattr}, {"sum", builtin_sum},
    {"map", builtin_map},           {"reduce", builtin_reduce}, {"sorted", builtin_sorted},
    {"reversed", builtin_sorted},   {"all", builtin_all_any},   {"any", builtin_all_any},
};

// The module of a builtin function (math.sqrt's "math"), or null.
const char* module_of(PyObject* fn) {
  PyObject* owner = PyCFunction_Check(fn) ? PyCFunction_GET_SELF(fn) : nullptr;
  const char* module = owner && PyModule_Check(owner) ? PyModule_GetName(owner) : nullptr;
  if (!module) PyErr_Clear();
  return module;
}

// operator.mul(a, b) on tensors is a * b (functools.reduce(operator.mul, xs)).
VarRef operator_on_tensors(BuiltinCall& c) {
  const char* module = module_of(c.callee->obj);
  if (!module || std::string(module) != "_operator" || c.args.size() != 2 || !c.kwargs.empty() ||
      !(c.args[0]->is(Var::Kind::Tensor) || c.args[1]->is(Var::Kind::Tensor)))
    return nullptr;
  static const std::pair<const char*, OpKind> ops[] = {{"add", OpKind::Add}, {"sub", OpKind::Sub},
                                                       {"mul", OpKind::Mul}, {"truediv", OpKind::Div},
                                                       {"matmul", OpKind::Matmul}, {"pow", OpKind::Pow}};
  for (const auto& [op, kind] : ops)
    if (c.name == op) return tensor_binary(c.ctx, kind, c.args[0], c.args[1]);
  return nullptr;
}

// A pure builtin (or a function of math or operator) on constants: run now, its result a
// constant. (An exception made of constants is a constant too: what a raise statement raises.)
VarRef pure_on_constants(BuiltinCall& c) {
  static const char* pure[] = {"range", "int", "float", "bool", "abs", "min", "max", "round", "str",
                               "tuple", "list", "divmod", "pow", "sum", "len", "isinstance", "slice",
                               "RuntimeError", "TypeError", "ValueError", "IndexError"};
  // the math module's functions are pure too: math.sqrt(head_dim) of a model's attention scale
  const char* module = module_of(c.callee->obj);
  bool is_pure = module && (std::string(module) == "math" || std::string(module) == "_operator");
  for (const char* p : pure) is_pure = is_pure || c.name == p;
  if (!is_pure) return nullptr;
  std::vector<VarRef> constants;  // tuples of numbers too: max(x.shape)
  for (auto& a : c.args) {
    // range() of a Python number made dynamic (automatic dynamic) takes its value and guards
    // it, as Dynamo's guard_if_dyn: a loop is unrolled for one trip count
    VarRef k = c.name == "range" ? specialize_number(c.ctx, a) : a;
    if ((k = as_constant(c.ctx, k))) constants.push_back(k);
  }
  if (constants.size() != c.args.size() || !all_constant(constants, c.kwargs)) return nullptr;
  return call_on_constants(c.ctx, c.callee->obj, constants, c.kwargs, c.name + "()");
}

[[noreturn]] void refuse_builtin(const BuiltinCall& c) {
  bool dynamic_number = false;
  std::string described;
  for (auto& a : c.args) {
    dynamic_number = dynamic_number || is_dynamic_number(a);
    described += (described.empty() ? "" : ", ") + a->describe();
  }
  unsupported("Failed to trace builtin operator `" + c.name + "` with arguments (" + described +
              "); mini's capture only evaluates builtins on constants" +
              (dynamic_number ? std::string("; a number made dynamic is known only when the graph runs: compute with it "
                                            "as a tensor (mini.clamp(x, max=1.0) for min), or compile with dynamic=False "
                                            "to guard its value")
                              : std::string()));
}

}  // namespace

VarRef call_builtin(TraceContext& ctx, const VarRef& callee, std::vector<VarRef> args, const Kwargs& kwargs_in) {
  BuiltinCall c{ctx, callee, builtin_name(callee->obj), std::move(args), kwargs_in, {}};
  if (VarRef r = builtin_on_sizes(c)) return r;
  for (auto& a : c.args) a = specialize(ctx, a);
  c.kwargs = kwargs_in;
  for (auto& kv : c.kwargs) kv.second = specialize(ctx, kv.second);
  for (const auto& [name, handler] : kBuiltins)
    if (c.name == name)
      if (VarRef r = handler(c)) return r;
  if (VarRef r = operator_on_tensors(c)) return r;
  if (VarRef r = pure_on_constants(c)) return r;
  refuse_builtin(c);
}

}  // namespace mini::capture
