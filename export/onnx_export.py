"""Export a pyfastdec model directory to ONNX (encoder + incremental decoder) for onnxruntime.

    python -m export.onnx_export MODEL_DIR OUT_DIR [--int8]

OUT_DIR gets `encoder.onnx`, `decoder.onnx`, copies of `config.json` and `spm.model`, and
`onnx_export.json` (which weights the graphs hold: config.json's `quantization` describes
the source directory, not the graphs), so it describes itself; pyfastdec.backends.onnx.OnnxBackend runs it. Only "transformer"
models (attention or SSRU decoder self-sublayer) are exported: a GAD drafter is not.

Graph contract (B rows, S source positions, n new tokens, P past positions; per decoder
layer i with h_i heads; hd = head_dim, d = d_model, V = vocab_size):

encoder.onnx
  in   src_ids  int64 [B,S]   sentencepiece ids + EOS, pad-padded on the right
       src_keep bool  [B,S]   True at real tokens (False at padding)
  out  memory   f32 [B,S,d]   encoder output (informational; the decoder does not need it)
       cross_key_{i}, cross_value_{i}  f32 [B,h_i,S,hd]  decoder layer i's cross-attention
                                K/V, projected once per sentence here instead of per step.

decoder.onnx (one causal pass over n new tokens per row, rows at their own offsets)
  in   tokens     int64 [B,n]
       positions  int64 [B,n]      absolute decoder positions (BOS = 0): lengths[b] + j
       self_keep  bool  [B,n,P+n]  attention (decoder self = "attention"): key j is
                                   visible to new token t; keys 0..P-1 are the past
                                   buffer, P..P+n-1 the new tokens. Rows hold different
                                   lengths, so past slots >= lengths[b] are masked out.
                                   (SSRU graphs have no self_keep input: nothing reads it.)
       src_keep   bool  [B,S]
       cross_key_{i}, cross_value_{i}       as the encoder's outputs
       past_key_{i}, past_value_{i}  f32 [B,h_i,P,hd]   (attention only)
       past_cell_{i}                 f32 [B,d]          (SSRU only: c before the new tokens,
                                                         zeros before BOS)
  out  logprobs   f32 [B,n,V]      log-softmax over the vocabulary
       present_key_{i}, present_value_{i}  f32 [B,h_i,P+n,hd]  (attention) the past K/V
                                   with the new tokens' appended: the concatenation the
                                   layer attends over anyway, returned so the caller can
                                   feed it back as the next step's past without copying
                                   it through numpy (onnxruntime IOBinding). Slots are
                                   not positions: which slots a row may see is self_keep's
                                   business, so truncation is exact by masking slots
                                   (pyfastdec.backends.onnx keeps a slot -> position map).
       new_cell_{i}                  f32 [B,n,d]        (SSRU) c after each new token; the
                                   caller keeps them per position (truncation = drop).

The graphs are traced with the TorchScript (dynamo=False) exporter from small wrapper
modules that reuse export.modeling's layers and weights; only the SSRU scan is rewritten
(the reference's Python loop over time would be unrolled to a fixed n by tracing): with
L_t = sum_{r<=t} log f_r, c_t = sum_{s<=t} exp(L_t - L_s) u_s + exp(L_t) c_0, exact in
exact arithmetic and within float32 rounding of the loop for the few tokens of a step.

--int8: onnxruntime's dynamic quantisation (quantize_dynamic, weight type QInt8, per-tensor
weight scales, activations quantised per call at run time) of the exported float32 graphs.
It quantises from the float weights of the directory: an int8 model directory is
dequantised first (q * weight_scale, the tied embedding to the int8 rows our engine reads;
export.writer.read_model_dir), and its calibrated static activation scales are NOT used,
so this is onnxruntime's own int8 recipe applied to the same weights, not a copy of
pyfastdec's int8 arithmetic.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .modeling import Seq2Seq, Sublayer
from .writer import read_model_dir

ENCODER_FILE, DECODER_FILE, INFO_FILE = "encoder.onnx", "decoder.onnx", "onnx_export.json"
OPSET = 17  # LayerNormalization is a single op from opset 17
MAX_IR_VERSION = 10  # onnxruntime 1.31 reads IR <= 13; 10 is safe for older peers too
# 2: attention decoders return present_key/value (past + new) instead of new_key/value,
# so the backend feeds them back through IOBinding. Readers refuse older graphs.
GRAPH_VERSION = 2


class EncoderGraph(nn.Module):
    """src ids + keep mask -> memory and every decoder layer's cross-attention K/V."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model

    def forward(self, src_ids, src_keep):
        m = self.model
        # Positions 0..S-1 from a cumsum, not arange(S): stays dynamic in the traced graph.
        pos = torch.cumsum(torch.ones_like(src_ids), 1) - 1
        memory = m.encoder(m.embed_tokens(src_ids, pos), src_keep[:, None, None, :])
        outs = [memory]
        for layer in m.decoder.layers:
            outs.extend(layer.cross_attn.project_kv(memory))
        return tuple(outs)


