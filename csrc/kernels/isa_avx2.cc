// AVX2 + FMA kernels for CPUs without AVX-512. The int8 GEMM widens to int16 and uses
// VPMADDWD, exact like the AVX-512 path (no saturating VPMADDUBSW).
#include <immintrin.h>

#include <algorithm>

#include "kernels/isa_common.h"

namespace fastdec {
namespace {

// Masks for the last partial vector of 8 lanes (all-ones lanes are loaded/stored).
inline __m256i tail_mask8(int64_t remaining) {
  int r = static_cast<int>(std::min<int64_t>(std::max<int64_t>(remaining, 0), 8));
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), lanes);
}
inline __m256 load_tail(const float* p, int64_t remaining, __m256 fill) {
  if (remaining >= 8) return _mm256_loadu_ps(p);
  __m256i mask = tail_mask8(remaining);
  return _mm256_blendv_ps(fill, _mm256_maskload_ps(p, mask), _mm256_castsi256_ps(mask));
}
inline void store_tail(float* p, int64_t remaining, __m256 v) {
  if (remaining >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, tail_mask8(remaining), v);
}
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// ---------------------------------------------------------------- int8 GEMM
constexpr int kCols = 8;
size_t k_pairs(int K) { return round_up(static_cast<size_t>(K), 2) / 2; }

size_t packed_bytes(int N, int K) {
  return round_up(static_cast<size_t>(N), kCols) * k_pairs(K) * 2;
}

// Per block of 8 columns, per pair of k: 8 x 2 bytes, widened to 16 int16 at run time.
void pack(const int8_t* w, int N, int K, int8_t* packed) {
  size_t pairs = k_pairs(K);
  for (int n = 0; n < N; ++n) {
    int8_t* block = packed + static_cast<size_t>(n / kCols) * pairs * 16;
    for (int k = 0; k < K; ++k)
      block[(k / 2) * 16 + (n % kCols) * 2 + k % 2] = w[static_cast<size_t>(n) * K + k];
  }
}

size_t a_row_bytes(int K) { return 2 * round_up(static_cast<size_t>(K), 64); }

void quantize(const float* a, int M, int K, size_t lda, const float* scale_fixed,
              uint8_t* out, size_t out_stride, float* a_dequant) {
  const __m256 lo = _mm256_set1_ps(-kQuantMax), hi = _mm256_set1_ps(kQuantMax);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int m = 0; m < M; ++m) {
    const float* row = a + m * lda;
    float scale;
    if (scale_fixed) {
      scale = *scale_fixed;
    } else {
      __m256 mx = _mm256_setzero_ps();
      for (int k = 0; k < K; k += 8)
        mx = _mm256_max_ps(_mm256_and_ps(load_tail(row + k, K - k, _mm256_setzero_ps()), abs_mask), mx);
      scale = activation_scale(hmax(mx));
    }
    a_dequant[m] = 1.f / scale;
    const __m256 vs = _mm256_set1_ps(scale);
    auto* q = reinterpret_cast<int16_t*>(out + m * out_stride);
    for (int k = 0; k < K; k += 8) {
      __m256 v = _mm256_mul_ps(load_tail(row + k, K - k, _mm256_setzero_ps()), vs);
      v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      __m256i qi = _mm256_cvtps_epi32(v);
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), qi);
      int count = std::min(8, K - k);
      for (int i = 0; i < count; ++i) q[k + i] = static_cast<int16_t>(lanes[i]);
    }
  }
}

inline __m256 dequantize8(__m256i acc, float a_dequant, __m256 b_dequant, __m256 bias, bool relu) {
  __m256 scale = _mm256_mul_ps(_mm256_set1_ps(a_dequant), b_dequant);
  __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale), bias);
  return relu ? _mm256_max_ps(v, _mm256_setzero_ps()) : v;
}

// A tile's k loop, kept out of its dequantising epilogue (noinline): compiled together,
// GCC kept one accumulator of the 4 x 2 tile in memory, a store-to-load round trip on
// every k pair that halved the tile's rate (bench/README.md, "AVX2 int8 tiles: a spilled accumulator").
template <int MR, int NB>
__attribute__((noinline)) void accumulate(const I8GemmArgs& g, int m0, int block0, int32_t* sums) {
  __m256i acc[MR][NB];
  _Pragma("GCC unroll 16")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_si256();
  const size_t pairs = k_pairs(g.K);
  const int8_t* b = g.b + static_cast<size_t>(block0) * pairs * 16;
  const uint8_t* a = g.a + m0 * g.a_stride;
  for (size_t p = 0; p < pairs; ++p) {
    __m256i bv[NB];
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j)
      bv[j] = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(b + (j * pairs + p) * 16)));
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + i * g.a_stride + p * 4, 4);
      __m256i av = _mm256_set1_epi32(pair);
      _Pragma("GCC unroll 16")
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(av, bv[j]));
    }
  }
  _Pragma("GCC unroll 16")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(sums + (i * NB + j) * kCols), acc[i][j]);
}

