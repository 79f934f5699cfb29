// Encoder output (Memory) and decoder state, per row, so rows can leave a batch or be
// duplicated (beam search) independently. Caches grow with what is decoded.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace fastdec {

struct MemoryRow {
  std::vector<int32_t> source;               // ids, EOS included
  std::vector<std::vector<float>> cross_kv;  // per decoder layer: [source len, 2 * inner]
  std::vector<int32_t> shortlist;            // sorted candidate ids; empty = full vocab
};
using MemoryRowPtr = std::shared_ptr<const MemoryRow>;

struct Memory {
  std::vector<MemoryRowPtr> rows;
};

// One row's decoder positions. Attention layers keep K and V per position, SSRU layers
// the cell state per position: truncating to L positions is then exact.
struct RowCache {
  MemoryRowPtr memory;
  int length = 0;                            // positions held, BOS included
  std::vector<std::vector<float>> k, v;      // per layer [>= length, inner]
  std::vector<std::vector<float>> c;         // per layer [>= length, d]
};

struct DecoderState {
  std::vector<RowCache> rows;
};

}  // namespace fastdec
