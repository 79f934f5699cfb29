"""Read a Marian .npz checkpoint (and its sentencepiece vocabulary) into a pyfastdec
model directory (export/FORMAT.md), float32.

Marian's own models — the Bergamot / Firefox Translations students (deep encoder, SSRU
decoder, tied embeddings, lexical shortlists) and anything `marian` trains with
`--type transformer` — carry their options in the npz item `special:model.yml`. The
semantics follow marian-dev src/models/transformer.h and map onto the format's optional
fields as follows:

- `positions: "marian"` (Marian's [sin | cos] sinusoid with its frequencies), the
  embedding scaled by sqrt(d) as ours; `layer_norm_eps: 1e-6` (transformer.h layerNorm);
  `activation` from `transformer-ffn-activation` (relu, swish, gelu).
- Pre-norm (`transformer-preprocess n`, `-postprocess da`, `-postprocess-top n`, the
  top layer norms `encoder_top_ln_*` / `decoder_top_ln_*` are our final_ln) or
  post-norm (`""`, `dan`, top `""`); dropout (`d`) is ignored, anything else refused.
- Decoder start: Marian feeds a zero embedding at position 0. The vocabulary gets one
  extra id V (piece `<pad>`, as Hugging Face's OPUS-MT conversions do) whose embedding
  row is zero: it is tokens.bos and tokens.pad, and in `suppress` (never generated). The
  tied output layer's column for it is never used.
- Tokens: Marian's sentencepiece ids are the model ids (`tokenizer: "marian"`: the .spm
  as source.spm and target.spm, vocab.json = its pieces in id order plus `<pad>`);
  eos and unk are the spm model's. Marian's decoder never emits unk unless it runs with
  `--allow-unk`, so unk is in `suppress` too unless `allow_unk=True`.
- `max_source_len`: 1000, Marian's translation default `--max-length` (its sinusoid has
  no length limit; Marian's training-time max-length only crops training data).
- The lexical shortlist (optional, Marian's text format "target source prob" with its
  FIRST and BEST): our shortlist.bin with frequent ids 0..FIRST-1 (plus unk and eos),
  each source's BEST most probable targets plus the source id itself (Marian's "shared"
  vocabulary rule, in force when one .spm serves both sides), and first_fill_id = FIRST,
  so a sentence's candidates are Marian's at batch 1 (Marian takes the union over a batch).

Refused, naming the file and the option or tensor: types other than transformer,
untied embeddings, FFN depth other than 2, `transformer-decoder-autoreg` other than
self-attention / rnn with `dec-cell ssru`, SSRU layer normalisation, RNN projections,
tied layers, pooling, factors, learned or disabled positions, an embedding layer norm,
missing, extra or mis-shaped tensors, non-float32 (packed / quantised) tensors.

Written into a temporary directory beside OUT_DIR, loaded back with ModelDir.load, then
renamed: a failure leaves nothing half-written.

CLI: python -m pyfastdec.convert marian-npz-in MODEL.npz VOCAB.spm OUT_DIR
     [--shortlist LEX FIRST BEST] [--allow-unk] [--force]
"""
from __future__ import annotations

import json
import os
import shutil
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from pyfastdec.model_dir import safetensors_io
from pyfastdec.model_dir import (CONFIG_FILE, SHORTLIST_FILE, SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE,
                                 WEIGHTS_FILE, ModelDir)
from pyfastdec.model_dir.checksums import directory_checksums
from pyfastdec.model_dir.shortlist import Shortlist
from pyfastdec.model_dir.staging import check_output, staged_dir

