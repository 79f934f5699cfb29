// Construction, encoder, decoder step, truncate and select of the GPU model (gpu_model.h);
// the output layer and the proposal heads are in gpu_output.cc. Mirrors csrc/model/
// (encoder.cc, decoder.cc) step for step, over ops.h instead of the CPU kernels.
#include "cuda/gpu_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace fastdec {
namespace gpu {
namespace {


std::string layer(const char* stack, size_t i) { return std::string(stack) + ".layers." + std::to_string(i) + "."; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint64_t next_id() {
  static std::atomic<uint64_t> ids{0};
  return ++ids;
}

}  // namespace

// ---------------------------------------------------------------- construction
const HostTensor& Model::tensor(const HostTensors& t, const std::string& name, std::vector<int64_t> shape) const {
  auto it = t.find(name);
  if (it == t.end()) throw std::invalid_argument("tensor '" + name + "': missing (expected float32 " + shape_text(shape) + ")");
  if (it->second.shape != shape)
    throw std::invalid_argument("tensor '" + name + "': shape " + shape_text(it->second.shape) + ", expected " +
                                shape_text(shape));
  return it->second;
}

Model::Linear Model::linear(const HostTensors& t, const std::vector<std::string>& names,
                            const std::vector<bool>& biased, int in) {
  // Parts that read the same input are stacked along the output: one GEMM.
  std::vector<float> w, b;
  bool any_bias = false;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = t.find(names[i] + ".weight");
    if (it == t.end()) throw std::invalid_argument("tensor '" + names[i] + ".weight': missing");
    const HostTensor& wt = it->second;
    if (wt.shape.size() != 2 || wt.shape[1] != in)
      throw std::invalid_argument("tensor '" + names[i] + ".weight': shape " + shape_text(wt.shape) +
                                  ", expected [out, " + std::to_string(in) + "]");
    const int64_t out = wt.shape[0];
    w.insert(w.end(), wt.data, wt.data + out * in);
    if (biased[i]) {
      const HostTensor& bt = tensor(t, names[i] + ".bias", {out});
      b.insert(b.end(), bt.data, bt.data + out);
      any_bias = true;
    } else {
      b.insert(b.end(), static_cast<size_t>(out), 0.f);
    }
  }
  Linear l;
  l.w = ops_->weight(w.data(), static_cast<int>(w.size() / static_cast<size_t>(in)), in);
  if (any_bias) l.bias = ops_->upload_floats(b.data(), b.size());
  return l;
}

Model::Norm Model::norm(const HostTensors& t, const std::string& name) {
  const int64_t d = cfg_.d_model;
  return {ops_->upload_floats(tensor(t, name + ".weight", {d}).data, static_cast<size_t>(d)),
          ops_->upload_floats(tensor(t, name + ".bias", {d}).data, static_cast<size_t>(d))};
}

Model::Model(Config config, const HostTensors& t, std::unique_ptr<Ops> ops)
    : cfg_(std::move(config)), ops_(std::move(ops)), id_(next_id()),
      scratch_(kSlots), scratch_floats_(kSlots, 0) {
  const int64_t d = cfg_.d_model, V = cfg_.vocab, hd = cfg_.head_dim;
  const HostTensor& e = tensor(t, "embed.weight", {V, d});
  embed_ = ops_->upload_floats(e.data, static_cast<size_t>(V * d));
  std::vector<float> bias(tensor(t, "output.bias", {V}).data, tensor(t, "output.bias", {V}).data + V);
  for (int id : cfg_.suppress) bias.at(static_cast<size_t>(id)) = -std::numeric_limits<float>::infinity();
  output_.w = ops_->weight(e.data, static_cast<int>(V), static_cast<int>(d));
  output_.bias = ops_->upload_floats(bias.data(), bias.size());
  const int in = static_cast<int>(d);
  for (size_t i = 0; i < cfg_.encoder.size(); ++i) {
    const std::string p = layer("encoder", i);
    EncoderLayer L;
    L.heads = cfg_.encoder[i].heads;
    L.ln_attn = norm(t, p + "ln_attn");
    L.ln_ffn = norm(t, p + "ln_ffn");
    L.qkv = linear(t, {p + "self_attn.q", p + "self_attn.k", p + "self_attn.v"}, {true, true, true}, in);
    L.o = linear(t, {p + "self_attn.o"}, {true}, static_cast<int>(L.heads * hd));
    L.fc1 = linear(t, {p + "ffn.fc1"}, {true}, in);
    L.fc2 = linear(t, {p + "ffn.fc2"}, {true}, cfg_.encoder[i].ffn);
    encoder_.push_back(std::move(L));
  }
  for (size_t i = 0; i < cfg_.decoder.size(); ++i) {
    const std::string p = layer("decoder", i);
    DecoderLayer L;
    L.heads = cfg_.decoder[i].heads;
    const int inner = static_cast<int>(L.heads * hd);
    L.ln_self = norm(t, p + "ln_self");
    L.ln_cross = norm(t, p + "ln_cross");
    L.ln_ffn = norm(t, p + "ln_ffn");
    if (cfg_.ssru) {
      L.ssru = linear(t, {p + "ssru.w", p + "ssru.wf"}, {false, true}, in);
    } else {
      L.self_qkv = linear(t, {p + "self_attn.q", p + "self_attn.k", p + "self_attn.v"}, {true, true, true}, in);
      L.self_o = linear(t, {p + "self_attn.o"}, {true}, inner);
    }
    L.cross_q = linear(t, {p + "cross_attn.q"}, {true}, in);
    L.cross_kv = linear(t, {p + "cross_attn.k", p + "cross_attn.v"}, {true, true}, in);
    L.cross_o = linear(t, {p + "cross_attn.o"}, {true}, inner);
    L.fc1 = linear(t, {p + "ffn.fc1"}, {true}, in);
    L.fc2 = linear(t, {p + "ffn.fc2"}, {true}, cfg_.decoder[i].ffn);
    decoder_.push_back(std::move(L));
  }
  if (cfg_.pre_norm) {
    if (!cfg_.shared_encoder) enc_final_ = norm(t, "encoder.final_ln");
    dec_final_ = norm(t, "decoder.final_ln");
  }
  for (int i = 0; i < cfg_.heads; ++i) {
    const std::string p = "heads." + std::to_string(i) + ".";
    head_fc1_.push_back(linear(t, {p + "fc1"}, {true}, in));
    head_fc2_.push_back(linear(t, {p + "fc2"}, {true}, cfg_.heads_hidden));
  }
  positions_up_to(255);
}

// ---------------------------------------------------------------- helpers
float* Model::scratch(int slot, size_t floats) {
  if (scratch_floats_[slot] < floats) {
    scratch_floats_[slot] = std::max(floats, scratch_floats_[slot] * 2);
    scratch_[slot] = ops_->alloc(scratch_floats_[slot] * sizeof(float));
  }
  return at<float>(scratch_[slot]);
}

const int32_t* Model::upload_ints(const std::vector<int32_t>& host) {
  // One arena, reset by each call (ints_used_ = 0); a full one is replaced, the old
  // one kept until the call ends, as ops queued before may still read it.
  if (ints_used_ + host.size() > ints_capacity_) {
    retired_.push_back(ints_);
    ints_capacity_ = std::max<size_t>(2 * ints_capacity_, ints_used_ + host.size() + 1024);
    ints_ = ops_->alloc(ints_capacity_ * sizeof(int32_t));
    ints_used_ = 0;
  }
  int32_t* at_ = at<int32_t>(ints_) + ints_used_;
  if (!host.empty()) ops_->upload(at_, host.data(), host.size() * sizeof(int32_t));
  ints_used_ += host.size();
  return at_;
}

void Model::begin_call() {
  ints_used_ = 0;
  retired_.clear();
}

void Model::positions_up_to(int position) {
  if (position < pos_rows_) return;
  const int rows = std::max(position + 1, 2 * pos_rows_);
  std::vector<float> table(static_cast<size_t>(rows) * cfg_.d_model);
  position_rows(cfg_.positions, cfg_.d_model, 0, static_cast<size_t>(rows), table.data());  // the CPU engine's bits
  pos_table_ = ops_->upload_floats(table.data(), table.size());
  pos_rows_ = rows;
}

void Model::run(const Linear& l, const float* x, int rows, float* y, Act act, bool stable) {
  if (stable)
    ops_->linear_rows(l.w, l.bias ? at<float>(l.bias) : nullptr, x, rows, y, act);
  else
    ops_->linear(l.w, l.bias ? at<float>(l.bias) : nullptr, x, rows, y, act);
}

void Model::sublayer_input(const Norm& ln, const float* x, int rows, float* h) {
  if (cfg_.pre_norm)
    ops_->add_layer_norm(const_cast<float*>(x), nullptr, at<float>(ln.gamma), at<float>(ln.beta), rows, cfg_.d_model,
                         cfg_.eps, h);
  else
    ops_->copy(h, x, sizeof(float) * static_cast<size_t>(rows) * cfg_.d_model);
}

// x += y and the norm that reads x next, as csrc/model/model.cc's add_residual: pre-norm
// h = next(x) (next: the following sublayer's input norm, or the final norm with h = x);
// post-norm x = post(x), h = x.
void Model::add_residual(const Norm& post, const Norm* next, float* x, const float* y, int rows, float* h) {
  const int d = cfg_.d_model;
  if (cfg_.pre_norm) {
    if (next && next->gamma)
      ops_->add_layer_norm(x, y, at<float>(next->gamma), at<float>(next->beta), rows, d, cfg_.eps, h);
    else
      ops_->add(x, y, static_cast<size_t>(rows) * d);  // no final norm (none stored)
  } else {
    ops_->add_layer_norm(x, y, at<float>(post.gamma), at<float>(post.beta), rows, d, cfg_.eps, x);
    if (h != x) ops_->copy(h, x, sizeof(float) * static_cast<size_t>(rows) * d);
  }
}

void Model::ffn(const Linear& fc1, const Linear& fc2, const float* h, int rows, float* y, bool stable) {
  float* hidden = scratch(kBig, static_cast<size_t>(rows) * fc1.w.out);
  run(fc1, h, rows, hidden, cfg_.activation, stable);
  run(fc2, hidden, rows, y, Act::kNone, stable);
}

// ---------------------------------------------------------------- encoder
std::shared_ptr<Memory> Model::encode(const std::vector<std::vector<int32_t>>& sources,
                                      const std::vector<std::vector<int32_t>>& shortlists) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cfg_.shared_encoder)
    throw std::invalid_argument("encode: this model has no encoder (config encoder.shared); attach it to the "
                                "memory of the model whose encoder it reads");
  begin_call();
  const int d = cfg_.d_model, hd = cfg_.head_dim;
  auto m = std::make_shared<Memory>();
  m->owner = id_;
  m->R = static_cast<int>(sources.size());
  for (const auto& s : sources) {
    if (s.empty()) throw std::invalid_argument("encode: an empty source (expected ids followed by EOS)");
    m->S = std::max(m->S, static_cast<int>(s.size()));
    m->src_len.push_back(static_cast<int>(s.size()));
  }
  const int R = m->R, S = m->S, T = R * S;
  if (T == 0) return m;
  positions_up_to(S);
  std::vector<int32_t> ints(static_cast<size_t>(4) * T, 0);  // ids | positions | row | visible
  for (int b = 0; b < R; ++b)
    for (int i = 0; i < S; ++i) {
      const size_t t = static_cast<size_t>(b) * S + i;
      ints[t] = i < m->src_len[b] ? sources[b][i] : cfg_.pad;
      ints[T + t] = i;
      ints[2 * T + t] = b;
      ints[3 * T + t] = m->src_len[b];
    }
  for (int b = 0; b < R; ++b)
    for (int32_t id : sources[b])
      if (id < 0 || id >= cfg_.vocab)
        throw std::invalid_argument("encode: source id " + std::to_string(id) + " outside the vocabulary [0, " +
                                    std::to_string(cfg_.vocab) + ")");
  const int32_t* dev = upload_ints(ints);
  m->enc_out = ops_->alloc(sizeof(float) * static_cast<size_t>(T) * d);
  float* x = at<float>(m->enc_out);
  float* h = scratch(kH, static_cast<size_t>(T) * d);
  float* y = scratch(kY, static_cast<size_t>(T) * d);
  ops_->embed(at<float>(embed_), at<float>(pos_table_), dev, dev + T, T, d, std::sqrt(static_cast<float>(d)), x);
  if (!encoder_.empty()) sublayer_input(encoder_[0].ln_attn, x, T, h);
  for (size_t i = 0; i < encoder_.size(); ++i) {
    const EncoderLayer& L = encoder_[i];
    const size_t inner = static_cast<size_t>(L.heads) * hd;
    float* qkv = scratch(kQ, static_cast<size_t>(T) * 3 * inner);
    float* att = scratch(kAtt, static_cast<size_t>(T) * inner);
    run(L.qkv, h, T, qkv);
    ops_->attention(qkv, 3 * inner, qkv + inner, qkv + 2 * inner, 3 * inner, static_cast<size_t>(S) * 3 * inner,
                    dev + 2 * T, dev + 3 * T, T, L.heads, hd, S, att, inner);
    run(L.o, att, T, y);
    add_residual(L.ln_attn, &L.ln_ffn, x, y, T, h);
    ffn(L.fc1, L.fc2, h, T, y, false);
    const bool last = i + 1 == encoder_.size();
    add_residual(L.ln_ffn, last ? &enc_final_ : &encoder_[i + 1].ln_attn, x, y, T, last ? x : h);
  }
  if (encoder_.empty() && cfg_.pre_norm)
    ops_->add_layer_norm(x, nullptr, at<float>(enc_final_.gamma), at<float>(enc_final_.beta), T, d, cfg_.eps, x);
  bool any = false;
  for (const auto& s : shortlists) any |= !s.empty();
  if (any) {
    const float ninf = -std::numeric_limits<float>::infinity();
    std::vector<float> mask(static_cast<size_t>(R) * cfg_.vocab, 0.f);
    for (int b = 0; b < R && b < static_cast<int>(shortlists.size()); ++b) {
      if (shortlists[b].empty()) continue;
      float* row = mask.data() + static_cast<size_t>(b) * cfg_.vocab;
      std::fill(row, row + cfg_.vocab, ninf);
      for (int32_t id : shortlists[b]) row[id] = 0.f;
    }
    m->mask = ops_->upload_floats(mask.data(), mask.size());
  }
  project_cross(*m, x);
  return m;
}

