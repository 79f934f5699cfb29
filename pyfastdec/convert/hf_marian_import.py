"""Import a saved Hugging Face `MarianMTModel` directory (OPUS-MT and the like) as a
pyfastdec model directory (export/FORMAT.md).

    python -m pyfastdec.convert marian HF_DIR OUT_DIR [--quantize int8 --calibrate TEXT_FILE]
                                                      [--shortlist PARALLEL_SRC PARALLEL_TGT]

HF_DIR holds what `save_pretrained` writes for the model and its MarianTokenizer:
config.json, model.safetensors (or pytorch_model.bin, which needs torch: the export extra),
generation_config.json (optional), source.spm, target.spm and vocab.json.

What a Marian model is, in our format (transformers 5.23 modeling_marian.py):
- post-norm layers (`norm` "post"), embeddings scaled by sqrt(d_model)
  (`scale_embedding` must be true), one embedding matrix shared by encoder, decoder and
  output layer, `final_logits_bias` as `output.bias`;
- sinusoidal positions with sin in the first half and cos in the second
  (MarianSinusoidalPositionalEmbedding: `positions` "halves"), from 0 in both stacks;
- `activation_function` swish / silu -> "swish", gelu -> "gelu", relu -> "relu";
- layer norms with torch's default eps 1e-5 (nn.LayerNorm(embed_dim));
- the decoder starts from `decoder_start_token_id` (pad, whose embedding row is zero):
  tokens.bos; single-token `bad_words_ids` of generation_config.json (OPUS-MT: pad)
  become `suppress`, so they are never generated, as HF's NoBadWordsLogitsProcessor;
- the tokenizer: MarianTokenizer's two sentencepiece models over vocab.json (`tokenizer`
  "marian").
Anything else (another model_type, unshared or untied embeddings, separate vocabularies,
pre-norm, a layernorm after the embeddings, ...) is refused naming the field and value.

Everything is written into a staging directory beside OUT_DIR, validated by loading it
as pyfastdec will, and only then renamed to OUT_DIR: a failure, Ctrl-C or SIGTERM leaves
nothing behind (pyfastdec/model_dir/staging.py). OUT_DIR may not be HF_DIR, lie inside it or hold it.
Everything needs only numpy and sentencepiece (and torch for a pytorch_model.bin).
int8 (`--quantize int8`, pyfastdec/convert/int8.py) quantises the weights per row; its
activations are either scaled per row at run time (the default: no calibration text) or,
with `--calibrate TEXT_FILE`, by static multipliers calibrated on that text
(pyfastdec/convert/calibration.py: 127 / (mean + 1.1 sigma) of per-batch max|A|, the
decoder teacher-forced on the float model's own greedy translations). Speed and quality
of the two: bench/README.md. `--shortlist` builds IBM Model 1 shortlists
(pyfastdec/convert/ibm1_shortlist.py).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

import numpy as np

from pyfastdec.model_dir import safetensors_io
from pyfastdec.convert.int8 import quantize_dir
from pyfastdec.convert.positions import sinusoidal_table
from pyfastdec.model_dir import (CONFIG_FILE, SHORTLIST_FILE, SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE,
                                 WEIGHTS_FILE, ModelDir, ModelDirError, check_marian_vocab,
                                 file_digest, load_config_json)
from pyfastdec.model_dir.checksums import directory_checksums
from pyfastdec.model_dir.staging import check_output, scratch_dir, staged_dir

HF_CONFIG, HF_GENERATION = "config.json", "generation_config.json"
HF_SAFETENSORS, HF_TORCH_BIN = "model.safetensors", "pytorch_model.bin"
HF_TOKENIZER_CONFIG = "tokenizer_config.json"
ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}

# Our layer names -> HF Marian's, per layer (q/k/v/o projections are named *_proj in HF).
_ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
_ENCODER = {"self_attn": "self_attn", "ln_attn": "self_attn_layer_norm", "ffn.fc1": "fc1", "ffn.fc2": "fc2",
            "ln_ffn": "final_layer_norm"}
_DECODER = {"self_attn": "self_attn", "ln_self": "self_attn_layer_norm", "cross_attn": "encoder_attn",
            "ln_cross": "encoder_attn_layer_norm", "ffn.fc1": "fc1", "ffn.fc2": "fc2", "ln_ffn": "final_layer_norm"}


class ConvertError(ValueError):
    """An input this converter refuses; the message names the file and what is wrong."""


# ----------------------------------------------------------------------------- config
def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ConvertError(f"{path}: (file): missing (expected a saved MarianMTModel directory)")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ConvertError(f"{path}: (file): not valid JSON ({err})") from None
    if not isinstance(obj, dict):
        raise ConvertError(f"{path}: (top level): expected a JSON object")
    return obj


def _get(hf: dict, key: str, where: Path, default: Any = None, required: bool = False) -> Any:
    if key not in hf or hf[key] is None:
        if required:
            raise ConvertError(f"{where}: {key}: missing (expected a MarianConfig field)")
        return default
    return hf[key]


def _refuse(where: Path, key: str, value: Any, expected: str) -> ConvertError:
    return ConvertError(f"{where}: {key}: {json.dumps(value)} (expected {expected})")


def _int_field(hf: dict, key: str, where: Path, default: Any = None) -> int:
    value = _get(hf, key, where, default, required=default is None)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _refuse(where, key, value, "a positive integer")
    return value


def marian_config(hf: dict, generation: dict, vocab: dict[str, int], where: Path, gen_where: Path) -> dict:
    """Our config.json (without quantization and checksum) for an HF MarianConfig dict."""
    model_type = hf.get("model_type")
    if model_type != "marian":
        raise _refuse(where, "model_type", model_type, '"marian": only MarianMTModel checkpoints convert')
    architectures = hf.get("architectures") or ["MarianMTModel"]
    if "MarianMTModel" not in architectures:
        raise _refuse(where, "architectures", architectures, '["MarianMTModel"]')
    # Options that change the computation and that our format does not express.
    for key, ok, expected in (
            ("scale_embedding", True, "true: embeddings scaled by sqrt(d_model)"),
            ("share_encoder_decoder_embeddings", True, "true: one embedding matrix"),
            ("tie_word_embeddings", True, "true: the output layer is the embedding matrix"),
            ("normalize_before", False, "false: Marian layers are post-norm"),
            ("normalize_embedding", False, "false: no layer norm after the embeddings"),
            ("add_final_layer_norm", False, "false: no final layer norm"),
            ("static_position_embeddings", True, "true: sinusoidal positions"),
            ("add_bias_logits", False, "false")):
        default = {"scale_embedding": False, "share_encoder_decoder_embeddings": True,
                   "tie_word_embeddings": True}.get(key, ok)
        value = _get(hf, key, where, default)
        if value != ok:
            raise _refuse(where, key, value, expected)
    activation = _get(hf, "activation_function", where, "gelu")
    if activation not in ACTIVATIONS:
        raise _refuse(where, "activation_function", activation, " or ".join(json.dumps(a) for a in ACTIVATIONS))
    d = _int_field(hf, "d_model", where)
    vocab_size = _int_field(hf, "vocab_size", where)
    decoder_vocab = _get(hf, "decoder_vocab_size", where, vocab_size)
    if decoder_vocab != vocab_size:
        raise _refuse(where, "decoder_vocab_size", decoder_vocab, f"vocab_size {vocab_size}: one shared vocabulary")
    heads = {stack: _int_field(hf, f"{stack}_attention_heads", where) for stack in ("encoder", "decoder")}
    for stack, h in heads.items():
        if d % h:
            raise _refuse(where, f"{stack}_attention_heads", h, f"a divisor of d_model {d}")
    if heads["encoder"] != heads["decoder"]:
        raise _refuse(where, "decoder_attention_heads", heads["decoder"],
                      f"encoder_attention_heads {heads['encoder']}: one head size for both stacks")
    if d % 2 or d < 4:
        raise _refuse(where, "d_model", d, "an even width >= 4")

    def layers(stack: str) -> list[dict]:
        n, ffn = _int_field(hf, f"{stack}_layers", where), _int_field(hf, f"{stack}_ffn_dim", where)
        return [{"heads": heads[stack], "ffn": ffn} for _ in range(n)]

    eos = _get(hf, "eos_token_id", where, required=True)
    if isinstance(eos, list):
        if len(eos) != 1:
            raise _refuse(where, "eos_token_id", eos, "one end-of-sentence id")
        eos = eos[0]
    pad = _get(hf, "pad_token_id", where, required=True)
    start = _get(hf, "decoder_start_token_id", where, pad)
    tokens = {"pad": pad, "unk": vocab.get("<unk>", -1), "bos": start, "eos": eos}
    for name, tid in tokens.items():
        if not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid < vocab_size:
            field = {"pad": "pad_token_id", "bos": "decoder_start_token_id", "eos": "eos_token_id"}.get(name)
            if field is None:
                raise ConvertError(f"{where.parent / VOCAB_FILE}: <unk>: missing (expected an unknown-token piece)")
            raise _refuse(where, field, tid, f"a token id below vocab_size {vocab_size}")
    suppress: list[int] = []
    bad = generation.get("bad_words_ids") or []
    if not isinstance(bad, list):
        raise _refuse(gen_where, "bad_words_ids", bad, "a list of token-id lists")
    for i, words in enumerate(bad):
        if (not isinstance(words, list) or len(words) != 1 or not isinstance(words[0], int)
                or not 0 <= words[0] < vocab_size):
            raise ConvertError(f"{gen_where}: bad_words_ids[{i}]: {json.dumps(words)} (expected single token ids: "
                               f"a banned sequence of several tokens has no equivalent in the engine)")
        if words[0] not in suppress and words[0] != eos:
            suppress.append(words[0])
    config = {
        "format": "fastdec", "version": 1, "arch": "transformer",
        "d_model": d, "head_dim": d // heads["encoder"], "vocab_size": vocab_size, "norm": "post",
        "activation": ACTIVATIONS[activation],
        "encoder": {"layers": layers("encoder")},
        "decoder": {"self": "attention", "layers": layers("decoder")},
        "tokens": tokens, "max_source_len": _int_field(hf, "max_position_embeddings", where, 512),
        "quantization": None,
        "positions": "halves", "tokenizer": "marian",
    }
    if suppress:
        config["suppress"] = suppress
    return config


# ----------------------------------------------------------------------------- weights
def read_hf_weights(hf_dir: Path) -> tuple[dict[str, np.ndarray], Path]:
    """name -> float32 array from model.safetensors (numpy only) or pytorch_model.bin (torch)."""
    st, pt = hf_dir / HF_SAFETENSORS, hf_dir / HF_TORCH_BIN
    if st.is_file():
        try:
            tensors = safetensors_io.load_file(st)
        except (ValueError, OSError) as err:
            raise ConvertError(str(err) if str(st) in str(err) else f"{st}: (file): {err}") from None
        return tensors, st
    if pt.is_file():
        try:
            import torch
        except ImportError:
            raise ConvertError(f"{pt}: reading a pytorch_model.bin needs torch, from the export extra (pip install "
                               f"'pyfastdec[export]'), or save the model with safe_serialization=True to get "
                               f"{HF_SAFETENSORS}") from None
        try:
            state = torch.load(pt, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - torch raises assorted types for a bad file
            raise ConvertError(f"{pt}: (file): not a readable PyTorch state dict ({err})") from None
        return {k: v.detach().to(torch.float32).numpy() for k, v in state.items() if hasattr(v, "detach")}, pt
    raise ConvertError(f"{hf_dir}: (directory): no {HF_SAFETENSORS} or {HF_TORCH_BIN} (expected the model weights)")


def map_weights(hf: dict[str, np.ndarray], config: dict, where: Path) -> dict[str, np.ndarray]:
    """Our tensors (float32, export/FORMAT.md names) from HF Marian's state dict."""
    d, V = config["d_model"], config["vocab_size"]
    used: set[str] = set()

    def take(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in hf:
            raise ConvertError(f"{where}: {name}: missing tensor (expected {list(shape)})")
        array = np.asarray(hf[name], dtype=np.float32)
        if array.shape != shape:
            raise ConvertError(f"{where}: {name}: shape {list(array.shape)} (expected {list(shape)} from "
                               f"config.json)")
        used.add(name)
        return np.ascontiguousarray(array)

    embed_names = [n for n in ("model.shared.weight", "model.encoder.embed_tokens.weight",
                               "model.decoder.embed_tokens.weight", "lm_head.weight") if n in hf]
    if not embed_names:
        raise ConvertError(f"{where}: model.shared.weight: missing tensor (expected [{V}, {d}])")
    embed = take(embed_names[0], (V, d))
    for name in embed_names[1:]:  # older checkpoints store the tied copies too
        if not np.array_equal(take(name, (V, d)), embed):
            raise ConvertError(f"{where}: {name}: differs from {embed_names[0]} (expected one shared, tied "
                               f"embedding matrix)")
    out = {"embed.weight": embed}
    if "final_logits_bias" in hf:
        out["output.bias"] = take("final_logits_bias", (1, V)).reshape(V).copy()
    else:  # HF initialises a missing final_logits_bias to zeros
        out["output.bias"] = np.zeros(V, dtype=np.float32)
    for stack in ("encoder", "decoder"):
        name = f"model.{stack}.embed_positions.weight"
        if name in hf:  # older checkpoints saved the fixed table: it must be the one we compute
            table = np.asarray(hf[name], dtype=np.float32)
            expected = sinusoidal_table(table.shape[0], d, "halves")
            if table.ndim != 2 or table.shape[1] != d or not np.allclose(table, expected, atol=1e-5):
                raise ConvertError(f"{where}: {name}: not Marian's sinusoidal table (expected sin/cos halves; "
                                   f"learned positions are not supported)")
            used.add(name)
    names = _ENCODER, _DECODER
    for stack, mapping in zip(("encoder", "decoder"), names):
        for i, layer in enumerate(config[stack]["layers"]):
            inner, ffn = layer["heads"] * config["head_dim"], layer["ffn"]
            ours, theirs = f"{stack}.layers.{i}", f"model.{stack}.layers.{i}"
            for part, hf_part in mapping.items():
                if part.startswith("ln_"):
                    for p in ("weight", "bias"):
                        out[f"{ours}.{part}.{p}"] = take(f"{theirs}.{hf_part}.{p}", (d,))
                elif part.startswith("ffn."):
                    n_out, n_in = (ffn, d) if part == "ffn.fc1" else (d, ffn)
                    out[f"{ours}.{part}.weight"] = take(f"{theirs}.{hf_part}.weight", (n_out, n_in))
                    out[f"{ours}.{part}.bias"] = take(f"{theirs}.{hf_part}.bias", (n_out,))
                else:
                    for p, hf_p in _ATTN.items():
                        n_out, n_in = (d, inner) if p == "o" else (inner, d)
                        out[f"{ours}.{part}.{p}.weight"] = take(f"{theirs}.{hf_part}.{hf_p}.weight", (n_out, n_in))
                        out[f"{ours}.{part}.{p}.bias"] = take(f"{theirs}.{hf_part}.{hf_p}.bias", (n_out,))
    unknown = sorted(n for n in hf if n not in used and n != "final_logits_bias")
    if unknown:
        raise ConvertError(f"{where}: {unknown[0]}: unexpected tensor (expected only MarianMTModel's with the "
                           f"layer counts of config.json; {len(unknown)} unexpected in all)")
    return out


# ----------------------------------------------------------------------------- writing
def write_float_dir(out: Path, config: dict, tensors: dict[str, np.ndarray], hf_dir: Path) -> ModelDir:
    """config.json, model.safetensors and the tokenizer files into `out` (which exists)."""
    safetensors_io.save_file(out / WEIGHTS_FILE, tensors, metadata={"format": "fastdec", "version": "1"})
    for name in (SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE):
        shutil.copyfile(hf_dir / name, out / name)
    config = dict(config)
    config["checksum"] = directory_checksums(out, config)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return ModelDir.load(out)


def write_shortlist(model_dir: ModelDir, src_file: Path, tgt_file: Path, out: Path) -> None:
    """shortlist.bin from the user's parallel text (pyfastdec/convert/ibm1_shortlist.py's IBM Model 1)."""
    from pyfastdec.convert.ibm1_shortlist import build_shortlist, read_parallel
    from pyfastdec.text import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    try:
        src_lines, tgt_lines = read_parallel(src_file, tgt_file)
    except ValueError as err:
        raise ConvertError(str(err)) from None
    tokens = model_dir.config.tokens
    always = (tokens["unk"], tokens["eos"])
    fill = next(i for i in range(model_dir.config.vocab_size)
                if i not in tokens.values() and i not in model_dir.config.suppress)
    shortlist = build_shortlist([tokenizer.encode(s) for s in src_lines],
                                [tokenizer.encode_target(t) for t in tgt_lines],
                                model_dir.config.vocab_size, always=always, first_fill_id=fill)
    shortlist.save(out / SHORTLIST_FILE)
    # The checksum lists it (pyfastdec refuses a checksummed directory's unlisted shortlist);
    # the config's own digest leaves the checksum field out, so only this key changes.
    config = load_config_json(out / CONFIG_FILE)
    config["checksum"][SHORTLIST_FILE] = file_digest((out / SHORTLIST_FILE).read_bytes())
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def convert_marian(hf_dir: str | os.PathLike, out_dir: str | os.PathLike, quantize: Optional[str] = None,
                   calibrate: Optional[str | os.PathLike] = None,
                   shortlist: Optional[tuple[str | os.PathLike, str | os.PathLike]] = None,
                   force: bool = False) -> Path:
    """Convert HF_DIR into the pyfastdec model directory OUT_DIR (see the module docstring).
    quantize: None (float32) or "int8": with `calibrate` (a text file of source sentences)
    static activation scales calibrated on it, without dynamic per-row ones. shortlist: (source file, target file) of parallel text. Returns OUT_DIR."""
    hf_dir, out = Path(hf_dir), Path(out_dir)
    if quantize not in (None, "float32", "int8"):
        raise ConvertError(f"--quantize {quantize}: expected int8 (or float32, the default)")
    if quantize != "int8" and calibrate is not None:
        raise ConvertError("--calibrate is for --quantize int8 (float32 needs no calibration)")
    check_output(out, hf_dir, *[Path(p) for p in ([calibrate] if calibrate is not None else []) + list(shortlist or ())],
                 force=force)
    if not hf_dir.is_dir():
        raise ConvertError(f"{hf_dir}: (directory): {'not a directory' if hf_dir.exists() else 'no such directory'} "
                           f"(expected a saved MarianMTModel)")
    where = hf_dir / HF_CONFIG
    hf = _read_json(where)
    tok_config = hf_dir / HF_TOKENIZER_CONFIG
    if tok_config.is_file() and _read_json(tok_config).get("separate_vocabs"):
        raise ConvertError(f"{tok_config}: separate_vocabs: true (expected one vocab.json shared by source and "
                           f"target)")
    gen_where = hf_dir / HF_GENERATION
    generation = _read_json(gen_where) if gen_where.is_file() else {}
    for name in (SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE):
        if not (hf_dir / name).is_file():
            raise ConvertError(f"{hf_dir / name}: (file): missing (expected MarianTokenizer's {name})")
    try:
        vocab = json.loads((hf_dir / VOCAB_FILE).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ConvertError(f"{hf_dir / VOCAB_FILE}: (file): not valid JSON ({err})") from None
    if not isinstance(vocab, dict):
        raise ConvertError(f"{hf_dir / VOCAB_FILE}: (top level): expected an object piece -> id")
    config = marian_config(hf, generation, vocab, where, gen_where)
    try:
        check_marian_vocab(hf_dir / VOCAB_FILE, (hf_dir / SOURCE_SPM_FILE, hf_dir / TARGET_SPM_FILE),
                           config["tokens"], config["vocab_size"], where)
    except ModelDirError as err:
        raise ConvertError(str(err)) from None
    weights, weights_path = read_hf_weights(hf_dir)
    tensors = map_weights(weights, config, weights_path)

    with staged_dir(out) as final, scratch_dir(out) as scratch:
        float_dir = final if quantize != "int8" else scratch  # int8: the float model is only a step
        model_dir = write_float_dir(float_dir, config, tensors, hf_dir)
        if quantize == "int8":
            quantize_dir(model_dir, final, None if calibrate is None else Path(calibrate))
        if shortlist is not None:  # the writers above loaded what they wrote; config.json changes here
            write_shortlist(model_dir, Path(shortlist[0]), Path(shortlist[1]), final)
            ModelDir.load(final)  # what is renamed into place loads
    return out
