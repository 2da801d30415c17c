// bind_tensor.cpp — mini.Tensor and the tensor functions, bound with pybind11.
//
// One Python object per TensorImpl: the pybind holder is the same std::shared_ptr the C++
// stages use. Python numbers that meet tensors become 0-d "wrapped number" tensors (they
// promote like torch's). Argument parsing that is easier in Python (factories' varargs,
// dtype objects, repr) lives in mini/__init__.py; what runs per op lives here.
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "capture/convert_frame.h"
#include "guards/guards.h"
#include "tensor/autograd.h"
#include "tensor/cuda/cuda.h"
#include "tensor/ops.h"

namespace py = pybind11;
using mini::DType;
using mini::OpKind;
using mini::Tensor;
using mini::TensorImpl;

namespace {

// A Python number or tensor as a tensor operand; null if `v` is neither.
Tensor as_operand(py::handle v) {
  if (py::isinstance<TensorImpl>(v)) return v.cast<Tensor>();
  if (PyBool_Check(v.ptr()) || PyLong_Check(v.ptr()) || PyFloat_Check(v.ptr()))
    return mini::capture::wrapped_number_tensor(v.ptr());  // the same as compiled code
  return nullptr;
}

std::string type_name(py::handle v) { return py::str(py::type::of(v).attr("__name__")); }

Tensor operand_or_throw(py::handle v, const char* op, const char* arg) {
  Tensor t = as_operand(v);
  if (!t) mini::fail_type(op, "(): argument '", arg, "' must be a Tensor or a number, not ", type_name(v));
  return t;
}

// Binary operator with a tensor or a Python number on the other side. numpy arrays get
// NotImplemented (so numpy's reflected operator runs); anything else is a TypeError.
py::object binop(OpKind k, const Tensor& a, py::handle b, bool reflected, const char* symbol) {
  Tensor t = as_operand(b);
  if (!t) {
    if (py::isinstance<py::array>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    std::string left = reflected ? type_name(b) : "Tensor", right = reflected ? "Tensor" : type_name(b);
    mini::fail_type("unsupported operand type(s) for ", symbol, ": '", left, "' and '", right, "'");
  }
  return py::cast(reflected ? mini::binary(k, t, a) : mini::binary(k, a, t));
}

std::vector<int64_t> dims_arg(py::handle dim) {
  if (dim.is_none()) return {};
  if (PyLong_Check(dim.ptr())) return {dim.cast<int64_t>()};
  return dim.cast<std::vector<int64_t>>();
}

DType dtype_from_code(int code) {
  if (code < 0 || code >= mini::kNumDTypes) mini::fail_type("unknown dtype code ", code);
  return static_cast<DType>(code);
}

// "cpu", "cuda", "cuda:1" -> Device (torch's spelling; Python's mini.device passes str()).
mini::Device parse_device(const std::string& s) {
  if (s == "cpu") return mini::Device::cpu();
  if (s == "cuda") return mini::Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos)
    return mini::Device::cuda(std::stoi(s.substr(5)));
  mini::fail("Expected one of cpu, cuda device type at start of device string: ", s);
}

// ---- indexing: ints, slices, None, Ellipsis (basic indexing; views only) ---------------
Tensor index(const Tensor& t, py::handle idx) {
  std::vector<py::handle> items;
  if (PyTuple_Check(idx.ptr()))
    for (auto h : py::reinterpret_borrow<py::tuple>(idx)) items.push_back(h);
  else
    items.push_back(idx);
  int64_t consuming = 0;
  for (auto h : items) {
    if (PyBool_Check(h.ptr()) || (!PyLong_Check(h.ptr()) && !PySlice_Check(h.ptr()) &&
                                  !h.is_none() && h.ptr() != Py_Ellipsis))
      mini::fail_index("mini supports basic indexing only (ints, slices, None and ...), not ",
                       type_name(h), "; use mini.where or a mask multiply instead");
    if (PyLong_Check(h.ptr()) || PySlice_Check(h.ptr())) consuming++;
  }
  mini::check_index_count(consuming, t->dim());
  Tensor r = t;
  int64_t dim = 0;
  for (auto h : items) {
    if (h.is_none()) {
      r = mini::unsqueeze(r, dim++);
    } else if (h.ptr() == Py_Ellipsis) {
      dim += t->dim() - consuming;
    } else if (PyLong_Check(h.ptr())) {
      r = mini::select(r, dim, h.cast<int64_t>());
    } else {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(h.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      if (step <= 0) mini::fail_value("step must be greater than zero");
      int64_t n = r->sizes[dim];
      PySlice_AdjustIndices(n, &start, &stop, step);
      r = mini::slice(r, dim, start, std::max<Py_ssize_t>(stop, start), step);
      dim++;
    }
  }
  return r;
}

// ---- autograd hooks ---------------------------------------------------------------------
// A Python callable kept by C++ (a hook on a tensor, a queued callback): released under the
// GIL, wherever the last owner lets go of it.
std::shared_ptr<py::object> hold_python(py::object fn) {
  return std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
}

// What register_post_accumulate_grad_hook returns (torch.utils.hooks.RemovableHandle).
struct HookHandle {
  std::weak_ptr<TensorImpl> tensor;
  int id;
  void remove() {
    if (Tensor t = tensor.lock()) mini::remove_post_accumulate_grad_hook(t, id);
  }
};

// ---- numpy ------------------------------------------------------------------------------
py::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::Bool: return py::dtype("bool");
    case DType::Int64: return py::dtype::of<int64_t>();
    case DType::Float32: return py::dtype::of<float>();
    case DType::Float64: return py::dtype::of<double>();
    case DType::BFloat16: mini::fail_type("Got unsupported ScalarType BFloat16");  // numpy has none (torch's error)
  }
  return py::dtype::of<float>();
}

