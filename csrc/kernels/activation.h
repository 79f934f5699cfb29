// FFN activations other than ReLU (config.json "activation"). ReLU stays fused in the
// fc1 GEMM epilogue; swish and gelu run as one pass over fc1's output rows afterwards.
#pragma once
#include <cstddef>

#include "kernels/thread_pool.h"

namespace fastdec {

enum class Activation { kRelu, kSwish, kGelu };

// swish (SiLU): x * sigmoid(x) = x / (1 + exp(-x)), torch.nn.SiLU and Marian's swish.
// gelu: x * (1 + erf(x / sqrt(2))) / 2, the exact (erf) form of torch.nn.GELU().
// In place over rows x cols floats (row stride cols), rows split across the pool.
void apply_activation(Activation act, float* x, int rows, int cols, ThreadPool* pool);

}  // namespace fastdec