void Model::project_cross(Memory& m, const float* enc) {
  const int T = m.R * m.S;
  m.cross_kv.resize(decoder_.size());
  for (size_t l = 0; l < decoder_.size(); ++l) {
    m.cross_kv[l] = ops_->alloc(sizeof(float) * static_cast<size_t>(T) * decoder_[l].cross_kv.w.out);
    run(decoder_[l].cross_kv, enc, T, at<float>(m.cross_kv[l]));
  }
}

std::shared_ptr<Memory> Model::attach(const Memory& host) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cfg_.shared_encoder)
    throw std::invalid_argument("attach: this model has its own encoder (config encoder.shared is absent); use encode");
  begin_call();
  auto m = std::make_shared<Memory>();
  m->owner = id_;
  m->R = host.R;
  m->S = host.S;
  m->src_len = host.src_len;
  m->enc_out = host.enc_out;  // shared, read only
  m->mask = host.mask;
  if (m->R * m->S > 0) project_cross(*m, at<float>(m->enc_out));
  return m;
}

// ---------------------------------------------------------------- decoder
std::shared_ptr<State> Model::start(const std::shared_ptr<const Memory>& memory) const {
  auto s = std::make_shared<State>();
  s->owner = id_;
  s->memory = memory;
  s->lengths.assign(static_cast<size_t>(memory->R), 0);
  for (int b = 0; b < memory->R; ++b) s->mem_row.push_back(b);
  s->k.resize(decoder_.size());
  s->v.resize(decoder_.size());
  return s;
}

