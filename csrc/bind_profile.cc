// _engine.op_profile / op_profile_totals: the per-op timer of kernels/op_profile.h.
#include <pybind11/pybind11.h>

#include "kernels/op_profile.h"

namespace py = pybind11;

namespace fastdec {

void bind_profile(py::module_& m) {
  m.def(
      "op_profile", [](const py::object& on) {
        if (!on.is_none()) set_op_profile(on.cast<bool>());
        return op_profile_enabled();
      },
      py::arg("on") = py::none(),
      "Switches the per-op timer of encode/step on or off (None: leaves it); returns whether it is on.");
  m.def(
      "op_profile_totals", [](bool reset) {
        py::dict out;
        OpTotals& t = op_totals();
        for (int i = 0; i < static_cast<int>(Op::kCount); ++i)
          out[op_name(static_cast<Op>(i))] = py::make_tuple(static_cast<double>(t.ns[i].load()) * 1e-9, t.calls[i].load());
        if (reset) reset_op_totals();
        return out;
      },
      py::arg("reset") = false,
      "{op: (exclusive seconds, regions)} since the last reset; reset=True zeroes them after reading.");
}

}  // namespace fastdec
