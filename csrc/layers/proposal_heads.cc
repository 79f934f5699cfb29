#include "layers/proposal_heads.h"

#include <cstring>
#include <stdexcept>

namespace fastdec {
namespace {

float scale_or_zero(const std::map<std::string, float>& scales, const std::string& name) {
  auto it = scales.find(name);
  return it == scales.end() ? 0.f : it->second;
}

std::string head_name(int i, const char* linear) { return "heads." + std::to_string(i) + "." + linear; }

}  // namespace

ProposalHeads::ProposalHeads(const KernelTable& kernels, const TensorLookup& lookup, int count, int hidden,
                             int d, bool int8, const std::map<std::string, float>& act_scales)
    : d_(d), hidden_(hidden) {
  if (count < 1 || hidden < 1) throw std::invalid_argument("heads: count and hidden must be >= 1");
  std::vector<LinearPart> fc1_parts;
  const float fc1_scale = int8 ? scale_or_zero(act_scales, head_name(0, "fc1")) : 0.f;
  for (int i = 0; i < count; ++i) {
    fc1_parts.push_back({head_name(i, "fc1"), hidden});
    if (int8 && scale_or_zero(act_scales, head_name(i, "fc1")) != fc1_scale)
      throw std::invalid_argument("activation_scales: '" + head_name(i, "fc1") + "' differs from '" +
                                  head_name(0, "fc1") + "', but both read the same input and run as one int8 GEMM");
  }
  fc1_ = Linear(kernels, lookup, fc1_parts, d, int8, fc1_scale);
  for (int i = 0; i < count; ++i) {
    float scale = int8 ? scale_or_zero(act_scales, head_name(i, "fc2")) : 0.f;
    fc2_.emplace_back(kernels, lookup, std::vector<LinearPart>{{head_name(i, "fc2"), d}}, hidden, int8, scale);
  }
}

void ProposalHeads::forward(const float* s, int rows, float* out, std::vector<float>& hidden,
                            std::vector<float>& grouped, ThreadPool* pool, I8Scratch* scratch) const {
  const int K = count(), H = hidden_, d = d_;
  const size_t R = static_cast<size_t>(rows);
  hidden.resize(R * K * H);
  grouped.resize(hidden.size());
  fc1_.forward(s, rows, hidden.data(), pool, /*relu=*/true, scratch);
  for (int i = 0; i < K; ++i)
    for (size_t r = 0; r < R; ++r)
      std::memcpy(grouped.data() + (static_cast<size_t>(i) * R + r) * H,
                  hidden.data() + (r * K + static_cast<size_t>(i)) * H, sizeof(float) * H);
  for (int i = 0; i < K; ++i) {
    float* y = out + static_cast<size_t>(i) * R * d;
    fc2_[static_cast<size_t>(i)].forward(grouped.data() + static_cast<size_t>(i) * R * H, rows, y, pool, false,
                                         scratch);
    for (size_t t = 0; t < R * d; ++t) y[t] += s[t];
  }
}

}  // namespace fastdec
