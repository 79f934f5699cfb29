// The sinusoidal position encodings (config.json "positions"), computed once for the CPU
// engine's Embedding and the GPU model's position table, so that both hold the same bits.
#pragma once
#include <cstddef>

namespace fastdec {

// Where sin and cos of a position's angles go in its row.
enum class PositionEncoding {
  kInterleaved,  // ours: PE(p, 2i) = sin, PE(p, 2i+1) = cos, frequency 10000^(-2i/d) in float
  kHalves,       // Hugging Face Marian: sin in the first half, cos in the second, in double
  kMarian,       // Marian C++: halves, frequency exp(-i ln(10000) / (d/2 - 1)) in float
};

// Rows [from, to) of the table: out[(p - from) * d + i] = PE(p, i).
void position_rows(PositionEncoding encoding, int d, size_t from, size_t to, float* out);

}  // namespace fastdec
