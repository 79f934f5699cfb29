// The output layer: logits over each position's shortlist (or the full vocabulary) and
// what a StepRequest asks of them (argmax, top-k, log-probs of given ids, full log-probs
// or logits), and the choice of how a shortlisted batch runs (model/shortlist_union.h).
#include "model/model.h"

#include <algorithm>
#include <limits>

#include "kernels/op_profile.h"

namespace fastdec {

void Model::output_stats(const float* h, int T, const std::vector<const MemoryRow*>& memory_of,
                         const StepRequest& request, const StepOutputs& outputs) {
  const int V = cfg_.vocab_size;
  const float ninf = -std::numeric_limits<float>::infinity();
  // Column lists: a row's own shortlist, or the full vocabulary.
  std::vector<int64_t> offsets(static_cast<size_t>(T) + 1, 0);
  bool any_shortlist = false, all_shortlisted = true;
  for (int t = 0; t < T; ++t) {
    size_t s = memory_of[t]->shortlist.size();
    any_shortlist |= s > 0;
    all_shortlisted &= s > 0;
    offsets[t + 1] = offsets[t] + static_cast<int64_t>(s > 0 ? s : static_cast<size_t>(V));
  }
  logits_.resize(static_cast<size_t>(offsets[T]));
  // Union path: row t's logits are gathered from its columns of the union GEMM
  // (union_row[t]) at the start of its statistics below.
  const ShortlistUnion::Block* block = nullptr;
  std::vector<const std::vector<int32_t>*> union_positions;
  if (all_shortlisted && output_.supports_columns())
    block = shortlist_union_.plan(output_, output_bias_.data(), V, memory_of, &pool_);
  const size_t U = block ? block->columns.size() : 0;
  if (!any_shortlist) {
    output_.forward(h, T, logits_.data(), &pool_, false, &i8_scratch_);
  } else if (block) {
    union_logits_.resize(static_cast<size_t>(T) * U);
    output_.forward_gathered(*block->w, block->bias.data(), h, T, union_logits_.data(), &pool_, &i8_scratch_);
    union_positions.resize(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) union_positions[t] = block->positions_of(memory_of[t]->shortlist_id);
  } else if (output_.supports_columns()) {
    std::vector<int32_t> cols(static_cast<size_t>(offsets[T]));
    for (int t = 0; t < T; ++t) {
      const auto& s = memory_of[t]->shortlist;
      int32_t* dst = cols.data() + offsets[t];
      if (s.empty())
        for (int i = 0; i < V; ++i) dst[i] = i;
      else
        std::copy(s.begin(), s.end(), dst);
    }
    output_.forward_columns(h, T, cols.data(), offsets.data(), logits_.data(), &pool_, &i8_scratch_);
  } else {
    // fp32 models: compute every column, then keep the shortlisted ones (same result).
    std::vector<float> full(static_cast<size_t>(T) * V);
    output_.forward(h, T, full.data(), &pool_, false, &i8_scratch_);
    for (int t = 0; t < T; ++t) {
      const auto& s = memory_of[t]->shortlist;
      float* dst = logits_.data() + offsets[t];
      const float* src = full.data() + static_cast<size_t>(t) * V;
      if (s.empty())
        std::copy(src, src + V, dst);
      else
        for (size_t i = 0; i < s.size(); ++i) dst[i] = src[s[i]];
    }
  }
  const int k = std::max(request.topk, 1);
  OpTimer stats_timer(Op::kOutputStats);
  parallel_rows(&pool_, T, [&](int t) {
    float* own = logits_.data() + offsets[t];
    const int64_t n = offsets[t + 1] - offsets[t];
    if (block) {  // the row's columns, in its list's order: the per-row path's floats
      const float* from = union_logits_.data() + static_cast<size_t>(t) * U;
      const int32_t* at = union_positions[t]->data();
      for (int64_t i = 0; i < n; ++i) own[i] = from[at[i]];
    }
    const float* row = own;
    const auto& shortlist = memory_of[t]->shortlist;
    auto to_id = [&](int64_t column) { return shortlist.empty() ? column : int64_t{shortlist[column]}; };
    auto logit_of = [&](int64_t id) -> float {
      if (shortlist.empty()) return row[id];
      auto it = std::lower_bound(shortlist.begin(), shortlist.end(), static_cast<int32_t>(id));
      return (it != shortlist.end() && *it == id) ? row[it - shortlist.begin()] : ninf;
    };
    // The kept token wins unless the top-1 (column `best`) beats it by edit_margin.
    auto kept_or = [&](int64_t best) -> int64_t {
      const int64_t top = to_id(best);
      if (!request.keep_ids) return top;
      const int64_t keep = request.keep_ids[t];
      if (keep < 0 || keep == top) return top;
      return row[best] - logit_of(keep) < request.edit_margin ? keep : top;
    };
    if (request.logits) {
      float* dst = outputs.logits + static_cast<size_t>(t) * V;
      if (shortlist.empty()) {
        std::copy(row, row + V, dst);
      } else {
        std::fill(dst, dst + V, ninf);
        for (size_t i = 0; i < shortlist.size(); ++i) dst[shortlist[i]] = row[i];
      }
    }
    bool needs_stats = request.topk > 0 || request.ids || request.logprobs;
    if (!needs_stats) {
      outputs.argmax[t] = kept_or(kt_.argmax(row, n));
      return;
    }
    int64_t top_ids[64];
    float top_values[64];
    int kk = static_cast<int>(std::min<int64_t>(std::min(k, 64), n));
    RowStats s = kt_.row_stats(row, n, kk, top_ids, top_values);
    if (request.argmax) outputs.argmax[t] = kept_or(top_ids[0]);
    for (int i = 0; i < request.topk; ++i) {
      bool have = i < kk;
      outputs.topk_ids[static_cast<size_t>(t) * request.topk + i] = have ? to_id(top_ids[i]) : -1;
      outputs.topk_logprobs[static_cast<size_t>(t) * request.topk + i] = have ? top_values[i] - s.log_sum_exp : ninf;
    }
    if (request.ids) outputs.id_logprobs[t] = logit_of(request.ids[t]) - s.log_sum_exp;
    if (request.logprobs) {
      float* dst = outputs.logprobs + static_cast<size_t>(t) * V;
      if (shortlist.empty()) {
        for (int i = 0; i < V; ++i) dst[i] = row[i] - s.log_sum_exp;
      } else {
        std::fill(dst, dst + V, ninf);
        for (size_t i = 0; i < shortlist.size(); ++i) dst[shortlist[i]] = row[i] - s.log_sum_exp;
      }
    }
  });
}

// ---------------------------------------------------------------- shortlist GEMM choice
void Model::set_shortlist_gemm(ShortlistGemm mode) {
  std::lock_guard<std::mutex> lock(call_mutex_);
  shortlist_union_.set_mode(mode);
}

ShortlistGemm Model::shortlist_gemm() {
  std::lock_guard<std::mutex> lock(call_mutex_);
  return shortlist_union_.mode();
}

ShortlistUnionStats Model::shortlist_gemm_stats() {
  std::lock_guard<std::mutex> lock(call_mutex_);
  return shortlist_union_.stats();
}

}  // namespace fastdec
