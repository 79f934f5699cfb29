#include "model/shortlist_union.h"

#include <algorithm>
#include <stdexcept>

namespace fastdec {
namespace {

// A block is built for the rows of one batch and reused while they decode; its packing
// cost is charged as spread over this many calls (a batch-32 greedy run of Multi30k
// takes ~20 steps, and rows leaving make a narrower block worth rebuilding once or twice).
constexpr double kBlockUses = 8.0;

// Sorted unique list ids of the call's rows, with one row (memory) per id.
void distinct_lists(const std::vector<const MemoryRow*>& memory_of, std::vector<uint64_t>* ids,
                    std::vector<const MemoryRow*>* rows) {
  std::vector<const MemoryRow*> sorted(memory_of);
  std::sort(sorted.begin(), sorted.end(),
            [](const MemoryRow* a, const MemoryRow* b) { return a->shortlist_id < b->shortlist_id; });
  ids->clear();
  rows->clear();
  for (const MemoryRow* m : sorted)
    if (ids->empty() || ids->back() != m->shortlist_id) {
      ids->push_back(m->shortlist_id);
      rows->push_back(m);
    }
}

// Size of the union of the lists, or (columns != null) the union itself, sorted.
size_t union_of(const std::vector<const MemoryRow*>& rows, int vocab_size, std::vector<int32_t>* columns) {
  thread_local std::vector<uint64_t> bits;
  bits.assign((static_cast<size_t>(vocab_size) + 63) / 64, 0);
  for (const MemoryRow* m : rows)
    for (int32_t c : m->shortlist) bits[static_cast<size_t>(c) / 64] |= uint64_t{1} << (c % 64);
  size_t count = 0;
  for (uint64_t w : bits) count += static_cast<size_t>(__builtin_popcountll(w));
  if (columns) {
    columns->clear();
    columns->reserve(count);
    for (size_t w = 0; w < bits.size(); ++w)
      for (uint64_t word = bits[w]; word; word &= word - 1)
        columns->push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(word))));
  }
  return count;
}

}  // namespace

ShortlistGemm parse_shortlist_gemm(const std::string& name) {
  if (name == "auto") return ShortlistGemm::kAuto;
  if (name == "union") return ShortlistGemm::kUnion;
  if (name == "per-row") return ShortlistGemm::kPerRow;
  throw std::invalid_argument("shortlist_gemm: '" + name + "' is not one of 'auto', 'union', 'per-row'");
}

const char* shortlist_gemm_name(ShortlistGemm mode) {
  switch (mode) {
    case ShortlistGemm::kUnion: return "union";
    case ShortlistGemm::kPerRow: return "per-row";
    default: return "auto";
  }
}

ShortlistCosts ShortlistCosts::measured() {
  ShortlistCosts c;
  // bench.shortlist_costs, three runs (32 rows, mean list 364 columns, union 1806):
  // per-row 5.05-5.09, extra row 2.53-2.56, GEMM 2.72-2.90 + 1.14 per row, pack 41.
  c.per_row_ns_per_kcol = 5.07;
  c.per_row_extra_ns_per_kcol = 2.55;
  c.gemm_ns_per_kcol = 2.8;
  c.gemm_ns_per_kcol_row = 1.14;
  c.pack_ns_per_kcol = 41.0;
  c.gather_ns_per_col = 0.5;
  return c;
}

const std::vector<int32_t>* ShortlistUnion::Block::positions_of(uint64_t list_id) const {
  auto it = std::lower_bound(rows.begin(), rows.end(), list_id,
                             [](const RowPositions& r, uint64_t id) { return r.list_id < id; });
  return it != rows.end() && it->list_id == list_id ? &it->positions : nullptr;
}

std::unique_ptr<ShortlistUnion::Block> ShortlistUnion::build(const Linear& output, const float* bias, int vocab_size,
                                                             const std::vector<const MemoryRow*>& distinct,
                                                             ThreadPool* pool) const {
  auto block = std::make_unique<Block>();
  union_of(distinct, vocab_size, &block->columns);
  const int U = static_cast<int>(block->columns.size());
  block->w = output.gather_columns(block->columns.data(), U, pool);
  block->bias.resize(static_cast<size_t>(U));
  std::vector<int32_t> position_of(static_cast<size_t>(vocab_size), -1);
  for (int i = 0; i < U; ++i) {
    block->bias[static_cast<size_t>(i)] = bias[block->columns[static_cast<size_t>(i)]];
    position_of[static_cast<size_t>(block->columns[static_cast<size_t>(i)])] = i;
  }
  block->rows.resize(distinct.size());  // distinct is sorted by id
  for (size_t r = 0; r < distinct.size(); ++r) {
    block->rows[r].list_id = distinct[r]->shortlist_id;
    auto& positions = block->rows[r].positions;
    positions.reserve(distinct[r]->shortlist.size());
    for (int32_t c : distinct[r]->shortlist) positions.push_back(position_of[static_cast<size_t>(c)]);
  }
  return block;
}

const ShortlistUnion::Block* ShortlistUnion::plan(const Linear& output, const float* bias, int vocab_size,
                                                  const std::vector<const MemoryRow*>& memory_of, ThreadPool* pool) {
  const int T = static_cast<int>(memory_of.size());
  if (mode_ == ShortlistGemm::kPerRow || (mode_ == ShortlistGemm::kAuto && T < 2)) {
    ++stats_.per_row_calls;
    return nullptr;
  }
  std::vector<uint64_t> ids;
  std::vector<const MemoryRow*> distinct;
  distinct_lists(memory_of, &ids, &distinct);
  if (ids != last_ids_) {  // rows joined or left since the last call
    last_union_ = union_of(distinct, vocab_size, nullptr);
    last_ids_ = ids;
  }
  bool covered = block_ != nullptr;
  for (size_t i = 0; covered && i < ids.size(); ++i) covered = block_->positions_of(ids[i]) != nullptr;

  // The per-row kernel runs consecutive rows of one list together (a verified row's
  // positions), reading the list's weights once: count those groups' columns once.
  const double k = output.in() / 256.0;
  double per_row_cols = 0.0, gather_cols = 0.0;
  for (int t = 0; t < T; ++t) {
    double n = static_cast<double>(memory_of[t]->shortlist.size());
    gather_cols += n;
    if (t == 0 || memory_of[t] != memory_of[t - 1]) per_row_cols += n;
  }
  auto union_cost = [&](double columns, bool pack) {
    return k * columns * (costs_.gemm_ns_per_kcol + T * costs_.gemm_ns_per_kcol_row) +
           costs_.gather_ns_per_col * gather_cols + (pack ? k * columns * costs_.pack_ns_per_kcol / kBlockUses : 0.0);
  };
  const double fresh = union_cost(static_cast<double>(last_union_), true);
  const double reuse = covered ? union_cost(static_cast<double>(block_->columns.size()), false) : fresh;
  const double per_row = k * per_row_cols * costs_.per_row_ns_per_kcol +
                         k * (gather_cols - per_row_cols) * costs_.per_row_extra_ns_per_kcol;
  if (mode_ == ShortlistGemm::kAuto && per_row <= std::min(fresh, reuse)) {
    ++stats_.per_row_calls;
    return nullptr;
  }
  if (!covered || fresh < reuse) {
    block_ = build(output, bias, vocab_size, distinct, pool);
    ++stats_.blocks_built;
  }
  ++block_->uses;
  ++stats_.union_calls;
  return block_.get();
}

}  // namespace fastdec
