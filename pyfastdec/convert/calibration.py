"""Static int8 activation multipliers for a float32 model directory, in numpy.

The rule is export/calibrate.py's (Edinburgh WMT22; activation_multiplier, shared): run the float model teacher-forced
over calibration pairs in batches of 16 sentences sorted by source length, record
max|A| per batch for the input A of every quantized linear, and store
127 / (mean + 1.1 * std) of those maxima (export/FORMAT.md, int8). This module computes
the same forward pass as export.modeling.Seq2Seq (padded rows included, as its hooks
see them) without torch, so `fastdec convert marian --quantize int8 --calibrate FILE`
works from the installed package; tests/test_convert_int8.py checks the multipliers
against export/calibrate.py.

Only what the converters produce is covered: autoregressive "transformer" models with
an attention decoder and no proposal heads (the Hugging Face Marian import).
"""
from __future__ import annotations

import math

import numpy as np

from pyfastdec.convert.positions import sinusoidal_table
from pyfastdec.model_dir import MAX_ACTIVATION_SCALE, ModelDir, quantized_linears

BATCH_SIZE = 16
ACT_STAT = "127 / (mean + 1.1 * std) of the per-batch max|A| of the linear's input"


def activation_multiplier(mean: float, std: float) -> float:
    """The static multiplier of a linear input (ACT_STAT) from the mean and population
    standard deviation of its per-batch max|A|; export/calibrate.py applies it too. Each
    caller reduces the maxima in its own float64 arithmetic (numpy here, torch there):
    their sums round differently in the last bit, and each keeps the bytes it wrote."""
    # An input that is (almost) always zero (a pruned FFN whose units never fire) rounds to
    # 0 at any multiplier; the format's largest one keeps the directory valid.
    return min(float(127.0 / max(float(mean + 1.1 * std), 1e-12)), MAX_ACTIVATION_SCALE)


def _layer_norm(x: np.ndarray, w: dict, name: str, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(eps)) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _activation(kind: str, x: np.ndarray) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "swish":
        return x / (1 + np.exp(-x))
    from math import erf  # exact GELU, as FORMAT.md specifies

    return (x * 0.5 * (1 + np.vectorize(erf, otypes=[np.float32])(x / math.sqrt(2)))).astype(np.float32)


