"""The reader of config.json: `read_config` turns a file into a validated ModelConfig
(config_schema.py) or refuses it with a ModelDirError naming the field. Beyond the
fields' values it refuses what json.loads would accept silently (a key given twice) and,
when the file has a "checksum", a config.json changed since it was written.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from pyfastdec.model_dir.checksums import (CHECKSUM_CONFIG, DIGEST, checksum_keys, checksum_mismatch,
                                           config_digest)
from pyfastdec.model_dir.config_schema import (ACTIVATIONS, ARCHS, CONFIG_FIELDS, DECODER_SELF_KINDS,
                                               DECODING_FIELDS, DEFAULT_LAYER_NORM_EPS, FORMAT_NAME, FORMAT_VERSION,
                                               MAX_ACTIVATION_SCALE, MAX_BILD_ROLLBACK, MAX_LAYER_NORM_EPS,
                                               MIN_ACTIVATION_SCALE, MIN_LAYER_NORM_EPS, MIN_SOURCE_LEN, NORMS,
                                               OPTIONAL_TOKENS, POSITIONS, QUANT_ACTIVATIONS,
                                               QUANT_DYNAMIC_ACTIVATIONS, QUANT_EMBEDDING, QUANT_WEIGHT_SCALE,
                                               QUANT_WEIGHTS, TASKS, TOKEN_NAMES, LayerShape, ModelConfig, ProposalHeads,
                                               Quantization, is_edit_margin)
from pyfastdec.model_dir.errors import ModelDirError, read_bytes, show as _show
from pyfastdec.model_dir.layout import CONFIG_FILE, SHORTLIST_FILE, TOKENIZERS
from pyfastdec.model_dir.tensor_schema import quantized_linears
from pyfastdec.size_limits import MAX_BLOCK


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
    r.only(value, ("count", "hidden", "verifier"), "heads.")
    verifier = value.get("verifier")
    if verifier is not None and (not isinstance(verifier, str) or not DIGEST.fullmatch(verifier)):
        raise r.fail("heads.verifier", f"{_show(verifier)} (expected \"sha256:\" and 64 hex digits: the digest "
                                       f"of the model the heads were trained for)")
    return ProposalHeads(r.integer(value, "count", "heads."), r.integer(value, "hidden", "heads."), verifier)


def _parse_checksum(r: _ConfigReader, value: Any, keys: tuple[str, ...]) -> dict[str, str]:
    expected = "an object with " + ", ".join(f'"{k}": "sha256:<64 hex digits>"' for k in keys)
    if not isinstance(value, dict):
        raise r.fail("checksum", f"{_show(value)} (expected {expected})")
    r.only(value, keys + (SHORTLIST_FILE,), "checksum.")
    for key in keys + ((SHORTLIST_FILE,) if SHORTLIST_FILE in value else ()):
        digest = r.field(value, key, "checksum.", '"sha256:<64 hex digits>"')
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise r.fail(f"checksum.{key}", f"{_show(digest)} (expected \"sha256:<64 lowercase hex digits>\")")
    return dict(value)


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
        if not isinstance(encoder_shared, str) or not DIGEST.fullmatch(encoder_shared):
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
                         bild=_parse_bild(r, obj, arch, encoder_shared is not None),
                         description=_parse_description(r, obj), task=_parse_task(r, obj))
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


def _parse_description(r: _ConfigReader, obj: dict) -> Optional[str]:
    value = obj.get("description")
    if value is not None and (not isinstance(value, str) or not value.strip() or "\n" in value):
        raise r.fail("description", f"{_show(value)} (expected one non-empty line of text)")
    return value


def _parse_task(r: _ConfigReader, obj: dict) -> Optional[str]:
    value = obj.get("task")
    if value is not None and value not in TASKS:
        raise r.fail("task", f"{_show(value)} (expected {' or '.join(map(json.dumps, TASKS))})")
    return value


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
    raw = read_bytes(path)
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
