#include "kernels/op_profile.h"

#include <cstdlib>
#include <cstring>

namespace fastdec {
namespace {

std::atomic<bool>& flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("FASTDEC_PROFILE_OPS");
    return env != nullptr && std::strcmp(env, "") != 0 && std::strcmp(env, "0") != 0;
  }()};
  return on;
}

}  // namespace

thread_local OpTimer* OpTimer::current_ = nullptr;

const char* op_name(Op op) {
  static const char* const names[] = {"binding", "call_other", "embed", "layer_norm", "residual",
                                      "quantize", "gemm", "attention", "cache_copy", "ssru",
                                      "output_stats"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(Op::kCount), "one name per op");
  return names[static_cast<int>(op)];
}

bool op_profile_enabled() { return flag().load(std::memory_order_relaxed); }
void set_op_profile(bool on) { flag().store(on, std::memory_order_relaxed); }

OpTotals& op_totals() {
  static OpTotals totals{};
  return totals;
}

void reset_op_totals() {
  OpTotals& t = op_totals();
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    t.ns[i].store(0, std::memory_order_relaxed);
    t.calls[i].store(0, std::memory_order_relaxed);
  }
}

}  // namespace fastdec
