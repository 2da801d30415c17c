// grad_mode.cpp — gradient recording switched on and off inside captured code (Dynamo's
// GradModeVariable): `with mini.no_grad():` and `enable_grad()` blocks, set_grad_enabled()
// calls and functions decorated with @mini.no_grad().
//
// The global grad mode is program state the graph does not touch. While tracing, the mode
// lives in TraceContext::grad_enabled; each op records the mode it was traced in
// (graph::GradMode), so the graph runs it that way and AOT autograd sends no gradient
// through an op traced with grad off. After a unit's graph runs, the compiler sets the mode
// the traced code left (Trace::grad_enabled_after), as running the code would have.
//
// The objects mini.no_grad() & co. return are real Python objects (mini._grad_mode._GradMode)
// whose state is plain attributes: enabled, set_on_enter (false for set_grad_enabled(),
// which sets the mode at the call) and prev (the mode the block's end restores). Capture
// makes fresh ones and never changes an object the program can see, so a graph break inside
// a block rebuilds the block's __exit__ as a real bound method, which CPython (or the next
// unit) calls.
#include "capture/trace_context.h"

namespace mini::capture {

namespace {

bool bool_attr(TraceContext& ctx, const VarRef& obj, const char* name) {
  VarRef v = get_attr(ctx, obj, name);  // guarded when the object came from the frame
  if (!v->is(Var::Kind::Constant) || !PyBool_Check(v->obj))
    unsupported(std::string("a grad-mode object whose ") + name + " is " + v->describe());
  return v->obj == Py_True;
}

// A fresh grad-mode object, made and set up by capture (no program state changes).
VarRef make_grad_mode(bool enabled, bool set_on_enter, bool prev) {
  PyObject* type = python_bridge().grad_mode_type;
  PyObject* flag = enabled ? Py_True : Py_False;
  PyObject* obj = type ? PyObject_CallFunctionObjArgs(type, flag, nullptr) : nullptr;
  if (obj && (PyObject_SetAttrString(obj, "set_on_enter", set_on_enter ? Py_True : Py_False) < 0 ||
              PyObject_SetAttrString(obj, "prev", prev ? Py_True : Py_False) < 0))
    Py_CLEAR(obj);
  if (!obj) {
    PyErr_Clear();
    unsupported("internal: cannot make a grad-mode object");
  }
  auto v = std::make_shared<Var>(Var::Object{});
  v->obj = obj;
  return v;
}

}  // namespace

bool is_grad_mode(const VarRef& v) {
  PyObject* type = python_bridge().grad_mode_type;
  return type && v->is(Var::Kind::Object) && v->obj && PyObject_TypeCheck(v->obj, (PyTypeObject*)type);
}

bool is_grad_mode_exit(const VarRef& v) {
  const Var::Method* m = v->as<Var::Method>();
  return m && m->name == "__exit__" && is_grad_mode(m->self);
}

VarRef call_grad_mode_function(TraceContext& ctx, const std::string& name,
                               const std::vector<VarRef>& args, const Kwargs& kwargs) {
  if (name == "is_grad_enabled" && args.empty() && kwargs.empty())
    return make_constant(PyBool_FromLong(ctx.grad_enabled));
  if ((name == "no_grad" || name == "enable_grad") && args.empty() && kwargs.empty())
    return make_grad_mode(name == "enable_grad", true, false);
  if (name == "set_grad_enabled" && args.size() == 1 && kwargs.empty()) {
    VarRef mode = specialize(ctx, args[0]);
    if (!mode->is(Var::Kind::Constant))
      unsupported("set_grad_enabled(" + mode->describe() + "): the mode must be known while tracing");
    int on = PyObject_IsTrue(mode->obj);
    if (on < 0) {
      PyErr_Clear();
      unsupported("set_grad_enabled(" + mode->describe() + ")");
    }
    VarRef v = make_grad_mode(on, false, ctx.grad_enabled);
    ctx.grad_enabled = on;  // at once: a with block around it only restores the mode
    return v;
  }
  for (const char* known : {"no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"})
    if (name == known)
      unsupported("mini." + name + "() with these arguments (mini.no_grad(fn) as a decorator call, "
                  "say) is not supported by mini's capture");
  return nullptr;
}

VarRef enter_grad_mode(TraceContext& ctx, const VarRef& mode) {
  bool enabled = bool_attr(ctx, mode, "enabled");
  bool prev;
  if (bool_attr(ctx, mode, "set_on_enter")) {
    prev = ctx.grad_enabled;
    ctx.grad_enabled = enabled;
  } else {
    prev = bool_attr(ctx, mode, "prev");  // set_grad_enabled() changed the mode already
  }
  return make_method(make_grad_mode(enabled, false, prev), "__exit__");
}

bool exit_grad_mode(TraceContext& ctx, const VarRef& exit, bool apply) {
  bool prev = bool_attr(ctx, exit->get<Var::Method>().self, "prev");
  if (apply) ctx.grad_enabled = prev;
  return prev;
}

VarRef call_grad_mode_wrapper(TraceContext& ctx, const VarRef& fn, std::vector<VarRef> args,
                              Kwargs kwargs) {
  PyObject* code = python_bridge().grad_mode_wrapper_code;
  bool wrapper = code && fn->obj && PyFunction_Check(fn->obj) && PyFunction_GET_CODE(fn->obj) == code;
  if (!wrapper) return nullptr;
  bool enabled = bool_attr(ctx, fn, "_mini_grad_mode");
  VarRef wrapped = get_attr(ctx, fn, "__wrapped__");
  bool saved = ctx.grad_enabled;
  ctx.grad_enabled = enabled;
  VarRef result = call_var(ctx, wrapped, std::move(args), std::move(kwargs));
  ctx.grad_enabled = saved;
  return result;
}

}  // namespace mini::capture
