// Scaled dot-product attention of one row's queries over its keys/values, all heads,
// in fp32 (as Marian and CTranslate2 keep it). Heads are column slices of width
// head_dim of q, k, v and of the output.
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

}  // namespace fastdec
