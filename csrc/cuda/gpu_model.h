// The GPU model: the seq2seq transformer of csrc/model (same config.json, same weights,
// same Backend semantics: pyfastdec/backends/base.py), written once against the device
// operations of ops.h. With the CUDA ops it runs on the GPU (fp16 weights, fp32
// activations); with the reference ops the same code runs on any CPU, which is how the
// orchestration below is tested without a GPU.
//
// What lives where (CUDA): weights, encoder output, cross-attention K/V, shortlist masks,
// the self-attention KV cache or SSRU cell states, and every activation stay on the
// device. A step uploads one int32 block (token ids and the per-position indices built
// from the host-side lengths) and downloads one block of winners (argmax / top-k ids and
// their values); full log-probs or logits are downloaded only when asked for.
//
// Layout: a Memory is a batch [R, S] (S: its longest source; a shorter row's padding is
// never visible); a State holds, per decoder layer, a cache [R, capacity, width]
// (attention: K and V, width heads * head_dim; SSRU: the cell state c, width d) and
// `lengths` on the host. truncate only lowers lengths (positions past them are never
// read and are overwritten by the next step); select gathers cache rows; a state row
// reads memory row mem_row[b], so beam search's select copies no encoder output.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/ops.h"
#include "layers/positions.h"
#include "model/config.h"

namespace fastdec {
namespace gpu {

// config.json as the CPU engine's ModelConfig holds it (read and checked once, csrc/py_config.cc;
// bind_gpu.cc copies it here).
struct Config {
  int d_model = 0, head_dim = 0, vocab = 0;
  bool pre_norm = true, ssru = false, shared_encoder = false;
  std::vector<LayerShape> encoder, decoder;
  int pad = 0, bos = 2, mask = 4;
  bool drafter = false;  // arch "nat-drafter"
  Act activation = Act::kRelu;
  float eps = 1e-5f;
  PositionEncoding positions = PositionEncoding::kInterleaved;
  std::vector<int> suppress;
  int heads = 0, heads_hidden = 0;  // proposal heads
};

// Named float32 host tensors (int8 directories are dequantised in Python first).
struct HostTensor {
  const float* data = nullptr;
  std::vector<int64_t> shape;
};
using HostTensors = std::map<std::string, HostTensor>;

struct Memory {
  uint64_t owner = 0;
  int R = 0, S = 0;
  std::vector<int> src_len;         // host [R]
  std::vector<DevPtr> cross_kv;     // per decoder layer [R, S, 2 * inner]: K | V
  DevPtr enc_out;                   // [R, S, d]: what a shared-encoder model attaches to
  DevPtr mask;                      // [R, V] 0 / -inf (null: no shortlist)
};

struct State {
  uint64_t owner = 0;
  std::shared_ptr<const Memory> memory;
  std::vector<int> mem_row;         // [R]: the memory row each state row reads
  std::vector<int> lengths;         // [R]: positions held, BOS included
  int capacity = 0;
  std::vector<DevPtr> k, v;         // per layer [R, capacity, width] (SSRU: c in k)
};

struct Request {
  bool argmax = true;
  int topk = 0;
  const int64_t* ids = nullptr;          // [R, n]
  bool logprobs = false, logits = false;
  const int64_t* draft_lengths = nullptr;  // [R]: proposals at the accepted position
  int heads = 0;                         // proposal heads to run, 1..Config::heads (with draft_lengths)
  const int64_t* keep_ids = nullptr;     // [R, n]
  float edit_margin = 0.f;
};
struct Outputs {  // host, sized by the caller; null where not asked
  int64_t* argmax = nullptr;       // [R, n]
  int64_t* topk_ids = nullptr;     // [R, n, topk]
  float* topk_logprobs = nullptr;  // [R, n, topk]
  float* id_logprobs = nullptr;    // [R, n]
  float* logprobs = nullptr;       // [R, n, V]
  float* logits = nullptr;         // [R, n, V]
  int64_t* proposals = nullptr;    // [R, heads run]
  int64_t* accepted = nullptr;     // [R]
};

class Model {
 public:
  Model(Config config, const HostTensors& tensors, std::unique_ptr<Ops> ops);
  const Config& config() const { return cfg_; }

