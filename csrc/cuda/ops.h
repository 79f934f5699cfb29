// The device operations the GPU model (gpu_model.h) is written against, once: the CUDA
// implementation (cuda_ops.cu: cuBLAS fp16 GEMMs, small kernels) and a plain C++ float
// reference (reference_ops.cc), which runs the very same orchestration on any CPU so that
// everything above the kernels is tested on machines without a GPU
// (tests/test_gpu_reference.py against the CPU engine's float32 greedy).
//
// Conventions
// - Every pointer an op takes is a device pointer of this Ops (host memory for the
//   reference), except where a parameter says "host".
// - Activations are float32; weights are in the ops' own precision (fp16 on CUDA,
//   float32 for the reference), so a Weight is opaque to the orchestration.
// - Matrices are row-major. `rows` of an activation are token positions.
// - Ops run in order on one stream; download() waits for everything before it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace fastdec {
namespace gpu {

// Device memory, freed when the last owner lets go.
using DevPtr = std::shared_ptr<void>;

template <typename T>
T* at(const DevPtr& p) { return static_cast<T*>(p.get()); }

// y[rows, out] = x[rows, in] W^T + bias.
struct Weight {
  DevPtr data;  // [out, in] in the ops' precision
  int out = 0, in = 0;
};

enum class Act { kNone, kRelu, kGelu, kSwish };

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string name() const = 0;

  // ---- memory
  virtual DevPtr alloc(size_t bytes) = 0;  // contents undefined
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;  // synchronises
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;           // device to device
  // `count` rows of `width` floats each: dst[r] = src[r], rows apart by the pitches (floats).
  virtual void copy_rows(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                         size_t count) = 0;
  // dst[i, :] = src[index[i], :], rows of `width` floats; index: device int32 [count].
  virtual void gather_rows(const float* src, size_t width, const int32_t* index, int count, float* dst) = 0;

  // ---- weights: w host float32 [out, in], converted to the ops' precision.
  virtual Weight weight(const float* host_w, int out, int in) = 0;
  DevPtr upload_floats(const float* host, size_t n) {
    DevPtr p = alloc(n * sizeof(float));
    upload(p.get(), host, n * sizeof(float));
    return p;
  }

  // ---- layers
  // y = x W^T + bias (bias may be null), then the activation; x and y must not overlap.
  virtual void linear(const Weight& w, const float* bias, const float* x, int rows, float* y, Act act) = 0;
  // linear, with each row's result independent of the other rows and of their count:
  // what the decoder and the output layer run, so that a position's logits are the same
  // whether a step holds 1 or k + 1 positions per row and however many rows (a
  // strategy's verification step must reproduce greedy's argmax exactly; cuBLAS picks
  // its kernel, and so its summation order, by shape).
  virtual void linear_rows(const Weight& w, const float* bias, const float* x, int rows, float* y, Act act) {
    linear(w, bias, x, rows, y, act);  // the reference's loops already are
  }
  // residual != null: x += residual first. Then y = LayerNorm(x) * gamma + beta (y may be x).
  virtual void add_layer_norm(float* x, const float* residual, const float* gamma, const float* beta, int rows,
                              int d, float eps, float* y) = 0;
  virtual void add(float* x, const float* y, size_t n) = 0;  // x += y
  // out[t] = table[ids[t]] * scale + pos_table[positions[t]]; ids, positions: int32 [T].
  virtual void embed(const float* table, const float* pos_table, const int32_t* ids, const int32_t* positions,
                     int T, int d, float scale, float* out) = 0;
  // K and V of position p of row r at k + r * batch_stride + p * pos_stride (floats; V
  // likewise at v). Query t (of `n_q`) reads row row_of[t], sees its first visible[t]
  // positions (all heads), and writes out[t * out_stride + head * head_dim ...].
  // q of query t at q + t * q_stride. row_of, visible: device int32 [n_q].
  virtual void attention(const float* q, size_t q_stride, const float* k, const float* v, size_t pos_stride,
                         size_t batch_stride, const int32_t* row_of, const int32_t* visible, int n_q, int heads,
                         int head_dim, int max_visible, float* out, size_t out_stride) = 0;
  // Writes n positions of each of R rows into a cache: row b's position start[b] + i gets
  // src[(b * n + i) * src_stride ...+width]; cache row b at cache + b * batch_stride,
  // positions pos_stride apart. start: device int32 [R].
  virtual void append(const float* src, size_t src_stride, int R, int n, size_t width, const int32_t* start,
                      float* cache, size_t pos_stride, size_t batch_stride) = 0;
  // The SSRU scan (csrc/layers/ssru.h) of n positions of R rows: proj [R * n, 2d];
  // cell states at c + b * batch_stride + p * d (position p = start[b] + i reads p - 1;
  // start[b] = 0 starts from c = 0); h out [R * n, d].
  virtual void ssru(const float* proj, int R, int n, int d, const int32_t* start, float* c, size_t batch_stride,
                    float* h) = 0;

  // ---- the output layer's statistics over logits [T, V]
  // logits[t] += mask[mask_row[t]] (a shortlist's 0 / -inf row; mask_row: device int32 [T]).
  virtual void add_mask(float* logits, int T, int V, const float* mask, const int32_t* mask_row) = 0;
  // Per row: the k largest (ties: lower id first) and log-sum-exp. ids: int32 [T, k],
  // values [T, k], lse [T] (lse may be null: argmax only).
  virtual void topk(const float* logits, int T, int V, int k, int32_t* ids, float* values, float* lse) = 0;
  // out[t] = logits[t, ids[t]] (ids: device int32 [T], -1 gives -inf).
  virtual void pick(const float* logits, int T, int V, const int32_t* ids, float* out) = 0;
};

std::unique_ptr<Ops> make_reference_ops();
#if defined(FASTDEC_WITH_CUDA)
std::unique_ptr<Ops> make_cuda_ops();  // throws std::runtime_error naming the cause without a usable GPU
// "cuda (<device 0's name>)", what CudaOps::name() returns, without creating a stream or a
// cuBLAS handle; throws as make_cuda_ops does without a usable GPU.
std::string cuda_device_name();
#endif

}  // namespace gpu
}  // namespace fastdec
