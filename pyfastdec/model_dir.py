"""Inference-side reader of a pyfastdec model directory (export/FORMAT.md, version 1).

A model directory holds config.json, model.safetensors and spm.model. `ModelDir.load`
validates all three against the format before anything uses them, so an engine never
sees a directory it does not understand: every refusal is a ModelDirError whose message
reads "<file>: <field or tensor>: what is wrong (expected ...)". Beyond structure it
checks what damage breaks: values (finite, bounded: check_values), keys given twice in
config.json, and, when config.json has a "checksum", the content of all three files.

Only numpy, sentencepiece and the standard library are used (pyfastdec's run-time
dependencies); the training-side writer and reader live in export/writer.py. The tensor
table is computed from the config alone (`expected_tensors`), not from a torch model,
and must agree with export.modeling's state_dict (tests/test_model_dir.py checks it).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pyfastdec.foreign_models import convert_first
from pyfastdec import safetensors_io
from pyfastdec.size_limits import MAX_BLOCK

try:  # a run-time dependency, but the reader stays importable without it
    import sentencepiece
except ImportError:  # pragma: no cover - exercised only in minimal environments
    sentencepiece = None

CONFIG_FILE, WEIGHTS_FILE, SPM_FILE = "config.json", "model.safetensors", "spm.model"
FORMAT_NAME, FORMAT_VERSION = "fastdec", 1
ARCHS = ("transformer", "nat-drafter")
DECODER_SELF_KINDS = ("attention", "ssru")
NORMS = ("pre", "post")
ACTIVATIONS = ("relu", "swish", "gelu")
# Sinusoidal position tables (export/FORMAT.md, "Embeddings"): ours, Hugging Face Marian's
# and Marian C++'s. The same sin/cos functions; the layouts and frequencies differ.
POSITIONS = ("interleaved", "halves", "marian")
# The vocabulary: one joint spm.model whose ids are the model's, or Marian's two
# sentencepiece models (source, target) over one vocab.json (piece -> model id).
TOKENIZERS = ("spm", "marian")
SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE = "source.spm", "target.spm", "vocab.json"
TOKENIZER_FILES = {"spm": (SPM_FILE,), "marian": (SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE)}
DEFAULT_LAYER_NORM_EPS = 1e-5
# Layer-norm eps as trained models use it: 1e-5 (torch), 1e-6 (Marian C++), 1e-12 (BERT).
MIN_LAYER_NORM_EPS, MAX_LAYER_NORM_EPS = 1e-12, 1e-2
TOKEN_NAMES = ("pad", "unk", "bos", "eos", "mask")
# tokens.mask is the drafter placeholder: a "transformer" may have none (foreign models).
OPTIONAL_TOKENS = ("mask",)
MIN_SOURCE_LEN = 2  # max_source_len counts EOS: a shorter one holds no source token
MASK_PIECE = "<mask>"
# Marian's special pieces in vocab.json (HF MarianTokenizer's defaults).
MARIAN_EOS_PIECE, MARIAN_UNK_PIECE = "</s>", "<unk>"
# A vocab.json must hold at least this share of each sentencepiece model's pieces: a joint
# Marian vocabulary may miss pieces never seen in the encoded training data, but one from
# another model shares almost none.
MIN_VOCAB_COVERAGE = 0.9  # the drafter placeholder's piece in spm.model (export/vocab.py)

CONFIG_FIELDS = ("format", "version", "arch", "d_model", "head_dim", "vocab_size", "norm", "activation",
                 "encoder", "decoder", "tokens", "max_source_len", "block_size", "quantization", "heads",
                 "layer_norm_eps", "positions", "suppress", "tokenizer", "decoding", "checksum")
# config.json "checksum" (optional): sha256 of each file's bytes, and of config.json's own
# canonical content (CHECKSUM_CONFIG) without the checksum field; see config_digest.
CHECKSUM_CONFIG = "config"
CHECKSUM_KEYS = (CHECKSUM_CONFIG, "model.safetensors", "spm.model")  # tokenizer "spm"


# The lexical shortlist is optional, and so is its key; but a checksummed directory that
# has one must list it (check_shortlist_content): a shortlist.bin of another model with the
# same vocabulary size loads and silently changes every output.
SHORTLIST_FILE = "shortlist.bin"


def checksum_keys(tokenizer: str) -> tuple[str, ...]:
    """The keys config.json "checksum" must have for a directory with this tokenizer."""
    return (CHECKSUM_CONFIG, WEIGHTS_FILE) + TOKENIZER_FILES[tokenizer]
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
QUANT_WEIGHTS, QUANT_WEIGHT_SCALE, QUANT_ACTIVATIONS = "int8", "per_output_channel", "int8_static_per_tensor"
# quantization.activations of a directory without multipliers: the engine scales each
# input row by 127 / max|row| at run time (no calibration text needed).
QUANT_DYNAMIC_ACTIVATIONS = "int8_dynamic_per_row"
# quantization.embedding: embed.weight stored int8 [V, d] with embed.weight_scale [V]
# (absent/null: float32 embed.weight, quantised per row at load the same way).
QUANT_EMBEDDING = "int8_per_row"
EMBED_WEIGHT, EMBED_SCALE = "embed.weight", "embed.weight_scale"

F32 = np.dtype("<f4")
I8 = np.dtype("i1")

# Magnitude bounds that no trained model comes near but a damaged file easily exceeds
# (export/FORMAT.md, "Validation at load"). Adam moves a weight by about lr per step, so
# even 1e6 steps at lr 1e-3 stay under 1e3; the shipped models' largest |w| is 1.5.
MAX_ABS_WEIGHT = 1e4
# An int8 row dequantizes to q * weight_scale with |q| <= 127, bounded like float weights.
MAX_WEIGHT_SCALE = MAX_ABS_WEIGHT / 127
# Activation multipliers m = 127 / max|A| (shipped models: 13 to 45). The bounds allow a
# calibrated max|A| from 1.27e-4 to 1.27e6, four decades beyond either end of what trained
# models show; outside them every input saturates at +-127 or rounds to 0.
MIN_ACTIVATION_SCALE, MAX_ACTIVATION_SCALE = 1e-4, 1e6


class ModelDirError(ValueError):
    """A model directory (or one of its files) that this reader refuses."""


# ----------------------------------------------------------------------------- config
@dataclass(frozen=True)
class LayerShape:
    heads: int
    ffn: int


@dataclass(frozen=True)
class ProposalHeads:
    """config.json "heads": K blockwise proposal heads of H hidden units (export/FORMAT.md)."""

    count: int
    hidden: int


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
    checksum: Optional[dict[str, str]] = None  # CHECKSUM_KEYS -> "sha256:<hex>"
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


DECODING_FIELDS = ("edit_margin",) + ("fallback", "lossy_fallback", "rollback")  # the last three: BiLD
MAX_BILD_ROLLBACK = math.log(64)  # decoding/bild.py: the engine's largest top-k


def _show(value: Any) -> str:
    """A short JSON rendering of a value for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _ConfigReader:
    """Field accessors that turn every violation into a ModelDirError naming the field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field: str, what: str) -> ModelDirError:
        return ModelDirError(f"{self.where}: {field}: {what}")

    def field(self, obj: dict, key: str, prefix: str, expected: str) -> Any:
        if key not in obj:
            raise self.fail(prefix + key, f"missing (expected {expected})")
        return obj[key]

    def only(self, obj: dict, allowed: tuple[str, ...], prefix: str) -> None:
        unknown = [k for k in obj if k not in allowed]
        if unknown:
            raise self.fail(prefix + unknown[0], f"unknown field (expected only {', '.join(allowed)})")

    def mapping(self, obj: dict, key: str, prefix: str, expected: str) -> dict:
        value = self.field(obj, key, prefix, expected)
        if not isinstance(value, dict):
            raise self.fail(prefix + key, f"{_show(value)} (expected {expected})")
        return value

    def integer(self, obj: dict, key: str, prefix: str, minimum: int = 1) -> int:
        expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        value = self.field(obj, key, prefix, expected)
        # JSON true/false arrive as bool, an int subclass; 2.0 arrives as float.
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.fail(prefix + key, f"{_show(value)} (expected {expected})")
        return value

    def choice(self, obj: dict, key: str, prefix: str, choices: tuple[str, ...]) -> str:
        expected = " or ".join(json.dumps(c) for c in choices)
        value = self.field(obj, key, prefix, expected)
        if not isinstance(value, str) or value not in choices:
            raise self.fail(prefix + key, f"{_show(value)} (expected {expected})")
        return value

    def layers(self, obj: dict, prefix: str, empty: bool = False) -> tuple[LayerShape, ...]:
        """empty: [] is valid (a shared encoder's layers)."""
        expected = 'a non-empty list of {"heads": h, "ffn": f}'
        value = self.field(obj, "layers", prefix, expected)
        if not isinstance(value, list) or not (value or empty):
            raise self.fail(prefix + "layers", f"{_show(value)} (expected {expected})")
        out = []
        for i, layer in enumerate(value):
            where = f"{prefix}layers[{i}]"
            if not isinstance(layer, dict):
                raise self.fail(where, f"{_show(layer)} (expected {{\"heads\": h, \"ffn\": f}})")
            self.only(layer, ("heads", "ffn"), where + ".")
            out.append(LayerShape(self.integer(layer, "heads", where + "."), self.integer(layer, "ffn", where + ".")))
        return tuple(out)


def _parse_tokens(r: _ConfigReader, obj: dict, vocab_size: int, arch: str) -> dict[str, int]:
    tokens = r.mapping(obj, "tokens", "", "an object with " + ", ".join(TOKEN_NAMES))
    r.only(tokens, TOKEN_NAMES, "tokens.")
    ids: dict[str, int] = {}
    for name in TOKEN_NAMES:
        if name in OPTIONAL_TOKENS and name not in tokens and arch == "transformer":
            continue  # only a drafter needs a mask token
        tid = r.integer(tokens, name, "tokens.", minimum=0)
        if tid >= vocab_size:
            raise r.fail(f"tokens.{name}", f"id {tid} (expected < vocab_size {vocab_size})")
        for other, other_id in ids.items():
            # bos is the decoder's start token; Marian models start from pad (a zero
            # embedding row), so those two may coincide: pad only fills unused slots.
            if other_id == tid and {name, other} != {"bos", "pad"}:
                raise r.fail(f"tokens.{name}", f"id {tid} is also tokens.{other} (expected distinct ids)")
        ids[name] = tid
    return ids


def _parse_eps(r: _ConfigReader, obj: dict) -> float:
    if "layer_norm_eps" not in obj:
        return DEFAULT_LAYER_NORM_EPS
    eps = obj["layer_norm_eps"]
    if (not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps)
            or not MIN_LAYER_NORM_EPS <= eps <= MAX_LAYER_NORM_EPS):
        raise r.fail("layer_norm_eps", f"{_show(eps)} (expected a number from {MIN_LAYER_NORM_EPS:g} to "
                     f"{MAX_LAYER_NORM_EPS:g}; absent: {DEFAULT_LAYER_NORM_EPS:g})")
    return float(eps)


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