py::array to_numpy(const Tensor& t) {
  if (t->is_cuda())
    mini::fail_type("can't convert ", t->device().str(), " device type tensor to numpy. Use "
                    "Tensor.cpu() to copy the tensor to host memory first.");
  if (t->needs_grad())
    mini::fail("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.");
  std::vector<py::ssize_t> shape(t->sizes.begin(), t->sizes.end()), strides;
  for (int64_t s : t->strides) strides.push_back(s * (py::ssize_t)mini::itemsize(t->dtype));
  auto* keep = new std::shared_ptr<mini::Storage>(t->storage);
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<mini::Storage>*>(p); });
  return py::array(numpy_dtype(t->dtype), shape, strides, t->raw(), base);
}

Tensor from_numpy(py::array arr) {
  py::dtype dt = arr.dtype();
  char kind = dt.kind();
  DType d;
  if (kind == 'f' && dt.itemsize() == 4) d = DType::Float32;
  else if (kind == 'f' && dt.itemsize() == 8) d = DType::Float64;
  else if (kind == 'i' && dt.itemsize() == 8) d = DType::Int64;
  else if (kind == 'b') d = DType::Bool;
  else
    mini::fail_type("can't convert np.ndarray of type ", std::string(py::str(dt)),
                    ". The only supported types are: float32, float64, int64 and bool; "
                    "convert first, e.g. arr.astype(np.float32)");
  int64_t item = dt.itemsize();
  mini::Shape sizes;
  mini::Strides strides;
  int64_t extent = 1;
  for (py::ssize_t i = 0; i < arr.ndim(); i++) {
    if (arr.strides(i) < 0 || arr.strides(i) % item)
      mini::fail_value("At least one stride in the given numpy array is negative or not a "
                       "multiple of the element size; make a copy first (arr.copy())");
    sizes.push_back(arr.shape(i));
    strides.push_back(arr.strides(i) / item);
    extent += (arr.shape(i) - 1) * (arr.strides(i) / item);
  }
  auto* owner = new py::object(arr);
  auto storage = mini::Storage::wrap(arr.mutable_data(), extent * item, [owner](void*) {
    py::gil_scoped_acquire gil;
    delete owner;
  });
  auto t = std::make_shared<TensorImpl>();
  t->storage = storage;
  t->sizes = sizes;
  t->strides = strides;
  t->dtype = d;
  return t;
}

py::object item(const Tensor& t_in) {
  double v = t_in->scalar_value();  // checks numel == 1 (and synchronizes on CUDA)
  Tensor t = t_in->is_cuda() ? mini::to_device(mini::detach(t_in), mini::Device::cpu()) : t_in;
  switch (t->dtype) {
    case DType::Bool: return py::bool_(*t->data<bool>());
    case DType::Int64: return py::int_(*t->data<int64_t>());  // exact, beyond 2^53 too
    default: return py::float_(v);
  }
}

void set_requires_grad(const Tensor& t, bool on) {
  if (!t->is_leaf())
    mini::fail("you can only change requires_grad flags of leaf variables. If you want to use a "
               "computed variable in a subgraph that doesn't require differentiation use "
               "var_no_grad = var.detach().");
  if (on && !mini::is_floating(t->dtype))
    mini::fail("only Tensors of floating point dtype can require gradients (got ",
               mini::dtype_name(t->dtype), ")");
  t->requires_grad = on;
}

}  // namespace

// The guard and capture stages' view of a Python object: the TensorImpl behind a
// mini.Tensor (or a subclass), or nullptr. No Python objects are created.
TensorImpl* unwrap(PyObject* obj) {
  static PyTypeObject* tensor_type = (PyTypeObject*)py::type::of<TensorImpl>().ptr();
  if (!PyObject_TypeCheck(obj, tensor_type)) return nullptr;
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  auto vh = inst->get_value_and_holder(py::detail::get_type_info(typeid(TensorImpl)));
  return vh.value_ptr<TensorImpl>();
}

