#include "layers/ssru.h"

#include <cmath>
#include <cstddef>

namespace fastdec {

void ssru_scan(const float* proj, int n, int d, const float* c_prev, float* c_out, float* h_out) {
  for (int t = 0; t < n; ++t) {
    const float* x = proj + static_cast<size_t>(t) * 2 * d;
    const float* fz = x + d;
    const float* prev = t > 0 ? c_out + static_cast<size_t>(t - 1) * d : c_prev;
    float* c = c_out + static_cast<size_t>(t) * d;
    float* h = h_out + static_cast<size_t>(t) * d;
    for (int i = 0; i < d; ++i) {
      float f = 1.f / (1.f + std::exp(-fz[i]));
      float c_before = prev ? prev[i] : 0.f;
      c[i] = f * c_before + (1.f - f) * x[i];
      h[i] = c[i] > 0.f ? c[i] : 0.f;
    }
  }
}

}  // namespace fastdec
