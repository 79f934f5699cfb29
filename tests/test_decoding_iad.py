"""iad(): token-identical to greedy on the torch reference and the native engine (batch 1
and 8, attention and SSRU decoders, rows that copy the draft for a while and rows that
diverge at once), exact draft/accept counts on a fake corrector, and the n-gram re-entry
rule on hand-made sequences."""
from __future__ import annotations

import pytest
from test_decoding_support import (
    EOS,
    RuleCorrector,
    backends,
    corrected,
    tiny_verifier,
)

from export.tiny import random_sources, tiny_spm
from pyfastdec.decoding import greedy, iad
from pyfastdec.decoding.iad import SourceNgrams

VARIANTS = {"attention": {"seed": 0}, "ssru": {"seed": 2, "decoder_self": "ssru", "eos_bias": 1.0}}


# ----------------------------------------------------------------------------- re-entry rule
def test_reentry_starts_with_the_whole_source():
    assert SourceNgrams([5, 6, 7, EOS], EOS).reentry([]) == [5, 6, 7, EOS]
    assert SourceNgrams([5, 6, 7], EOS).reentry([]) == [5, 6, 7, EOS]  # EOS added if missing
    assert SourceNgrams([EOS], EOS).reentry([]) == [EOS]
    assert SourceNgrams([EOS], EOS).reentry([9]) == []


def test_reentry_after_a_unique_ngram():
    src = SourceNgrams([5, 6, 7, 8, 6, 9, EOS], EOS)
    assert src.reentry([1, 7]) == [8, 6, 9, EOS]  # "7" occurs once
    assert src.reentry([9]) == [EOS]  # the last source token: only EOS is left
    assert src.reentry([1, 5, 6]) == [7, 8, 6, 9, EOS]  # "6" repeats, "5 6" is unique
    assert src.reentry([8, 6]) == [9, EOS]
    assert src.reentry([1, 6]) == []  # "1 6" absent, "6" ambiguous
    assert src.reentry([1, 2]) == []


def test_reentry_prefers_the_longest_unique_ngram():
    src = SourceNgrams([5, 6, 8, 7, 5, 6, 9, EOS], EOS)
    assert src.reentry([5, 6]) == []  # "5 6" and "6" both repeat
    assert src.reentry([7, 5, 6]) == [9, EOS]  # the 3-gram disambiguates
    assert src.reentry([3, 8, 7]) == [5, 6, 9, EOS]  # "3 8 7" absent -> "8 7"
    # EOS is never part of a matched n-gram (outputs never contain it).
    assert SourceNgrams([5, EOS], EOS).reentry([5]) == [EOS]


# ----------------------------------------------------------------------------- exact counts on the fake corrector
def test_a_copied_sentence_takes_one_verifier_call():
    src = [5, 6, 8, 9, 10, EOS]  # no multiples of 7, 11, 13: corrected() copies it
    outs, stats = iad(RuleCorrector(), [src], policy=None)  # every draft verified whole
    assert outs == [[5, 6, 8, 9, 10]]
    assert (stats.iterations, stats.drafted, stats.accepted, stats.generated) == (1, 6, 6, 6)


def test_a_deletion_costs_one_reentry():
    # 14 is deleted: accept 5 6, the verifier says 8 where the draft says 14; "8" is a
    # unique source 1-gram, so the next draft is "9 EOS", accepted whole.
    outs, stats = iad(RuleCorrector(), [[5, 6, 14, 8, 9, EOS]], policy=None)
    assert outs == [[5, 6, 8, 9]]
    assert (stats.iterations, stats.drafted, stats.accepted, stats.generated) == (2, 8, 4, 5)


def test_fake_corrector_batches_match_greedy():
    sources = random_sources(40, seed=31) + [[EOS], [5, 5, 5, 5, EOS], [22, 22, 39, 22, EOS]]
    expected, greedy_stats = greedy(RuleCorrector(), sources)
    assert expected == [corrected(s) for s in sources]
    assert iad(RuleCorrector(), sources)[0] == expected  # drafts capped by the cost policy
    outs, stats = iad(RuleCorrector(), sources, policy=None)  # every draft verified whole
    assert outs == expected
    assert [iad(RuleCorrector(), [s])[0][0] for s in sources[:8]] == expected[:8]
    assert stats.generated == greedy_stats.generated and stats.accepted <= stats.drafted
    # Mostly copies (with an edit every few tokens): about half greedy's per-row calls.
    assert stats.iterations < greedy_stats.iterations and stats.row_steps < 0.6 * greedy_stats.row_steps
    assert stats.row_steps + stats.accepted - len(sources) <= stats.generated <= stats.row_steps + stats.accepted


def test_max_len_cuts_long_drafts_exactly_like_greedy():
    sources = [[5, 6, 8, 9, 10, 12, 15, 16, 17, EOS], [5, 14, 6, EOS]]
    for max_len in (1, 2, 4, 8):
        expected, g = greedy(RuleCorrector(), sources, max_len=max_len)
        outs, stats = iad(RuleCorrector(), sources, max_len=max_len)
        assert outs == expected and stats.hit_max_len == g.hit_max_len


# ----------------------------------------------------------------------------- real models, both backends
@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request, spm, tmp_path_factory):
    return backends(tiny_verifier(**VARIANTS[request.param]), spm, tmp_path_factory.mktemp(request.param))


def copying_sources(backend, n: int, seed: int) -> list[list[int]]:
    """Sources that begin with (part of) what the model outputs for another source, so the
    first draft is partly accepted (tiny random models barely depend on their input)."""
    out = []
    for i, (src, hyp) in enumerate(zip(random_sources(n, seed=seed), greedy(backend, random_sources(n, seed=seed))[0])):
        out.append(hyp[:2 + i % 5] + src)
    return out


@pytest.mark.parametrize("which", ["torch", "native"])
def test_iad_equals_greedy(pair, which):
    backend = pair[0] if which == "torch" else pair[1]
    sources = random_sources(6, seed=32) + copying_sources(backend, 6, seed=33) + [[EOS]]
    expected, g = greedy(backend, sources)
    batch8, stats = iad(backend, sources[:8])
    assert batch8 == expected[:8]
    assert iad(backend, sources)[0] == expected  # drafts capped by the cost policy
    everything, stats = iad(backend, sources, policy=None)  # every draft verified whole
    assert everything == expected
    assert [iad(backend, [s])[0][0] for s in sources] == expected
    assert stats.generated == g.generated and stats.hit_max_len == g.hit_max_len
    assert 0 < stats.accepted <= stats.drafted  # some drafts were (partly) verified
    assert stats.iterations <= g.iterations
    assert iad(backend, [])[0] == []
