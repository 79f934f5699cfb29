// Model shape and token ids, as config.json gives them (export/FORMAT.md). The Python
// loader (pyfastdec/model_dir/) validates the file; this struct only carries values, read from
// engine_config's dict by csrc/py_config.cc for the CPU engine and the GPU model alike.
#pragma once
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "layers/positions.h"

namespace fastdec {

struct LayerShape {
  int heads = 0;
  int ffn = 0;
};

struct ModelConfig {
  std::string arch;          // "transformer" | "nat-drafter"
  int d_model = 0;
  int head_dim = 0;
  int vocab_size = 0;
  bool pre_norm = true;
  bool ssru_decoder = false; // decoder self sublayer: SSRU instead of attention
  std::vector<LayerShape> encoder, decoder;
  // config.json encoder.shared: no encoder; the decoder reads another model's encoder
  // output (Model::attach). Which one is checked in Python (model_dir.encoder_digest).
  bool shared_encoder = false;
  int pad = 0, unk = 1, bos = 2, eos = 3, mask = 4;  // mask -1: none (a "transformer" may lack it)
  int block_size = 0;        // drafters only
  bool int8 = false;         // quantized linears (weights int8 + per-row scales)
  int proposal_heads = 0;    // config.json "heads".count: blockwise proposal heads (0: none)
  int proposal_hidden = 0;   // config.json "heads".hidden
  // Optional fields for models trained elsewhere (export/FORMAT.md); defaults = ours.
  Activation activation = Activation::kRelu;
  float layer_norm_eps = 1e-5f;
  using Positions = PositionEncoding;
  Positions positions = Positions::kInterleaved;
  std::vector<int> suppress;  // ids never generated: output bias -inf

  bool is_drafter() const { return arch == "nat-drafter"; }
};

}  // namespace fastdec
