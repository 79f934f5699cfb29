#include "model/weights.h"

#include <sstream>
#include <stdexcept>

namespace fastdec {

namespace {
std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}
}  // namespace

TensorView expect_tensor(const TensorLookup& lookup, const std::string& name,
                         const std::string& dtype, const std::vector<int64_t>& shape) {
  TensorView t = lookup(name);
  if (t.dtype != dtype || t.shape != shape)
    throw std::invalid_argument("tensor '" + name + "': expected " + dtype + " " + shape_str(shape) +
                                ", got " + t.dtype + " " + shape_str(t.shape));
  return t;
}

}  // namespace fastdec
