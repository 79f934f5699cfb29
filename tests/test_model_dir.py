"""Model directories on the inference side: pyfastdec.model_dir (the safetensors reader and
writer on their own: test_safetensors_io.py).

Directories are built here with numpy weights and a sentencepiece model trained on
synthetic sentences, so nothing but the cross-check against export.modeling needs torch.
Every refusal is checked for its message (file, field or tensor, what is wrong), and a
valid model.safetensors is truncated and bit-flipped to check that damage is always
refused cleanly: a ValueError, never another exception, a crash or a hang.
"""
from __future__ import annotations

import copy
import io
import json
import os
import random
import re
import shutil
import signal
import struct
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import sentencepiece

from pyfastdec.model_dir import safetensors_io
from pyfastdec.model_dir import (ModelDir, ModelDirError, expected_tensors, parse_config,
                                 quantized_linears)

VOCAB = 60
TOKENS = {"pad": 0, "unk": 1, "bos": 2, "eos": 3, "mask": 4}
# Per-layer shapes differ on purpose: pruned models have different heads and FFN sizes.
ENCODER_LAYERS = [{"heads": 2, "ffn": 12}, {"heads": 1, "ffn": 8}]
DECODER_LAYERS = [{"heads": 1, "ffn": 10}, {"heads": 3, "ffn": 6}]
BASE_CONFIG = {
    "format": "fastdec", "version": 1, "arch": "transformer",
    "d_model": 8, "head_dim": 4, "vocab_size": VOCAB, "norm": "pre", "activation": "relu",
    "encoder": {"layers": ENCODER_LAYERS},
    "decoder": {"self": "attention", "layers": DECODER_LAYERS},
    "tokens": TOKENS, "max_source_len": 32, "quantization": None,
}
VARIANTS = {
    "attention-pre": {},
    "attention-post": {"norm": "post"},
    "ssru-pre": {"decoder": {"self": "ssru", "layers": DECODER_LAYERS}},
    "ssru-post": {"decoder": {"self": "ssru", "layers": DECODER_LAYERS}, "norm": "post"},
    "int8-attention": {"int8": True},
    "int8-ssru-post": {"decoder": {"self": "ssru", "layers": DECODER_LAYERS}, "norm": "post", "int8": True},
    "nat-drafter": {"arch": "nat-drafter", "block_size": 4},
}
WORDS = ("the a one two three four five red blue green yellow small big old new house tree river road car boat "
         "bird fish horse cat dog child woman man street park garden window kitchen morning evening "
         "walks runs sits sees finds reads writes plays jumps sleeps near under over with and quickly slowly").split()


# ----------------------------------------------------------------------------- builders
def train_spm(words: list[str], seed: int = 0) -> bytes:
    """A VOCAB-piece sentencepiece model over random sentences of `words`, with
    pad/unk/bos/eos = 0..3 and <mask> = 4."""
    rng = random.Random(seed)
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) + " ." for _ in range(200)]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, model_type="unigram", vocab_size=VOCAB,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, user_defined_symbols=["<mask>"],
        character_coverage=1.0, num_threads=1, minloglevel=2)
    return model.getvalue()


@pytest.fixture(scope="session")
def spm_path(tmp_path_factory) -> Path:
    """A 60-piece sentencepiece model with pad/unk/bos/eos = 0..3 and <mask> = 4."""
    path = tmp_path_factory.mktemp("spm") / "spm.model"
    path.write_bytes(train_spm(list(WORDS)))
    return path


def make_config(int8: bool = False, **changes) -> dict:
    """BASE_CONFIG with top-level fields replaced; int8=True adds a valid quantization object."""
    config = copy.deepcopy(BASE_CONFIG)
    config.update(copy.deepcopy(changes))
    if int8:
        linears = quantized_linears(parse_config(config))
        config["quantization"] = {
            "weights": "int8", "weight_scale": "per_output_channel", "activations": "int8_static_per_tensor",
            "activation_scales": {name: 10.0 + i for i, name in enumerate(linears)},
            "calibration": {"data": "synthetic", "sentences": 8, "batch_size": 4},
        }
    return config


