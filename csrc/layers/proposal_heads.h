// Blockwise-parallel proposal heads (Stern et al. 2018; export/FORMAT.md, *Proposal
// heads*): head i maps a decoder final state s to h_i = s + fc2_i(relu(fc1_i(s))), which
// the model's own output layer turns into the token i+2 places after s's position (the
// verifier's own argmax there being the token 1 place after).
//
// Layout of one forward over R states, K heads, hidden H:
//
//   s      [R, d]
//   fc1_i  one GEMM per head run: [R, d] -> [R, H], relu
//   fc2_i  one GEMM per head run: [R, H] -> [R, d], plus the residual s
//   out    head-major [k, R, d]: row i*R + r is h_i of state r
// Only the first k heads run: a caller verifying k proposals next needs no more, and at
// batch 1 each head costs about as much as a twelfth of the SSRU en-de's decoder step.
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

  // s [rows, d] -> out [k * rows, d] from heads 0..k-1 (k <= count()), head-major (see
  // above). hidden is scratch the caller owns (resized here).
  void forward(const float* s, int rows, int k, float* out, std::vector<float>& hidden, ThreadPool* pool,
               I8Scratch* scratch) const;

 private:
  int d_ = 0, hidden_ = 0;
  std::vector<Linear> fc1_, fc2_;  // one of each per head
};

}  // namespace fastdec
