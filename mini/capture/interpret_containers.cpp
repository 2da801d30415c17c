// interpret_containers.cpp — the FrameInterpreter's containers (frame_interpreter.h): building
// tuples, lists, dicts and slices; subscripts, stores and deletes into them; iteration and
// unpacking, over containers, constants, Sequentials and a tensor's rows.
#include "capture/frame_interpreter.h"

namespace mini::capture {

// A Sequential's or ModuleList's submodules, as their __iter__ and __getitem__ (one pair, of
// their base class) read them: module._modules,
// in order, under a guard that its keys stay these keys in this order (so another Sequential
// of the same layout reuses the graph, and one with a layer more or less does not). Returns
// the dict (New) and its source (null for a module without one). Other module classes
// define iteration and indexing their own way: those are unsupported.
static PyObject* sequential_modules(TraceContext& ctx, const VarRef& module, const char* method,
                                    SourceRef* dict_src) {
  static PyObject* sequential = nullptr;  // set under the GIL (see set_line)
  if (!sequential) sequential = [] {
    PyObject* nn = PyImport_ImportModule("mini.nn");
    PyObject* cls = nn ? PyObject_GetAttrString(nn, "Sequential") : nullptr;
    Py_XDECREF(nn);
    PyErr_Clear();
    return cls;
  }();
  PyObject* own = PyObject_GetAttrString((PyObject*)Py_TYPE(module->obj), method);
  PyObject* sequentials = sequential ? PyObject_GetAttrString(sequential, method) : nullptr;
  bool same = own && own == sequentials;
  Py_XDECREF(own);
  Py_XDECREF(sequentials);
  PyErr_Clear();
  PyObject* mods = same ? PyObject_GetAttrString(module->obj, "_modules") : nullptr;
  if (!mods || !PyDict_Check(mods)) {
    Py_XDECREF(mods);
    PyErr_Clear();
    unsupported(std::string(method == std::string("__iter__") ? "iterating" : "indexing") + " a " +
                Py_TYPE(module->obj)->tp_name + ": mini's capture knows only Sequential's and ModuleList's " + method);
  }
  *dict_src = module->source ? guards::Source::attr(module->source, "_modules") : nullptr;
  if (*dict_src) ctx.guards().add_dict_keys_match(*dict_src, mods);
  return mods;
}

VarRef FrameInterpreter::subscript(const VarRef& obj, const VarRef& index_in) {
  if (is_object_record(obj))
    unsupported("indexing a " + obj->get<Var::Tuple>().record->describe() + " (not a sequence)");
  if (is_dynamic_number(obj)) unsupported("indexing a dynamic Python number");
  if (obj->is(Var::Kind::Tensor)) {  // the index as given: a dynamic size can stay a slice bound
    if (VarRef r = call_replaced_tensor_method(ctx_, "__getitem__", obj, {index_in}, {})) return r;
    return tensor_getitem(ctx_, obj, index_in);
  }
  VarRef index = specialize(ctx_, index_in);
  if (Var::Sequence* seq = obj->sequence(); seq && is_constant(index)) {
    if (PyLong_Check(index->obj)) {
      Py_ssize_t i = PyLong_AsSsize_t(index->obj), n = (Py_ssize_t)seq->items.size();
      if (i < 0) i += n;
      if (i < 0 || i >= n) unsupported("tuple index out of range");
      return seq->items[i];
    }
    if (PySlice_Check(index->obj)) {
      Py_ssize_t start, stop, step, n = (Py_ssize_t)seq->items.size();
      if (PySlice_Unpack(index->obj, &start, &stop, &step) < 0) checked(nullptr, "slice");
      Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
      std::vector<VarRef> items;
      for (Py_ssize_t k = 0; k < len; k++) items.push_back(seq->items[start + k * step]);
      return make_tuple_var(items, obj->is(Var::Kind::List));
    }
  }
  if (is_constant(obj) && is_constant(index))
    return make_constant(checked(PyObject_GetItem(obj->obj, index->obj), "subscript"));
  if (obj->is(Var::Kind::Dict)) {
    int i = dict_find(obj, index);
    if (i < 0) unsupported("KeyError: " + index->describe());
    return dict_value(ctx_, obj, i);
  }
  if (obj->is(Var::Kind::Module) && is_constant(index) && PyLong_CheckExact(index->obj)) {
    // sequential[i]: the submodule at _modules' i-th key, read from there
    SourceRef dict_src;
    PyObject* mods = sequential_modules(ctx_, obj, "__getitem__", &dict_src);
    Py_ssize_t i = PyLong_AsSsize_t(index->obj), n = PyDict_GET_SIZE(mods);
    if (i < 0) i += n;
    PyObject *key = nullptr, *value = nullptr;
    Py_ssize_t pos = 0;
    for (Py_ssize_t k = 0; k <= i && k < n; k++) PyDict_Next(mods, &pos, &key, &value);
    if (i < 0 || i >= n || !PyUnicode_Check(key)) {
      Py_DECREF(mods);
      unsupported("Sequential index " + std::to_string(i) + " is out of range");
    }
    Py_INCREF(value);
    std::string name = PyUnicode_AsUTF8(key);
    Py_DECREF(mods);
    VarRef v = dict_src ? wrap(ctx_, value, guards::Source::dict_item(dict_src, name))
                        : wrap_untracked(ctx_, value);
    Py_DECREF(value);
    return v;
  }
  unsupported("indexing " + obj->describe() + " with " + index->describe() + " is not supported by mini's capture");
}

VarRef FrameInterpreter::iterate(const VarRef& v) {
  Var::Iterator it;
  if (v->is(Var::Kind::Tuple) || v->is(Var::Kind::List) || v->is(Var::Kind::Dict) || v->is(Var::Kind::DictView)) {
    it.items = items_of(ctx_, v);
  } else if (is_constant(v)) {
    PyObject* iter = checked(PyObject_GetIter(v->obj), "iter()");
    while (PyObject* item = PyIter_Next(iter)) {
      it.items.push_back(wrap_untracked(ctx_, item));
      Py_DECREF(item);
    }
    Py_DECREF(iter);
    if (PyErr_Occurred()) checked(nullptr, "iteration");
  } else if (v->is(Var::Kind::Module)) {
    // iter(Sequential): its submodules, each read from module._modules[key]
    SourceRef dict_src;
    PyObject* mods = sequential_modules(ctx_, v, "__iter__", &dict_src);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(mods, &pos, &key, &value)) {
      SourceRef s = dict_src ? guards::Source::dict_item(dict_src, PyUnicode_AsUTF8(key)) : nullptr;
      it.items.push_back(s ? wrap(ctx_, value, s) : wrap_untracked(ctx_, value));
    }
    Py_DECREF(mods);
  } else if (v->is(Var::Kind::Tensor)) {
    const auto& m = meta_of(ctx_, v);
    if (m.sizes.empty()) unsupported("iteration over a 0-d tensor");
    int64_t rows = PyLong_AsLongLong(specialize(ctx_, size_var(ctx_, v, 0))->obj);  // unrolled
    for (int64_t i = 0; i < rows; i++) {
      VarRef idx = make_constant(PyLong_FromLongLong(i));
      it.items.push_back(tensor_getitem(ctx_, v, idx));
    }
  } else if (v->is(Var::Kind::Iterator)) {
    return v;
  } else {
    unsupported("iterating over " + v->describe() + " is not supported by mini's capture");
  }
  return std::make_shared<Var>(std::move(it));
}

