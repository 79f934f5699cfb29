#include "kernels/thread_pool.h"

#include <chrono>
#include <stdexcept>

namespace fastdec {
namespace {
// How long an idle worker polls before it sleeps on the condition variable.
constexpr auto kSpinTime = std::chrono::microseconds(100);

inline void cpu_relax() { __builtin_ia32_pause(); }
}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  if (threads < 1) throw std::invalid_argument("ThreadPool: threads must be >= 1");
  workers_.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  for (;;) {
    int i = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (i >= task_count_) return;
    (*task_)(i);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int tasks, const std::function<void(int)>& task) {
  if (tasks <= 0) return;
  if (threads_ == 1 || tasks == 1) {
    for (int i = 0; i < tasks; ++i) task(i);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  task_ = &task;
  task_count_ = tasks;
  next_task_.store(0, std::memory_order_relaxed);
  pending_.store(tasks, std::memory_order_relaxed);
  workers_inside_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_tasks();
  while (pending_.load(std::memory_order_acquire) != 0 ||
         workers_inside_.load(std::memory_order_acquire) != 0) {
    cpu_relax();
  }
  task_ = nullptr;
}

void ThreadPool::worker_loop() {
  // 0, not a fresh load: a call may already have started before this thread runs,
  // and reading its generation here would make the worker skip it.
  unsigned seen = 0;
  for (;;) {
    auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    while (generation_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < spin_until) {
      cpu_relax();
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_tasks();
    workers_inside_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace fastdec
