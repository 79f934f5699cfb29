// AVX512-VNNI kernels: int8 GEMM with VPDPBUSD (unsigned activations x signed weights,
// four products summed straight into int32, so nothing saturates). Activations are
// stored shifted by +128; the shift's contribution, 128 * sum_k w[n,k], is removed in
// the epilogue (I8GemmArgs::b_shift_correction).
#include "kernels/avx512_common.h"

namespace fastdec {
namespace {

constexpr int kCols = 16;  // output columns per packed block (one zmm of int32)

// Packed weights: per block of 16 columns, per group of 4 k: 16 x 4 bytes, so one
// 64-byte load feeds one VPDPBUSD for 16 columns. K is padded to a multiple of 4.
size_t k_quads(int K) { return round_up(static_cast<size_t>(K), 4) / 4; }

size_t packed_bytes(int N, int K) {
  return round_up(static_cast<size_t>(N), kCols) * k_quads(K) * 4;
}

void pack(const int8_t* w, int N, int K, int8_t* packed) {
  size_t quads = k_quads(K);
  for (int n = 0; n < N; ++n) {
    int8_t* block = packed + static_cast<size_t>(n / kCols) * quads * 64 + (n % kCols) * 4;
    const int8_t* row = w + static_cast<size_t>(n) * K;
    // Whole quads 4 bytes at a time (the shortlist's union blocks are packed per batch).
    int k = 0;
    for (; k + 4 <= K; k += 4) std::memcpy(block + (k / 4) * 64, row + k, 4);
    for (; k < K; ++k) block[(k / 4) * 64 + k % 4] = row[k];
  }
}

// Rows padded to 64 bytes: full loads in the column-subset kernel.
size_t a_row_bytes(int K) { return round_up(static_cast<size_t>(K), 64); }

void quantize(const float* a, int M, int K, size_t lda, const float* scale_fixed,
              uint8_t* out, size_t out_stride, float* a_dequant) {
  quantize_rows_avx512<QuantOut::kShiftedUint8>(a, M, K, lda, scale_fixed, out, out_stride,
                                                a_dequant);
}

// acc += a (unsigned bytes) · b (signed bytes), accumulated in place. Written as asm
// because GCC 12 treats the intrinsic's accumulator as a fresh value and surrounds
// every VPDPBUSD with register copies (and spills), which left the front end, not the
// VNNI ports, as the bottleneck.
inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %[b], %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [b] "v"(b));
}

inline __m512i broadcast_quad(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Epilogue shared by both kernels, lane for lane the same arithmetic as dequantize_one.
inline __m512 dequantize16(__m512i acc, __m512i correction, float a_dequant, __m512 b_dequant,
                           __m512 bias, bool relu) {
  __m512 scale = _mm512_mul_ps(_mm512_set1_ps(a_dequant), b_dequant);
  __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc, correction)), scale), bias);
  return relu ? _mm512_max_ps(v, _mm512_setzero_ps()) : v;
}

template <int MR, int NB>
void tile(const I8GemmArgs& g, int m0, int block0) {
  __m512i acc[MR][NB];
  _Pragma("GCC unroll 16")
  for (int i = 0; i < MR; ++i)
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_si512();
  const size_t quads = k_quads(g.K);
  const int8_t* b = g.b + static_cast<size_t>(block0) * quads * 64;
  const uint8_t* a = g.a + m0 * g.a_stride;
  for (size_t q = 0; q < quads; ++q) {
    __m512i bv[NB];
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NB; ++j) bv[j] = _mm512_load_si512(b + (j * quads + q) * 64);
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i) {
      __m512i av = broadcast_quad(a + i * g.a_stride + q * 4);
      _Pragma("GCC unroll 16")
      for (int j = 0; j < NB; ++j) dpbusd(acc[i][j], av, bv[j]);
    }
  }
  _Pragma("GCC unroll 16")
  for (int j = 0; j < NB; ++j) {
    int n0 = (block0 + j) * kCols;
    __mmask16 mask = tail_mask16(g.N - n0);
    __m512i corr = _mm512_maskz_loadu_epi32(mask, g.b_shift_correction + n0);
    __m512 bdq = _mm512_maskz_loadu_ps(mask, g.b_dequant + n0);
    __m512 bias = g.bias ? _mm512_maskz_loadu_ps(mask, g.bias + n0) : _mm512_setzero_ps();
    _Pragma("GCC unroll 16")
    for (int i = 0; i < MR; ++i)
      _mm512_mask_storeu_ps(g.c + (m0 + i) * g.c_stride + n0, mask,
                            dequantize16(acc[i][j], corr, g.a_dequant[m0 + i], bdq, bias, g.relu));
  }
}

struct Tiles {
  const I8GemmArgs& g;
  template <int MR, int NB>
  void run(int m, int block) const { tile<MR, NB>(g, m, block); }
};

void gemm(const I8GemmArgs& g, int m_begin, int m_end, int block_begin, int block_end) {
  // 16 accumulators in every shape (latency 5 x 2 ports needs >= 10). 8 x 3 tiles
  // measured slower than 4 x 4. One row streams its weights: 8 blocks in flight.
  if (m_end - m_begin == 1)
    run_panels<1, 8>(Tiles{g}, m_begin, m_end, block_begin, block_end);
  else
    run_panels<4, 4>(Tiles{g}, m_begin, m_end, block_begin, block_end);
}