def _parse_bild(r: _ConfigReader, obj: dict, arch: str, shared: bool) -> Optional[dict[str, float]]:
    """config.json "decoding" fallback / lossy_fallback (probabilities) and rollback (nats):
    all three or none, and only in a little model (autoregressive, shared encoder)."""
    decoding = obj.get("decoding")
    names = ("fallback", "lossy_fallback", "rollback")
    if not isinstance(decoding, dict) or not any(n in decoding for n in names):
        return None
    missing = [n for n in names if n not in decoding]
    if missing:
        raise r.fail(f"decoding.{missing[0]}", "missing (BiLD defaults come as fallback, lossy_fallback and rollback)")
    if arch != "transformer" or not shared:
        raise r.fail("decoding.fallback", "BiLD thresholds belong to a little model (arch \"transformer\" with "
                                          "encoder.shared)")
    out = {}
    for name in names:
        value, top = decoding[name], (MAX_BILD_ROLLBACK if name == "rollback" else 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top:
            raise r.fail(f"decoding.{name}", f"{_show(value)} (expected a number in [0, {top:.4g}])")
        out[name] = float(value)
    return out


def _parse_decoding(r: _ConfigReader, obj: dict, arch: str) -> float:
    """config.json "decoding" -> edit_margin (0.0 when absent)."""
    if "decoding" not in obj:
        return 0.0
    decoding = r.mapping(obj, "decoding", "", 'an object {"edit_margin": ...}')
    r.only(decoding, DECODING_FIELDS, "decoding.")
    margin = decoding.get("edit_margin", 0.0)
    if not is_edit_margin(margin) or not math.isfinite(margin):
        raise r.fail("decoding.edit_margin", f"{_show(margin)} (expected a number >= 0: nats an edit must win by)")
    if margin and arch != "transformer":
        raise r.fail("decoding.edit_margin", f"{_show(margin)} (a {arch!r} model drafts; it decodes nothing itself)")
    return float(margin)


def _parse_suppress(r: _ConfigReader, obj: dict, vocab_size: int, tokens: dict[str, int]) -> tuple[int, ...]:
    value = obj.get("suppress", [])
    expected = f"a list of distinct token ids < vocab_size {vocab_size}, not tokens.eos"
    if not isinstance(value, list):
        raise r.fail("suppress", f"{_show(value)} (expected {expected})")
    seen: set[int] = set()
    for i, tid in enumerate(value):
        if (not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid < vocab_size or tid in seen
                or tid == tokens["eos"]):
            # Suppressing EOS would make every hypothesis run to the length limit.
            raise r.fail(f"suppress[{i}]", f"{_show(tid)} (expected {expected})")
        seen.add(tid)
    return tuple(value)


def _parse_quantization(r: _ConfigReader, value: Any, linears: list[str]) -> Quantization:
    if not isinstance(value, dict):
        raise r.fail("quantization", f"{_show(value)} (expected null or an int8 quantization object)")
    q = "quantization."
    r.only(value, ("weights", "weight_scale", "activations", "activation_scales", "calibration", "embedding"), q)
    weights = r.choice(value, "weights", q, (QUANT_WEIGHTS,))
    weight_scale = r.choice(value, "weight_scale", q, (QUANT_WEIGHT_SCALE,))
    activations = r.choice(value, "activations", q, (QUANT_ACTIVATIONS, QUANT_DYNAMIC_ACTIVATIONS))
    if activations == QUANT_DYNAMIC_ACTIVATIONS:
        if "activation_scales" in value:
            raise r.fail(f"{q}activation_scales", f"present (expected none with activations "
                         f"{json.dumps(QUANT_DYNAMIC_ACTIVATIONS)}: inputs are scaled per row at run time)")
        scales = {}
    else:
        scales = r.mapping(value, "activation_scales", q, "an object: quantized linear -> input multiplier")
    wanted = set(linears)
    for name in scales:
        if name not in wanted:
            raise r.fail(f"{q}activation_scales.{name}", "not a quantized linear of this config "
                         f"(expected names like {linears[0]})")
    checked: dict[str, float] = {}
    for name in linears if activations == QUANT_ACTIVATIONS else ():  # in model order: the first missing one
        if name not in scales:
            raise r.fail(f"{q}activation_scales.{name}", "missing (expected a multiplier for every quantized linear)")
        m = scales[name]
        if (not isinstance(m, (int, float)) or isinstance(m, bool) or not math.isfinite(m)
                or not MIN_ACTIVATION_SCALE <= m <= MAX_ACTIVATION_SCALE):
            raise r.fail(f"{q}activation_scales.{name}", f"{_show(m)} (expected a finite number from "
                         f"{MIN_ACTIVATION_SCALE:g} to {MAX_ACTIVATION_SCALE:g}: m = 127 / max|input|)")
        checked[name] = float(m)
    calibration = value.get("calibration")
    if calibration is not None and not isinstance(calibration, dict):
        raise r.fail(f"{q}calibration", f"{_show(calibration)} (expected an object or null)")
    embedding = value.get("embedding")
    if embedding is not None and embedding != QUANT_EMBEDDING:
        raise r.fail(f"{q}embedding", f"{_show(embedding)} (expected {json.dumps(QUANT_EMBEDDING)}, null or no field)")
    return Quantization(weights, weight_scale, activations, checked, calibration, embedding)


def _parse_heads(r: _ConfigReader, value: Any, arch: str) -> Optional[ProposalHeads]:
    expected = '{"count": K, "hidden": H} or no "heads" field'
    if value is None:
        return None
    if arch != "transformer":
        # A drafter proposes whole blocks itself; heads ride on an autoregressive verifier.
        raise r.fail("heads", f"{_show(value)} (expected no heads: only arch \"transformer\" has proposal heads)")
    if not isinstance(value, dict):
        raise r.fail("heads", f"{_show(value)} (expected {expected})")
    r.only(value, ("count", "hidden"), "heads.")
    return ProposalHeads(r.integer(value, "count", "heads."), r.integer(value, "hidden", "heads."))


def config_digest(obj: dict) -> str:
    """"sha256:<hex>" of a decoded config.json without its "checksum" field, in a canonical
    form (sorted keys, no whitespace), so re-indenting or reordering keeps it and any
    changed value breaks it."""
    content = {key: value for key, value in obj.items() if key != "checksum"}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(data: Any) -> str:
    """"sha256:<hex>" of a bytes-like object (bytes, a memory map)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _parse_checksum(r: _ConfigReader, value: Any, keys: tuple[str, ...] = CHECKSUM_KEYS) -> dict[str, str]:
    expected = "an object with " + ", ".join(f'"{k}": "sha256:<64 hex digits>"' for k in keys)
    if not isinstance(value, dict):
        raise r.fail("checksum", f"{_show(value)} (expected {expected})")
    r.only(value, keys + (SHORTLIST_FILE,), "checksum.")
    for key in keys + ((SHORTLIST_FILE,) if SHORTLIST_FILE in value else ()):
        digest = r.field(value, key, "checksum.", '"sha256:<64 hex digits>"')
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise r.fail(f"checksum.{key}", f"{_show(digest)} (expected \"sha256:<64 lowercase hex digits>\")")
    return dict(value)


def checksum_mismatch(where: Any, field: str, key: str, expected: str, actual: str,
                      config_path: Any) -> ModelDirError:
    """The refusal for content that differs from config.json checksum.<key>."""
    return ModelDirError(f"{where}: {field}: content is {actual} (expected {expected} of {config_path} "
                         f"checksum.{key}: damaged or replaced since it was written; if changed on purpose, "
                         f"record the new content with python -m export.rehash DIR)")


def check_content(data, path: Path, key: str, config: "ModelConfig", config_path: Any) -> None:
    """The bytes of `path` against config.json checksum.<key>, when the config has one."""
    if config.checksum is not None:
        actual, expected = file_digest(data), config.checksum[key]
        if actual != expected:
            raise checksum_mismatch(path, "(content)", key, expected, actual, config_path)


def check_shortlist_content(data: Optional[bytes], path: Path, config: "ModelConfig", config_path: Any) -> None:
    """A model directory's own shortlist.bin (its bytes, None if absent) against config.json
    checksum: with a checksum, a present shortlist must be listed and match, and a listed
    one must be present. Without a checksum (hand-built directories) anything passes."""
    if config.checksum is None:
        return
    if SHORTLIST_FILE not in config.checksum:
        if data is not None:
            raise ModelDirError(f"{path}: (file): not listed in {config_path} checksum (expected checksum."
                                f"{SHORTLIST_FILE}: a shortlist of another model with the same vocabulary changes "
                                f"every output; if this one belongs to the model, record it with "
                                f"python -m export.rehash DIR)")
        return
    if data is None:
        raise ModelDirError(f"{path}: (file): missing (expected the shortlist {config_path} checksum."
                            f"{SHORTLIST_FILE} lists; or pass shortlist=False / --no-shortlist)")
    check_content(data, path, SHORTLIST_FILE, config, config_path)


def parse_config(obj: Any, where: str = CONFIG_FILE) -> ModelConfig:
    """Validate a decoded config.json against export/FORMAT.md; `where` names it in errors."""
    r = _ConfigReader(where)
    if not isinstance(obj, dict):
        raise r.fail("(top level)", f"{_show(obj)} (expected a JSON object)")
    # format and version first: a file of another format or version may differ anywhere.
    fmt = r.field(obj, "format", "", json.dumps(FORMAT_NAME))
    if fmt != FORMAT_NAME:
        raise r.fail("format", f"{_show(fmt)} (expected {json.dumps(FORMAT_NAME)})")
    version = r.field(obj, "version", "", f"the integer {FORMAT_VERSION}")
    if not isinstance(version, int) or isinstance(version, bool):
        raise r.fail("version", f"{_show(version)} (expected the integer {FORMAT_VERSION})")
    if version != FORMAT_VERSION:
        raise r.fail("version", f"unsupported version {version} (this pyfastdec reads {FORMAT_VERSION})")
    r.only(obj, CONFIG_FIELDS, "")

    arch = r.choice(obj, "arch", "", ARCHS)
    d_model = r.integer(obj, "d_model", "")
    if d_model % 2 or d_model < 4:
        raise r.fail("d_model", f"{d_model} (expected an even width >= 4: positions pair sin and cos)")
    head_dim = r.integer(obj, "head_dim", "")
    vocab_size = r.integer(obj, "vocab_size", "")
    norm = r.choice(obj, "norm", "", NORMS)
    activation = r.choice(obj, "activation", "", ACTIVATIONS)
    layer_norm_eps = _parse_eps(r, obj)
    positions = obj.get("positions", "interleaved")
    if positions not in POSITIONS:
        raise r.fail("positions", f"{_show(positions)} (expected " + " or ".join(json.dumps(p) for p in POSITIONS)
                     + '; absent: "interleaved")')
    tokenizer = obj.get("tokenizer", "spm")
    if tokenizer not in TOKENIZERS:
        raise r.fail("tokenizer", f"{_show(tokenizer)} (expected " + " or ".join(json.dumps(t) for t in TOKENIZERS)
                     + '; absent: "spm")')

    encoder = r.mapping(obj, "encoder", "", 'an object {"layers": [...]}')
    r.only(encoder, ("layers", "shared"), "encoder.")
    encoder_shared = encoder.get("shared")
    encoder_layers = r.layers(encoder, "encoder.", empty=encoder_shared is not None)
    if encoder_shared is not None:
        if not isinstance(encoder_shared, str) or not _DIGEST.fullmatch(encoder_shared):
            raise r.fail("encoder.shared", f"{_show(encoder_shared)} (expected \"sha256:\" and 64 hex digits: the "
                                           f"digest of the encoder this model reads)")
        if encoder_layers:
            raise r.fail("encoder.layers", f"{len(encoder_layers)} layers (expected [] with encoder.shared: the "
                                           f"model reads another model's encoder)")
    decoder = r.mapping(obj, "decoder", "", 'an object {"self": ..., "layers": [...]}')
    r.only(decoder, ("self", "layers"), "decoder.")
    decoder_self = r.choice(decoder, "self", "decoder.", DECODER_SELF_KINDS)
    decoder_layers = r.layers(decoder, "decoder.")

    tokens = _parse_tokens(r, obj, vocab_size, arch)
    suppress = _parse_suppress(r, obj, vocab_size, tokens)
    max_source_len = r.integer(obj, "max_source_len", "")
    if max_source_len < MIN_SOURCE_LEN:
        raise r.fail("max_source_len", f"{max_source_len} (expected an integer >= {MIN_SOURCE_LEN}: room for a "
                                       f"source token and EOS)")

    if arch == "nat-drafter":
        block_size = r.integer(obj, "block_size", "")
        if block_size > MAX_BLOCK:
            # The bound of --block / block= (size_limits.py says why): the block drafted by
            # default comes from here, so without it a config.json bypasses that bound.
            raise r.fail("block_size", f"{block_size} (expected an integer in [1, {MAX_BLOCK}], the bound of "
                                       f"--block; drafters are trained for 4 to 10)")
        if decoder_self != "attention":
            # The drafter's mask block attends bidirectionally, which a recurrence cannot.
            raise r.fail("decoder.self", f"{_show(decoder_self)} (expected \"attention\" for arch \"nat-drafter\")")
    else:
        block_size = obj.get("block_size")
        if block_size is not None:
            raise r.fail("block_size", f"{_show(block_size)} (expected no block_size: only arch \"nat-drafter\" has one)")

    heads = _parse_heads(r, obj.get("heads"), arch)
    edit_margin = _parse_decoding(r, obj, arch)
    quant_value = r.field(obj, "quantization", "", "null or an int8 quantization object")
    config = ModelConfig(arch, d_model, head_dim, vocab_size, norm, activation, encoder_layers, decoder_layers,
                         decoder_self, tokens, max_source_len, block_size, quantization=None, heads=heads,
                         layer_norm_eps=layer_norm_eps, positions=positions, suppress=suppress, tokenizer=tokenizer,
                         edit_margin=edit_margin, encoder_shared=encoder_shared,
                         bild=_parse_bild(r, obj, arch, encoder_shared is not None))
    if quant_value is not None:
        # Which linears need an activation scale depends on the shapes parsed above.
        config = dataclasses.replace(config, quantization=_parse_quantization(r, quant_value, quantized_linears(config)))
    if "checksum" not in obj:  # optional: hand-built directories have none
        return config
    checksum = _parse_checksum(r, obj["checksum"], checksum_keys(tokenizer))
    # Last, so a bad value is reported as itself; this catches what no field rule can,
    # such as heads and head_dim swapped (the tensor shapes only hold their product).
    actual = config_digest(obj)
    if actual != checksum[CHECKSUM_CONFIG]:
        raise checksum_mismatch(where, "checksum.config", CHECKSUM_CONFIG, checksum[CHECKSUM_CONFIG], actual, where)
    return dataclasses.replace(config, checksum=checksum)


class _Object(dict):
    """A decoded JSON object that remembers the first key it held twice."""

    duplicate: Optional[str] = None


def _keep_duplicates(pairs: list[tuple[str, Any]]) -> _Object:
    out = _Object()
    for key, value in pairs:
        if key in out and out.duplicate is None:
            out.duplicate = key
        out[key] = value
    return out


def _first_duplicate(value: Any, where: str = "") -> Optional[str]:
    """Path (as in error messages: a.b[1].c) of the first key held twice, outermost first."""
    if isinstance(value, _Object):
        if value.duplicate is not None:
            return where + value.duplicate
        items = ((f"{where}{key}.", item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{where[:-1]}[{i}].", item) for i, item in enumerate(value))
    else:
        return None
    for prefix, item in items:
        found = _first_duplicate(item, prefix)
        if found is not None:
            return found
    return None


def load_config_json(path: str | os.PathLike) -> dict:
    """config.json decoded, refusing what json.loads would accept silently: a key twice in
    one object (json.loads keeps the last value; other readers keep the first)."""
    path = Path(path)
    raw = _read_bytes(path)
    try:
        obj = json.loads(raw.decode("utf-8"), object_pairs_hook=_keep_duplicates)
    except UnicodeDecodeError as err:
        raise ModelDirError(f"{path}: (file): not valid UTF-8 at byte {err.start} (expected UTF-8 JSON)") from None
    except RecursionError:
        raise ModelDirError(f"{path}: (file): JSON nested too deeply (expected a config object)") from None
    except ValueError as err:
        raise ModelDirError(f"{path}: (file): not valid JSON: {err}") from None
    duplicate = _first_duplicate(obj)
    if duplicate is not None:
        raise ModelDirError(f"{path}: {duplicate}: duplicate key (expected each key once per object)")
    return obj


def read_config(path: str | os.PathLike) -> ModelConfig:
    """Read and validate a config.json file (its own checksum included, when it has one)."""
    return parse_config(load_config_json(path), str(path))


# ----------------------------------------------------------------------------- tensor table
def _attention_linears(prefix: str) -> list[str]:
    return [f"{prefix}.{p}" for p in ("q", "k", "v", "o")]


def quantized_linears(config: ModelConfig) -> list[str]:
    """Names (without .weight) of the linears that int8 export quantizes: every linear
    inside an encoder or decoder layer, then the proposal heads' fc1/fc2, in model order.
    The tied embedding is not among them (quantization.embedding)."""
    names: list[str] = []
    for i in range(len(config.encoder_layers)):
        names += _attention_linears(f"encoder.layers.{i}.self_attn")
        names += [f"encoder.layers.{i}.ffn.fc1", f"encoder.layers.{i}.ffn.fc2"]
    for i in range(len(config.decoder_layers)):
        layer = f"decoder.layers.{i}"
        if config.decoder_self == "ssru":
            names += [f"{layer}.ssru.w", f"{layer}.ssru.wf"]
        else:
            names += _attention_linears(f"{layer}.self_attn")
        names += _attention_linears(f"{layer}.cross_attn")
        names += [f"{layer}.ffn.fc1", f"{layer}.ffn.fc2"]
    for i in range(config.heads.count if config.heads else 0):
        names += [f"heads.{i}.fc1", f"heads.{i}.fc2"]
    return names


def expected_tensors(config: ModelConfig) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """name -> (dtype, shape) of every tensor model.safetensors must hold for this config,
    and nothing else: the tensor table of export/FORMAT.md, in state_dict order."""
    d, hd = config.d_model, config.head_dim
    quantized = config.quantization is not None
    table: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}

    def linear(name: str, n_out: int, n_in: int, bias: bool = True) -> None:
        if quantized:  # int8 [out, in] plus one float32 scale per output row
            table[f"{name}.weight"] = (I8, (n_out, n_in))
            table[f"{name}.weight_scale"] = (F32, (n_out,))
        else:
            table[f"{name}.weight"] = (F32, (n_out, n_in))
        if bias:
            table[f"{name}.bias"] = (F32, (n_out,))

    def layer_norm(name: str) -> None:
        table[f"{name}.weight"] = (F32, (d,))
        table[f"{name}.bias"] = (F32, (d,))

    def attention(name: str, heads: int) -> None:
        for p in ("q", "k", "v"):
            linear(f"{name}.{p}", heads * hd, d)
        linear(f"{name}.o", d, heads * hd)

    def ffn(name: str, inner: int) -> None:
        linear(f"{name}.fc1", inner, d)
        linear(f"{name}.fc2", d, inner)

    if quantized and config.quantization.embedding == QUANT_EMBEDDING:
        table["embed.weight"] = (I8, (config.vocab_size, d))
        table[EMBED_SCALE] = (F32, (config.vocab_size,))
    else:
        table["embed.weight"] = (F32, (config.vocab_size, d))
    table["output.bias"] = (F32, (config.vocab_size,))
    for i, shape in enumerate(config.encoder_layers):
        layer = f"encoder.layers.{i}"
        attention(f"{layer}.self_attn", shape.heads)
        layer_norm(f"{layer}.ln_attn")
        ffn(f"{layer}.ffn", shape.ffn)
        layer_norm(f"{layer}.ln_ffn")
    if config.norm == "pre" and config.encoder_shared is None:
        layer_norm("encoder.final_ln")
    for i, shape in enumerate(config.decoder_layers):
        layer = f"decoder.layers.{i}"
        if config.decoder_self == "ssru":
            linear(f"{layer}.ssru.w", d, d, bias=False)
            linear(f"{layer}.ssru.wf", d, d)
        else:
            attention(f"{layer}.self_attn", shape.heads)
        layer_norm(f"{layer}.ln_self")
        attention(f"{layer}.cross_attn", shape.heads)
        layer_norm(f"{layer}.ln_cross")
        ffn(f"{layer}.ffn", shape.ffn)
        layer_norm(f"{layer}.ln_ffn")
    if config.norm == "pre":
        layer_norm("decoder.final_ln")
    for i in range(config.heads.count if config.heads else 0):
        linear(f"heads.{i}.fc1", config.heads.hidden, d)
        linear(f"heads.{i}.fc2", d, config.heads.hidden)
    return table


def _describe(config: ModelConfig) -> str:
    heads = f"{config.heads.count} of hidden {config.heads.hidden}" if config.heads else "none"
    return (f"arch {config.arch}, decoder.self {config.decoder_self}, norm {config.norm}, "
            f"quantization {'int8' if config.quantization else 'null'}, heads {heads}")


def _shape_source(name: str, config: ModelConfig) -> str:
    """Which config.json fields a tensor's expected shape comes from, where a mismatch
    most likely means heads written for another model (or another heads field)."""
    if name.startswith("heads.") and config.heads:
        return f" from config.json heads.hidden {config.heads.hidden} and d_model {config.d_model}"
    parts = name.split(".")
    if len(parts) > 3 and parts[0] in ("encoder", "decoder") and parts[1] == "layers":
        # Per-layer sizes (pruned models): name the field the wrong dimension comes from.
        i = int(parts[2])
        shape = (config.encoder_layers if parts[0] == "encoder" else config.decoder_layers)[i]
        if parts[3] == "ffn":
            return f" from config.json {parts[0]}.layers[{i}].ffn {shape.ffn}"
        if parts[3].endswith("attn"):
            return (f" from config.json {parts[0]}.layers[{i}].heads {shape.heads} x head_dim "
                    f"{config.head_dim}")
    return ""


def check_tensors(header: safetensors_io.Header, config: ModelConfig) -> None:
    """The file holds exactly expected_tensors(config), each with its dtype and shape."""
    where = header.path
    expected = expected_tensors(config)
    embed = header.tensors.get("embed.weight")
    if config.quantization is None and embed is not None and embed.dtype == safetensors_io.dtype_code(I8):
        # Named before the stray embed.weight_scale that would otherwise be reported first.
        raise ModelDirError(f"{where}: embed.weight: dtype {embed.dtype} (expected F32: config.json quantization "
                            f"is null, and only int8 models store an int8 embedding)")
    missing = [name for name in expected if name not in header.tensors]
    if missing:
        dtype, shape = expected[missing[0]]
        raise ModelDirError(f"{where}: {missing[0]}: missing tensor (expected {safetensors_io.dtype_code(dtype)} "
                            f"{list(shape)}; {len(missing)} tensor(s) missing in all)")
    unexpected = [name for name in header.tensors if name not in expected]
    if unexpected:
        raise ModelDirError(f"{where}: {unexpected[0]}: unexpected tensor (expected only the tensors of "
                            f"{_describe(config)}; {len(unexpected)} unexpected in all)")
    for name, (dtype, shape) in expected.items():
        info = header.tensors[name]
        code = safetensors_io.dtype_code(dtype)
        if info.dtype != code:
            raise ModelDirError(f"{where}: {name}: dtype {info.dtype} (expected {code})")
        if info.shape != shape:
            raise ModelDirError(f"{where}: {name}: shape {list(info.shape)} (expected {list(shape)}"
                                f"{_shape_source(name, config)})")


def check_values(tensors: dict[str, np.ndarray], where: Any) -> None:
    """Every float32 tensor finite and within +-MAX_ABS_WEIGHT; every int8 row scale in
    (0, MAX_WEIGHT_SCALE]. About 1 ms for a 15 MB model: worth it at every load."""
    for name, array in tensors.items():
        if array.dtype != F32 or array.size == 0:
            continue
        is_scale = name.endswith(".weight_scale")
        # min and max propagate NaN, so two passes without a temporary catch NaN, Inf and
        # out-of-range values alike (every comparison with NaN is false).
        low, high = array.min(), array.max()
        if (low > 0 if is_scale else low >= -MAX_ABS_WEIGHT) and high <= (MAX_WEIGHT_SCALE if is_scale else MAX_ABS_WEIGHT):
            continue
        if is_scale:
            ok, expected = (array > 0) & (array <= MAX_WEIGHT_SCALE), f"finite scales > 0 and <= {MAX_WEIGHT_SCALE:.4g}"
        else:
            ok, expected = np.abs(array) <= MAX_ABS_WEIGHT, f"finite values within +-{MAX_ABS_WEIGHT:g}"
        bad = ~ok
        first = np.unravel_index(int(np.argmax(bad)), array.shape)
        raise ModelDirError(f"{where}: {name}: {str(array[first])} at {list(map(int, first))}, {int(bad.sum())} such "
                            f"value(s) in all (expected {expected})")


# ----------------------------------------------------------------------------- sentencepiece
def check_spm(spm_path: Path, config: ModelConfig, config_path: Path) -> None:
    """spm.model has vocab_size pieces, the special ids of config.json "tokens", and the
    content of config.json checksum."spm.model" when there is one."""
    data = _read_bytes(spm_path)
    if sentencepiece is not None:  # a run-time dependency; absent only in minimal environments
        _check_spm_pieces(data, spm_path, config, config_path)
    check_content(data, spm_path, SPM_FILE, config, config_path)


def _check_spm_pieces(data: bytes, spm_path: Path, config: ModelConfig, config_path: Path) -> None:
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except Exception as err:  # noqa: BLE001 - sentencepiece raises assorted types for a bad model
        raise ModelDirError(f"{spm_path}: (file): not a sentencepiece model ({err})") from None
    pieces = sp.GetPieceSize()
    if pieces != config.vocab_size:
        raise ModelDirError(f"{spm_path}: vocabulary size: {pieces} pieces "
                            f"(expected vocab_size {config.vocab_size} of {config_path})")
    special = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    for name, got in special.items():
        if got != config.tokens[name]:
            raise ModelDirError(f"{spm_path}: {name} id: {got} (expected tokens.{name} = "
                                f"{config.tokens[name]} of {config_path})")
    if "mask" not in config.tokens:
        return
    mask = config.tokens["mask"]
    if sp.IdToPiece(mask) != MASK_PIECE:
        raise ModelDirError(f"{spm_path}: mask id: piece {mask} is {sp.IdToPiece(mask)!r} "
                            f"(expected {MASK_PIECE!r}, as tokens.mask = {mask} of {config_path})")


def _load_spm(data: bytes, path: Path):
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except Exception as err:  # noqa: BLE001 - sentencepiece raises assorted types for a bad model
        raise ModelDirError(f"{path}: (file): not a sentencepiece model ({err})") from None
    return sp


def read_vocab_json(path: Path, vocab_size: Optional[int] = None, where: Any = None) -> dict[str, int]:
    """vocab.json (piece -> id) refused unless its ids are exactly 0 .. vocab_size - 1 once
    each (the rows of the model's embedding); `where` names the config giving vocab_size."""
    data = _read_bytes(path)
    try:
        vocab = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ModelDirError(f"{path}: (file): not valid UTF-8 JSON ({err})") from None
    if not isinstance(vocab, dict) or not vocab:
        raise ModelDirError(f"{path}: (top level): {_show(vocab)} (expected a non-empty object piece -> id)")
    size = len(vocab) if vocab_size is None else vocab_size
    seen: dict[int, str] = {}
    for piece, tid in vocab.items():
        if not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid < size:
            raise ModelDirError(f"{path}: {piece}: id {_show(tid)} (expected an integer from 0 to {size - 1}"
                                + (f", vocab_size of {where})" if where else ")"))
        if tid in seen:
            raise ModelDirError(f"{path}: {piece}: id {tid} is also {seen[tid]!r} (expected one piece per id)")
        seen[tid] = piece
    if len(seen) != size:
        missing = next(i for i in range(size) if i not in seen)
        raise ModelDirError(f"{path}: (ids): no piece has id {missing} (expected ids 0 to {size - 1}"
                            + (f", vocab_size of {where})" if where else ")"))
    return vocab


def check_marian_vocab(vocab_path: Path, spm_paths: tuple[Path, Path], tokens: dict[str, int],
                       vocab_size: int, where: Any) -> dict[str, int]:
    """vocab.json against the model (ids 0..vocab_size-1, eos and unk pieces at tokens.eos
    and tokens.unk) and against the two sentencepiece models: each must have at least
    MIN_VOCAB_COVERAGE of its pieces in vocab.json. Returns the vocabulary."""
    vocab = read_vocab_json(vocab_path, vocab_size, where)
    for name, piece in (("eos", MARIAN_EOS_PIECE), ("unk", MARIAN_UNK_PIECE)):
        if vocab.get(piece) != tokens[name]:
            raise ModelDirError(f"{vocab_path}: {piece}: id {_show(vocab.get(piece))} (expected tokens.{name} = "
                                f"{tokens[name]} of {where})")
    if sentencepiece is None:  # pragma: no cover - minimal environments
        return vocab
    for spm_path in spm_paths:
        sp = _load_spm(_read_bytes(spm_path), spm_path)
        pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())
                  if not (sp.IsControl(i) or sp.IsUnknown(i))]
        found = sum(piece in vocab for piece in pieces)
        if pieces and found < MIN_VOCAB_COVERAGE * len(pieces):
            raise ModelDirError(f"{vocab_path}: (pieces): holds {found} of the {len(pieces)} pieces of {spm_path} "
                                f"(expected at least {MIN_VOCAB_COVERAGE:.0%}: the vocabulary these sentencepiece "
                                f"models were built with)")
    return vocab


