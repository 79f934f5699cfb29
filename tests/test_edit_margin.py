"""The edit-margin rule of correction decoding (issue 16; pyfastdec/decoding/source_ngrams.py):
the source token copying would write next is kept unless the model's top-1 beats it by a
margin. Checked against independent references:
- the engine's biased argmax (Want.keep_ids / edit_margin) against numpy on the same
  step's log-probs, for the shipped uk-gec (int8) and en-de (lexical shortlist, batch > 1);
- the kept-token rule against a brute-force n-gram search written here;
- greedy(edit_margin=m) against a decoder written here (full log-probs every step, one
  sentence at a time), on UA-GEC sentences and on the tiny trained models with the torch,
  native float32 and onnxruntime backends;
- iad(edit_margin=m) against greedy(edit_margin=m) at batch 1, 7 and 32, with drafts whole
  and capped by the cost policy (64 UA-GEC test sentences; the whole test set: slow).
"""
from __future__ import annotations

import functools
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_decoding_support import VARIANTS, backends, tiny_verifier
from test_real_sentences import encode, first_difference, in_batches, uagec_test_head

from export.tiny import random_sources, tiny_spm
from pyfastdec.backends.base import Want
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import greedy, iad
from pyfastdec.decoding.limits import default_max_len
from pyfastdec.decoding.source_ngrams import SourceNgrams
from pyfastdec.model_dir import ModelDirError, read_config

MODELS = Path(__file__).resolve().parents[1] / "models"
N = 64


# ----------------------------------------------------------------------------- independent references
def reference_kept(source: list[int], eos: int, output: list[int]) -> int:
    """The kept token after `output`, by brute force: the next source token while the
    output is a prefix of source + EOS; else the token after the last 3, then 2, output
    tokens where they occur exactly once in the source; else -1."""
    body = source[:-1] if source and source[-1] == eos else list(source)
    full = body + [eos]
    if len(output) < len(full) and output == full[:len(output)]:
        return full[len(output)]
    for n in (3, 2):
        if len(output) >= n:
            hits = [i for i in range(len(body) - n + 1) if body[i:i + n] == output[-n:]]
            if len(hits) == 1:
                return full[hits[0] + n]
    return -1


def rule_argmax(logp: np.ndarray, keep: int, margin: float) -> int:
    top = int(np.argmax(logp))
    if keep < 0 or keep == top:
        return top
    return keep if logp[top] - logp[keep] < margin else top


def reference_decode(backend, source: list[int], margin: float) -> list[int]:
    """One sentence, one step at a time, the rule applied in numpy to the full log-probs."""
    eos = backend.tokens["eos"]
    state = backend.start(backend.encode([source]))
    out, token = [], backend.tokens["bos"]
    for _ in range(default_max_len(len(source))):
        logp = backend.step(state, np.array([[token]]), Want(argmax=False, logprobs=True)).logprobs[0, 0]
        token = rule_argmax(logp, reference_kept(source, eos, out), margin)
        if token == eos:
            break
        out.append(token)
    return out


def changed_by(margin_outs, plain_outs) -> int:
    return sum(a != b for a, b in zip(margin_outs, plain_outs))


# ----------------------------------------------------------------------------- the kept token
def test_kept_token_rule_on_hand_made_sources():
    eos = 3
    row = SourceNgrams([10, 11, 12, 10, 11, 13, eos], eos)
    assert row.kept([]) == 10 and row.kept([10, 11]) == 12  # a prefix of the source
    assert row.kept([10, 11, 12, 10, 11, 13]) == eos
    assert row.kept([99, 11, 12]) == 10  # (11, 12) occurs once; no prefix any more
    assert row.kept([99, 10, 11]) == -1  # (10, 11) occurs twice: no anchor
    assert row.kept([12, 10, 11]) == 13  # ... but (12, 10, 11) once
    assert row.kept([99, 13]) == -1  # single tokens are no anchor for the rule
    assert row.reentry([99, 13]) == [eos]  # (they are for IAD's drafts)


