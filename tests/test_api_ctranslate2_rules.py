"""The CTranslate2 options Translator gained last (issue 27, item 22) against CTranslate2
itself on the same weights: repetition_penalty, no_repeat_ngram_size and
min_decoding_length (greedy and beam search: the same tokens and scores; sampling: only
what they allow), return_alternatives (the same
hypotheses), score_batch (the same per-token log-probs), sampling_topp (the same
nucleus: samples of both engines and the exact nucleus distribution computed from the
PyTorch model); the lossless strategies with these rules against greedy with them; one
ValueError naming each bad value.

The model is test_convert_ct2's: a tiny transformer trained for 60 steps to copy its
source, so its outputs vary with the source, repeat what the source repeats, and end
early on short sources: what these rules change.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2", reason="CTranslate2, the reference, is in the 'test' extra")
torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")

from export.tiny import random_sources, tiny_model, tiny_spm  # noqa: E402
from export.writer import write_model_dir  # noqa: E402
from pyfastdec.api import Translator  # noqa: E402
from pyfastdec.convert.ctranslate2_export import to_ctranslate2  # noqa: E402
from test_convert_ct2 import trained_model  # noqa: E402  (tests/ is on sys.path: conftest.py)

EOS = 3
MAX_LEN = 20


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """(pyfastdec Translator, CTranslate2 float32 translator, the torch model, pieces) on one model."""
    import sentencepiece
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("ct2rules")
    spm = tiny_spm(root / "spm.model")
    model = trained_model("pre")
    path = write_model_dir(model, spm, root / "fastdec")
    ct2 = ctranslate2.Translator(str(to_ctranslate2(path, root / "ct2")), device="cpu", compute_type="float32",
                                 inter_threads=1, intra_threads=1)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    return Translator(path, threads=1, compute_type="float32"), ct2, model, pieces


def repetitive_sources(n: int, seed: int) -> list[list[int]]:
    """Source ids (no EOS) that repeat tokens and bigrams: what a copy model then repeats."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b, c = (int(t) for t in rng.integers(5, 40, size=3))
        out.append([int(t) for t in rng.permutation([a, b, a, b, c, a, b, a])][: int(rng.integers(3, 9))])
    return out


def as_pieces(pieces, ids):
    return [pieces[i] for i in ids]


def ct2_tokens(results):
    return [r.hypotheses[0] for r in results]


# ----------------------------------------------------------------------------- greedy with the rules
@pytest.mark.parametrize("option", [dict(repetition_penalty=1.6), dict(repetition_penalty=0.7),
                                    dict(no_repeat_ngram_size=1), dict(no_repeat_ngram_size=2),
                                    dict(no_repeat_ngram_size=3),
                                    dict(repetition_penalty=1.3, no_repeat_ngram_size=2, min_decoding_length=6)])
def test_rules_give_ctranslate2s_greedy_tokens(engines, option):
    ours, ct2, _, pieces = engines
    srcs = [as_pieces(pieces, s) for s in repetitive_sources(40, seed=1)]
    got = ours.translate(srcs, algo="greedy", max_decoding_length=MAX_LEN, batch_size=7, **option)
    want = ct2_tokens(ct2.translate_batch(srcs, beam_size=1, max_decoding_length=MAX_LEN,
                                          **{"min_decoding_length": 0, **option}))
    assert got == want
    plain = ours.translate(srcs, algo="greedy", max_decoding_length=MAX_LEN)
    assert sum(g != p for g, p in zip(got, plain)) >= 5  # the option changed outputs


@pytest.mark.parametrize("option", [dict(repetition_penalty=1.6), dict(no_repeat_ngram_size=2),
                                    dict(min_decoding_length=8)])
