// A linear layer y = x W^T + b (+ReLU) in fp32 or int8. Several projections that read
// the same input (q|k|v, cross k|v, SSRU w|wf) are concatenated along the output so
// they run as one GEMM.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/gemm_f32.h"
#include "kernels/gemm_i8.h"
#include "model/weights.h"

namespace fastdec {

struct LinearPart {
  std::string name;     // e.g. "decoder.layers.0.self_attn.q" (weight at name + ".weight")
  int out = 0;
  bool has_bias = true;
};

// Per-row symmetric int8: scale = max|row| / 127 (1 for an all-zero row), q =
// nearbyint(row / scale) clamped to +-127. export/writer.py's quantize_rows is the same
// rule in numpy float32, so a directory's stored int8 embedding equals this bit for bit.
void quantize_rows(const float* w, int out, int in, int8_t* q, float* scales);

class Linear {
 public:
  Linear() = default;
  // in: input size. int8: weights are int8 with per-row `weight_scale`; act_scale > 0 is
  // the calibrated input multiplier, 0 quantises each row dynamically.
  Linear(const KernelTable& kernels, const TensorLookup& lookup, const std::vector<LinearPart>& parts,
         int in, bool int8, float act_scale);
  // An int8 matrix [out, in] with per-row scales as stored (w ~= q * scale[row]); the
  // int8 tied embedding of export/FORMAT.md, used as is (no re-quantisation; a float32
  // one goes through quantize_rows first). keep_rows allows column subsets (shortlists).
  static Linear from_int8(const KernelTable& kernels, const int8_t* q, const float* scales, int out, int in,
                          const float* bias, bool keep_rows);
  static Linear from_float(const KernelTable& kernels, const float* w, int out, int in, const float* bias);

  int out() const { return out_; }
  int in() const { return in_; }

  // scratch: for the int8 activations (null: gemm_i8's per-thread one).
  void forward(const float* x, int rows, float* y, ThreadPool* pool, bool relu = false,
               I8Scratch* scratch = nullptr) const;
  // Per-row column subset (int8 with keep_rows only): see gemm_i8_columns.
  void forward_columns(const float* x, int rows, const int32_t* cols, const int64_t* offsets,
                       float* y, ThreadPool* pool, I8Scratch* scratch = nullptr) const;
  bool supports_columns() const { return i8_ && i8_->has_rows(); }
  // Columns `cols` as a matrix of their own (needs supports_columns; I8Matrix::gathered)
  // and a forward over such a matrix with this layer's input quantisation: its column i
  // equals forward_columns' value of cols[i] bit for bit. bias: the gathered bias.
  std::unique_ptr<I8Matrix> gather_columns(const int32_t* cols, int count, ThreadPool* pool) const;
  void forward_gathered(const I8Matrix& w, const float* bias, const float* x, int rows, float* y,
                        ThreadPool* pool, I8Scratch* scratch = nullptr) const;

 private:
  int out_ = 0, in_ = 0;
  float act_scale_ = 0.f;
  std::unique_ptr<I8Matrix> i8_;
  std::unique_ptr<F32Matrix> f32_;
  std::vector<float> bias_;
};

}  // namespace fastdec
