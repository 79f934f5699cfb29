"""`python -m pyfastdec.convert marian`: Hugging Face MarianMTModel checkpoints run on the
native engine exactly as transformers runs them.

The checkpoints are random-initialised (tests/marian_checkpoints.py), with weights drawn
wider than HF's default (std 0.2, not 0.02) and a bias toward EOS, so greedy outputs
differ between sentences and end at varied lengths: a degenerate model repeating one
token would agree with anything. The reference is `model.generate(num_beams=1,
do_sample=False)` with forced_eos_token_id=None (HF otherwise replaces the last token at
max_new_tokens by EOS; our greedy stops there instead, see decoding/greedy.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from marian_checkpoints import MULTI30K, build_tokenizer_files, read_lines, save_marian  # noqa: E402

from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.convert import main as convert_main  # noqa: E402
from pyfastdec.convert_marian import ConvertError, convert_marian  # noqa: E402
from pyfastdec.decoding.beam import beam_search  # noqa: E402
from pyfastdec.decoding.greedy import greedy  # noqa: E402
from pyfastdec.model_dir import ModelDir  # noqa: E402
from pyfastdec.text import load_tokenizer  # noqa: E402

pytestmark = pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"shared data missing: {MULTI30K}")

MAX_NEW = 40
SENTENCES = 60


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(hf_dir, hf model, MarianTokenizer, converted float32 directory)."""
    root = tmp_path_factory.mktemp("marian")
    hf_dir = root / "hf"
    vocab = build_tokenizer_files(hf_dir, 400, 500, lines=5000)
    model, tokenizer = save_marian(hf_dir, vocab, d_model=32, heads=4, ffn=64, layers=2, activation="swish",
                                   init_std=0.2, eos_bias=2.0)
    out = convert_marian(hf_dir, root / "fp32")
    return hf_dir, model, tokenizer, out


def hf_generate(model, tokenizer, sentences, max_new=MAX_NEW, **kw) -> list[list[int]]:
    """HF's output ids without the start token, EOS and padding."""
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=max_new, forced_eos_token_id=None, **kw)
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    rows = []
    for row in out.tolist():
        ids = row[1:]
        rows.append(ids[:ids.index(eos)] if eos in ids else [t for t in ids if t != pad])
    return rows


def our_sources(model_dir: Path, sentences: list[str]) -> tuple[ModelDir, list[list[int]]]:
    md = ModelDir.load(model_dir)
    tokenizer = load_tokenizer(md)
    return md, [tokenizer.encode(s) + [md.config.tokens["eos"]] for s in sentences]


def test_tokenizer_matches_marian_tokenizer(tiny):
    hf_dir, model, tokenizer, out = tiny
    sentences = read_lines("val.en.gz", 200) + [">>deu<< A dog.", "Ünïcödé ☃ text", ""]
    _, ours = our_sources(out, sentences)
    assert ours == [tokenizer(s)["input_ids"] for s in sentences]
    md = ModelDir.load(out)
    ours_tok = load_tokenizer(md)
    targets = read_lines("val.de.gz", 50)
    ids = [ours_tok.encode_target(t) for t in targets]
    # Decoding with the target model gives the target text back (up to unknown pieces).
    assert sum(ours_tok.decode(i) == t for i, t in zip(ids, targets)) >= 45


def test_config_fields(tiny):
    _, model, _, out = tiny
    config = json.loads((out / "config.json").read_text())
    assert config["norm"] == "post" and config["activation"] == "swish" and config["positions"] == "halves"
    assert config["tokenizer"] == "marian" and config["suppress"] == [model.config.pad_token_id]
    assert config["tokens"]["bos"] == config["tokens"]["pad"] == model.config.pad_token_id
    assert "mask" not in config["tokens"] and "layer_norm_eps" not in config  # torch's default 1e-5


def test_float32_greedy_equals_hf_generate(tiny):
    hf_dir, model, tokenizer, out = tiny
    sentences = read_lines("test_2016_flickr.en.gz", SENTENCES)
    expected = hf_generate(model, tokenizer, sentences, num_beams=1)
    md, sources = our_sources(out, sentences)
    got, _ = greedy(NativeBackend(md, threads=1, shortlist=False), sources, max_len=MAX_NEW)
    assert got == expected
    # The comparison means something: outputs differ and some end before the limit.
    assert len({tuple(o) for o in expected}) >= 20
    assert 10 <= sum(len(o) < MAX_NEW for o in expected) < len(expected)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_other_activations(tmp_path, tiny, activation):
    hf_dir = tiny[0]
    new = tmp_path / "hf"
    shutil.copytree(hf_dir, new)
    vocab = json.loads((new / "vocab.json").read_text())
    model, tokenizer = save_marian(new, vocab, d_model=32, heads=4, ffn=64, layers=2, activation=activation,
                                   init_std=0.2, eos_bias=2.0, seed=1)
    out = convert_marian(new, tmp_path / "out")
    sentences = read_lines("val.en.gz", 20)
    md, sources = our_sources(out, sentences)
    got, _ = greedy(NativeBackend(md, threads=1, shortlist=False), sources, max_len=MAX_NEW)
    assert got == hf_generate(model, tokenizer, sentences, num_beams=1)


def test_translator_text_equals_hf_decode(tiny):
    from pyfastdec.api import Translator

    hf_dir, model, tokenizer, out = tiny
    sentences = read_lines("val.en.gz", 20)
    # Translator's length limit is 2 * len(source ids + EOS) + 10 (decoding/limits.py).
    expected = [tokenizer.decode(hf_generate(model, tokenizer, [s], 2 * len(tokenizer(s)["input_ids"]) + 10,
                                             num_beams=1)[0], skip_special_tokens=True, use_source_tokenizer=False)
                for s in sentences]
    translator = Translator(out, compute_type="float32", threads=1)
    assert translator.translate(sentences, algo="greedy") == expected
