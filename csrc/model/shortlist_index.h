// A loaded lexical shortlist (export/SHORTLIST_FORMAT.md) and the candidates of one
// source sentence, computed natively: the Python reader (pyfastdec/model_dir/shortlist.py)
// validates the file and stays the reference; this copy answers candidates() in a few
// microseconds per sentence inside encode, without per-id Python objects.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastdec {

class ShortlistIndex {
 public:
  // The sections of a validated file (the caller checked sortedness, CSR offsets and
  // ids < vocab_size; the constructor re-checks what an out-of-range read would need).
  ShortlistIndex(int vocab_size, const uint32_t* frequent, size_t num_frequent, const uint64_t* indptr,
                 const uint32_t* targets, size_t num_targets, int first_fill_id);

  int vocab_size() const { return vocab_size_; }

  // The sentence's candidates, as the format defines them: the sorted union of the
  // frequent ids and every source id's targets, padded to a multiple of 8 with the
  // lowest unused ids >= first_fill_id. src ids must be in [0, vocab_size).
  void candidates(const int32_t* src, size_t n, std::vector<int32_t>* out) const;

 private:
  int vocab_size_;
  int first_fill_id_;
  std::vector<uint64_t> frequent_bits_;  // one bit per id: the union starts from these
  std::vector<uint64_t> indptr_;         // [V + 1]
  std::vector<uint32_t> targets_;
};

}  // namespace fastdec