class _Recorder:
    """The float forward pass, noting max|input| of every quantized linear it runs."""

    def __init__(self, model: ModelDir):
        cfg = model.config
        self.cfg, self.eps, self.pre = cfg, np.float32(cfg.layer_norm_eps), cfg.norm == "pre"
        self.w = {n: np.asarray(t, dtype=np.float32) for n, t in model.tensors.items()}
        self.current: dict[str, float] = {}
        self.positions = lambda n: sinusoidal_table(n, cfg.d_model, cfg.positions)

    def linear(self, name: str, x: np.ndarray) -> np.ndarray:
        self.current[name] = max(self.current.get(name, 0.0), float(np.abs(x).max()))
        # As one 2-D product: numpy runs a 3-D one against a transposed matrix without BLAS (50x slower).
        y = x.reshape(-1, x.shape[-1]) @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]
        return y.reshape(*x.shape[:-1], -1)

    def attention(self, name: str, heads: int, q_in: np.ndarray, kv_in: np.ndarray, mask: np.ndarray) -> np.ndarray:
        hd = self.cfg.head_dim

        def split(x):  # [B, T, H*hd] -> [B, H, T, hd]
            return x.reshape(x.shape[0], x.shape[1], heads, hd).transpose(0, 2, 1, 3)

        k, v = split(self.linear(f"{name}.k", kv_in)), split(self.linear(f"{name}.v", kv_in))
        q = split(self.linear(f"{name}.q", q_in)) * np.float32(hd ** -0.5)
        scores = np.where(mask, q @ k.transpose(0, 1, 3, 2), np.float32(-np.inf))
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        ctx = (scores / scores.sum(-1, keepdims=True)) @ v
        return self.linear(f"{name}.o", ctx.transpose(0, 2, 1, 3).reshape(q_in.shape[0], q_in.shape[1], -1))

    def sublayer(self, x: np.ndarray, ln: str, fn) -> np.ndarray:
        if self.pre:
            return x + fn(_layer_norm(x, self.w, ln, self.eps))
        return _layer_norm(x + fn(x), self.w, ln, self.eps)

    def ffn(self, layer: str, x: np.ndarray) -> np.ndarray:
        return self.linear(f"{layer}.ffn.fc2", _activation(self.cfg.activation, self.linear(f"{layer}.ffn.fc1", x)))

    def embed(self, ids: np.ndarray) -> np.ndarray:
        return self.w["embed.weight"][ids] * np.float32(math.sqrt(self.cfg.d_model)) + self.positions(ids.shape[1])

    def run(self, src: np.ndarray, tgt_in: np.ndarray) -> None:
        cfg = self.cfg
        keep = (src != cfg.tokens["pad"])[:, None, None, :]
        x = self.embed(src)
        for i, layer in enumerate(cfg.encoder_layers):
            p = f"encoder.layers.{i}"
            x = self.sublayer(x, f"{p}.ln_attn", lambda h: self.attention(f"{p}.self_attn", layer.heads, h, h, keep))
            x = self.sublayer(x, f"{p}.ln_ffn", lambda h: self.ffn(p, h))
        memory = _layer_norm(x, self.w, "encoder.final_ln", self.eps) if self.pre else x
        t = tgt_in.shape[1]
        causal = np.tril(np.ones((t, t), dtype=bool))[None, None]
        y = self.embed(tgt_in)
        for i, layer in enumerate(cfg.decoder_layers):
            p = f"decoder.layers.{i}"
            y = self.sublayer(y, f"{p}.ln_self", lambda h: self.attention(f"{p}.self_attn", layer.heads, h, h, causal))
            y = self.sublayer(y, f"{p}.ln_cross",
                              lambda h: self.attention(f"{p}.cross_attn", layer.heads, h, memory, keep))
            y = self.sublayer(y, f"{p}.ln_ffn", lambda h: self.ffn(p, h))


def _pad(rows: list[list[int]], pad: int) -> np.ndarray:
    out = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def calibrate(model: ModelDir, pairs: list[tuple[list[int], list[int]]],
              batch_size: int = BATCH_SIZE) -> dict[str, float]:
    """pairs: (source ids, target ids) without BOS/EOS. Returns linear name -> multiplier."""
    cfg = model.config
    if cfg.arch != "transformer" or cfg.decoder_self != "attention" or cfg.heads is not None:
        raise ValueError(f"{model.path}: calibration covers attention-decoder transformers without proposal heads "
                         f"(arch {cfg.arch}, decoder.self {cfg.decoder_self})")
    if not pairs:
        raise ValueError("calibration needs at least one sentence pair")
    names = quantized_linears(cfg)
    recorder = _Recorder(model)
    maxima: dict[str, list[float]] = {n: [] for n in names}
    tok = cfg.tokens
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))  # little padding per batch
    with np.errstate(over="ignore"):  # exp of a large negative swish input is inf: x / inf = -0, as torch
        for i in range(0, len(order), batch_size):
            chunk = [pairs[j] for j in order[i:i + batch_size]]
            recorder.current.clear()
            recorder.run(_pad([s + [tok["eos"]] for s, _ in chunk], tok["pad"]),
                         _pad([[tok["bos"]] + t for _, t in chunk], tok["pad"]))
            for n in names:
                maxima[n].append(recorder.current[n])
    scales = {}
    for n in names:
        vals = np.asarray(maxima[n], dtype=np.float64)
        scales[n] = activation_multiplier(float(vals.mean()), float(vals.std()))
    return scales
