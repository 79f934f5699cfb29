// Token embeddings: x = E[id] * sqrt(d) + PE(position), with the sinusoidal position
// encoding of export/modeling.py or of a converted model (config.json "positions"),
// and the loading of the tied embedding / output matrix that E shares with the output
// layer.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kernel_table.h"
#include "layers/linear.h"
#include "layers/positions.h"
#include "model/weights.h"

namespace fastdec {

class Embedding {
 public:
  Embedding() = default;
  // rows: [vocab, d] float (an int8 model's int8 rows dequantised).
  Embedding(std::vector<float> rows, int d, PositionEncoding positions);

  // out [d] = E[id] * sqrt(d) + PE(position). Grows the position table, so calls on one
  // Embedding must not overlap (the model's call mutex serialises them).
  void forward(int32_t id, int position, float* out);

 private:
  int d_ = 0;
  PositionEncoding encoding_ = PositionEncoding::kInterleaved;
  std::vector<float> rows_;       // [V, d]
  std::vector<float> positions_;  // [positions so far, d]: the table, grown on demand
};

// The embedding and the output layer over the same matrix (tied weights).
struct TiedEmbedding {
  Embedding input;
  Linear output;
};

// Reads embed.weight [vocab, d] (export/FORMAT.md). Float32 models use the float rows for
// both. In an int8 model the matrix is int8 per vocabulary row, stored so (embed.weight
// int8 + embed.weight_scale) or quantised here from a float32 embed.weight by the same
// rule; the output layer and the lookup then both read those int8 rows, so a directory
// and its int8-embedding conversion decode bit-identically. output_bias: [vocab].
TiedEmbedding load_tied_embedding(const KernelTable& kernels, const TensorLookup& lookup, int vocab, int d,
                                  bool int8, PositionEncoding positions, const float* output_bias);

}  // namespace fastdec