def test_kept_along_a_draft_equals_the_brute_force_rule_at_every_position():
    rng = np.random.default_rng(7)
    eos = 3
    for _ in range(300):
        source = [int(t) for t in rng.integers(4, 9, size=rng.integers(1, 14))] + [eos]  # repeats n-grams
        row = SourceNgrams(source, eos)
        # an output that copies the source with edits, and a draft from anywhere in it
        output = [int(t) if rng.random() < 0.8 else int(rng.integers(4, 10)) for t in source[:rng.integers(0, 14)]]
        start = int(rng.integers(0, len(source)))
        draft = source[start:start + int(rng.integers(0, 8))]
        expected = [reference_kept(source, eos, output + draft[:i]) for i in range(len(draft) + 1)]
        assert row.kept_along(output, draft) == expected, (source, output, draft)
        # IAD's drafts: the source from where the output re-enters it, cut anywhere
        start = row.reentry_start(output)
        if start is not None:
            draft = row.draft_tokens[start:start + int(rng.integers(0, 12))]
            expected = [reference_kept(source, eos, output + draft[:i]) for i in range(len(draft) + 1)]
            assert row.kept_along_source(output, start, len(draft)).tolist() == expected, (source, output, draft)


# ----------------------------------------------------------------------------- the engine's biased argmax
@pytest.mark.parametrize("name, rows", [("uk-gec", 1), ("en-de", 5)])
def test_engine_argmax_follows_the_rule_on_the_step_logprobs(name, rows):
    path = MODELS / name
    backend = NativeBackend(path, threads=1)
    sentences = uagec_test_head(rows) if name == "uk-gec" else [
        "A man in a blue shirt is standing on a ladder.", "Two dogs play in the snow.", "A girl reads a book.",
        "People walk down a busy street at night.", "A child jumps into a pool."]
    src = encode(backend, path, sentences)
    width = min(len(s) for s in src)
    tokens = np.array([[backend.tokens["bos"]] + s[:width - 1] for s in src])  # teacher-forced on the source
    memory = backend.encode(src)
    logp = backend.step(backend.start(memory), tokens, Want(argmax=True, logprobs=True)).logprobs
    rng = np.random.default_rng(3)
    # kept tokens: the source's own next tokens, random ids (mostly far below the top-1), none
    choices = [np.array([s[:width] for s in src]), rng.integers(0, backend.vocab_size, tokens.shape),
               np.full(tokens.shape, -1)]
    pick = rng.integers(0, 3, tokens.shape)
    keep = np.choose(pick, choices).astype(np.int64)
    # second-best tokens, so that some margins flip them and some do not
    second = np.argsort(-logp, axis=-1)[..., 1]
    keep[:, ::2] = second[:, ::2]
    flipped = 0
    for margin in (0.0, 0.3, 1.0, 3.0, 6.0):
        for extra in ({}, {"topk": 2}):  # the engine's argmax-only and full-statistics paths
            got = backend.step(backend.start(memory), tokens,
                               Want(argmax=True, keep_ids=keep, edit_margin=margin, **extra)).argmax
            expected = np.array([[rule_argmax(logp[r, i], int(keep[r, i]), margin) for i in range(tokens.shape[1])]
                                 for r in range(rows)])
            np.testing.assert_array_equal(got, expected)
        flipped += int((expected != logp.argmax(-1)).sum())
    assert flipped > 3  # some kept tokens won, so the comparison says something


def test_engine_refuses_bad_keep_ids_without_changing_the_state():
    backend = NativeBackend(MODELS / "uk-gec", threads=1)
    state = backend.start(backend.encode([[100, 200, backend.tokens["eos"]]]))
    tokens = np.array([[backend.tokens["bos"], 100]])
    bad = [(dict(keep_ids=np.array([[5, 6]]), edit_margin=-1.0), "edit_margin must be a finite number >= 0"),
           (dict(keep_ids=np.array([[5, 6]]), edit_margin=float("nan")), "edit_margin must be a finite number >= 0"),
           (dict(keep_ids=np.array([[5]]), edit_margin=1.0), "keep_ids"),
           (dict(keep_ids=np.array([[5, 8000]]), edit_margin=1.0), "outside the vocabulary"),
           (dict(keep_ids=np.array([[5, -2]]), edit_margin=1.0), "outside the vocabulary"),
           (dict(argmax=False, topk=1, keep_ids=np.array([[5, 6]]), edit_margin=1.0), "need argmax")]
    for want, message in bad:
        with pytest.raises(ValueError, match=message):
            backend.step(state, tokens, Want(**want))
    out = backend.step(state, tokens, Want(argmax=True))  # the refused calls appended nothing
    fresh = backend.step(backend.start(backend.encode([[100, 200, backend.tokens["eos"]]])), tokens, Want())
    np.testing.assert_array_equal(out.argmax, fresh.argmax)


# ----------------------------------------------------------------------------- greedy and IAD on uk-gec
@pytest.fixture(scope="module")
def uk_gec():
    backend = NativeBackend(MODELS / "uk-gec", threads=1)
    return backend, encode(backend, MODELS / "uk-gec", uagec_test_head(N))