  // sources: ids with EOS; shortlists: per row sorted candidate ids (empty: full vocabulary).
  std::shared_ptr<Memory> encode(const std::vector<std::vector<int32_t>>& sources,
                                 const std::vector<std::vector<int32_t>>& shortlists);
  std::shared_ptr<Memory> attach(const Memory& host);  // shared encoder: the host's rows
  std::shared_ptr<State> start(const std::shared_ptr<const Memory>& memory) const;
  void step(State& state, const int32_t* tokens, int n, const Request& request, const Outputs& outputs);
  void truncate(State& state, const std::vector<int>& lengths) const;
  // NAT drafters (arch "nat-drafter"): per row the k tokens after [BOS, prefix] (argmax)
  // and their log-probs, ids / logprobs [R, k].
  void draft(const std::shared_ptr<const Memory>& memory, const std::vector<std::vector<int32_t>>& prefixes, int k,
             int64_t* ids, float* logprobs);
  std::shared_ptr<State> select(const State& state, const std::vector<int>& rows);
  std::shared_ptr<Memory> select(const Memory& memory, const std::vector<int>& rows);
  uint64_t id() const { return id_; }

 private:
  struct Linear {
    Weight w;
    DevPtr bias;  // may be null
  };
  struct Norm {
    DevPtr gamma, beta;
  };
  struct EncoderLayer {
    int heads = 0;
    Norm ln_attn, ln_ffn;
    Linear qkv, o, fc1, fc2;
  };
  struct DecoderLayer {
    int heads = 0;
    Norm ln_self, ln_cross, ln_ffn;
    Linear self_qkv, self_o, ssru, cross_q, cross_kv, cross_o, fc1, fc2;
  };

  Linear linear(const HostTensors& t, const std::vector<std::string>& names, const std::vector<bool>& biased,
                int in);
  Norm norm(const HostTensors& t, const std::string& name);
  const HostTensor& tensor(const HostTensors& t, const std::string& name, std::vector<int64_t> shape) const;

  // Scratch buffers by use; a slot's pointer is valid until the slot is asked for more.
  enum Slot { kX, kH, kY, kBig, kAtt, kQ, kLogits, kStats, kHeads, kSlots };
  float* scratch(int slot, size_t floats);  // grows, kept between calls
  const int32_t* upload_ints(const std::vector<int32_t>& host);  // valid until the call ends
  void begin_call();
  void positions_up_to(int position);  // grows the position table
  // stable: ops' linear_rows (decoder and output layer), else linear (encoder, cross K/V, drafts).
  void run(const Linear& l, const float* x, int rows, float* y, Act act = Act::kNone, bool stable = false);
  void sublayer_input(const Norm& ln, const float* x, int rows, float* h);
  void add_residual(const Norm& post, const Norm* next, float* x, const float* y, int rows, float* h);
  void ffn(const Linear& fc1, const Linear& fc2, const float* h, int rows, float* y, bool stable);
  void project_cross(Memory& m, const float* enc);
  void grow(State& state, int needed);
  // The decoder over n new positions per row (self-attention visibility: causal, or
  // visible[t] positions for position t); returns the final hidden states [R * n, d].
  const float* decode(State& state, const int32_t* tokens, int n, const std::vector<int32_t>* visible);
  size_t cache_width(size_t layer) const {
    return cfg_.ssru ? static_cast<size_t>(cfg_.d_model) : static_cast<size_t>(decoder_[layer].heads) * cfg_.head_dim;
  }
  // Logits of T rows h [T, d], row t over memory row mask_row[t]'s shortlist, and what
  // `request` asks of them (row t is position t % n of row t / n in the outputs).
  void output_stats(const float* h, int T, const std::vector<int32_t>& mask_row, const Memory& memory,
                    const Request& request, const Outputs& outputs);
  void propose(const int32_t* tokens, int n, const float* h, const std::vector<int32_t>& mem_row,
               const Memory& memory, const Request& request, const Outputs& outputs);

  Config cfg_;
  std::unique_ptr<Ops> ops_;
  uint64_t id_;
  std::mutex mutex_;  // one call at a time: scratch is shared
  DevPtr embed_;      // [V, d] float32 (the lookup table)
  Linear output_;     // tied: embed.weight in the ops' precision, output.bias (suppress: -inf)
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  Norm enc_final_, dec_final_;
  std::vector<Linear> head_fc1_, head_fc2_;
  DevPtr pos_table_;
  int pos_rows_ = 0;
  std::vector<DevPtr> scratch_;
  std::vector<size_t> scratch_floats_;
  DevPtr ints_;
  std::vector<DevPtr> retired_;
  size_t ints_capacity_ = 0, ints_used_ = 0;
};

}  // namespace gpu
}  // namespace fastdec