def ssru_scan(ssru, h, c0):
    """The SSRU over n new positions without a time loop (see the module docstring).

    h [B,n,d], c0 [B,d] -> (relu(c) [B,n,d], c [B,n,d]). Masking with -inf before exp keeps
    the upper triangle (s > t, where L_t - L_s >= 0 could overflow) exactly zero.
    """
    xw = F.linear(h, ssru.w.weight)
    fz = ssru.wf(h)
    u = torch.sigmoid(-fz) * xw  # (1 - f) x
    cum = torch.cumsum(F.logsigmoid(fz), 1)  # L_t [B,n,d]
    diff = cum.unsqueeze(2) - cum.unsqueeze(1)  # [B,t,s,d] = L_t - L_s
    n_idx = torch.cumsum(torch.ones_like(h[0, :, 0]), 0)  # 1..n, dynamic
    lower = (n_idx.unsqueeze(1) >= n_idx.unsqueeze(0)).unsqueeze(0).unsqueeze(-1)  # s <= t
    decay = torch.exp(diff.masked_fill(~lower, float("-inf")))
    c = (decay * u.unsqueeze(1)).sum(2) + torch.exp(cum) * c0.unsqueeze(1)
    return torch.relu(c), c


class DecoderGraph(nn.Module):
    """One incremental decoder step over n new tokens (graph contract in the module docstring)."""

    def __init__(self, model: Seq2Seq):
        super().__init__()
        self.model = model
        self.ssru = model.cfg.decoder_self == "ssru"

    def forward(self, tokens, positions, self_keep, src_keep, *per_layer):
        m = self.model
        x = m.embed_tokens(tokens, positions)
        self_mask = self_keep.unsqueeze(1)  # [B,1,n,P+n]
        cross_mask = src_keep[:, None, None, :]
        per = 3 if self.ssru else 4  # cross k, cross v, then past k, past v | past cell
        new = []
        for i, layer in enumerate(m.decoder.layers):
            ck, cv = per_layer[per * i], per_layer[per * i + 1]
            past = per_layer[per * i + 2: per * (i + 1)]

            def self_fn(h, layer=layer, past=past):
                if self.ssru:
                    out, c = ssru_scan(layer.ssru, h, past[0])
                    new.append(c)
                    return out
                k, v = layer.self_attn.project_kv(h)
                keys, values = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
                new.extend((keys, values))  # present K/V: fed back as the next past
                return layer.self_attn.attend(h, keys, values, self_mask)

            x = Sublayer.run(x, layer.ln_self, self_fn, layer.pre, 0.0, False)
            x = Sublayer.run(x, layer.ln_cross, lambda h, a=layer.cross_attn: a.attend(h, ck, cv, cross_mask),
                             layer.pre, 0.0, False)
            x = Sublayer.run(x, layer.ln_ffn, layer.ffn, layer.pre, 0.0, False)
        if hasattr(m.decoder, "final_ln"):
            x = m.decoder.final_ln(x)
        return (torch.log_softmax(m.logits(x), -1), *new)


def layer_names(model: Seq2Seq):
    """(decoder input names per layer, decoder output names per layer, cross names)."""
    ssru = model.cfg.decoder_self == "ssru"
    ins, outs, cross = [], [], []
    for i in range(len(model.cfg.decoder_layers)):
        c = [f"cross_key_{i}", f"cross_value_{i}"]
        cross += c
        if ssru:
            ins += c + [f"past_cell_{i}"]
            outs += [f"new_cell_{i}"]
        else:
            ins += c + [f"past_key_{i}", f"past_value_{i}"]
            outs += [f"present_key_{i}", f"present_value_{i}"]
    return ins, outs, cross


def _cap_ir_version(path: Path):
    import onnx

    proto = onnx.load(str(path))
    if proto.ir_version > MAX_IR_VERSION:
        proto.ir_version = MAX_IR_VERSION
        onnx.save(proto, str(path))


