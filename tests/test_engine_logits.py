"""The engine's raw logits (Want.logits, what CTranslate2's repetition penalty edits) and
its shortlist-free encoding (what score_batch scores with), against the PyTorch model."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")

from export.tiny import random_sources, tiny_model, tiny_spm  # noqa: E402
from export.writer import write_model_dir  # noqa: E402
from pyfastdec.api import Translator  # noqa: E402
from pyfastdec.backends.base import Want  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from test_native_engine import make_shortlist  # noqa: E402  (tests/ is on sys.path: conftest.py)

BOS, EOS = 2, 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("logits")
    model = tiny_model(seed=21).eval()
    path = write_model_dir(model, tiny_spm(root / "spm.model"), root / "m")
    V = model.cfg.vocab_size
    shortlist = make_shortlist(V, [1, 2, 3], {7: [20, 21], 8: [22], 9: [30, 31, 32]})
    shortlist.save(root / "sl.bin")
    return model, path, root / "sl.bin"


@torch.no_grad()
def test_logits_are_the_models_and_their_log_softmax_the_log_probs(model_dir):
    model, path, _ = model_dir
    backend = NativeBackend(path, threads=1, shortlist=False)
    sources = random_sources(4, seed=22)
    targets = [[int(t) for t in np.random.default_rng(r).integers(5, 40, size=5)] for r in range(4)]
    tokens = np.array([[BOS] + t[:-1] for t in targets])
    out = backend.step(backend.start(backend.encode(sources)), tokens, Want(argmax=False, logits=True, logprobs=True))
    for r, src in enumerate(sources):
        want = model(torch.tensor([src]), torch.tensor(tokens[r:r + 1]))[0].double().numpy()
        np.testing.assert_allclose(out.logits[r], want, rtol=0, atol=1e-4 * np.abs(want).max())
        lse = np.log(np.exp(out.logits[r].astype(np.float64)).sum(-1, keepdims=True))
        np.testing.assert_allclose(out.logprobs[r], out.logits[r] - lse, rtol=0, atol=1e-5)


def test_shortlisted_logits_are_minus_inf_outside_and_encode_full_vocabulary_ignores_the_shortlist(model_dir):
    model, path, shortlist = model_dir
    full = NativeBackend(path, threads=1, shortlist=False)
    short = NativeBackend(path, threads=1, shortlist=shortlist)
    sources = [[7, 8, 3], [9, 3]]
    bos = np.full((2, 1), BOS)
    f = full.step(full.start(full.encode(sources)), bos, Want(argmax=False, logits=True, logprobs=True))
    s = short.step(short.start(short.encode(sources)), bos, Want(argmax=False, logits=True))
    inside = np.isfinite(s.logits)
    assert inside.sum() < inside.size / 2
    np.testing.assert_allclose(s.logits[inside], f.logits[inside], rtol=0, atol=1e-5)
    a = short.step(short.start(short.encode_full_vocabulary(sources)), bos, Want(argmax=False, logprobs=True))
    np.testing.assert_allclose(a.logprobs, f.logprobs, rtol=0, atol=1e-5)


def test_score_batch_scores_tokens_outside_the_shortlist(model_dir):
    _, path, shortlist = model_dir
    sources, targets = [[7, 8], [9]], [[25, 26, 27], [33, 5]]  # none of them in the sources' shortlists
    full = Translator(path, threads=1, compute_type="float32", shortlist=False).score_batch(sources, targets)
    short = Translator(path, threads=1, compute_type="float32", shortlist=shortlist).score_batch(sources, targets)
    assert all(np.isfinite(r.log_probs).all() for r in short)
    for a, b in zip(full, short):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.log_probs, b.log_probs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("shortlisted", [False, True])
def test_ruled_backend_without_rules_is_the_backend(model_dir, shortlisted):
    """RuledBackend's own log-softmax, argmax and top-k (over the shortlists' columns only)
    against the engine's: with rules that change nothing, greedy, beam search and scores agree."""
    from pyfastdec.decoding import beam_search, greedy
    from pyfastdec.decoding.logit_rules import LogitRules, RuledBackend
    _, path, shortlist = model_dir
    backend = NativeBackend(path, threads=1, shortlist=shortlist if shortlisted else False)
    ruled = RuledBackend(backend, LogitRules())
    sources = [[7, 8, 3], [9, 3], [7, 9, 8, 3]] + random_sources(5, seed=23)
    assert greedy(ruled, sources)[0] == greedy(backend, sources)[0]
    for a, b in zip(beam_search(ruled, sources, beam_size=3)[0], beam_search(backend, sources, beam_size=3)[0]):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], rtol=0, atol=1e-5)
