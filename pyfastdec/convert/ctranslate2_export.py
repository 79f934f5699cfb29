"""Convert a pyfastdec model directory (export/FORMAT.md) into a CTranslate2 model.

pyfastdec's speed claims are measured side by side against CTranslate2 on the same
weights, so the conversion must make CTranslate2 compute exactly what FORMAT.md
specifies. The spec is filled through CTranslate2's own Python spec API
(ctranslate2.specs.TransformerSpec), as its bundled fairseq / OpenNMT-py converters do.
What each setting matches:

- Embeddings: one tied matrix as the source embedding, the target embedding and the
  output projection (CTranslate2 aliases identical variables, so it is stored once);
  `scale_embeddings` multiplies by sqrt(d_model) before positions are added.
- Positions: CTranslate2's built-in sinusoidal table is [sin..., cos...] concatenated, with
  frequencies 10000^(-i/(d/2-1)) and position p at row p+1; ours is interleaved sin/cos
  with 10000^(-2i/d) from position 0. So our exact table is stored as a *learned*
  position-encoding matrix (`position_encodings.encodings`), row p = position p, for
  `max_positions` positions (default 1024). CTranslate2 indexes it from 0 in the encoder
  and from 0 = the decoder start token (our BOS) in the decoder, like our model; a
  source or a decoder longer than the table makes CTranslate2 raise, never wrap. Its
  `translate_batch` also truncates sources at max_input_length=1024 by default.
- Layers: pre/post norm (`pre_norm`), layer norms with eps 1e-5 (`layer_norm_epsilon`),
  q/k/v fused into one linear for self-attention and k/v for cross-attention, per-layer
  FFN sizes (CTranslate2 reads them from the weight shapes), `head_dim` given explicitly
  because pruned models have heads * head_dim != d_model, ReLU, output linear with bias.
- Tokens: the sentencepiece pieces in id order are both vocabularies, so CTranslate2's
  token ids are ours; unk/bos/eos are our pieces, the decoder starts with BOS, and
  `add_source_eos` appends EOS to the source, so callers pass the plain sentencepiece
  pieces (`sp.encode(text, out_type=str)`, no EOS) and the model sees "ids + EOS" exactly
  as our engine does. spm.model is copied into the output directory.

What CTranslate2 cannot express is refused with a ValueError naming the config field:
SSRU decoders (`decoder.self`) and nat-drafter models (`arch`). Head counts that differ
between the layers of one stack (pruned models) are padded: CTranslate2 has one
`num_heads` per encoder and per decoder, so layers with fewer heads get zero heads up to
the stack's largest count (`pad_layers`), which computes exactly the same function.
Encoder and decoder may differ from each other.

Greedy decoding equivalent to ours: `translate_batch(pieces, beam_size=1,
min_decoding_length=0, max_decoding_length=N)` (CTranslate2's default minimum length of
1 forbids an empty translation, which our greedy allows).

int8 model directories: our int8 weights are dequantised (q * weight_scale per row) to
float32 before conversion, the tied embedding included (its int8 rows, stored or computed
at load as our engine does), so with quantization=None/"float32" CTranslate2 runs the very
float weights our int8 model approximates. With quantization="int8" CTranslate2 then
re-quantises them with its own per-row scales and dynamic per-row activation scales:
the comparison uses the same float weights, each engine applying its own int8 scheme.

CLI: python -m pyfastdec.convert ctranslate2 MODEL_DIR OUT_DIR [--quantization int8]
(pyfastdec/convert/command.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pyfastdec.convert.positions import sinusoidal_table
from pyfastdec.convert.weights import float_weights, pad_layers
from pyfastdec.model_dir import ModelConfig, ModelDir
from pyfastdec.model_dir.staging import check_output, staged_dir

DEFAULT_MAX_POSITIONS = 1024  # = translate_batch's default max_input_length
# The table is max_positions x d_model float32, stored once per stack: 16384 rows of a
# 1024-wide model are 128 MB, and no sentence model reads 16k tokens (CTranslate2 truncates
# sources at 1024 by default). Checked before anything is allocated.
MAX_POSITIONS = 16384


def _import_ctranslate2():
    """(common_spec, transformer_spec) of ctranslate2, a benchmark-only dependency."""
    try:
        from ctranslate2.specs import common_spec, transformer_spec
    except ImportError as err:
        raise ImportError("converting to CTranslate2 needs the ctranslate2 package, a benchmark-only "
                          "dependency: pip install 'pyfastdec[bench]' (or pip install 'ctranslate2>=4')"
                          ) from err
    return common_spec, transformer_spec


# ----------------------------------------------------------------------------- checks
def check_max_positions(max_positions) -> int:
    if isinstance(max_positions, bool) or not isinstance(max_positions, int) or not 1 <= max_positions <= MAX_POSITIONS:
        raise ValueError(f"--max-positions {max_positions}: expected an integer from 1 to {MAX_POSITIONS} (rows "
                         f"of the position table: the longest source or decoder input, in tokens)")
    return max_positions


def check_convertible(config: ModelConfig) -> tuple[int, int]:
    """(encoder heads, decoder heads) CTranslate2 will run: the most heads of any layer of
    each stack (pad_layers fills the others up with zero heads), or a ValueError naming
    what CTranslate2 cannot run."""
    if config.arch != "transformer":
        raise ValueError(f"arch = {config.arch!r}: only autoregressive \"transformer\" models convert "
                         f"to CTranslate2 (a GAD drafter decodes blocks, which CTranslate2 cannot)")
    if config.decoder_self != "attention":
        raise ValueError(f"decoder.self = {config.decoder_self!r}: CTranslate2 has no SSRU decoder; "
                         f"only decoder.self = \"attention\" models convert")
    return max(l.heads for l in config.encoder_layers), max(l.heads for l in config.decoder_layers)


# ----------------------------------------------------------------------------- spec filling
class _Filler:
    """Copies our tensors into a TransformerSpec (names: FORMAT.md -> CTranslate2)."""

    def __init__(self, w: dict[str, np.ndarray]):
        self.w = w

    def linear(self, spec, name: str) -> None:
        spec.weight, spec.bias = self.w[f"{name}.weight"], self.w[f"{name}.bias"]

    def fused(self, spec, names: list[str]) -> None:
        """One linear computing several of ours side by side (output rows concatenated)."""
        spec.weight = np.concatenate([self.w[f"{n}.weight"] for n in names])
        spec.bias = np.concatenate([self.w[f"{n}.bias"] for n in names])

    def layer_norm(self, spec, name: str) -> None:
        spec.gamma, spec.beta = self.w[f"{name}.weight"], self.w[f"{name}.bias"]

    def self_attention(self, spec, name: str, ln: str) -> None:
        self.fused(spec.linear[0], [f"{name}.q", f"{name}.k", f"{name}.v"])
        self.linear(spec.linear[1], f"{name}.o")
        self.layer_norm(spec.layer_norm, ln)

    def cross_attention(self, spec, name: str, ln: str) -> None:
        self.linear(spec.linear[0], f"{name}.q")
        self.fused(spec.linear[1], [f"{name}.k", f"{name}.v"])
        self.linear(spec.linear[2], f"{name}.o")
        self.layer_norm(spec.layer_norm, ln)

    def ffn(self, spec, layer: str) -> None:
        self.linear(spec.linear_0, f"{layer}.ffn.fc1")
        self.linear(spec.linear_1, f"{layer}.ffn.fc2")
        self.layer_norm(spec.layer_norm, f"{layer}.ln_ffn")


def build_spec(model: ModelDir, max_positions: int = DEFAULT_MAX_POSITIONS):
    """A validated ctranslate2 TransformerSpec equivalent to `model` (not yet optimised)."""
    common_spec, transformer_spec = _import_ctranslate2()
    check_max_positions(max_positions)
    cfg = model.config
    enc_heads, dec_heads = check_convertible(cfg)
    if max_positions < cfg.max_source_len:
        raise ValueError(f"max_positions = {max_positions} < max_source_len = {cfg.max_source_len}: "
                         f"the position table must cover the longest source the model was trained on")
    w = float_weights(model)
    pad_layers(w, cfg, enc_heads, dec_heads)
    fill = _Filler(w)
    pre = cfg.norm == "pre"
    positions = sinusoidal_table(max_positions, cfg.d_model, cfg.positions)
    embed = w["embed.weight"]
    # CTranslate2's GELU is the erf form (its GELUTanh is the other one); SWISH = x sigmoid(x).
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "swish": common_spec.Activation.SWISH}[cfg.activation]

    encoder = transformer_spec.TransformerEncoderSpec(
        len(cfg.encoder_layers), enc_heads, pre_norm=pre, activation=activation,
        head_dim=cfg.head_dim)
    decoder = transformer_spec.TransformerDecoderSpec(
        len(cfg.decoder_layers), dec_heads, pre_norm=pre, activation=activation,
        head_dim=cfg.head_dim)

    encoder.embeddings[0].weight = embed
    encoder.scale_embeddings = True  # x * sqrt(d_model), before the positions are added
    encoder.position_encodings.encodings = positions
    for i, spec in enumerate(encoder.layer):
        layer = f"encoder.layers.{i}"
        fill.self_attention(spec.self_attention, f"{layer}.self_attn", f"{layer}.ln_attn")
        fill.ffn(spec.ffn, layer)
    if pre:
        fill.layer_norm(encoder.layer_norm, "encoder.final_ln")

    decoder.embeddings.weight = embed
    decoder.scale_embeddings = True
    decoder.position_encodings.encodings = positions
    for i, spec in enumerate(decoder.layer):
        layer = f"decoder.layers.{i}"
        fill.self_attention(spec.self_attention, f"{layer}.self_attn", f"{layer}.ln_self")
        fill.cross_attention(spec.attention, f"{layer}.cross_attn", f"{layer}.ln_cross")
        fill.ffn(spec.ffn, layer)
    if pre:
        fill.layer_norm(decoder.layer_norm, "decoder.final_ln")
    decoder.projection.weight = embed  # tied output projection ...
    bias = w["output.bias"]
    if cfg.suppress:  # never generated: -inf, as our engine applies it at load
        bias = bias.copy()
        bias[list(cfg.suppress)] = -np.inf
    decoder.projection.bias = bias  # ... with its own bias

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    pieces = _pieces(model)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    tok = cfg.tokens
    spec.config.unk_token = pieces[tok["unk"]]
    spec.config.bos_token = pieces[tok["bos"]]
    spec.config.eos_token = pieces[tok["eos"]]
    spec.config.decoder_start_token = pieces[tok["bos"]]  # our decoder position 0 = BOS
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True  # source = sentencepiece ids + EOS
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    for name, path in model.tokenizer_files.items():  # spm.model, or source.spm, target.spm, vocab.json
        spec.register_file(str(path), name)
    spec.validate()
    return spec


def _pieces(model: ModelDir) -> list[str]:
    """Vocabulary pieces in model id order (CTranslate2 maps pieces to ids by position)."""
    if model.config.tokenizer != "spm":
        from pyfastdec.text import load_tokenizer

        return load_tokenizer(model).pieces()
    import sentencepiece  # a run-time dependency of pyfastdec

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model.spm_path))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


# ----------------------------------------------------------------------------- entry points
def to_ctranslate2(model_dir: str | os.PathLike, out_dir: str | os.PathLike, quantization: str | None = None,
                   max_positions: int = DEFAULT_MAX_POSITIONS, force: bool = False) -> Path:
    """Write a CTranslate2 model equivalent to the pyfastdec model directory `model_dir`.

    quantization: None (keep float32) or any CTranslate2 weight type ("int8", "float32",
    "int8_float32", "int16", ...), applied by CTranslate2's own `spec.optimize`. int8
    model directories are dequantised first (see the module docstring: CTranslate2 then
    quantises the same float weights with its own per-row scales). max_positions: rows
    of the stored position table, i.e. the longest source (EOS included) and the longest
    decoder input (BOS included) CTranslate2 will accept, at most MAX_POSITIONS. An
    existing non-empty out_dir is refused unless force=True (it is then replaced, only
    once the new model is written: pyfastdec/model_dir/staging.py); out_dir may not be model_dir,
    lie inside it or contain it. Returns out_dir.
    """
    _import_ctranslate2()  # fail before any work if the benchmark extra is missing
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ValueError(f"quantization = {quantization!r}: expected None or one of {', '.join(ACCEPTED_MODEL_TYPES)}")
    check_max_positions(max_positions)
    out = Path(out_dir)
    check_output(out, Path(model_dir), force=force)
    spec = build_spec(ModelDir.load(model_dir), max_positions)  # the model is checked before out is touched
    spec.optimize(quantization=quantization)
    with staged_dir(out) as tmp:
        spec.save(str(tmp))
    return out