META = "special:model.yml"
MARIAN_EPS = 1e-6
MARIAN_MAX_LENGTH = 1000  # marian translate --max-length default
MAX_META_BYTES = 1 << 20  # special:model.yml: a few KB of options text
START_PIECE = "<pad>"
ACTIVATIONS = {"relu": "relu", "swish": "swish", "gelu": "gelu"}
# Options whose value must be the default for the model to mean what we read.
MUST_BE = {
    "transformer-tied-layers": ([], "no tied layers"),
    "transformer-pool": (False, "attention, not pooling"),
    "transformer-rnn-projection": (False, "no projection after the SSRU"),
    "layer-normalization": (False, "no layer norm inside the SSRU cell"),
    "transformer-train-positions": (False, "sinusoidal positions"),
    "transformer-train-position-embeddings": (False, "sinusoidal positions"),
    "transformer-disable-position-embeddings": (False, "sinusoidal positions"),
    "output-omit-bias": (False, "an output bias"),
    "lemma-dim-emb": (0, "no factored vocabulary"),
    "right-left": (False, "left-to-right decoding"),
    "transformer-no-projection": (False, "attention output projections"),
    "transformer-no-bias": (False, "biases"),
    "transformer-no-affine": (False, "layer-norm scales and biases"),
    "transformer-alibi-shift": (False, "no ALiBi"),
    "transformer-attention-mask": ("default", "the default attention mask"),
}


class MarianNpzError(ValueError):
    """A Marian checkpoint this reader refuses (the message names the file and what)."""


# ----------------------------------------------------------------------------- reading
def _parse_yaml(text: str, where: str) -> dict:
    try:
        import yaml  # pyyaml: Marian's model.yml is YAML; pymarian and most installs have it
    except ImportError:
        yaml = None
    if yaml is not None:
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise MarianNpzError(f"{where}: {META} is not valid YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(value, dict):
            raise MarianNpzError(f"{where}: {META} is not a mapping of options")
        return value
    return _flat_yaml(text, where)


def _flat_yaml(text: str, where: str) -> dict:
    """The subset of YAML Marian writes for model options: `key: scalar`, `key: [a, b]`
    and `key:` followed by `  - item` lines (numpy + sentencepiece stay the only runtime deps)."""
    out: dict[str, Any] = {}
    key = None

    def scalar(v: str):
        v = v.strip()
        if v in ("true", "false"):
            return v == "true"
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            return v[1:-1]
        for cast in (int, float):
            try:
                return cast(v)
            except ValueError:
                pass
        return v

    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith((" ", "-")) and line.strip().startswith("-") and key is not None:
            out.setdefault(key, [])
            out[key].append(scalar(line.strip()[1:]))
            continue
        if ":" not in line:
            raise MarianNpzError(f"{where}: {META} line {n}: {line.strip()!r} (expected key: value)")
        key, value = line.split(":", 1)
        key, value = key.strip(), value.strip()
        if value.startswith("[") and value.endswith("]"):
            out[key] = [scalar(v) for v in value[1:-1].split(",") if v.strip()]
        elif value == "":
            out[key] = []
        else:
            out[key] = scalar(value)
    return out


class NpzMembers:
    """The arrays of a .npz, known by their .npy headers (shape, dtype) and read only when
    taken: a member's shape is checked against the config before its data is read, so a
    small file that declares a huge array is refused without allocating it."""

    def __init__(self, path: Path, headers: dict[str, tuple[tuple[int, ...], np.dtype]]):
        self.path, self.headers = path, headers

    def __contains__(self, name: str) -> bool:
        return name in self.headers

    def __iter__(self):
        return iter(self.headers)

    def load(self, name: str) -> np.ndarray:
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(f"{name}.npy") as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, zlib.error) as err:
            raise MarianNpzError(f"{self.path}: item {name} is not readable ({err})") from None


def _npy_header(f) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(f)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = reader(f)
    return tuple(shape), dtype