def random_tensors(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, (dtype, shape) in expected_tensors(parse_config(config)).items():
        if dtype == np.int8:
            out[name] = rng.integers(-127, 128, size=shape, dtype=np.int8)
        elif name.endswith(".weight_scale"):
            out[name] = rng.uniform(1e-3, 2e-2, size=shape).astype(np.float32)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def write_dir(path: Path, config: dict, spm: Path, tensors: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    safetensors_io.save_file(path / "model.safetensors", random_tensors(config) if tensors is None else tensors,
                             metadata={"format": "fastdec", "version": "1"})
    shutil.copyfile(spm, path / "spm.model")
    return path


def refused(path: Path, message_regex: str) -> None:
    with pytest.raises(ModelDirError, match=message_regex):
        ModelDir.load(path)


def backed_by_mmap(array: np.ndarray) -> bool:
    base = array
    while base is not None:
        if isinstance(base, np.memmap):
            return True
        base = getattr(base, "base", None)
    return False


# ----------------------------------------------------------------------------- valid directories
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_valid_directory_loads_zero_copy(variant, spm_path, tmp_path):
    config = make_config(**VARIANTS[variant])
    written = random_tensors(config, seed=1)
    d = write_dir(tmp_path / variant, config, spm_path, written)
    model = ModelDir.load(d)

    assert model.path == d and model.spm_path == d / "spm.model"
    cfg = model.config
    assert (cfg.arch, cfg.norm, cfg.vocab_size) == (config["arch"], config["norm"], VOCAB)
    assert cfg.decoder_self == config["decoder"]["self"]
    assert [(layer.heads, layer.ffn) for layer in cfg.encoder_layers] == [(2, 12), (1, 8)]
    assert [(layer.heads, layer.ffn) for layer in cfg.decoder_layers] == [(1, 10), (3, 6)]
    assert cfg.tokens == TOKENS
    assert cfg.block_size == config.get("block_size")
    assert (cfg.quantization is not None) == bool(config["quantization"])
    if cfg.quantization:
        assert cfg.quantization.activation_scales == config["quantization"]["activation_scales"]

    assert list(model.tensors) and set(model.tensors) == set(written)
    for name, array in model.tensors.items():
        assert array.dtype == written[name].dtype and array.shape == written[name].shape, name
        np.testing.assert_array_equal(array, written[name], err_msg=name)
        assert backed_by_mmap(array) and not array.flags.writeable and not array.flags.owndata, name
    with pytest.raises(ValueError):
        model.tensors["embed.weight"][0, 0] = 1.0


def test_expected_table_follows_format_md():
    """Spot checks written out by hand from export/FORMAT.md (not derived from the code)."""
    plain = expected_tensors(parse_config(make_config()))
    f32 = np.dtype("float32")
    assert plain["embed.weight"] == (f32, (VOCAB, 8))
    assert plain["output.bias"] == (f32, (VOCAB,))
    assert plain["encoder.layers.0.self_attn.q.weight"] == (f32, (2 * 4, 8))
    assert plain["encoder.layers.1.self_attn.o.weight"] == (f32, (8, 1 * 4))
    assert plain["encoder.layers.0.ffn.fc1.weight"] == (f32, (12, 8))
    assert plain["encoder.layers.1.ffn.fc2.weight"] == (f32, (8, 8))
    assert plain["decoder.layers.1.self_attn.v.bias"] == (f32, (3 * 4,))
    assert plain["decoder.layers.1.cross_attn.o.weight"] == (f32, (8, 3 * 4))
    assert plain["decoder.layers.0.ffn.fc2.weight"] == (f32, (8, 10))
    assert plain["decoder.final_ln.bias"] == (f32, (8,))
    # 2 + per encoder layer 4*2 + 2 + 4 + 2, final_ln 2; per decoder layer 8 + 2 + 8 + 2 + 4 + 2, final_ln 2
    assert len(plain) == 2 + 2 * 16 + 2 + 2 * 26 + 2

    ssru_post = expected_tensors(parse_config(make_config(**VARIANTS["ssru-post"])))
    assert ssru_post["decoder.layers.0.ssru.w.weight"] == (f32, (8, 8))
    assert ssru_post["decoder.layers.0.ssru.wf.bias"] == (f32, (8,))
    assert "decoder.layers.0.ssru.w.bias" not in ssru_post  # SSRU's W has no bias
    assert not any("final_ln" in n or "self_attn" in n and n.startswith("decoder") for n in ssru_post)
    assert len(ssru_post) == 2 + 2 * 16 + 2 * (3 + 2 + 8 + 2 + 4 + 2)

    q = expected_tensors(parse_config(make_config(int8=True)))
    i8 = np.dtype("int8")
    assert q["encoder.layers.0.self_attn.k.weight"] == (i8, (8, 8))
    assert q["encoder.layers.0.self_attn.k.weight_scale"] == (f32, (8,))
    assert q["decoder.layers.1.ffn.fc1.weight"] == (i8, (6, 8))
    assert q["decoder.layers.1.ffn.fc1.weight_scale"] == (f32, (6,))
    assert q["decoder.layers.1.ffn.fc1.bias"] == (f32, (6,))
    assert q["embed.weight"] == (f32, (VOCAB, 8))  # no quantization.embedding: stored float32
    assert "embed.weight_scale" not in q
    assert q["decoder.layers.0.ln_cross.weight"] == (f32, (8,))
    assert len(q) == len(plain) + len(quantized_linears(parse_config(make_config())))
    assert len(quantized_linears(parse_config(make_config()))) == 2 * 6 + 2 * 10

    stored = make_config(int8=True)
    stored["quantization"]["embedding"] = "int8_per_row"
    e = expected_tensors(parse_config(stored))
    assert e["embed.weight"] == (i8, (VOCAB, 8))
    assert e["embed.weight_scale"] == (f32, (VOCAB,))
    assert len(e) == len(q) + 1


# ----------------------------------------------------------------------------- refusals: config.json
def _drop(*keys):
    def edit(c):
        obj = c
        for k in keys[:-1]:
            obj = obj[k]
        del obj[keys[-1]]
    return edit


def _set(value, *keys):
    def edit(c):
        obj = c
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = value
    return edit


CONFIG_CASES = [
    ("wrong-version", _set(2, "version"), r"version: unsupported version 2 \(this pyfastdec reads 1\)$"),
    ("version-string", _set("1", "version"), r"version: \"1\" \(expected the integer 1\)"),
    ("wrong-format", _set("marian", "format"), r"format: \"marian\" \(expected \"fastdec\"\)"),
    ("missing-field", _drop("head_dim"), r"head_dim: missing \(expected a positive integer\)"),
    ("missing-nested-field", _drop("decoder", "self"), r"decoder\.self: missing \(expected \"attention\" or \"ssru\"\)"),
    ("missing-quantization", _drop("quantization"), r"quantization: missing \(expected null or"),
    ("unknown-field", _set(1, "dropout"), r"dropout: unknown field"),
    ("unknown-arch", _set("blockwise", "arch"), r"arch: \"blockwise\" \(expected \"transformer\" or \"nat-drafter\"\)"),
    ("unknown-norm", _set("sandwich", "norm"), r"norm: \"sandwich\" \(expected \"pre\" or \"post\"\)"),
    ("unknown-self", _set("lstm", "decoder", "self"), r"decoder\.self: \"lstm\""),
    ("activation", _set("tanh", "activation"), r"activation: \"tanh\" \(expected \"relu\" or \"swish\" or \"gelu\"\)"),
    ("d-model-string", _set("8", "d_model"), r"d_model: \"8\" \(expected a positive integer\)"),
    ("d-model-odd", _set(7, "d_model"), r"d_model: 7 \(expected an even width"),
    ("heads-zero", _set(0, "decoder", "layers", 1, "heads"), r"decoder\.layers\[1\]\.heads: 0 \(expected a positive integer\)"),
    ("ffn-float", _set(8.0, "encoder", "layers", 0, "ffn"), r"encoder\.layers\[0\]\.ffn: 8\.0 \(expected a positive integer\)"),
    ("heads-bool", _set(True, "encoder", "layers", 1, "heads"), r"encoder\.layers\[1\]\.heads: true"),
    ("no-layers", _set([], "encoder", "layers"), r"encoder\.layers: \[\] \(expected a non-empty list"),
    ("token-duplicate", _set(2, "tokens", "eos"), r"tokens\.eos: id 2 is also tokens\.bos \(expected distinct ids\)"),
    ("token-too-big", _set(VOCAB, "tokens", "mask"), rf"tokens\.mask: id {VOCAB} \(expected < vocab_size {VOCAB}\)"),
    ("token-negative", _set(-1, "tokens", "pad"), r"tokens\.pad: -1 \(expected an integer >= 0\)"),
    ("token-missing", _drop("tokens", "eos"), r"tokens\.eos: missing"),
    ("block-size-on-transformer", _set(4, "block_size"), r"block_size: 4 \(expected no block_size"),
    ("quantization-not-object", _set("int8", "quantization"), r"quantization: \"int8\" \(expected null or"),
]


@pytest.mark.parametrize("edit,message", [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_refuses_bad_config(edit, message, spm_path, tmp_path):
    config = make_config()
    d = write_dir(tmp_path / "m", config, spm_path)
    edit(config)
    (d / "config.json").write_text(json.dumps(config))
    refused(d, "^" + re.escape(str(d / "config.json")) + ": " + message)


def test_refuses_drafter_without_block_size_or_with_ssru(spm_path, tmp_path):
    config = make_config(arch="nat-drafter")
    d = write_dir(tmp_path / "m", make_config(arch="nat-drafter", block_size=3), spm_path)
    (d / "config.json").write_text(json.dumps(config))
    refused(d, re.escape(f"{d / 'config.json'}: block_size: missing (expected a positive integer)"))
    config["block_size"] = 3
    config["decoder"]["self"] = "ssru"
    (d / "config.json").write_text(json.dumps(config))
    refused(d, re.escape(f"{d / 'config.json'}: decoder.self: \"ssru\" (expected \"attention\" for arch \"nat-drafter\")"))


QUANT_CASES = [
    ("scale-missing", lambda q: q["activation_scales"].pop("decoder.layers.1.ffn.fc2"),
     r"quantization\.activation_scales\.decoder\.layers\.1\.ffn\.fc2: missing"),
    ("scale-nan", lambda q: q["activation_scales"].update({"encoder.layers.0.self_attn.q": float("nan")}),
     r"quantization\.activation_scales\.encoder\.layers\.0\.self_attn\.q: NaN \(expected a finite number from 0\.0001 to 1e\+06"),
    ("scale-zero", lambda q: q["activation_scales"].update({"encoder.layers.1.ffn.fc1": 0}),
     r"quantization\.activation_scales\.encoder\.layers\.1\.ffn\.fc1: 0 \(expected a finite number from 0\.0001 to 1e\+06"),
    ("scale-unknown-linear", lambda q: q["activation_scales"].update({"decoder.layers.0.ssru.w": 3.0}),
     r"quantization\.activation_scales\.decoder\.layers\.0\.ssru\.w: not a quantized linear of this config"),
    ("weights-int4", lambda q: q.update({"weights": "int4"}), r"quantization\.weights: \"int4\" \(expected \"int8\"\)"),
    ("no-activation-scales", lambda q: q.pop("activation_scales"), r"quantization\.activation_scales: missing"),
]


@pytest.mark.parametrize("edit,message", [c[1:] for c in QUANT_CASES], ids=[c[0] for c in QUANT_CASES])
def test_refuses_bad_quantization(edit, message, spm_path, tmp_path):
    config = make_config(int8=True)
    d = write_dir(tmp_path / "m", config, spm_path)
    edit(config["quantization"])
    (d / "config.json").write_text(json.dumps(config))
    refused(d, "^" + re.escape(str(d / "config.json")) + ": " + message)


def test_refuses_config_that_is_not_json(spm_path, tmp_path):
    d = write_dir(tmp_path / "m", make_config(), spm_path)
    (d / "config.json").write_text('{"format": "fastdec", ')
    refused(d, re.escape(f"{d / 'config.json'}: (file): not valid JSON"))
    (d / "config.json").write_bytes(b'{"format": "fast\xffdec"}')
    refused(d, re.escape(f"{d / 'config.json'}: (file): not valid UTF-8"))


# ----------------------------------------------------------------------------- refusals: files
def test_refuses_missing_directory_and_files(spm_path, tmp_path):
    refused(tmp_path / "nowhere", re.escape(f"{tmp_path / 'nowhere'}: (directory): no such directory"))
    d = write_dir(tmp_path / "m", make_config(), spm_path)
    refused(d / "config.json", re.escape(f"{d / 'config.json'}: (directory): not a directory"))
    for name in ("spm.model", "model.safetensors", "config.json"):  # later files first: each is checked in turn
        (d / name).unlink()
        refused(d, "^" + re.escape(f"{d / name}: (file): missing"))


# ----------------------------------------------------------------------------- refusals: tensors
def test_refuses_missing_tensor(spm_path, tmp_path):
    config = make_config()
    tensors = random_tensors(config)
    del tensors["decoder.layers.1.ln_ffn.bias"]
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    refused(d, "^" + re.escape(f"{d / 'model.safetensors'}: decoder.layers.1.ln_ffn.bias: missing tensor (expected F32 [8];"))


def test_refuses_unexpected_tensor(spm_path, tmp_path):
    # A final layer norm is part of a pre-norm model only.
    config = make_config(norm="post")
    tensors = random_tensors(config)
    tensors["encoder.final_ln.weight"] = np.ones(8, np.float32)
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    refused(d, "^" + re.escape(f"{d / 'model.safetensors'}: encoder.final_ln.weight: unexpected tensor (expected only "
                               "the tensors of arch transformer, decoder.self attention, norm post"))


def test_refuses_wrong_shape(spm_path, tmp_path):
    config = make_config()
    tensors = random_tensors(config)
    # Layer 1 of the decoder has 3 heads: q is [3*4, 8]; a writer that assumed uniform layers would get it wrong.
    tensors["decoder.layers.1.self_attn.q.weight"] = np.zeros((4, 8), np.float32)
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    refused(d, "^" + re.escape(f"{d / 'model.safetensors'}: decoder.layers.1.self_attn.q.weight: "
                               "shape [4, 8] (expected [12, 8] from config.json decoder.layers[1].heads 3 x head_dim 4)"))


@pytest.mark.parametrize("int8", [False, True], ids=["float", "int8"])
def test_refuses_wrong_dtype(int8, spm_path, tmp_path):
    config = make_config(int8=int8)
    tensors = random_tensors(config)
    name = "encoder.layers.0.ffn.fc1.weight"
    # A float model with a float64 weight; an int8 model whose linear was left in float32.
    tensors[name] = tensors[name].astype(np.float32 if int8 else np.float64)
    d = write_dir(tmp_path / "m", config, spm_path, tensors)
    got, want = ("F32", "I8") if int8 else ("F64", "F32")
    refused(d, "^" + re.escape(f"{d / 'model.safetensors'}: {name}: dtype {got} (expected {want})"))


def test_refuses_truncated_weights(spm_path, tmp_path):
    d = write_dir(tmp_path / "m", make_config(), spm_path)
    weights = d / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-5])
    refused(d, "^" + re.escape(f"{weights}: ")
            + r"\S+: data_offsets \[\d+, \d+\] end beyond the \d+-byte data section \(file truncated\?\)")


def test_refuses_bad_header_json(spm_path, tmp_path):
    d = write_dir(tmp_path / "m", make_config(), spm_path)
    weights = d / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    colon = raw.index(b'"dtype":') + len(b'"dtype"')
    raw[colon] = ord("#")  # a structural byte of the JSON header, length unchanged
    weights.write_bytes(bytes(raw))
    refused(d, "^" + re.escape(f"{weights}: header: not valid JSON"))


def test_refuses_spm_that_does_not_match_config(spm_path, tmp_path):
    config = make_config(vocab_size=64)
    d = write_dir(tmp_path / "size", config, spm_path)
    refused(d, "^" + re.escape(f"{d / 'spm.model'}: vocabulary size: 60 pieces (expected vocab_size 64 of {d / 'config.json'})"))

    d = write_dir(tmp_path / "ids", make_config(tokens=dict(TOKENS, bos=3, eos=2)), spm_path)
    refused(d, "^" + re.escape(f"{d / 'spm.model'}: bos id: 2 (expected tokens.bos = 3 of {d / 'config.json'})"))

    d = write_dir(tmp_path / "mask", make_config(tokens=dict(TOKENS, mask=7)), spm_path)
    refused(d, "^" + re.escape(f"{d / 'spm.model'}: mask id: piece 7 is "))

    d = write_dir(tmp_path / "garbage", make_config(), spm_path)
    (d / "spm.model").write_bytes(b"not a sentencepiece model")
    refused(d, "^" + re.escape(f"{d / 'spm.model'}: (file): not a sentencepiece model"))


# ----------------------------------------------------------------------------- fuzzing
@contextmanager
def time_limit(seconds: float):
    """Turn a hang into a failure (SIGALRM, main thread on POSIX); elsewhere only time it."""
    use_alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if use_alarm:
        def on_alarm(_signum, _frame):
            raise TimeoutError(f"load took more than {seconds} s")
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def load_damaged(d: Path, raw: bytes) -> str | None:
    """Load d with model.safetensors = raw; None if it loads, else the refusal message.
    Any exception other than ModelDirError, or a load over 1 s, fails the test."""
    weights = d / "model.safetensors"
    tmp = d / "model.safetensors.tmp"
    tmp.write_bytes(raw)
    # A fresh inode: views of an earlier successful load keep mapping the old file intact.
    os.replace(tmp, weights)
    start = time.perf_counter()
    with time_limit(5.0):
        try:
            ModelDir.load(d)
            message = None
        except ModelDirError as err:
            message = str(err)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"load took {elapsed:.2f} s"
    return message


@pytest.fixture()
def fuzz_dir(spm_path, tmp_path):
    d = write_dir(tmp_path / "m", make_config(**VARIANTS["int8-ssru-post"]), spm_path)
    raw = (d / "model.safetensors").read_bytes()
    header_end = 8 + struct.unpack("<Q", raw[:8])[0]
    return d, raw, header_end


def test_fuzz_truncation_is_always_refused(fuzz_dir):
    d, raw, header_end = fuzz_dir
    rng = random.Random(1234)
    positions = set(range(0, 9))                                              # every byte of the length field
    positions |= {8 + (header_end - 8) * i // 24 for i in range(24)}          # across the JSON header
    positions |= {header_end - 1, header_end}
    positions |= {rng.randrange(header_end + 1, len(raw)) for _ in range(16)} # the data section
    positions.add(len(raw) - 1)
    assert len(positions) >= 45
    for cut in sorted(positions):
        message = load_damaged(d, raw[:cut])
        # Any cut leaves the tensors short of the file, so it must be refused, naming it.
        assert message is not None, f"truncation at {cut} of {len(raw)} bytes was accepted"
        assert message.startswith(str(d / "model.safetensors") + ": ") and "truncated" in message, (cut, message)


def test_fuzz_bit_flips_are_refused_or_harmless(fuzz_dir):
    d, raw, header_end = fuzz_dir
    rng = random.Random(4321)
    # Every bit of the length field; then 300 seeded flips, two thirds in the JSON header,
    # where flips change meaning, the rest in the data, where they only change weights.
    flips = [(byte, bit) for byte in range(8) for bit in range(8)]
    flips += [(rng.randrange(8, header_end), rng.randrange(8)) for _ in range(200)]
    flips += [(rng.randrange(header_end, len(raw)), rng.randrange(8)) for _ in range(100)]
    refusals = loads = 0
    for byte, bit in flips:
        damaged = bytearray(raw)
        damaged[byte] ^= 1 << bit
        message = load_damaged(d, bytes(damaged))
        if message is None:
            assert byte >= 8, f"flipping bit {bit} of the length field was accepted"
            loads += 1
        else:
            refusals += 1
            assert message.startswith(str(d / "model.safetensors") + ": "), message
    assert loads + refusals == 364
    # Both outcomes must occur, or the fuzz exercised nothing: data flips load (this
    # directory has no checksum) unless they make a value non-finite or out of bounds,
    # every length-field flip must be refused. tests/test_model_integrity.py checks that
    # a checksummed directory refuses every data corruption.
    assert loads >= 100 and refusals >= 64 + 150, (loads, refusals)


# ----------------------------------------------------------------------------- cross-check with export/
def test_tensor_table_matches_export_modeling(spm_path, tmp_path):
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not importable: export.modeling (the training-side model) needs it")
    from export.modeling import ModelConfig as ExportConfig
    from export.modeling import Seq2Seq
    from export.writer import quantized_linears as export_quantized_linears
    from export.writer import write_model_dir

    torch.set_num_threads(1)
    for variant in ("attention-pre", "attention-post", "ssru-pre", "ssru-post", "nat-drafter"):
        config = make_config(**VARIANTS[variant])
        torch.manual_seed(0)
        model = Seq2Seq(ExportConfig.from_json(config))
        state = {name: (np.dtype("float32"), tuple(t.shape)) for name, t in model.state_dict().items()}
        assert expected_tensors(parse_config(config)) == state, variant
        assert quantized_linears(parse_config(config)) == export_quantized_linears(model), variant

        # The torch writer's directories (float and int8) load here with the same weights.
        for int8 in (False, True):
            scales = {name: 20.0 for name in export_quantized_linears(model)} if int8 else None
            out = write_model_dir(model, spm_path, tmp_path / f"{variant}-{int8}", act_scales=scales, int8=int8)
            loaded = ModelDir.load(out)
            assert (loaded.config.quantization is not None) == int8
            embed = model.state_dict()["embed.weight"].numpy()
            got_embed = loaded.tensors["embed.weight"]
            if int8:  # stored int8 per row (quantization.embedding): within half a step of each row
                scale = loaded.tensors["embed.weight_scale"]
                err = np.abs(got_embed.astype(np.float32) * scale[:, None] - embed).max(axis=1)
                assert (err <= scale * 0.5 * (1 + 1e-6)).all()
            else:
                np.testing.assert_array_equal(got_embed, embed)
            fc1 = "decoder.layers.1.ffn.fc1"
            want = model.state_dict()[f"{fc1}.weight"].numpy()
            got = loaded.tensors[f"{fc1}.weight"]
            if int8:
                got = got.astype(np.float32) * loaded.tensors[f"{fc1}.weight_scale"][:, None]
                assert np.abs(got - want).max() <= np.abs(want).max() / 127
            else:
                np.testing.assert_array_equal(got, want)
