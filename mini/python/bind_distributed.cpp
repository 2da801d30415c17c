// bind_distributed.cpp — mini._C._distributed: the distributed stage (mini/distributed/) as
// mini.distributed (mini/python/mini/distributed/) sees it: the rendezvous store, the process
// groups and their Works, and torch.distributed's exception classes.
//
// Every call that may wait (a store request, a group's setup, Work.wait()) releases the GIL,
// so that other Python threads run meanwhile; none of them touches a Python object.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "distributed/errors.h"
#include "distributed/process_group.h"

namespace py = pybind11;
using mini::Tensor;
using namespace mini::distributed;
using std::chrono::milliseconds;

namespace {

milliseconds as_milliseconds(py::handle timeout) {  // a timedelta, or seconds
  double seconds = py::hasattr(timeout, "total_seconds") ? timeout.attr("total_seconds")().cast<double>()
                                                         : timeout.cast<double>();
  if (!(seconds > 0)) mini::fail_value("timeout must be positive, not ", seconds, " s");
  return milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

std::string as_bytes(py::handle value) {  // torch's store takes str or bytes
  if (py::isinstance<py::bytes>(value)) return value.cast<std::string>();
  return py::str(value).cast<std::string>();
}

// torch.distributed's exception classes: DistError is a RuntimeError, the others DistErrors.
void bind_exceptions(py::module_& d) {
  static PyObject* dist_error = PyErr_NewExceptionWithDoc(
      "mini.distributed.DistError", "An error among the processes of a job (torch's DistError).",
      PyExc_RuntimeError, nullptr);
  static PyObject* backend_error = PyErr_NewExceptionWithDoc(
      "mini.distributed.DistBackendError", "A collective failed in Gloo or NCCL: a timeout, a "
      "rank that exited, ranks that called different collectives.", dist_error, nullptr);
  static PyObject* network_error = PyErr_NewExceptionWithDoc(
      "mini.distributed.DistNetworkError", "A socket could not be opened: MASTER_PORT in use, "
      "rank 0 unreachable.", dist_error, nullptr);
  static PyObject* store_error = PyErr_NewExceptionWithDoc(
      "mini.distributed.DistStoreError", "The rendezvous store: a rank that never joined, rank 0 "
      "gone.", dist_error, nullptr);
  d.attr("DistError") = py::handle(dist_error);
  d.attr("DistBackendError") = py::handle(backend_error);
  d.attr("DistNetworkError") = py::handle(network_error);
  d.attr("DistStoreError") = py::handle(store_error);
  // tried before module.cpp's translator of mini::Error (pybind11 tries the latest first)
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const DistError& e) {
      PyObject* type = e.where == DistError::Where::Store     ? store_error
                       : e.where == DistError::Where::Network ? network_error
                                                              : backend_error;
      PyErr_SetString(type, e.what());
    }
  });
}

void bind_store(py::module_& d) {
  py::class_<TcpStore, std::shared_ptr<TcpStore>>(d, "TCPStore",
      "torch's TCPStore: rank 0 (is_master) hosts it, every rank is its client")
      .def(py::init([](const std::string& host, int port, py::object, bool is_master,
                       py::object timeout) {
             milliseconds ms = as_milliseconds(timeout);
             py::gil_scoped_release release;
             return std::make_shared<TcpStore>(host, port, is_master, ms);
           }),
           py::arg("host_name"), py::arg("port"), py::arg("world_size") = py::none(),
           py::arg("is_master") = false, py::arg("timeout") = 300.0)
      .def_property_readonly("host", &TcpStore::host)
      .def_property_readonly("port", &TcpStore::port)
      .def("set", [](TcpStore& s, const std::string& key, py::handle value) {
        std::string bytes = as_bytes(value);
        py::gil_scoped_release release;
        s.set(key, bytes);
      })
      .def("get", [](TcpStore& s, const std::string& key) {
        std::string value;
        {
          py::gil_scoped_release release;
          value = s.get(key);
        }
        return py::bytes(value);
      })
      .def("add", &TcpStore::add, py::call_guard<py::gil_scoped_release>())
      .def("wait", [](TcpStore& s, const std::vector<std::string>& keys, py::object timeout) {
        milliseconds ms = timeout.is_none() ? s.timeout() : as_milliseconds(timeout);
        std::vector<std::string> missing;
        {
          py::gil_scoped_release release;
          missing = s.wait(keys, ms);
        }
        if (!missing.empty())
          fail_store("timed out after ", seconds_text(ms), " waiting for the store's keys: ",
                     missing[0], missing.size() > 1 ? " and others" : "");
      }, py::arg("keys"), py::arg("timeout") = py::none());
}

void bind_groups(py::module_& d) {
  py::enum_<ReduceOp>(d, "ReduceOp", "torch.distributed.ReduceOp's SUM, AVG and MAX")
      .value("SUM", ReduceOp::Sum)
      .value("AVG", ReduceOp::Avg)
      .value("MAX", ReduceOp::Max);

  py::class_<Work, std::shared_ptr<Work>>(d, "Work", "one collective in flight (async_op=True)")
      .def("wait", [](Work& w, py::object) {
        py::gil_scoped_release release;
        w.wait();
        return true;
      }, py::arg("timeout") = py::none(),
         "returns once the result may be used (CUDA: once mini's stream is ordered after it)")
      .def("is_completed", &Work::is_completed, py::call_guard<py::gil_scoped_release>());

  auto release = py::call_guard<py::gil_scoped_release>();
  py::class_<ProcessGroup, std::shared_ptr<ProcessGroup>>(d, "ProcessGroup")
      .def("rank", &ProcessGroup::rank)
      .def("size", &ProcessGroup::size)
      .def("name", [](const ProcessGroup& g) { return std::string(g.backend()); })
      .def("all_reduce", &ProcessGroup::all_reduce, release)
      .def("broadcast", &ProcessGroup::broadcast, release)
      .def("all_gather_into_tensor", &ProcessGroup::all_gather_into_tensor, release)
      .def("reduce_scatter_tensor", &ProcessGroup::reduce_scatter_tensor, release)
      .def("barrier", &ProcessGroup::barrier, release);

  d.def("new_gloo_group", [](std::shared_ptr<TcpStore> store, const std::string& prefix, int rank,
                             int size, py::object timeout) {
    milliseconds ms = as_milliseconds(timeout);
    py::gil_scoped_release unlocked;
    return make_gloo_group(std::move(store), prefix, rank, size, ms);
  });
  d.def("new_nccl_group", [](std::shared_ptr<TcpStore> store, const std::string& prefix, int rank,
                             int size, py::object timeout) {
    milliseconds ms = as_milliseconds(timeout);
    py::gil_scoped_release unlocked;
    return make_nccl_group(std::move(store), prefix, rank, size, ms);
  });
  d.def("gloo_available", &gloo_available);
  d.def("nccl_available", &nccl_available);
  d.def("nccl_unavailable_reason", &nccl_unavailable_reason);
}

}  // namespace

void bind_distributed(py::module_& m) {
  py::module_ d = m.def_submodule("_distributed", "process groups over Gloo and NCCL");
  bind_exceptions(d);
  bind_store(d);
  bind_groups(d);
}
