"""Write a pyfastdec model directory (export/FORMAT.md) as a Marian model (.npz).

Marian is the second peer of the benchmarks (bench/systems.py), so the converted model
must compute what FORMAT.md specifies, in Marian's own transformer (marian-dev
src/models/transformer.h). Names and semantics follow that source:

- Positions. Marian's sinusoid (inits::sinusoidalPositionEmbeddings) puts sin(p w_i) at
  dimension i and cos(p w_i) at d/2 + i, ours interleaves them (2i, 2i+1): every weight
  that reads or writes the residual stream is permuted (stream_permutation), which makes
  the layouts equal. The frequencies cannot be made equal: Marian's w_i =
  10000^(-i/(d/2-1)), ours 10000^(-i/(d/2)) (for d = 256 they differ by a factor
  10000^(i/16256), at most 1.075 for the slowest pair). Marian's learned positions
  (`transformer-train-positions`, a `Wpos` table) would hold our exact table, but
  Marian 1.12.42 aborts on them at translation ("Required option 'inference' has not
  been set", layers/embedding.cpp: the Wpos embedding layer is built without it).
- Layer norm. Marian's eps is 1e-6 (layers/generic.h layerNorm), ours 1e-5; not an
  option in Marian. (Scaling the residual stream would move it, but Marian adds its
  fixed sinusoid unscaled, so the stream cannot be scaled.)
- Decoder start. Marian feeds a zero embedding at decoder position 0 (models/decoder.h,
  embeddingsFromPrediction), ours embed[BOS]; no Marian option changes it. Our models
  were trained with BOS, so Marian's first step sees an input they never saw: its output
  most often lacks our first word (greedy agreement in bench/README.md, "Marian").
  Everything else (embedding scale sqrt(d_model), attention, FFN, SSRU, pre-norm with
  final layer norms, tied output layer with bias) is the same function.
- Tokens. The sentencepiece model is the vocabulary (`vocab.src.spm`, `vocab.trg.spm`:
  the same file under two names, because Marian adds every source id to the shortlist
  when the two vocabulary paths are equal). Marian's source is ids + EOS like ours; its
  decoder never emits unk unless `--allow-unk` (written into decoder.yml).
- Shortlist (Marian's text lexical shortlist `lex.s2t`, lines "target source prob",
  read with `--shortlist lex.s2t 0 BEST`): our per-source rows, plus our frequent ids
  on the EOS row (every Marian source ends with EOS, so they are always candidates),
  with first = 0. Marian ranks a row by (probability, target id), both descending
  (LexicalShortlistGenerator::prune), ours by probability descending then id ascending, so
  the written values are made strictly decreasing along our row order (marian_scores):
  the probabilities where the file has them, with ties and values under Marian's
  positive floor stepped one float32 below their predecessor, else rank-based 1/(rank+1);
  Marian's ranking then equals our row order, also for a BEST shorter than the longest
  row. Marian pads a candidate set to a multiple of 8 from id 0 (ours from
  `first_fill_id`), and takes the union over a batch (ours per row), so shortlisted
  outputs may differ from ours at batch > 1 or when a padding id would win.

Refused with a ValueError naming the config field: drafters (`arch`), per-layer or
encoder/decoder head counts that differ (`transformer-heads` is one number), FFN sizes
that differ within a stack, heads * head_dim != d_model, activations other than relu.

Output directory: model.npz (with special:model.yml), vocab.src.spm, vocab.trg.spm,
lex.s2t and shortlist.args (when the model has a shortlist.bin), decoder.yml.

CLI: python -m pyfastdec.convert marian-npz MODEL_DIR OUT_DIR [--force]
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from pyfastdec.convert.weights import float_weights, pad_layers
from pyfastdec.model_dir import ModelConfig, ModelDir
from pyfastdec.model_dir.shortlist import Shortlist
from pyfastdec.model_dir.staging import check_output, staged_dir

MODEL_FILE = "model.npz"
SRC_VOCAB, TRG_VOCAB = "vocab.src.spm", "vocab.trg.spm"
SHORTLIST_FILE = "lex.s2t"
DECODER_YML = "decoder.yml"


def zero_start(cfg: ModelConfig, embed: np.ndarray) -> bool:
    """Whether the model starts its decoder from Marian's zero embedding: bos is the last
    id, never generated, with an all-zero row (what `convert marian-npz-in` writes). That
    id is then left out of the Marian model, which starts from zeros by itself."""
    bos = cfg.tokens["bos"]
    return bos == cfg.vocab_size - 1 and bos in cfg.suppress and not np.any(embed[bos])


def marian_shapes(cfg: ModelConfig) -> tuple[int, int, int]:
    """(transformer-heads, encoder FFN size, decoder FFN size). Marian has one head count,
    which must split d_model, and one FFN size per stack: pruned layers are padded up to
    them with zero heads and units (pyfastdec.convert.weights.pad_layers), the same function."""
    heads = max(l.heads for l in cfg.encoder_layers + cfg.decoder_layers)
    if cfg.d_model % cfg.head_dim or heads > cfg.d_model // cfg.head_dim:
        raise ValueError(f"encoder/decoder layers[i].heads up to {heads}, head_dim = {cfg.head_dim}, d_model = "
                         f"{cfg.d_model}: Marian's attention splits d_model into transformer-heads heads of "
                         f"d_model / heads, so heads * head_dim must be able to equal d_model")
    return (cfg.d_model // cfg.head_dim, max(l.ffn for l in cfg.encoder_layers),
            max(l.ffn for l in cfg.decoder_layers))


def marian_options(cfg: ModelConfig, vocab_size: int | None = None) -> dict:
    """The model options Marian reads from the npz's special:model.yml."""
    if cfg.arch != "transformer":
        raise ValueError(f"arch = {cfg.arch!r}: only \"transformer\" models convert to Marian")
    if cfg.activation not in ("relu", "swish"):
        # Marian's gelu is x * sigmoid(1.702 x), not the exact gelu of the format.
        raise ValueError(f"activation = {cfg.activation!r}: only \"relu\" and \"swish\" convert to Marian")
    vocab_size = vocab_size or cfg.vocab_size
    enc, dec = cfg.encoder_layers, cfg.decoder_layers
    heads, enc_ffn, dec_ffn = marian_shapes(cfg)
    pre = cfg.norm == "pre"
    return {
        "type": "transformer", "dim-vocabs": [vocab_size, vocab_size], "dim-emb": cfg.d_model,
        "enc-depth": len(enc), "dec-depth": len(dec), "transformer-heads": heads,
        "transformer-dim-ffn": enc_ffn, "transformer-decoder-dim-ffn": dec_ffn,
        "transformer-ffn-depth": 2, "transformer-decoder-ffn-depth": 2, "transformer-ffn-activation": cfg.activation,
        "transformer-preprocess": "n" if pre else "", "transformer-postprocess": "da" if pre else "dan",
        "transformer-postprocess-emb": "", "transformer-postprocess-top": "n" if pre else "",
        "transformer-decoder-autoreg": "rnn" if cfg.decoder_self == "ssru" else "self-attention",
        "dec-cell": "ssru", "layer-normalization": False, "transformer-rnn-projection": False,
        "tied-embeddings-all": True, "tied-embeddings-src": False, "tied-embeddings": False,
        "output-omit-bias": False, "transformer-tied-layers": [], "transformer-pool": False,
        "transformer-depth-scaling": False,
    }


