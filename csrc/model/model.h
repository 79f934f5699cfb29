// The native seq2seq model: encoder, incremental decoder (attention or SSRU self
// sublayer) with multi-token steps and exact roll-back, int8 or fp32 projections,
// per-row shortlists, and the block drafter of GAD. Implements what the Backend
// protocol (pyfastdec/backends/base.py) asks; the Python side adds the protocol types.
//
// One class, implemented in one translation unit per part:
//   model.cc         construction (weights into layers), norm placement, scratch
//   encoder.cc       encode, attach (shared encoder) and the cross-attention K/V
//   decoder.cc       start, step, truncate and the decoder pass they run
//   output_layer.cc  logits over shortlists and what a step asks of them
//   drafting.cc      proposal heads, BiLD's greedy drafts, the NAT drafter's block
// The layers they are built from are in csrc/layers/.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/thread_pool.h"
#include "layers/embedding.h"
#include "layers/ffn.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"
#include "layers/proposal_heads.h"
#include "model/config.h"
#include "model/shortlist_union.h"
#include "model/state.h"
#include "model/weights.h"

namespace fastdec {

// What `step` returns per appended position; null outputs are not computed.
struct StepRequest {
  bool argmax = true;
  int topk = 0;
  const int64_t* ids = nullptr;  // [rows, n]: log-prob of these ids
  bool logprobs = false;         // full [V] log-softmax
  bool logits = false;           // full [V] raw logits (-inf outside the shortlist): what
                                 // CTranslate2's logits processors (repetition penalty) edit
  // [rows]: draft tokens in each row (tokens[b, 1..len]); non-null asks for the heads'
  // proposals at the accepted position (needs argmax; see pyfastdec/backends/base.py).
  const int64_t* draft_lengths = nullptr;
  // How many heads run (the first `heads`; 0: all). A caller that will verify only k
  // proposals next asks for k: each head costs its two linears and an output-layer row.
  int heads = 0;
  // [rows, n] or null: the token each position would keep (a correction model's source
  // token there; -1: none). The argmax output becomes that token unless the top-1 beats
  // its logit by at least edit_margin (an edit must win by the margin; 0: plain argmax).
  // Only argmax changes: topk, id and full log-probs stay the model's distribution.
  const int64_t* keep_ids = nullptr;
  float edit_margin = 0.0f;
};
struct StepOutputs {
  int64_t* argmax = nullptr;         // [rows, n]
  int64_t* topk_ids = nullptr;       // [rows, n, topk]
  float* topk_logprobs = nullptr;    // [rows, n, topk]
  float* id_logprobs = nullptr;      // [rows, n]
  float* logprobs = nullptr;         // [rows, n, V]
  float* logits = nullptr;           // [rows, n, V]
  int64_t* proposals = nullptr;      // [rows, heads run] (StepRequest::heads, or all)
  int64_t* accepted = nullptr;       // [rows]: j, the accepted draft tokens
};

class Model {
 public:
  // act_scales: calibrated input multipliers of int8 linears by name (missing -> dynamic).
  Model(ModelConfig config, const TensorLookup& lookup, const std::map<std::string, float>& act_scales,
        int threads);

  const ModelConfig& config() const { return cfg_; }
  int threads() const { return pool_.size(); }

  // sources: ids with EOS; shortlists: per row sorted candidate ids (may be empty).
  Memory encode(const std::vector<std::vector<int32_t>>& sources,
                const std::vector<std::vector<int32_t>>& shortlists);
  // A model with a shared encoder (config shared_encoder) has no encode: its memory is
  // made from another model's (the host's rows: source, shortlist, encoder output), with
  // this model's cross-attention K/V projected from the host's encoder output.
  Memory attach(const Memory& host);
  DecoderState start(const Memory& memory) const;
  // tokens [rows, n] row-major; appends n positions to every row in one pass.
  void step(DecoderState& state, const int32_t* tokens, int n, const StepRequest& request,
            const StepOutputs& outputs);
  void truncate(DecoderState& state, const std::vector<int>& lengths) const;
  // BiLD's little model drafting, in one call (decoding/bild.py): appends each row's
  // catch-up tokens (tokens [rows, w]; row b's first widths[b] are real, the rest padding
  // that is rolled back), then drafts greedily while the top-1 log-prob is >= min_logprob,
  // up to max_new tokens or EOS (the token below the threshold is not drafted).
  // drafts [rows, max_new] (-1 past counts[b]); fed[b]: how many of row b's drafted tokens
  // the state holds after its catch-up (the last drafted one is never fed). Positions after
  // those (padding of rows that stopped early) must be truncated before the next step.
  void draft_greedy(DecoderState& state, const int32_t* tokens, const int* widths, int w, int max_new,
                    float min_logprob, int64_t* drafts, int* counts, int* fed);
  // Drafter: for each row, the k tokens after [BOS, prefix] (argmax) and their log-probs.
  void draft(const Memory& memory, const std::vector<std::vector<int32_t>>& prefixes, int k,
             int64_t* ids, float* logprobs);

