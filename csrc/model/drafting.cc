// Drafting inside the engine: the blockwise proposal heads run at the accepted position
// of a step (Model::propose), BiLD's little model drafting greedily while confident
// (Model::draft_greedy), and the NAT drafter of GAD proposing a block (Model::draft).
#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "model/acceptance.h"

namespace fastdec {

void Model::propose(const int32_t* tokens, int n, const float* h, const std::vector<const MemoryRow*>& memory_of,
                    const StepRequest& request, const StepOutputs& outputs) {
  const int d = cfg_.d_model, K = request.heads > 0 ? std::min(request.heads, heads_.count()) : heads_.count();
  const int R = static_cast<int>(memory_of.size()) / n;
  // The states at the accepted positions; x_ (which h points into) is left alone.
  h_.resize(static_cast<size_t>(R) * d);
  accept_drafts(tokens, outputs.argmax, request.draft_lengths, R, n, outputs.accepted);
  for (int b = 0; b < R; ++b)
    std::memcpy(h_.data() + static_cast<size_t>(b) * d, h + (static_cast<size_t>(b) * n + outputs.accepted[b]) * d,
                sizeof(float) * d);
  y_.resize(static_cast<size_t>(K) * R * d);
  heads_.forward(h_.data(), R, K, y_.data(), big_, &pool_, &i8_scratch_);
  // Head-major rows (i * R + b), each scored over its own row's shortlist.
  std::vector<const MemoryRow*> head_memory(static_cast<size_t>(K) * R);
  for (int i = 0; i < K; ++i)
    for (int b = 0; b < R; ++b) head_memory[static_cast<size_t>(i) * R + b] = memory_of[static_cast<size_t>(b) * n];
  std::vector<int64_t> best(head_memory.size());
  StepRequest argmax_only;
  StepOutputs into;
  into.argmax = best.data();
  output_stats(y_.data(), K * R, head_memory, argmax_only, into);
  for (int b = 0; b < R; ++b)
    for (int i = 0; i < K; ++i)
      outputs.proposals[static_cast<size_t>(b) * K + i] = best[static_cast<size_t>(i) * R + b];
}

void Model::draft_greedy(DecoderState& state, const int32_t* tokens, const int* widths, int w, int max_new,
                         float min_logprob, int64_t* drafts, int* counts, int* fed) {
  const int R = static_cast<int>(state.rows.size());
  std::vector<int64_t> argmax(static_cast<size_t>(R) * w), top(static_cast<size_t>(R) * w);
  std::vector<float> top_logprob(static_cast<size_t>(R) * w);
  StepRequest request;
  request.argmax = false;
  request.topk = 1;
  StepOutputs out;
  out.argmax = argmax.data();
  out.topk_ids = top.data();
  out.topk_logprobs = top_logprob.data();
  step(state, tokens, w, request, out);
  std::vector<int64_t> candidate(static_cast<size_t>(R));
  std::vector<float> confidence(static_cast<size_t>(R));
  std::vector<int> caught_up(static_cast<size_t>(R));
  bool ragged = false;
  for (int b = 0; b < R; ++b) {
    const size_t at = static_cast<size_t>(b) * w + static_cast<size_t>(widths[b] - 1);
    candidate[b] = top[at];
    confidence[b] = top_logprob[at];
    caught_up[b] = state.rows[b].length - w + widths[b];
    ragged = ragged || widths[b] < w;
  }
  if (ragged) truncate(state, caught_up);  // padding must not precede the drafted tokens
  std::fill(drafts, drafts + static_cast<size_t>(R) * max_new, int64_t{-1});
  std::fill(counts, counts + R, 0);
  std::fill(fed, fed + R, 0);
  std::vector<char> alive(static_cast<size_t>(R), 1);
  std::vector<int32_t> next(static_cast<size_t>(R));
  for (;;) {
    bool feeding = false;
    for (int b = 0; b < R; ++b) {
      next[b] = cfg_.pad;
      if (!alive[b]) continue;
      if (confidence[b] < min_logprob) {  // fallback: the big model decides this position
        alive[b] = 0;
        continue;
      }
      drafts[static_cast<size_t>(b) * max_new + counts[b]++] = candidate[b];
      if (candidate[b] == cfg_.eos || counts[b] == max_new) {
        alive[b] = 0;
        continue;
      }
      next[b] = static_cast<int32_t>(candidate[b]);
      ++fed[b];
      feeding = true;
    }
    if (!feeding) return;
    step(state, next.data(), 1, request, out);
    for (int b = 0; b < R; ++b) {
      candidate[b] = top[static_cast<size_t>(b)];
      confidence[b] = top_logprob[static_cast<size_t>(b)];
    }
  }
}

void Model::draft(const Memory& memory, const std::vector<std::vector<int32_t>>& prefixes, int k,
                  int64_t* ids, float* logprobs) {
  std::lock_guard<std::mutex> lock(call_mutex_);
  const int d = cfg_.d_model;
  const int R = static_cast<int>(prefixes.size());
  std::vector<RowCache*> rows(static_cast<size_t>(R));
  std::vector<int> counts(static_cast<size_t>(R)), kept(static_cast<size_t>(R));
  // A memory row present twice in one call (select may duplicate rows) can hold only
  // one cached prefix: its later occurrences draft from fresh, uncached positions.
  std::vector<DraftCache*> caches(static_cast<size_t>(R));
  std::vector<DraftCache> uncached(static_cast<size_t>(R));
  std::unordered_set<const MemoryRow*> seen;
  int T = 0;
  for (int b = 0; b < R; ++b) {
    const MemoryRow& mem = *memory.rows[b];
    if (!mem.draft) mem.draft = std::make_shared<DraftCache>();
    caches[b] = seen.insert(&mem).second ? mem.draft.get() : &uncached[b];
    DraftCache& cache = *caches[b];
    const std::vector<int32_t>& prefix = prefixes[b];
    // Keep the cached positions the new prefix agrees with; the rest is recomputed.
    size_t agree = 0;
    if (cache.positions.length > 0) {
      size_t limit = std::min(cache.tokens.size(), prefix.size());
      while (agree < limit && cache.tokens[agree] == prefix[agree]) ++agree;
      cache.positions.length = 1 + static_cast<int>(agree);
    }
    kept[b] = static_cast<int>(agree);
    cache.positions.memory = memory.rows[b];
    rows[b] = &cache.positions;
    counts[b] = (cache.positions.length == 0 ? 1 : 0) + static_cast<int>(prefix.size() - agree) + k;
    T += counts[b];
  }
  x_.resize(static_cast<size_t>(T) * d);
  int t = 0;
  for (int b = 0; b < R; ++b) {
    int position = rows[b]->length;
    if (position == 0) embedding_.forward(cfg_.bos, position++, x_.data() + static_cast<size_t>(t++) * d);
    for (size_t i = static_cast<size_t>(kept[b]); i < prefixes[b].size(); ++i)
      embedding_.forward(prefixes[b][i], position++, x_.data() + static_cast<size_t>(t++) * d);
    for (int j = 0; j < k; ++j) embedding_.forward(cfg_.mask, position++, x_.data() + static_cast<size_t>(t++) * d);
  }
  decoder_pass(rows, counts, x_.data(), Visibility::kDraftBlock, k);
  for (int b = 0; b < R; ++b) {  // keep [BOS, prefix]; the k mask positions are dropped
    DraftCache& cache = *caches[b];
    cache.positions.length -= k;
    cache.positions.memory.reset();
    cache.tokens = prefixes[b];
  }
  // Only the k block positions of each row need the output layer.
  std::vector<float> block(static_cast<size_t>(R) * k * d);
  std::vector<const MemoryRow*> memory_of(static_cast<size_t>(R) * k);
  t = 0;
  for (int b = 0; b < R; ++b) {
    t += counts[b];
    std::memcpy(block.data() + static_cast<size_t>(b) * k * d, x_.data() + static_cast<size_t>(t - k) * d,
                sizeof(float) * static_cast<size_t>(k) * d);
    for (int j = 0; j < k; ++j) memory_of[static_cast<size_t>(b) * k + j] = memory.rows[b].get();
  }
  std::vector<int64_t> top(static_cast<size_t>(R) * k);
  StepRequest request;
  request.argmax = true;
  request.topk = 1;
  StepOutputs outputs;
  outputs.argmax = ids;
  outputs.topk_ids = top.data();
  outputs.topk_logprobs = logprobs;
  output_stats(block.data(), R * k, memory_of, request, outputs);
}

}  // namespace fastdec
