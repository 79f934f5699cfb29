// AVX-512 kernels shared by the avx512 (AVX512BW) and vnni translation units; both
// compile this header with AVX512F/BW/DQ/VL enabled. Internal linkage: see isa_common.h.
#pragma once
#include <immintrin.h>

#include <algorithm>

#include "kernels/isa_common.h"

namespace fastdec {
namespace {

inline __mmask16 tail_mask16(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xffff)
                         : static_cast<__mmask16>((1u << remaining) - 1u);
}

// ---------------------------------------------------------------- quantisation
enum class QuantOut { kInt8, kShiftedUint8, kInt16 };

// Quantises rows of A to int8 values (same arithmetic as quantize_one) and stores them
// as signed bytes, as bytes + 128 (for VPDPBUSD's unsigned operand), or as int16.
template <QuantOut kOut>
void quantize_rows_avx512(const float* a, int M, int K, size_t lda, const float* scale_fixed,
                          uint8_t* out, size_t out_stride, float* a_dequant) {
  const __m512 lo = _mm512_set1_ps(-kQuantMax), hi = _mm512_set1_ps(kQuantMax);
  for (int m = 0; m < M; ++m) {
    const float* row = a + m * lda;
    float scale;
    if (scale_fixed) {
      scale = *scale_fixed;
    } else {
      // Four independent max chains (one was bound by MAXPS latency); max is exact and
      // NaN never enters (it sits in the first operand), so the order does not matter.
      __m512 mx[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      int k = 0;
      for (; k + 64 <= K; k += 64)
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; ++j) mx[j] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(row + k + 16 * j)), mx[j]);
      for (; k < K; k += 16) {
        __m512 v = _mm512_maskz_loadu_ps(tail_mask16(K - k), row + k);
        mx[0] = _mm512_max_ps(_mm512_abs_ps(v), mx[0]);
      }
      scale = activation_scale(_mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3]))));
    }
    a_dequant[m] = 1.f / scale;
    const __m512 vs = _mm512_set1_ps(scale);
    uint8_t* q = out + m * out_stride;
    int k = 0;
    if constexpr (kOut != QuantOut::kInt16) {
      // 64 values per store: two saturating packs (exact: the values are within +-127
      // already) and one dword permutation instead of four VPMOVDB and masked stores.
      // packs leave 128-bit lane L holding values 4L..4L+3 of each of the four vectors.
      const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      for (; k + 64 <= K; k += 64) {
        __m512i qi[4];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; ++j) {
          __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row + k + 16 * j), vs);
          qi[j] = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
        }
        __m512i bytes = _mm512_permutexvar_epi32(
            order, _mm512_packs_epi16(_mm512_packs_epi32(qi[0], qi[1]), _mm512_packs_epi32(qi[2], qi[3])));
        if constexpr (kOut == QuantOut::kShiftedUint8)
          bytes = _mm512_xor_si512(bytes, _mm512_set1_epi8(static_cast<char>(0x80)));
        _mm512_storeu_si512(q + k, bytes);
      }
    }
    for (; k < K; k += 16) {
      __mmask16 mask = tail_mask16(K - k);
      __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, row + k), vs);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      __m512i qi = _mm512_cvtps_epi32(v);  // round to nearest even
      if constexpr (kOut == QuantOut::kInt16) {
        _mm256_mask_storeu_epi16(q + 2 * k, mask, _mm512_cvtepi32_epi16(qi));
      } else {
        __m128i bytes = _mm512_cvtepi32_epi8(qi);
        if constexpr (kOut == QuantOut::kShiftedUint8)
          bytes = _mm_xor_si128(bytes, _mm_set1_epi8(static_cast<char>(0x80)));
        _mm_mask_storeu_epi8(q + k, mask, bytes);
      }
    }
  }
}

// ---------------------------------------------------------------- fp32 GEMM
// Packed weights: blocks of 16 output columns, [block][K][16].
constexpr int kF32Cols = 16;

size_t f32_packed_floats_avx512(int N, int K) {
  return round_up(static_cast<size_t>(N), kF32Cols) * static_cast<size_t>(K);
}

void f32_pack_avx512(const float* w, int N, int K, float* packed) {
  for (int n = 0; n < N; ++n) {
    float* block = packed + static_cast<size_t>(n / kF32Cols) * K * kF32Cols;
    for (int k = 0; k < K; ++k) block[k * kF32Cols + n % kF32Cols] = w[static_cast<size_t>(n) * K + k];
  }
}

