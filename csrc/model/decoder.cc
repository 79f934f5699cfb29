// The incremental decoder: a step appends n positions to every row in one pass and
// returns what the request asks of the output layer; truncate rolls rows back. The
// per-row caches (model/state.h) grow here.
#include "model/model.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/op_profile.h"
#include "layers/attention.h"
#include "layers/ssru.h"

namespace fastdec {

DecoderState Model::start(const Memory& memory) const {
  DecoderState state;
  state.rows.resize(memory.rows.size());
  for (size_t b = 0; b < memory.rows.size(); ++b) state.rows[b].memory = memory.rows[b];
  return state;
}

// Runs for every row about to be written, before the parallel region, so the per-row
// work never touches reference counts.
void Model::grow(RowCache& row, int length) const {
  const bool ssru = cfg_.ssru_decoder;
  const size_t layers = decoder_.size();
  if (!row.buffers) {
    row.buffers = std::make_shared<RowBuffers>();
    (ssru ? row.buffers->c : row.buffers->k).resize(layers);
    if (!ssru) row.buffers->v.resize(layers);
  } else if (row.buffers.use_count() > 1) {
    // Shared since a select: copy only the positions held (this row's later writes
    // must not reach the rows it shares them with), with room for the next steps.
    auto own = std::make_shared<RowBuffers>();
    const RowBuffers& shared = *row.buffers;
    using Layers = std::vector<std::vector<float>>;
    const std::pair<const Layers*, Layers*> parts[] = {
        {&shared.k, &own->k}, {&shared.v, &own->v}, {&shared.c, &own->c}};
    for (auto [from, to] : parts) {
      to->resize(from->size());
      for (size_t l = 0; l < from->size(); ++l) {
        const size_t held = cache_width(l) * static_cast<size_t>(row.length);
        (*to)[l].reserve(std::max(cache_width(l) * static_cast<size_t>(length), 2 * held));
        (*to)[l].assign((*from)[l].begin(), (*from)[l].begin() + static_cast<std::ptrdiff_t>(held));
      }
    }
    row.buffers = std::move(own);
  }
  for (size_t l = 0; l < layers; ++l) {
    const size_t need = cache_width(l) * static_cast<size_t>(length);
    for (auto* buffers : {&row.buffers->k, &row.buffers->v, &row.buffers->c}) {
      if (buffers->empty()) continue;
      std::vector<float>& b = (*buffers)[l];
      if (b.size() >= need) continue;
      if (b.capacity() < need) b.reserve(std::max(need, b.capacity() * 2));  // amortised growth
      b.resize(need);
    }
  }
}

void Model::decoder_pass(std::vector<RowCache*>& rows, const std::vector<int>& counts, float* x,
                         Visibility visibility, int block) {
  const int d = cfg_.d_model, hd = cfg_.head_dim;
  const int R = static_cast<int>(rows.size());
  std::vector<int> offset(static_cast<size_t>(R) + 1, 0);
  for (int b = 0; b < R; ++b) offset[b + 1] = offset[b] + counts[b];
  const int T = offset[R];
  for (int b = 0; b < R; ++b) grow(*rows[b], rows[b]->length + counts[b]);
  h_.resize(static_cast<size_t>(T) * d);
  y_.resize(static_cast<size_t>(T) * d);

  if (!decoder_.empty()) sublayer_input(decoder_[0].ln_self, x, T, h_.data());
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const DecoderLayer& L = decoder_[l];
    const int inner = L.heads * hd;
    // Self sublayer (its input norm ran with the previous residual).
    if (cfg_.ssru_decoder) {
      big_.resize(static_cast<size_t>(T) * 2 * d);
      L.ssru.forward(h_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
      OpTimer timer(Op::kSsru);
      parallel_rows(&pool_, R, [&](int b) {
        RowCache& row = *rows[b];
        float* c = row.buffers->c[l].data();
        const float* c_prev = row.length > 0 ? c + static_cast<size_t>(row.length - 1) * d : nullptr;
        ssru_scan(big_.data() + static_cast<size_t>(offset[b]) * 2 * d, counts[b], d, c_prev,
                  c + static_cast<size_t>(row.length) * d, y_.data() + static_cast<size_t>(offset[b]) * d);
      });
    } else {
      big_.resize(static_cast<size_t>(T) * 3 * inner);
      L.self_qkv.forward(h_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
      att_.resize(static_cast<size_t>(T) * inner);
      // Drafter: [BOS, prefix] is causal; the block of `block` masks sees everything.
      const int open = visibility == Visibility::kDraftBlock ? block : 0;
      parallel_rows(&pool_, R, [&](int b) {
        RowCache& row = *rows[b];
        const float* qkv = big_.data() + static_cast<size_t>(offset[b]) * 3 * inner;
        float* k = row.buffers->k[l].data();
        float* v = row.buffers->v[l].data();
        {
          OpTimer copy_timer(Op::kCacheCopy);
          append_kv(qkv, counts[b], row.length, inner, k, v);
        }
        OpTimer attention_timer(Op::kAttention);
        attend_cached(kt_, {L.heads, hd}, qkv, counts[b], row.length, open, k, v,
                      att_.data() + static_cast<size_t>(offset[b]) * inner);
      });
      L.self_o.forward(att_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    }
    add_residual(L.ln_self, L.ln_cross, x, y_.data(), T, h_.data());
    // Cross-attention over the row's own source.
    att_.resize(static_cast<size_t>(T) * inner);
    big_.resize(static_cast<size_t>(T) * inner);
    L.cross_q.forward(h_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
    parallel_rows(&pool_, R, [&](int b) {
      OpTimer attention_timer(Op::kAttention);
      const MemoryRow& mem = *rows[b]->memory;
      attend_source(kt_, {L.heads, hd}, big_.data() + static_cast<size_t>(offset[b]) * inner, counts[b],
                    mem.cross_kv[l].data(), static_cast<int>(mem.source.size()),
                    att_.data() + static_cast<size_t>(offset[b]) * inner);
    });
    L.cross_o.forward(att_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    add_residual(L.ln_cross, L.ln_ffn, x, y_.data(), T, h_.data());
    // FFN.
    L.ffn.forward(h_.data(), T, big_, y_.data(), &pool_, &i8_scratch_);
    bool last = l + 1 == decoder_.size();
    add_residual(L.ln_ffn, last ? dec_final_ : decoder_[l + 1].ln_self, x, y_.data(), T, last ? x : h_.data());
  }
  if (decoder_.empty() && cfg_.pre_norm) {
    OpTimer timer(Op::kLayerNorm);
    dec_final_.forward(x, T, x);
  }
  for (int b = 0; b < R; ++b) rows[b]->length += counts[b];
}

void Model::step(DecoderState& state, const int32_t* tokens, int n, const StepRequest& request,
                 const StepOutputs& outputs) {
  std::lock_guard<std::mutex> lock(call_mutex_);
  OpTimer call_timer(Op::kCallOther);
  // Before anything runs: a refused call must leave the state as it was.
  if (request.draft_lengths && heads_.count() == 0)
    throw std::invalid_argument("step: proposals asked for, but this model has no proposal heads");
  const int d = cfg_.d_model;
  const int R = static_cast<int>(state.rows.size());
  const int T = R * n;
  x_.resize(static_cast<size_t>(T) * d);
  std::vector<RowCache*> rows(static_cast<size_t>(R));
  std::vector<const MemoryRow*> memory_of(static_cast<size_t>(T));
  for (int b = 0; b < R; ++b) {
    rows[b] = &state.rows[b];
    for (int i = 0; i < n; ++i) {
      embedding_.forward(tokens[b * n + i], state.rows[b].length + i, x_.data() + static_cast<size_t>(b * n + i) * d);
      memory_of[b * n + i] = state.rows[b].memory.get();
    }
  }
  decoder_pass(rows, std::vector<int>(static_cast<size_t>(R), n), x_.data(), Visibility::kCausal, 0);
  output_stats(x_.data(), T, memory_of, request, outputs);
  if (request.draft_lengths) propose(tokens, n, x_.data(), memory_of, request, outputs);
}

void Model::truncate(DecoderState& state, const std::vector<int>& lengths) const {
  for (size_t b = 0; b < state.rows.size(); ++b) state.rows[b].length = lengths[b];
}

}  // namespace fastdec
