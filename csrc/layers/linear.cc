#include "layers/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/op_profile.h"

namespace fastdec {

Linear::Linear(const KernelTable& kernels, const TensorLookup& lookup,
               const std::vector<LinearPart>& parts, int in, bool int8, float act_scale)
    : in_(in), act_scale_(act_scale) {
  for (const auto& p : parts) out_ += p.out;
  bias_.assign(static_cast<size_t>(out_), 0.f);
  std::vector<int8_t> q;
  std::vector<float> scales, w;
  if (int8) {
    q.resize(static_cast<size_t>(out_) * in);
    scales.resize(static_cast<size_t>(out_));
  } else {
    w.resize(static_cast<size_t>(out_) * in);
  }
  int row = 0;
  for (const auto& p : parts) {
    size_t offset = static_cast<size_t>(row) * in;
    size_t count = static_cast<size_t>(p.out) * in;
    if (int8) {
      TensorView t = expect_tensor(lookup, p.name + ".weight", "int8", {p.out, in});
      std::memcpy(q.data() + offset, t.i8(), count);
      TensorView s = expect_tensor(lookup, p.name + ".weight_scale", "float32", {p.out});
      std::copy(s.f32(), s.f32() + p.out, scales.begin() + row);
    } else {
      TensorView t = expect_tensor(lookup, p.name + ".weight", "float32", {p.out, in});
      std::copy(t.f32(), t.f32() + count, w.begin() + static_cast<std::ptrdiff_t>(offset));
    }
    if (p.has_bias) {
      TensorView b = expect_tensor(lookup, p.name + ".bias", "float32", {p.out});
      std::copy(b.f32(), b.f32() + p.out, bias_.begin() + row);
    }
    row += p.out;
  }
  if (int8)
    i8_ = std::make_unique<I8Matrix>(kernels, q.data(), out_, in, scales.data(), true, false);
  else
    f32_ = std::make_unique<F32Matrix>(kernels, w.data(), out_, in);
}

void quantize_rows(const float* w, int out, int in, int8_t* q, float* scales) {
  for (int n = 0; n < out; ++n) {
    const float* row = w + static_cast<size_t>(n) * in;
    float max_abs = 0.f;
    for (int k = 0; k < in; ++k) max_abs = std::max(max_abs, std::fabs(row[k]));
    float scale = max_abs > 0.f ? max_abs / 127.f : 1.f;
    scales[n] = scale;
    for (int k = 0; k < in; ++k) {
      float v = std::nearbyint(row[k] / scale);
      q[static_cast<size_t>(n) * in + k] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, v)));
    }
  }
}

Linear Linear::from_int8(const KernelTable& kernels, const int8_t* q, const float* scales, int out, int in,
                         const float* bias, bool keep_rows) {
  Linear l;
  l.out_ = out;
  l.in_ = in;
  l.i8_ = std::make_unique<I8Matrix>(kernels, q, out, in, scales, true, keep_rows);
  l.bias_.assign(bias, bias + out);
  return l;
}

Linear Linear::from_float(const KernelTable& kernels, const float* w, int out, int in, const float* bias) {
  Linear l;
  l.out_ = out;
  l.in_ = in;
  l.f32_ = std::make_unique<F32Matrix>(kernels, w, out, in);
  l.bias_.assign(bias, bias + out);
  return l;
}

void Linear::forward(const float* x, int rows, float* y, ThreadPool* pool, bool relu,
                     I8Scratch* scratch) const {
  OpTimer timer(Op::kGemm);
  if (i8_)
    gemm_i8(*i8_, x, rows, static_cast<size_t>(in_), act_scale_ > 0.f ? &act_scale_ : nullptr,
            bias_.data(), relu, y, static_cast<size_t>(out_), pool, scratch);
  else
    gemm_f32(*f32_, x, rows, static_cast<size_t>(in_), bias_.data(), relu, y,
             static_cast<size_t>(out_), pool);
}

void Linear::forward_columns(const float* x, int rows, const int32_t* cols, const int64_t* offsets,
                             float* y, ThreadPool* pool, I8Scratch* scratch) const {
  if (!supports_columns()) throw std::logic_error("Linear: column subsets need an int8 matrix with rows");
  OpTimer timer(Op::kGemm);
  gemm_i8_columns(*i8_, x, rows, static_cast<size_t>(in_), act_scale_ > 0.f ? &act_scale_ : nullptr,
                  cols, offsets, bias_.data(), y, pool, scratch);
}

std::unique_ptr<I8Matrix> Linear::gather_columns(const int32_t* cols, int count, ThreadPool* pool) const {
  if (!supports_columns()) throw std::logic_error("Linear: column subsets need an int8 matrix with rows");
  return I8Matrix::gathered(*i8_, cols, count, pool);
}

void Linear::forward_gathered(const I8Matrix& w, const float* bias, const float* x, int rows, float* y,
                              ThreadPool* pool, I8Scratch* scratch) const {
  gemm_i8(w, x, rows, static_cast<size_t>(in_), act_scale_ > 0.f ? &act_scale_ : nullptr, bias, false, y,
          static_cast<size_t>(w.rows()), pool, scratch);
}

}  // namespace fastdec