def check_tokenizer(path: Path, config: ModelConfig, config_path: Path) -> dict[str, Path]:
    """The tokenizer files of config.json "tokenizer" in directory `path`, validated and
    checked against config.json checksum; returns file name -> path."""
    files = {name: path / name for name in TOKENIZER_FILES[config.tokenizer]}
    for name, file in files.items():
        _require_file(file, f"the {name} of {config_path} (tokenizer {json.dumps(config.tokenizer)})")
    if config.tokenizer == "spm":
        check_spm(files[SPM_FILE], config, config_path)
        return files
    check_marian_vocab(files[VOCAB_FILE], (files[SOURCE_SPM_FILE], files[TARGET_SPM_FILE]), config.tokens,
                       config.vocab_size, config_path)
    for name, file in files.items():
        check_content(_read_bytes(file), file, name, config, config_path)
    return files


# ----------------------------------------------------------------------------- directory
def _require_file(path: Path, expected: str) -> None:
    if not path.is_file():
        what = "not a regular file" if path.exists() else "missing"
        raise ModelDirError(f"{path}: (file): {what} (expected {expected})")


def _read_bytes(path: Path) -> bytes:
    _require_file(path, "a file of the model directory")
    try:
        return path.read_bytes()
    except OSError as err:
        raise ModelDirError(f"{path}: (file): unreadable ({err.strerror})") from None


