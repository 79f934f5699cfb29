// The GPU model's output layer (logits over the full vocabulary plus each row's shortlist
// mask, then what a Request asks of them) and the proposal heads, as
// csrc/model/output_layer.cc and drafting.cc's propose compute them. What crosses to the
// host: the winners (top-k ids and values, log-sum-exp, picked logits) in one download;
// full log-probs or logits only when asked for.
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "cuda/gpu_model.h"
#include "model/acceptance.h"

namespace fastdec {
namespace gpu {
namespace {
constexpr int kMaxTopK = 64;

}  // namespace

void Model::output_stats(const float* h, int T, const std::vector<int32_t>& mask_row, const Memory& memory,
                         const Request& request, const Outputs& outputs) {
  const int V = cfg_.vocab;
  const float ninf = -std::numeric_limits<float>::infinity();
  if (request.topk > kMaxTopK)
    throw std::invalid_argument("step: topk " + std::to_string(request.topk) + " above " + std::to_string(kMaxTopK));
  float* logits = scratch(kLogits, static_cast<size_t>(T) * V);
  run(output_, h, T, logits, Act::kNone, true);
  const int32_t* rows = upload_ints(mask_row);
  if (memory.mask) ops_->add_mask(logits, T, V, at<float>(memory.mask), rows);

  const bool stats = request.topk > 0 || request.ids || request.logprobs;
  const int k = std::min(std::max(request.topk, 1), V);
  // One device block, downloaded at once: ids [T, k] | values [T, k] | lse [T] | id logits [T] | kept logits [T]
  const size_t block = static_cast<size_t>(T) * (2 * k + 3);
  float* dev = scratch(kStats, block);
  int32_t* ids = reinterpret_cast<int32_t*>(dev);
  float* values = dev + static_cast<size_t>(T) * k;
  float* lse = values + static_cast<size_t>(T) * k;
  float* picked = lse + T;
  float* kept = picked + T;
  ops_->topk(logits, T, V, k, ids, values, stats ? lse : nullptr);
  auto ids32 = [&](const int64_t* from) {
    std::vector<int32_t> v(from, from + T);
    for (int32_t& x : v) x = x >= 0 && x < V ? x : -1;
    return v;
  };
  if (request.ids) ops_->pick(logits, T, V, upload_ints(ids32(request.ids)), picked);
  if (request.keep_ids) ops_->pick(logits, T, V, upload_ints(ids32(request.keep_ids)), kept);
  std::vector<float> host(block);
  ops_->download(host.data(), dev, block * sizeof(float));
  const int32_t* h_ids = reinterpret_cast<const int32_t*>(host.data());
  const float* h_values = host.data() + static_cast<size_t>(T) * k;
  const float* h_lse = h_values + static_cast<size_t>(T) * k;
  const float* h_picked = h_lse + T;
  const float* h_kept = h_picked + T;

  if (request.logits || request.logprobs) {
    // Straight into the caller's array: the logits if asked for (log-probs read them
    // there), else the log-probs, made from the logits in place.
    const size_t full = static_cast<size_t>(T) * V;
    float* into = request.logits ? outputs.logits : outputs.logprobs;
    ops_->download(into, logits, full * sizeof(float));
    if (request.logprobs)
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < V; ++i) {
          const size_t at_ = static_cast<size_t>(t) * V + i;
          outputs.logprobs[at_] = into[at_] == ninf ? ninf : into[at_] - h_lse[t];
        }
  }
  for (int t = 0; t < T; ++t) {
    const int64_t top = h_ids[static_cast<size_t>(t) * k];
    if (request.argmax) {
      int64_t chosen = top;
      // The kept token wins unless the top-1 beats it by edit_margin (output_layer.cc).
      if (request.keep_ids) {
        const int64_t keep = request.keep_ids[t];
        if (keep >= 0 && keep != top && h_values[static_cast<size_t>(t) * k] - h_kept[t] < request.edit_margin)
          chosen = keep;
      }
      outputs.argmax[t] = chosen;
    }
    for (int i = 0; i < request.topk; ++i) {
      const size_t at_ = static_cast<size_t>(t) * request.topk + i;
      const bool have = i < k && h_values[static_cast<size_t>(t) * k + i] != ninf;
      outputs.topk_ids[at_] = have ? h_ids[static_cast<size_t>(t) * k + i] : -1;
      outputs.topk_logprobs[at_] = have ? h_values[static_cast<size_t>(t) * k + i] - h_lse[t] : ninf;
    }
    if (request.ids) outputs.id_logprobs[t] = h_picked[t] - h_lse[t];
  }
}

void Model::propose(const int32_t* tokens, int n, const float* h, const std::vector<int32_t>& mem_row,
                    const Memory& memory, const Request& request, const Outputs& outputs) {
  const int d = cfg_.d_model;
  const int K = request.heads;  // resolved and checked by the binding (1..cfg_.heads)
  const int R = static_cast<int>(mem_row.size());
  std::vector<int32_t> index(static_cast<size_t>(R));
  accept_drafts(tokens, outputs.argmax, request.draft_lengths, R, n, outputs.accepted);
  for (int b = 0; b < R; ++b) index[b] = static_cast<int32_t>(b * n + outputs.accepted[b]);
  // s [R, d] at the accepted positions, then head-major states [K * R, d] (row i * R + b).
  float* buf = scratch(kHeads, static_cast<size_t>(R) * d * (K + 1) +
                                   static_cast<size_t>(R) * std::max(cfg_.heads_hidden, 1));
  float* s = buf;
  float* out = s + static_cast<size_t>(R) * d;
  float* hidden = out + static_cast<size_t>(K) * R * d;
  ops_->gather_rows(h, static_cast<size_t>(d), upload_ints(index), R, s);
  for (int i = 0; i < K; ++i) {
    float* y = out + static_cast<size_t>(i) * R * d;
    run(head_fc1_[static_cast<size_t>(i)], s, R, hidden, Act::kRelu);
    run(head_fc2_[static_cast<size_t>(i)], hidden, R, y);
    ops_->add(y, s, static_cast<size_t>(R) * d);
  }
  std::vector<int32_t> rows(static_cast<size_t>(K) * R);
  for (int i = 0; i < K; ++i)
    for (int b = 0; b < R; ++b) rows[static_cast<size_t>(i) * R + b] = mem_row[b];
  std::vector<int64_t> best(rows.size());
  Request argmax_only;
  Outputs into;
  into.argmax = best.data();
  output_stats(out, K * R, rows, memory, argmax_only, into);
  for (int b = 0; b < R; ++b)
    for (int i = 0; i < K; ++i)
      outputs.proposals[static_cast<size_t>(b) * K + i] = best[static_cast<size_t>(i) * R + b];
}

}  // namespace gpu
}  // namespace fastdec
