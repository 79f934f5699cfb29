"""Independent references for Marian models, used by the Marian converter tests.

- `marian_logits`: a numpy forward pass of a Marian transformer .npz, written from
  marian-dev src/models/transformer.h (parameter names, [in, out] weights, sqrt(d)
  embedding scale, Marian's [sin | cos] sinusoid with frequencies 10000^(-i/(d/2-1)),
  layer-norm eps 1e-6, a zero embedding at decoder position 0, SSRU cells), so that a
  conversion bug in names, transposes or the stream permutation shows as a logit mismatch
  without needing the ~600 MB pymarian wheel.
- `marian_semantics`: turns an export.modeling.Seq2Seq into the function Marian computes
  (positions, eps, zero decoder start), the torch side of the same comparison.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

MARIAN_EPS = 1e-6


def marian_positions(length: int, d: int, start: int = 0) -> np.ndarray:
    """inits::sinusoidalPositionEmbeddings: row p = [sin(p w_i) for i] + [cos(p w_i) for i]."""
    half = d // 2
    inc = math.log(10000.0) / (half - 1)
    w = np.exp(np.arange(half, dtype=np.float64) * -inc)
    angle = np.arange(start, start + length, dtype=np.float64)[:, None] * w[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


def _ln(x, scale, bias):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + MARIAN_EPS) * scale.reshape(-1) + bias.reshape(-1)


def _attention(t, prefix, q_in, kv_in, heads, causal):
    q = q_in @ t[f"{prefix}_Wq"] + t[f"{prefix}_bq"].reshape(-1)
    k = kv_in @ t[f"{prefix}_Wk"] + t[f"{prefix}_bk"].reshape(-1)
    v = kv_in @ t[f"{prefix}_Wv"] + t[f"{prefix}_bv"].reshape(-1)
    dk = q.shape[-1] // heads
    out = []
    for h in range(heads):
        sl = slice(h * dk, (h + 1) * dk)
        z = q[:, sl] @ k[:, sl].T / math.sqrt(dk)
        if causal:
            z = np.where(np.tril(np.ones_like(z, dtype=bool)), z, -np.inf)
        z = np.exp(z - z.max(-1, keepdims=True))
        out.append((z / z.sum(-1, keepdims=True)) @ v[:, sl])
    return np.concatenate(out, -1) @ t[f"{prefix}_Wo"] + t[f"{prefix}_bo"].reshape(-1)


def _ffn(t, prefix, x):
    h = np.maximum(x @ t[f"{prefix}_W1"] + t[f"{prefix}_b1"].reshape(-1), 0)
    return h @ t[f"{prefix}_W2"] + t[f"{prefix}_b2"].reshape(-1)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def marian_logits(tensors: dict, options: dict, source: list[int], target: list[int]) -> np.ndarray:
    """Logits [len(target) + 1, V] for source ids (with EOS) and target ids (without EOS),
    pre-norm ("n" / "da" / top "n") models only, as the converter writes them."""
    t = {k: np.asarray(v, np.float64) for k, v in tensors.items()}
    d, heads = options["dim-emb"], options["transformer-heads"]
    emb = t["Wemb"]
    x = emb[source] * math.sqrt(d) + marian_positions(len(source), d)
    for i in range(1, options["enc-depth"] + 1):
        p = f"encoder_l{i}"
        x = x + _attention(t, f"{p}_self", _ln(x, t[f"{p}_self_Wo_ln_scale_pre"], t[f"{p}_self_Wo_ln_bias_pre"]),
                           _ln(x, t[f"{p}_self_Wo_ln_scale_pre"], t[f"{p}_self_Wo_ln_bias_pre"]), heads, False)
        x = x + _ffn(t, f"{p}_ffn", _ln(x, t[f"{p}_ffn_ffn_ln_scale_pre"], t[f"{p}_ffn_ffn_ln_bias_pre"]))
    memory = _ln(x, t["encoder_top_ln_scale"], t["encoder_top_ln_bias"])

    # Decoder input: a zero embedding at position 0, then the target words.
    y = np.concatenate([np.zeros((1, d)), emb[target] * math.sqrt(d)]) + marian_positions(len(target) + 1, d)
    rnn = options["transformer-decoder-autoreg"] == "rnn"
    for i in range(1, options["dec-depth"] + 1):
        p = f"decoder_l{i}"
        if rnn:
            h = _ln(y, t[f"{p}_rnn_ln_scale_pre"], t[f"{p}_rnn_ln_bias_pre"])
            xs, fs = h @ t[f"{p}_rnn_W"], _sigmoid(h @ t[f"{p}_rnn_Wf"] + t[f"{p}_rnn_bf"].reshape(-1))
            c, out = np.zeros(d), []
            for step in range(len(y)):  # highway(c, x, f) = f * c + (1 - f) * x
                c = fs[step] * c + (1 - fs[step]) * xs[step]
                out.append(np.maximum(c, 0))
            y = y + np.stack(out)
        else:
            h = _ln(y, t[f"{p}_self_Wo_ln_scale_pre"], t[f"{p}_self_Wo_ln_bias_pre"])
            y = y + _attention(t, f"{p}_self", h, h, heads, True)
        h = _ln(y, t[f"{p}_context_Wo_ln_scale_pre"], t[f"{p}_context_Wo_ln_bias_pre"])
        y = y + _attention(t, f"{p}_context", h, memory, heads, False)
        y = y + _ffn(t, f"{p}_ffn", _ln(y, t[f"{p}_ffn_ffn_ln_scale_pre"], t[f"{p}_ffn_ffn_ln_bias_pre"]))
    y = _ln(y, t["decoder_top_ln_scale"], t["decoder_top_ln_bias"])
    return y @ emb.T + t["decoder_ff_logit_out_b"].reshape(-1)


@contextlib.contextmanager
def marian_semantics(model):
    """Within the block, `model` (export.modeling.Seq2Seq, our layout) computes what Marian
    computes on its conversion: Marian's position frequencies (in our interleaved layout,
    which the converter's permutation maps onto Marian's halves), layer-norm eps 1e-6, and a
    zero decoder start (the BOS embedding row zeroed: BOS is our decoder start and is never
    an output, so its output logit, now the bias alone, changes no argmax in practice)."""
    import torch

    import export.modeling as modeling

    original_positions = modeling.sinusoidal_positions

    def positions(p, d_model, layout="interleaved"):
        half = d_model // 2
        w = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
        angle = p.to(torch.float32).unsqueeze(-1) * w
        return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)

    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    eps = [m.eps for m in norms]
    bos_row = model.embed.weight[model.bos].detach().clone()
    modeling.sinusoidal_positions = positions
    for m in norms:
        m.eps = MARIAN_EPS
    with torch.no_grad():
        model.embed.weight[model.bos] = 0
    try:
        yield model
    finally:
        modeling.sinusoidal_positions = original_positions
        for m, e in zip(norms, eps):
            m.eps = e
        with torch.no_grad():
            model.embed.weight[model.bos] = bos_row