def test_the_shipped_model_names_its_margin():
    assert read_config(MODELS / "uk-gec" / "config.json").edit_margin > 0


@pytest.mark.parametrize("margin", [1.0, 3.0])
def test_greedy_with_a_margin_is_the_rule(uk_gec, margin):
    backend, sources = uk_gec
    sources = sources[:24]
    got, _ = greedy(backend, sources, edit_margin=margin)
    assert got == [reference_decode(backend, s, margin) for s in sources]
    assert changed_by(got, greedy(backend, sources)[0]) >= 2  # the margin kept source tokens


@pytest.mark.parametrize("batch_size", [1, 7, 32])
def test_iad_with_a_margin_equals_greedy_with_it(uk_gec, batch_size):
    backend, sources = uk_gec
    margins = (read_config(MODELS / "uk-gec" / "config.json").edit_margin, 3.0)
    for margin in margins:
        expected = in_batches(lambda b: greedy(backend, b, edit_margin=margin), sources, batch_size)[0]
        assert len({tuple(o) for o in expected}) == N
        for policy in ("auto", None):
            outs, accepted, drafted = in_batches(lambda b: iad(backend, b, policy=policy, edit_margin=margin),
                                                 sources, batch_size)
            assert outs == expected, first_difference(outs, expected)
            if policy is None:
                assert 0 < accepted < drafted
    plain = in_batches(lambda b: greedy(backend, b), sources, batch_size)[0]
    assert changed_by(expected, plain) >= 2


# ----------------------------------------------------------------------------- the other backends
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    spm = tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")
    directory = tmp_path_factory.mktemp("attention")
    torch_backend, native = backends(tiny_verifier(**VARIANTS["attention"]), spm, directory)
    return torch_backend, native, directory / "float32"


def test_torch_native_and_onnx_backends_apply_the_same_rule(tiny, tmp_path):
    pytest.importorskip("onnxruntime")
    from export.onnx_export import export_model_dir
    from pyfastdec.backends.onnx import OnnxBackend

    torch_backend, native, model_dir = tiny
    onnx = OnnxBackend(export_model_dir(model_dir, tmp_path / "onnx"), threads=1)
    sources = random_sources(16, seed=44)
    margin = 6.0  # the tiny task translates: source tokens are far from its top-1
    expected = [reference_decode(torch_backend, s, margin) for s in sources]
    assert changed_by(expected, greedy(torch_backend, sources)[0]) >= 2
    for backend in (torch_backend, native, onnx):
        assert greedy(backend, sources, edit_margin=margin)[0] == expected
        assert iad(backend, sources, edit_margin=margin, policy=None)[0] == expected
        with pytest.raises(ValueError, match="edit_margin must be a finite number >= 0"):
            state = backend.start(backend.encode(sources[:1]))
            backend.step(state, np.array([[1]]), Want(keep_ids=np.array([[5]]), edit_margin=-0.5))


# ----------------------------------------------------------------------------- the model directory field
def test_config_decoding_edit_margin_is_read_and_checked(tmp_path):
    model = tmp_path / "uk-gec"
    shutil.copytree(MODELS / "uk-gec", model)
    config = json.loads((model / "config.json").read_text())
    config.pop("checksum", None)
    for value, message in [(-1, "decoding.edit_margin: -1"), ("2", "decoding.edit_margin"),
                           (math.inf, "decoding.edit_margin"), (True, "decoding.edit_margin")]:
        (model / "config.json").write_text(json.dumps(dict(config, decoding={"edit_margin": value})))
        with pytest.raises(ModelDirError, match=message):
            read_config(model / "config.json")
    (model / "config.json").write_text(json.dumps(dict(config, decoding={"edit_margn": 1})))
    with pytest.raises(ModelDirError, match="decoding.edit_margn: unknown field"):
        read_config(model / "config.json")
    (model / "config.json").write_text(json.dumps(dict(config, decoding={"edit_margin": 1.25})))
    assert read_config(model / "config.json").edit_margin == 1.25
    from pyfastdec.model_summary import model_summary
    assert "  edit margin: 1.25 nats (correct's default; config.json decoding.edit_margin)" in model_summary(model)
    del config["decoding"]
    (model / "config.json").write_text(json.dumps(config))
    assert read_config(model / "config.json").edit_margin == 0.0


# ----------------------------------------------------------------------------- API and command line
@pytest.fixture(scope="module")
def corrector():
    from pyfastdec import Corrector
    return Corrector(MODELS / "uk-gec", threads=1)


