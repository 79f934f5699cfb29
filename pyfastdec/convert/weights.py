"""Shared by the converters that write another engine's model: every tensor of a model
directory as float32 (int8 ones dequantised), and pruned layers padded to one size per
stack for engines that have one head count (CTranslate2, Marian) or one FFN size
(Marian) per stack."""
from __future__ import annotations

import numpy as np

from pyfastdec.model_dir.int8_rows import dequantize_rows, int8_embedding_rows
from pyfastdec.model_dir import EMBED_SCALE, ModelConfig, ModelDir, quantized_linears


def float_weights(model: ModelDir) -> dict[str, np.ndarray]:
    """All tensors as float32 arrays; int8 linears dequantised to q * weight_scale[row].
    The tied embedding of an int8 model is the int8 rows our engine reads, stored so or
    quantised from float32 ones (pyfastdec/model_dir/int8_rows.py): both forms convert alike."""
    tensors = {name: np.asarray(t) for name, t in model.tensors.items() if not name.endswith(".weight_scale")}
    if model.config.quantization is not None:
        for linear in quantized_linears(model.config):
            q = model.tensors[f"{linear}.weight"].astype(np.float32)
            tensors[f"{linear}.weight"] = q * model.tensors[f"{linear}.weight_scale"][:, None]
        embed = model.tensors["embed.weight"]
        tensors["embed.weight"] = (dequantize_rows(embed, model.tensors[EMBED_SCALE]) if embed.dtype == np.int8
                                   else int8_embedding_rows(embed))
    # Copies, never views: the tensors are read-only views of a memory map, and CTranslate2's
    # spec.optimize quantises in place.
    return {name: np.array(t, dtype=np.float32, order="C", copy=True) for name, t in tensors.items()}



def pad_layers(w: dict[str, np.ndarray], config: ModelConfig, enc_heads: int, dec_heads: int,
               enc_ffn: int | None = None, dec_ffn: int | None = None) -> list[str]:
    """Pad pruned layers up to one size per stack, for engines with one head count (and,
    Marian, one FFN size) per stack. A zero head (zero q/k/v rows and biases, zero o
    columns) has values 0, so its context is 0; a zero FFN unit (zero fc1 row and bias,
    zero fc2 column) has act(0) = 0 for relu and swish: each padded layer computes exactly
    what it did, the other engine doing the padding's work. Returns the layers padded."""
    hd, padded = config.head_dim, []

    def grow(name: str, rows: int, axis: int) -> None:
        shape = list(w[name].shape)
        shape[axis] = rows
        w[name] = np.concatenate([w[name], np.zeros(shape, np.float32)], axis=axis)

    for stack, layers, heads, ffn in (("encoder", config.encoder_layers, enc_heads, enc_ffn),
                                      ("decoder", config.decoder_layers, dec_heads, dec_ffn)):
        attns = ("self_attn",) if stack == "encoder" else ("self_attn", "cross_attn")
        for i, layer in enumerate(layers):
            name = f"{stack}.layers.{i}"
            extra = (heads - layer.heads) * hd
            if extra > 0:
                padded.append(f"{name} ({layer.heads} -> {heads} heads)")
                for attn in attns:
                    if f"{name}.{attn}.q.weight" not in w:  # an SSRU decoder has no self_attn
                        continue
                    for p in ("q", "k", "v"):
                        grow(f"{name}.{attn}.{p}.weight", extra, 0)
                        grow(f"{name}.{attn}.{p}.bias", extra, 0)
                    grow(f"{name}.{attn}.o.weight", extra, 1)
            units = (ffn or layer.ffn) - layer.ffn
            if units > 0:
                padded.append(f"{name} ({layer.ffn} -> {ffn} FFN units)")
                grow(f"{name}.ffn.fc1.weight", units, 0)
                grow(f"{name}.ffn.fc1.bias", units, 0)
                grow(f"{name}.ffn.fc2.weight", units, 1)
    return padded


