// main.cpp — the runner of the C++ tests that need CPython (guards read Python objects): the
// interpreter is embedded, started before the first test and finished after the last.
#define CATCH_CONFIG_RUNNER
#include <Python.h>

#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Py_Initialize();
  int failed = Catch::Session().run(argc, argv);
  Py_Finalize();
  return failed;
}