  // Scratch grows with the rows of a call and is kept for the next one. scratch_bytes:
  // what it holds now (the int8 activation scratch included);
  // release_scratch frees it all if it holds more than keep_bytes (after a batch far
  // beyond the usual size), returning the bytes freed.
  size_t scratch_bytes();
  size_t release_scratch(size_t keep_bytes);

  // How the shortlisted output layer runs at batch > 1 (model/shortlist_union.h): the
  // cheaper of union GEMM and per-row kernel by the cost model ("auto"), or forced.
  void set_shortlist_gemm(ShortlistGemm mode);
  ShortlistGemm shortlist_gemm();
  ShortlistUnionStats shortlist_gemm_stats();

 private:
  struct EncoderLayer {
    int heads = 0;
    LayerNorm ln_attn, ln_ffn;
    Linear qkv, o;
    FeedForward ffn;
  };
  struct DecoderLayer {
    int heads = 0;
    LayerNorm ln_self, ln_cross, ln_ffn;
    Linear self_qkv, self_o;   // attention self sublayer
    Linear ssru;               // [w | wf]: SSRU self sublayer
    Linear cross_q, cross_kv, cross_o;
    FeedForward ffn;
  };
  // Self-attention visibility of a decoder pass.
  enum class Visibility { kCausal, kDraftBlock };

  // model.cc: norm placement, shared by the encoder and the decoder.
  void sublayer_input(const LayerNorm& ln, const float* x, int rows, float* h) const;
  // x += y, then the norm that reads x next: pre-norm h = next(x) (next is the following
  // sublayer's input norm, or the final norm with h = x); post-norm x = post(x), h = x.
  void add_residual(const LayerNorm& post, const LayerNorm& next, float* x, const float* y, int rows,
                    float* h) const;
  size_t held_scratch_bytes() const;  // call_mutex_ held

  // encoder.cc: each row's cross-attention K/V per decoder layer, from encoder states
  // enc [T, d] (row b: positions offset[b] .. offset[b + 1]).
  void project_cross(std::vector<std::shared_ptr<MemoryRow>>& rows, const float* enc, const std::vector<int>& offset);

  // decoder.cc
  void grow(RowCache& row, int length) const;
  // Floats per position of a row's layer-l cache: K (and V) for attention, c for SSRU.
  size_t cache_width(size_t l) const {
    return cfg_.ssru_decoder ? static_cast<size_t>(cfg_.d_model)
                             : static_cast<size_t>(decoder_[l].heads) * cfg_.head_dim;
  }
  // Runs every decoder layer over counts[b] new positions of each row (x: [sum, d],
  // row-major by row), appending to the rows' caches; leaves the final hidden states
  // (after the final layer norm) in x.
  void decoder_pass(std::vector<RowCache*>& rows, const std::vector<int>& counts, float* x,
                    Visibility visibility, int block);

  // output_layer.cc: the output layer over hidden rows h [T, d]; row t is scored over
  // memory_of[t]'s shortlist (the full vocabulary if it has none).
  void output_stats(const float* h, int T, const std::vector<const MemoryRow*>& memory_of,
                    const StepRequest& request, const StepOutputs& outputs);

  // drafting.cc: runs the proposal heads at each row's accepted position j (the leading
  // draft tokens that equal the argmax before them), only there: K heads x 1 position
  // per row. h: the step's final states [R * n, d]; argmax [R, n] from output_stats.
  void propose(const int32_t* tokens, int n, const float* h, const std::vector<const MemoryRow*>& memory_of,
               const StepRequest& request, const StepOutputs& outputs);

  ModelConfig cfg_;
  const KernelTable& kt_;
  ThreadPool pool_;
  std::mutex call_mutex_;  // one call at a time: scratch buffers are shared
  int inner_enc_ = 0;
  std::vector<float> output_bias_;
  Embedding embedding_;       // embed.weight (int8 models: its int8 rows dequantised)
  Linear output_;             // tied to embedding_; int8 (with column subsets) or fp32
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  LayerNorm enc_final_, dec_final_;
  ProposalHeads heads_;       // empty unless config.json has "heads"
  // Scratch, reused across calls.
  std::vector<float> x_, h_, big_, y_, att_, logits_, union_logits_;
  ShortlistUnion shortlist_union_;  // the cached union block (call_mutex_ held)
  I8Scratch i8_scratch_;
};

}  // namespace fastdec