std::vector<VarRef> FrameInterpreter::unpack(const VarRef& v, size_t n) {
  VarRef it_var = iterate(v);
  const Var::Iterator* it = &it_var->get<Var::Iterator>();
  if (it->items.size() - it->position != n)
    unsupported("cannot unpack " + std::to_string(it->items.size()) + " values into " + std::to_string(n));
  return std::vector<VarRef>(it->items.begin() + it->position, it->items.end());
}

// ---- the opcode handlers ------------------------------------------------------------------

VarRef FrameInterpreter::op_build_sequence(const Instruction& in) {  // BUILD_TUPLE, BUILD_LIST, LIST_TO_TUPLE
  if (in.op == Opcode::LIST_TO_TUPLE) push(make_tuple_var(pop()->get<Var::List>().items));
  else push(make_tuple_var(pop_n(in.arg), in.op == Opcode::BUILD_LIST));
  return nullptr;
}

VarRef FrameInterpreter::op_build_map(const Instruction& in) {  // BUILD_MAP, BUILD_CONST_KEY_MAP
  VarRef d = make_dict({}, {});
  if (in.op == Opcode::BUILD_MAP) {
    std::vector<VarRef> parts = pop_n(2 * in.arg);  // key, value, key, value, ...
    for (int i = 0; i < in.arg; i++) dict_set(ctx_, d, parts[2 * i], parts[2 * i + 1]);
  } else {
    VarRef keys = pop();
    std::vector<VarRef> values = pop_n(in.arg);
    std::vector<VarRef> key_vars = iterate(keys)->get<Var::Iterator>().items;
    for (int i = 0; i < in.arg; i++) dict_set(ctx_, d, key_vars.at(i), values[i]);
  }
  push(d);
  return nullptr;
}

VarRef FrameInterpreter::op_build_slice(const Instruction& in) {
  std::vector<VarRef> parts = pop_n(in.arg);
  if (VarRef s = sym_slice(ctx_, parts)) {  // a dynamic size as a bound: kept symbolic
    push(s);
    return nullptr;
  }
  for (auto& p : parts) p = specialize(ctx_, p);
  for (auto& p : parts)
    if (!is_constant(p)) unsupported("a slice bound that is not a Python constant");
  PyObject* s = PySlice_New(parts[0]->obj, parts[1]->obj, in.arg == 3 ? parts[2]->obj : nullptr);
  push(make_constant(checked(s, "slice")));
  return nullptr;
}