void bind_tensor(py::module_& m) {
  mini::guards::set_tensor_unwrap(&unwrap);
  py::class_<mini::GradNode, std::shared_ptr<mini::GradNode>>(m, "GradNode")
      .def("name", [](const mini::GradNode& n) { return std::string(n.name()); })
      .def_property_readonly("next_functions", [](const mini::GradNode& n) {
        py::list out;
        for (auto& e : n.next) out.append(e.node ? py::cast(e.node) : py::none());
        return out;
      })
      .def("__repr__", [](const mini::GradNode& n) {
        return "<" + std::string(n.name()) + "Backward>";
      });

  py::class_<HookHandle>(m, "RemovableHandle")
      .def("remove", &HookHandle::remove)
      .def("__enter__", [](HookHandle& h) { return h; })
      .def("__exit__", [](HookHandle& h, py::args) { h.remove(); });
  // torch's Variable._execution_engine.queue_callback (mini/autograd.py)
  m.def("_queue_callback", [](py::function fn) {
    std::shared_ptr<py::object> held = hold_python(std::move(fn));
    mini::queue_callback([held] { (*held)(); });
  });

  auto T = py::class_<TensorImpl, std::shared_ptr<TensorImpl>>(m, "Tensor", py::dynamic_attr());
  T.def(py::init([](const Tensor& other) { return mini::detach(other); }),
        "A new tensor object sharing `other`'s storage (used by nn.Parameter).");

  // ---- geometry -------------------------------------------------------------------------
  T.def_property_readonly("_sizes", [](const TensorImpl& t) {
    py::tuple out(t.sizes.size());
    for (size_t i = 0; i < t.sizes.size(); i++) out[i] = py::int_(t.sizes[i]);
    return out;
  });
  T.def("stride", [](const TensorImpl& t, py::object dim) -> py::object {
    if (dim.is_none()) return py::tuple(py::cast(t.strides));
    return py::int_(t.strides[mini::wrap_dim(dim.cast<int64_t>(), t.dim())]);
  }, py::arg("dim") = py::none());
  T.def("dim", &TensorImpl::dim);
  T.def_property_readonly("ndim", &TensorImpl::dim);
  T.def("numel", &TensorImpl::numel);
  T.def("storage_offset", [](const TensorImpl& t) { return t.offset; });
  T.def("is_contiguous", &TensorImpl::is_contiguous);
  T.def("element_size", [](const TensorImpl& t) { return mini::itemsize(t.dtype); });
  T.def("data_ptr", [](const TensorImpl& t) { return (uintptr_t)t.device_raw(); });
  T.def_property_readonly("_device", [](const TensorImpl& t) { return t.device().str(); });
  // torch's `t.data = other`: t keeps its identity (and autograd flags) and takes other's
  // storage, geometry and dtype. Module.to() moves parameters this way, so an optimizer made
  // before the move still holds them.
  T.def_property("data", [](const Tensor& t) { return mini::detach(t); }, [](const Tensor& t, const Tensor& o) {
    if (!o) mini::fail_type("data must be a Tensor");
    t->storage = o->storage;
    t->sizes = o->sizes;
    t->strides = o->strides;
    t->offset = o->offset;
    t->dtype = o->dtype;
  });
  T.def("_to_device", [](const Tensor& t, const std::string& d) { return mini::to_device(t, parse_device(d)); });
  T.def_property_readonly("_dtype_code", [](const TensorImpl& t) { return (int)t.dtype; });
  T.def("__len__", [](const TensorImpl& t) {
    if (t.dim() == 0) mini::fail_type("len() of a 0-d tensor");
    return t.sizes[0];
  });
  T.def("__hash__", [](const TensorImpl& t) { return (py::ssize_t)(uintptr_t)&t; });

  // ---- autograd ---------------------------------------------------------------------------
  T.def_property("requires_grad", [](const TensorImpl& t) { return t.needs_grad(); },
                 [](const Tensor& t, bool on) { set_requires_grad(t, on); });
  T.def("requires_grad_", [](const Tensor& t, bool on) { set_requires_grad(t, on); return t; },
        py::arg("requires_grad") = true);
  T.def_property("grad", [](const TensorImpl& t) { return t.grad; },
                 [](TensorImpl& t, const Tensor& g) { t.grad = g; });
  T.def_property_readonly("grad_fn", [](const TensorImpl& t) { return t.grad_fn; });
  T.def_property_readonly("is_leaf", &TensorImpl::is_leaf);
  T.def("detach", &mini::detach);
  T.def("detach_", [](const Tensor& t) { t->grad_fn.reset(); t->requires_grad = false; return t; });
  T.def("backward", [](const Tensor& t, py::object gradient, bool retain_graph) {
    Tensor g = gradient.is_none() ? nullptr : operand_or_throw(gradient, "backward", "gradient");
    mini::backward(t, g, retain_graph);
  }, py::arg("gradient") = py::none(), py::arg("retain_graph") = false);
  // torch's hook on a leaf, run with it once backward has accumulated its .grad; returns a
  // RemovableHandle. An exception in the hook stops the backward and reaches its caller.
  T.def("register_post_accumulate_grad_hook", [](const Tensor& t, py::function hook) {
    std::shared_ptr<py::object> fn = hold_python(std::move(hook));
    int id = mini::add_post_accumulate_grad_hook(t, [fn](const Tensor& leaf) { (*fn)(leaf); });
    return HookHandle{t, id};
  }, py::arg("hook"));

  // ---- operators -----------------------------------------------------------------------
  struct Bin { const char* name; const char* rname; OpKind kind; const char* symbol; };
  for (Bin b : {Bin{"__add__", "__radd__", OpKind::Add, "+"}, Bin{"__sub__", "__rsub__", OpKind::Sub, "-"},
                Bin{"__mul__", "__rmul__", OpKind::Mul, "*"},
                Bin{"__truediv__", "__rtruediv__", OpKind::Div, "/"},
                Bin{"__pow__", "__rpow__", OpKind::Pow, "**"}}) {
    OpKind k = b.kind;
    const char* sym = b.symbol;
    T.def(b.name, [k, sym](const Tensor& a, py::handle o) { return binop(k, a, o, false, sym); }, py::is_operator());
    T.def(b.rname, [k, sym](const Tensor& a, py::handle o) { return binop(k, a, o, true, sym); }, py::is_operator());
  }
  for (Bin b : {Bin{"__lt__", "", OpKind::Lt, "<"}, Bin{"__le__", "", OpKind::Le, "<="},
                Bin{"__gt__", "", OpKind::Gt, ">"}, Bin{"__ge__", "", OpKind::Ge, ">="}}) {
    OpKind k = b.kind;
    const char* sym = b.symbol;
    T.def(b.name, [k, sym](const Tensor& a, py::handle o) { return binop(k, a, o, false, sym); }, py::is_operator());
  }
  // == and != with a non-tensor, non-number answer False/True (Python's identity rule),
  // so `t == None` and `t in some_list` work as they do for torch tensors.
  for (Bin b : {Bin{"__eq__", "", OpKind::Eq, "=="}, Bin{"__ne__", "", OpKind::Ne, "!="}}) {
    OpKind k = b.kind;
    T.def(b.name, [k](const Tensor& a, py::handle o) -> py::object {
      Tensor t = as_operand(o);
      if (!t) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
      return py::cast(mini::binary(k, a, t));
    }, py::is_operator());
  }
  T.def("__matmul__", [](const Tensor& a, py::handle o) -> py::object {
    if (!py::isinstance<TensorImpl>(o))
      mini::fail_type("unsupported operand type(s) for @: 'Tensor' and '", type_name(o), "'");
    return py::cast(mini::matmul(a, o.cast<Tensor>()));
  }, py::is_operator());
  T.def("__neg__", [](const Tensor& a) { return mini::unary(OpKind::Neg, a); });
  T.def("__abs__", [](const Tensor& a) { return mini::unary(OpKind::Abs, a); });
  T.def("__iadd__", [](const Tensor& a, py::handle o) { mini::inplace_binary(OpKind::Add, a, operand_or_throw(o, "add_", "other")); return a; });
  T.def("__isub__", [](const Tensor& a, py::handle o) { mini::inplace_binary(OpKind::Sub, a, operand_or_throw(o, "sub_", "other")); return a; });
  T.def("__imul__", [](const Tensor& a, py::handle o) { mini::inplace_binary(OpKind::Mul, a, operand_or_throw(o, "mul_", "other")); return a; });
  T.def("__itruediv__", [](const Tensor& a, py::handle o) { mini::inplace_binary(OpKind::Div, a, operand_or_throw(o, "div_", "other")); return a; });
  T.def("__getitem__", [](const Tensor& t, py::handle idx) { return index(t, idx); });
  T.def("__setitem__", [](const Tensor& t, py::handle idx, py::handle v) {
    mini::copy_(index(t, idx), operand_or_throw(v, "__setitem__", "value"));
  });
  T.def("__bool__", [](const TensorImpl& t) {
    if (t.numel() != 1)
      mini::fail("Boolean value of Tensor with more than one value is ambiguous (shape ",
                 mini::shape_str(t.sizes), "); use .any() or .all(), or compare one element");
    return t.scalar_value() != 0;
  });
  T.def("__float__", [](const TensorImpl& t) { return t.scalar_value(); });
  T.def("__int__", [](const TensorImpl& t) { return (int64_t)t.scalar_value(); });
  T.def("__index__", [](const TensorImpl& t) {
    if (t.dtype != DType::Int64 && t.dtype != DType::Bool)
      mini::fail_type("only integer tensors of a single element can be converted to an index");
    return (int64_t)t.scalar_value();
  });

  // ---- named methods (also exposed as mini.<name> functions by __init__.py) ------------
  struct Named { const char* name; OpKind kind; };
  for (Named b : {Named{"add", OpKind::Add}, Named{"sub", OpKind::Sub}, Named{"mul", OpKind::Mul},
                  Named{"div", OpKind::Div}, Named{"pow", OpKind::Pow}, Named{"maximum", OpKind::Maximum},
                  Named{"minimum", OpKind::Minimum}, Named{"eq", OpKind::Eq}, Named{"ne", OpKind::Ne},
                  Named{"lt", OpKind::Lt}, Named{"le", OpKind::Le}, Named{"gt", OpKind::Gt},
                  Named{"ge", OpKind::Ge}}) {
    OpKind k = b.kind;
    const char* name = b.name;
    T.def(b.name, [k, name](const Tensor& a, py::handle o) {
      return mini::binary(k, a, operand_or_throw(o, name, "other"));
    }, py::arg("other"));
  }
  for (Named b : {Named{"add_", OpKind::Add}, Named{"sub_", OpKind::Sub}, Named{"mul_", OpKind::Mul},
                  Named{"div_", OpKind::Div}}) {
    OpKind k = b.kind;
    const char* name = b.name;
    T.def(b.name, [k, name](const Tensor& a, py::handle o) {
      mini::inplace_binary(k, a, operand_or_throw(o, name, "other"));
      return a;
    }, py::arg("other"));
  }
  for (Named u : {Named{"neg", OpKind::Neg}, Named{"abs", OpKind::Abs}, Named{"exp", OpKind::Exp},
                  Named{"log", OpKind::Log}, Named{"sin", OpKind::Sin}, Named{"cos", OpKind::Cos},
                  Named{"tanh", OpKind::Tanh}, Named{"sigmoid", OpKind::Sigmoid},
                  Named{"relu", OpKind::Relu}, Named{"sqrt", OpKind::Sqrt},
                  Named{"rsqrt", OpKind::Rsqrt}, Named{"sign", OpKind::Sign}}) {
    OpKind k = u.kind;
    T.def(u.name, [k](const Tensor& a) { return mini::unary(k, a); });
  }
  T.def("gelu", [](const Tensor& a, const std::string& approximate) {
    if (approximate != "none" && approximate != "tanh")
      mini::fail_value("approximate must be 'none' or 'tanh', got '", approximate, "'");
    mini::Attrs at;
    at.mode = approximate;
    return mini::unary(OpKind::Gelu, a, at);
  }, py::arg("approximate") = "none");

  struct Red { const char* name; OpKind kind; };
  for (Red r : {Red{"sum", OpKind::Sum}, Red{"mean", OpKind::Mean}, Red{"amax", OpKind::Amax},
                Red{"amin", OpKind::Amin}}) {
    OpKind k = r.kind;
    T.def(r.name, [k](const Tensor& a, py::object dim, bool keepdim) {
      return mini::reduce(k, a, dims_arg(dim), keepdim);
    }, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  }
  T.def("_max_min_dim", [](const Tensor& a, int64_t dim, bool keepdim, bool is_max) {
    return mini::max_min_dim(a, dim, keepdim, is_max);
  });
  T.def("nonzero", &mini::nonzero);
  T.def("softmax", [](const Tensor& a, int64_t dim) { return mini::softmax(a, dim, false); }, py::arg("dim"));
  T.def("log_softmax", [](const Tensor& a, int64_t dim) { return mini::softmax(a, dim, true); }, py::arg("dim"));
  T.def("matmul", [](const Tensor& a, py::handle b) {
    if (!py::isinstance<TensorImpl>(b))
      mini::fail_type("matmul(): argument 'other' must be a Tensor, not ", type_name(b));
    return mini::matmul(a, b.cast<Tensor>());
  });
  T.def("mm", [](const Tensor& a, py::handle bh) {
    if (!py::isinstance<TensorImpl>(bh))
      mini::fail_type("mm(): argument 'mat2' must be a Tensor, not ", type_name(bh));
    Tensor b = bh.cast<Tensor>();
    mini::check_mm(a, b);
    return mini::matmul(a, b);
  });
  T.def("bmm", [](const Tensor& a, py::handle bh) {
    if (!py::isinstance<TensorImpl>(bh))
      mini::fail_type("bmm(): argument 'mat2' must be a Tensor, not ", type_name(bh));
    Tensor b = bh.cast<Tensor>();
    mini::check_bmm(a, b);
    return mini::matmul(a, b);
  });

  // ---- views ---------------------------------------------------------------------------
  T.def("_reshape", [](const Tensor& a, const mini::Shape& s) { return mini::reshape(a, s); });
  T.def("_view", [](const Tensor& a, const mini::Shape& s) { return mini::view(a, s); });
  T.def("_expand", [](const Tensor& a, const mini::Shape& s) { return mini::expand(a, s); });
  T.def("_permute", [](const Tensor& a, const std::vector<int64_t>& p) { return mini::permute(a, p); });
  T.def("transpose", &mini::transpose, py::arg("dim0"), py::arg("dim1"));
  T.def("t", [](const Tensor& a) {
    if (a->dim() > 2) mini::fail("t() expects a tensor with <= 2 dimensions, but self is ", a->dim(), "D");
    return a->dim() < 2 ? a : mini::transpose(a, 0, 1);
  });
  T.def_property_readonly("T", [](const Tensor& a) {
    std::vector<int64_t> p;
    for (int64_t d = a->dim() - 1; d >= 0; d--) p.push_back(d);
    return mini::permute(a, p);
  });
  T.def_property_readonly("mT", [](const Tensor& a) { return mini::transpose(a, -2, -1); });
  T.def("unsqueeze", &mini::unsqueeze, py::arg("dim"));
  T.def("squeeze", [](const Tensor& a, py::object dim) { return mini::squeeze(a, dims_arg(dim)); },
        py::arg("dim") = py::none());
  T.def("contiguous", &mini::contiguous);
  // A view of a's storage with any sizes, strides and offset (in elements), checked to stay
  // inside the storage. Not differentiable: refused for a tensor that requires grad.
  T.def("as_strided", [](const Tensor& a, std::vector<int64_t> size, std::vector<int64_t> stride,
                         py::object storage_offset) {
    if (size.size() != stride.size())
      mini::fail("as_strided: got ", size.size(), " sizes and ", stride.size(), " strides: give one stride per size");
    if (a->needs_grad())
      mini::fail("as_strided of a tensor that requires grad is not supported: mini records no gradient for it");
    int64_t offset = storage_offset.is_none() ? a->offset : storage_offset.cast<int64_t>();
    int64_t last = offset, elements = (int64_t)(a->storage->nbytes / mini::itemsize(a->dtype));
    bool empty = false;
    for (size_t d = 0; d < size.size(); d++) {
      if (size[d] < 0 || stride[d] < 0)
        mini::fail("as_strided: sizes and strides must be >= 0, got size ", size[d], " and stride ", stride[d],
                   " at dim ", d);
      empty = empty || size[d] == 0;
      if (size[d] > 0) last += (size[d] - 1) * stride[d];
    }
    if (offset < 0 || (!empty && last >= elements))
      mini::fail("as_strided: the view reaches element ", last, " (offset ", offset, ") of a storage of ", elements,
                 " elements: it must stay inside the storage");
    auto t = mini::TensorImpl::view_of(a, mini::Shape(size.begin(), size.end()), mini::Strides(stride.begin(), stride.end()), offset);
    t->is_view = true;
    return t;
  }, py::arg("size"), py::arg("stride"), py::arg("storage_offset") = py::none());
  T.def("clone", &mini::clone);

  // ---- data ----------------------------------------------------------------------------
  T.def("_to_dtype", [](const Tensor& a, int code) { return mini::cast(a, dtype_from_code(code)); });
  T.def("item", &item);
  T.def("numpy", &to_numpy);
  // numpy's C API and pybind11's dtypes are set up once, on first use. Done here, at import:
  // done by the process's first tensor.numpy(), a signal handler that converts a tensor
  // (repr, tolist) while it runs re-entered the setup and hung the process.
  for (DType d : {DType::Bool, DType::Int64, DType::Float32, DType::Float64}) to_numpy(mini::TensorImpl::empty({1}, d));
  T.def("zero_", [](const Tensor& a) { mini::fill_(a, 0.0); return a; });
  T.def("fill_", [](const Tensor& a, double v) { mini::fill_(a, v); return a; });
  T.def("copy_", [](const Tensor& a, const Tensor& src) { mini::copy_(a, src); return a; });
  T.def("relu_", [](const Tensor& a) { mini::relu_(a); return a; });
  // clamp/clamp_ bounds and masked_fill's value: a number or a tensor, as torch
  auto bound = [](py::handle v, const char* op, const char* arg) {
    return v.is_none() ? Tensor() : operand_or_throw(v, op, arg);
  };
  T.def("clamp", [bound](const Tensor& a, py::handle lo, py::handle hi) {
    return mini::clamp(a, bound(lo, "clamp", "min"), bound(hi, "clamp", "max"));
  }, py::arg("min") = py::none(), py::arg("max") = py::none());
  T.def("clamp_", [bound](const Tensor& a, py::handle lo, py::handle hi) {
    mini::clamp_(a, bound(lo, "clamp_", "min"), bound(hi, "clamp_", "max"));
    return a;
  }, py::arg("min") = py::none(), py::arg("max") = py::none());
  T.def("masked_fill", [](const Tensor& a, const Tensor& mask, py::handle value) {
    return mini::masked_fill(a, mask, operand_or_throw(value, "masked_fill", "value"));
  }, py::arg("mask"), py::arg("value"));
  T.def("masked_fill_", [](const Tensor& a, const Tensor& mask, py::handle value) {
    mini::masked_fill_(a, mask, operand_or_throw(value, "masked_fill_", "value"));
    return a;
  }, py::arg("mask"), py::arg("value"));
  // the storage's write counter (torch's Tensor._version): each in-place write bumps it
  T.def_property_readonly("_version", [](const TensorImpl& t) { return t.storage->version; });

  // ---- module functions ----------------------------------------------------------------
  m.def("from_numpy", &from_numpy);
  m.def("full", [](const mini::Shape& s, double v, int code, const std::string& d) {
    return mini::full(s, v, dtype_from_code(code), parse_device(d));
  }, py::arg("size"), py::arg("value"), py::arg("dtype"), py::arg("device") = "cpu");
  m.def("empty", [](const mini::Shape& s, int code, const std::string& d) {
    return mini::empty(s, dtype_from_code(code), parse_device(d));
  }, py::arg("size"), py::arg("dtype"), py::arg("device") = "cpu");
  m.def("arange", [](double a, double b, double s, int code, const std::string& d) {
    return mini::arange(a, b, s, dtype_from_code(code), parse_device(d));
  }, py::arg("start"), py::arg("end"), py::arg("step"), py::arg("dtype"), py::arg("device") = "cpu");
  m.def("randn", [](const mini::Shape& s, int code, const std::string& d) {
    return mini::randn(s, dtype_from_code(code), parse_device(d));
  }, py::arg("size"), py::arg("dtype"), py::arg("device") = "cpu");
  m.def("rand", [](const mini::Shape& s, int code, const std::string& d) {
    return mini::rand(s, dtype_from_code(code), parse_device(d));
  }, py::arg("size"), py::arg("dtype"), py::arg("device") = "cpu");
  m.def("manual_seed", &mini::manual_seed);
  // One thread count for everything parallel on the CPU: mini's kernels, the generated kernels and
  // OpenBLAS (the OpenMP build asks omp_get_max_threads() at every call) share libgomp's pool.
  m.def("set_num_threads", [](int n) { omp_set_num_threads(n); });
  m.def("get_num_threads", [] { return omp_get_max_threads(); });
  // mini.autocast's state (tensor/autograd.h): per device type, enabled and the dtype's code
  auto device_type = [](const std::string& t) {
    if (t != "cpu" && t != "cuda")
      mini::fail_value("autocast: device_type must be 'cuda' or 'cpu', got '", t, "'");
    return t == "cuda" ? 1 : 0;
  };
  m.def("_autocast_get", [device_type](const std::string& t) {
    const mini::AutocastState& s = mini::autocast_state();
    int i = device_type(t);
    return py::make_tuple(s.enabled[i], int(s.dtype[i]));
  });
  m.def("_autocast_set", [device_type](const std::string& t, bool enabled, int code) {
    mini::AutocastState s = mini::autocast_state();
    int i = device_type(t);
    s.enabled[i] = enabled;
    s.dtype[i] = dtype_from_code(code);
    mini::set_autocast_state(s);
  });
  m.def("_parse_device", [](const std::string& d) { return parse_device(d).str(); });

  // mini.cuda's C++ side (cuda/cuda.h); the Python module mini/cuda.py wraps it
  namespace cu = mini::cuda;
  py::module_ c = m.def_submodule("_cuda", "the CUDA runtime: devices, memory, events");
  c.def("compiled", &cu::compiled);
  c.def("is_available", &cu::is_available);
  c.def("device_count", &cu::device_count);
  c.def("unavailable_reason", &cu::unavailable_reason);
  c.def("require", [](const std::string& what) { cu::require(what.c_str()); });
  c.def("get_device_name", &cu::device_name);
  c.def("synchronize", &cu::synchronize);
  c.def("memory_stats", [] {
    cu::MemoryStats s = cu::memory_stats();
    py::dict d;
    d["allocated_bytes.all.current"] = s.allocated;
    d["allocated_bytes.all.peak"] = s.max_allocated;
    d["reserved_bytes.all.current"] = s.reserved;
    d["reserved_bytes.all.peak"] = s.max_reserved;
    d["num_cuda_mallocs"] = s.cuda_mallocs;
    d["num_cache_hits"] = s.cache_hits;
    d["num_alloc_retries"] = s.oom_retries;
    return d;
  });
  c.def("reset_peak_memory_stats", &cu::reset_peak_memory_stats);
  c.def("empty_cache", &cu::empty_cache);
  c.def("event_create", &cu::event_create);
  c.def("event_destroy", &cu::event_destroy);
  c.def("event_record", &cu::event_record);
  c.def("event_synchronize", &cu::event_synchronize);
  c.def("event_query", &cu::event_query);
  c.def("event_elapsed_ms", &cu::event_elapsed_ms);
  c.def("set_allow_tf32", &cu::set_allow_tf32);
  c.def("allow_tf32", &cu::allow_tf32);
  c.def("_test_fault", &cu::test_fault, "tests only: 0 a failed launch, 1 an illegal address");
  m.def("where", [](py::handle c, py::handle a, py::handle b) {
    return mini::where(operand_or_throw(c, "where", "condition"), operand_or_throw(a, "where", "input"),
                       operand_or_throw(b, "where", "other"));
  });
  m.def("slice_scatter", [](const Tensor& base, const Tensor& src, int64_t dim, int64_t start, int64_t end,
                            int64_t step) { return mini::slice_scatter(base, src, dim, start, end, step); },
        py::arg("input"), py::arg("src"), py::arg("dim"), py::arg("start"), py::arg("end"), py::arg("step"));
  m.def("layer_norm", [](const Tensor& x, const mini::Shape& shape, std::optional<Tensor> w,
                         std::optional<Tensor> b, double eps) {
    return mini::layer_norm(x, shape, w.value_or(nullptr), b.value_or(nullptr), eps);
  }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
     py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  m.def("cross_entropy_nll", [](const Tensor& logits, const Tensor& target, int64_t ignore_index) {
    return mini::cross_entropy_nll(logits, target, ignore_index);
  }, py::arg("input"), py::arg("target"), py::arg("ignore_index"));
  m.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
    return mini::linear(x, w, b.value_or(nullptr));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  m.def("embedding", [](const Tensor& weight, const Tensor& indices) { return mini::embedding(weight, indices); },
        py::arg("weight"), py::arg("indices"));
  m.def("fused_attention", [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
    return mini::scaled_dot_product_attention(q, k, v, causal, scale);
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("is_causal"), py::arg("scale"));
  m.def("fused_attention_lse", [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
    Tensor lse;
    Tensor out = mini::scaled_dot_product_attention(q, k, v, causal, scale, &lse);
    return std::make_pair(out, lse);
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("is_causal"), py::arg("scale"));
  m.def("fused_attention_supports", [](const Tensor& q, const Tensor& k, const Tensor& v) {
    std::string why;
    return mini::fused_attention_supports(q, k, v, &why) ? std::string() : why;
  }, py::arg("query"), py::arg("key"), py::arg("value"));
  m.def("adam_step_", [](const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                         double lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled,
                         int64_t step) {
    mini::adam_step_(param, grad, exp_avg, exp_avg_sq, {lr, beta1, beta2, eps, weight_decay, decoupled, step});
  }, py::arg("param"), py::arg("grad"), py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("lr"), py::arg("beta1"),
     py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("decoupled"), py::arg("step"),
     "One Adam (decoupled=False) or AdamW step of one parameter, in place, in one kernel: "
     "mini.optim.Adam/AdamW's fused step (mini/tensor/optim_math.h).");
  m.def("adam_steps_", [](const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                          const std::vector<int64_t>& steps, double lr, double beta1, double beta2, double eps,
                          double weight_decay, bool decoupled) {
    std::vector<bool> done = mini::adam_steps_(params, grads, exp_avgs, exp_avg_sqs, steps,
                                               {lr, beta1, beta2, eps, weight_decay, decoupled, 1});
    return done;
  }, py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("steps"),
     py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("decoupled"),
     "adam_step_ for every parameter of a group that it takes (adam_fusable), in one call from Python, "
     "the CUDA ones of one dtype and step in multi-tensor launches: a list of which it stepped (the others "
     "are left for the op-by-op step).");
  m.def("mse_loss", [](const Tensor& a, const Tensor& b, const std::string& r) { return mini::mse_loss(a, b, r); },
        py::arg("input"), py::arg("target"), py::arg("reduction") = "mean");
  m.def("operand", [](py::handle v) { return operand_or_throw(v, "tensor", "data"); });
  m.def("is_grad_enabled", &mini::grad_enabled);
  m.def("set_grad_enabled", &mini::set_grad_enabled);
}