template <int MR, int NB>
void f32_tile_avx512(const F32GemmArgs& g, int m0, int block0) {
  __m512 acc[MR][NB];
  _Pragma("GCC unroll 16")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  const float* b = g.b + static_cast<size_t>(block0) * g.K * kF32Cols;
  const float* a = g.a + m0 * g.a_stride;
  for (int k = 0; k < g.K; ++k) {
    __m512 bv[NB];
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) bv[j] = _mm512_load_ps(b + (static_cast<size_t>(j) * g.K + k) * kF32Cols);
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i) {
      __m512 av = _mm512_set1_ps(a[i * g.a_stride + k]);
      _Pragma("GCC unroll 16")
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  _Pragma("GCC unroll 16")
  for (int j = 0; j < NB; ++j) {
    int n0 = (block0 + j) * kF32Cols;
    __mmask16 mask = tail_mask16(g.N - n0);
    __m512 bias = g.bias ? _mm512_maskz_loadu_ps(mask, g.bias + n0) : _mm512_setzero_ps();
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i) {
      __m512 v = _mm512_add_ps(acc[i][j], bias);
      if (g.relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
      _mm512_mask_storeu_ps(g.c + (m0 + i) * g.c_stride + n0, mask, v);
    }
  }
}

struct F32Tiles {
  const F32GemmArgs& g;
  template <int MR, int NB>
  void run(int m, int block) const { f32_tile_avx512<MR, NB>(g, m, block); }
};

void f32_gemm_avx512(const F32GemmArgs& g, int m_begin, int m_end, int block_begin,
                     int block_end) {
  // 8 rows x 3 blocks = 24 accumulators of 32 registers; few rows keep 4 blocks in flight.
  if (m_end - m_begin <= 4)
    run_panels<4, 4>(F32Tiles{g}, m_begin, m_end, block_begin, block_end);
  else
    run_panels<8, 3>(F32Tiles{g}, m_begin, m_end, block_begin, block_end);
}

