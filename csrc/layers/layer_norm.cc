#include "layers/layer_norm.h"

namespace fastdec {

LayerNorm::LayerNorm(const KernelTable& kernels, const TensorLookup& lookup, const std::string& name, int d,
                     float eps)
    : kernels_(&kernels), d_(d), eps_(eps) {
  TensorView g = expect_tensor(lookup, name + ".weight", "float32", {d});
  TensorView b = expect_tensor(lookup, name + ".bias", "float32", {d});
  gamma_.assign(g.f32(), g.f32() + d);
  beta_.assign(b.f32(), b.f32() + d);
}

}  // namespace fastdec
