// test_guards.cpp — the guards of mini/guards on real Python objects, without capture: each test
// builds a GuardSet the way capture would (adders given the value found at a Source now), then
// checks it against frames whose values changed, and reads the sentence a miss prints. The
// tensor guard (TENSOR_MATCH) is assignment A5's and is tested from Python (tests/python).
#include <Python.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "guards/guards.h"
#include "guards/source.h"

using namespace mini::guards;

namespace {

// A new reference, released at the end of the test.
struct Obj {
  PyObject* o;
  explicit Obj(PyObject* o) : o(o) { REQUIRE(o != nullptr); }
  Obj(const Obj&) = delete;
  ~Obj() { Py_XDECREF(o); }
  operator PyObject*() const { return o; }
};

// The value of a Python expression (evaluated with builtins only).
PyObject* eval(const char* expr) {
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* v = PyRun_String(expr, Py_eval_input, globals, globals);
  Py_DECREF(globals);
  if (!v) PyErr_Print();
  return v;
}

// A frame of `locals` (Borrowed) and `globals`.
FrameValues frame(const std::vector<PyObject*>& locals, PyObject* globals = nullptr) {
  FrameValues f;
  f.locals = locals.data();
  f.nlocals = (int)locals.size();
  f.globals = globals;
  f.builtins = PyEval_GetBuiltins();
  return f;
}

}  // namespace

TEST_CASE("sources print the way Dynamo prints them", "[guards]") {
  SourceRef x = Source::local(0, "x"), self = Source::local(1, "self");
  CHECK(x->str() == "L['x']");
  CHECK(Source::global("SCALE")->str() == "G['SCALE']");
  CHECK(Source::attr(self, "weight")->str() == "L['self'].weight");
  CHECK(Source::item(Source::local(2, "xs"), 0)->str() == "L['xs'][0]");
  CHECK(Source::dict_item(Source::attr(self, "_modules"), "h")->str() == "L['self']._modules['h']");
}

TEST_CASE("fetch reads a chain of sources, and a missing value without an error", "[guards]") {
  Obj xs(eval("[10, (20, 30)]")), d(eval("{'k': 7}"));
  std::vector<PyObject*> locals = {xs, d, nullptr};
  FrameValues f = frame(locals);
  Obj inner(fetch(*Source::item(Source::item(Source::local(0, "xs"), 1), 0), f));
  CHECK(PyLong_AsLong(inner) == 20);
  Obj k(fetch(*Source::dict_item(Source::local(1, "d"), "k"), f));
  CHECK(PyLong_AsLong(k) == 7);
  CHECK(fetch(*Source::local(2, "unbound"), f) == nullptr);
  CHECK(fetch(*Source::item(Source::local(0, "xs"), 5), f) == nullptr);  // past the end
  CHECK(fetch(*Source::dict_item(Source::local(1, "d"), "absent"), f) == nullptr);
  CHECK_FALSE(PyErr_Occurred());
}

TEST_CASE("a constant guard holds for an equal value of the same type only", "[guards]") {
  Obj two(PyLong_FromLong(2));
  GuardSet g;
  g.add_constant_match(Source::local(0, "n"), two);
  Obj same(PyLong_FromLong(2)), other(PyLong_FromLong(3)), as_float(PyFloat_FromDouble(2.0));
  CHECK(g.check(frame({same})));
  CHECK(g.check_verbose(frame({same})) == "");
  CHECK_FALSE(g.check(frame({other})));
  CHECK(g.check_verbose(frame({other})) == "L['n'] == 2");
  CHECK_FALSE(g.check(frame({as_float})));  // 2.0 == 2 in Python, but another type: a new trace
  CHECK(g.guards().back().fail_count == 2);
}

TEST_CASE("None and booleans are guarded by identity", "[guards]") {
  GuardSet g;
  g.add_constant_match(Source::local(0, "flag"), Py_True);
  g.add_constant_match(Source::local(1, "opt"), Py_None);
  Obj one(PyLong_FromLong(1));
  CHECK(g.check(frame({Py_True, Py_None})));
  CHECK_FALSE(g.check(frame({Py_False, Py_None})));
  CHECK_FALSE(g.check(frame({one, Py_None})));  // 1 == True, but not True
  CHECK_FALSE(g.check(frame({Py_True, one})));
}

