// The CUDA implementation of ops.h: cuBLAS GEMMs over float16 weights and activations
// with float32 accumulation and output, and small kernels for the rest, all on one
// stream. Memory comes from the stream-ordered allocator (cudaMallocAsync), so freeing a
// state or a memory never waits for the device. Each kernel mirrors its loop in
// reference_ops.cc, which tests/test_cuda_gpu.py compares it with on the device
// (test_cuda_ops_against_the_reference_ops).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/ops.h"

namespace fastdec {
namespace gpu {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS ") + what + ": " + cublasGetStatusString(s));
}
#define LAUNCHED(what) check(cudaGetLastError(), what)

constexpr int kThreads = 256;
int blocks(size_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

// ---------------------------------------------------------------- block reductions
__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? shared[threadIdx.x] : 0.f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

__device__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? shared[threadIdx.x] : -FLT_MAX;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

// (value, id) best: larger value, then lower id.
__device__ bool better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// ---------------------------------------------------------------- kernels
__global__ void to_half(const float* x, __half* y, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __float2half(x[i]);
}

__global__ void bias_act(float* y, const float* bias, int rows, int out, int act) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(rows) * out) return;
  float v = y[i] + (bias ? bias[i % out] : 0.f);
  if (act == 1) v = v > 0.f ? v : 0.f;
  else if (act == 2) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  else if (act == 3) v = v / (1.f + expf(-v));
  y[i] = v;
}

__global__ void add_layer_norm_k(float* x, const float* residual, const float* gamma, const float* beta, int d,
                                 float eps, float* y) {
  __shared__ float shared[32];
  float* xr = x + static_cast<size_t>(blockIdx.x) * d;
  float* yr = y + static_cast<size_t>(blockIdx.x) * d;
  float s = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float v = xr[i] + (residual ? residual[static_cast<size_t>(blockIdx.x) * d + i] : 0.f);
    if (residual) xr[i] = v;
    s += v;
  }
  const float mean = block_sum(s, shared) / d;
  float q = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) q += (xr[i] - mean) * (xr[i] - mean);
  const float inv = rsqrtf(block_sum(q, shared) / d + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
}

__global__ void add_k(float* x, const float* y, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void embed_k(const float* table, const float* pos, const int32_t* ids, const int32_t* positions, int T,
                        int d, float scale, float* out) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(T) * d) return;
  const size_t t = i / d, j = i % d;
  out[i] = table[static_cast<size_t>(ids[t]) * d + j] * scale + pos[static_cast<size_t>(positions[t]) * d + j];
}

__global__ void gather_k(const float* src, size_t width, const int32_t* index, int count, float* dst) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= width * count) return;
  dst[i] = src[static_cast<size_t>(index[i / width]) * width + i % width];
}

__global__ void append_k(const float* src, size_t src_stride, int R, int n, size_t width, const int32_t* start,
                         float* cache, size_t pos_stride, size_t batch_stride) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(R) * n * width) return;
  const size_t t = i / width, j = i % width;
  const int b = static_cast<int>(t / n), p = start[b] + static_cast<int>(t % n);
  cache[b * batch_stride + static_cast<size_t>(p) * pos_stride + j] = src[t * src_stride + j];
}

// One block per (query, head); scores of the visible positions in shared memory.
__global__ void attention_k(const float* q, size_t q_stride, const float* k, const float* v, size_t pos_stride,
                            size_t batch_stride, const int32_t* row_of, const int32_t* visible, int head_dim,
                            float scale, float* out, size_t out_stride) {
  extern __shared__ float scores[];
  __shared__ float shared[32];
  const int t = blockIdx.x, h = blockIdx.y, n = visible[t];
  const size_t col = static_cast<size_t>(h) * head_dim;
  const float* qt = q + t * q_stride + col;
  const float* kr = k + row_of[t] * batch_stride + col;
  const float* vr = v + row_of[t] * batch_stride + col;
  float top = -FLT_MAX;
  for (int p = threadIdx.x; p < n; p += blockDim.x) {
    float dot = 0.f;
    for (int i = 0; i < head_dim; ++i) dot += qt[i] * kr[p * pos_stride + i];
    scores[p] = dot * scale;
    top = fmaxf(top, scores[p]);
  }
  top = block_max(top, shared);
  float sum = 0.f;
  for (int p = threadIdx.x; p < n; p += blockDim.x) sum += (scores[p] = expf(scores[p] - top));
  sum = block_sum(sum, shared);
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
    float o = 0.f;
    for (int p = 0; p < n; ++p) o += scores[p] * vr[p * pos_stride + i];
    out[t * out_stride + col + i] = o / sum;
  }
}

