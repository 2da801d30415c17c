// automatic_dynamic.cpp — automatic dynamic shapes (unit.h; assignment A7): what a unit's
// compiles saw, and which sizes and numbers a recompile makes symbolic.
#include "capture/unit.h"

namespace mini::capture {

namespace {

// A number's repr, as record_seen keeps it (unused in a student tree where A7 is the stub).
[[maybe_unused]] std::string repr_of(PyObject* o) {
  PyObject* r = PyObject_Repr(o);
  std::string s = r ? PyUnicode_AsUTF8(r) : "?";
  Py_XDECREF(r);
  PyErr_Clear();
  return s;
}

}  // namespace

bool reads_a_global(const guards::Source& src) {
  for (const guards::Source* s = &src; s; s = s->base.get())
    if (s->as<guards::Source::Global>() || s->as<guards::Source::GlobalIn>()) return true;
  return false;
}

// ---- automatic dynamic shapes (A7) -----------------------------------------------------------
// torch's automatic_dynamic_shapes (kept per code in pgo.py's CodeState): a unit is first
// compiled with every size and number a constant; when a call misses because one of them
// changed, the recompile makes exactly what changed symbolic (a size: a symbol s0 >= 2; an int
// or float: a graph input), so that the next change is a cache hit (torch 2.11: one recompile,
// then never again for that change). Two functions of the course kit's assignment A7
// (notes/assignments/A7.md) keep the unit's record: record_seen after each compile,
// automatic_dynamic_on_recompile before a recompile. compile_unit hands the unit's
// dynamic_dims and dynamic_scalars to the tracer (DynamicPolicy), which makes those symbolic.

// record_seen: after a compile, what it saw, for later calls to be compared with.
//   in:  the unit; the frame's values of the call just compiled; the compile's guards. Each
//        guard with a source (g.source >= 0; gs.sources()[g.source], keyed by its printed form
//        src->str(), e.g. "L['x']") may be a TensorMatch (g.as<guards::TensorMatch>()) or an
//        EqualsMatch on a constant (g.as<guards::EqualsMatch>()->constant).
//   out: unit.seen[key] = {source, true, the tensor's sizes now, ""} for each tensor source
//        (the value from guards::fetch(*src, fv), a New reference or null, unwrapped with
//        guards::unwrap_tensor); {source, false, {}, repr_of(constant)} for each source
//        guarded equal to an exact Python int or float (PyLong_CheckExact/PyFloat_CheckExact:
//        a bool is neither, so bools stay specialized) that is not read through a global
//        (reads_a_global: those stay specialized, whatever changes).
//   guarantees: the first record of a source stays: a later compile does not overwrite a
//        record of the same kind (tensor or number), so that changes are measured from the
//        first call; no reference is leaked.
void record_seen(guards::UnitCache& unit, const guards::FrameValues& fv, const guards::GuardSet& gs) {
  // A7 BEGIN: automatic dynamic shapes
  MINI_KIT_STUB(A7);
  for (const guards::Guard& g : gs.guards()) {
    if (g.source < 0) continue;
    const SourceRef& src = gs.sources()[g.source];
    std::string key = src->str();
    bool tensor = g.as<guards::TensorMatch>() != nullptr;
    const guards::EqualsMatch* constant = g.as<guards::EqualsMatch>();
    auto old = unit.seen.find(key);
    if (old != unit.seen.end() && old->second.tensor == tensor) continue;  // first sighting of this kind wins
    if (tensor) {
      PyObject* o = guards::fetch(*src, fv);
      if (TensorImpl* t = o ? guards::unwrap_tensor(o) : nullptr) unit.seen[key] = {src, true, t->sizes, ""};
      Py_XDECREF(o);
    } else if (constant && (PyFloat_CheckExact(constant->constant) || PyLong_CheckExact(constant->constant)) &&
               !reads_a_global(*src)) {
      unit.seen[key] = {src, false, {}, repr_of(constant->constant)};
    }
  }
  // A7 END
}

// automatic_dynamic_on_recompile: before a recompile, what turns symbolic.
//   when: a call missed every entry and recompiles (a non-empty recompile reason), with
//        mini.config.automatic_dynamic_shapes on and mini.compile's dynamic not False (the
//        caller checks both).
//   in:  the unit, with unit.seen as record_seen left it; the frame's values of this call.
//   out: for each seen source whose value now (guards::fetch: New reference or null; skip
//        null) is
//        - a tensor of another rank: every dim of it dynamic (unit.dynamic_dims[key] =
//          new-rank trues), and seen.sizes becomes the new sizes;
//        - a tensor of the same rank: dim d dynamic (unit.dynamic_dims[key][d] = true, the
//          vector sized to the rank, false elsewhere) where its size differs from seen.sizes[d];
//        - an exact int or float whose repr_of differs from seen.scalar:
//          unit.dynamic_scalars[key] = true.
//        Under MINI_LOGS=dynamic (log_channels().dynamic) each decision that is new is logged
//        once, through log_write, in exactly these words:
//          "automatic dynamic: L['x'] changed rank 1 -> 2, recompiling with every dim symbolic"
//          "automatic dynamic: L['x'].size()[0] changed 32 -> 64, recompiling with that dim symbolic"
//          "automatic dynamic: L['lr'] changed 0.1 -> 0.01, recompiling with it as a graph input"
//   guarantees: only what changed turns dynamic (an unchanged dim stays static, a bool never
//        turns); nothing turns back (a dim or number once dynamic stays dynamic); a dim
//        already dynamic is not logged again; no reference is leaked.
void automatic_dynamic_on_recompile(guards::UnitCache& unit, const guards::FrameValues& fv) {
  // A7 BEGIN: automatic dynamic shapes
  MINI_KIT_STUB(A7);
  for (auto& [key, seen] : unit.seen) {
    PyObject* o = guards::fetch(*seen.source, fv);
    if (!o) continue;
    if (seen.tensor) {
      TensorImpl* t = guards::unwrap_tensor(o);
      if (t) {
        auto& dyn = unit.dynamic_dims[key];
        bool rank_changed = t->sizes.size() != seen.sizes.size();
        if (rank_changed) {  // as torch: a change of rank makes every dim dynamic
          if (log_channels().dynamic)
            log_write("automatic dynamic: " + key + " changed rank " + std::to_string(seen.sizes.size()) +
                      " -> " + std::to_string(t->sizes.size()) + ", recompiling with every dim symbolic");
          dyn.assign(t->sizes.size(), true);
          seen.sizes = t->sizes;
          Py_DECREF(o);
          continue;
        }
        dyn.resize(seen.sizes.size(), false);
        for (size_t d = 0; d < seen.sizes.size(); d++) {
          bool changed = t->sizes[d] != seen.sizes[d];
          if (changed && !dyn[d] && log_channels().dynamic)
            log_write("automatic dynamic: " + key + ".size()[" + std::to_string(d) + "] changed " +
                      std::to_string(seen.sizes[d]) + " -> " + std::to_string(t->sizes[d]) +
                      ", recompiling with that dim symbolic");
          dyn[d] = dyn[d] || changed;
        }
      }
    } else if ((PyFloat_CheckExact(o) || PyLong_CheckExact(o)) && repr_of(o) != seen.scalar) {
      if (!unit.dynamic_scalars[key] && log_channels().dynamic)
        log_write("automatic dynamic: " + key + " changed " + seen.scalar + " -> " + repr_of(o) +
                  ", recompiling with it as a graph input");
      unit.dynamic_scalars[key] = true;
    }
    Py_DECREF(o);
  }
  // A7 END
}

// While A7 (automatic dynamic shapes) is a stub, recompiles stay static, as with
// mini.config.automatic_dynamic_shapes = False. True to go on; false with a Python error set.
static bool static_instead(const std::exception& e) {
  if (!is_assignment_stub(e)) {
    python_error(e);
    return false;
  }
  return guards::warn_stub_fallback(e, "recompiles stay static: no size or number becomes symbolic, "
                                       "as with mini.config.automatic_dynamic_shapes = False");
}

bool decide_dynamic(guards::UnitCache& unit, const guards::FrameValues& fv,
                    const CompileRequest* req) {
  if (!compile_config().automatic_dynamic_shapes || req->dynamic == 0) return true;
  try {
    automatic_dynamic_on_recompile(unit, fv);
    return true;
  } catch (const std::exception& e) {
    return static_instead(e);
  }
}

bool remember_seen(guards::UnitCache& unit, const guards::FrameValues& fv,
                   const guards::GuardSet& gs) {
  try {
    record_seen(unit, fv, gs);
    return true;
  } catch (const std::exception& e) {
    return static_instead(e);
  }
}

}  // namespace mini::capture