void Model::grow(State& s, int needed) {
  if (needed <= s.capacity) return;
  const int cap = std::max(needed, std::max(16, 2 * s.capacity));
  const size_t R = s.lengths.size();
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const size_t w = cache_width(l);
    for (auto* cache : {&s.k[l], &s.v[l]}) {
      if (cfg_.ssru && cache == &s.v[l]) continue;
      DevPtr fresh = ops_->alloc(sizeof(float) * R * static_cast<size_t>(cap) * w);
      if (*cache && s.capacity > 0)
        ops_->copy_rows(at<float>(fresh), cap * w, at<float>(*cache), s.capacity * w, s.capacity * w, R);
      *cache = std::move(fresh);
    }
  }
  s.capacity = cap;
}

void Model::step(State& s, const int32_t* tokens, int n, const Request& request, const Outputs& outputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (request.draft_lengths && cfg_.heads == 0)
    throw std::invalid_argument("step: proposals asked for, but this model has no proposal heads");
  begin_call();
  const int R = static_cast<int>(s.lengths.size()), T = R * n;
  if (T == 0) return;
  const float* x = decode(s, tokens, n, nullptr);
  std::vector<int32_t> mask_row(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) mask_row[t] = s.mem_row[t / n];
  output_stats(x, T, mask_row, *s.memory, request, outputs);
  if (request.draft_lengths) propose(tokens, n, x, s.mem_row, *s.memory, request, outputs);
}

