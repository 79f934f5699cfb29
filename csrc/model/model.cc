#include "model/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "kernels/activation.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_i8.h"
#include "kernels/op_profile.h"
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

}  // namespace

Model::Model(ModelConfig config, const TensorLookup& lookup,
             const std::map<std::string, float>& act_scales, int threads)
    : cfg_(std::move(config)), kt_(active_kernels()), pool_(threads) {
  const int d = cfg_.d_model, V = cfg_.vocab_size, hd = cfg_.head_dim;
  TensorView ob = expect_tensor(lookup, "output.bias", "float32", {V});
  output_bias_.assign(ob.f32(), ob.f32() + V);
  // Tokens the model must never generate (e.g. Marian's pad): -inf here, so no argmax,
  // top-k or shortlist path can pick them, while the file keeps finite values.
  for (int id : cfg_.suppress) output_bias_[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
  TiedEmbedding tied = load_tied_embedding(kt_, lookup, V, d, cfg_.int8, cfg_.positions, output_bias_.data());
  embedding_ = std::move(tied.input);
  output_ = std::move(tied.output);

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
    L.ln_attn = LayerNorm(kt_, lookup, p + "ln_attn", d, cfg_.layer_norm_eps);
    L.ln_ffn = LayerNorm(kt_, lookup, p + "ln_ffn", d, cfg_.layer_norm_eps);
    L.qkv = linear(p, {{"self_attn.q", inner}, {"self_attn.k", inner}, {"self_attn.v", inner}}, d);
    L.o = linear(p, {{"self_attn.o", d}}, inner);
    Linear fc1 = linear(p, {{"ffn.fc1", s.ffn}}, d);
    Linear fc2 = linear(p, {{"ffn.fc2", d}}, s.ffn);
    L.ffn = FeedForward(std::move(fc1), std::move(fc2), cfg_.activation);
    encoder_.push_back(std::move(L));
  }
  for (size_t i = 0; i < cfg_.decoder.size(); ++i) {
    const LayerShape& s = cfg_.decoder[i];
    std::string p = layer_name("decoder", i);
    int inner = s.heads * hd;
    DecoderLayer L;
    L.heads = s.heads;
    L.ln_self = LayerNorm(kt_, lookup, p + "ln_self", d, cfg_.layer_norm_eps);
    L.ln_cross = LayerNorm(kt_, lookup, p + "ln_cross", d, cfg_.layer_norm_eps);
    L.ln_ffn = LayerNorm(kt_, lookup, p + "ln_ffn", d, cfg_.layer_norm_eps);
    if (cfg_.ssru_decoder) {
      L.ssru = linear(p, {{"ssru.w", d, false}, {"ssru.wf", d}}, d);
    } else {
      L.self_qkv = linear(p, {{"self_attn.q", inner}, {"self_attn.k", inner}, {"self_attn.v", inner}}, d);
      L.self_o = linear(p, {{"self_attn.o", d}}, inner);
    }
    L.cross_q = linear(p, {{"cross_attn.q", inner}}, d);
    L.cross_kv = linear(p, {{"cross_attn.k", inner}, {"cross_attn.v", inner}}, d);
    L.cross_o = linear(p, {{"cross_attn.o", d}}, inner);
    Linear fc1 = linear(p, {{"ffn.fc1", s.ffn}}, d);
    Linear fc2 = linear(p, {{"ffn.fc2", d}}, s.ffn);
    L.ffn = FeedForward(std::move(fc1), std::move(fc2), cfg_.activation);
    decoder_.push_back(std::move(L));
  }
  if (cfg_.pre_norm) {
    if (!cfg_.shared_encoder) enc_final_ = LayerNorm(kt_, lookup, "encoder.final_ln", d, cfg_.layer_norm_eps);
    dec_final_ = LayerNorm(kt_, lookup, "decoder.final_ln", d, cfg_.layer_norm_eps);
  }
  if (cfg_.proposal_heads > 0)
    heads_ = ProposalHeads(kt_, lookup, cfg_.proposal_heads, cfg_.proposal_hidden, d, cfg_.int8, act_scales);
}

