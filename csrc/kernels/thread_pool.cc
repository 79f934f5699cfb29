#include "kernels/thread_pool.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace fastdec {
namespace {
// How long an idle worker polls before it sleeps on the condition variable.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr int kIndexBits = 20;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;

inline void cpu_relax() { __builtin_ia32_pause(); }
inline uint64_t pack(uint64_t call, uint64_t count, uint64_t next) {
  return (call << (2 * kIndexBits)) | (count << kIndexBits) | next;
}
inline uint64_t count_of(uint64_t w) { return (w >> kIndexBits) & kIndexMask; }
inline uint64_t next_of(uint64_t w) { return w & kIndexMask; }
}  // namespace

int ThreadPool::max_threads() {
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus < 1) cpus = static_cast<int>(std::thread::hardware_concurrency());
  return kThreadsPerCpu * std::max(cpus, 1);
}

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  if (threads < 1) throw std::invalid_argument("ThreadPool: threads must be >= 1");
  int limit = max_threads();
  if (threads > limit)
    throw std::invalid_argument("ThreadPool: threads=" + std::to_string(threads) + " exceeds the limit " +
                                std::to_string(limit) + " (" + std::to_string(kThreadsPerCpu) +
                                " per CPU this process may use)");
  workers_.reserve(static_cast<size_t>(threads - 1));
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    // No destructor runs for a constructor that throws: the started workers must be
    // stopped here, or unwinding destroys wake_ under their wait (pthread_cond_destroy
    // blocks for ever) and then joinable std::threads (std::terminate).
    size_t started = workers_.size();
    stop_workers();
    throw std::runtime_error("ThreadPool: could not start thread " + std::to_string(started + 2) + " of " +
                             std::to_string(threads) + " (" + e.what() + "); use fewer threads");
  } catch (...) {
    stop_workers();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_.store(true);
    wake_generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::run_tasks() {
  uint64_t w = work_.load(std::memory_order_acquire);
  while (next_of(w) < count_of(w)) {
    if (!work_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;  // w was reloaded: another thread claimed, or a new call began
    (*task_)(static_cast<int>(next_of(w)));
    pending_.fetch_sub(1, std::memory_order_acq_rel);
    w = work_.load(std::memory_order_acquire);
  }
}

void ThreadPool::parallel_for(int tasks, const std::function<void(int)>& task) {
  if (tasks <= 0) return;
  if (threads_ == 1 || tasks == 1) {
    for (int i = 0; i < tasks; ++i) task(i);
    return;
  }
  if (static_cast<uint64_t>(tasks) > kIndexMask) throw std::invalid_argument("ThreadPool: too many tasks");
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  // The previous call's word is exhausted (all its tasks were claimed and finished),
  // so no worker can be inside task_ while it is replaced.
  task_ = &task;
  pending_.store(tasks, std::memory_order_relaxed);
  call_id_ = (call_id_ + 1) & ((uint64_t{1} << (64 - 2 * kIndexBits)) - 1);
  work_.store(pack(call_id_, static_cast<uint64_t>(tasks), 0), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    wake_generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_tasks();
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

void ThreadPool::worker_loop() {
  unsigned seen = 0;  // the first call may start before this thread runs
  for (;;) {
    auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    while (wake_generation_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < spin_until) {
      cpu_relax();
    }
    if (wake_generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_.wait(lock, [&] { return wake_generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = wake_generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_tasks();
  }
}

}  // namespace fastdec