__global__ void ssru_k(const float* proj, int R, int n, int d, const int32_t* start, float* c, size_t batch_stride,
                       float* h) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(R) * d) return;
  const int b = static_cast<int>(i / d), j = static_cast<int>(i % d);
  float* cr = c + b * batch_stride;
  float prev = start[b] > 0 ? cr[static_cast<size_t>(start[b] - 1) * d + j] : 0.f;
  for (int s = 0; s < n; ++s) {
    const float* x = proj + static_cast<size_t>(b * n + s) * 2 * d;
    const float f = 1.f / (1.f + expf(-x[d + j]));
    prev = f * prev + (1.f - f) * x[j];
    cr[static_cast<size_t>(start[b] + s) * d + j] = prev;
    h[static_cast<size_t>(b * n + s) * d + j] = prev > 0.f ? prev : 0.f;
  }
}

__global__ void add_mask_k(float* logits, int T, int V, const float* mask, const int32_t* mask_row) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(T) * V) return;
  logits[i] += mask[static_cast<size_t>(mask_row[i / V]) * V + i % V];
}

// One block per row: k rounds of a block argmax that skips the ids already taken, then
// the log-sum-exp. Ties go to the lower id, as the CPU kernels' first maximum.
__global__ void topk_k(const float* logits, int V, int k, int32_t* ids, float* values, float* lse) {
  __shared__ float best_v[kThreads];
  __shared__ int best_i[kThreads];
  __shared__ float shared[32];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * V;
  int32_t* my_ids = ids + static_cast<size_t>(blockIdx.x) * k;
  for (int r = 0; r < k; ++r) {
    float bv = -INFINITY;
    int bi = V;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
      bool taken = false;
      for (int s = 0; s < r; ++s) taken |= my_ids[s] == i;
      if (!taken && better(row[i], i, bv, bi)) {
        bv = row[i];
        bi = i;
      }
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s && better(best_v[threadIdx.x + s], best_i[threadIdx.x + s], best_v[threadIdx.x],
                                    best_i[threadIdx.x])) {
        best_v[threadIdx.x] = best_v[threadIdx.x + s];
        best_i[threadIdx.x] = best_i[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      my_ids[r] = best_i[0] < V ? best_i[0] : 0;
      values[static_cast<size_t>(blockIdx.x) * k + r] = best_v[0];
    }
    __syncthreads();
  }
  if (!lse) return;
  const float top = values[static_cast<size_t>(blockIdx.x) * k];
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(row[i] - top);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) lse[blockIdx.x] = top + logf(s);
}

// linear_rows: one warp per output column and up to kRowTile rows, the float32 x read
// directly, fp16 weights widened, fp32 sums. Lane l sums inputs l, l + 32, ... in order,
// then a fixed butterfly adds the lanes: a row's result depends on nothing but that row,
// whatever the row count or the tile it falls in.
constexpr int kRowTile = 4, kWarps = 8;
__global__ void linear_rows_k(const __half* w, const float* bias, const float* x, int rows, int out, int in,
                              int act, float* y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int o = blockIdx.x * kWarps + warp, r0 = blockIdx.y * kRowTile;
  if (o >= out) return;
  const int nr = min(kRowTile, rows - r0);
  const __half* wo = w + static_cast<size_t>(o) * in;
  float acc[kRowTile] = {0.f, 0.f, 0.f, 0.f};
  for (int i = lane; i < in; i += 32) {
    const float wi = __half2float(wo[i]);
    for (int r = 0; r < kRowTile; ++r)
      if (r < nr) acc[r] = fmaf(wi, x[static_cast<size_t>(r0 + r) * in + i], acc[r]);
  }
  for (int r = 0; r < kRowTile; ++r) {
    float v = acc[r];
    for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffff, v, s);
    if (lane == 0 && r < nr) {
      v += bias ? bias[o] : 0.f;
      if (act == 1) v = v > 0.f ? v : 0.f;
      else if (act == 2) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
      else if (act == 3) v = v / (1.f + expf(-v));
      y[static_cast<size_t>(r0 + r) * out + o] = v;
    }
  }
}

