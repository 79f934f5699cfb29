#include "kernels/row_ops.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace fastdec {

void argmax_rows(const KernelTable& kt, const float* x, int64_t rows, int64_t n,
                 size_t stride, int64_t* out, ThreadPool* pool) {
  parallel_rows(pool, static_cast<int>(rows), [&](int64_t r) { out[r] = kt.argmax(x + r * stride, n); });
}

void row_stats_rows(const KernelTable& kt, const float* x, int64_t rows, int64_t n,
                    size_t stride, int k, const RowStatsOut& out, ThreadPool* pool) {
  parallel_rows(pool, static_cast<int>(rows), [&](int64_t r) {
    const float* row = x + r * stride;
    float* top_lp = out.top_logprobs + r * k;
    RowStats s = kt.row_stats(row, n, k, out.top_ids + r * k, top_lp);
    for (int i = 0; i < k; ++i) top_lp[i] -= s.log_sum_exp;
    if (out.max) out.max[r] = s.max;
    if (out.log_sum_exp) out.log_sum_exp[r] = s.log_sum_exp;
    for (int64_t j = 0; j < out.n_ids; ++j)
      out.id_logprobs[r * out.n_ids + j] = row[out.ids[r * out.n_ids + j]] - s.log_sum_exp;
  });
}

double time_argmax_ns(const KernelTable& kt, const float* x, int64_t n, int repeats, int impl) {
  using clock = std::chrono::steady_clock;
  constexpr int kCallsPerSample = 64;  // amortise the clock read
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(repeats));
  volatile int64_t sink = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    auto start = clock::now();
    for (int i = 0; i < kCallsPerSample; ++i) {
      sink = impl == 0 ? kt.argmax(x, n) : std::max_element(x, x + n) - x;
    }
    std::chrono::duration<double, std::nano> elapsed = clock::now() - start;
    samples.push_back(elapsed.count() / kCallsPerSample);
  }
  (void)sink;
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace fastdec