def export_graphs(model: Seq2Seq, out_dir: Path) -> tuple[Path, Path]:
    """Trace both graphs of a float32 model into out_dir; returns (encoder, decoder) paths."""
    model = model.eval()
    cfg = model.cfg
    if cfg.arch != "transformer":
        raise ValueError(f"onnx export: arch {cfg.arch!r} has no incremental decoder (only 'transformer')")
    out_dir.mkdir(parents=True, exist_ok=True)
    B, S, n, P, d, hd = 2, 5, 2, 3, cfg.d_model, cfg.head_dim
    src = torch.full((B, S), 5, dtype=torch.long)
    keep = torch.ones(B, S, dtype=torch.bool)
    ins, outs, cross = layer_names(model)
    enc_path, dec_path = out_dir / ENCODER_FILE, out_dir / DECODER_FILE
    row_src = {0: "batch", 1: "src_len"}
    kv_src = {0: "batch", 2: "src_len"}
    with torch.no_grad(), warnings.catch_warnings():
        # The TorchScript exporter is deprecated but chosen on purpose (predictable traces
        # of these plain-matmul layers); its deprecation notices are noise for users.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            EncoderGraph(model), (src, keep), str(enc_path), dynamo=False, opset_version=OPSET,
            input_names=["src_ids", "src_keep"], output_names=["memory"] + cross,
            dynamic_axes={"src_ids": row_src, "src_keep": row_src, "memory": row_src,
                          **{c: kv_src for c in cross}})
        example = []
        for spec in cfg.decoder_layers:
            example += [torch.randn(B, spec.heads, S, hd), torch.randn(B, spec.heads, S, hd)]
            if cfg.decoder_self == "ssru":
                example.append(torch.randn(B, d))
            else:
                example += [torch.randn(B, spec.heads, P, hd), torch.randn(B, spec.heads, P, hd)]
        tokens = torch.full((B, n), 6, dtype=torch.long)
        positions = torch.arange(P, P + n).expand(B, n).contiguous()
        self_keep = torch.ones(B, n, P + n, dtype=torch.bool)
        axes = {"tokens": {0: "batch", 1: "n"}, "positions": {0: "batch", 1: "n"},
                "self_keep": {0: "batch", 1: "n", 2: "past_plus_n"}, "src_keep": row_src,
                "logprobs": {0: "batch", 1: "n"}}
        for name in ins:
            axes[name] = kv_src if name.startswith("cross") else (
                {0: "batch"} if name.startswith("past_cell") else {0: "batch", 2: "past_len"})
        for name in outs:
            axes[name] = {0: "batch", 1: "n"} if name.startswith("new_cell") else {0: "batch", 2: "past_plus_n"}
        torch.onnx.export(
            DecoderGraph(model), (tokens, positions, self_keep, keep, *example), str(dec_path), dynamo=False,
            opset_version=OPSET, input_names=["tokens", "positions", "self_keep", "src_keep"] + ins,
            output_names=["logprobs"] + outs, dynamic_axes=axes)
    for p in (enc_path, dec_path):
        _cap_ir_version(p)
    return enc_path, dec_path


@contextlib.contextmanager
def _quiet_root_logger():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_graphs(paths) -> None:
    """onnxruntime dynamic int8 quantisation of each graph, in place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for p in paths:
        with tempfile.TemporaryDirectory() as tmp:
            fp32 = Path(tmp) / p.name
            shutil.move(str(p), fp32)
            with _quiet_root_logger():  # its "consider pre-processing" advice is for CNNs
                quantize_dynamic(fp32, p, weight_type=QuantType.QInt8)
        _cap_ir_version(p)


def export_model_dir(model_dir: str | Path, out_dir: str | Path, int8: bool = False) -> Path:
    """MODEL_DIR (float32 or int8, dequantised) -> OUT_DIR with both graphs, config.json, spm.model."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    model, spm_file = read_model_dir(model_dir)
    paths = export_graphs(model, out_dir)
    if int8:
        quantize_graphs(paths)
    shutil.copyfile(model_dir / "config.json", out_dir / "config.json")
    tokenizer_files = spm_file if isinstance(spm_file, dict) else {"spm.model": spm_file}
    for name, path in tokenizer_files.items():  # spm.model, or a Marian vocabulary's files
        shutil.copyfile(path, out_dir / name)
    info = {"weights": "onnxruntime_dynamic_qint8" if int8 else "float32",
            "source_quantization": None if model.cfg.quantization is None else "int8 (dequantised for export)",
            "opset": OPSET, "decoder_self": model.cfg.decoder_self, "graph_version": GRAPH_VERSION}
    (out_dir / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out_dir


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Export a pyfastdec model directory to ONNX (encoder.onnx + decoder.onnx).")
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--int8", action="store_true",
                    help="onnxruntime dynamic quantisation (QInt8 weights) of the float graphs; "
                         "int8 directories are dequantised first")
    args = ap.parse_args(argv)
    try:
        out = export_model_dir(args.model_dir, args.out_dir, args.int8)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
