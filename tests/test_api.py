"""The Python API (pyfastdec.Translator) on tiny model directories: raw text in and out
against the backend's greedy on the same ids and a cache-free torch greedy, every
algorithm against greedy, input order, empty inputs, over-long inputs split with a
warning, n-best scores, and the errors users meet (no default model, compute types,
mismatched drafters). A fake "copy" verifier, whose translation of a text is the text
itself, makes order and splitting checkable exactly."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

import pyfastdec  # noqa: E402
from export.calibrate import calibrate  # noqa: E402
from export.rehash import rehash  # noqa: E402
from export.tiny import random_sources, synthetic_sentences, tiny_model, tiny_spm  # noqa: E402
from export.vocab import train_vocab  # noqa: E402
from export.writer import write_model_dir  # noqa: E402
from pyfastdec import api  # noqa: E402
from pyfastdec.api import Corrector, LongInputWarning, Translator  # noqa: E402
from pyfastdec.backends.base import BackendBase, StepOut, Want  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.decoding import beam_search, default_max_len, greedy  # noqa: E402
from pyfastdec.decoding.policies import FixedDraftLength  # noqa: E402
from pyfastdec.model_dir import ModelDirError  # noqa: E402
from pyfastdec.text import Tokenizer, cut_ids, sentence_units, split_sentences  # noqa: E402

torch.set_num_threads(1)  # the machine's cores are shared
BOS, EOS = 2, 3
SPECIAL_OUTPUTS = [0, 1, 2, 4]  # pad, unk, bos, mask: never emitted by the verifier
SHORT_SOURCE = 16  # max_source_len of the "short" copy of the verifier


def verifier_model(seed: int = 4):
    """A tiny random verifier whose greedy outputs differ in length and content between
    inputs (some end at EOS early, others run to max_len)."""
    model = tiny_model(seed=seed)
    with torch.no_grad():
        model.output.bias[SPECIAL_OUTPUTS] = -30.0
    return model


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Model directories: verifier (float32), drafter, the verifier with max_source_len
    16, an int8 verifier, and drafters with another vocabulary (size; pieces)."""
    root = tmp_path_factory.mktemp("models")
    spm = tiny_spm(root / "spm.model")
    model = verifier_model()
    paths = {"spm": spm, "model": model}
    paths["verifier"] = write_model_dir(model, spm, root / "verifier")
    paths["drafter"] = write_model_dir(tiny_model(arch="nat-drafter", seed=9), spm, root / "drafter")
    short = shutil.copytree(paths["verifier"], root / "short")
    config = json.loads((short / "config.json").read_text())
    config["max_source_len"] = SHORT_SOURCE
    (short / "config.json").write_text(json.dumps(config))
    rehash(short)  # an edit on purpose: record it, or the config checksum refuses the copy
    paths["short"] = short
    pairs = [(s[:-1], s[:-1][::-1]) for s in random_sources(20, seed=12)]
    paths["int8"] = write_model_dir(model, spm, root / "int8", act_scales=calibrate(model, pairs), int8=True)
    small_spm = root / "spm38.model"
    train_vocab(synthetic_sentences(), small_spm, 38)
    paths["drafter38"] = write_model_dir(tiny_model(arch="nat-drafter", vocab_size=38), small_spm, root / "d38")
    other_spm = root / "other.model"  # same size, other pieces: trained on other words
    train_vocab([s.replace("a", "q").replace("e", "x") for s in synthetic_sentences()], other_spm, 40)
    paths["drafter_other"] = write_model_dir(tiny_model(arch="nat-drafter"), other_spm, root / "dother")
    return paths


# GAD's default draft-length policy decides from measured times, so the path a test
# took would change from run to run: the shared translator cycles through every path.
EVERY_DRAFT_LENGTH = [4, 0, 2, 1]  # the tiny drafter's block_size is 4


@pytest.fixture(scope="session")
def translator(models):
    return Translator(models["verifier"], drafter=models["drafter"], threads=1, compute_type="float32",
                      draft_policy=FixedDraftLength(4, EVERY_DRAFT_LENGTH))


def sentences(n: int, seed: int) -> list[str]:
    return synthetic_sentences(n, seed=seed)


@torch.no_grad()
def torch_greedy(model, src: list[int]) -> list[int]:
    """Greedy re-running the whole prefix through the torch model (no cache, no Backend)."""
    prefix = [BOS]
    while len(prefix) - 1 < default_max_len(len(src)):
        token = int(model(torch.tensor([src]), torch.tensor([prefix]))[0, -1].argmax())
        if token == EOS:
            break
        prefix.append(token)
    return prefix[1:]


