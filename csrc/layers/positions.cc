#include "layers/positions.h"

#include <cmath>

namespace fastdec {

void position_rows(PositionEncoding encoding, int d, size_t from, size_t to, float* out) {
  const int half = d / 2;
  if (encoding == PositionEncoding::kInterleaved) {
    // As export/modeling.py computes it, in float.
    const float log_base = -std::log(10000.0f) / static_cast<float>(d);
    for (size_t p = from; p < to; ++p) {
      float* row = out + (p - from) * d;
      for (int i = 0; i < d; i += 2) {
        float angle = static_cast<float>(p) * std::exp(log_base * static_cast<float>(i));
        row[i] = std::sin(angle);
        if (i + 1 < d) row[i + 1] = std::cos(angle);
      }
    }
    return;
  }
  // Hugging Face Marian computes its frequencies in double (numpy); Marian C++ in float
  // (src/graph/node_initializers.cpp, sinusoidalPositionEmbeddings).
  for (size_t p = from; p < to; ++p) {
    float* row = out + (p - from) * d;
    for (int i = 0; i < half; ++i) {
      float s, c;
      if (encoding == PositionEncoding::kHalves) {
        double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * i / d);
        s = static_cast<float>(std::sin(angle));
        c = static_cast<float>(std::cos(angle));
      } else {
        float increment = std::log(10000.f) / (static_cast<float>(half) - 1.f);
        float angle = static_cast<float>(p) * std::exp(static_cast<float>(i) * -increment);
        s = std::sin(angle);
        c = std::cos(angle);
      }
      row[i] = s;
      row[half + i] = c;
    }
  }
}

}  // namespace fastdec
