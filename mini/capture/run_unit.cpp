// run_unit.cpp — running one unit's artifact on a frame's values (unit.h): the graph (the
// backend's callable, inductor's code, or the interpreter), the write-back of inputs it wrote
// in place, the side effects the trace recorded, and the frame rebuilt after it.
#include <optional>

#include "capture/frame_hook.h"
#include "capture/unit.h"
#include "tensor/autograd.h"

namespace mini::capture {

// Replays the trace's side effects: each value was built (with the outputs) before any
// store, so a store never changes what another value is read from. Steals `values`.
bool replay_side_effects(const Artifact& a, const guards::FrameValues& fv, std::vector<PyObject*>& values) {
  bool ok = true;
  for (size_t i = 0; i < a.side_effects.size(); i++) {
    const SideEffect& e = a.side_effects[i];
    PyObject* v = values[i];
    PyObject* target = !ok ? nullptr : e.target ? guards::fetch(*e.target, fv) : (Py_INCREF(fv.globals), fv.globals);
    if (ok && !target) {
      PyErr_Format(PyExc_RuntimeError, "mini: cannot read %s again to replay a store into it",
                   e.target ? e.target->str().c_str() : "the globals");
      ok = false;
    } else if (ok) {
      int r = e.kind == SideEffect::Kind::Cell ? (PyCell_Check(target) ? PyCell_Set(target, v) : -1)
              : e.kind == SideEffect::Kind::Global ? PyDict_SetItemString(target, e.name.c_str(), v)
              : e.kind == SideEffect::Kind::Item ? PyDict_SetItemString(target, e.name.c_str(), v)
              : e.kind == SideEffect::Kind::Contents ? PySequence_SetSlice(target, 0, PY_SSIZE_T_MAX, v)
              : PyObject_SetAttrString(target, e.name.c_str(), v);
      if (r < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "mini: a closure store without its cell");
      ok = r == 0;
    }
    Py_XDECREF(target);
    Py_XDECREF(v);
  }
  values.clear();
  return ok;
}

namespace {

// The graph's inputs read from the frame's values (New references, appended to `inputs`), a
// dynamic Python number as the 0-d tensor the graph takes. False with a Python error, and
// `inputs` released, on failure.
bool fetch_graph_inputs(const Artifact& a, const guards::FrameValues& fv, std::vector<PyObject*>& inputs) {
  for (size_t i = 0; i < a.input_sources.size(); i++) {
    PyObject* o = guards::fetch(*a.input_sources[i], fv);
    if (!o) {
      release_all(inputs);
      PyErr_Format(PyExc_RuntimeError, "mini: graph input %s disappeared", a.input_sources[i]->str().c_str());
      return false;
    }
    if (i < a.scalar_inputs.size() && a.scalar_inputs[i]) {  // a dynamic Python number
      Tensor number;
      try {
        number = wrapped_number_tensor(o);
      } catch (const std::exception& e) {  // an int past int64: eager's error
        Py_DECREF(o);
        release_all(inputs);
        set_python_error(e);
        return false;
      }
      Py_DECREF(o);
      o = python_bridge().wrap_tensor(number);
    }
    inputs.push_back(o);
  }
  return true;
}

// An input the graph writes, when autograd records this run: the graph gets a copy that
// takes over the input's history, so that what autograd saves of its old value survives the
// write-back (eager's in-place ops save a copy of the old value the same way).
void copy_written_inputs(const Artifact& a, std::vector<PyObject*>& inputs) {
  bool records = grad_enabled();
  bool any_grad = false;
  for (PyObject* o : inputs)
    if (TensorImpl* t = guards::unwrap_tensor(o)) any_grad = any_grad || t->needs_grad();
  for (const auto& [input, output] : a.input_mutations) {
    if (!records || !any_grad) break;
    Tensor x = guards::unwrap_tensor(inputs[input])->shared_from_this();
    Tensor old;
    {
      NoGradGuard no_grad;
      old = clone(x);
    }
    old->grad_fn = x->grad_fn;
    old->output_nr = x->output_nr;
    old->requires_grad = x->requires_grad;
    Py_DECREF(inputs[input]);
    inputs[input] = python_bridge().wrap_tensor(old);
  }
}

// The graph run by inductor's code or, without it, the interpreter. Releases `inputs`.
bool run_builtin_graph(const Artifact& a, std::vector<PyObject*>& inputs, std::vector<PyObject*>* outs) {
  std::vector<Tensor> tensors;
  for (PyObject* o : inputs) tensors.push_back(guards::unwrap_tensor(o)->shared_from_this());
  std::vector<Tensor> values;
  try {
    values = a.compiled ? a.compiled(tensors) : graph::run_graph(*a.graph, tensors);
  } catch (const std::exception& e) {
    release_all(inputs);
    set_python_error(e);
    return false;
  }
  for (auto& t : values) outs->push_back(python_bridge().wrap_tensor(t));
  release_all(inputs);
  return true;
}

// What the backend's callable returned, checked to be one tensor per graph output (as the
// GraphModule's forward returns them), appended to `outs`. Steals `r`.
bool backend_outputs(const Artifact& a, PyObject* r, std::vector<PyObject*>* outs) {
  // A list or tuple of tensors, one per graph output (a str is a sequence too: not this)
  PyObject* seq = PyList_Check(r) || PyTuple_Check(r) ? PySequence_Fast(r, "") : nullptr;
  std::string returned = Py_TYPE(r)->tp_name;
  Py_DECREF(r);
  if (!seq) {
    PyErr_Format(PyExc_TypeError, "mini: the compiled function from %s returned a value of type "
                 "%s: it must return a list or tuple of tensors, one per graph output, as the "
                 "GraphModule's forward does",
                 a.backend_label.c_str(), returned.c_str());
    return false;
  }
  if ((size_t)PySequence_Fast_GET_SIZE(seq) != a.graph->outputs.size()) {
    PyErr_Format(PyExc_RuntimeError, "mini: the compiled function from %s returned %zd outputs, "
                 "the graph has %zu: it must return one tensor per graph output, as the "
                 "GraphModule's forward does",
                 a.backend_label.c_str(), PySequence_Fast_GET_SIZE(seq), a.graph->outputs.size());
    Py_DECREF(seq);
    return false;
  }
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject* o = PySequence_Fast_GET_ITEM(seq, i);
    if (!guards::unwrap_tensor(o)) {
      PyErr_Format(PyExc_TypeError, "mini: the compiled function from %s returned a value of "
                   "type %s as output %zd: it must return tensors only, one per graph output, as "
                   "the GraphModule's forward does",
                   a.backend_label.c_str(), Py_TYPE(o)->tp_name, i);
      Py_DECREF(seq);
      return false;
    }
    Py_INCREF(o);
    outs->push_back(o);
  }
  Py_DECREF(seq);
  return true;
}

// The graph run by the user's backend: its callable on the inputs (stolen).
bool call_backend_fn(const Artifact& a, std::vector<PyObject*>& inputs, std::vector<PyObject*>* outs) {
  PyObject* args = PyTuple_New((Py_ssize_t)inputs.size());
  for (size_t i = 0; i < inputs.size(); i++) PyTuple_SET_ITEM(args, i, inputs[i]);
  inputs.clear();
  PyObject* r = PyObject_Call(a.compiled_fn, args, nullptr);
  Py_DECREF(args);
  if (!r) return false;
  return backend_outputs(a, r, outs);
}

}  // namespace