const float* Model::decode(State& s, const int32_t* tokens, int n, const std::vector<int32_t>* visible) {
  const int d = cfg_.d_model, hd = cfg_.head_dim, V = cfg_.vocab;
  const int R = static_cast<int>(s.lengths.size()), T = R * n;
  for (int t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw std::invalid_argument("step: token id " + std::to_string(tokens[t]) + " outside the vocabulary [0, " +
                                  std::to_string(V) + ")");
  int longest = 0;
  for (int len : s.lengths) longest = std::max(longest, len + n);
  grow(s, longest);
  positions_up_to(longest);
  const Memory& mem = *s.memory;
  // ids | positions | self row | self visible | memory row | source visible | start
  std::vector<int32_t> ints(static_cast<size_t>(6) * T + R);
  for (int b = 0; b < R; ++b) {
    ints[6 * T + b] = s.lengths[b];
    for (int i = 0; i < n; ++i) {
      const size_t t = static_cast<size_t>(b) * n + i;
      ints[t] = tokens[t];
      ints[T + t] = s.lengths[b] + i;
      ints[2 * T + t] = b;
      ints[3 * T + t] = visible ? (*visible)[t] : s.lengths[b] + i + 1;  // causal unless told
      ints[4 * T + t] = s.mem_row[b];
      ints[5 * T + t] = mem.src_len[s.mem_row[b]];
    }
  }
  const int32_t* dev = upload_ints(ints);
  float* x = scratch(kX, static_cast<size_t>(T) * d);
  float* h = scratch(kH, static_cast<size_t>(T) * d);
  float* y = scratch(kY, static_cast<size_t>(T) * d);
  ops_->embed(at<float>(embed_), at<float>(pos_table_), dev, dev + T, T, d, std::sqrt(static_cast<float>(d)), x);
  if (!decoder_.empty()) sublayer_input(decoder_[0].ln_self, x, T, h);
  const size_t cap = static_cast<size_t>(s.capacity);
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const DecoderLayer& L = decoder_[l];
    const size_t inner = static_cast<size_t>(L.heads) * hd;
    if (cfg_.ssru) {
      float* proj = scratch(kQ, static_cast<size_t>(T) * 2 * d);
      run(L.ssru, h, T, proj, Act::kNone, true);
      ops_->ssru(proj, R, n, d, dev + 6 * T, at<float>(s.k[l]), cap * d, y);
    } else {
      float* qkv = scratch(kQ, static_cast<size_t>(T) * 3 * inner);
      float* att = scratch(kAtt, static_cast<size_t>(T) * inner);
      run(L.self_qkv, h, T, qkv, Act::kNone, true);
      ops_->append(qkv + inner, 3 * inner, R, n, inner, dev + 6 * T, at<float>(s.k[l]), inner, cap * inner);
      ops_->append(qkv + 2 * inner, 3 * inner, R, n, inner, dev + 6 * T, at<float>(s.v[l]), inner, cap * inner);
      ops_->attention(qkv, 3 * inner, at<float>(s.k[l]), at<float>(s.v[l]), inner, cap * inner, dev + 2 * T,
                      dev + 3 * T, T, L.heads, hd, longest, att, inner);
      run(L.self_o, att, T, y, Act::kNone, true);
    }
    add_residual(L.ln_self, &L.ln_cross, x, y, T, h);
    float* q = scratch(kQ, static_cast<size_t>(T) * inner);
    float* att = scratch(kAtt, static_cast<size_t>(T) * inner);
    run(L.cross_q, h, T, q, Act::kNone, true);
    const float* kv = at<float>(mem.cross_kv[l]);
    ops_->attention(q, inner, kv, kv + inner, 2 * inner, static_cast<size_t>(mem.S) * 2 * inner, dev + 4 * T,
                    dev + 5 * T, T, L.heads, hd, mem.S, att, inner);
    run(L.cross_o, att, T, y, Act::kNone, true);
    add_residual(L.ln_cross, &L.ln_ffn, x, y, T, h);
    ffn(L.fc1, L.fc2, h, T, y, true);
    const bool last = l + 1 == decoder_.size();
    add_residual(L.ln_ffn, last ? &dec_final_ : &decoder_[l + 1].ln_self, x, y, T, last ? x : h);
  }
  if (decoder_.empty() && cfg_.pre_norm)
    ops_->add_layer_norm(x, nullptr, at<float>(dec_final_.gamma), at<float>(dec_final_.beta), T, d, cfg_.eps, x);
  for (int b = 0; b < R; ++b) s.lengths[b] += n;
  return x;
}