template <int MR, int NB>
void tile(const I8GemmArgs& g, int m0, int block0) {
  alignas(32) int32_t sums[MR * NB * kCols];
  accumulate<MR, NB>(g, m0, block0, sums);
  _Pragma("GCC unroll 16")
  for (int j = 0; j < NB; ++j) {
    int n0 = (block0 + j) * kCols;
    int remaining = g.N - n0;
    __m256 bdq = load_tail(g.b_dequant + n0, remaining, _mm256_setzero_ps());
    __m256 bias = g.bias ? load_tail(g.bias + n0, remaining, _mm256_setzero_ps()) : _mm256_setzero_ps();
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i)
      store_tail(g.c + (m0 + i) * g.c_stride + n0, remaining,
                 dequantize8(_mm256_load_si256(reinterpret_cast<const __m256i*>(sums + (i * NB + j) * kCols)),
                             g.a_dequant[m0 + i], bdq, bias, g.relu));
  }
}

struct Tiles {
  const I8GemmArgs& g;
  template <int MR, int NB>
  void run(int m, int block) const { tile<MR, NB>(g, m, block); }
};

void gemm(const I8GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  // 4 rows x 2 blocks: 8 accumulators + 2 weight vectors + 1 broadcast of 16 registers.
  if (m_end - m_begin == 1)
    run_panels<1, 4>(Tiles{g}, m_begin, m_end, block_begin, block_end);
  else
    run_panels<4, 2>(Tiles{g}, m_begin, m_end, block_begin, block_end);
}

void gemm_columns(const I8ColumnsArgs& g, int m_begin, int m_end) {
  const size_t kvalues = round_up(static_cast<size_t>(g.K), 64);
  for (int m = m_begin; m < m_end; ++m) {
    const uint8_t* a = g.a + m * g.a_stride;
    for (int64_t j = g.offsets[m]; j < g.offsets[m + 1]; ++j) {
      int n = g.cols[j];
      const int8_t* w = g.b_rows + n * g.b_row_stride;
      __m256i acc = _mm256_setzero_si256();
      for (size_t k = 0; k < kvalues; k += 16) {
        __m256i wv = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(w + k)));
        __m256i av = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 2 * k));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(av, wv));
      }
      g.c[j] = dequantize_one(hsum_epi32(acc), g.a_dequant[m], g.b_dequant[n],
                              g.bias ? g.bias[n] : 0.f, false);
    }
  }
}

// ---------------------------------------------------------------- fp32 GEMM
constexpr int kF32Cols = 8;

size_t f32_packed_floats(int N, int K) {
  return round_up(static_cast<size_t>(N), kF32Cols) * static_cast<size_t>(K);
}

void f32_pack(const float* w, int N, int K, float* packed) {
  for (int n = 0; n < N; ++n) {
    float* block = packed + static_cast<size_t>(n / kF32Cols) * K * kF32Cols;
    for (int k = 0; k < K; ++k) block[k * kF32Cols + n % kF32Cols] = w[static_cast<size_t>(n) * K + k];
  }
}

template <int MR, int NB>
void f32_tile(const F32GemmArgs& g, int m0, int block0) {
  __m256 acc[MR][NB];
  _Pragma("GCC unroll 16")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_ps();
  const float* b = g.b + static_cast<size_t>(block0) * g.K * kF32Cols;
  const float* a = g.a + m0 * g.a_stride;
  for (int k = 0; k < g.K; ++k) {
    __m256 bv[NB];
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) bv[j] = _mm256_load_ps(b + (static_cast<size_t>(j) * g.K + k) * kF32Cols);
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i) {
      __m256 av = _mm256_broadcast_ss(a + i * g.a_stride + k);
      _Pragma("GCC unroll 16")
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  _Pragma("GCC unroll 16")
  for (int j = 0; j < NB; ++j) {
    int n0 = (block0 + j) * kF32Cols;
    int remaining = g.N - n0;
    __m256 bias = g.bias ? load_tail(g.bias + n0, remaining, _mm256_setzero_ps()) : _mm256_setzero_ps();
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i) {
      __m256 v = _mm256_add_ps(acc[i][j], bias);
      if (g.relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
      store_tail(g.c + (m0 + i) * g.c_stride + n0, remaining, v);
    }
  }
}

struct F32Tiles {
  const F32GemmArgs& g;
  template <int MR, int NB>
  void run(int m, int block) const { f32_tile<MR, NB>(g, m, block); }
};

