// config.json, as pyfastdec/backends/native.py's engine_config passes it, read into a
// ModelConfig: once for both modules that load models, the CPU engine (bind_model.cc) and
// the GPU model (cuda/bind_gpu.cc), so that both read and check the same fields alike.
#pragma once
#include <pybind11/pybind11.h>

#include "model/config.h"

namespace fastdec {

// Raises ValueError naming the field for an arch, activation or positions outside the
// known ones, a suppress id outside the vocabulary, or a nat-drafter without a mask token
// or with an SSRU decoder (pyfastdec/model_dir/ checked the file first: these guard the
// engines' memory, not the user's input).
ModelConfig parse_model_config(const pybind11::dict& c);

}  // namespace fastdec