// ---------------------------------------------------------------- norm placement
void Model::sublayer_input(const LayerNorm& ln, const float* x, int rows, float* h) const {
  OpTimer timer(Op::kLayerNorm);
  if (cfg_.pre_norm)
    ln.forward(x, rows, h);
  else
    std::memcpy(h, x, sizeof(float) * static_cast<size_t>(rows) * cfg_.d_model);
}

void Model::add_residual(const LayerNorm& post, const LayerNorm& next, float* x, const float* y, int rows,
                         float* h) const {
  // The add is fused with the layer norm that reads its result (kernels' add_layer_norm),
  // so the table counts the residual within layer_norm.
  OpTimer timer(Op::kLayerNorm);
  if (cfg_.pre_norm) {
    next.add_forward(x, y, rows, h);
  } else {
    post.add_forward(x, y, rows, x);
    if (h != x) std::memcpy(h, x, sizeof(float) * static_cast<size_t>(rows) * cfg_.d_model);
  }
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
  OpTimer call_timer(Op::kCallOther);
  if (cfg_.shared_encoder)
    throw std::invalid_argument("encode: this model has no encoder (config encoder.shared); attach it to the "
                                "memory of the model whose encoder it reads");
  const int d = cfg_.d_model, hd = cfg_.head_dim;
  const int R = static_cast<int>(sources.size());
  std::vector<int> offset(static_cast<size_t>(R) + 1, 0);
  for (int b = 0; b < R; ++b) offset[b + 1] = offset[b] + static_cast<int>(sources[b].size());
  const int T = offset[R];
  x_.resize(static_cast<size_t>(T) * d);
  for (int b = 0; b < R; ++b)
    for (int i = 0; i < offset[b + 1] - offset[b]; ++i)
      embedding_.forward(sources[b][i], i, x_.data() + static_cast<size_t>(offset[b] + i) * d);
  h_.resize(x_.size());
  y_.resize(x_.size());
  if (!encoder_.empty()) sublayer_input(encoder_[0].ln_attn, x_.data(), T, h_.data());
  for (size_t i = 0; i < encoder_.size(); ++i) {
    const EncoderLayer& L = encoder_[i];
    const int inner = L.heads * hd;
    big_.resize(static_cast<size_t>(T) * 3 * inner);
    L.qkv.forward(h_.data(), T, big_.data(), &pool_, false, &i8_scratch_);
    att_.resize(static_cast<size_t>(T) * inner);
    {
      OpTimer attention_timer(Op::kAttention);
      parallel_rows(&pool_, R, [&](int b) {
        attend_within(kt_, {L.heads, hd}, big_.data() + static_cast<size_t>(offset[b]) * 3 * inner,
                      offset[b + 1] - offset[b], att_.data() + static_cast<size_t>(offset[b]) * inner);
      });
    }
    L.o.forward(att_.data(), T, y_.data(), &pool_, false, &i8_scratch_);
    add_residual(L.ln_attn, L.ln_ffn, x_.data(), y_.data(), T, h_.data());
    L.ffn.forward(h_.data(), T, big_, y_.data(), &pool_, &i8_scratch_);
    // The next layer's input norm, or (pre-norm) the final one in place.
    bool last = i + 1 == encoder_.size();
    add_residual(L.ln_ffn, last ? enc_final_ : encoder_[i + 1].ln_attn, x_.data(), y_.data(), T,
                 last ? x_.data() : h_.data());
  }
  if (encoder_.empty() && cfg_.pre_norm) {
    OpTimer timer(Op::kLayerNorm);
    enc_final_.forward(x_.data(), T, x_.data());
  }

  std::vector<std::shared_ptr<MemoryRow>> rows(static_cast<size_t>(R));
  for (int b = 0; b < R; ++b) {
    rows[b] = std::make_shared<MemoryRow>();
    rows[b]->source = sources[b];
    if (b < static_cast<int>(shortlists.size()) && !shortlists[b].empty()) {
      static std::atomic<uint64_t> list_ids{0};
      rows[b]->shortlist = shortlists[b];
      rows[b]->shortlist_id = ++list_ids;
    }
    rows[b]->encoder_out = std::make_shared<const std::vector<float>>(
        x_.begin() + static_cast<std::ptrdiff_t>(offset[b]) * d, x_.begin() + static_cast<std::ptrdiff_t>(offset[b + 1]) * d);
  }
  project_cross(rows, x_.data(), offset);
  Memory memory;
  memory.rows.assign(rows.begin(), rows.end());
  return memory;
}

