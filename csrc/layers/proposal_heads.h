// Blockwise-parallel proposal heads (Stern et al. 2018; export/FORMAT.md, *Proposal
// heads*): head i maps a decoder final state s to h_i = s + fc2_i(relu(fc1_i(s))), which
// the model's own output layer turns into the token i+2 places after s's position (the
// verifier's own argmax there being the token 1 place after).
//
// Layout of one forward over R states, K heads, hidden H:
//
//   s      [R, d]
//   fc1    one GEMM for all heads: s x [fc1_0 | fc1_1 | ... ]^T -> [R, K*H]
//          (they read the same input, so one int8 activation scale)
//   hidden regrouped head-major        -> [K, R, H]
//   fc2_i  one GEMM per head: [R, H] -> [R, d], plus the residual s
//   out    head-major [K, R, d]: row i*R + r is h_i of state r
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kernels/thread_pool.h"
#include "layers/linear.h"

namespace fastdec {

class ProposalHeads {
 public:
  ProposalHeads() = default;
  // Tensors heads.{i}.fc1 / heads.{i}.fc2 (weight [+ weight_scale], bias); act_scales by
  // linear name as for every other int8 linear (0 or absent: dynamic).
  ProposalHeads(const KernelTable& kernels, const TensorLookup& lookup, int count, int hidden, int d,
                bool int8, const std::map<std::string, float>& act_scales);

  int count() const { return static_cast<int>(fc2_.size()); }

  // s [rows, d] -> out [count * rows, d], head-major (see above). hidden and grouped are
  // scratch the caller owns (resized here).
  void forward(const float* s, int rows, float* out, std::vector<float>& hidden, std::vector<float>& grouped,
               ThreadPool* pool, I8Scratch* scratch) const;

 private:
  int d_ = 0, hidden_ = 0;
  Linear fc1_;               // every head's fc1, concatenated along the output
  std::vector<Linear> fc2_;  // one per head
};

}  // namespace fastdec