__global__ void pick_k(const float* logits, int T, int V, const int32_t* ids, float* out) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < T) out[t] = ids[t] < 0 ? -INFINITY : logits[static_cast<size_t>(t) * V + ids[t]];
}

// ---------------------------------------------------------------- the ops
class CudaOps final : public Ops {
 public:
  CudaOps() : name_(cuda_device_name()) {
    // Freed blocks stay in the stream-ordered pool (released to the driver only at exit),
    // so the allocations of encode and select reuse them without a device sync.
    cudaMemPool_t pool;
    check(cudaDeviceGetDefaultMemPool(&pool, 0), "memory pool");
    uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "memory pool");
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    stream_ = std::shared_ptr<CUstream_st>(s, [](cudaStream_t x) { cudaStreamDestroy(x); });
    cublasHandle_t h;
    check(cublasCreate(&h), "create");
    blas_ = std::shared_ptr<cublasContext>(h, [](cublasHandle_t x) { cublasDestroy(x); });
    check(cublasSetStream(h, s), "set stream");
    check(cudaDeviceGetAttribute(&smem_limit_, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "device attribute");
    check(cudaFuncSetAttribute(attention_k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit_ - 1024),
          "attention shared memory");
  }
  ~CudaOps() override { cudaStreamSynchronize(stream_.get()); }

  std::string name() const override { return name_; }