def test_rules_give_ctranslate2s_beam_tokens_and_scores(engines, option):
    """Beam search ranks by the ruled log-probs, as CTranslate2's does (its search and
    ours agree on this model without rules too); scores sum them (length_penalty 0:
    the plain sums), greedy's as well."""
    ours, ct2, _, pieces = engines
    srcs = [as_pieces(pieces, s) for s in repetitive_sources(40, seed=1)]
    common = dict(max_decoding_length=MAX_LEN, return_scores=True, length_penalty=0.0)
    for beam in (1, 4):
        got = ours.translate(srcs, beam_size=beam, algo="greedy" if beam == 1 else "beam", **common, **option)
        want = ct2.translate_batch(srcs, beam_size=beam, **common, **{"min_decoding_length": 0, **option})
        assert [g[0] for g in got] == [w.hypotheses[0] for w in want]
        np.testing.assert_allclose([g[1] for g in got], [w.scores[0] for w in want], rtol=0, atol=1e-4)
    plain = ours.translate(srcs, beam_size=4, max_decoding_length=MAX_LEN)
    assert sum(g[0] != p for g, p in zip(got, plain)) >= 5


def test_scores_with_rules_and_a_prefix_cover_the_prefix_under_the_rules(engines):
    """Beam 1 is greedy: with a prefix and rules both score the whole output, prefix
    included, under the ruled distribution (CTranslate2 leaves prefixes out of scores);
    a prefix that fills max_decoding_length too."""
    ours, _, _, pieces = engines
    srcs = [as_pieces(pieces, s) for s in repetitive_sources(24, seed=10)]
    prefixes = [src[:3] for src in srcs]
    for limit in (MAX_LEN, 3):
        common = dict(target_prefix=prefixes, max_decoding_length=limit, return_scores=True, repetition_penalty=1.8,
                      no_repeat_ngram_size=2)
        greedy = ours.translate(srcs, algo="greedy", **common)
        beam = ours.translate(srcs, algo="beam", beam_size=1, **common)
        assert [b[0] for b in beam] == [g[0] for g in greedy]
        np.testing.assert_allclose([b[1] for b in beam], [g[1] for g in greedy], rtol=0, atol=1e-5)
        plain = ours.translate(srcs, algo="greedy", target_prefix=prefixes, max_decoding_length=limit,
                               return_scores=True)
        assert sum(abs(g[1] - p[1]) > 1e-3 for g, p in zip(greedy, plain)) >= 5


def test_sampling_with_rules_draws_only_what_they_allow(engines):
    ours, _, _, pieces = engines
    srcs = [as_pieces(pieces, s) for s in repetitive_sources(60, seed=9)]
    got = ours.translate(srcs, sampling_topk=0, sampling_temperature=2.0, sampling_seed=3, no_repeat_ngram_size=1,
                         min_decoding_length=4, max_decoding_length=MAX_LEN)
    assert all(len(o) >= 4 and len(set(o)) == len(o) for o in got)  # no token twice, no EOS before 4
    alone = ours.translate(srcs, sampling_topk=0, sampling_temperature=2.0, sampling_seed=3, no_repeat_ngram_size=1,
                           min_decoding_length=4, max_decoding_length=MAX_LEN, batch_size=1)
    assert alone == got  # each row draws from its own generator, as without rules
    unruled = ours.translate(srcs, sampling_topk=0, sampling_temperature=2.0, sampling_seed=3,
                             max_decoding_length=MAX_LEN)
    assert any(len(set(o)) < len(o) for o in unruled)


def test_min_decoding_length_gives_ctranslate2s_greedy_tokens(engines):
    ours, ct2, _, pieces = engines
    srcs = [as_pieces(pieces, s[:-1]) for s in random_sources(30, seed=2)]
    for m in (1, 5, 12):
        got = ours.translate(srcs, algo="greedy", max_decoding_length=MAX_LEN, min_decoding_length=m)
        want = ct2_tokens(ct2.translate_batch(srcs, beam_size=1, max_decoding_length=MAX_LEN, min_decoding_length=m))
        assert got == want
        assert all(len(g) >= m for g in got)
    assert min(len(o) for o in ours.translate(srcs, algo="greedy", max_decoding_length=MAX_LEN)) < 5