class CopyBackend(BackendBase):
    """A fake verifier whose greedy output is its source (EOS dropped): top-1 = the next
    source token (log 0.9), every other id shares the rest."""

    tokens = {"pad": 0, "unk": 1, "bos": BOS, "eos": EOS, "mask": 4}
    vocab_size, arch, block_size = 40, "transformer", None

    def __init__(self):
        self.encoded: list[list[int]] = []

    def encode(self, src_ids):
        self.encoded += [list(s) for s in src_ids]
        return [list(s) for s in src_ids]

    def start(self, memory):
        return {"src": [list(s) for s in memory], "held": [[] for _ in memory]}

    def step(self, state, tokens, want=Want()):
        nxt = np.zeros(np.shape(tokens), dtype=np.int64)
        for r, (src, held) in enumerate(zip(state["src"], state["held"])):
            for i, t in enumerate(tokens[r]):
                held.append(int(t))
                n = len(held) - 1  # output tokens so far (BOS excluded)
                nxt[r, i] = src[n] if n < len(src) - 1 else EOS
        logp = np.full(nxt.shape + (self.vocab_size,), np.log(0.1 / (self.vocab_size - 1)), dtype=np.float32)
        np.put_along_axis(logp, nxt[..., None], np.float32(np.log(0.9)), axis=-1)
        out = StepOut(argmax=nxt if want.argmax else None, logprobs=logp if want.logprobs else None)
        if want.topk:
            out.topk_ids = np.argsort(-logp, axis=-1, kind="stable")[..., :want.topk]
            out.topk_logprobs = np.take_along_axis(logp, out.topk_ids, -1)
        if want.ids is not None:
            out.id_logprobs = np.take_along_axis(logp, np.asarray(want.ids)[..., None], -1)[..., 0]
        return out

    def truncate(self, state, lengths):
        for held, n in zip(state["held"], lengths):
            del held[int(n):]
        return state

    def select(self, state, rows):
        if isinstance(state, dict):
            return {k: [list(v[int(r)]) for r in rows] for k, v in state.items()}
        return [list(state[int(r)]) for r in rows]


def copying(translator: Translator, monkeypatch) -> CopyBackend:
    fake = CopyBackend()
    monkeypatch.setattr(translator, "verifier", fake)
    return fake


def normalised(tok: Tokenizer, text: str) -> str:
    return tok.decode(tok.encode(text))


# ----------------------------------------------------------------------------- outputs
def test_translate_equals_greedy_on_the_same_ids(models, translator):
    texts = sentences(8, seed=1)
    tok = Tokenizer(models["spm"])
    backend = NativeBackend(models["verifier"], threads=1)
    ids = [tok.encode(t) + [EOS] for t in texts]
    expected = [tok.decode(greedy(backend, [s])[0][0]) for s in ids]  # one sentence at a time
    assert translator.translate(texts, algo="greedy") == expected
    assert len(set(expected)) > 3  # the outputs differ between inputs
    # and the cache-free torch greedy agrees on the ids
    assert [tok.decode(torch_greedy(models["model"], s)) for s in ids[:3]] == expected[:3]


@pytest.mark.parametrize("batch_size", [1, 3])
def test_lossless_algorithms_give_greedy_output(translator, batch_size):
    texts = sentences(7, seed=2)
    reference = translator.translate(texts, algo="greedy", batch_size=batch_size)
    for algo, kw in [("iad", {}), ("gad", {}), ("gad", {"block": 2}), ("gad++", {"beta": 1, "tau": 0.0}),
                     ("beam", {"beam_size": 1})]:
        assert translator.translate(texts, algo=algo, batch_size=batch_size, **kw) == reference, algo


def test_input_order_with_mixed_lengths(models, translator, monkeypatch):
    texts = sentences(9, seed=3) + ["a .", "two big red dogs run in the green park with a small girl ."]
    real = translator.translate(texts, algo="greedy", batch_size=3)
    assert real == [translator.translate([t], algo="greedy")[0] for t in texts]
    fake = copying(translator, monkeypatch)
    tok = translator.tokenizer
    assert translator.translate(texts, algo="greedy", batch_size=3) == [normalised(tok, t) for t in texts]
    # batches were formed from length-sorted sources, longest first
    lengths = [len(s) for s in fake.encoded]
    assert lengths == sorted(lengths, reverse=True)


def test_a_single_string_and_empty_inputs(translator, monkeypatch):
    texts = ["", "a man runs .", "   ", "the dog ."]
    out = translator.translate(texts, algo="gad")
    assert out[0] == "" and out[2] == ""
    assert out[1] == translator.translate("a man runs .", algo="greedy")
    assert translator.translate([], algo="greedy") == []
    fake = copying(translator, monkeypatch)
    assert translator.translate(["", " "], algo="greedy", return_scores=True) == [("", 0.0), ("", 0.0)]
    assert fake.encoded == []  # the model never ran on an empty input