// The NAT drafter's block (csrc/model/drafting.cc, Model::draft): each row runs
// [BOS, prefix, MASK x k] from scratch, the prefix causal and the k masks seeing the whole
// row; rows are padded to one width n, and padding is seen by no real position (the
// state is dropped after the call, so nothing is cached between calls as on the CPU).
void Model::draft(const std::shared_ptr<const Memory>& memory, const std::vector<std::vector<int32_t>>& prefixes,
                  int k, int64_t* ids, float* logprobs) {
  std::lock_guard<std::mutex> lock(mutex_);
  begin_call();
  const int R = static_cast<int>(prefixes.size());
  if (R != memory->R) throw std::invalid_argument("draft: one prefix per memory row expected");
  if (R == 0 || k == 0) return;
  int n = 0;
  for (const auto& p : prefixes) n = std::max(n, 1 + static_cast<int>(p.size()) + k);
  std::vector<int32_t> tokens(static_cast<size_t>(R) * n, cfg_.pad), visible(tokens.size(), 1), at_block;
  for (int b = 0; b < R; ++b) {
    const int len = static_cast<int>(prefixes[b].size()), open = 1 + len + k;
    int32_t* row = tokens.data() + static_cast<size_t>(b) * n;
    row[0] = cfg_.bos;
    std::copy(prefixes[b].begin(), prefixes[b].end(), row + 1);
    for (int i = 0; i < n; ++i) {
      if (i > len && i < open) row[i] = cfg_.mask;
      visible[static_cast<size_t>(b) * n + i] = i <= len ? i + 1 : i < open ? open : 1;
    }
    for (int j = 0; j < k; ++j) at_block.push_back(b * n + 1 + len + j);
  }
  std::shared_ptr<State> s = start(memory);
  const float* x = decode(*s, tokens.data(), n, &visible);
  float* block = scratch(kHeads, static_cast<size_t>(R) * k * cfg_.d_model);
  ops_->gather_rows(x, static_cast<size_t>(cfg_.d_model), upload_ints(at_block), R * k, block);
  std::vector<int32_t> mask_row(static_cast<size_t>(R) * k);
  for (int t = 0; t < R * k; ++t) mask_row[t] = t / k;
  std::vector<int64_t> top(static_cast<size_t>(R) * k);
  Request request;
  request.topk = 1;
  Outputs out;
  out.argmax = ids;
  out.topk_ids = top.data();
  out.topk_logprobs = logprobs;
  output_stats(block, R * k, mask_row, *memory, request, out);
}

