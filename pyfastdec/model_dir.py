"""Inference-side reader of a pyfastdec model directory (export/FORMAT.md, version 1).

A model directory holds config.json, model.safetensors and spm.model. `ModelDir.load`
validates all three against the format before anything uses them, so an engine never
sees a directory it does not understand: every refusal is a ModelDirError whose message
reads "<file>: <field or tensor>: what is wrong (expected ...)".

Only numpy, sentencepiece and the standard library are used (pyfastdec's run-time
dependencies); the training-side writer and reader live in export/writer.py. The tensor
table is computed from the config alone (`expected_tensors`), not from a torch model,
and must agree with export.modeling's state_dict (tests/test_model_dir.py checks it).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pyfastdec import safetensors_io

try:  # a run-time dependency, but the reader stays importable without it
    import sentencepiece
except ImportError:  # pragma: no cover - exercised only in minimal environments
    sentencepiece = None

CONFIG_FILE, WEIGHTS_FILE, SPM_FILE = "config.json", "model.safetensors", "spm.model"
FORMAT_NAME, FORMAT_VERSION = "fastdec", 1
ARCHS = ("transformer", "nat-drafter")
DECODER_SELF_KINDS = ("attention", "ssru")
NORMS = ("pre", "post")
ACTIVATIONS = ("relu",)
TOKEN_NAMES = ("pad", "unk", "bos", "eos", "mask")
MIN_SOURCE_LEN = 2  # max_source_len counts EOS: a shorter one holds no source token
MASK_PIECE = "<mask>"  # the drafter placeholder's piece in spm.model (export/vocab.py)

CONFIG_FIELDS = ("format", "version", "arch", "d_model", "head_dim", "vocab_size", "norm", "activation",
                 "encoder", "decoder", "tokens", "max_source_len", "block_size", "quantization")
QUANT_WEIGHTS, QUANT_WEIGHT_SCALE, QUANT_ACTIVATIONS = "int8", "per_output_channel", "int8_static_per_tensor"

F32 = np.dtype("<f4")
I8 = np.dtype("i1")


class ModelDirError(ValueError):
    """A model directory (or one of its files) that this reader refuses."""


# ----------------------------------------------------------------------------- config
@dataclass(frozen=True)
class LayerShape:
    heads: int
    ffn: int


@dataclass(frozen=True)
class Quantization:
    """config.json "quantization": int8 weights with per-row scales, static int8 inputs."""

    weights: str
    weight_scale: str
    activations: str
    activation_scales: dict[str, float]  # quantized linear name -> input multiplier m
    calibration: Optional[dict]          # how the multipliers were measured (informational)


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

    def layers(self, obj: dict, prefix: str) -> tuple[LayerShape, ...]:
        expected = 'a non-empty list of {"heads": h, "ffn": f}'
        value = self.field(obj, "layers", prefix, expected)
        if not isinstance(value, list) or not value:
            raise self.fail(prefix + "layers", f"{_show(value)} (expected {expected})")
        out = []
        for i, layer in enumerate(value):
            where = f"{prefix}layers[{i}]"
            if not isinstance(layer, dict):
                raise self.fail(where, f"{_show(layer)} (expected {{\"heads\": h, \"ffn\": f}})")
            self.only(layer, ("heads", "ffn"), where + ".")
            out.append(LayerShape(self.integer(layer, "heads", where + "."), self.integer(layer, "ffn", where + ".")))
        return tuple(out)


def _parse_tokens(r: _ConfigReader, obj: dict, vocab_size: int) -> dict[str, int]:
    tokens = r.mapping(obj, "tokens", "", "an object with " + ", ".join(TOKEN_NAMES))
    r.only(tokens, TOKEN_NAMES, "tokens.")
    ids: dict[str, int] = {}
    for name in TOKEN_NAMES:
        tid = r.integer(tokens, name, "tokens.", minimum=0)
        if tid >= vocab_size:
            raise r.fail(f"tokens.{name}", f"id {tid} (expected < vocab_size {vocab_size})")
        for other, other_id in ids.items():
            if other_id == tid:
                raise r.fail(f"tokens.{name}", f"id {tid} is also tokens.{other} (expected distinct ids)")
        ids[name] = tid
    return ids


def _parse_quantization(r: _ConfigReader, value: Any, linears: list[str]) -> Quantization:
    if not isinstance(value, dict):
        raise r.fail("quantization", f"{_show(value)} (expected null or an int8 quantization object)")
    q = "quantization."
    r.only(value, ("weights", "weight_scale", "activations", "activation_scales", "calibration"), q)
    weights = r.choice(value, "weights", q, (QUANT_WEIGHTS,))
    weight_scale = r.choice(value, "weight_scale", q, (QUANT_WEIGHT_SCALE,))
    activations = r.choice(value, "activations", q, (QUANT_ACTIVATIONS,))
    scales = r.mapping(value, "activation_scales", q, "an object: quantized linear -> input multiplier")
    wanted = set(linears)
    for name in scales:
        if name not in wanted:
            raise r.fail(f"{q}activation_scales.{name}", "not a quantized linear of this config "
                         f"(expected names like {linears[0]})")
    checked: dict[str, float] = {}
    for name in linears:  # in model order, so the first missing one is reported
        if name not in scales:
            raise r.fail(f"{q}activation_scales.{name}", "missing (expected a multiplier for every quantized linear)")
        m = scales[name]
        if not isinstance(m, (int, float)) or isinstance(m, bool) or not math.isfinite(m) or m <= 0:
            raise r.fail(f"{q}activation_scales.{name}", f"{_show(m)} (expected a finite number > 0)")
        checked[name] = float(m)
    calibration = value.get("calibration")
    if calibration is not None and not isinstance(calibration, dict):
        raise r.fail(f"{q}calibration", f"{_show(calibration)} (expected an object or null)")
    return Quantization(weights, weight_scale, activations, checked, calibration)


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
    if d_model % 2:
        raise r.fail("d_model", f"{d_model} (expected an even width: positions interleave sin/cos pairs)")
    head_dim = r.integer(obj, "head_dim", "")
    vocab_size = r.integer(obj, "vocab_size", "")
    norm = r.choice(obj, "norm", "", NORMS)
    activation = r.choice(obj, "activation", "", ACTIVATIONS)

    encoder = r.mapping(obj, "encoder", "", 'an object {"layers": [...]}')
    r.only(encoder, ("layers",), "encoder.")
    encoder_layers = r.layers(encoder, "encoder.")
    decoder = r.mapping(obj, "decoder", "", 'an object {"self": ..., "layers": [...]}')
    r.only(decoder, ("self", "layers"), "decoder.")
    decoder_self = r.choice(decoder, "self", "decoder.", DECODER_SELF_KINDS)
    decoder_layers = r.layers(decoder, "decoder.")

    tokens = _parse_tokens(r, obj, vocab_size)
    max_source_len = r.integer(obj, "max_source_len", "")
    if max_source_len < MIN_SOURCE_LEN:
        raise r.fail("max_source_len", f"{max_source_len} (expected an integer >= {MIN_SOURCE_LEN}: room for a "
                                       f"source token and EOS)")

    if arch == "nat-drafter":
        block_size = r.integer(obj, "block_size", "")
        if decoder_self != "attention":
            # The drafter's mask block attends bidirectionally, which a recurrence cannot.
            raise r.fail("decoder.self", f"{_show(decoder_self)} (expected \"attention\" for arch \"nat-drafter\")")
    else:
        block_size = obj.get("block_size")
        if block_size is not None:
            raise r.fail("block_size", f"{_show(block_size)} (expected no block_size: only arch \"nat-drafter\" has one)")

    quant_value = r.field(obj, "quantization", "", "null or an int8 quantization object")
    config = ModelConfig(arch, d_model, head_dim, vocab_size, norm, activation, encoder_layers, decoder_layers,
                         decoder_self, tokens, max_source_len, block_size, quantization=None)
    if quant_value is None:
        return config
    # Which linears need an activation scale depends on the shapes parsed above.
    return dataclasses.replace(config, quantization=_parse_quantization(r, quant_value, quantized_linears(config)))


def read_config(path: str | os.PathLike) -> ModelConfig:
    """Read and validate a config.json file."""
    path = Path(path)
    raw = _read_bytes(path)
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ModelDirError(f"{path}: (file): not valid UTF-8 at byte {err.start} (expected UTF-8 JSON)") from None
    except RecursionError:
        raise ModelDirError(f"{path}: (file): JSON nested too deeply (expected a config object)") from None
    except ValueError as err:
        raise ModelDirError(f"{path}: (file): not valid JSON: {err}") from None
    return parse_config(obj, str(path))


# ----------------------------------------------------------------------------- tensor table
def _attention_linears(prefix: str) -> list[str]:
    return [f"{prefix}.{p}" for p in ("q", "k", "v", "o")]


def quantized_linears(config: ModelConfig) -> list[str]:
    """Names (without .weight) of the linears that int8 export quantizes: every linear
    inside an encoder or decoder layer, in model order. The tied embedding stays float."""
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

    table["embed.weight"] = (F32, (config.vocab_size, d))
    table["output.bias"] = (F32, (config.vocab_size,))
    for i, shape in enumerate(config.encoder_layers):
        layer = f"encoder.layers.{i}"
        attention(f"{layer}.self_attn", shape.heads)
        layer_norm(f"{layer}.ln_attn")
        ffn(f"{layer}.ffn", shape.ffn)
        layer_norm(f"{layer}.ln_ffn")
    if config.norm == "pre":
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
    return table


def _describe(config: ModelConfig) -> str:
    return (f"arch {config.arch}, decoder.self {config.decoder_self}, norm {config.norm}, "
            f"quantization {'int8' if config.quantization else 'null'}")


def check_tensors(header: safetensors_io.Header, config: ModelConfig) -> None:
    """The file holds exactly expected_tensors(config), each with its dtype and shape."""
    where = header.path
    expected = expected_tensors(config)
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
            raise ModelDirError(f"{where}: {name}: shape {list(info.shape)} (expected {list(shape)})")


# ----------------------------------------------------------------------------- sentencepiece
def check_spm(spm_path: Path, config: ModelConfig, config_path: Path) -> None:
    """spm.model has vocab_size pieces and the special ids of config.json "tokens"."""
    if sentencepiece is None:  # pragma: no cover - sentencepiece is a run-time dependency
        return
    sp = sentencepiece.SentencePieceProcessor()
    try:
        sp.Load(str(spm_path))
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
    mask = config.tokens["mask"]
    if sp.IdToPiece(mask) != MASK_PIECE:
        raise ModelDirError(f"{spm_path}: mask id: piece {mask} is {sp.IdToPiece(mask)!r} "
                            f"(expected {MASK_PIECE!r}, as tokens.mask = {mask} of {config_path})")


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
    spm_path: Path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ModelDir":
        path = Path(path)
        if not path.is_dir():
            what = "not a directory" if path.exists() else "no such directory"
            raise ModelDirError(f"{path}: (directory): {what} "
                                f"(expected a model directory with {CONFIG_FILE}, {WEIGHTS_FILE}, {SPM_FILE})")
        config_path = path / CONFIG_FILE
        config = read_config(config_path)

        weights_path = path / WEIGHTS_FILE
        _require_file(weights_path, f"the weights of {config_path}")
        try:
            header = safetensors_io.read_header(weights_path)
            check_tensors(header, config)
            tensors = safetensors_io.map_tensors(header)
        except ModelDirError:
            raise
        except ValueError as err:  # safetensors_io's messages already name file and field
            raise ModelDirError(str(err)) from None
        except OSError as err:
            raise ModelDirError(f"{weights_path}: (file): unreadable ({err.strerror})") from None

        spm_path = path / SPM_FILE
        _require_file(spm_path, f"the sentencepiece model of {config_path}")
        check_spm(spm_path, config, config_path)
        return cls(path, config, tensors, spm_path)