def test_corrector_uses_the_model_margin_and_takes_another(corrector, uk_gec):
    from pyfastdec.text import clean_text, sentences_with_ids

    from pyfastdec.copy_through import CopyThrough

    backend, _ = uk_gec
    tok = corrector.tokenizer
    copy = CopyThrough(tok.sp)
    # lines the API decodes as one sentence, so that its output is greedy's on the line
    sentences = [s for s in uagec_test_head(N) if len(sentences_with_ids(clean_text(s), tok, 127)) == 1]
    assert len(sentences) >= 40
    default = read_config(MODELS / "uk-gec" / "config.json").edit_margin
    # the repetition guard off: its own tests check it; here the outputs are greedy's
    correct = functools.partial(corrector.correct, repetition_guard=False)
    for margin, got in [(default, correct(sentences)), (0.0, correct(sentences, edit_margin=0)),
                        (3.0, correct(sentences, edit_margin=3.0))]:
        # one sentence per line here: the API's output is greedy's with the margin, written as
        # copy-through text (tests/test_copy_through.py checks that against its own references)
        outs = greedy(backend, encode(backend, MODELS / "uk-gec", sentences), edit_margin=margin)[0]
        expected = [copy.text(copy.source.pieces(s), o) for s, o in zip(sentences, outs)]
        differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
        assert not differ, (margin, differ[:3])
        assert corrector.translate(sentences, algo="greedy", edit_margin=margin, repetition_guard=False) == got
    assert corrector.correct(sentences, edit_margin=0) != corrector.correct(sentences)


def test_api_refuses_a_margin_where_it_does_not_apply(corrector):
    with pytest.raises(ValueError, match=r"edit_margin must be a number >= 0 \(nats; inf: never edit\)"):
        corrector.correct(["Він пішов до магазін."], edit_margin=-1)
    with pytest.raises(ValueError, match="applies to algo 'greedy' and 'iad' only"):
        corrector.translate(["Він пішов до магазін."], algo="beam", beam_size=2, edit_margin=1.0)
    with pytest.raises(ValueError, match="target_prefix"):
        corrector.translate(["Він пішов до магазін."], algo="greedy", target_prefix=["Він"], edit_margin=1.0)
    # the model's own margin is for greedy and IAD; beam and prefixed calls run without it
    assert corrector.translate(["Він пішов до магазін."], algo="beam", beam_size=2)
    assert corrector.translate(["Він пішов до магазін."], algo="greedy", target_prefix=["Він"])


def test_cli_edit_margin(corrector, tmp_path):
    import subprocess
    import sys

    from child_python import NEUTRAL_CWD, child_env

    sentences = uagec_test_head(16)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    for flag, margin in (([], None), (["--edit-margin", "3"], 3.0)):
        out = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "correct", "-i", str(src), "--threads", "1",
                              *flag], capture_output=True, text=True, check=True, timeout=600, env=child_env(),
                             cwd=NEUTRAL_CWD)
        assert out.stdout.split("\n")[:-1] == corrector.correct(sentences, edit_margin=margin)
    bad = subprocess.run([sys.executable, "-m", "pyfastdec.cli", "correct", "-i", str(src), "--edit-margin", "-1"],
                         capture_output=True, text=True, timeout=600, env=child_env(), cwd=NEUTRAL_CWD)
    assert bad.returncode != 0 and "--edit-margin" in bad.stderr


@pytest.mark.parametrize("margin", [1e308, math.inf, 3.5e38])
def test_a_margin_no_gap_reaches_never_edits(corrector, margin):
    """Margins above float32's largest (the engine's log-probs; 1e308 used to fail inside
    the engine) are used as that largest: no edit wins, so every sentence comes back as
    it was written, by the API (greedy and IAD) and by the backend's own greedy."""
    from pyfastdec.model_dir import MAX_EDIT_MARGIN
    from pyfastdec.text import clean_text, sentences_with_ids

    tok = corrector.tokenizer
    sentences = [s for s in uagec_test_head(N) if len(sentences_with_ids(clean_text(s), tok, 127)) == 1]
    assert corrector.correct(sentences, edit_margin=0) != sentences  # the model does edit these
    assert corrector.correct(sentences, edit_margin=margin, repetition_guard=False) == sentences
    assert corrector.translate(sentences, algo="greedy", edit_margin=margin, repetition_guard=False) == sentences
    backend = corrector.verifier
    ids = encode(backend, MODELS / "uk-gec", sentences)
    assert greedy(backend, ids, edit_margin=margin)[0] == greedy(backend, ids, edit_margin=MAX_EDIT_MARGIN)[0]