// Lane c of the result = the sum of the 16 lanes of v[c]. A transposing tree of adds:
// 15 vector adds for 16 sums instead of one horizontal reduction per sum.
inline __m512i sum_lanes16(const __m512i v[16]) {
  __m512i pairs[8], quads[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3)
    pairs[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: that lane's sums of 4 consecutive vectors
    quads[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(pairs[2 * i], pairs[2 * i + 1]),
                                _mm512_unpackhi_epi64(pairs[2 * i], pairs[2 * i + 1]));
  __m512i halves[2];
  for (int i = 0; i < 2; ++i)  // 128-bit lanes: q[2i] lanes 0+1, 2+3, then q[2i+1]'s
    halves[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1], 0x88),
                                 _mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1], 0xDD));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(halves[0], halves[1], 0x88),
                          _mm512_shuffle_i32x4(halves[0], halves[1], 0xDD));
}

// Rows [m, m + rows) share one column list (the positions one verification step appends
// to a row all use the row's shortlist). Columns go 16 at a time, every row of the group
// reusing them from L1, with one vector epilogue per 16 columns. Every output is the same
// exact int32 dot product and the same epilogue arithmetic (dequantize16 is
// dequantize_one lane for lane) as one column at a time.
void columns_of_rows(const I8ColumnsArgs& g, int m, int rows, size_t kbytes) {
  const int64_t begin = g.offsets[m], count = g.offsets[m + 1] - begin;
  int64_t j = 0;
  for (; j + 16 <= count; j += 16) {
    const int32_t* cols = g.cols + begin + j;
    const int8_t* w[16];
    for (int c = 0; c < 16; ++c) w[c] = g.b_rows + cols[c] * g.b_row_stride;
    const __m512i idx = _mm512_loadu_si512(cols);
    const __m512i corr = _mm512_i32gather_epi32(idx, g.b_shift_correction, 4);
    const __m512 bdq = _mm512_i32gather_ps(idx, g.b_dequant, 4);
    const __m512 bias = g.bias ? _mm512_i32gather_ps(idx, g.bias, 4) : _mm512_setzero_ps();
    for (int i = 0; i < rows; ++i) {
      const uint8_t* a = g.a + (m + i) * g.a_stride;
      __m512i acc[16];
      _Pragma("GCC unroll 16")
      for (int c = 0; c < 16; ++c) acc[c] = _mm512_setzero_si512();
      for (size_t k = 0; k < kbytes; k += 64) {
        __m512i av = _mm512_load_si512(a + k);
        _Pragma("GCC unroll 16")
        for (int c = 0; c < 16; ++c) dpbusd(acc[c], av, _mm512_load_si512(w[c] + k));
      }
      _mm512_storeu_ps(g.c + g.offsets[m + i] + j,
                       dequantize16(sum_lanes16(acc), corr, g.a_dequant[m + i], bdq, bias, false));
    }
  }
  for (; j < count; ++j) {  // the last < 16 columns, one at a time
    int n = g.cols[begin + j];
    const int8_t* w = g.b_rows + n * g.b_row_stride;
    for (int i = 0; i < rows; ++i) {
      const uint8_t* a = g.a + (m + i) * g.a_stride;
      __m512i acc = _mm512_setzero_si512();
      for (size_t k = 0; k < kbytes; k += 64) dpbusd(acc, _mm512_load_si512(a + k), _mm512_load_si512(w + k));
      int32_t dot = _mm512_reduce_add_epi32(acc) - g.b_shift_correction[n];
      g.c[g.offsets[m + i] + j] = dequantize_one(dot, g.a_dequant[m + i], g.b_dequant[n], g.bias ? g.bias[n] : 0.f, false);
    }
  }
}

// How many rows from m on (before m_end) have row m's column list.
int rows_sharing_columns(const I8ColumnsArgs& g, int m, int m_end) {
  const int64_t count = g.offsets[m + 1] - g.offsets[m];
  const int32_t* cols = g.cols + g.offsets[m];
  int rows = 1;
  while (m + rows < m_end && g.offsets[m + rows + 1] - g.offsets[m + rows] == count &&
         std::memcmp(g.cols + g.offsets[m + rows], cols, sizeof(int32_t) * static_cast<size_t>(count)) == 0)
    ++rows;
  return rows;
}

void gemm_columns(const I8ColumnsArgs& g, int m_begin, int m_end) {
  const size_t kbytes = round_up(static_cast<size_t>(g.K), 64);
  for (int m = m_begin; m < m_end;) {
    int rows = rows_sharing_columns(g, m, m_end);
    columns_of_rows(g, m, rows, kbytes);
    m += rows;
  }
}

}  // namespace

const KernelTable& kernels_vnni() {
  static const KernelTable table = {
      Isa::kVnni, "avx512-vnni",
      kCols, packed_bytes, pack, a_row_bytes, quantize, gemm, gemm_columns,
      kF32Cols, f32_packed_floats_avx512, f32_pack_avx512, f32_gemm_avx512, f32_small_gemm_avx512,
      layer_norm_avx512, add_layer_norm_rows<layer_norm_avx512>, softmax_rows_avx512,
      argmax_avx512, row_stats_avx512};
  return table;
}

}  // namespace fastdec
