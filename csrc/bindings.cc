// pyfastdec._engine: the native module. Every call that does work releases the GIL.
#include <pybind11/pybind11.h>

namespace fastdec {
void bind_kernels(pybind11::module_& m);
void bind_shortlist(pybind11::module_& m);
void bind_model(pybind11::module_& m);
void bind_profile(pybind11::module_& m);
}

PYBIND11_MODULE(_engine, m) {
  m.doc() = "pyfastdec native engine: ISA-dispatched kernels and the decoder engine";
  fastdec::bind_kernels(m);
  fastdec::bind_shortlist(m);
  fastdec::bind_model(m);
  fastdec::bind_profile(m);
}
