"""beam_search(): beam 1 is greedy; the best hypothesis and its score match the
training-side reference (export/decode.py) and a teacher-forced rescoring; n-best lists
are sorted and distinct; a row decodes the same alone and inside a batch."""
from __future__ import annotations

import math

import pytest
from test_decoding_support import EOS, VARIANTS, backends, tiny_verifier, torch

from export.decode import beam_search as reference_beam_search
from export.tiny import random_sources, tiny_spm
from pyfastdec.decoding import beam_search, greedy

@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module", params=list(VARIANTS))
def model_and_backends(request, spm, tmp_path_factory):
    model = tiny_verifier(**VARIANTS[request.param])
    return (model, *backends(model, spm, tmp_path_factory.mktemp(request.param)))


@torch.no_grad()
def rescore(model, src, tokens, finished, alpha):
    """sum log p(tokens (+ EOS if finished)) / (len(tokens) + 1)^alpha, teacher-forced."""
    target = tokens + ([EOS] if finished else [])
    logp = torch.log_softmax(model(torch.tensor([src]), torch.tensor([[2] + tokens])), -1)[0]
    total = sum(float(logp[i, t]) for i, t in enumerate(target))
    return total / (len(tokens) + 1) ** alpha


def test_beam_one_is_greedy(model_and_backends):
    _, ref, native = model_and_backends
    sources = random_sources(8, seed=21) + [[EOS]]
    for backend in (ref, native):
        hyps, stats = beam_search(backend, sources, beam_size=1)
        assert [h[0].tokens for h in hyps] == greedy(backend, sources)[0]
        assert all(len(h) == 1 for h in hyps)
        assert stats.iterations == greedy(backend, sources)[1].iterations


def test_best_hypothesis_matches_the_reference_beam_search(model_and_backends):
    model, ref, native = model_and_backends
    sources = random_sources(6, seed=22)
    expected, expected_scores = reference_beam_search(model, sources, beam=4, return_scores=True)
    for backend in (ref, native):
        hyps, _ = beam_search(backend, sources, beam_size=4)
        assert [h[0].tokens for h in hyps] == expected
        for h, score in zip(hyps, expected_scores):
            assert h[0].score == pytest.approx(score, abs=1e-4)


@pytest.mark.parametrize("alpha", [1.0, 0.0, 0.6])
def test_nbest_sorted_distinct_and_scored_as_documented(model_and_backends, alpha):
    model, _, native = model_and_backends
    sources = random_sources(4, seed=23)
    hyps, _ = beam_search(native, sources, beam_size=4, alpha=alpha)
    for src, nbest in zip(sources, hyps):
        assert 1 <= len(nbest) <= 4
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == len(nbest)
        for h in nbest:
            assert h.score == pytest.approx(rescore(model, src, h.tokens, h.finished, alpha), abs=1e-4)


def test_nbest_argument_limits_the_list(model_and_backends):
    _, _, native = model_and_backends
    sources = random_sources(3, seed=24)
    full, _ = beam_search(native, sources, beam_size=4)
    two, _ = beam_search(native, sources, beam_size=4, nbest=2)
    assert [h[:2] for h in full] == two


def test_a_row_alone_equals_the_row_in_a_batch(model_and_backends):
    _, ref, native = model_and_backends
    sources = random_sources(7, seed=25)
    for backend in (ref, native):
        batched, _ = beam_search(backend, sources, beam_size=3)
        for i in (0, 3, 6):
            alone, _ = beam_search(backend, [sources[i]], beam_size=3)
            assert [h.tokens for h in alone[0]] == [h.tokens for h in batched[i]]
            scores, want = [h.score for h in alone[0]], [h.score for h in batched[i]]
            if backend is native:  # the README promises bit for bit
                assert scores == want
            else:  # torch picks its matmul blocking by batch size: last-bit differences
                assert scores == pytest.approx(want, abs=1e-5)


def test_max_len_returns_unfinished_hypotheses(model_and_backends):
    model, _, native = model_and_backends
    sources = random_sources(4, seed=26)
    hyps, stats = beam_search(native, sources, beam_size=3, max_len=2)
    assert stats.iterations <= 2
    for src, nbest in zip(sources, hyps):
        assert nbest and all(len(h.tokens) <= 2 for h in nbest)
        assert all(h.finished or len(h.tokens) == 2 for h in nbest)  # cut exactly at max_len
        for h in nbest:
            assert h.score == pytest.approx(rescore(model, src, h.tokens, h.finished, 1.0), abs=1e-4)
    assert any(not h.finished for n in hyps for h in n)
    assert stats.hit_max_len == [i for i, n in enumerate(hyps) if not n[0].finished]


def test_empty_source_empty_batch_and_bad_beam(model_and_backends):
    model, ref, native = model_and_backends
    for backend in (ref, native):
        hyps, _ = beam_search(backend, [[EOS]], beam_size=3)
        assert hyps[0][0].tokens == reference_beam_search(model, [[EOS]], beam=3)[0]
        assert beam_search(backend, [], beam_size=3)[0] == []
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        beam_search(native, [[EOS]], beam_size=0)


def test_scores_are_finite_log_prob_averages(model_and_backends):
    _, _, native = model_and_backends
    hyps, _ = beam_search(native, random_sources(3, seed=27), beam_size=5)
    assert all(math.isfinite(h.score) and h.score <= 0 for n in hyps for h in n)
