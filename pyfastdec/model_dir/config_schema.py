"""What config.json may hold (export/FORMAT.md, version 1): the accepted values and bounds
of its fields, and the validated config they become (ModelConfig). The reader that
checks a file against them is config_parser.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

FORMAT_NAME, FORMAT_VERSION = "fastdec", 1
ARCHS = ("transformer", "nat-drafter")
DECODER_SELF_KINDS = ("attention", "ssru")
NORMS = ("pre", "post")
ACTIVATIONS = ("relu", "swish", "gelu")
# Sinusoidal position tables (export/FORMAT.md, "Embeddings"): ours, Hugging Face Marian's
# and Marian C++'s. The same sin/cos functions; the layouts and frequencies differ.
POSITIONS = ("interleaved", "halves", "marian")
DEFAULT_LAYER_NORM_EPS = 1e-5
# Layer-norm eps as trained models use it: 1e-5 (torch), 1e-6 (Marian C++), 1e-12 (BERT).
MIN_LAYER_NORM_EPS, MAX_LAYER_NORM_EPS = 1e-12, 1e-2
TOKEN_NAMES = ("pad", "unk", "bos", "eos", "mask")
# tokens.mask is the drafter placeholder: a "transformer" may have none (foreign models).
OPTIONAL_TOKENS = ("mask",)
MIN_SOURCE_LEN = 2  # max_source_len counts EOS: a shorter one holds no source token

CONFIG_FIELDS = ("format", "version", "arch", "d_model", "head_dim", "vocab_size", "norm", "activation",
                 "encoder", "decoder", "tokens", "max_source_len", "block_size", "quantization", "heads",
                 "layer_norm_eps", "positions", "suppress", "tokenizer", "decoding", "checksum", "description",
                 "task")
QUANT_WEIGHTS, QUANT_WEIGHT_SCALE, QUANT_ACTIVATIONS = "int8", "per_output_channel", "int8_static_per_tensor"
# quantization.activations of a directory without multipliers: the engine scales each
# input row by 127 / max|row| at run time (no calibration text needed).
QUANT_DYNAMIC_ACTIVATIONS = "int8_dynamic_per_row"
# quantization.embedding: embed.weight stored int8 [V, d] with embed.weight_scale [V]
# (absent/null: float32 embed.weight, quantised per row at load the same way).
QUANT_EMBEDDING = "int8_per_row"
# Activation multipliers m = 127 / max|A| (shipped models: 13 to 45). The bounds allow a
# calibrated max|A| from 1.27e-4 to 1.27e6, four decades beyond either end of what trained
# models show; outside them every input saturates at +-127 or rounds to 0.
MIN_ACTIVATION_SCALE, MAX_ACTIVATION_SCALE = 1e-4, 1e6

@dataclass(frozen=True)
class LayerShape:
    heads: int
    ffn: int


@dataclass(frozen=True)
class ProposalHeads:
    """config.json "heads": K blockwise proposal heads of H hidden units (export/FORMAT.md)."""

    count: int
    hidden: int
    # "sha256:..." of the network they were trained on (heads_verifier.py); None: unchecked.
    verifier: Optional[str] = None


@dataclass(frozen=True)
class Quantization:
    """config.json "quantization": int8 weights with per-row scales, static int8 inputs."""

    weights: str
    weight_scale: str
    activations: str
    activation_scales: dict[str, float]  # quantized linear name -> input multiplier m
    calibration: Optional[dict]          # how the multipliers were measured (informational)
    # "int8_per_row": embed.weight is stored int8 (+ embed.weight_scale); None: float32.
    # Either way an int8 model's tied matrix is int8 per row (export/FORMAT.md).
    embedding: Optional[str] = None


@dataclass(frozen=True)
class ModelConfig:
    """A validated config.json (field meanings: export/FORMAT.md)."""

    arch: str
    d_model: int
    head_dim: int
    vocab_size: int
    norm: str
    activation: str
    encoder_layers: tuple[LayerShape, ...]
    decoder_layers: tuple[LayerShape, ...]
    decoder_self: str
    tokens: dict[str, int]
    max_source_len: int
    block_size: Optional[int]
    quantization: Optional[Quantization]
    checksum: Optional[dict[str, str]] = None  # checksum_keys(tokenizer) -> "sha256:<hex>"
    heads: Optional[ProposalHeads] = None  # blockwise proposal heads; None: the model has none
    layer_norm_eps: float = DEFAULT_LAYER_NORM_EPS
    positions: str = "interleaved"
    suppress: tuple[int, ...] = ()  # ids never generated (output bias -inf at load)
    tokenizer: str = "spm"
    # config.json "decoding" (optional): defaults chosen for this model on its val set.
    # edit_margin: a correction model's edit must beat keeping the source token by this many
    # nats (pyfastdec/decoding/source_ngrams.py); absent: 0, plain greedy.
    edit_margin: float = 0.0
    # BiLD defaults of a little model (decoding/bild.py), chosen on val: the fallback
    # threshold of lossless BiLD, and the fallback/rollback pair of lossy BiLD.
    bild: Optional[dict[str, float]] = None
    # config.json encoder.shared: this model has no encoder; its decoder reads the output
    # of the encoder with this digest (encoder_digest of the host model's directory).
    encoder_shared: Optional[str] = None
    # config.json "description" (optional): what the model was trained on and is good for,
    # one line for people (fastdec info); no engine reads it.
    description: Optional[str] = None
    # config.json "task" (optional): "translation" or "correction" (TASKS), what the model
    # was trained to do; `fastdec correct` and Corrector refuse a translation model. Absent
    # (imported models): not checked.
    task: Optional[str] = None


TASKS = ("translation", "correction")
DECODING_FIELDS = ("edit_margin",) + ("fallback", "lossy_fallback", "rollback")  # the last three: BiLD
MAX_BILD_ROLLBACK = math.log(64)  # decoding/bild.py: the engine's largest top-k


# The engine compares log-probs in float32: a margin is used as at most its largest value,
# which no gap between two tokens the model can write reaches, so any larger margin (inf
# included) means "never edit" (1e308 used to fail inside the engine, as inf in float32).
MAX_EDIT_MARGIN = float(np.finfo(np.float32).max)


def is_edit_margin(value: Any) -> bool:
    """A valid edit margin: a real number >= 0, inf included (bool is not one; NaN fails)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value >= 0


def engine_edit_margin(value: float) -> float:
    """The margin the engine is given: `value` clamped to MAX_EDIT_MARGIN (the same rule)."""
    return min(float(value), MAX_EDIT_MARGIN)
