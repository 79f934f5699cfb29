#include "layers/embedding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "kernels/op_profile.h"

namespace fastdec {

Embedding::Embedding(std::vector<float> rows, int d, PositionEncoding positions)
    : d_(d), encoding_(positions), rows_(std::move(rows)) {}

void Embedding::forward(int32_t id, int position, float* out) {
  OpTimer timer(Op::kEmbed);
  const int d = d_;
  size_t have = positions_.size() / static_cast<size_t>(d);
  if (static_cast<size_t>(position) >= have) {
    // Grown in doubling steps: sin/cos per embedded token cost more than the rest of an
    // int8 decoder step.
    size_t rows = std::max<size_t>(static_cast<size_t>(position) + 1, 2 * have);
    positions_.resize(rows * d);
    position_rows(encoding_, d, have, rows, positions_.data() + have * d);
  }
  const float scale = std::sqrt(static_cast<float>(d));
  const float* e = rows_.data() + static_cast<size_t>(id) * d;
  const float* pe = positions_.data() + static_cast<size_t>(position) * d;
  for (int i = 0; i < d; ++i) out[i] = e[i] * scale + pe[i];
}

TiedEmbedding load_tied_embedding(const KernelTable& kernels, const TensorLookup& lookup, int vocab, int d,
                                  bool int8, PositionEncoding positions, const float* output_bias) {
  const int V = vocab;
  TensorView e = lookup("embed.weight");
  if (e.dtype == "int8" && !int8)
    throw std::invalid_argument("tensor 'embed.weight': int8 in a float32 model (config quantization null); "
                                "expected float32");
  std::vector<float> rows;
  if (!int8) {
    e = expect_tensor(lookup, "embed.weight", "float32", {V, d});
    rows.assign(e.f32(), e.f32() + e.numel());
    Linear output = Linear::from_float(kernels, rows.data(), V, d, output_bias);
    return {Embedding(std::move(rows), d, positions), std::move(output)};
  }
  const size_t n = static_cast<size_t>(V) * d;
  std::vector<int8_t> q_owned;
  std::vector<float> scales_owned;
  const int8_t* q;
  const float* scales;
  if (e.dtype == "int8") {
    e = expect_tensor(lookup, "embed.weight", "int8", {V, d});
    TensorView s = expect_tensor(lookup, "embed.weight_scale", "float32", {V});
    q = e.i8();
    scales = s.f32();
  } else {
    e = expect_tensor(lookup, "embed.weight", "float32", {V, d});
    q_owned.resize(n);
    scales_owned.resize(static_cast<size_t>(V));
    quantize_rows(e.f32(), V, d, q_owned.data(), scales_owned.data());
    q = q_owned.data();
    scales = scales_owned.data();
  }
  rows.resize(n);
  for (int r = 0; r < V; ++r)
    for (int k = 0; k < d; ++k) {
      size_t i = static_cast<size_t>(r) * d + k;
      rows[i] = static_cast<float>(q[i]) * scales[r];
    }
  // A row-major copy is kept so per-row shortlists can compute only their candidates.
  Linear output = Linear::from_int8(kernels, q, scales, V, d, output_bias, true);
  return {Embedding(std::move(rows), d, positions), std::move(output)};
}

}  // namespace fastdec