@dataclass(frozen=True)
class ModelDir:
    """A validated model directory; `tensors` are read-only views of a memory map."""

    path: Path
    config: ModelConfig
    tensors: dict[str, np.ndarray]
    spm_path: Optional[Path]  # the joint spm.model; None for tokenizer "marian" (see tokenizer_files)
    tokenizer_files: dict[str, Path] = dataclasses.field(default_factory=dict)  # file name -> path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ModelDir":
        path = Path(path)
        if not path.is_dir():
            what = "not a directory" if path.exists() else "no such directory"
            raise ModelDirError(f"{path}: (directory): {what} "
                                f"(expected a model directory with {CONFIG_FILE}, {WEIGHTS_FILE}, {SPM_FILE})")
        config_path = path / CONFIG_FILE
        try:
            config = read_config(config_path)
        except ModelDirError as err:
            # A Hugging Face, CTranslate2 or Marian folder fails here: say which command converts it.
            foreign = convert_first(path)
            if foreign is None:
                raise
            raise ModelDirError(foreign) from err

        weights_path = path / WEIGHTS_FILE
        _require_file(weights_path, f"the weights of {config_path}")
        try:
            header = safetensors_io.read_header(weights_path)
            check_tensors(header, config)
            mapping = safetensors_io.map_file(header)
            # Hashes the very mapping the tensors view, so what is checked is what runs.
            check_content(mapping, weights_path, WEIGHTS_FILE, config, config_path)
            tensors = safetensors_io.map_tensors(header, mapping)
            check_values(tensors, weights_path)
        except ModelDirError:
            raise
        except ValueError as err:  # safetensors_io's messages already name file and field
            raise ModelDirError(str(err)) from None
        except OSError as err:
            raise ModelDirError(f"{weights_path}: (file): unreadable ({err.strerror})") from None

        files = check_tokenizer(path, config, config_path)
        return cls(path, config, tensors, files.get(SPM_FILE), files)


