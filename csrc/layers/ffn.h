// The position-wise feed-forward sublayer: y = fc2(act(fc1(h))), with the activation of
// config.json "activation". ReLU runs fused in fc1's GEMM epilogue; swish and gelu as
// one pass over fc1's output afterwards (kernels/activation.h).
#pragma once
#include <vector>

#include "kernels/activation.h"
#include "kernels/gemm_i8.h"
#include "kernels/thread_pool.h"
#include "layers/linear.h"

namespace fastdec {

class FeedForward {
 public:
  FeedForward() = default;
  // fc1: [d] -> [inner], fc2: [inner] -> [d].
  FeedForward(Linear fc1, Linear fc2, Activation activation);

  // h [rows, d] -> y [rows, d]. hidden: the caller's scratch for fc1's output (resized
  // here to [rows, inner]).
  void forward(const float* h, int rows, std::vector<float>& hidden, float* y, ThreadPool* pool,
               I8Scratch* scratch) const;

 private:
  Linear fc1_, fc2_;
  Activation activation_ = Activation::kRelu;
};

}  // namespace fastdec
