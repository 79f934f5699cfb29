#include "layers/proposal_heads.h"

#include <stdexcept>
#include <tuple>

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
  for (int i = 0; i < count; ++i) {
    for (auto [linear, in, out, into] : {std::tuple{"fc1", d, hidden, &fc1_}, std::tuple{"fc2", hidden, d, &fc2_}}) {
      const float scale = int8 ? scale_or_zero(act_scales, head_name(i, linear)) : 0.f;
      into->emplace_back(kernels, lookup, std::vector<LinearPart>{{head_name(i, linear), out}}, in, int8, scale);
    }
  }
}

void ProposalHeads::forward(const float* s, int rows, int k, float* out, std::vector<float>& hidden,
                            ThreadPool* pool, I8Scratch* scratch) const {
  if (k < 1 || k > count()) throw std::invalid_argument("heads: k must be in [1, count]");
  const size_t R = static_cast<size_t>(rows);
  hidden.resize(R * static_cast<size_t>(hidden_));
  for (int i = 0; i < k; ++i) {
    float* y = out + static_cast<size_t>(i) * R * static_cast<size_t>(d_);
    fc1_[static_cast<size_t>(i)].forward(s, rows, hidden.data(), pool, /*relu=*/true, scratch);
    fc2_[static_cast<size_t>(i)].forward(hidden.data(), rows, y, pool, false, scratch);
    for (size_t t = 0; t < R * static_cast<size_t>(d_); ++t) y[t] += s[t];
  }
}

}  // namespace fastdec