// Runs a unit's graph on the frame's values: the graph's outputs as Python objects (New
// references, appended to `outs`). False with a Python error on failure.
bool run_graph_of(const Artifact& a, const guards::FrameValues& fv, std::vector<PyObject*>* outs) {
  std::vector<PyObject*> inputs;
  if (!fetch_graph_inputs(a, fv, inputs)) return false;
  copy_written_inputs(a, inputs);
  return a.compiled_fn ? call_backend_fn(a, inputs, outs) : run_builtin_graph(a, inputs, outs);
}

// True when an input the unit writes in place shares memory with another input on this call
// (torch guards this with NO_TENSOR_ALIASING): the unit then runs eagerly instead. (Two
// sources that held one tensor while tracing are guarded by DUPLICATE_INPUT.)
bool aliasing_changed(const Artifact& a, const guards::FrameValues& fv) {
  if (a.input_mutations.empty()) return false;
  std::vector<PyObject*> objects;
  for (size_t i = 0; i < a.input_sources.size(); i++) {
    bool number = i < a.scalar_inputs.size() && a.scalar_inputs[i];
    objects.push_back(number ? nullptr : guards::fetch(*a.input_sources[i], fv));
  }
  PyErr_Clear();
  auto storage = [&](int i) {
    TensorImpl* t = objects[i] ? guards::unwrap_tensor(objects[i]) : nullptr;
    return t ? t->storage.get() : nullptr;
  };
  bool changed = false;
  for (const auto& [input, output] : a.input_mutations)
    for (int j = 0; j < (int)objects.size(); j++)
      changed = changed || (j != input && storage(j) && storage(j) == storage(input));
  for (PyObject* o : objects) Py_XDECREF(o);
  return changed;
}

