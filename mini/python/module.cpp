// module.cpp — the `mini._C` extension: the C++ stages as seen from Python.
// The tensor bindings live in bind_tensor.cpp; this file holds the module entry point, the
// translation of mini::Error to the Python exception torch would raise, and the counters.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tensor/errors.h"
#include "tensor/metrics.h"
#include "tensor/op.h"

namespace py = pybind11;

void bind_tensor(py::module_& m);
void bind_compile(py::module_& m);
void bind_inductor(py::module_& m);
void bind_distributed(py::module_& m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "mini's C++ core: tensors, eager kernels and autograd";

  // mini.OutOfMemoryError: a RuntimeError, as torch.OutOfMemoryError (torch.cuda's too).
  static PyObject* oom_error =
      PyErr_NewExceptionWithDoc("mini.OutOfMemoryError",
                                "A CUDA allocation failed after the caching allocator freed its "
                                "cached blocks and retried.", PyExc_RuntimeError, nullptr);
  m.attr("OutOfMemoryError") = py::handle(oom_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const mini::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      if (e.kind == mini::Error::Kind::Interrupted && PyErr_Occurred()) return;  // the handler's exception stands
      switch (e.kind) {
        case mini::Error::Kind::Interrupted: type = PyExc_KeyboardInterrupt; break;
        case mini::Error::Kind::Type: type = PyExc_TypeError; break;
        case mini::Error::Kind::Value: type = PyExc_ValueError; break;
        case mini::Error::Kind::Index: type = PyExc_IndexError; break;
        case mini::Error::Kind::OutOfMemory: type = oom_error; break;
        default: break;
      }
      PyErr_SetString(type, e.what());
    }
  });

  m.def("metrics_get", [] {
    const mini::Metrics& s = mini::metrics();
    return py::make_tuple(s.kernel_launches, s.bytes_moved, s.generated_kernel_count);
  }, "(kernel_launches, bytes_moved, generated_kernel_count)");
  m.def("metrics_matmuls", [] {
    py::dict out;
    for (int d = 0; d < mini::kNumDTypes; d++)
      if (int64_t n = mini::metrics().matmuls[d]) out[mini::dtype_name(mini::DType(d))] = n;
    return out;
  }, "{dtype name: matmuls run with operands of that dtype}");
  m.def("metrics_reset", [] { mini::metrics().reset(); });
  m.def("cpu_memory", [] { return std::make_pair(mini::cpu_memory_allocated(), mini::cpu_memory_peak()); });
  m.def("reset_cpu_memory_peak", [] { mini::reset_cpu_memory_peak(); });

  // Every OpKind as (name, class): tests that must cover each op (test_joint_gradients.py)
  // enumerate them here, so that a new op without a case fails them.
  m.def("_op_list", [] {
    std::vector<std::pair<std::string, std::string>> ops;
#define MINI_OP_ENTRY(name, str, cls) ops.emplace_back(str, #cls);
    MINI_OP_LIST(MINI_OP_ENTRY)
#undef MINI_OP_ENTRY
    return ops;
  });

  bind_tensor(m);
  bind_compile(m);
  bind_inductor(m);
  bind_distributed(m);
}