def test_rules_see_the_target_prefix_as_ctranslate2_does(engines):
    """The penalties read the prefix as output; min_decoding_length (like
    max_decoding_length) counts the prefix's tokens, in both engines."""
    ours, ct2, _, pieces = engines
    srcs = [as_pieces(pieces, s) for s in repetitive_sources(24, seed=3)]
    prefixes = [src[:2] for src in srcs]  # what the copy model would write: the penalties hit it
    for option in (dict(repetition_penalty=2.0), dict(no_repeat_ngram_size=2), dict(min_decoding_length=9)):
        got = ours.translate(srcs, algo="greedy", target_prefix=prefixes, max_decoding_length=MAX_LEN, **option)
        want = ct2_tokens(ct2.translate_batch(srcs, target_prefix=prefixes, beam_size=1, max_decoding_length=MAX_LEN,
                                              **{"min_decoding_length": 0, **option}))
        assert got == want
        assert got != ours.translate(srcs, algo="greedy", target_prefix=prefixes, max_decoding_length=MAX_LEN)


# ----------------------------------------------------------------------------- alternatives, scores
def test_return_alternatives_are_ctranslate2s(engines):
    ours, ct2, _, pieces = engines
    srcs = [as_pieces(pieces, s[:-1]) for s in random_sources(12, seed=4)]
    prefixes = [src[:k] for src, k in zip(srcs, [0, 1, 2] * 4)]
    got = ours.translate(srcs, target_prefix=[p or None for p in prefixes], return_alternatives=True,
                         num_hypotheses=4, max_decoding_length=MAX_LEN)
    want = ct2.translate_batch(srcs, target_prefix=[p or None for p in prefixes], return_alternatives=True,
                               num_hypotheses=4, beam_size=1, max_decoding_length=MAX_LEN, min_decoding_length=0)
    assert got == [r.hypotheses for r in want]
    assert all(len(g) == 4 and len({tuple(h) for h in g}) == 4 for g in got)


def test_score_batch_gives_ctranslate2s_log_probs(engines):
    ours, ct2, _, pieces = engines
    srcs = [as_pieces(pieces, s[:-1]) for s in random_sources(16, seed=5)]
    tgts = [as_pieces(pieces, t[:-1]) for t in random_sources(16, seed=6)]  # not what the model says
    got = ours.score_batch(srcs, tgts, batch_size=5)
    want = ct2.score_batch(srcs, tgts)
    for g, w in zip(got, want):
        assert g.tokens == w.tokens
        np.testing.assert_allclose(g.log_probs, w.log_probs, rtol=0, atol=1e-4)
        assert g.log_prob == pytest.approx(sum(w.log_probs), abs=1e-3)
    ids = ours.score_batch([[ours.tokenizer.piece_id(p) for p in s] for s in srcs[:3]],
                           [[ours.tokenizer.piece_id(p) for p in t] for t in tgts[:3]])
    assert [r.log_probs for r in ids] == [r.log_probs for r in got[:3]]
    assert ids[0].tokens[-1] == EOS


# ----------------------------------------------------------------------------- top-p
@torch.no_grad()
def nucleus(model, src: list[int], topk: int, temperature: float, topp: float) -> np.ndarray:
    """The first token's top-k, tempered, top-p distribution [V], from the torch logits."""
    logits = model(torch.tensor([src + [EOS]]), torch.tensor([[2]]))[0, -1].double().numpy()
    order = np.argsort(-logits, kind="stable")[:topk or None]  # topk 0: all
    p = np.zeros_like(logits)
    q = np.exp((logits[order] - logits[order].max()) / temperature)
    q /= q.sum()
    keep = np.cumsum(q) - q < topp
    p[order[keep]] = q[keep] / q[keep].sum()
    return p


