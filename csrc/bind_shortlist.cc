// Python binding of the native shortlist: pyfastdec._engine.ShortlistIndex, which
// Model.encode accepts in place of per-row candidate lists (bind_model.cc).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/shortlist_index.h"

namespace py = pybind11;

namespace fastdec {
namespace {

std::shared_ptr<ShortlistIndex> make_shortlist_index(int vocab_size, const py::handle& frequent_obj,
                                                     const py::handle& indptr_obj, const py::handle& targets_obj,
                                                     int first_fill_id) {
  using Flags = py::array;
  auto frequent = py::array_t<uint32_t, Flags::c_style | Flags::forcecast>::ensure(frequent_obj);
  auto indptr = py::array_t<uint64_t, Flags::c_style | Flags::forcecast>::ensure(indptr_obj);
  auto targets = py::array_t<uint32_t, Flags::c_style | Flags::forcecast>::ensure(targets_obj);
  if (!frequent || !indptr || !targets || frequent.ndim() != 1 || indptr.ndim() != 1 || targets.ndim() != 1)
    throw py::value_error("ShortlistIndex: frequent, indptr and targets must be 1-D integer arrays");
  if (vocab_size < 1 || indptr.size() != static_cast<py::ssize_t>(vocab_size) + 1)
    throw py::value_error("ShortlistIndex: indptr has " + std::to_string(indptr.size()) +
                          " offsets, expected vocab_size + 1 = " + std::to_string(vocab_size + 1));
  try {
    return std::make_shared<ShortlistIndex>(vocab_size, frequent.data(), static_cast<size_t>(frequent.size()),
                                            indptr.data(), targets.data(), static_cast<size_t>(targets.size()),
                                            first_fill_id);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("ShortlistIndex: ") + e.what());
  }
}

py::array_t<int32_t> shortlist_candidates(const ShortlistIndex& index, const py::handle& src_obj) {
  std::vector<int32_t> src;
  for (const auto& item : src_obj) {
    int64_t id = item.cast<int64_t>();
    if (id < 0 || id >= index.vocab_size())
      throw py::value_error("source id " + std::to_string(id) + " outside vocabulary [0, " +
                            std::to_string(index.vocab_size()) + ")");
    src.push_back(static_cast<int32_t>(id));
  }
  std::vector<int32_t> out;
  index.candidates(src.data(), src.size(), &out);
  py::array_t<int32_t> result(static_cast<py::ssize_t>(out.size()));
  std::copy(out.begin(), out.end(), result.mutable_data());
  return result;
}

}  // namespace

void bind_shortlist(py::module_& m) {
  py::class_<ShortlistIndex, std::shared_ptr<ShortlistIndex>>(
      m, "ShortlistIndex", "A validated shortlist.bin's sections; candidates per sentence computed natively.")
      .def(py::init(&make_shortlist_index), py::arg("vocab_size"), py::arg("frequent"), py::arg("indptr"),
           py::arg("targets"), py::arg("first_fill_id"))
      .def_property_readonly("vocab_size", &ShortlistIndex::vocab_size)
      .def("candidates", &shortlist_candidates, py::arg("src_ids"),
           "Sorted int32 candidate ids of one source sentence (export/SHORTLIST_FORMAT.md).");
}

}  // namespace fastdec
