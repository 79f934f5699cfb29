#include "model/shortlist_index.h"

#include <stdexcept>
#include <string>

namespace fastdec {
namespace {
constexpr int kMultiple = 8;  // pyfastdec.model_dir.shortlist.SIMD_MULTIPLE
}  // namespace

ShortlistIndex::ShortlistIndex(int vocab_size, const uint32_t* frequent, size_t num_frequent,
                               const uint64_t* indptr, const uint32_t* targets, size_t num_targets,
                               int first_fill_id)
    : vocab_size_(vocab_size), first_fill_id_(first_fill_id) {
  if (vocab_size < 1) throw std::invalid_argument("shortlist: vocab_size must be >= 1");
  if (first_fill_id < 0 || first_fill_id > vocab_size)
    throw std::invalid_argument("shortlist: first_fill_id " + std::to_string(first_fill_id) + " is not in [0, " +
                                std::to_string(vocab_size) + "]");
  const size_t V = static_cast<size_t>(vocab_size);
  frequent_bits_.assign((V + 63) / 64, 0);
  for (size_t i = 0; i < num_frequent; ++i) {
    if (frequent[i] >= V) throw std::invalid_argument("shortlist: frequent id " + std::to_string(frequent[i]) +
                                                      " is outside the vocabulary");
    frequent_bits_[frequent[i] / 64] |= uint64_t{1} << (frequent[i] % 64);
  }
  indptr_.assign(indptr, indptr + V + 1);
  if (indptr_[0] != 0 || indptr_[V] != num_targets)
    throw std::invalid_argument("shortlist: index offsets must start at 0 and end at the number of targets");
  for (size_t f = 0; f < V; ++f)
    if (indptr_[f + 1] < indptr_[f]) throw std::invalid_argument("shortlist: index offsets decrease");
  targets_.assign(targets, targets + num_targets);
  for (uint32_t t : targets_)
    if (t >= V) throw std::invalid_argument("shortlist: target id " + std::to_string(t) + " is outside the vocabulary");
}

void ShortlistIndex::candidates(const int32_t* src, size_t n, std::vector<int32_t>* out) const {
  // A bitmap over the vocabulary gives union, duplicates and order at once; for V ~ 8k
  // it is 125 words, so copying and scanning it costs less than sorting the lists.
  thread_local std::vector<uint64_t> bits;
  bits = frequent_bits_;
  for (size_t i = 0; i < n; ++i) {
    const size_t f = static_cast<size_t>(src[i]);
    for (uint64_t e = indptr_[f]; e < indptr_[f + 1]; ++e) bits[targets_[e] / 64] |= uint64_t{1} << (targets_[e] % 64);
  }
  size_t count = 0;
  for (uint64_t w : bits) count += static_cast<size_t>(__builtin_popcountll(w));
  // Padding: the lowest clear bits at or above first_fill_id (never past the vocabulary).
  size_t missing = (kMultiple - count % kMultiple) % kMultiple;
  for (size_t id = static_cast<size_t>(first_fill_id_); missing > 0 && id < static_cast<size_t>(vocab_size_); ++id) {
    uint64_t bit = uint64_t{1} << (id % 64);
    if (!(bits[id / 64] & bit)) {
      bits[id / 64] |= bit;
      --missing;
      ++count;
    }
  }
  out->resize(count);
  int32_t* dst = out->data();
  for (size_t w = 0; w < bits.size(); ++w)
    for (uint64_t word = bits[w]; word; word &= word - 1)
      *dst++ = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(word)));
}

}  // namespace fastdec
