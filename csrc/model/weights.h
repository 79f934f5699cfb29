// Named tensors handed over by the loader. Pointers stay valid for the model's
// lifetime (the Python side keeps the memory-mapped file alive); shapes were
// checked against the config by the loader and are checked again where used.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fastdec {

struct TensorView {
  const void* data = nullptr;
  std::string dtype;            // "float32" | "int8"
  std::vector<int64_t> shape;

  const float* f32() const { return static_cast<const float*>(data); }
  const int8_t* i8() const { return static_cast<const int8_t*>(data); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

// Looks a tensor up by name; throws std::invalid_argument naming it if absent or if its
// dtype/shape differs from what the caller expects.
using TensorLookup = std::function<TensorView(const std::string& name)>;

TensorView expect_tensor(const TensorLookup& lookup, const std::string& name,
                         const std::string& dtype, const std::vector<int64_t>& shape);

}  // namespace fastdec
