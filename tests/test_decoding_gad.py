"""gad() and gad_plus(): vanilla GAD equals greedy on the torch backend and the native
engine (float32 and int8) with a tiny trained drafter (some drafts accepted, some
rejected) and with an oracle drafter (exact iteration counts when it is perfect); GAD++
with beta=1, tau=0 equals GAD; larger beta/tau accept at least as much; the acceptance
rules on hand-made verifier outputs."""
from __future__ import annotations

import math

import numpy as np
import pytest
from test_decoding_support import (
    EOS,
    V,
    VARIANTS,
    backends,
    oracle_for,
    tiny_drafter,
    tiny_verifier,
)

from export.tiny import random_sources, tiny_spm
from pyfastdec.backends.base import StepOut
from pyfastdec.decoding import default_max_len, gad, gad_plus, greedy
from pyfastdec.decoding.draft_verify import accept_argmax, accept_topk

# ----------------------------------------------------------------------------- acceptance rules
def test_accept_argmax_keeps_the_matching_prefix_and_the_verifier_token():
    drafts = np.array([[5, 6, 7], [5, 9, 7], [6, 6, 6], [8, 8, 8]])
    lengths = np.array([3, 3, 0, 1])
    argmax = np.array([[5, 6, 7, 20], [5, 6, 7, 21], [6, 6, 6, 22], [8, 8, 8, 23]])
    j, nxt = accept_argmax(StepOut(argmax=argmax), drafts, lengths)
    # all pass + bonus | mismatch at 2nd -> verifier's 6 | no draft (padding never counts) | length 1
    assert j.tolist() == [3, 1, 0, 1] and nxt.tolist() == [20, 6, 6, 8]


def topk_out(ids, logps):
    return StepOut(topk_ids=np.array(ids), topk_logprobs=np.array(logps, dtype=np.float32))


def test_accept_topk_with_beta_1_tau_0_is_accept_argmax():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, V, size=(6, 5, 1))
    drafts = np.where(rng.random((6, 4)) < 0.7, ids[:, :-1, 0], 5)
    lengths = np.array([4, 3, 2, 1, 0, 4])
    logps = -rng.random((6, 5, 1))
    j1, n1 = accept_topk(0.0)(topk_out(ids, logps), drafts, lengths)
    j2, n2 = accept_argmax(StepOut(argmax=ids[:, :, 0]), drafts, lengths)
    assert j1.tolist() == j2.tolist() and n1.tolist() == n2.tolist()


def test_accept_topk_needs_rank_within_beta_and_log_prob_within_tau():
    # Each position's top-3: ids [10, 11, 12] with log-probs [-0.1, -0.6, -2.5].
    ids = [[[10, 11, 12]] * 3] * 4
    logps = [[[-0.1, -0.6, -2.5]] * 3] * 4
    drafts = np.array([[10, 11], [11, 12], [11, 13], [12, 10]])
    j, nxt = accept_topk(1.0)(topk_out(ids, logps), drafts, np.array([2, 2, 2, 2]))
    # 11 is 0.5 below the top: kept; 12 is 2.4 below: rejected; 13 is outside the top-3.
    assert j.tolist() == [2, 1, 1, 0] and nxt.tolist() == [10, 10, 10, 10]
    j, _ = accept_topk(3.0)(topk_out(ids, logps), drafts, np.array([2, 2, 2, 2]))
    assert j.tolist() == [2, 2, 1, 2]


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module")
def drafters(spm, tmp_path_factory):
    return dict(zip(("torch", "native", "int8"), backends(tiny_drafter(), spm, tmp_path_factory.mktemp("drafter"),
                                                            int8=True)))


@pytest.fixture(scope="module", params=list(VARIANTS))
def verifiers(request, spm, tmp_path_factory):
    made = backends(tiny_verifier(**VARIANTS[request.param]), spm, tmp_path_factory.mktemp(request.param), int8=True)
    return dict(zip(("torch", "native", "int8"), made))


# ----------------------------------------------------------------------------- GAD = greedy
@pytest.mark.parametrize("which", ["torch", "native", "int8"])
def test_gad_with_a_tiny_drafter_equals_greedy(verifiers, drafters, which):
    verifier, drafter = verifiers[which], drafters[which]
    sources = random_sources(24, seed=41) + [[EOS]]
    expected, g = greedy(verifier, sources)
    assert len({tuple(o) for o in expected}) >= 20  # outputs differ from source to source
    outs, stats = gad(verifier, drafter, sources[:8])
    assert outs == expected[:8]
    assert [gad(verifier, drafter, [s])[0][0] for s in sources] == expected
    for k in (2, 4):
        outs, stats = gad(verifier, drafter, sources, k=k)
        assert outs == expected and stats.hit_max_len == g.hit_max_len and stats.generated == g.generated
        assert 0 < stats.accepted < stats.drafted <= k * stats.row_steps  # accepted and rejected drafts
        # Accepted drafts save verifier steps of their rows; the batch's iteration count
        # is its slowest row's and need not drop (the tiny models train differently per
        # CPU, and on an AVX2-only one the longest row gains nothing).
        assert stats.row_steps < g.row_steps and stats.iterations <= g.iterations
    if which != "int8":  # same float32 weights: the same drafts are accepted
        assert gad(verifiers["native"], drafters["native"], sources)[1].accepted == gad(
            verifiers["torch"], drafters["torch"], sources)[1].accepted