// Copies the final value of each graph input the unit wrote in place into the input's own
// memory, as AOTAutograd's epilogue does: one copy_, so the input's version moves on once
// and, when grad mode is on, autograd records the write. False with a Python error.
bool write_back_inputs(const Artifact& a, const guards::FrameValues& fv,
                       const std::vector<PyObject*>& outs) {
  for (const auto& [input, output] : a.input_mutations) {
    PyObject* o = guards::fetch(*a.input_sources[input], fv);
    TensorImpl* dst = o ? guards::unwrap_tensor(o) : nullptr;
    TensorImpl* src = guards::unwrap_tensor(outs.at(output));
    if (!dst || !src) {
      Py_XDECREF(o);
      PyErr_Format(PyExc_RuntimeError, "mini: cannot write back the graph input %s",
                   a.input_sources[input]->str().c_str());
      return false;
    }
    try {
      copy_(dst->shared_from_this(), src->shared_from_this());
    } catch (const std::exception& e) {
      Py_DECREF(o);
      set_python_error(e);
      return false;
    }
    Py_DECREF(o);
  }
  return true;
}

// True (after logging why) when the unit's inputs alias differently from the traced call's:
// the unit then runs eagerly (torch's NO_TENSOR_ALIASING guard).
bool inputs_alias_differently(const Artifact& art, const guards::FrameValues& fv,
                              PyCodeObject* code) {
  bool aliased;
  {
    HookDisabled no_hook;
    aliased = aliasing_changed(art, fv);
  }
  if (aliased && log_channels().graph_breaks)
    log_write("mini: the inputs of " + function_label(code) + " alias differently from the "
              "traced call's (one tensor passed twice, or memory shared with a tensor the graph "
              "writes); it runs eagerly from here");
  return aliased;
}

// Runs one unit's artifact on the frame's values: its graph, the write-back of the inputs it
// wrote in place, the side effects the trace recorded and the grad mode the unit's code
// left. Then rebuilds what follows the unit: the return value (*result, New) or, at a break,
// the frame's new locals and stack, which replace `locals` and `stack` (the old references
// are released). False with a Python error set, and nothing replaced.
bool run_unit(const Artifact& art, const guards::FrameValues& fv, std::vector<PyObject*>& locals,
              std::vector<PyObject*>& stack, PyObject** result) {
  std::vector<PyObject*> outs;
  bool failed = false;
  PyObject* returned = nullptr;
  std::vector<PyObject*> new_locals, new_stack, effects, made;
  {
    HookDisabled no_hook;
    std::optional<StageTimer> first_run;
    if (!art.ran) first_run.emplace(Stage::FirstRun), art.ran = true;
    if (!run_graph_of(art, fv, &outs)) return release_all(outs), false;
    first_run.reset();
    if (!write_back_inputs(art, fv, outs)) return release_all(outs), false;
    if (art.exit == Trace::Exit::Return) {
      returned = build(art.output, outs, fv, &failed, made);
    } else {
      for (auto& s : art.exit_stack) new_stack.push_back(build(s, outs, fv, &failed, made));
      for (auto& s : art.exit_locals) new_locals.push_back(build(s, outs, fv, &failed, made));
    }
    for (auto& e : art.side_effects)
      effects.push_back(failed ? nullptr : build(e.value, outs, fv, &failed, made));
    release_all(outs);
    release_all(made);
    if (!failed && !replay_side_effects(art, fv, effects)) failed = true;
    release_all(effects);
  }
  if (failed) {
    Py_XDECREF(returned);
    release_all(new_locals);
    release_all(new_stack);
    return false;
  }
  // The grad mode the unit's code left (a with mini.no_grad() block open at the break): the
  // graph ran its ops in their modes without touching the global one.
  if (grad_enabled() != art.grad_enabled_after) set_grad_enabled(art.grad_enabled_after);
  if (art.exit == Trace::Exit::Return) {
    *result = returned;
    return true;
  }
  release_all(locals);
  release_all(stack);
  locals = std::move(new_locals);
  stack = std::move(new_stack);
  return true;
}

}  // namespace mini::capture
