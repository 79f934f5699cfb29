"""beam_search(rule="hf") equals tests/beam_hf_reference.py, a per-sentence plain-Python
transcription of transformers' _beam_search (early_stopping=False): the same n-best
token lists, scores and finished flags, both through the vectorised scan (batches) and
the single-sentence one (batch 1); on the tie-heavy fake backend of
test_beam_vectorised.py (equal sums, -inf columns, EOS at any rank) and the tiny trained
verifiers. Against transformers itself: tests/test_convert_marian.py."""
from __future__ import annotations

import numpy as np
import pytest
from beam_hf_reference import beam_search_hf
from test_beam_vectorised import TieBackend
from test_decoding_support import VARIANTS, backends, tiny_verifier

from export.tiny import random_sources, tiny_spm
from pyfastdec.decoding import beam_search, greedy


def described(hyps) -> list[list[tuple]]:
    return [[(h.tokens, np.float64(h.score).tobytes(), h.finished) for h in nbest] for nbest in hyps]


def assert_equal_to_reference(backend, sources, beam, alpha=1.0, max_len=None, nbest=None):
    want = described(beam_search_hf(backend, sources, beam, alpha, max_len))
    if nbest is not None:
        want = [n[:nbest] for n in want]
    together, _ = beam_search(backend, sources, beam_size=beam, nbest=nbest, alpha=alpha, max_len=max_len, rule="hf")
    assert described(together) == want, (beam, alpha, max_len, nbest)
    alone = [beam_search(backend, [s], beam_size=beam, nbest=nbest, alpha=alpha, max_len=max_len, rule="hf")[0][0]
             for s in sources]
    assert described(alone) == want, (beam, alpha, max_len, nbest)
    return together


@pytest.mark.parametrize("eos_level", [0, 1, 3])
@pytest.mark.parametrize("beam", [1, 2, 3, 5])
def test_equal_to_the_reference_where_candidates_tie(eos_level, beam):
    backend = TieBackend(eos_level)
    sources = [[5 + (i * 7 + j) % 6 for j in range(1 + i % 5)] + [3] for i in range(24)]
    for alpha in (1.0, 0.0, 0.6, 2.0):
        for max_len in (None, 1, 3, 6):
            assert all(assert_equal_to_reference(backend, sources, beam, alpha, max_len))
    assert_equal_to_reference(backend, sources, beam, nbest=1)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    spm = tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")
    found = []
    for variant in VARIANTS:
        _, native, native_int8 = backends(tiny_verifier(**VARIANTS[variant]), spm, tmp_path_factory.mktemp(variant),
                                          threads=1, int8=True)
        found += [native, native_int8]
    return found


@pytest.mark.parametrize("beam", [2, 4, 5])
def test_equal_to_the_reference_on_the_tiny_trained_models(tiny_models, beam):
    sources = random_sources(12, seed=31)
    for backend in tiny_models:
        for alpha, max_len in ((1.0, None), (0.6, None), (2.0, None), (1.0, 4)):
            assert_equal_to_reference(backend, sources, beam, alpha, max_len)


def test_beam_1_is_greedy(tiny_models):
    """As HF's generate(num_beams=1), which runs greedy search: the pool of one is full at
    the first EOS, and no live hypothesis beats it."""
    sources = random_sources(16, seed=5)
    for backend in tiny_models:
        for max_len in (None, 3):
            hyps, _ = beam_search(backend, sources, beam_size=1, max_len=max_len, rule="hf")
            assert [n[0].tokens for n in hyps] == greedy(backend, sources, max_len)[0]


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match=r"rule must be one of pyfastdec, hf, got 'HF'"):
        beam_search(TieBackend(), [[5, 3]], beam_size=2, rule="HF")