def test_stats_are_summed_over_batches_and_name_inputs(models, translator):
    texts = sentences(6, seed=4) + [""]
    outs, stats = translator.translate(texts, algo="greedy", batch_size=2, return_stats=True)
    assert stats.sentences == 7 and stats.iterations > 0 and stats.row_steps == stats.generated
    tok, backend = translator.tokenizer, NativeBackend(models["verifier"], threads=1)
    ids = [tok.encode(t) + [EOS] for t in texts[:-1]]
    reference, _ = greedy(backend, ids)
    cut = [i for i, (s, o) in enumerate(zip(ids, reference)) if len(o) == default_max_len(len(s))]
    assert stats.hit_max_len == cut and 0 < len(cut) < 6  # input indices, across batches
    _, gad_stats = translator.translate(texts, algo="gad", block=2, return_stats=True)  # fixed: always drafts
    assert gad_stats.drafted > 0 and 0 <= gad_stats.accepted <= gad_stats.drafted


def test_nbest_and_scores_match_beam_search(models, translator):
    texts = sentences(4, seed=5)
    tok = translator.tokenizer
    got = translator.translate(texts, algo="beam", beam_size=4, n_best=3, return_scores=True)
    backend = NativeBackend(models["verifier"], threads=1)
    ref, _ = beam_search(backend, [tok.encode(t) + [EOS] for t in texts], beam_size=4, nbest=3)
    for hyps, expected in zip(got, ref):
        assert [text for text, _ in hyps] == [tok.decode(h.tokens) for h in expected]
        # Bit for bit though the batches differ (the translator sorts by length); the
        # translator keeps score * (len + 1) and divides again, a float64 round trip.
        np.testing.assert_array_equal([s for _, s in hyps],
                                      [h.score * (len(h.tokens) + 1) / (len(h.tokens) + 1) for h in expected])
        assert [s for _, s in hyps] == sorted((s for _, s in hyps), reverse=True)
    # greedy rescored by the model = beam search of size 1's own scores
    greedy_scored = translator.translate(texts, algo="greedy", return_scores=True)
    beam_one = translator.translate(texts, algo="beam", return_scores=True)
    assert [t for t, _ in greedy_scored] == [t for t, _ in beam_one]
    # The log-probs are the same bits (one teacher-forced step = incremental steps); only
    # the float64 sums differ in order (np.sum is pairwise, beam search sequential).
    np.testing.assert_allclose([s for _, s in greedy_scored], [s for _, s in beam_one], rtol=1e-13, atol=0)


# ----------------------------------------------------------------------------- long inputs
def test_text_splitting_helpers(models):
    assert split_sentences("a dog. Two men!  A girl? ok") == ["a dog.", "Two men!", "A girl?", "ok"]
    starts = {1, 4, 5}  # ids that start a word
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]  # words: [1 2 3] [4] [5 6 7 8 9]
    chunks = cut_ids(ids, 4, lambda t: t in starts)
    assert chunks == [[1, 2, 3, 4], [5, 6, 7, 8], [9]]  # the word longer than 4 is cut hard
    assert sum(chunks, []) == ids
    tok = Tokenizer(models["spm"])
    text = " ".join(sentences(6, seed=6))
    units = sentence_units(text, tok, 15)
    assert len(units) == 6  # one unit per sentence, some cut into several chunks
    assert all(0 < len(c) <= 15 for u in units for c in u) and any(len(u) > 1 for u in units)
    assert " ".join(tok.decode(c) for u in units for c in u) == normalised(tok, text)


