// Encoder output (Memory) and decoder state, per row, so rows can leave a batch or be
// duplicated (beam search) independently. Caches grow with what is decoded.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace fastdec {

struct DraftCache;

struct MemoryRow {
  std::vector<int32_t> source;               // ids, EOS included
  std::vector<std::vector<float>> cross_kv;  // per decoder layer: [source len, 2 * inner]
  // The encoder's final states [source len, d], which a model sharing this encoder
  // (Model::attach) projects into its own cross K/V; shared by the memories made from it.
  std::shared_ptr<const std::vector<float>> encoder_out;
  std::vector<int32_t> shortlist;            // sorted candidate ids; empty = full vocab
  // Names this row's list for the shortlisted output layer's cache of union blocks
  // (model/shortlist_union.h): unique per encoded row, shared by its select copies.
  uint64_t shortlist_id = 0;
  // Drafter only: the positions of the last drafted prefix, reused by the next call
  // (a cache, invisible in results; mutable because a Memory is otherwise read-only).
  mutable std::shared_ptr<DraftCache> draft;
};
using MemoryRowPtr = std::shared_ptr<const MemoryRow>;

struct Memory {
  std::vector<MemoryRowPtr> rows;
};

// One row's decoder positions. Attention layers keep K and V per position, SSRU layers
// the cell state per position: truncating to L positions is then exact.
struct RowBuffers {
  std::vector<std::vector<float>> k, v;      // per layer [>= length, inner]
  std::vector<std::vector<float>> c;         // per layer [>= length, d]
};

// Copying a RowCache (select, beam search's duplicated hypotheses) shares its buffers;
// Model::grow gives a row its own copy of the positions it holds before anything is
// written to a shared one. Positions past `length` are never read, so truncating a
// shared row needs no copy. Only calls holding the model's call mutex write (and
// un-share) buffers, before their parallel region; select only copies the pointers.
struct RowCache {
  MemoryRowPtr memory;
  int length = 0;                            // positions held, BOS included
  std::shared_ptr<RowBuffers> buffers;       // null until the first position
};

struct DecoderState {
  std::vector<RowCache> rows;
};

// A drafter's [BOS, prefix] positions attend causally among themselves, so they stay
// valid for the next call as far as its prefix agrees (GAD's accepted output only grows
// between calls). positions.memory is set only during a call: a permanent pointer back
// to the owning MemoryRow would be a reference cycle.
struct DraftCache {
  RowCache positions;           // BOS + tokens, once filled
  std::vector<int32_t> tokens;  // the prefix held, BOS excluded
};

}  // namespace fastdec
