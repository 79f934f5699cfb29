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
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from marian_checkpoints import build_tokenizer_files, read_lines, save_marian  # noqa: E402

from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.convert.command import main as convert_main  # noqa: E402
from pyfastdec.convert.hf_marian_import import ConvertError, convert_marian  # noqa: E402
from pyfastdec.decoding.beam import beam_search  # noqa: E402
from pyfastdec.decoding.greedy import greedy  # noqa: E402
from pyfastdec.model_dir import ModelDir  # noqa: E402
from pyfastdec.text import load_tokenizer  # noqa: E402

MAX_NEW = 40
SENTENCES = 60


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(hf_dir, hf model, MarianTokenizer, converted float32 directory)."""
    root = tmp_path_factory.mktemp("marian")
    hf_dir = root / "hf"
    vocab = build_tokenizer_files(hf_dir, 400, 500)
    model, tokenizer = save_marian(hf_dir, vocab, d_model=32, heads=4, ffn=64, layers=2, activation="swish",
                                   init_std=0.2, eos_bias=2.5)
    out = convert_marian(hf_dir, root / "fp32")
    return hf_dir, model, tokenizer, out


@contextmanager
def one_torch_thread():
    """On a loaded 2-core machine torch's thread pool makes generate 25x slower (8 s
    against 0.3 s for beam 4 on 60 sentences of the tiny model)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def hf_generate(model, tokenizer, sentences, max_new=MAX_NEW, **kw) -> list[list[int]]:
    """HF's output ids without the start token, EOS and padding."""
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad(), one_torch_thread():
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
    from pyfastdec.decoding.limits import default_max_len

    # Translator's default length limit, from the source ids + EOS (decoding/limits.py).
    expected = [tokenizer.decode(hf_generate(model, tokenizer, [s], default_max_len(len(tokenizer(s)["input_ids"])),
                                             num_beams=1)[0], skip_special_tokens=True, use_source_tokenizer=False)
                for s in sentences]
    translator = Translator(out, compute_type="float32", threads=1)
    assert translator.translate(sentences, algo="greedy") == expected


