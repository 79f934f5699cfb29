// The encoder (Model::encode) and the cross-attention K/V that every decoder layer reads
// from its output, for the model's own encoder or, with a shared encoder, another
// model's (Model::attach).
#include "model/model.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "kernels/op_profile.h"
#include "layers/attention.h"

namespace fastdec {

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

}  // namespace fastdec