TEST_CASE("an identity guard does not match a new object after the old one died", "[guards]") {
  Obj cls(eval("type('Module', (), {})"));
  PyObject* m = PyObject_CallNoArgs(cls);
  REQUIRE(m);
  GuardSet g;
  g.add_id_match(Source::local(0, "m"), m);  // held by a weak reference: m is not kept alive
  CHECK(g.check(frame({m})));
  Obj other(PyObject_CallNoArgs(cls));
  CHECK_FALSE(g.check(frame({other})));
  Py_DECREF(m);  // the guard held a weak reference only: m is gone now
  CHECK_FALSE(g.check(frame({other})));
  CHECK(g.check_verbose(frame({other})).find("the object is gone") != std::string::npos);
}

TEST_CASE("a type guard, a length check and a dict's keys in order", "[guards]") {
  Obj xs(eval("[1, 2, 3]")), d(eval("{'a': 1, 'b': 2}"));
  GuardSet g;
  g.add_type_match(Source::local(0, "xs"), xs);
  g.add_length_check(Source::local(0, "xs"), xs);
  g.add_dict_keys_match(Source::local(1, "d"), d);
  CHECK(g.check(frame({xs, d})));
  Obj longer(eval("[1, 2, 3, 4]")), tuple(eval("(1, 2, 3)")), reordered(eval("{'b': 2, 'a': 1}")),
      new_values(eval("{'a': 5, 'b': 6}"));
  CHECK_FALSE(g.check(frame({longer, d})));
  CHECK_FALSE(g.check(frame({tuple, d})));  // the length matches, the type does not
  CHECK_FALSE(g.check(frame({xs, reordered})));
  CHECK(g.check(frame({xs, new_values})));  // values are not guarded, only the keys
}

TEST_CASE("aliasing: two sources hold one object, or two", "[guards]") {
  Obj a(eval("[0]")), b(eval("[0]"));
  GuardSet g;
  g.add_duplicate_input(Source::local(0, "x"), Source::local(1, "y"), true);
  CHECK(g.check(frame({a, a})));
  CHECK_FALSE(g.check(frame({a, b})));
  GuardSet h;
  h.add_duplicate_input(Source::local(0, "x"), Source::local(1, "y"), false);
  CHECK(h.check(frame({a, b})));
  CHECK_FALSE(h.check(frame({a, a})));
}

TEST_CASE("a branch on a number made dynamic guards the comparison, not the value", "[guards]") {
  Obj half(PyFloat_FromDouble(0.5));
  GuardSet g;
  g.add_number_compare(Source::local(0, "p"), Py_LE, half);  // the trace saw p <= 0.5
  Obj low(PyFloat_FromDouble(0.1)), high(PyFloat_FromDouble(0.9)), nan(PyFloat_FromDouble(NAN)),
      int_low(PyLong_FromLong(0));
  CHECK(g.check(frame({low})));
  CHECK(g.check(frame({int_low})));
  CHECK_FALSE(g.check(frame({high})));
  CHECK_FALSE(g.check(frame({nan})));  // NaN compares false both ways: a miss, never a stale hit
}

TEST_CASE("guards are checked in order until the first failure", "[guards]") {
  Obj one(PyLong_FromLong(1)), two(PyLong_FromLong(2)), nine(PyLong_FromLong(9));
  GuardSet g;
  g.add_constant_match(Source::local(0, "a"), one);
  g.add_constant_match(Source::local(1, "b"), two);
  CHECK(g.check_verbose(frame({nine, nine})) == "L['a'] == 1");  // the first one is named
  CHECK_FALSE(g.check(frame({nine, nine})));  // check() counts the failure on the guard that failed
  CHECK(g.guards()[0].fail_count == 1);
  CHECK(g.guards()[1].fail_count == 0);  // never reached
  CHECK(g.check_verbose(frame({one, nine})) == "L['b'] == 2");
}

TEST_CASE("an attribute chain is guarded through its base, and a missing attribute fails", "[guards]") {
  Obj ns(eval("__import__('types').SimpleNamespace(scale=2, inner=__import__('types').SimpleNamespace(k=3))"));
  SourceRef self = Source::local(0, "self");
  GuardSet g;
  Obj scale(PyObject_GetAttrString(ns, "scale"));
  Obj inner(PyObject_GetAttrString(ns, "inner"));
  Obj k(PyObject_GetAttrString(inner, "k"));
  g.add_constant_match(Source::attr(self, "scale"), scale);
  g.add_constant_match(Source::attr(Source::attr(self, "inner"), "k"), k);
  CHECK(g.check(frame({ns})));
  REQUIRE(PyObject_SetAttrString(inner, "k", Obj(PyLong_FromLong(4))) == 0);
  CHECK(g.check_verbose(frame({ns})) == "L['self'].inner.k == 3");
  REQUIRE(PyObject_DelAttrString(ns, "scale") == 0);
  CHECK_FALSE(g.check(frame({ns})));
  CHECK_FALSE(PyErr_Occurred());
}