def read_npz(path: Path) -> tuple[NpzMembers, dict]:
    """(the parameters' NpzMembers, model options) of a Marian .npz; only the options
    item and the headers are read here."""
    if not path.is_file():
        raise MarianNpzError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    if not zipfile.is_zipfile(path):
        raise MarianNpzError(f"{path}: not a .npz (zip) file; Marian's packed .bin models are not read")
    headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise MarianNpzError(f"{path}: item {info.filename} is not a .npy array")
                with zf.open(info) as f:
                    headers[info.filename[:-4]] = _npy_header(f)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, zlib.error) as err:
        if isinstance(err, MarianNpzError):
            raise
        raise MarianNpzError(f"{path}: not a readable .npz ({err})") from None
    if META not in headers:
        raise MarianNpzError(f"{path}: no {META} item (a Marian model .npz embeds its options there)")
    shape, dtype = headers.pop(META)
    if len(shape) != 1 or dtype.itemsize * (shape[0] if shape else 1) > MAX_META_BYTES:
        raise MarianNpzError(f"{path}: {META}: shape {list(shape)} of {dtype} (expected the options text, at most "
                             f"{MAX_META_BYTES} bytes)")
    members = NpzMembers(path, headers)
    raw = members.load(META).tobytes().split(b"\0", 1)[0]
    options = _parse_yaml(raw.decode("utf-8", errors="replace"), str(path))
    return members, options


# ----------------------------------------------------------------------------- options
def _ops(options: dict, key: str, where: str) -> str:
    value = options.get(key, "")
    if not isinstance(value, str) or set(value) - set("dan"):
        raise MarianNpzError(f"{where}: option {key} = {value!r} (expected letters of d, a, n)")
    return value.replace("d", "")  # dropout: nothing at inference


def model_config(options: dict, vocab_size: int, where: str, allow_unk: bool = False,
                 tokens: dict | None = None) -> tuple[dict, dict]:
    """(our config.json without checksum, reading facts) for Marian's options."""
    def opt(key, default=None):
        return options.get(key, default)

    def refuse(key, expected):
        return MarianNpzError(f"{where}: option {key} = {opt(key)!r} (expected {expected})")

    if opt("type") != "transformer":
        raise refuse("type", "transformer")
    for key, (default, meaning) in MUST_BE.items():
        if key in options and options[key] not in (default, None) and not (default == [] and options[key] == []):
            raise refuse(key, f"{default!r}: only models with {meaning} convert")
    if not opt("tied-embeddings-all", False):
        raise refuse("tied-embeddings-all", "true: one matrix for source and target embeddings and the output layer")
    if _ops(options, "transformer-postprocess-emb", where):
        raise refuse("transformer-postprocess-emb", "'' or 'd' (no layer norm on the embeddings)")
    pre, post, top = (_ops(options, k, where) for k in
                      ("transformer-preprocess", "transformer-postprocess", "transformer-postprocess-top"))
    if (pre, post, top) == ("n", "a", "n"):
        norm = "pre"
    elif (pre, post, top) == ("", "an", ""):
        norm = "post"
    else:
        raise MarianNpzError(f"{where}: options transformer-preprocess / -postprocess / -postprocess-top = "
                             f"{opt('transformer-preprocess')!r} / {opt('transformer-postprocess')!r} / "
                             f"{opt('transformer-postprocess-top', '')!r} (expected n / da / n for pre-norm or "
                             f"'' / dan / '' for post-norm)")
    act = opt("transformer-ffn-activation", "swish")
    if act not in ACTIVATIONS:
        raise refuse("transformer-ffn-activation", " or ".join(ACTIVATIONS))
    for key in ("transformer-ffn-depth", "transformer-decoder-ffn-depth"):
        if opt(key, 2) not in (2, 0):
            raise refuse(key, "2 (two linears per FFN)")
    autoreg = opt("transformer-decoder-autoreg", "self-attention")
    if autoreg == "rnn":
        if opt("dec-cell") != "ssru":
            raise refuse("dec-cell", "ssru (the only recurrent decoder layer the format has)")
        decoder_self = "ssru"
    elif autoreg == "self-attention":
        decoder_self = "attention"
    else:
        raise refuse("transformer-decoder-autoreg", "self-attention or rnn")
    d, heads = int(opt("dim-emb")), int(opt("transformer-heads", 8))
    if d % heads:
        raise refuse("transformer-heads", f"a divisor of dim-emb {d}")
    vocabs = opt("dim-vocabs", [])
    if len(vocabs) != 2 or vocabs[0] != vocabs[1] or vocabs[0] != vocab_size:
        raise refuse("dim-vocabs", f"[{vocab_size}, {vocab_size}] (the joint vocabulary's size)")
    ffn = int(opt("transformer-dim-ffn"))
    dec_ffn = int(opt("transformer-decoder-dim-ffn", 0) or ffn)
    enc_depth, dec_depth = int(opt("enc-depth")), int(opt("dec-depth"))
    tok = dict(tokens or {})
    start = vocab_size  # the extra zero-embedding id (see the module docstring)
    suppress = [start] + ([] if allow_unk else [tok["unk"]])
    config = {
        "format": "fastdec", "version": 1, "arch": "transformer", "d_model": d, "head_dim": d // heads,
        "vocab_size": vocab_size + 1, "norm": norm, "activation": ACTIVATIONS[act],
        "encoder": {"layers": [{"heads": heads, "ffn": ffn}] * enc_depth},
        "decoder": {"self": decoder_self, "layers": [{"heads": heads, "ffn": dec_ffn}] * dec_depth},
        "tokens": {"pad": start, "unk": tok["unk"], "bos": start, "eos": tok["eos"]},
        "max_source_len": MARIAN_MAX_LENGTH, "quantization": None,
        "layer_norm_eps": MARIAN_EPS, "positions": "marian", "suppress": suppress, "tokenizer": "marian",
    }
    return config, {"norm": norm, "decoder_self": decoder_self}