// C rows [m, m + MR) x columns [n, n + 16 * NC) of alpha * A · B, B row-major [K, N]:
// MR x NC accumulators so the K loop has independent FMA chains (attention has short
// K and few rows; one chain per output vector was latency-bound).
template <int MR, int NC>
void small_nn_tile(int m, int n, int N, int K, float alpha, const float* a, size_t lda, const float* b,
                   size_t ldb, float* c, size_t ldc, bool accumulate) {
  __m512 acc[MR][NC];
  __mmask16 mask[NC];
  _Pragma("GCC unroll 4")
  for (int j = 0; j < NC; ++j) mask[j] = tail_mask16(N - n - 16 * j);
  _Pragma("GCC unroll 8")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 4")
    for (int j = 0; j < NC; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int k = 0; k < K; ++k) {
    __m512 bv[NC];
    _Pragma("GCC unroll 4")
    for (int j = 0; j < NC; ++j) bv[j] = _mm512_maskz_loadu_ps(mask[j], b + k * ldb + n + 16 * j);
    _Pragma("GCC unroll 8")
    for (int i = 0; i < MR; ++i) {
      __m512 av = _mm512_set1_ps(a[(m + i) * lda + k]);
      _Pragma("GCC unroll 4")
      for (int j = 0; j < NC; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  const __m512 valpha = _mm512_set1_ps(alpha);
  _Pragma("GCC unroll 8")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 4")
    for (int j = 0; j < NC; ++j) {
      float* out = c + (m + i) * ldc + n + 16 * j;
      __m512 v = _mm512_mul_ps(acc[i][j], valpha);
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[j], out));
      _mm512_mask_storeu_ps(out, mask[j], v);
    }
}

template <int MR>
void small_nn_rows(int m, int N, int K, float alpha, const float* a, size_t lda, const float* b, size_t ldb,
                   float* c, size_t ldc, bool accumulate) {
  int n = 0;
  for (; n + 64 <= N; n += 64) small_nn_tile<MR, 4>(m, n, N, K, alpha, a, lda, b, ldb, c, ldc, accumulate);
  for (; n < N; n += 16) small_nn_tile<MR, 1>(m, n, N, K, alpha, a, lda, b, ldb, c, ldc, accumulate);
}

void small_nn(int M, int N, int K, float alpha, const float* a, size_t lda, const float* b, size_t ldb,
              float* c, size_t ldc, bool accumulate) {
  int m = 0;
  for (; m + 4 <= M; m += 4) small_nn_rows<4>(m, N, K, alpha, a, lda, b, ldb, c, ldc, accumulate);
  for (; m < M; ++m) small_nn_rows<1>(m, N, K, alpha, a, lda, b, ldb, c, ldc, accumulate);
}

// In-register transpose of a 16 x 16 block: r[i] lane j becomes r[j] lane i.
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
  _Pragma("GCC unroll 8")
  for (int i = 0; i < 8; ++i) {  // per 128-bit chunk c: rows 2i, 2i+1 at columns 4c, 4c+1 / 4c+2, 4c+3
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  _Pragma("GCC unroll 4")
  for (int i = 0; i < 4; ++i) {  // r[4i + j], chunk c: rows 4i .. 4i+3 at column 4c + j
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  _Pragma("GCC unroll 4")
  for (int j = 0; j < 4; ++j) {  // gather chunk c of r[j], r[4+j], r[8+j], r[12+j]: column 4c + j
    __m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
    __m512 u2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88), u3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
    t[j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    t[8 + j] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    t[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
  _Pragma("GCC unroll 16")
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// bt[K, N] = b[N, K]^T (ldb between rows of b), 16 x 16 blocks in registers. Cross
// attention transposes every row's keys per head and layer at each step; one scalar
// copy per element made this transpose most of f32_small_gemm's own time.
void transpose_avx512(const float* b, size_t ldb, int N, int K, float* bt) {
  for (int n0 = 0; n0 < N; n0 += 16) {
    const int rows = std::min(16, N - n0);
    const __mmask16 row_mask = tail_mask16(rows);
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int cols = std::min(16, K - k0);
      const __mmask16 col_mask = tail_mask16(cols);
      __m512 r[16];
      _Pragma("GCC unroll 16")
      for (int i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(col_mask, b + (n0 + i) * ldb + k0) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int j = 0; j < cols; ++j) _mm512_mask_storeu_ps(bt + static_cast<size_t>(k0 + j) * N + n0, row_mask, r[j]);
    }
  }
}

void f32_small_gemm_avx512(int M, int N, int K, float alpha, const float* a, size_t lda,
                           const float* b, size_t ldb, bool b_transposed, float* c,
                           size_t ldc, bool accumulate) {
  if (!b_transposed) {
    small_nn(M, N, K, alpha, a, lda, b, ldb, c, ldc, accumulate);
    return;
  }
  // Transpose B once ([N, K] -> [K, N]) and run the vectorised NN kernel, instead of
  // one horizontal sum per output. Every output is then the same FMA sequence over k
  // whatever M is, so a position's scores do not depend on how many query positions
  // share the call: a verified draft sees exactly the numbers greedy steps see.
  thread_local AlignedBuffer<float> transposed;
  float* bt = transposed.reserve_scratch(static_cast<size_t>(K) * N);
  transpose_avx512(b, ldb, N, K, bt);
  small_nn(M, N, K, alpha, a, lda, bt, static_cast<size_t>(N), c, ldc, accumulate);
}

// ---------------------------------------------------------------- layer norm
void layer_norm_avx512(const float* x, int rows, int d, const float* gamma, const float* beta,
                       float* y, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + static_cast<size_t>(r) * d;
    float* out = y + static_cast<size_t>(r) * d;
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(tail_mask16(d - i), in + i));
    const float mean = _mm512_reduce_add_ps(sum) / static_cast<float>(d);
    const __m512 vmean = _mm512_set1_ps(mean);
    __m512 sq = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
      __mmask16 m = tail_mask16(d - i);
      __m512 c = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, in + i), vmean);
      sq = _mm512_fmadd_ps(c, c, sq);
    }
    const __m512 inv = _mm512_set1_ps(1.f / std::sqrt(_mm512_reduce_add_ps(sq) / static_cast<float>(d) + eps));
    for (int i = 0; i < d; i += 16) {
      __mmask16 m = tail_mask16(d - i);
      __m512 c = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, in + i), vmean), inv);
      _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(c, _mm512_maskz_loadu_ps(m, gamma + i),
                                                         _mm512_maskz_loadu_ps(m, beta + i)));
    }
  }
}

// ---------------------------------------------------------------- rows of scores
// Max of up to 16 floats per lane, NaN-free: MAXPS returns its second operand when
// either is NaN, so the running value always sits in the second operand.
inline __m512 max_keep_second(__m512 x, __m512 running) { return _mm512_max_ps(x, running); }

// Floats per argmax block: 16 vectors, loaded into 8 independent max chains so the
// loads, not the MAXPS latency, set the pace (measured at the L2 read bandwidth).
constexpr int64_t kArgmaxBlock = 256;

// Lane-wise max over `count` floats at p (count <= kArgmaxBlock); NaN and padding ignored.
inline __m512 block_max_avx512(const float* p, int64_t count, __m512 ninf) {
  if (count == kArgmaxBlock) {
    __m512 c[8];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; ++j) c[j] = max_keep_second(_mm512_loadu_ps(p + 16 * j), ninf);
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; ++j) c[j] = max_keep_second(_mm512_loadu_ps(p + 128 + 16 * j), c[j]);
    return _mm512_max_ps(_mm512_max_ps(_mm512_max_ps(c[0], c[1]), _mm512_max_ps(c[2], c[3])),
                         _mm512_max_ps(_mm512_max_ps(c[4], c[5]), _mm512_max_ps(c[6], c[7])));
  }
  __m512 c = ninf;
  for (int64_t i = 0; i < count; i += 16)
    c = max_keep_second(_mm512_mask_loadu_ps(ninf, tail_mask16(count - i), p + i), c);
  return c;
}

