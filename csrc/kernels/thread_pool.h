// Intra-op thread pool owned by one engine object (or passed to a kernel call).
// Workers spin briefly before sleeping: a decoder step issues many GEMMs of a few
// microseconds each, and waking a sleeping thread costs as much as the GEMM itself.
// Tasks are claimed, never assigned: a worker that is descheduled (a busy machine)
// simply claims nothing and the caller runs the tasks itself, so a call never waits
// for a thread that did not start.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fastdec {

class ThreadPool {
 public:
  // Threads a pool may have: kThreadsPerCpu per CPU this process may run on. Workers
  // spin before they sleep, so threads beyond the CPUs only take time from each other;
  // the limit leaves room for oversubscription experiments and refuses nonsense
  // (threads=10**6 would try to reserve 8 TB of stacks).
  static constexpr int kThreadsPerCpu = 4;
  static int max_threads();

  // threads in [1, max_threads()] counts the calling thread: ThreadPool(1) starts no
  // worker. Throws std::runtime_error (the started workers joined) when the system
  // cannot create a thread.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Runs task(i) for every i in [0, tasks), the caller taking part; returns when all
  // are done. Calls from several threads at once are serialised. tasks < 2^20.
  void parallel_for(int tasks, const std::function<void(int)>& task);

 private:
  void worker_loop();
  void run_tasks();
  void stop_workers();  // wakes, stops and joins every started worker

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<unsigned> wake_generation_{0};
  std::atomic<bool> stop_{false};

  // The current call in one word: [call id : 24][task count : 20][next task : 20].
  // A claim is a CAS on this word, so a late worker can never claim a task of a call
  // that is over, and task_ is read only after a successful claim.
  std::atomic<uint64_t> work_{0};
  uint64_t call_id_ = 0;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<int> pending_{0};
};

// Splits [0, total) into `parts` contiguous ranges, the first ones one larger.
inline void split_range(int total, int parts, int part, int* begin, int* end) {
  int base = total / parts, extra = total % parts;
  *begin = part * base + (part < extra ? part : extra);
  *end = *begin + base + (part < extra ? 1 : 0);
}

// Runs fn(r) for every r in [0, rows), contiguous ranges per thread (inline without a
// pool or with one row).
template <typename Fn>
void parallel_rows(ThreadPool* pool, int rows, Fn&& fn) {
  int threads = pool ? std::min(pool->size(), rows) : 1;
  if (threads <= 1) {
    for (int r = 0; r < rows; ++r) fn(r);
    return;
  }
  pool->parallel_for(threads, [&](int t) {
    int begin, end;
    split_range(rows, threads, t, &begin, &end);
    for (int r = begin; r < end; ++r) fn(r);
  });
}

// Runs a GEMM part fn(m_begin, m_end, block_begin, block_end) over the pool (or
// inline without one). Columns are split while there are enough blocks (each thread
// streams its own weights); few blocks and many rows split the rows instead.
template <typename Fn>
void parallel_gemm(ThreadPool* pool, int M, int blocks, Fn&& fn) {
  int threads = pool ? pool->size() : 1;
  if (threads == 1) {
    fn(0, M, 0, blocks);
    return;
  }
  bool split_rows = blocks < 2 * threads && M >= 2 * threads;
  pool->parallel_for(threads, [&](int t) {
    int begin, end;
    if (split_rows) {
      split_range(M, threads, t, &begin, &end);
      fn(begin, end, 0, blocks);
    } else {
      split_range(blocks, threads, t, &begin, &end);
      fn(0, M, begin, end);
    }
  });
}

}  // namespace fastdec
