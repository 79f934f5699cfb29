// Intra-op thread pool owned by one engine object (or passed to a kernel call).
// Workers spin briefly before sleeping: a decoder step issues many GEMMs of a few
// microseconds each, and waking a sleeping thread costs as much as the GEMM itself.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fastdec {

class ThreadPool {
 public:
  // threads >= 1 counts the calling thread: ThreadPool(1) starts no worker.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Runs task(i) for every i in [0, tasks), the caller taking part; returns when all
  // are done. Calls from several threads at once are serialised.
  void parallel_for(int tasks, const std::function<void(int)>& task);

 private:
  void worker_loop();
  void run_tasks();

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<unsigned> generation_{0};
  std::atomic<bool> stop_{false};

  const std::function<void(int)>* task_ = nullptr;
  int task_count_ = 0;
  std::atomic<int> next_task_{0};
  std::atomic<int> pending_{0};
  // Workers still inside the current call: the caller returns only when every worker
  // has left it, so no worker can read the next call's task while it is being set.
  std::atomic<int> workers_inside_{0};
};

// Splits [0, total) into `parts` contiguous ranges, the first ones one larger.
inline void split_range(int total, int parts, int part, int* begin, int* end) {
  int base = total / parts, extra = total % parts;
  *begin = part * base + (part < extra ? part : extra);
  *end = *begin + base + (part < extra ? 1 : 0);
}

}  // namespace fastdec
