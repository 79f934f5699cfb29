#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdexcept>
#include <unordered_set>

#include "kernels/dispatch.h"
#include "kernels/gemm_i8.h"
#include "kernels/row_ops.h"
#include "layers/attention.h"
#include "layers/ssru.h"

namespace fastdec {
namespace {

std::string layer_name(const char* stack, size_t i) {
  return std::string(stack) + ".layers." + std::to_string(i) + ".";
}

float scale_of(const std::map<std::string, float>& scales, const std::string& linear) {
  auto it = scales.find(linear);
  return it == scales.end() ? 0.f : it->second;
}

thread_local std::vector<float> attention_scratch;

}  // namespace

Model::Model(ModelConfig config, const TensorLookup& lookup,
             const std::map<std::string, float>& act_scales, int threads)
    : cfg_(std::move(config)), kt_(active_kernels()), pool_(threads) {
  const int d = cfg_.d_model, V = cfg_.vocab_size, hd = cfg_.head_dim;
  TensorView e = expect_tensor(lookup, "embed.weight", "float32", {V, d});
  embed_.assign(e.f32(), e.f32() + e.numel());
  TensorView ob = expect_tensor(lookup, "output.bias", "float32", {V});
  output_bias_.assign(ob.f32(), ob.f32() + V);
  // The tied output layer: int8 models quantise it here, per vocabulary row, and keep
  // a row-major copy so per-row shortlists can compute only their candidates.
  output_ = cfg_.int8 ? Linear::quantized_from_float(kt_, embed_.data(), V, d, output_bias_.data(), true)
                      : Linear::from_float(kt_, embed_.data(), V, d, output_bias_.data());

  // Projections that read the same input run as one GEMM, so they must share one
  // calibrated input scale (calibration sees the same tensor, so it gives the same one).
  auto linear = [&](const std::string& prefix, std::vector<LinearPart> parts, int in) {
    for (auto& p : parts) p.name = prefix + p.name;
    float scale = cfg_.int8 ? scale_of(act_scales, parts[0].name) : 0.f;
    for (const auto& p : parts)
      if (cfg_.int8 && scale_of(act_scales, p.name) != scale)
        throw std::invalid_argument("activation_scales: '" + p.name + "' differs from '" + parts[0].name +
                                    "', but both read the same input and run as one int8 GEMM");
    return Linear(kt_, lookup, parts, in, cfg_.int8, scale);
  };
  for (size_t i = 0; i < cfg_.encoder.size(); ++i) {
    const LayerShape& s = cfg_.encoder[i];
    std::string p = layer_name("encoder", i);
    int inner = s.heads * hd;
    EncoderLayer L;
    L.heads = s.heads;
    L.ln_attn = LayerNorm(kt_, lookup, p + "ln_attn", d);
    L.ln_ffn = LayerNorm(kt_, lookup, p + "ln_ffn", d);
    L.qkv = linear(p, {{"self_attn.q", inner}, {"self_attn.k", inner}, {"self_attn.v", inner}}, d);
    L.o = linear(p, {{"self_attn.o", d}}, inner);
    L.fc1 = linear(p, {{"ffn.fc1", s.ffn}}, d);
    L.fc2 = linear(p, {{"ffn.fc2", d}}, s.ffn);
    encoder_.push_back(std::move(L));
  }
  for (size_t i = 0; i < cfg_.decoder.size(); ++i) {
    const LayerShape& s = cfg_.decoder[i];
    std::string p = layer_name("decoder", i);
    int inner = s.heads * hd;
    DecoderLayer L;
    L.heads = s.heads;
    L.ln_self = LayerNorm(kt_, lookup, p + "ln_self", d);
    L.ln_cross = LayerNorm(kt_, lookup, p + "ln_cross", d);
    L.ln_ffn = LayerNorm(kt_, lookup, p + "ln_ffn", d);
    if (cfg_.ssru_decoder) {
      L.ssru = linear(p, {{"ssru.w", d, false}, {"ssru.wf", d}}, d);
    } else {
      L.self_qkv = linear(p, {{"self_attn.q", inner}, {"self_attn.k", inner}, {"self_attn.v", inner}}, d);
      L.self_o = linear(p, {{"self_attn.o", d}}, inner);
    }
    L.cross_q = linear(p, {{"cross_attn.q", inner}}, d);
    L.cross_kv = linear(p, {{"cross_attn.k", inner}, {"cross_attn.v", inner}}, d);
    L.cross_o = linear(p, {{"cross_attn.o", d}}, inner);
    L.fc1 = linear(p, {{"ffn.fc1", s.ffn}}, d);
    L.fc2 = linear(p, {{"ffn.fc2", d}}, s.ffn);
    decoder_.push_back(std::move(L));
  }
  if (cfg_.pre_norm) {
    enc_final_ = LayerNorm(kt_, lookup, "encoder.final_ln", d);
    dec_final_ = LayerNorm(kt_, lookup, "decoder.final_ln", d);
  }
  if (cfg_.proposal_heads > 0)
    heads_ = ProposalHeads(kt_, lookup, cfg_.proposal_heads, cfg_.proposal_hidden, d, cfg_.int8, act_scales);
}

// ---------------------------------------------------------------- building blocks
void Model::embed(int32_t id, int position, float* out) {
  const int d = cfg_.d_model;
  size_t have = positions_.size() / static_cast<size_t>(d);
  if (static_cast<size_t>(position) >= have) {
    // PE(p, 2i) = sin(p * 10000^(-2i/d)), PE(p, 2i+1) = cos(...), in float as
    // export/modeling.py computes it. Grown in doubling steps: sin/cos per embedded
    // token cost more than the rest of an int8 decoder step.
    size_t rows = std::max<size_t>(static_cast<size_t>(position) + 1, 2 * have);
    positions_.resize(rows * d);
    const float log_base = -std::log(10000.0f) / static_cast<float>(d);
    for (size_t p = have; p < rows; ++p)
      for (int i = 0; i < d; i += 2) {
        float angle = static_cast<float>(p) * std::exp(log_base * static_cast<float>(i));
        positions_[p * d + i] = std::sin(angle);
        if (i + 1 < d) positions_[p * d + i + 1] = std::cos(angle);
      }
  }
  const float scale = std::sqrt(static_cast<float>(d));
  const float* e = embed_.data() + static_cast<size_t>(id) * d;
  const float* pe = positions_.data() + static_cast<size_t>(position) * d;
  for (int i = 0; i < d; ++i) out[i] = e[i] * scale + pe[i];
}

void Model::sublayer_input(const LayerNorm& ln, const float* x, int rows, float* h) const {
  if (cfg_.pre_norm)
    ln.forward(x, rows, h);
  else
    std::memcpy(h, x, sizeof(float) * static_cast<size_t>(rows) * cfg_.d_model);
}

void Model::add_residual(const LayerNorm& ln, float* x, const float* y, int rows) const {
  size_t count = static_cast<size_t>(rows) * cfg_.d_model;
  for (size_t i = 0; i < count; ++i) x[i] += y[i];
  if (!cfg_.pre_norm) ln.forward(x, rows, x);
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

// ---------------------------------------------------------------- encoder
Memory Model::encode(const std::vector<std::vector<int32_t>>& sources,
                     const std::vector<std::vector<int32_t>>& shortlists) {
  std::lock_guard<std::mutex> lock(call_mutex_);
  const int d = cfg_.d_model, hd = cfg_.head_dim;
  const int R = static_cast<int>(sources.size());
  std::vector<int> offset(static_cast<size_t>(R) + 1, 0);
  for (int b = 0; b < R; ++b) offset[b + 1] = offset[b] + static_cast<int>(sources[b].size());
  const int T = offset[R];
  x_.resize(static_cast<size_t>(T) * d);
  for (int b = 0; b < R; ++b)
    for (int i = 0; i < offset[b + 1] - offset[b]; ++i)
      embed(sources[b][i], i, x_.data() + static_cast<size_t>(offset[b] + i) * d);
  h_.resize(x_.size());
  y_.resize(x_.size());
  for (const EncoderLayer& L : encoder_) {
    const int inner = L.heads * hd;
    sublayer_input(L.ln_attn, x_.data(), T, h_.data());
    big_.resize(static_cast<size_t>(T) * 3 * inner);
    L.qkv.forward(h_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
    att_.resize(static_cast<size_t>(T) * inner);
    parallel_rows(&pool_, R, [&](int b) {
      int len = offset[b + 1] - offset[b];
      std::vector<int> visible(static_cast<size_t>(len), len);
      const float* qkv = big_.data() + static_cast<size_t>(offset[b]) * 3 * inner;
      attend(kt_, {L.heads, hd}, qkv, 3 * static_cast<size_t>(inner), len, qkv + inner, qkv + 2 * inner,
             3 * static_cast<size_t>(inner), len, visible.data(),
             att_.data() + static_cast<size_t>(offset[b]) * inner, static_cast<size_t>(inner),
             attention_scratch);
    });
    L.o.forward(att_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    add_residual(L.ln_attn, x_.data(), y_.data(), T);
    sublayer_input(L.ln_ffn, x_.data(), T, h_.data());
    big_.resize(static_cast<size_t>(T) * L.fc1.out());
    L.fc1.forward(h_.data(), T, big_.data(), &pool_, /*relu=*/true, &i8_scratch_);
    L.fc2.forward(big_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    add_residual(L.ln_ffn, x_.data(), y_.data(), T);
  }
  if (cfg_.pre_norm) enc_final_.forward(x_.data(), T, x_.data());

  std::vector<std::shared_ptr<MemoryRow>> rows(static_cast<size_t>(R));
  for (int b = 0; b < R; ++b) {
    rows[b] = std::make_shared<MemoryRow>();
    rows[b]->source = sources[b];
    if (b < static_cast<int>(shortlists.size())) rows[b]->shortlist = shortlists[b];
    rows[b]->cross_kv.resize(decoder_.size());
  }
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const int width = 2 * decoder_[l].heads * hd;
    big_.resize(static_cast<size_t>(T) * width);
    decoder_[l].cross_kv.forward(x_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
    for (int b = 0; b < R; ++b)
      rows[b]->cross_kv[l].assign(big_.begin() + static_cast<std::ptrdiff_t>(offset[b]) * width,
                                  big_.begin() + static_cast<std::ptrdiff_t>(offset[b + 1]) * width);
  }
  Memory memory;
  memory.rows.assign(rows.begin(), rows.end());
  return memory;
}

DecoderState Model::start(const Memory& memory) const {
  DecoderState state;
  state.rows.resize(memory.rows.size());
  for (size_t b = 0; b < memory.rows.size(); ++b) state.rows[b].memory = memory.rows[b];
  return state;
}

// ---------------------------------------------------------------- decoder
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

  for (size_t l = 0; l < decoder_.size(); ++l) {
    const DecoderLayer& L = decoder_[l];
    const int inner = L.heads * hd;
    // Self sublayer.
    sublayer_input(L.ln_self, x, T, h_.data());
    if (cfg_.ssru_decoder) {
      big_.resize(static_cast<size_t>(T) * 2 * d);
      L.ssru.forward(h_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
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
      parallel_rows(&pool_, R, [&](int b) {
        RowCache& row = *rows[b];
        const int n = counts[b], start = row.length, total = start + n;
        const float* qkv = big_.data() + static_cast<size_t>(offset[b]) * 3 * inner;
        float* k = row.buffers->k[l].data();
        float* v = row.buffers->v[l].data();
        for (int i = 0; i < n; ++i) {
          std::memcpy(k + static_cast<size_t>(start + i) * inner, qkv + static_cast<size_t>(i) * 3 * inner + inner,
                      sizeof(float) * inner);
          std::memcpy(v + static_cast<size_t>(start + i) * inner, qkv + static_cast<size_t>(i) * 3 * inner + 2 * inner,
                      sizeof(float) * inner);
        }
        std::vector<int> visible(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          int position = start + i;
          // Drafter: [BOS, prefix] is causal; the block of `block` masks sees everything.
          bool in_block = visibility == Visibility::kDraftBlock && i >= n - block;
          visible[i] = in_block ? total : position + 1;
        }
        attend(kt_, {L.heads, hd}, qkv, 3 * static_cast<size_t>(inner), n, k, v, static_cast<size_t>(inner), total,
               visible.data(), att_.data() + static_cast<size_t>(offset[b]) * inner, static_cast<size_t>(inner),
               attention_scratch);
      });
      L.self_o.forward(att_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    }
    add_residual(L.ln_self, x, y_.data(), T);
    // Cross-attention over the row's own source.
    sublayer_input(L.ln_cross, x, T, h_.data());
    att_.resize(static_cast<size_t>(T) * inner);
    big_.resize(static_cast<size_t>(T) * inner);
    L.cross_q.forward(h_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
    parallel_rows(&pool_, R, [&](int b) {
      const MemoryRow& mem = *rows[b]->memory;
      const int src = static_cast<int>(mem.source.size());
      std::vector<int> visible(static_cast<size_t>(counts[b]), src);
      const float* kv = mem.cross_kv[l].data();
      attend(kt_, {L.heads, hd}, big_.data() + static_cast<size_t>(offset[b]) * inner, static_cast<size_t>(inner),
             counts[b], kv, kv + inner, 2 * static_cast<size_t>(inner), src, visible.data(),
             att_.data() + static_cast<size_t>(offset[b]) * inner, static_cast<size_t>(inner), attention_scratch);
    });
    L.cross_o.forward(att_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    add_residual(L.ln_cross, x, y_.data(), T);
    // FFN.
    sublayer_input(L.ln_ffn, x, T, h_.data());
    big_.resize(static_cast<size_t>(T) * L.fc1.out());
    L.fc1.forward(h_.data(), T, big_.data(), &pool_, /*relu=*/true, &i8_scratch_);
    L.fc2.forward(big_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    add_residual(L.ln_ffn, x, y_.data(), T);
  }
  if (cfg_.pre_norm) dec_final_.forward(x, T, x);
  for (int b = 0; b < R; ++b) rows[b]->length += counts[b];
}

void Model::step(DecoderState& state, const int32_t* tokens, int n, const StepRequest& request,
                 const StepOutputs& outputs) {
  std::lock_guard<std::mutex> lock(call_mutex_);
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
      embed(tokens[b * n + i], state.rows[b].length + i, x_.data() + static_cast<size_t>(b * n + i) * d);
      memory_of[b * n + i] = state.rows[b].memory.get();
    }
  }
  decoder_pass(rows, std::vector<int>(static_cast<size_t>(R), n), x_.data(), Visibility::kCausal, 0);
  output_stats(x_.data(), T, memory_of, request, outputs);
  if (request.draft_lengths) propose(tokens, n, x_.data(), memory_of, request, outputs);
}

void Model::propose(const int32_t* tokens, int n, const float* h, const std::vector<const MemoryRow*>& memory_of,
                    const StepRequest& request, const StepOutputs& outputs) {
  const int d = cfg_.d_model, K = request.heads > 0 ? std::min(request.heads, heads_.count()) : heads_.count();
  const int R = static_cast<int>(memory_of.size()) / n;
  // The states at the accepted positions; x_ (which h points into) is left alone.
  h_.resize(static_cast<size_t>(R) * d);
  for (int b = 0; b < R; ++b) {
    const int64_t* argmax = outputs.argmax + static_cast<size_t>(b) * n;
    const int32_t* draft = tokens + static_cast<size_t>(b) * n + 1;
    int64_t j = 0;
    while (j < request.draft_lengths[b] && draft[j] == argmax[j]) ++j;
    outputs.accepted[b] = j;
    std::memcpy(h_.data() + static_cast<size_t>(b) * d, h + (static_cast<size_t>(b) * n + j) * d,
                sizeof(float) * d);
  }
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

void Model::truncate(DecoderState& state, const std::vector<int>& lengths) const {
  for (size_t b = 0; b < state.rows.size(); ++b) state.rows[b].length = lengths[b];
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
    if (position == 0) embed(cfg_.bos, position++, x_.data() + static_cast<size_t>(t++) * d);
    for (size_t i = static_cast<size_t>(kept[b]); i < prefixes[b].size(); ++i)
      embed(prefixes[b][i], position++, x_.data() + static_cast<size_t>(t++) * d);
    for (int j = 0; j < k; ++j) embed(cfg_.mask, position++, x_.data() + static_cast<size_t>(t++) * d);
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

// ---------------------------------------------------------------- scratch
size_t Model::held_scratch_bytes() const {
  size_t floats = 0;
  for (const auto* v : {&x_, &h_, &big_, &y_, &att_, &logits_}) floats += v->capacity();
  return floats * sizeof(float) + i8_scratch_.bytes();
}

size_t Model::scratch_bytes() {
  std::lock_guard<std::mutex> lock(call_mutex_);
  return held_scratch_bytes();
}

size_t Model::release_scratch(size_t keep_bytes) {
  std::lock_guard<std::mutex> lock(call_mutex_);
  size_t held = held_scratch_bytes();
  if (held <= keep_bytes) return 0;
  // shrink_to_fit is only a request; swapping with an empty vector frees.
  for (auto* v : {&x_, &h_, &big_, &y_, &att_, &logits_}) std::vector<float>().swap(*v);
  i8_scratch_ = I8Scratch();
#if defined(__GLIBC__)
  // The big batch's decoder caches and encoder memories (per-row vectors, mostly below
  // the mmap threshold) were freed by now, but glibc keeps freed heap pages mapped
  // while any live chunk sits above them: measured, RSS stayed ~0.9 GB above the load
  // size after a 5000-row batch until malloc_trim returned the free pages.
  malloc_trim(0);
#endif
  return held;
}

// ---------------------------------------------------------------- output layer
void Model::output_stats(const float* h, int T, const std::vector<const MemoryRow*>& memory_of,
                         const StepRequest& request, const StepOutputs& outputs) {
  const int V = cfg_.vocab_size;
  const float ninf = -std::numeric_limits<float>::infinity();
  // Column lists: a row's own shortlist, or the full vocabulary.
  std::vector<int64_t> offsets(static_cast<size_t>(T) + 1, 0);
  bool any_shortlist = false;
  for (int t = 0; t < T; ++t) {
    size_t s = memory_of[t]->shortlist.size();
    any_shortlist |= s > 0;
    offsets[t + 1] = offsets[t] + static_cast<int64_t>(s > 0 ? s : static_cast<size_t>(V));
  }
  logits_.resize(static_cast<size_t>(offsets[T]));
  if (!any_shortlist) {
    output_.forward(h, T, logits_.data(), &pool_, false, &i8_scratch_);
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
  parallel_rows(&pool_, T, [&](int t) {
    const float* row = logits_.data() + offsets[t];
    const int64_t n = offsets[t + 1] - offsets[t];
    const auto& shortlist = memory_of[t]->shortlist;
    auto to_id = [&](int64_t column) { return shortlist.empty() ? column : int64_t{shortlist[column]}; };
    bool needs_stats = request.topk > 0 || request.ids || request.logprobs;
    if (!needs_stats) {
      outputs.argmax[t] = to_id(kt_.argmax(row, n));
      return;
    }
    int64_t top_ids[64];
    float top_values[64];
    int kk = static_cast<int>(std::min<int64_t>(std::min(k, 64), n));
    RowStats s = kt_.row_stats(row, n, kk, top_ids, top_values);
    if (request.argmax) outputs.argmax[t] = to_id(top_ids[0]);
    for (int i = 0; i < request.topk; ++i) {
      bool have = i < kk;
      outputs.topk_ids[static_cast<size_t>(t) * request.topk + i] = have ? to_id(top_ids[i]) : -1;
      outputs.topk_logprobs[static_cast<size_t>(t) * request.topk + i] = have ? top_values[i] - s.log_sum_exp : ninf;
    }
    auto logit_of = [&](int64_t id) -> float {
      if (shortlist.empty()) return row[id];
      auto it = std::lower_bound(shortlist.begin(), shortlist.end(), static_cast<int32_t>(id));
      return (it != shortlist.end() && *it == id) ? row[it - shortlist.begin()] : ninf;
    };
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

}  // namespace fastdec
