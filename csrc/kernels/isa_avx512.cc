// AVX-512 (F/BW/DQ/VL) kernels without VNNI. The int8 GEMM widens both operands to
// int16 and uses VPMADDWD (two products summed into int32): exact, where the usual
// VPMADDUBSW path saturates its 16-bit pair sums (255 * 127 * 2 > 32767).
#include "kernels/avx512_common.h"

namespace fastdec {
namespace {

constexpr int kCols = 16;

// Packed weights: per block of 16 columns, per pair of k: 16 x 2 bytes (32 bytes),
// widened to 32 int16 at run time. K is padded to a multiple of 2.
size_t k_pairs(int K) { return round_up(static_cast<size_t>(K), 2) / 2; }

size_t packed_bytes(int N, int K) {
  return round_up(static_cast<size_t>(N), kCols) * k_pairs(K) * 2;
}

void pack(const int8_t* w, int N, int K, int8_t* packed) {
  size_t pairs = k_pairs(K);
  for (int n = 0; n < N; ++n) {
    int8_t* block = packed + static_cast<size_t>(n / kCols) * pairs * 32 + (n % kCols) * 2;
    const int8_t* row = w + static_cast<size_t>(n) * K;
    // Whole pairs 2 bytes at a time (the shortlist's union blocks are packed per batch).
    int k = 0;
    for (; k + 2 <= K; k += 2) std::memcpy(block + (k / 2) * 32, row + k, 2);
    if (k < K) block[(k / 2) * 32] = row[k];
  }
}

// Activations as int16, rows padded to 64 values.
size_t a_row_bytes(int K) { return 2 * round_up(static_cast<size_t>(K), 64); }

void quantize(const float* a, int M, int K, size_t lda, const float* scale_fixed,
              uint8_t* out, size_t out_stride, float* a_dequant) {
  quantize_rows_avx512<QuantOut::kInt16>(a, M, K, lda, scale_fixed, out, out_stride, a_dequant);
}

inline __m512i broadcast_pair(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 dequantize16(__m512i acc, float a_dequant, __m512 b_dequant, __m512 bias, bool relu) {
  __m512 scale = _mm512_mul_ps(_mm512_set1_ps(a_dequant), b_dequant);
  __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale), bias);
  return relu ? _mm512_max_ps(v, _mm512_setzero_ps()) : v;
}

// A tile's k loop, kept out of its dequantising epilogue (noinline): compiled together,
// GCC kept 5 of the 6 x 3 tile's 18 accumulators in memory, a load-add-store on every k
// pair, as it did for the AVX2 tile (bench/README.md, "AVX2 int8 tiles: a spilled accumulator").
template <int MR, int NB>
__attribute__((noinline)) void accumulate(const I8GemmArgs& g, int m0, int block0, int32_t* sums) {
  __m512i acc[MR][NB];
  _Pragma("GCC unroll 16")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_si512();
  const size_t pairs = k_pairs(g.K);
  const int8_t* b = g.b + static_cast<size_t>(block0) * pairs * 32;
  const uint8_t* a = g.a + m0 * g.a_stride;
  for (size_t p = 0; p < pairs; ++p) {
    __m512i bv[NB];
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j)
      bv[j] = _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(b + (j * pairs + p) * 32)));
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i) {
      __m512i av = broadcast_pair(a + i * g.a_stride + p * 4);
      _Pragma("GCC unroll 16")
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_add_epi32(acc[i][j], _mm512_madd_epi16(av, bv[j]));
    }
  }
  _Pragma("GCC unroll 16")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) _mm512_store_si512(sums + (i * NB + j) * kCols, acc[i][j]);
}

template <int MR, int NB>
void tile(const I8GemmArgs& g, int m0, int block0) {
  alignas(64) int32_t sums[MR * NB * kCols];
  accumulate<MR, NB>(g, m0, block0, sums);
  _Pragma("GCC unroll 16")
  for (int j = 0; j < NB; ++j) {
    int n0 = (block0 + j) * kCols;
    __mmask16 mask = tail_mask16(g.N - n0);
    __m512 bdq = _mm512_maskz_loadu_ps(mask, g.b_dequant + n0);
    __m512 bias = g.bias ? _mm512_maskz_loadu_ps(mask, g.bias + n0) : _mm512_setzero_ps();
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i)
      _mm512_mask_storeu_ps(g.c + (m0 + i) * g.c_stride + n0, mask,
                            dequantize16(_mm512_load_si512(sums + (i * NB + j) * kCols),
                                         g.a_dequant[m0 + i], bdq, bias, g.relu));
  }
}

struct Tiles {
  const I8GemmArgs& g;
  template <int MR, int NB>
  void run(int m, int block) const { tile<MR, NB>(g, m, block); }
};

void gemm(const I8GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  // 6 rows x 3 blocks: 18 accumulators + 3 widened weight vectors + 1 broadcast.
  if (m_end - m_begin <= 2)
    run_panels<2, 6>(Tiles{g}, m_begin, m_end, block_begin, block_end);
  else
    run_panels<6, 3>(Tiles{g}, m_begin, m_end, block_begin, block_end);
}

void gemm_columns(const I8ColumnsArgs& g, int m_begin, int m_end) {
  const size_t kvalues = round_up(static_cast<size_t>(g.K), 64);
  for (int m = m_begin; m < m_end; ++m) {
    const uint8_t* a = g.a + m * g.a_stride;
    for (int64_t j = g.offsets[m]; j < g.offsets[m + 1]; ++j) {
      int n = g.cols[j];
      const int8_t* w = g.b_rows + n * g.b_row_stride;
      __m512i acc = _mm512_setzero_si512();
      for (size_t k = 0; k < kvalues; k += 32) {
        __m512i wv = _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(w + k)));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_load_si512(a + 2 * k), wv));
      }
      g.c[j] = dequantize_one(_mm512_reduce_add_epi32(acc), g.a_dequant[m], g.b_dequant[n],
                              g.bias ? g.bias[n] : 0.f, false);
    }
  }
}

}  // namespace

const KernelTable& kernels_avx512() {
  static const KernelTable table = {
      Isa::kAvx512, "avx512bw",
      kCols, packed_bytes, pack, a_row_bytes, quantize, gemm, gemm_columns,
      kF32Cols, f32_packed_floats_avx512, f32_pack_avx512, f32_gemm_avx512, f32_small_gemm_avx512,
      layer_norm_avx512, add_layer_norm_rows<layer_norm_avx512>, softmax_rows_avx512,
      argmax_avx512, row_stats_avx512};
  return table;
}

}  // namespace fastdec