def stream_permutation(d_model: int) -> np.ndarray:
    """perm[j] = our residual-stream dimension stored at Marian's dimension j.

    Marian's sinusoid puts sin(p w_i) at i and cos(p w_i) at d/2 + i; ours interleaves them
    (2i, 2i+1). Every weight reading or writing the stream is permuted alike, which
    changes nothing else: layer norm, residual sums and the tied output layer are
    equivariant under a permutation of the model dimension."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def marian_tensors(model: ModelDir) -> dict[str, np.ndarray]:
    """Marian parameter name -> float32 array (Marian's [in, out] weights, [1, n] vectors)."""
    cfg = model.config
    w = float_weights(model)
    heads, enc_ffn, dec_ffn = marian_shapes(cfg)
    pad_layers(w, cfg, heads, heads, enc_ffn, dec_ffn)
    # A "marian" (or "halves") table already has Marian's [sin | cos] layout.
    perm = stream_permutation(cfg.d_model) if cfg.positions == "interleaved" else np.arange(cfg.d_model)
    if zero_start(cfg, w["embed.weight"]):
        w["embed.weight"], w["output.bias"] = w["embed.weight"][:-1], w["output.bias"][:-1]
    pre = cfg.norm == "pre"
    out: dict[str, np.ndarray] = {}

    def vec(x, stream: bool = False):
        x = np.asarray(x, np.float32)
        return (x[perm] if stream else x).reshape(1, -1)

    def weight(ours: str, stream_in: bool, stream_out: bool) -> np.ndarray:
        # Marian: y = x W + b with W [in, out]; ours nn.Linear [out, in].
        m = w[f"{ours}.weight"].T
        if stream_in:
            m = m[perm, :]
        if stream_out:
            m = m[:, perm]
        return m

    def attention(prefix: str, ours: str) -> None:
        for p in "qkv":
            out[f"{prefix}_W{p}"] = weight(f"{ours}.{p}", True, False)
            out[f"{prefix}_b{p}"] = vec(w[f"{ours}.{p}.bias"])
        out[f"{prefix}_Wo"] = weight(f"{ours}.o", False, True)
        out[f"{prefix}_bo"] = vec(w[f"{ours}.o.bias"], stream=True)

    def layer_norm(prefix: str, ours: str) -> None:
        suffix = "_pre" if pre else ""
        out[f"{prefix}_ln_scale{suffix}"] = vec(w[f"{ours}.weight"], stream=True)
        out[f"{prefix}_ln_bias{suffix}"] = vec(w[f"{ours}.bias"], stream=True)

    def ffn(prefix: str, ours: str) -> None:
        out[f"{prefix}_W1"] = weight(f"{ours}.ffn.fc1", True, False)
        out[f"{prefix}_b1"] = vec(w[f"{ours}.ffn.fc1.bias"])
        out[f"{prefix}_W2"] = weight(f"{ours}.ffn.fc2", False, True)
        out[f"{prefix}_b2"] = vec(w[f"{ours}.ffn.fc2.bias"], stream=True)
        layer_norm(f"{prefix}_ffn", f"{ours}.ln_ffn")

    # Marian multiplies by sqrt(d_model) itself, and the output layer reads Wemb unscaled, as ours.
    out["Wemb"] = w["embed.weight"][:, perm]
    for i in range(len(cfg.encoder_layers)):
        ours, prefix = f"encoder.layers.{i}", f"encoder_l{i + 1}"
        attention(f"{prefix}_self", f"{ours}.self_attn")
        layer_norm(f"{prefix}_self_Wo", f"{ours}.ln_attn")
        ffn(f"{prefix}_ffn", ours)
    if pre:
        out["encoder_top_ln_scale"] = vec(w["encoder.final_ln.weight"], stream=True)
        out["encoder_top_ln_bias"] = vec(w["encoder.final_ln.bias"], stream=True)
    for i in range(len(cfg.decoder_layers)):
        ours, prefix = f"decoder.layers.{i}", f"decoder_l{i + 1}"
        if cfg.decoder_self == "ssru":
            out[f"{prefix}_rnn_W"] = weight(f"{ours}.ssru.w", True, True)
            out[f"{prefix}_rnn_Wf"] = weight(f"{ours}.ssru.wf", True, True)
            out[f"{prefix}_rnn_bf"] = vec(w[f"{ours}.ssru.wf.bias"], stream=True)
            # The RNN sublayer's pre-norm is named after the layer prefix, its post-norm after prefix + "_ffn".
            layer_norm(f"{prefix}_rnn" if pre else f"{prefix}_rnn_ffn", f"{ours}.ln_self")
        else:
            attention(f"{prefix}_self", f"{ours}.self_attn")
            layer_norm(f"{prefix}_self_Wo", f"{ours}.ln_self")
        attention(f"{prefix}_context", f"{ours}.cross_attn")
        layer_norm(f"{prefix}_context_Wo", f"{ours}.ln_cross")
        ffn(f"{prefix}_ffn", ours)
    if pre:
        out["decoder_top_ln_scale"] = vec(w["decoder.final_ln.weight"], stream=True)
        out["decoder_top_ln_bias"] = vec(w["decoder.final_ln.bias"], stream=True)
    out["decoder_ff_logit_out_b"] = vec(w["output.bias"])
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def yaml_lines(options: dict) -> str:
    """Marian-readable YAML for flat options (bools, ints, strings, int lists)."""
    def show(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(show(x) for x in v) + "]"
        if isinstance(v, str):
            return '"' + v + '"'
        return str(v)
    return "".join(f"{k}: {show(v)}\n" for k, v in options.items())


def meta_item(text: str) -> np.ndarray:
    """special:model.yml as Marian stores it: the bytes, a NUL, zero-padded to 256 (common/io.cpp)."""
    raw = text.encode("utf-8") + b"\0"
    raw += b"\0" * (-len(raw) % 256)
    return np.frombuffer(raw, dtype=np.int8).copy()


def lexical_shortlist_lines(shortlist: Shortlist, pieces: list[str], eos: int) -> list[str]:
    """Marian text shortlist ("target source prob") equivalent to ours, see the module docstring."""
    for i, p in enumerate(pieces):
        if not p or any(c.isspace() for c in p) or p == "NULL":
            raise ValueError(f"spm.model: piece {i} = {p!r} cannot be written to Marian's whitespace-separated "
                             f"lexical shortlist")
    lines = []
    for f in range(shortlist.vocab_size):
        targets, probs = shortlist.translations(f)
        scores = marian_scores(probs, targets.size)
        rows = dict(zip(targets.tolist(), scores.tolist()))
        if f == eos:  # below the row: the frequent ids are always kept (shortlist_best counts them)
            extra = float(np.nextafter(scores[-1], np.float32(0))) if scores.size else MARIAN_FLOOR
            for t in shortlist.frequent.tolist():
                rows.setdefault(t, min(extra, MARIAN_FLOOR))
        # %.9g round-trips a float32 exactly, and Marian reads the value into a float.
        lines += [f"{pieces[t]} {pieces[f]} {p:.9g}\n" for t, p in rows.items()]
    return lines


MARIAN_FLOOR = 1e-9  # Marian keeps only probabilities > 0 (its default threshold); far from underflow


def marian_scores(probs: np.ndarray | None, n: int) -> np.ndarray:
    """float32 values for one row (best first) that strictly decrease, so Marian's ranking
    (probability descending, ties by id descending) is the row's order: the probabilities,
    floored at MARIAN_FLOOR, each tie stepped one float32 below its predecessor; rank-based
    1/(rank+1) for a shortlist without probabilities."""
    if probs is None:
        return (1.0 / np.arange(1, n + 1)).astype(np.float32)
    out = np.maximum(np.asarray(probs, np.float32), np.float32(MARIAN_FLOOR))
    for k in range(1, n):
        if out[k] >= out[k - 1]:
            out[k] = np.nextafter(out[k - 1], np.float32(0))
    return out


def shortlist_best(shortlist: Shortlist, eos: int) -> int:
    """Marian's BEST: the longest row, the EOS row including the frequent ids."""
    lengths = np.diff(shortlist.indptr.astype(np.int64))
    eos_row = set(shortlist.translations(eos)[0].tolist()) | set(shortlist.frequent.tolist())
    return int(max(lengths.max(initial=0), len(eos_row)))


def marian_vocab(model: ModelDir) -> Path:
    """The sentencepiece model whose ids are the model's (Marian looks pieces up in it).

    tokenizer "spm": spm.model. tokenizer "marian": source.spm, if it equals target.spm
    and vocab.json gives every piece its sentencepiece id (Marian's own models, as
    `convert marian-npz-in` writes them); other vocab.json orders cannot be expressed."""
    import sentencepiece

    if model.spm_path is not None:
        return model.spm_path
    files = model.tokenizer_files
    src, trg, vocab = files["source.spm"], files["target.spm"], files["vocab.json"]
    if src.read_bytes() != trg.read_bytes():
        raise ValueError(f"{src}: differs from {trg}: Marian's .spm vocabulary here is one model for both sides")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(src))
    ids = json.loads(vocab.read_text(encoding="utf-8"))
    for i in range(sp.get_piece_size()):
        if ids.get(sp.id_to_piece(i)) != i:
            raise ValueError(f"{vocab}: piece {sp.id_to_piece(i)!r} has id {ids.get(sp.id_to_piece(i))} but "
                             f"{src} gives it {i}: Marian reads ids from the .spm, so they must agree")
    return src


def to_marian_npz(model_dir: str | os.PathLike, out_dir: str | os.PathLike, *, force: bool = False) -> Path:
    """Write OUT_DIR = model.npz, vocab.{src,trg}.spm, [lex.s2t], decoder.yml; returns OUT_DIR.

    Written into a staging directory beside OUT_DIR, then renamed, so a failure leaves
    nothing half-written (pyfastdec/model_dir/staging.py); OUT_DIR may not be MODEL_DIR or hold it."""
    import sentencepiece

    out = Path(out_dir)
    check_output(out, Path(model_dir), force=force)
    model = ModelDir.load(model_dir)
    cfg = model.config
    spm_path = marian_vocab(model)
    tensors = marian_tensors(model)
    options = marian_options(cfg, tensors["Wemb"].shape[0])
    allow_unk = cfg.tokens["unk"] not in cfg.suppress
    with staged_dir(out) as tmp:
        np.savez(tmp / MODEL_FILE, **tensors, **{"special:model.yml": meta_item(yaml_lines(options))})
        shutil.copyfile(spm_path, tmp / SRC_VOCAB)
        shutil.copyfile(spm_path, tmp / TRG_VOCAB)
        decoder = {"relative-paths": True, "models": [MODEL_FILE], "vocabs": [SRC_VOCAB, TRG_VOCAB],
                   "allow-unk": allow_unk, "beam-size": 1, "normalize": 1.0}
        shortlist_path = Path(model_dir) / "shortlist.bin"
        text = yaml_lines(decoder)
        if shortlist_path.exists():
            sl = Shortlist.load(shortlist_path)
            sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_path))
            pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
            eos = model.config.tokens["eos"]
            (tmp / SHORTLIST_FILE).write_text("".join(lexical_shortlist_lines(sl, pieces, eos)), encoding="utf-8")
            text += f"# add for the shortlist: --shortlist {SHORTLIST_FILE} 0 {shortlist_best(sl, eos)}\n"
            (tmp / "shortlist.args").write_text(f"{SHORTLIST_FILE} 0 {shortlist_best(sl, eos)}\n")
        (tmp / DECODER_YML).write_text(text, encoding="utf-8")
    return out


def shortlist_option(out_dir: str | os.PathLike) -> list[str] | None:
    """The --shortlist values for a converted directory (absolute path), or None without one."""
    args = Path(out_dir) / "shortlist.args"
    if not args.exists():
        return None
    name, first, best = args.read_text().split()
    return [str(Path(out_dir) / name), first, best]