# Config fields that change what an encoder computes from the same tensors.
_ENCODER_FIELDS = ("d_model", "head_dim", "norm", "activation", "layer_norm_eps", "positions", "max_source_len")
# Tensors outside encoder.* that it computes from: the token embedding feeding its first
# layer (tied with the decoder's input and output layer, so a host retrained or quantised
# on that side alone changes the encoder output too). Named, so an embedding that differs
# is refused by the digest itself, not by whatever else happens to differ with it.
ENCODER_INPUT_TENSORS = (EMBED_WEIGHT, EMBED_SCALE)


def encoder_digest(model: "ModelDir | str | os.PathLike") -> str:
    """"sha256:..." naming what a model's encoder computes: its tensors (encoder.* and
    ENCODER_INPUT_TENSORS, the embedding that feeds it), the int8 input scales of its linears and the config
    fields that shape it. A shared-encoder model (config.json encoder.shared) records
    its host's, and is refused next to a model whose encoder differs in any of these."""
    model = model if isinstance(model, ModelDir) else ModelDir.load(model)
    config = model.config
    if config.encoder_shared is not None:
        raise ModelDirError(f"{model.path / CONFIG_FILE}: encoder.shared: this model has no encoder of its own "
                            f"(it reads another model's), so no model can share it")
    quant = config.quantization
    described = {name: getattr(config, name) for name in _ENCODER_FIELDS}
    described["layers"] = [dataclasses.astuple(layer) for layer in config.encoder_layers]
    described["scales"] = sorted((name, scale) for name, scale in (quant.activation_scales if quant else {}).items()
                                 if name.startswith("encoder."))
    h = hashlib.sha256(json.dumps(described, sort_keys=True).encode())
    for name in sorted(model.tensors):
        if name.startswith("encoder.") or name in ENCODER_INPUT_TENSORS:
            array = np.ascontiguousarray(model.tensors[name])
            h.update(f"{name}:{array.dtype.str}:{list(array.shape)}".encode())
            h.update(memoryview(array).cast("B"))
    return "sha256:" + h.hexdigest()


def check_shared_encoder(host: ModelDir, model: ModelDir, role: str) -> None:
    """`model` (a drafter or BiLD little model, `role` names it) must read `host`'s encoder
    output when it has no encoder of its own: same d_model and vocabulary, and its
    config.json encoder.shared the digest of host's encoder. A model with its own encoder
    passes (it encodes the sources itself)."""
    where = model.path / CONFIG_FILE
    shared = model.config.encoder_shared
    if shared is None:
        return
    for field in ("d_model", "vocab_size"):
        mine, theirs = getattr(model.config, field), getattr(host.config, field)
        if mine != theirs:
            raise ModelDirError(f"{where}: {field}: {mine} differs from {theirs} of the model whose encoder this "
                                f"{role} reads ({host.path})")
    actual = encoder_digest(host)
    if shared != actual:
        raise ModelDirError(f"{where}: encoder.shared: {shared} is not the encoder of {host.path} ({actual}); "
                            f"this {role} was trained over another model's encoder (export.train_shared)")