def test_int8_greedy_agreement(tiny, tmp_path):
    """int8 (weights per row, activation scales calibrated on 300 Multi30k sentences with
    the mean + 1.1 sigma rule) against HF's float32 greedy: stated agreement >= 75 % of
    sentences identical (measured 0.85 on this random model, whose std-0.2 weights give
    larger activations than trained models)."""
    hf_dir, model, tokenizer, _ = tiny
    calib = tmp_path / "calib.en"
    calib.write_text("\n".join(read_lines("val.en.gz", 300)) + "\n", encoding="utf-8")
    out = tmp_path / "int8"
    assert convert_main(["marian", str(hf_dir), str(out), "--quantize", "int8", "--calibrate", str(calib)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["calibration"]["sentences"] == 300
    sentences = read_lines("test_2016_flickr.en.gz", SENTENCES)
    expected = hf_generate(model, tokenizer, sentences, num_beams=1)
    md, sources = our_sources(out, sentences)
    got, _ = greedy(NativeBackend(md, threads=1, shortlist=False), sources, max_len=MAX_NEW)
    same = sum(a == b for a, b in zip(got, expected)) / len(expected)
    print(f"int8 greedy identical to HF float32: {same:.2f}")
    assert same >= 0.75


def hf_beam(model, tokenizer, sentences, length_penalty, renormalize=False) -> tuple[list[list[int]], list[float]]:
    """HF's beam 4 n-best 4 (num_return_sequences), flattened: ids as hf_generate gives
    them, and sequences_scores."""
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad(), one_torch_thread():
        out = model.generate(**batch, do_sample=False, max_new_tokens=MAX_NEW, forced_eos_token_id=None,
                             num_beams=4, num_return_sequences=4, length_penalty=length_penalty,
                             early_stopping=False, renormalize_logits=renormalize, return_dict_in_generate=True,
                             output_scores=True)
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    rows = []
    for row in out.sequences.tolist():
        ids = row[1:]
        rows.append(ids[:ids.index(eos)] if eos in ids else [t for t in ids if t != pad])
    return rows, out.sequences_scores.tolist()


def our_beam(out: Path, sentences, length_penalty, batch_size: int) -> list:
    """pyfastdec's beam 4 n-best 4 with the hf rule, flattened, in batches of batch_size
    (1: the single-sentence scan, else the vectorised one)."""
    md, sources = our_sources(out, sentences)
    backend = NativeBackend(md, threads=1, shortlist=False)
    hyps = []
    for i in range(0, len(sources), batch_size):
        got, _ = beam_search(backend, sources[i:i + batch_size], beam_size=4, nbest=4, alpha=length_penalty,
                             max_len=MAX_NEW, rule="hf")
        assert all(len(h) == 4 for h in got)
        hyps += [h for nbest in got for h in nbest]
    return hyps


def test_beam4_equals_hf_beam4(tiny):
    """rule="hf" stops as transformers' _beam_search (early_stopping=False) does: HF's
    best hypothesis on every sentence. (The default rule stops at `beam` finished
    hypotheses and agreed on 53 of these 60.)"""
    _, model, tokenizer, out = tiny
    sentences = read_lines("test_2016_flickr.en.gz", SENTENCES)
    expected = hf_generate(model, tokenizer, sentences, num_beams=4, length_penalty=1.0, early_stopping=False)
    md, sources = our_sources(out, sentences)
    hyps, _ = beam_search(NativeBackend(md, threads=1, shortlist=False), sources, beam_size=4, alpha=1.0,
                          max_len=MAX_NEW, rule="hf")
    assert [h[0].tokens for h in hyps] == expected
    # The comparison means something: outputs differ, some end before the limit, some are cut.
    assert len({tuple(o) for o in expected}) >= 20
    assert 10 <= sum(len(o) < MAX_NEW for o in expected) < len(expected)


@pytest.mark.parametrize("length_penalty", [1.0, 0.6, 2.0])
def test_beam4_nbest4_equals_hf_sequences_and_scores(tiny, length_penalty):
    """n-best 4 = HF's num_return_sequences 4: the same four sequences per sentence in the
    same order, at batch 1 and 60, and the same scores. HF bans the pad token
    (bad_words_ids) after its log_softmax, so its default sequences_scores keep the pad's
    probability mass in every log-prob; the engine's suppressed ids get an output bias of
    -inf, so its log-probs are normalised without it: HF with renormalize_logits=True.
    Both ways HF picks these same sequences here; the scores are compared with the
    renormalised ones (the default ones differ by up to 3e-3 on this random model)."""
    _, model, tokenizer, out = tiny
    sentences = read_lines("test_2016_flickr.en.gz", SENTENCES)
    expected, _ = hf_beam(model, tokenizer, sentences, length_penalty)
    renormalised, scores = hf_beam(model, tokenizer, sentences, length_penalty, renormalize=True)
    assert renormalised == expected
    for batch_size in (1, SENTENCES):
        hyps = our_beam(out, sentences, length_penalty, batch_size)
        assert [h.tokens for h in hyps] == expected
        assert [h.finished for h in hyps] == [len(o) < MAX_NEW for o in expected]
        np.testing.assert_allclose([h.score for h in hyps], scores, rtol=0, atol=1e-4)
    # Some n-best lists mix hypotheses cut at the limit with finished ones.
    cut = np.array([len(o) == MAX_NEW for o in expected]).reshape(-1, 4)
    assert (cut.any(axis=1) & ~cut.all(axis=1)).any()


def test_translator_and_cli_beam_rule_hf(tiny, tmp_path, capsys):
    """Translator(beam_rule="hf") and `fastdec translate --beam-rule hf`: HF's beam 4
    n-best 4 ids and texts, and its (renormalised, see above) scores: the API gives the
    sum back from the hf rule's normalisation, which counts no EOS after a hypothesis cut
    at the limit."""
    from pyfastdec.api import Translator
    from pyfastdec.cli import main as cli_main

    _, model, tokenizer, out = tiny
    sentences = read_lines("test_2016_flickr.en.gz", SENTENCES)
    ids, scores = hf_beam(model, tokenizer, sentences, 1.0, renormalize=True)
    translator = Translator(out, compute_type="float32", threads=1)
    sources = [tokenizer(s)["input_ids"][:-1] for s in sentences]  # id input: without EOS
    got = translator.translate(sources, beam_size=4, n_best=4, return_scores=True, max_decoding_length=MAX_NEW,
                               beam_rule="hf")
    assert [o for nbest in got for o, _ in nbest] == ids
    np.testing.assert_allclose([x for nbest in got for _, x in nbest], scores, rtol=0, atol=1e-4)
    scored = translator.translate_scored(sources, beam_size=4, n_best=4, max_decoding_length=MAX_NEW,
                                         beam_rule="hf")
    tokens = [len(o) + (len(o) < MAX_NEW) for o in ids]  # EOS counted where there is one
    assert [h.tokens for nbest in scored for h in nbest] == tokens
    np.testing.assert_allclose([h.logprob for nbest in scored for h in nbest],
                               [x * n for x, n in zip(scores, tokens)], rtol=0, atol=1e-3)
    # The default rule stops earlier on some of these sentences: the option is what changes it.
    default = translator.translate(sentences, beam_size=4, max_decoding_length=MAX_NEW)
    texts = [tokenizer.decode(i, skip_special_tokens=True, use_source_tokenizer=False) for i in ids[::4]]
    assert default != texts
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    assert cli_main(["translate", "-m", str(out), "--threads", "1", "--compute-type", "float32", "--beam-size", "4",
                     "--max-decoding-length", str(MAX_NEW), "--beam-rule", "hf", "-i", str(src), "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines() == texts
    with pytest.raises(ValueError, match=r"beam_rule must be one of 'pyfastdec', 'hf', got 'HF'"):
        translator.translate(sentences[:1], beam_size=4, beam_rule="HF")


# ----------------------------------------------------------------------------- bad input
def _copy(tiny, tmp_path) -> Path:
    new = tmp_path / "hf"
    shutil.copytree(tiny[0], new)
    return new


def _edit_config(hf_dir: Path, **changes) -> None:
    config = json.loads((hf_dir / "config.json").read_text())
    config.update(changes)
    (hf_dir / "config.json").write_text(json.dumps(config))


def _edit_tensors(hf_dir: Path, fn) -> None:
    from pyfastdec.model_dir import safetensors_io

    # Copies: the loaded arrays map the very file rewritten below.
    tensors = {k: np.array(v) for k, v in safetensors_io.load_file(hf_dir / "model.safetensors").items()}
    fn(tensors)
    safetensors_io.save_file(hf_dir / "model.safetensors", tensors)


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "bart"}, r"config\.json: model_type: \"bart\" \(expected \"marian\""),
    ({"scale_embedding": False}, r"config\.json: scale_embedding: false \(expected true"),
    ({"share_encoder_decoder_embeddings": False}, r"config\.json: share_encoder_decoder_embeddings: false"),
    ({"tie_word_embeddings": False}, r"config\.json: tie_word_embeddings: false"),
    ({"normalize_before": True}, r"config\.json: normalize_before: true \(expected false"),
    ({"activation_function": "gelu_new"}, r"config\.json: activation_function: \"gelu_new\" \(expected \"swish\""),
    ({"decoder_attention_heads": 2}, r"config\.json: decoder_attention_heads: 2 \(expected encoder_attention_heads"),
    ({"encoder_layers": 3}, r"model\.safetensors: model\.encoder\.layers\.2\.\S+: missing tensor"),
    ({"decoder_ffn_dim": 48}, r"model\.safetensors: model\.decoder\.layers\.0\.fc1\.weight: shape \[64, 32\] "
                              r"\(expected \[48, 32\]"),
])
def test_refuses_config(tiny, tmp_path, changes, message):
    hf_dir = _copy(tiny, tmp_path)
    _edit_config(hf_dir, **changes)
    out = tmp_path / "out"
    with pytest.raises(ConvertError, match=message):
        convert_marian(hf_dir, out)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["hf"]  # nothing half-written


