// The shortlisted output layer at batch > 1: one GEMM over the union of the rows'
// candidate lists instead of one GEMV per row, each row then gathering its own columns.
//
// Why it is exact: a gathered matrix (I8Matrix::gathered) holds the same int8 rows,
// scales and shift corrections, so the GEMM's column for id e is the same int32 dot
// product with the same epilogue as the per-row kernel's column for e. A row gathers its
// own columns, in its list's order, from the union's output: the row's logits are the
// same floats in the same order, so its max, log-sum-exp, top-k and log-probs are bit
// for bit those of the per-row path, whatever rows share its batch.
//
// The gathered block is cached: a row's list is fixed for its sentence, so the block
// built for a batch serves every later step while it covers the live rows and is not
// much wider than their union (rows leave as they finish).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gemm_i8.h"
#include "kernels/thread_pool.h"
#include "layers/linear.h"
#include "model/state.h"

namespace fastdec {

enum class ShortlistGemm { kAuto, kUnion, kPerRow };
ShortlistGemm parse_shortlist_gemm(const std::string& name);  // "auto" | "union" | "per-row"
const char* shortlist_gemm_name(ShortlistGemm mode);

// The cost model's constants, nanoseconds, measured on the development VM (AMD EPYC,
// AVX512-VNNI, one thread, K = 256, the output layer of models/en-de-attn and its
// shortlist on 32 Multi30k sentences: python -m bench.studies.shortlist_costs; bench/HISTORY.md).
// Per-row path: every column of a row's list is one int8 dot product over K, its weights
// read from cache for that row (consecutive rows of one list share the reads: cheaper
// extra rows). Union path: a GEMM, a streaming cost per column plus a compute cost per
// column and row; packing the block when it is (re)built, counted as spread over
// kBlockUses calls; each row's gather of its columns (estimated, not measured alone).
struct ShortlistCosts {
  double per_row_ns_per_kcol = 0.0;        // per row per column per 256 of K
  double per_row_extra_ns_per_kcol = 0.0;  // the same for a further row of the same list
  double gemm_ns_per_kcol = 0.0;           // per column per 256 of K, streaming (any M)
  double gemm_ns_per_kcol_row = 0.0;       // per column per row per 256 of K, compute
  double pack_ns_per_kcol = 0.0;           // per gathered column per 256 of K
  double gather_ns_per_col = 0.0;          // per row per list entry
  static ShortlistCosts measured();
};

struct ShortlistUnionStats {
  uint64_t union_calls = 0, per_row_calls = 0, blocks_built = 0;
};

class ShortlistUnion {
 public:
  // A row's columns in the union's output: union_row[positions[i]] is its list entry i.
  struct RowPositions {
    uint64_t list_id = 0;
    std::vector<int32_t> positions;
  };
  struct Block {
    std::vector<int32_t> columns;            // sorted union of the lists it was built for
    std::unique_ptr<I8Matrix> w;             // those rows of the output layer
    std::vector<float> bias;                 // their bias
    std::vector<RowPositions> rows;          // per list id it covers, sorted by id
    uint64_t uses = 0;
    const std::vector<int32_t>* positions_of(uint64_t list_id) const;
  };

  void set_mode(ShortlistGemm mode) { mode_ = mode; }
  ShortlistGemm mode() const { return mode_; }
  const ShortlistUnionStats& stats() const { return stats_; }
  void release() { block_.reset(); last_ids_.clear(); }

  // Decides the path for T output rows (memory_of[t]: the row's memory, each with a
  // non-empty shortlist and list id), building or rebuilding the cached block when the
  // union path is chosen. Returns the block to use, or null for the per-row path.
  const Block* plan(const Linear& output, const float* bias, int vocab_size,
                    const std::vector<const MemoryRow*>& memory_of, ThreadPool* pool);

 private:
  std::unique_ptr<Block> build(const Linear& output, const float* bias, int vocab_size,
                               const std::vector<const MemoryRow*>& distinct, ThreadPool* pool) const;

  ShortlistGemm mode_ = ShortlistGemm::kAuto;
  ShortlistCosts costs_ = ShortlistCosts::measured();
  std::unique_ptr<Block> block_;
  std::vector<uint64_t> last_ids_;  // the distinct list ids of the last call
  size_t last_union_ = 0;           // their union's size
  ShortlistUnionStats stats_;
};

}  // namespace fastdec