@pytest.mark.parametrize("topk", [20, 0])  # 0: the whole vocabulary, in id order, not ranked
def test_sampling_topp_draws_from_ctranslate2s_nucleus(engines, topk):
    ours, ct2, model, pieces = engines
    src = random_sources(1, seed=7)[0][:-1]
    want = nucleus(model, src, topk=topk, temperature=3.0, topp=0.6)
    assert 2 <= np.count_nonzero(want) < (topk or len(want))  # a nucleus smaller than the top-k
    n = 3000
    got = ours.translate([src] * n, sampling_topk=topk, sampling_temperature=3.0, sampling_topp=0.6,
                         sampling_seed=11, max_decoding_length=1, batch_size=1000)
    ctranslate2.set_random_seed(11)
    theirs = ct2.translate_batch([as_pieces(pieces, src)] * n, beam_size=1, sampling_topk=topk,
                                 sampling_temperature=3.0, sampling_topp=0.6, max_decoding_length=1,
                                 min_decoding_length=0)
    for first in ([o[0] if o else EOS for o in got],
                  [pieces.index(r.hypotheses[0][0]) if r.hypotheses[0] else EOS for r in theirs]):
        counts = np.bincount(first, minlength=len(want)) / n
        assert set(np.flatnonzero(counts)) <= set(np.flatnonzero(want))  # never outside the nucleus
        np.testing.assert_allclose(counts, want, atol=5 * np.sqrt(0.25 / n))  # 5 sigma


# ----------------------------------------------------------------------------- lossless strategies
@pytest.fixture(scope="module")
def with_drafter(tmp_path_factory):
    root = tmp_path_factory.mktemp("rulesgad")
    spm = tiny_spm(root / "spm.model")
    verifier = write_model_dir(trained_model("pre"), spm, root / "verifier")
    drafter = write_model_dir(tiny_model(arch="nat-drafter", seed=9), spm, root / "drafter")
    return Translator(verifier, drafter=drafter, threads=1, compute_type="float32")


def test_lossless_strategies_with_rules_return_greedy_with_the_rules(with_drafter):
    t = with_drafter
    srcs = repetitive_sources(30, seed=8)
    for option in (dict(repetition_penalty=1.6), dict(no_repeat_ngram_size=2), dict(min_decoding_length=10)):
        want = t.translate(srcs, algo="greedy", **option)
        assert want != t.translate(srcs, algo="greedy")
        for algo in (None, "gad", "iad"):
            assert t.translate(srcs, algo=algo, **option) == want, (algo, option)


@pytest.mark.parametrize("option, message", [
    (dict(repetition_penalty=0), "repetition_penalty"), (dict(repetition_penalty=float("nan")), "repetition_penalty"),
    (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"), (dict(no_repeat_ngram_size=1.5), "no_repeat_ngram_size"),
    (dict(min_decoding_length=-2), "min_decoding_length"),
    (dict(min_decoding_length=8, max_decoding_length=4), "min_decoding_length=8 exceeds max_decoding_length=4"),
    (dict(sampling_topk=5, sampling_topp=0.0), "sampling_topp"), (dict(sampling_topp=1.5), "sampling_topp"),
    (dict(no_repeat_ngram_size=2, algo="gad++", beta=2), "algo 'gad++'"),
    (dict(return_alternatives=True, num_hypotheses=0), "num_hypotheses"),
])
def test_bad_values_raise_one_value_error_naming_the_option(with_drafter, option, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        with_drafter.translate(["a man"], **option)


def test_alternatives_are_translate_only(with_drafter):
    for call in (with_drafter.translate_scored, lambda texts, **kw: list(with_drafter.translate_iterable(texts, **kw))):
        with pytest.raises(ValueError, match="return_alternatives=True: only Translator.translate"):
            call(["a man"], return_alternatives=True)