class DraftAfter:
    """A draft-length policy (decoding/policies/draft_length.py) that chooses plain steps for the
    first `plain` iterations of a call, then the whole block: rows that end within the
    plain steps finish before the drafter's first draft, so the drafter makes its memory
    late, for the rows still live. Per row the schedule is the same alone or in a batch."""

    def __init__(self, k_max: int, plain: int = 2):
        self.k_max, self.plain, self.calls = k_max, plain, 0

    def choose(self, rows: int, drafter_tokens: int) -> int:
        self.calls += 1
        return 0 if self.calls <= self.plain else self.k_max

    def drafted(self, tokens: int, seconds: float) -> None:
        pass

    def verified(self, width, accepted, lengths, seconds) -> None:
        pass


def check_late_drafts(verifier, drafter, sources, k: int = 4) -> None:
    """GAD whose drafter starts late gives greedy's outputs, and every row accepts what it
    accepts alone: the drafter's memory holds exactly the live rows, in their order (a
    memory of the wrong rows drafts for other sentences: still greedy's output, but other
    acceptance)."""
    expected, _ = greedy(verifier, sources)
    # some rows end within the 2 plain steps (EOS at the 1st or 2nd), others draft
    assert any(len(o) < 2 for o in expected) and sum(len(o) > 4 for o in expected) >= 2
    outs, stats = gad(verifier, drafter, sources, k=k, policy=DraftAfter(k))
    assert outs == expected
    alone = [gad(verifier, drafter, [s], k=k, policy=DraftAfter(k))[1].accepted for s in sources]
    assert stats.accepted == sum(alone) > 0


@pytest.mark.parametrize("which", ["native", "int8"])
def test_gad_drafts_late_for_the_rows_still_live(verifiers, drafters, which):
    sources = [[EOS], [7, EOS]] + random_sources(12, seed=43) + [[EOS], [9, 12, EOS]]
    check_late_drafts(verifiers[which], drafters[which], sources)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_a_perfect_drafter_gives_k_plus_1_tokens_per_iteration(verifiers, k):
    verifier = verifiers["native"]
    sources = random_sources(8, seed=42)
    expected, g = greedy(verifier, sources)
    outs, stats = gad(verifier, oracle_for(verifier, sources), sources, k=k)
    assert outs == expected
    # T tokens per row (EOS included when the row ended with it); each iteration yields
    # k accepted + 1 verified token, the last one what is left.
    tokens = [len(o) + (i not in g.hit_max_len) for i, o in enumerate(outs)]
    assert stats.row_steps == sum(math.ceil(t / (k + 1)) for t in tokens)
    assert stats.iterations == max(math.ceil(t / (k + 1)) for t in tokens)
    assert stats.accepted == stats.drafted and stats.generated == sum(tokens)


def test_a_noisy_drafter_still_gives_greedy(verifiers):
    for which in ("torch", "native", "int8"):
        verifier = verifiers[which]
        sources = random_sources(8, seed=43) + [[EOS]]
        expected, _ = greedy(verifier, sources)
        drafter = oracle_for(verifier, sources, block_size=5, noise=True)
        outs, stats = gad(verifier, drafter, sources)
        assert outs == expected
        assert 0 < stats.accepted < stats.drafted


# ----------------------------------------------------------------------------- GAD++
@pytest.mark.parametrize("which", ["torch", "native", "int8"])
def test_gad_plus_beta_1_tau_0_is_vanilla_gad(verifiers, drafters, which):
    verifier = verifiers[which]
    sources = random_sources(8, seed=44)
    for drafter in (drafters[which], oracle_for(verifier, sources, noise=True)):
        vanilla, vs = gad(verifier, drafter, sources)
        plus, ps = gad_plus(verifier, drafter, sources, beta=1, tau=0.0)
        assert plus == vanilla
        assert (ps.iterations, ps.row_steps, ps.drafted, ps.accepted) == (vs.iterations, vs.row_steps,
                                                                            vs.drafted, vs.accepted)


@pytest.mark.parametrize("which", ["torch", "native"])
def test_looser_gad_plus_accepts_more_and_stays_well_formed(verifiers, drafters, which):
    verifier, drafter = verifiers[which], drafters[which]
    sources = random_sources(8, seed=45) + [[EOS]]
    _, vanilla = gad(verifier, drafter, sources)
    for beta, tau in ((3, 1.0), (5, 3.0)):
        outs, stats = gad_plus(verifier, drafter, sources, beta=beta, tau=tau)
        assert len(outs) == len(sources)
        for src, out in zip(sources, outs):
            assert len(out) <= default_max_len(len(src))
            assert all(isinstance(t, int) and 0 <= t < V and t != EOS for t in out)
        assert stats.accepted <= stats.drafted
        assert stats.mean_accepted >= vanilla.mean_accepted
    assert stats.accepted > 0


def test_gad_plus_rejects_bad_parameters(verifiers, drafters):
    verifier, drafter = verifiers["native"], drafters["native"]
    with pytest.raises(ValueError, match="beta"):
        gad_plus(verifier, drafter, [[EOS]], beta=0)
    with pytest.raises(ValueError, match="tau"):
        gad_plus(verifier, drafter, [[EOS]], tau=-1.0)
    with pytest.raises(ValueError, match="nat-drafter"):
        gad(verifier, verifier, [[EOS]])
    assert gad(verifier, drafter, [])[0] == []
