// Argument checking for numpy arrays crossing into C++: wrong dtype, rank, shape,
// layout or alignment raises a Python exception naming the function, the argument
// and what was expected, never a crash or a silent conversion.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace fastdec {
namespace py = pybind11;

struct ArgRef {
  const char* function;
  const char* name;
  std::string where() const { return std::string(function) + ": argument '" + name + "'"; }
};

template <typename T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, int8_t>) return "int8";
  if constexpr (std::is_same_v<T, int32_t>) return "int32";
  if constexpr (std::is_same_v<T, int64_t>) return "int64";
  return "?";
}

inline std::string shape_string(const py::array& a) {
  std::ostringstream s;
  s << "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s << (i ? ", " : "") << a.shape(i);
  s << (a.ndim() == 1 ? ",)" : ")");
  return s.str();
}

// Checks dtype, C-contiguity, alignment and that ndim is one of `ranks`.
template <typename T>
py::array_t<T> checked_array(const py::handle& obj, ArgRef arg, std::vector<int> ranks) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(arg.where() + " must be a numpy array of " + dtype_name<T>() +
                         ", got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<T>()))
    throw py::type_error(arg.where() + " must have dtype " + dtype_name<T>() + ", got " +
                         std::string(py::str(a.dtype())));
  bool rank_ok = false;
  for (int r : ranks) rank_ok |= a.ndim() == r;
  if (!rank_ok) {
    std::string want;
    for (size_t i = 0; i < ranks.size(); ++i) want += (i ? " or " : "") + std::to_string(ranks[i]);
    throw py::value_error(arg.where() + " must have " + want + " dimensions, got shape " +
                          shape_string(a));
  }
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(arg.where() + " must be C-contiguous (use numpy.ascontiguousarray)");
  if (reinterpret_cast<uintptr_t>(a.data()) % alignof(T) != 0)
    throw py::value_error(arg.where() + " is not aligned to " + std::to_string(alignof(T)) +
                          " bytes (copy it with numpy.array)");
  return py::reinterpret_borrow<py::array_t<T>>(a);
}

inline void expect_dim(const py::array& a, int axis, py::ssize_t want, ArgRef arg,
                       const std::string& what) {
  if (a.shape(axis) != want)
    throw py::value_error(arg.where() + " has shape " + shape_string(a) + ": dimension " +
                          std::to_string(axis) + " must be " + std::to_string(want) + " (" +
                          what + ")");
}

}  // namespace fastdec