// One pass of block maxima: per lane, the running max and the first block reaching it.
// The first occurrence of the global max lies in the smallest block recorded by a lane
// holding that max, so only that block is scanned again.
int64_t argmax_avx512(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 run = ninf;
  __m512i run_block = _mm512_setzero_si512();
  int64_t blocks = (n + kArgmaxBlock - 1) / kArgmaxBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    __m512 m = block_max_avx512(x + b * kArgmaxBlock, std::min(kArgmaxBlock, n - b * kArgmaxBlock), ninf);
    __mmask16 greater = _mm512_cmp_ps_mask(m, run, _CMP_GT_OQ);
    if (greater) {
      run = _mm512_mask_mov_ps(run, greater, m);
      run_block = _mm512_mask_mov_epi32(run_block, greater, _mm512_set1_epi32(static_cast<int>(b)));
    }
  }
  float best = _mm512_reduce_max_ps(run);
  if (!(best > -std::numeric_limits<float>::infinity())) return argmax_without_finite_max(x, n);
  __mmask16 holders = _mm512_cmp_ps_mask(run, _mm512_set1_ps(best), _CMP_EQ_OQ);
  int64_t block = _mm512_mask_reduce_min_epi32(holders, run_block);
  return find_first_equal(x, block * kArgmaxBlock, std::min(n, (block + 1) * kArgmaxBlock), best);
}

// exp(x) for x <= ~88; lanes below -87 (and NaN) give exactly 0.
inline __m512 exp_avx512(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  // Taylor to degree 6 on |r| <= ln2/2: relative error below 2e-7.
  __m512 p = _mm512_set1_ps(1.f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}

void softmax_rows_avx512(float* x, int rows, int n, size_t stride, const int* visible) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<size_t>(r) * stride;
    const int seen = std::min(visible[r], n);
    __m512 mx = ninf;
    for (int j = 0; j < seen; j += 16) mx = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail_mask16(seen - j), row + j), mx);
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < seen; j += 16) {
      __mmask16 m = tail_mask16(seen - j);
      __m512 e = _mm512_maskz_mov_ps(m, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), vmax)));
      _mm512_mask_storeu_ps(row + j, m, e);
      sum = _mm512_add_ps(sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(sum));
    for (int j = 0; j < seen; j += 16) {
      __mmask16 m = tail_mask16(seen - j);
      _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), inv));
    }
    std::fill(row + seen, row + n, 0.f);
  }
}

RowStats row_stats_avx512(const float* x, int64_t n, int k, int64_t* top_ids,
                          float* top_values) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  RowStats s;
  // Pass 1: the maximum.
  __m512 run = ninf;
  for (int64_t b = 0; b < n; b += kArgmaxBlock)
    run = _mm512_max_ps(block_max_avx512(x + b, std::min(kArgmaxBlock, n - b), ninf), run);
  s.max = _mm512_reduce_max_ps(run);
  TopK top{k, 0, top_ids, top_values};
  if (!(s.max > -std::numeric_limits<float>::infinity())) {
    top.fill_from(x, n);
    s.log_sum_exp = s.max;
    return s;
  }
  // Pass 2: sum of exp(x - max), and candidates above the current k-th value.
  const __m512 vmax = _mm512_set1_ps(s.max);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 32) {
    __mmask16 m0 = tail_mask16(n - i), m1 = tail_mask16(std::max<int64_t>(0, n - i - 16));
    __m512 v0 = _mm512_mask_loadu_ps(ninf, m0, x + i);
    __m512 v1 = _mm512_mask_loadu_ps(ninf, m1, x + i + 16);
    sum0 = _mm512_add_ps(sum0, exp_avx512(_mm512_sub_ps(v0, vmax)));
    sum1 = _mm512_add_ps(sum1, exp_avx512(_mm512_sub_ps(v1, vmax)));
    if (k == 0) continue;
    __m512 thr = _mm512_set1_ps(top.threshold());
    uint32_t cand = _mm512_cmp_ps_mask(v0, thr, _CMP_GT_OQ) |
                    (static_cast<uint32_t>(_mm512_cmp_ps_mask(v1, thr, _CMP_GT_OQ)) << 16);
    while (cand) {
      int lane = __builtin_ctz(cand);
      cand &= cand - 1;
      top.offer(x[i + lane], i + lane);
    }
  }
  if (top.count < k) top.fill_from(x, n);
  s.log_sum_exp = s.max + std::log(_mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1)));
  return s;
}

}  // namespace
}  // namespace fastdec
