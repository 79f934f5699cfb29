"""Reference decoding: batched greedy / beam search / drafter blocks agree with the backend."""
import numpy as np
import torch

from export.decode import beam_search, draft_block, greedy, pad_batch
from export.tiny import random_sources, tiny_model
from export.torch_backend import TorchBackend
from pyfastdec.backends.base import Want

torch.set_num_threads(1)
BOS, EOS = 2, 3


def backend_greedy(be, srcs, max_len):
    """Greedy through the Backend protocol, one row at a time (no batching effects)."""
    out = []
    for s in srcs:
        state = be.start(be.encode([s]))
        tok, hyp = BOS, []
        for _ in range(max_len):
            tok = int(be.step(state, np.array([[tok]]), Want()).argmax[0, 0])
            if tok == EOS:
                break
            hyp.append(tok)
        out.append(hyp)
    return out


def sequence_logprob(model, src, hyp):
    with torch.no_grad():
        logits = model(pad_batch([src], 0), torch.tensor([[BOS] + hyp]))
    lp = torch.log_softmax(logits.float(), -1)[0]
    return float(lp[torch.arange(len(hyp) + 1), torch.tensor(hyp + [EOS])].sum())


def test_batched_greedy_equals_backend_greedy_for_both_decoders():
    for kind in (dict(), dict(decoder_self="ssru")):
        model = tiny_model(seed=3, **kind)
        srcs = random_sources(7, seed=21)
        assert greedy(model, srcs, batch_size=3, max_len=15) == backend_greedy(TorchBackend(model), srcs, 15)


def test_beam_one_is_greedy_and_beam_is_batch_independent():
    model = tiny_model(seed=4)
    srcs = random_sources(6, seed=22)
    assert beam_search(model, srcs, beam=1, max_len=15) == greedy(model, srcs, max_len=15)
    b4 = beam_search(model, srcs, beam=4, batch_size=6, max_len=15)
    assert b4 == [beam_search(model, [s], beam=4, max_len=15)[0] for s in srcs]


def test_beam_scores_are_normalised_sequence_logprobs():
    """Checks the bookkeeping (parents, cache reordering): each returned score equals a
    full forward's log-prob of the returned hypothesis + EOS, divided by its length."""
    model = tiny_model(seed=4)  # a seed whose random model does emit EOS
    srcs = random_sources(6, seed=23)
    hyps, scores = beam_search(model, srcs, beam=5, batch_size=4, max_len=30, return_scores=True)
    checked = 0
    for src, hyp, score in zip(srcs, hyps, scores):
        if len(hyp) < 30:  # ended with EOS (hypotheses cut at max_len have no EOS term)
            assert abs(sequence_logprob(model, src, hyp) / (len(hyp) + 1) - score) < 1e-4
            checked += 1
    assert checked >= 3


def test_draft_block_matches_backend():
    model = tiny_model(arch="nat-drafter", seed=6)
    srcs = random_sources(3, seed=24)
    prefixes = [[5], [], [6, 7, 8]]
    ids, lp = draft_block(model, srcs, prefixes, 4)
    d = TorchBackend(model).draft(TorchBackend(model).encode(srcs), prefixes, 4)
    np.testing.assert_array_equal(ids.numpy(), d.ids)
    np.testing.assert_allclose(lp.numpy(), d.logprobs, atol=1e-6)


def test_length_limit_is_per_sentence_not_per_batch():
    """A model that never emits EOS runs to each sentence's own limit (floor(2.5 * len) + 10,
    pyfastdec's default_max_len), whatever else is in the batch."""
    model = tiny_model(seed=5)
    srcs = [[7, EOS], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, EOS]]
    for batched, alone in [(greedy(model, srcs), [greedy(model, [s])[0] for s in srcs]),
                           (beam_search(model, srcs, beam=2), [beam_search(model, [s], beam=2)[0] for s in srcs])]:
        assert batched == alone
        assert len(batched[0]) <= 2 * 2.5 + 10