void f32_gemm(const F32GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  // 6 rows x 2 blocks: 12 accumulators, enough to cover FMA latency on two ports.
  if (m_end - m_begin <= 2)
    run_panels<2, 4>(F32Tiles{g}, m_begin, m_end, block_begin, block_end);
  else
    run_panels<6, 2>(F32Tiles{g}, m_begin, m_end, block_begin, block_end);
}

void f32_small_gemm(int M, int N, int K, float alpha, const float* a, size_t lda,
                    const float* b, size_t ldb, bool b_transposed, float* c, size_t ldc,
                    bool accumulate) {
  const __m256 valpha = _mm256_set1_ps(alpha);
  const __m256 zero = _mm256_setzero_ps();
  if (!b_transposed) {
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; n += 8) {
        __m256 acc = zero;
        for (int k = 0; k < K; ++k)
          acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + m * lda + k), load_tail(b + k * ldb + n, N - n, zero), acc);
        acc = _mm256_mul_ps(acc, valpha);
        float* out = c + m * ldc + n;
        if (accumulate) acc = _mm256_add_ps(acc, load_tail(out, N - n, zero));
        store_tail(out, N - n, acc);
      }
    }
    return;
  }
  for (int m = 0; m < M; ++m) {
    const float* arow = a + m * lda;
    for (int n = 0; n < N; ++n) {
      const float* brow = b + n * ldb;
      __m256 acc = zero;
      for (int k = 0; k < K; k += 8)
        acc = _mm256_fmadd_ps(load_tail(arow + k, K - k, zero), load_tail(brow + k, K - k, zero), acc);
      float v = alpha * hsum(acc);
      float* out = c + m * ldc + n;
      *out = accumulate ? *out + v : v;
    }
  }
}

// ---------------------------------------------------------------- layer norm
void layer_norm(const float* x, int rows, int d, const float* gamma, const float* beta, float* y,
                float eps) {
  const __m256 zero = _mm256_setzero_ps();
  for (int r = 0; r < rows; ++r) {
    const float* in = x + static_cast<size_t>(r) * d;
    float* out = y + static_cast<size_t>(r) * d;
    __m256 sum = zero;
    for (int i = 0; i < d; i += 8) sum = _mm256_add_ps(sum, load_tail(in + i, d - i, zero));
    const float mean = hsum(sum) / static_cast<float>(d);
    const __m256 vmean = _mm256_set1_ps(mean);
    __m256 sq = zero;
    for (int i = 0; i < d; i += 8) {
      __m256 mask = _mm256_castsi256_ps(tail_mask8(d - i));
      __m256 c = _mm256_and_ps(_mm256_sub_ps(load_tail(in + i, d - i, zero), vmean), mask);
      sq = _mm256_fmadd_ps(c, c, sq);
    }
    const __m256 inv = _mm256_set1_ps(1.f / std::sqrt(hsum(sq) / static_cast<float>(d) + eps));
    for (int i = 0; i < d; i += 8) {
      __m256 c = _mm256_mul_ps(_mm256_sub_ps(load_tail(in + i, d - i, zero), vmean), inv);
      store_tail(out + i, d - i, _mm256_fmadd_ps(c, load_tail(gamma + i, d - i, zero), load_tail(beta + i, d - i, zero)));
    }
  }
}

// ---------------------------------------------------------------- rows of scores
// Block maxima as in the AVX-512 path (see argmax_avx512): the running value stays in
// MAXPS's second operand so NaN never enters.
inline __m256 block_max(const float* p, int64_t count, __m256 ninf) {
  if (count == 64) {
    __m256 c0 = _mm256_max_ps(_mm256_loadu_ps(p + 8), _mm256_max_ps(_mm256_loadu_ps(p), ninf));
    __m256 c1 = _mm256_max_ps(_mm256_loadu_ps(p + 24), _mm256_max_ps(_mm256_loadu_ps(p + 16), ninf));
    __m256 c2 = _mm256_max_ps(_mm256_loadu_ps(p + 40), _mm256_max_ps(_mm256_loadu_ps(p + 32), ninf));
    __m256 c3 = _mm256_max_ps(_mm256_loadu_ps(p + 56), _mm256_max_ps(_mm256_loadu_ps(p + 48), ninf));
    return _mm256_max_ps(_mm256_max_ps(c0, c1), _mm256_max_ps(c2, c3));
  }
  __m256 c = ninf;
  for (int64_t i = 0; i < count; i += 8) c = _mm256_max_ps(load_tail(p + i, count - i, ninf), c);
  return c;
}