void Model::truncate(State& s, const std::vector<int>& lengths) const {
  for (size_t b = 0; b < s.lengths.size(); ++b) s.lengths[b] = lengths[b];
}

std::shared_ptr<State> Model::select(const State& s, const std::vector<int>& rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  begin_call();
  auto out = std::make_shared<State>();
  out->owner = id_;
  out->memory = s.memory;
  out->capacity = s.capacity;
  out->k.resize(decoder_.size());
  out->v.resize(decoder_.size());
  for (int r : rows) {
    out->lengths.push_back(s.lengths[r]);
    out->mem_row.push_back(s.mem_row[r]);
  }
  if (s.capacity == 0 || rows.empty()) return out;
  const int32_t* index = upload_ints(std::vector<int32_t>(rows.begin(), rows.end()));
  const int count = static_cast<int>(rows.size());
  for (size_t l = 0; l < decoder_.size(); ++l) {
    const size_t width = static_cast<size_t>(s.capacity) * cache_width(l);
    for (auto [from, to] : {std::pair{&s.k[l], &out->k[l]}, std::pair{&s.v[l], &out->v[l]}}) {
      if (!*from) continue;
      *to = ops_->alloc(sizeof(float) * width * rows.size());
      ops_->gather_rows(at<float>(*from), width, index, count, at<float>(*to));
    }
  }
  return out;
}

std::shared_ptr<Memory> Model::select(const Memory& m, const std::vector<int>& rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  begin_call();
  auto out = std::make_shared<Memory>();
  out->owner = id_;
  out->R = static_cast<int>(rows.size());
  out->S = m.S;
  for (int r : rows) out->src_len.push_back(m.src_len[r]);
  if (rows.empty() || m.S == 0) return out;
  const int32_t* index = upload_ints(std::vector<int32_t>(rows.begin(), rows.end()));
  const int count = out->R;
  auto gather = [&](const DevPtr& from, size_t width) {
    DevPtr to = ops_->alloc(sizeof(float) * width * rows.size());
    ops_->gather_rows(at<float>(from), width, index, count, at<float>(to));
    return to;
  };
  out->enc_out = gather(m.enc_out, static_cast<size_t>(m.S) * cfg_.d_model);
  if (m.mask) out->mask = gather(m.mask, static_cast<size_t>(cfg_.vocab));
  for (size_t l = 0; l < m.cross_kv.size(); ++l)
    out->cross_kv.push_back(gather(m.cross_kv[l], static_cast<size_t>(m.S) * decoder_[l].cross_kv.w.out));
  return out;
}

}  // namespace gpu
}  // namespace fastdec