  DevPtr alloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaMallocAsync(&p, bytes > 0 ? bytes : 16, stream_.get()), "cudaMallocAsync");
    auto stream = stream_;  // the deleter keeps the stream alive
    return DevPtr(p, [stream](void* q) { cudaFreeAsync(q, stream.get()); });
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    // From pageable host memory: the driver has staged the bytes when this returns, so the
    // caller may free its buffer at once.
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()), "upload");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()), "download");
    check(cudaStreamSynchronize(stream_.get()), "download");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()), "copy");
  }
  void copy_rows(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                 size_t count) override {
    check(cudaMemcpy2DAsync(dst, dst_pitch * sizeof(float), src, src_pitch * sizeof(float), width * sizeof(float),
                            count, cudaMemcpyDeviceToDevice, stream_.get()),
          "copy_rows");
  }
  void gather_rows(const float* src, size_t width, const int32_t* index, int count, float* dst) override {
    if (width * count == 0) return;
    gather_k<<<blocks(width * count), kThreads, 0, stream_.get()>>>(src, width, index, count, dst);
    LAUNCHED("gather_rows");
  }

  Weight weight(const float* host_w, int out, int in) override {
    const size_t n = static_cast<size_t>(out) * in;
    std::vector<__half> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = __float2half(host_w[i]);
    Weight w;
    w.out = out;
    w.in = in;
    w.data = alloc(n * sizeof(__half));
    upload(w.data.get(), h.data(), n * sizeof(__half));
    check(cudaStreamSynchronize(stream_.get()), "weight upload");
    return w;
  }

  void linear(const Weight& w, const float* bias, const float* x, int rows, float* y, Act act) override {
    if (rows == 0) return;
    const size_t n = static_cast<size_t>(rows) * w.in;
    if (half_capacity_ < n) {
      half_capacity_ = std::max(n, 2 * half_capacity_);
      half_ = alloc(half_capacity_ * sizeof(__half));
    }
    __half* xh = at<__half>(half_);
    to_half<<<blocks(n), kThreads, 0, stream_.get()>>>(x, xh, n);
    LAUNCHED("to_half");
    const float one = 1.f, zero = 0.f;
    // Row-major y [rows, out] is column-major [out, rows] = W [out, in] x^T.
    check(cublasGemmEx(blas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, w.out, rows, w.in, &one, w.data.get(), CUDA_R_16F, w.in,
                       xh, CUDA_R_16F, w.in, &zero, y, CUDA_R_32F, w.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "GemmEx");
    if (bias || act != Act::kNone) {
      bias_act<<<blocks(static_cast<size_t>(rows) * w.out), kThreads, 0, stream_.get()>>>(y, bias, rows, w.out,
                                                                                       static_cast<int>(act));
      LAUNCHED("bias_act");
    }
  }

  void linear_rows(const Weight& w, const float* bias, const float* x, int rows, float* y, Act act) override {
    if (rows == 0) return;
    dim3 grid((w.out + kWarps - 1) / kWarps, (rows + kRowTile - 1) / kRowTile);
    linear_rows_k<<<grid, 32 * kWarps, 0, stream_.get()>>>(at<__half>(w.data), bias, x, rows, w.out, w.in,
                                                           static_cast<int>(act), y);
    LAUNCHED("linear_rows");
  }

  void add_layer_norm(float* x, const float* residual, const float* gamma, const float* beta, int rows, int d,
                      float eps, float* y) override {
    if (!rows) return;
    add_layer_norm_k<<<rows, kThreads, 0, stream_.get()>>>(x, residual, gamma, beta, d, eps, y);
    LAUNCHED("add_layer_norm");
  }
  void add(float* x, const float* y, size_t n) override {
    if (!n) return;
    add_k<<<blocks(n), kThreads, 0, stream_.get()>>>(x, y, n);
    LAUNCHED("add");
  }
  void embed(const float* table, const float* pos_table, const int32_t* ids, const int32_t* positions, int T, int d,
             float scale, float* out) override {
    if (!T) return;
    embed_k<<<blocks(static_cast<size_t>(T) * d), kThreads, 0, stream_.get()>>>(table, pos_table, ids, positions, T,
                                                                               d, scale, out);
    LAUNCHED("embed");
  }
  void attention(const float* q, size_t q_stride, const float* k, const float* v, size_t pos_stride,
                 size_t batch_stride, const int32_t* row_of, const int32_t* visible, int n_q, int heads, int head_dim,
                 int max_visible, float* out, size_t out_stride) override {
    if (!n_q) return;
    const size_t smem = sizeof(float) * static_cast<size_t>(std::max(max_visible, 1));
    if (smem > static_cast<size_t>(smem_limit_ - 1024))
      throw std::runtime_error("attention: " + std::to_string(max_visible) + " positions exceed shared memory");
    attention_k<<<dim3(n_q, heads), 128, smem, stream_.get()>>>(q, q_stride, k, v, pos_stride, batch_stride, row_of,
                                                               visible, head_dim, rsqrtf(static_cast<float>(head_dim)),
                                                               out, out_stride);
    LAUNCHED("attention");
  }
  void append(const float* src, size_t src_stride, int R, int n, size_t width, const int32_t* start, float* cache,
              size_t pos_stride, size_t batch_stride) override {
    const size_t total = static_cast<size_t>(R) * n * width;
    if (!total) return;
    append_k<<<blocks(total), kThreads, 0, stream_.get()>>>(src, src_stride, R, n, width, start, cache, pos_stride,
                                                           batch_stride);
    LAUNCHED("append");
  }
  void ssru(const float* proj, int R, int n, int d, const int32_t* start, float* c, size_t batch_stride,
            float* h) override {
    if (!R) return;
    ssru_k<<<blocks(static_cast<size_t>(R) * d), kThreads, 0, stream_.get()>>>(proj, R, n, d, start, c, batch_stride, h);
    LAUNCHED("ssru");
  }
  void add_mask(float* logits, int T, int V, const float* mask, const int32_t* mask_row) override {
    if (!T) return;
    add_mask_k<<<blocks(static_cast<size_t>(T) * V), kThreads, 0, stream_.get()>>>(logits, T, V, mask, mask_row);
    LAUNCHED("add_mask");
  }
  void topk(const float* logits, int T, int V, int k, int32_t* ids, float* values, float* lse) override {
    if (!T) return;
    topk_k<<<T, kThreads, 0, stream_.get()>>>(logits, V, k, ids, values, lse);
    LAUNCHED("topk");
  }
  void pick(const float* logits, int T, int V, const int32_t* ids, float* out) override {
    if (!T) return;
    pick_k<<<blocks(static_cast<size_t>(T)), kThreads, 0, stream_.get()>>>(logits, T, V, ids, out);
    LAUNCHED("pick");
  }

 private:
  std::shared_ptr<CUstream_st> stream_;
  std::shared_ptr<cublasContext> blas_;
  std::string name_;  // cuda_device_name()
  int smem_limit_ = 48 * 1024;
  DevPtr half_;
  size_t half_capacity_ = 0;
};

}  // namespace

std::string cuda_device_name() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw std::runtime_error(std::string("no CUDA GPU is usable here (cudaGetDeviceCount: ") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  return std::string("cuda (") + prop.name + ")";
}

std::unique_ptr<Ops> make_cuda_ops() { return std::make_unique<CudaOps>(); }

}  // namespace gpu
}  // namespace fastdec
