// Scaled dot-product attention of one row's queries over its keys/values, all heads,
// in fp32 (as Marian and CTranslate2 keep it). Heads are column slices of width
// head_dim of q, k, v and of the output. Below `attend`, the three uses the model makes
// of it: an encoder row over itself, a decoder row over its KV cache, and a decoder row
// over its source (cross-attention). Each works on one row and is called from the
// model's parallel loop over rows; inner = heads * head_dim.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/kernel_table.h"

namespace fastdec {

struct AttentionShape {
  int heads = 0;
  int head_dim = 0;
};

// q: [n_q, q_stride], k/v: [n_kv, kv_stride] (head h at column h*head_dim of each),
// visible[i]: query i sees keys [0, visible[i]) (causal and block masks alike; each
// >= 1). out: [n_q, out_stride]. scratch grows as needed.
void attend(const KernelTable& kt, AttentionShape shape, const float* q, size_t q_stride, int n_q,
            const float* k, const float* v, size_t kv_stride, int n_kv, const int* visible,
            float* out, size_t out_stride, std::vector<float>& scratch);

// Encoder self-attention: every position sees the whole row. qkv [len, 3 * inner]
// (q | k | v, one GEMM's output); out [len, inner].
void attend_within(const KernelTable& kt, AttentionShape shape, const float* qkv, int len, float* out);

// The decoder's KV cache of one layer and row: k_cache / v_cache [>= start + n, inner].
// Writes the k and v of the n new positions (qkv [n, 3 * inner]) at positions start ..
// start + n - 1, so a rejected draft is rolled back by the row's length alone.
void append_kv(const float* qkv, int n, int start, int inner, float* k_cache, float* v_cache);

// Decoder self-attention of the n new positions (after append_kv) over the cache: query
// i sees positions 0 .. start + i (causal), except the last `open` queries, which see all
// start + n (a drafter's block of masks attends to the whole block). out [n, inner].
void attend_cached(const KernelTable& kt, AttentionShape shape, const float* qkv, int n, int start, int open,
                   const float* k_cache, const float* v_cache, float* out);

// Cross-attention: q [n, inner] over a source's kv [source_len, 2 * inner] (k | v);
// every query sees the whole source. out [n, inner].
void attend_source(const KernelTable& kt, AttentionShape shape, const float* q, int n, const float* kv,
                   int source_len, float* out);

}  // namespace fastdec
