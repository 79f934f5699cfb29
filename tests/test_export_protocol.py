"""The Backend protocol supports lossless speculative decoding as designed in base.py:
a GAD-style loop (drafter proposes k tokens, verifier checks them in one step of k + 1,
truncate rolls back the rejected tail) reproduces greedy token for token, with rows of
one batch at different lengths."""
import numpy as np
import torch

from export.decode import greedy
from export.tiny import random_sources, tiny_model
from export.torch_backend import TorchBackend
from pyfastdec.backends.base import Want

torch.set_num_threads(1)
BOS, EOS = 2, 3


def speculative(verifier: TorchBackend, propose, srcs, k, max_len=20):
    """Batched draft-and-verify. Row state: accepted tokens (no BOS); the verifier holds
    BOS + accepted[:-1], the last accepted token (or BOS) is fed with the draft."""
    mem = verifier.encode(srcs)
    state = verifier.start(mem)
    accepted = [[] for _ in srcs]
    live = list(range(len(srcs)))
    while live:
        drafts = propose(live, [accepted[r] for r in live], k)  # [rows, k]
        last = np.array([[accepted[r][-1] if accepted[r] else BOS] for r in live])
        out = verifier.step(state, np.concatenate([last, drafts], 1), Want(argmax=True))
        keep_rows, lengths = [], []
        for i, r in enumerate(live):
            pred = out.argmax[i]  # pred[j] = verifier's token after (last, d1..dj)
            j = 0
            while j < k and drafts[i, j] == pred[j]:
                j += 1
            new = list(drafts[i, :j]) + [pred[j]]  # accepted drafts + verifier's own token
            done = False
            for t in new:
                if t == EOS or len(accepted[r]) >= max_len:
                    done = True
                    break
                accepted[r].append(int(t))
            if not done:
                keep_rows.append(i)
                # Positions held: BOS + every accepted token except the newest (fed next time).
                lengths.append(len(accepted[r]))
        state = verifier.select(state, np.array(keep_rows, dtype=np.int64))
        verifier.truncate(state, np.array(lengths, dtype=np.int64))
        live = [live[i] for i in keep_rows]
    return accepted


def test_gad_with_drafter_equals_greedy():
    verifier = TorchBackend(tiny_model(seed=4))
    drafter = TorchBackend(tiny_model(arch="nat-drafter", seed=9))
    srcs = random_sources(5, seed=31)
    dmem = drafter.encode(srcs)

    def propose(rows, prefixes, k):
        return drafter.draft(drafter.select(dmem, np.array(rows)), prefixes, k).ids

    assert speculative(verifier, propose, srcs, k=4) == greedy(verifier.model, srcs, max_len=20)


def test_perfect_and_useless_drafts_both_equal_greedy():
    verifier = TorchBackend(tiny_model(seed=4))
    srcs = random_sources(4, seed=32)
    ref = greedy(verifier.model, srcs, max_len=20)

    def oracle(rows, prefixes, k):  # the greedy continuation: everything is accepted
        return np.array([(ref[r][len(p):] + [EOS] * k)[:k] for r, p in zip(rows, prefixes)])

    def junk(rows, prefixes, k):  # never right (id 1 = unk): one token per iteration
        return np.ones((len(rows), k), dtype=np.int64)

    assert speculative(verifier, oracle, srcs, k=3) == ref
    assert speculative(verifier, junk, srcs, k=3) == ref
