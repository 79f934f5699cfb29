// Per-row decoding statistics over score rows: argmax, and in one call max,
// log-sum-exp, top-k (ids + log-probs) and the log-probs of given ids.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/thread_pool.h"

namespace fastdec {

void argmax_rows(const KernelTable& kt, const float* x, int64_t rows, int64_t n,
                 size_t stride, int64_t* out, ThreadPool* pool);

// For each row r: top_ids/top_logprobs [rows, k]; given ids [rows, n_ids] ->
// id_logprobs [rows, n_ids]; max and log_sum_exp [rows]. Ids are checked by callers.
struct RowStatsOut {
  float* max = nullptr;
  float* log_sum_exp = nullptr;
  int64_t* top_ids = nullptr;
  float* top_logprobs = nullptr;
  const int64_t* ids = nullptr;
  int64_t n_ids = 0;
  float* id_logprobs = nullptr;
};
void row_stats_rows(const KernelTable& kt, const float* x, int64_t rows, int64_t n,
                    size_t stride, int k, const RowStatsOut& out, ThreadPool* pool);

// Median nanoseconds of one call over `repeats`, timed inside C++ so Python's call
// overhead does not hide the kernel. impl: 0 = the table's argmax, 1 = std::max_element
// (compiled with the project's baseline flags, the reference of the Foundation issue).
double time_argmax_ns(const KernelTable& kt, const float* x, int64_t n, int repeats, int impl);

}  // namespace fastdec
