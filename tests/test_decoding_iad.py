"""iad(): token-identical to greedy on the torch reference and the native engine (float32
and int8; batch 1 and 8; attention and SSRU decoders; a tiny trained model whose outputs
mostly copy the source, so drafts are partly accepted, with edits that reject the rest), exact draft/accept counts on a fake corrector, and the n-gram re-entry
rule on hand-made sequences."""
from __future__ import annotations

import pytest
from test_decoding_support import (
    EOS,
    VARIANTS,
    RuleCorrector,
    backends,
    corrected,
    tiny_verifier,
)

from export.tiny import random_sources, tiny_spm
from pyfastdec.decoding import greedy, iad
from pyfastdec.decoding.iad import SourceNgrams

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
    made = backends(tiny_verifier(**VARIANTS[request.param]), spm, tmp_path_factory.mktemp(request.param), int8=True)
    return dict(zip(("torch", "native", "int8"), made))


@pytest.mark.parametrize("which", ["torch", "native", "int8"])
def test_iad_equals_greedy(pair, which):
    backend = pair[which]
    sources = random_sources(24, seed=32) + [[EOS]]
    expected, g = greedy(backend, sources)
    assert len({tuple(o) for o in expected}) >= 20  # outputs differ from source to source
    batch8, stats = iad(backend, sources[:8])
    assert batch8 == expected[:8]
    assert iad(backend, sources)[0] == expected  # drafts capped by the cost policy
    everything, stats = iad(backend, sources, policy=None)  # every draft verified whole
    assert everything == expected
    assert [iad(backend, [s])[0][0] for s in sources] == expected
    assert stats.generated == g.generated and stats.hit_max_len == g.hit_max_len
    assert 0 < stats.accepted < stats.drafted  # drafts partly verified, partly rolled back
    assert stats.iterations <= g.iterations
    assert iad(backend, [])[0] == []