void Model::project_cross(std::vector<std::shared_ptr<MemoryRow>>& rows, const float* enc,
                          const std::vector<int>& offset) {
  const int R = static_cast<int>(rows.size()), T = offset[static_cast<size_t>(R)];
  for (auto& row : rows) row->cross_kv.resize(decoder_.size());
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const int width = 2 * decoder_[l].heads * cfg_.head_dim;
    big_.resize(static_cast<size_t>(T) * width);
    decoder_[l].cross_kv.forward(enc, T, big_.data(), &pool_, false, &i8_scratch_);
    OpTimer timer(Op::kCacheCopy);
    for (int b = 0; b < R; ++b)
      rows[b]->cross_kv[l].assign(big_.begin() + static_cast<std::ptrdiff_t>(offset[b]) * width,
                                  big_.begin() + static_cast<std::ptrdiff_t>(offset[b + 1]) * width);
  }
}

Memory Model::attach(const Memory& host) {
  std::lock_guard<std::mutex> lock(call_mutex_);
  OpTimer call_timer(Op::kCallOther);
  if (!cfg_.shared_encoder)
    throw std::invalid_argument("attach: this model has its own encoder (config encoder.shared is absent); use encode");
  const size_t d = static_cast<size_t>(cfg_.d_model);
  const int R = static_cast<int>(host.rows.size());
  std::vector<int> offset(static_cast<size_t>(R) + 1, 0);
  for (int b = 0; b < R; ++b) {
    const MemoryRow& row = *host.rows[b];
    if (!row.encoder_out || row.encoder_out->size() != row.source.size() * d)
      throw std::invalid_argument("attach: host memory row " + std::to_string(b) + " holds no encoder output of width " +
                                  std::to_string(d) + " (the host's d_model must be this model's)");
    offset[b + 1] = offset[b] + static_cast<int>(row.source.size());
  }
  x_.resize(static_cast<size_t>(offset[R]) * d);
  std::vector<std::shared_ptr<MemoryRow>> rows(static_cast<size_t>(R));
  for (int b = 0; b < R; ++b) {
    const MemoryRow& from = *host.rows[b];
    std::copy(from.encoder_out->begin(), from.encoder_out->end(), x_.begin() + static_cast<std::ptrdiff_t>(offset[b] * d));
    rows[b] = std::make_shared<MemoryRow>();
    rows[b]->source = from.source;
    rows[b]->shortlist = from.shortlist;
    rows[b]->shortlist_id = from.shortlist_id;  // names the same list: ids are unique process-wide
    rows[b]->encoder_out = from.encoder_out;
  }
  project_cross(rows, x_.data(), offset);
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

// ---------------------------------------------------------------- scratch
size_t Model::held_scratch_bytes() const {
  size_t floats = 0;
  for (const auto* v : {&x_, &h_, &big_, &y_, &att_, &logits_, &union_logits_}) floats += v->capacity();
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
  for (auto* v : {&x_, &h_, &big_, &y_, &att_, &logits_, &union_logits_}) std::vector<float>().swap(*v);
  shortlist_union_.release();
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