def test_refuses_missing_and_unshared_tensors(tiny, tmp_path):
    hf_dir = _copy(tiny, tmp_path)
    _edit_tensors(hf_dir, lambda t: t.pop("model.decoder.layers.1.encoder_attn.v_proj.bias"))
    with pytest.raises(ConvertError, match=r"model\.safetensors: model\.decoder\.layers\.1\.encoder_attn\.v_proj\.bias: "
                                           r"missing tensor \(expected \[32\]\)"):
        convert_marian(hf_dir, tmp_path / "out")
    hf_dir = _copy(tiny, tmp_path / "b")

    def untie(t):
        t["lm_head.weight"] = t["model.shared.weight"] + 1.0
    _edit_tensors(hf_dir, untie)
    with pytest.raises(ConvertError, match=r"lm_head\.weight: differs from model\.shared\.weight"):
        convert_marian(hf_dir, tmp_path / "out")
    hf_dir = _copy(tiny, tmp_path / "c")
    _edit_tensors(hf_dir, lambda t: t.update(extra=np.zeros(3, np.float32)))
    with pytest.raises(ConvertError, match=r"model\.safetensors: extra: unexpected tensor"):
        convert_marian(hf_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_refuses_vocabulary_of_other_spm(tiny, tmp_path):
    hf_dir = _copy(tiny, tmp_path)
    vocab = json.loads((hf_dir / "vocab.json").read_text())
    other = {f"piece{i}": i for i in range(len(vocab))}
    other.update({"</s>": 0, "<unk>": 1})
    del other["piece0"], other["piece1"]
    (hf_dir / "vocab.json").write_text(json.dumps(other))
    with pytest.raises(ConvertError, match=r"vocab\.json: \(pieces\): holds 0 of the \d+ pieces of .*source\.spm"):
        convert_marian(hf_dir, tmp_path / "out")
    vocab["</s>"], vocab["<pad>"] = vocab["<pad>"], vocab["</s>"]
    (hf_dir / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ConvertError, match=r"vocab\.json: </s>: id \d+ \(expected tokens\.eos = 0"):
        convert_marian(hf_dir, tmp_path / "out")


def test_cli_errors_and_pytorch_bin(tiny, tmp_path, capsys):
    hf_dir = _copy(tiny, tmp_path)
    assert convert_main(["marian", str(hf_dir), str(tmp_path / "o"), "--calibrate", str(hf_dir / "vocab.json")]) == 2
    assert "--calibrate is for --quantize int8" in capsys.readouterr().err
    # pytorch_model.bin instead of model.safetensors (read with torch): the same directory.
    from pyfastdec.model_dir import safetensors_io

    tensors = safetensors_io.load_file(hf_dir / "model.safetensors")
    torch.save({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}, hf_dir / "pytorch_model.bin")
    (hf_dir / "model.safetensors").unlink()
    from pyfastdec.cli import main as cli_main

    assert cli_main(["convert", "marian", str(hf_dir), str(tmp_path / "o")]) == 0
    ours = safetensors_io.load_file(tmp_path / "o" / "model.safetensors")
    reference = safetensors_io.load_file(tiny[3] / "model.safetensors")
    assert ours.keys() == reference.keys() and all(np.array_equal(ours[k], reference[k]) for k in ours)
    assert convert_main(["marian", str(hf_dir), str(tmp_path / "o")]) == 2  # exists: refused
    assert "already exists" in capsys.readouterr().err


@pytest.mark.slow
def test_opus_mt_shape_float32_greedy_equals_hf(tmp_path):
    """The real OPUS-MT shape: d_model 512, 8 heads, 6 + 6 layers, FFN 2048, 58101 rows
    (sentencepiece models of 2000 pieces per side, as many as the shipped Multi30k sets
    allow, padded with unused pieces; see build_tokenizer_files)."""
    hf_dir = tmp_path / "hf"
    vocab = build_tokenizer_files(hf_dir, 2000, 2000, total=58101)
    assert len(vocab) == 58101
    model, tokenizer = save_marian(hf_dir, vocab, d_model=512, heads=8, ffn=2048, layers=6, activation="swish",
                                   init_std=0.05, eos_bias=2.0)
    out = convert_marian(hf_dir, tmp_path / "fp32")
    sentences = read_lines("test_2016_flickr.en.gz", 50)
    expected = hf_generate(model, tokenizer, sentences, max_new=30, num_beams=1)
    md, sources = our_sources(out, sentences)
    got, _ = greedy(NativeBackend(md, threads=2, shortlist=False), sources, max_len=30)
    print(f"distinct outputs {len({tuple(o) for o in expected})}, ended before the limit "
          f"{sum(len(o) < 30 for o in expected)}")
    assert got == expected
    assert len({tuple(o) for o in expected}) >= 20


def test_ctranslate2_writer_runs_converted_marian(tiny, tmp_path):
    """Our CTranslate2 writer on a converted Marian directory (positions "halves", swish,
    suppress, bos = pad, vocab.json pieces) gives our greedy ids."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from pyfastdec.convert.ctranslate2_export import to_ctranslate2

    out = tiny[3]
    md = ModelDir.load(out)
    tokenizer = load_tokenizer(md)
    sentences = read_lines("test_2016_flickr.en.gz", SENTENCES)
    ids = [tokenizer.encode(s) for s in sentences]
    ours, _ = greedy(NativeBackend(md, threads=1, shortlist=False), [i + [0] for i in ids], max_len=MAX_NEW)
    translator = ctranslate2.Translator(str(to_ctranslate2(out, tmp_path / "ct2")), device="cpu", intra_threads=1)
    results = translator.translate_batch([[tokenizer.id_to_piece[i] for i in r] for r in ids], beam_size=1,
                                         min_decoding_length=0, max_decoding_length=MAX_NEW)
    assert [[tokenizer.vocab[p] for p in r.hypotheses[0]] for r in results] == ours


def test_checkpoints_need_only_the_shipped_data(tmp_path, monkeypatch):
    """The tokenizers of these checkpoints learn the Multi30k sets in the repository's
    data/, so this file runs on a fresh clone (no shared training corpus): with only a
    copy of data/ to read from, they still build."""
    shutil.copytree(Path(__file__).resolve().parents[1] / "data" / "multi30k", tmp_path / "data" / "multi30k")
    monkeypatch.setenv("FASTDEC_DATA", str(tmp_path / "data"))
    vocab = build_tokenizer_files(tmp_path / "hf", 400, 500)
    assert vocab["</s>"] == 0 and vocab["<pad>"] == len(vocab) - 1 and len(vocab) > 500


def test_shortlist_is_recorded_in_the_checksum(tiny, tmp_path):
    """--shortlist SRC TGT writes shortlist.bin after the checksummed files: the checksum
    lists it, so the converted directory loads with its shortlist (a shortlist a checksum
    does not list is refused: test_shortlist_checksum.py)."""
    import hashlib

    hf_dir = tiny[0]
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("\n".join(read_lines("val.en.gz", 100)) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(read_lines("val.de.gz", 100)) + "\n", encoding="utf-8")
    out = convert_marian(hf_dir, tmp_path / "out", shortlist=(src, tgt))
    listed = json.loads((out / "config.json").read_text())["checksum"]["shortlist.bin"]
    assert listed == "sha256:" + hashlib.sha256((out / "shortlist.bin").read_bytes()).hexdigest()
    assert NativeBackend(out, threads=1).shortlist is not None