# ----------------------------------------------------------------------------- tensors
class _Taker:
    """Pops Marian tensors by name with shape checks; leftovers are refused at the end."""

    def __init__(self, arrays: NpzMembers, where: str):
        self.arrays, self.where, self.used = arrays, where, set()

    def __call__(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.arrays:
            raise MarianNpzError(f"{self.where}: missing tensor {name} (expected shape {list(shape)})")
        a_shape, a_dtype = self.arrays.headers[name]  # checked before the data is read
        if a_dtype != np.float32:
            raise MarianNpzError(f"{self.where}: tensor {name} has dtype {a_dtype} (expected float32; packed or "
                                 f"quantised Marian models are not read)")
        if a_shape != shape and not (len(shape) == 1 and a_shape == (1, shape[0])):
            raise MarianNpzError(f"{self.where}: tensor {name} has shape {list(a_shape)} (expected {list(shape)})")
        self.used.add(name)
        return np.ascontiguousarray(self.arrays.load(name).reshape(shape), dtype=np.float32)

    def leftovers(self) -> None:
        extra = sorted(set(self.arrays) - self.used)
        if extra:
            raise MarianNpzError(f"{self.where}: unexpected tensor {extra[0]}" + (
                f" (and {len(extra) - 1} more)" if len(extra) > 1 else "") + " (an option this reader does not know?)")


def map_tensors(arrays: NpzMembers, config: dict, where: str) -> dict[str, np.ndarray]:
    """Our tensor table (FORMAT.md names, nn.Linear [out, in]) from Marian's parameters."""
    take = _Taker(arrays, where)
    d, V = config["d_model"], config["vocab_size"] - 1
    pre = config["norm"] == "pre"
    suffix = "_pre" if pre else ""
    out: dict[str, np.ndarray] = {}

    def linear(ours: str, w: str, b: str | None, n_in: int, n_out: int) -> None:
        out[f"{ours}.weight"] = np.ascontiguousarray(take(w, (n_in, n_out)).T)
        if b is not None:
            out[f"{ours}.bias"] = take(b, (n_out,))

    def layer_norm(ours: str, prefix: str, sfx: str = suffix) -> None:
        out[f"{ours}.weight"] = take(f"{prefix}_ln_scale{sfx}", (d,))
        out[f"{ours}.bias"] = take(f"{prefix}_ln_bias{sfx}", (d,))

    def attention(ours: str, prefix: str) -> None:
        for p in "qkv":
            linear(f"{ours}.{p}", f"{prefix}_W{p}", f"{prefix}_b{p}", d, d)
        linear(f"{ours}.o", f"{prefix}_Wo", f"{prefix}_bo", d, d)

    def ffn(ours: str, prefix: str, f: int) -> None:
        linear(f"{ours}.ffn.fc1", f"{prefix}_W1", f"{prefix}_b1", d, f)
        linear(f"{ours}.ffn.fc2", f"{prefix}_W2", f"{prefix}_b2", f, d)
        layer_norm(f"{ours}.ln_ffn", f"{prefix}_ffn")

    emb = take("Wemb", (V, d))
    # The extra decoder-start id: a zero row, so its input is sqrt(d) * 0 + PE(0) as Marian's.
    out["embed.weight"] = np.concatenate([emb, np.zeros((1, d), np.float32)])
    out["output.bias"] = np.concatenate([take("decoder_ff_logit_out_b", (V,)), np.zeros(1, np.float32)])
    for i, layer in enumerate(config["encoder"]["layers"]):
        ours, prefix = f"encoder.layers.{i}", f"encoder_l{i + 1}"
        attention(f"{ours}.self_attn", f"{prefix}_self")
        layer_norm(f"{ours}.ln_attn", f"{prefix}_self_Wo")
        ffn(ours, f"{prefix}_ffn", layer["ffn"])
    for i, layer in enumerate(config["decoder"]["layers"]):
        ours, prefix = f"decoder.layers.{i}", f"decoder_l{i + 1}"
        if config["decoder"]["self"] == "ssru":
            linear(f"{ours}.ssru.w", f"{prefix}_rnn_W", None, d, d)
            linear(f"{ours}.ssru.wf", f"{prefix}_rnn_Wf", f"{prefix}_rnn_bf", d, d)
            # pre-norm: preProcess(prefix) -> "<prefix>_ln_*_pre"; post-norm: postProcess(prefix + "_ffn").
            layer_norm(f"{ours}.ln_self", f"{prefix}_rnn" if pre else f"{prefix}_rnn_ffn")
        else:
            attention(f"{ours}.self_attn", f"{prefix}_self")
            layer_norm(f"{ours}.ln_self", f"{prefix}_self_Wo")
        attention(f"{ours}.cross_attn", f"{prefix}_context")
        layer_norm(f"{ours}.ln_cross", f"{prefix}_context_Wo")
        ffn(ours, f"{prefix}_ffn", layer["ffn"])
    if pre:
        for stack in ("encoder", "decoder"):
            layer_norm(f"{stack}.final_ln", f"{stack}_top", "")
    take.leftovers()
    return out


# ----------------------------------------------------------------------------- vocabulary, shortlist
def read_vocab(spm_path: Path) -> tuple[list[str], dict[str, int]]:
    """(pieces in id order, {"eos", "unk"} ids) of Marian's sentencepiece vocabulary."""
    import sentencepiece

    if spm_path.suffix != ".spm" and not spm_path.name.endswith(".model"):
        raise MarianNpzError(f"{spm_path}: expected a sentencepiece vocabulary (.spm); Marian's YAML / text "
                             f"vocabularies are not read")
    try:
        sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_path))
    except (OSError, RuntimeError) as err:
        raise MarianNpzError(f"{spm_path}: not a sentencepiece model ({str(err).splitlines()[0]})") from None
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if sp.eos_id() < 0 or sp.unk_id() < 0:
        raise MarianNpzError(f"{spm_path}: no eos or unk piece (Marian needs both)")
    if START_PIECE in pieces:
        raise MarianNpzError(f"{spm_path}: already has a piece {START_PIECE!r}, the name of the decoder-start id "
                             f"this reader appends")
    return pieces, {"eos": sp.eos_id(), "unk": sp.unk_id()}


