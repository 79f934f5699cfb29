#include "layers/ffn.h"

#include <utility>

namespace fastdec {

FeedForward::FeedForward(Linear fc1, Linear fc2, Activation activation)
    : fc1_(std::move(fc1)), fc2_(std::move(fc2)), activation_(activation) {}

void FeedForward::forward(const float* h, int rows, std::vector<float>& hidden, float* y, ThreadPool* pool,
                          I8Scratch* scratch) const {
  hidden.resize(static_cast<size_t>(rows) * fc1_.out());
  const bool relu = activation_ == Activation::kRelu;  // fused in the GEMM epilogue
  fc1_.forward(h, rows, hidden.data(), pool, relu, scratch);
  if (!relu) apply_activation(activation_, hidden.data(), rows, fc1_.out(), pool);
  fc2_.forward(hidden.data(), rows, y, pool, false, scratch);
}

}  // namespace fastdec
