// The model's construction (weights into layers), the norm placement shared by the
// encoder and the decoder, and the scratch they reuse. The rest of Model is in the files
// model.h lists.
#include "model/model.h"

#include <cstring>
#include <limits>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdexcept>
#include <utility>

#include "kernels/dispatch.h"
#include "kernels/op_profile.h"

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

}  // namespace fastdec
