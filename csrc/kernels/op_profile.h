// Per-op wall-clock profile of the engine's calls (encode, step), off by default.
// Switched on by FASTDEC_PROFILE_OPS=1 in the environment or _engine.op_profile(True).
// A region's time is exclusive: a nested region's time goes to the nested op only, so
// the ops add up to the calls' totals (the binding's own op holds what is left of a
// call outside the engine: argument conversion, result arrays). Off, a region costs one
// relaxed load; on, two clock reads (~40 ns).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace fastdec {

enum class Op : int {
  kBinding,      // pybind11 crossing: argument checks and conversion, result objects
  kCallOther,    // the rest of encode/step outside the ops below (bookkeeping, allocations)
  kEmbed,        // embedding lookup * sqrt(d) + position table
  kLayerNorm,
  kResidual,     // x += sublayer output
  kQuantize,     // int8 activation quantisation before a GEMM
  kGemm,         // int8 / fp32 GEMM (epilogue included)
  kAttention,    // QK^T, softmax, V (self and cross)
  kCacheCopy,    // K/V into the decoder cache, cross K/V into the memory rows
  kSsru,         // the SSRU scan
  kOutputStats,  // output layer statistics (argmax, top-k) after its GEMM
  kCount
};

const char* op_name(Op op);

struct OpTotals {
  std::atomic<uint64_t> ns[static_cast<int>(Op::kCount)];
  std::atomic<uint64_t> calls[static_cast<int>(Op::kCount)];
};

bool op_profile_enabled();
void set_op_profile(bool on);
OpTotals& op_totals();
void reset_op_totals();

// Times one op on the calling thread.
class OpTimer {
 public:
  // Worker threads of the pool have no enclosing region: their ops are not counted
  // (the caller's region waiting for them holds their time), so nothing counts twice.
  explicit OpTimer(Op op)
      : op_(op), on_(op_profile_enabled() && (current_ != nullptr || op == Op::kBinding || op == Op::kCallOther)) {
    if (!on_) return;
    parent_ = current_;
    current_ = this;
    start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!on_) return;
    auto elapsed = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
    OpTotals& t = op_totals();
    uint64_t own = elapsed > nested_ ? elapsed - nested_ : 0;
    t.ns[static_cast<int>(op_)].fetch_add(own, std::memory_order_relaxed);
    t.calls[static_cast<int>(op_)].fetch_add(1, std::memory_order_relaxed);
    if (parent_) parent_->nested_ += elapsed;
    current_ = parent_;
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Op op_;
  bool on_;
  OpTimer* parent_ = nullptr;
  uint64_t nested_ = 0;
  std::chrono::steady_clock::time_point start_;
  static thread_local OpTimer* current_;
};

}  // namespace fastdec