def test_every_sentence_is_a_unit_and_only_a_long_sentence_warns(models, monkeypatch):
    t = Translator(models["short"], threads=1, compute_type="float32")
    tok = t.tokenizer
    parts = ["a man runs .", "the girl sits .", "two dogs ."]  # each fits, no two together
    assert all(len(tok.encode(p)) + 1 <= SHORT_SOURCE < len(tok.encode(a + " " + b)) + 1
               for p, a, b in zip(parts, parts, parts[1:]))
    long_text = " ".join(parts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sentences that fit one by one are not cut: no warning
        out = t.translate(["a dog .", long_text, ""], algo="greedy")
    assert out[1] == " ".join(o for o in t.translate(parts, algo="greedy") if o)
    fake = copying(t, monkeypatch)
    assert t.translate(long_text, algo="greedy") == normalised(tok, long_text)
    assert [tok.decode(s[:-1]) for s in fake.encoded] == parts  # one unit per sentence, in order


def test_a_long_sentence_is_cut_between_words(models, monkeypatch):
    t = Translator(models["short"], threads=1, compute_type="float32")
    words = "two big red dogs run in the green park with a small girl near the blue water"
    fake = copying(t, monkeypatch)
    with pytest.warns(LongInputWarning, match="input 0"):
        assert t.translate([words], algo="greedy") == [words]
    assert all(len(s) <= SHORT_SOURCE for s in fake.encoded) and len(fake.encoded) > 1
    assert all(t.tokenizer.starts_word(s[0]) for s in fake.encoded)  # every chunk starts a word
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a source that fits is not split and not warned about
        t.translate(["a man ."], algo="greedy")


# ----------------------------------------------------------------------------- correction
def test_correct_is_iad_and_equals_greedy(models, translator):
    texts = sentences(5, seed=7) + [""]
    corrector = Corrector(models["verifier"], threads=1, compute_type="float32")
    expected = translator.translate(texts, algo="greedy")
    # the guard off: this toy model loops on some inputs, which a Corrector reverts by default
    assert corrector.correct(texts, repetition_guard=False) == expected == translator.correct(texts)
    assert corrector.drafter is None


# ----------------------------------------------------------------------------- errors
def test_missing_default_model_names_the_expected_path(tmp_path, monkeypatch):
    monkeypatch.setattr(api, "packaged_model_path", lambda name: tmp_path / "models" / name)
    with pytest.raises(ModelDirError, match=r"models/en-de: .*not installed.*model="):
        Translator()
    with pytest.raises(ModelDirError, match=r"models/uk-gec: .*not installed"):
        Corrector()


def test_default_models_resolve_inside_the_package(models, tmp_path, monkeypatch):
    shipped = {"en-de": models["verifier"], "en-de-drafter": models["drafter"], "uk-gec": models["verifier"]}
    monkeypatch.setattr(api, "packaged_model_path", lambda name: Path(shipped[name]))
    t = Translator(threads=1, compute_type="float32")
    assert t.model_dir.path == Path(models["verifier"]) and t.drafter_dir.path == Path(models["drafter"])
    assert t.translate(["a man ."]) == t.translate(["a man ."], algo="greedy")
    assert Corrector(threads=1, compute_type="float32").drafter is None
    assert api.packaged_model_path is not None
    monkeypatch.undo()
    # installed: inside the package; a source checkout used in place: its models/
    package = Path(pyfastdec.__file__).resolve().parent
    path = api.packaged_model_path("en-de")
    assert path in (package / "models" / "en-de", package.parent / "models" / "en-de")
    assert (path / "config.json").is_file()


def test_algorithms_and_options_are_checked(models, translator):
    alone = Translator(models["verifier"], threads=1, compute_type="float32")
    with pytest.raises(ValueError, match="algo 'gad' needs a drafter"):
        alone.translate(["a man ."], algo="gad")
    with pytest.raises(ValueError, match="algo must be one of"):
        translator.translate(["a"], algo="sampling")
    with pytest.raises(ValueError, match="need algo='beam'"):
        translator.translate(["a"], algo="greedy", n_best=2)
    with pytest.raises(ValueError, match="exceeds beam_size"):
        translator.translate(["a"], algo="beam", beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="gad\\+\\+' only"):
        translator.translate(["a"], algo="gad", beta=3)
    with pytest.raises(TypeError, match="input 1 is bytes"):
        translator.translate(["a", b"b"], algo="greedy")


def test_compute_types(models):
    with pytest.raises(ModelDirError, match="holds int8 weights"):
        Translator(models["int8"], compute_type="float32")
    with pytest.warns(RuntimeWarning, match="float32 weights"):
        Translator(models["verifier"], threads=1)
    with pytest.raises(ValueError, match="compute_type must be one of"):
        Translator(models["verifier"], compute_type="bf16")
    int8 = Translator(models["int8"], threads=1)
    assert int8.verifier.config.quantization is not None
    assert len(int8.translate(sentences(3, seed=8), algo="greedy")) == 3


def test_drafters_must_share_the_vocabulary(models):
    with pytest.raises(ModelDirError, match="vocab_size: 38 differs from the verifier's 40"):
        Translator(models["verifier"], drafter=models["drafter38"], compute_type="float32")
    with pytest.raises(ModelDirError, match=r"spm.model: piece \d+ is .* but the verifier's is"):
        Translator(models["verifier"], drafter=models["drafter_other"], compute_type="float32")
    with pytest.raises(ModelDirError, match="expected \"nat-drafter\""):
        Translator(models["verifier"], drafter=models["verifier"], compute_type="float32")
    with pytest.raises(ModelDirError, match="expected \"transformer\""):
        Translator(models["drafter"], compute_type="float32")
