"""The vectorised beam_search equals the per-sentence implementation it replaced
(tests/beam_reference.py) exactly: the same n-best token lists, the same scores bit for
bit, the same finished flags, the same statistics; on

- a fake backend whose log-probs are a few exactly representable levels, so candidates tie
  across parents and within a parent all the time, some columns are -inf (a shortlist
  shorter than k), and EOS ranks anywhere: tie order, the EOS-within-beam rule, the early
  stop and the max_len cut are all exercised on every step;
- the tiny trained verifiers (attention and SSRU decoders, float32 and int8, 1 and 2
  threads) at several beams, n-best sizes, alphas and max_len;
- 64 real Multi30k sentences on the shipped en-de (SSRU, int8, shortlist) and en-de-attn
  models at batch 1, 7 and 32, 1 and 2 threads, n-best 1 and 5.
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
from beam_reference import beam_search as reference_beam_search
from test_decoding_support import VARIANTS, backends, tiny_verifier

from export.data import load_pairs
from export.tiny import random_sources, tiny_spm
from pyfastdec.backends.base import StepOut
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import beam_search
from pyfastdec.text import Tokenizer

MODELS = Path(__file__).resolve().parents[1] / "models"


def described(hyps) -> list[list[tuple]]:
    """Everything a caller sees of an n-best list; scores as their exact bits."""
    return [[(h.tokens, np.float64(h.score).tobytes(), h.finished) for h in nbest] for nbest in hyps]


def assert_same_search(backend, sources, **options):
    got, got_stats = beam_search(backend, sources, **options)
    want, want_stats = reference_beam_search(backend, sources, **options)
    assert described(got) == described(want), f"n-best lists differ ({options})"
    for field in ("iterations", "row_steps", "generated", "hit_max_len", "sentences"):
        assert getattr(got_stats, field) == getattr(want_stats, field), (field, options)
    return got


class TieBackend:
    """A fake verifier whose next-token log-probs depend on (source, prefix) through a
    hash, drawn from {0, -0.5, -1, ..., -3} (sums stay exact, so equal totals are common)
    with about one id in six at -inf. The top-k it returns is ordered by value then id and
    padded with (-1, -inf), as the engine pads a shortlist shorter than k. `select` copies
    prefixes like the engine copies a parent's state."""

    tokens = {"pad": 0, "unk": 1, "bos": 2, "eos": 3, "mask": 4}
    vocab_size = 11
    arch = "transformer"
    block_size = None

    def __init__(self, eos_level: int = 0):
        self.eos_level = eos_level  # added to EOS's level: larger -> EOS ranks lower

    def encode(self, src_ids):
        return [tuple(s) for s in src_ids]

    def start(self, memory):
        return [(src, ()) for src in memory]

    def logprobs(self, src, prefix) -> np.ndarray:
        rng = np.random.default_rng(zlib.crc32(repr((src, prefix)).encode()))
        levels = rng.integers(0, 7, self.vocab_size)
        levels[self.tokens["eos"]] = min(6, levels[self.tokens["eos"]] + self.eos_level)
        logp = -0.5 * levels
        logp[rng.random(self.vocab_size) < 1 / 6] = -np.inf
        logp[[self.tokens["pad"], self.tokens["bos"], self.tokens["mask"]]] = -np.inf
        return logp

    def step(self, state, tokens, want):
        assert tokens.shape == (len(state), 1) and want.topk > 0
        k = want.topk
        ids = np.full((len(state), 1, k), -1, dtype=np.int64)
        values = np.full((len(state), 1, k), -np.inf, dtype=np.float32)
        for i, ((src, prefix), token) in enumerate(zip(state, tokens[:, 0])):
            if prefix:
                assert token != self.tokens["bos"]
            else:
                assert token == self.tokens["bos"]
            prefix = prefix + (int(token),)
            state[i] = (src, prefix)
            logp = self.logprobs(src, prefix)
            order = np.lexsort((np.arange(self.vocab_size), -logp))[:k]
            order = order[np.isfinite(logp[order])]
            ids[i, 0, :order.size], values[i, 0, :order.size] = order, logp[order]
        return StepOut(topk_ids=ids, topk_logprobs=values)

    def select(self, state, rows):
        return [state[int(r)] for r in rows]


