"""What model.safetensors must hold for a config (export/FORMAT.md, the tensor table):
`expected_tensors` computes the table from the config alone, not from a torch model (it
must agree with export.modeling's state_dict: tests/test_model_dir.py checks it);
`check_tensors` holds a file's header to it and `check_values` bounds the weights.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pyfastdec.model_dir import safetensors_io
from pyfastdec.model_dir.config_schema import QUANT_EMBEDDING, ModelConfig
from pyfastdec.model_dir.errors import ModelDirError

EMBED_WEIGHT, EMBED_SCALE = "embed.weight", "embed.weight_scale"

F32 = np.dtype("<f4")
I8 = np.dtype("i1")

# Magnitude bounds that no trained model comes near but a damaged file easily exceeds
# (export/FORMAT.md, "Validation at load"). Adam moves a weight by about lr per step, so
# even 1e6 steps at lr 1e-3 stay under 1e3; the shipped models' largest |w| is 1.5.
MAX_ABS_WEIGHT = 1e4
# An int8 row dequantizes to q * weight_scale with |q| <= 127, bounded like float weights.
MAX_WEIGHT_SCALE = MAX_ABS_WEIGHT / 127


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
    (0, MAX_WEIGHT_SCALE]. Cheap against loading (bench/README.md, "Small costs outside
    the decoder"), so it runs at every load."""
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