int64_t argmax(const float* x, int64_t n) {
  constexpr int64_t kBlock = 64;
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 run = ninf;
  __m256i run_block = _mm256_setzero_si256();
  int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 m = block_max(x + b * kBlock, std::min(kBlock, n - b * kBlock), ninf);
    __m256 greater = _mm256_cmp_ps(m, run, _CMP_GT_OQ);
    if (_mm256_movemask_ps(greater)) {
      run = _mm256_blendv_ps(run, m, greater);
      run_block = _mm256_castps_si256(_mm256_blendv_ps(
          _mm256_castsi256_ps(run_block), _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(b))), greater));
    }
  }
  float best = hmax(run);
  if (!(best > -std::numeric_limits<float>::infinity())) return argmax_without_finite_max(x, n);
  alignas(32) float lane_max[8];
  alignas(32) int32_t lane_block[8];
  _mm256_store_ps(lane_max, run);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane_block), run_block);
  int64_t block = blocks;
  for (int i = 0; i < 8; ++i)
    if (lane_max[i] == best) block = std::min<int64_t>(block, lane_block[i]);
  return find_first_equal(x, block * kBlock, std::min(n, (block + 1) * kBlock), best);
}

// exp(x); lanes below -87 (and NaN) give exactly 0.
inline __m256 exp8(__m256 x) {
  const __m256 floor_x = _mm256_set1_ps(-87.f);
  __m256 live = _mm256_cmp_ps(x, floor_x, _CMP_GE_OQ);
  x = _mm256_max_ps(x, floor_x);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  // 2^n through the exponent field; n >= -126 here because x >= -87.
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), live);
}

void softmax_rows(float* x, int rows, int n, size_t stride, const int* visible) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 zero = _mm256_setzero_ps();
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<size_t>(r) * stride;
    const int seen = std::min(visible[r], n);
    __m256 mx = ninf;
    for (int j = 0; j < seen; j += 8) mx = _mm256_max_ps(load_tail(row + j, seen - j, ninf), mx);
    const __m256 vmax = _mm256_set1_ps(hmax(mx));
    __m256 sum = zero;
    for (int j = 0; j < seen; j += 8) {
      // Lanes past `seen` load -inf: exp8 gives exactly 0 there.
      __m256 e = exp8(_mm256_sub_ps(load_tail(row + j, seen - j, ninf), vmax));
      store_tail(row + j, seen - j, e);
      sum = _mm256_add_ps(sum, e);
    }
    const __m256 inv = _mm256_set1_ps(1.f / hsum(sum));
    for (int j = 0; j < seen; j += 8) store_tail(row + j, seen - j, _mm256_mul_ps(load_tail(row + j, seen - j, zero), inv));
    std::fill(row + seen, row + n, 0.f);
  }
}

RowStats row_stats(const float* x, int64_t n, int k, int64_t* top_ids, float* top_values) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  RowStats s;
  __m256 run = ninf;
  for (int64_t b = 0; b < n; b += 64) run = _mm256_max_ps(block_max(x + b, std::min<int64_t>(64, n - b), ninf), run);
  s.max = hmax(run);
  TopK top{k, 0, top_ids, top_values};
  if (!(s.max > -std::numeric_limits<float>::infinity())) {
    top.fill_from(x, n);
    s.log_sum_exp = s.max;
    return s;
  }
  const __m256 vmax = _mm256_set1_ps(s.max);
  __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __m256 v0 = load_tail(x + i, n - i, ninf);
    __m256 v1 = load_tail(x + i + 8, n - i - 8, ninf);
    sum0 = _mm256_add_ps(sum0, exp8(_mm256_sub_ps(v0, vmax)));
    sum1 = _mm256_add_ps(sum1, exp8(_mm256_sub_ps(v1, vmax)));
    if (k == 0) continue;
    __m256 thr = _mm256_set1_ps(top.threshold());
    unsigned cand = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v0, thr, _CMP_GT_OQ))) |
                    (static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v1, thr, _CMP_GT_OQ))) << 8);
    while (cand) {
      int lane = __builtin_ctz(cand);
      cand &= cand - 1;
      top.offer(x[i + lane], i + lane);
    }
  }
  if (top.count < k) top.fill_from(x, n);
  s.log_sum_exp = s.max + std::log(hsum(_mm256_add_ps(sum0, sum1)));
  return s;
}

}  // namespace

const KernelTable& kernels_avx2() {
  static const KernelTable table = {
      Isa::kAvx2, "avx2",
      kCols, packed_bytes, pack, a_row_bytes, quantize, gemm, gemm_columns,
      kF32Cols, f32_packed_floats, f32_pack, f32_gemm, f32_small_gemm,
      layer_norm, add_layer_norm_rows<layer_norm>, softmax_rows, argmax, row_stats};
  return table;
}

}  // namespace fastdec