@pytest.mark.parametrize("eos_level", [0, 1, 3])
@pytest.mark.parametrize("beam", [1, 2, 3, 5])
def test_equal_to_the_reference_where_candidates_tie(eos_level, beam):
    backend = TieBackend(eos_level)
    sources = [[5 + (i * 7 + j) % 6 for j in range(1 + i % 5)] + [3] for i in range(24)]
    for alpha in (1.0, 0.0, 0.6):
        for max_len in (None, 1, 3):
            for nbest in (None, 1):
                got = assert_same_search(backend, sources, beam_size=beam, nbest=nbest, alpha=alpha,
                                         max_len=max_len)
                assert all(got)
    # The fake does meet what the test is for: equal scores, and both endings.
    hyps, _ = beam_search(backend, sources, beam_size=beam, max_len=3)
    scores = [h.score for nbest in hyps for h in nbest]
    assert len(set(scores)) < len(scores)
    if eos_level == 0:
        assert {h.finished for nbest in hyps for h in nbest} == {True, False}


def test_a_batch_of_one_and_a_batch_of_all_agree_with_the_reference_on_ties():
    backend = TieBackend(1)
    sources = [[5 + (i * 3 + j) % 6 for j in range(1 + i % 4)] + [3] for i in range(10)]
    together = assert_same_search(backend, sources, beam_size=4)
    alone = [assert_same_search(backend, [s], beam_size=4)[0] for s in sources]
    assert described(together) == described(alone)


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module", params=[(variant, threads) for variant in VARIANTS for threads in (1, 2)],
                ids=lambda p: f"{p[0]}-t{p[1]}")
def tiny_backends(request, spm, tmp_path_factory):
    variant, threads = request.param
    model = tiny_verifier(**VARIANTS[variant])
    _, native, native_int8 = backends(model, spm, tmp_path_factory.mktemp(variant), threads=threads, int8=True)
    return native, native_int8


@pytest.mark.parametrize("beam", [1, 2, 4, 5])
def test_equal_to_the_reference_on_the_tiny_trained_models(tiny_backends, beam):
    sources = random_sources(12, seed=31)
    for backend in tiny_backends:
        for options in ({}, {"nbest": 1}, {"alpha": 0.6}, {"alpha": 0.0}, {"max_len": 3}):
            assert_same_search(backend, sources, beam_size=beam, **options)
    hyps, _ = beam_search(tiny_backends[0], sources, beam_size=beam)
    assert len({tuple(n[0].tokens) for n in hyps}) > 1  # non-degenerate: outputs differ per source


def multi30k_sources(backend: NativeBackend, model_dir: Path, n: int) -> list[list[int]]:
    tok = Tokenizer(model_dir / "spm.model")
    eos = backend.tokens["eos"]
    return [tok.encode(s) + [eos] for s, _ in load_pairs("test_2016_flickr", "en", "de")[:n]]


@pytest.fixture(scope="module", params=[("en-de", 1), ("en-de", 2), ("en-de-attn", 1), ("en-de-attn", 2)],
                ids=lambda p: f"{p[0]}-t{p[1]}")
def shipped(request):
    name, threads = request.param
    backend = NativeBackend(MODELS / name, threads=threads, shortlist=name == "en-de")
    return backend, multi30k_sources(backend, MODELS / name, 64)


@pytest.mark.parametrize("nbest", [1, 5])
@pytest.mark.parametrize("batch_size", [1, 7, 32])
def test_equal_to_the_reference_on_real_sentences(shipped, batch_size, nbest):
    backend, sources = shipped
    firsts = []
    for i in range(0, len(sources), batch_size):
        got = assert_same_search(backend, sources[i:i + batch_size], beam_size=5, nbest=nbest)
        firsts += [tuple(n[0].tokens) for n in got]
    assert len(set(firsts)) == len(sources)  # real, distinct translations