VarRef FrameInterpreter::op_list_update(const Instruction& in) {  // LIST_APPEND, LIST_EXTEND
  VarRef v = pop();
  auto& dst = top(in.arg)->get<Var::List>().items;
  if (in.op == Opcode::LIST_APPEND) {
    dst.push_back(v);
  } else {
    VarRef it_var = iterate(v);
    const Var::Iterator& it = it_var->get<Var::Iterator>();
    dst.insert(dst.end(), it.items.begin() + it.position, it.items.end());
  }
  ctx_.mutations++;
  return nullptr;
}

VarRef FrameInterpreter::op_dict_update(const Instruction& in) {  // MAP_ADD, DICT_UPDATE, DICT_MERGE
  if (in.op == Opcode::MAP_ADD) {
    VarRef value = pop(), key = pop();
    dict_set(ctx_, top(in.arg), key, value);
    return nullptr;
  }
  VarRef update = pop();
  VarRef d = top(in.arg);
  if (!update->is(Var::Kind::Dict)) unsupported("updating a dict with " + update->describe() + " is not supported");
  const std::vector<VarRef>& keys = update->get<Var::Dict>().keys;
  for (size_t i = 0; i < keys.size(); i++) {
    if (in.op == Opcode::DICT_MERGE && dict_find(d, keys[i]) >= 0)
      unsupported("got multiple values for keyword argument " + keys[i]->describe());
    dict_set(ctx_, d, keys[i], dict_value(ctx_, update, i));
  }
  return nullptr;
}

VarRef FrameInterpreter::op_unpack(const Instruction& in) {  // UNPACK_SEQUENCE
  std::vector<VarRef> items = unpack(pop(), in.arg);
  for (auto r = items.rbegin(); r != items.rend(); ++r) push(*r);
  return nullptr;
}

VarRef FrameInterpreter::op_subscript(const Instruction& in) {  // BINARY_SUBSCR, BINARY_SLICE
  if (in.op == Opcode::BINARY_SUBSCR) {
    VarRef index = pop(), obj = pop();
    push(subscript(obj, index));
    return nullptr;
  }
  VarRef stop = pop(), start = pop(), obj = pop();
  if (VarRef s = sym_slice(ctx_, {start, stop})) {  // a dynamic size as a bound: kept symbolic
    push(subscript(obj, s));
    return nullptr;
  }
  stop = specialize(ctx_, stop), start = specialize(ctx_, start);
  if (!is_constant(start) || !is_constant(stop)) unsupported("a slice bound that is not a Python constant");
  VarRef s = make_constant(checked(PySlice_New(start->obj, stop->obj, nullptr), "slice"));
  push(subscript(obj, s));
  return nullptr;
}

VarRef FrameInterpreter::op_store_subscript(const Instruction&) {
  VarRef index = pop(), obj = pop(), value = pop();
  if (obj->is(Var::Kind::Dict)) {
    dict_set(ctx_, obj, specialize(ctx_, index), value);
    return nullptr;
  }
  VarRef i_var = obj->is(Var::Kind::List) && made_in_trace(obj) ? specialize(ctx_, index) : nullptr;
  if (!i_var || !is_constant(i_var) || !PyLong_Check(i_var->obj))
    unsupported("storing into " + obj->describe() + "[...] is not supported by mini's capture");
  std::vector<VarRef>& items = obj->get<Var::List>().items;
  Py_ssize_t i = PyLong_AsSsize_t(i_var->obj), n = (Py_ssize_t)items.size();
  if (i < 0) i += n;
  if (i < 0 || i >= n) unsupported("list assignment index out of range");
  items[i] = value;
  ctx_.mutations++;
  return nullptr;
}

VarRef FrameInterpreter::op_delete_subscript(const Instruction&) {
  VarRef index = pop(), obj = pop();
  int i = obj->is(Var::Kind::Dict) && made_in_trace(obj) ? dict_find(obj, index) : -1;
  if (i < 0) unsupported("deleting " + obj->describe() + "[" + index->describe() + "] is not supported by mini's capture");
  Var::Dict& dict = obj->get<Var::Dict>();
  dict.keys.erase(dict.keys.begin() + i);
  dict.values.erase(dict.values.begin() + i);
  ctx_.mutations++;
  return nullptr;
}

VarRef FrameInterpreter::op_iter(const Instruction& in) {  // GET_ITER, FOR_ITER, END_FOR
  const BytecodeDialect& dialect = bytecode_dialect();
  if (in.op == Opcode::GET_ITER) {
    push(iterate(pop()));
  } else if (in.op == Opcode::END_FOR) {
    pop();
    if (dialect.python_minor == 12) pop();
  } else {
    Var::Iterator* it = top()->as<Var::Iterator>();
    if (!it)  // a real iterator from the caller: CPython steps it
      unsupported("a for loop over " + top()->describe() + ", an iterator capture cannot see into");
    if (it->position < it->items.size()) {
      push(it->items[it->position++]);
    } else {
      pop();
      jump(in.jump_target + dialect.for_iter_exit_skip);
    }
  }
  return nullptr;
}

}  // namespace mini::capture
