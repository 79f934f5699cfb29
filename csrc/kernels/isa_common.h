// Pieces shared by every isa_*.cc. Everything here has internal linkage on purpose:
// each translation unit is compiled with different -m flags, and an inline function
// with external linkage would let the linker keep one AVX-512 copy for all of them.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/aligned.h"
#include "kernels/kernel_table.h"

namespace fastdec {
namespace {  // NOLINT(build/namespaces): per-TU copies are the point

constexpr float kQuantMax = 127.f;
constexpr float kLayerNormEps = 1e-5f;  // torch.nn.LayerNorm's default (config.json layer_norm_eps)

// Dynamic activation scale for a row: maps max|a| to 127. An all-zero row gets 1 so
// dequantisation stays finite.
inline float activation_scale(float max_abs) {
  return (max_abs > 0.f && std::isfinite(max_abs)) ? kQuantMax / max_abs : 1.f;
}

// Clamp first, then round to nearest even, exactly as the SIMD paths do
// (max/min with the value as first operand turn NaN into -127, like MAXPS).
inline int8_t quantize_one(float x, float scale) {
  float v = x * scale;
  v = v > -kQuantMax ? v : -kQuantMax;
  v = v < kQuantMax ? v : kQuantMax;
  return static_cast<int8_t>(std::nearbyint(v));
}

// The int8 GEMM epilogue, written once so every ISA rounds identically:
// (acc · (a_dequant · b_dequant)) + bias, then ReLU.
inline float dequantize_one(int32_t acc, float a_dequant, float b_dequant, float bias,
                            bool relu) {
  float scale = a_dequant * b_dequant;
  float v = static_cast<float>(acc) * scale + bias;
  return relu && v < 0.f ? 0.f : v;
}

// x += y, then out = LayerNormFn(x), row by row while the row is in L1: the same
// additions and the same layer norm as doing them one after the other.
template <void (*LayerNormFn)(const float*, int, int, const float*, const float*, float*, float)>
void add_layer_norm_rows(float* x, const float* y, int rows, int d, const float* gamma,
                         const float* beta, float* out, float eps) {
  for (int r = 0; r < rows; ++r) {
    float* xr = x + static_cast<size_t>(r) * d;
    const float* yr = y + static_cast<size_t>(r) * d;
    for (int i = 0; i < d; ++i) xr[i] += yr[i];
    LayerNormFn(xr, 1, d, gamma, beta, out + static_cast<size_t>(r) * d, eps);
  }
}

// Sorted top-k list (value desc, index asc) fed in increasing index order.
struct TopK {
  int k;
  int count = 0;
  int64_t* ids;
  float* values;

  // Smallest value that can still enter; -inf while the list is not full.
  float threshold() const {
    return count < k ? -std::numeric_limits<float>::infinity() : values[k - 1];
  }
  // Caller guarantees increasing indices, so an equal value never displaces an entry.
  void offer(float v, int64_t i) {
    if (k == 0 || !(v > threshold())) return;
    int pos = count < k ? count++ : k - 1;
    while (pos > 0 && values[pos - 1] < v) {
      values[pos] = values[pos - 1];
      ids[pos] = ids[pos - 1];
      --pos;
    }
    values[pos] = v;
    ids[pos] = i;
  }
  // Rows with fewer than k values above -inf: fill with -inf entries, then NaN ones,
  // each in index order (NaN ranks last, as in argmax).
  void fill_from(const float* x, int64_t n) {
    for (int64_t i = 0; i < n && count < k; ++i)
      if (x[i] == -std::numeric_limits<float>::infinity()) push_back(x[i], i);
    for (int64_t i = 0; i < n && count < k; ++i)
      if (std::isnan(x[i])) push_back(x[i], i);
  }

 private:
  void push_back(float v, int64_t i) {
    values[count] = v;
    ids[count] = i;
    ++count;
  }
};

// Argmax of a row whose finite maximum is -inf or absent: first -inf, else 0 (all NaN).
inline int64_t argmax_without_finite_max(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == -std::numeric_limits<float>::infinity()) return i;
  return 0;
}

// Index of the first element equal to `target` in [begin, end); target is found.
inline int64_t find_first_equal(const float* x, int64_t begin, int64_t end, float target) {
  for (int64_t i = begin; i < end; ++i)
    if (x[i] == target) return i;
  return begin;
}

// ---- GEMM driver shared by every SIMD path.
// A Kernel has `template <int MR, int NB> void run(int m, int block) const`, computing
// rows [m, m + MR) x column blocks [block, block + NB). Column panels of NB blocks are
// the outer loop and row tiles the inner one: a panel's weights come into cache once
// and serve every row tile, while the activations stay in L2.
template <int R, int MR, int NB, typename Kernel>
void run_leftover_rows(const Kernel& kernel, int rows, int m, int block) {
  if constexpr (R < MR) {
    if (rows == R) {
      kernel.template run<R, NB>(m, block);
      return;
    }
    run_leftover_rows<R + 1, MR, NB>(kernel, rows, m, block);
  }
}

template <int MR, int NB, typename Kernel>
void run_row_tiles(const Kernel& kernel, int m_begin, int m_end, int block) {
  int m = m_begin;
  for (; m + MR <= m_end; m += MR) kernel.template run<MR, NB>(m, block);
  if (m < m_end) run_leftover_rows<1, MR, NB>(kernel, m_end - m, m, block);
}

template <int MR, int NB, typename Kernel>
void run_panels(const Kernel& kernel, int m_begin, int m_end, int block_begin, int block_end) {
  int b = block_begin;
  for (; b + NB <= block_end; b += NB) run_row_tiles<MR, NB>(kernel, m_begin, m_end, b);
  for (; b < block_end; ++b) run_row_tiles<MR, 1>(kernel, m_begin, m_end, b);
}

}  // namespace
}  // namespace fastdec
