#include "py_config.h"

#include <string>
#include <vector>

namespace py = pybind11;

namespace fastdec {

ModelConfig parse_model_config(const py::dict& c) {
  ModelConfig cfg;
  cfg.arch = c["arch"].cast<std::string>();
  if (cfg.arch != "transformer" && cfg.arch != "nat-drafter")
    throw py::value_error("config: arch '" + cfg.arch + "' is not transformer or nat-drafter");
  cfg.d_model = c["d_model"].cast<int>();
  cfg.head_dim = c["head_dim"].cast<int>();
  cfg.vocab_size = c["vocab_size"].cast<int>();
  cfg.pre_norm = c["norm"].cast<std::string>() == "pre";
  auto layers = [](const py::handle& stack) {
    std::vector<LayerShape> out;
    for (const auto& l : stack["layers"]) out.push_back({l["heads"].cast<int>(), l["ffn"].cast<int>()});
    return out;
  };
  cfg.encoder = layers(c["encoder"]);
  cfg.shared_encoder = c["encoder"].contains("shared") && !c["encoder"]["shared"].is_none();
  cfg.decoder = layers(c["decoder"]);
  cfg.ssru_decoder = c["decoder"]["self"].cast<std::string>() == "ssru";
  py::dict tokens = c["tokens"];
  cfg.pad = tokens["pad"].cast<int>();
  cfg.unk = tokens["unk"].cast<int>();
  cfg.bos = tokens["bos"].cast<int>();
  cfg.eos = tokens["eos"].cast<int>();
  cfg.mask = tokens.contains("mask") ? tokens["mask"].cast<int>() : -1;
  // A drafter's mask block attends both ways, which a recurrence (SSRU) cannot, and is
  // made of mask embeddings (config_parser.py refuses both as well).
  if (cfg.is_drafter() && (cfg.mask < 0 || cfg.ssru_decoder))
    throw py::value_error("config: a nat-drafter needs a mask token and an attention decoder");
  // Optional fields (export/FORMAT.md); pyfastdec/model_dir/config_parser.py validated their values.
  if (c.contains("activation")) {
    std::string act = c["activation"].cast<std::string>();
    if (act == "swish") cfg.activation = Activation::kSwish;
    else if (act == "gelu") cfg.activation = Activation::kGelu;
    else if (act != "relu") throw py::value_error("config: activation '" + act + "' is not relu, swish or gelu");
  }
  if (c.contains("layer_norm_eps")) cfg.layer_norm_eps = c["layer_norm_eps"].cast<float>();
  if (c.contains("positions")) {
    std::string pos = c["positions"].cast<std::string>();
    if (pos == "halves") cfg.positions = ModelConfig::Positions::kHalves;
    else if (pos == "marian") cfg.positions = ModelConfig::Positions::kMarian;
    else if (pos != "interleaved")
      throw py::value_error("config: positions '" + pos + "' is not interleaved, halves or marian");
  }
  if (c.contains("suppress"))
    for (const auto& id : c["suppress"]) {
      int v = id.cast<int>();
      if (v < 0 || v >= cfg.vocab_size)
        throw py::value_error("config: suppress id " + std::to_string(v) + " outside the vocabulary");
      cfg.suppress.push_back(v);
    }
  if (c.contains("block_size") && !c["block_size"].is_none()) cfg.block_size = c["block_size"].cast<int>();
  cfg.int8 = c.contains("quantization") && !c["quantization"].is_none();
  if (c.contains("heads") && !c["heads"].is_none()) {
    cfg.proposal_heads = c["heads"]["count"].cast<int>();
    cfg.proposal_hidden = c["heads"]["hidden"].cast<int>();
  }
  return cfg;
}

}  // namespace fastdec