def read_lexical_shortlist(path: Path, pieces: list[str], first: int, best: int, tokens: dict,
                           vocab_size: int, shared: bool = True) -> Shortlist:
    """Marian's text lexical shortlist ("target source prob" lines) as our Shortlist.

    shared: Marian also makes every source id a candidate when source and target use
    the same vocabulary file (translator.h passes vocabs.front() == vocabs.back()), the
    case of one .spm for both sides: each source id is then appended to its own row
    (probability 0, after its BEST targets)."""
    index = {p: i for i, p in enumerate(pieces)}
    unk = tokens["unk"]
    rows: list[dict[int, float]] = [dict() for _ in range(vocab_size)]
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) != 3:
                    raise MarianNpzError(f"{path}: line {n}: {len(fields)} fields (expected: target source prob)")
                trg, src, prob = fields
                if src == "NULL" or trg == "NULL":
                    continue
                try:
                    p = float(prob)
                except ValueError:
                    raise MarianNpzError(f"{path}: line {n}: probability {prob!r} is not a number") from None
                s, t = index.get(src, unk), index.get(trg, unk)  # Marian maps unknown pieces to unk
                rows[s][t] = max(rows[s].get(t, 0.0), p)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise MarianNpzError(f"{path}: truncated or damaged gzip file ({err or 'ends early'})") from None
    except UnicodeDecodeError as err:
        raise MarianNpzError(f"{path}: not valid UTF-8 at byte {err.start} of a line") from None
    except OSError as err:
        raise MarianNpzError(f"{path}: {err.strerror or err}") from None
    targets, probs, indptr = [], [], [0]
    for row in rows:
        # Marian keeps prob > 0 (threshold 0), best first; ties: its std::greater on (prob, id).
        ranked = sorted(((p, t) for t, p in row.items() if p > 0), reverse=True)[:best]
        if shared and len(indptr) - 1 not in {t for _, t in ranked}:
            ranked.append((0.0, len(indptr) - 1))
        targets += [t for _, t in ranked]
        probs += [min(p, 1.0) for p, _ in ranked]
        indptr.append(len(targets))
    frequent = sorted(set(range(min(first, vocab_size))) | {tokens["unk"], tokens["eos"]})
    return Shortlist(vocab_size + 1, frequent, indptr + [indptr[-1]], targets, probs,
                     best=max(best + shared, 1), first_fill_id=min(first, vocab_size))


# ----------------------------------------------------------------------------- entry point
def from_marian_npz(npz: str | os.PathLike, vocab: str | os.PathLike, out_dir: str | os.PathLike, *,
                    shortlist: tuple[str | os.PathLike, int, int] | None = None, allow_unk: bool = False,
                    force: bool = False) -> Path:
    """Write a float32 pyfastdec model directory for a Marian .npz + .spm; returns OUT_DIR."""
    npz, vocab, out = Path(npz), Path(vocab), Path(out_dir)
    check_output(out, npz, vocab, *([Path(shortlist[0])] if shortlist is not None else []), force=force)
    pieces, tokens = read_vocab(vocab)
    arrays, options = read_npz(npz)
    config, _ = model_config(options, len(pieces), str(npz), allow_unk, tokens)
    tensors = map_tensors(arrays, config, str(npz))
    sl = None
    if shortlist is not None:
        lex, first, best = shortlist
        sl = read_lexical_shortlist(Path(lex), pieces, int(first), int(best), tokens, len(pieces))
    with staged_dir(out) as tmp:
        safetensors_io.save_file(tmp / WEIGHTS_FILE, tensors, metadata={"format": "fastdec", "version": "1"})
        shutil.copyfile(vocab, tmp / SOURCE_SPM_FILE)
        shutil.copyfile(vocab, tmp / TARGET_SPM_FILE)
        ids = {p: i for i, p in enumerate(pieces)}
        ids[START_PIECE] = len(pieces)
        (tmp / VOCAB_FILE).write_text(json.dumps(ids, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
        if sl is not None:  # before the checksum, which must list it
            sl.save(tmp / SHORTLIST_FILE)
        config["checksum"] = directory_checksums(tmp, config)
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        ModelDir.load(tmp)  # what is renamed into place loads
    return out
