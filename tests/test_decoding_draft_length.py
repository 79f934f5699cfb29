"""AdaptiveDraftLength: the cost/acceptance decision on synthetic measurements, and GAD
with the policy stays exactly greedy on real (tiny, trained) models, whose drafts are
partly accepted, and with an oracle drafter."""
from __future__ import annotations

import numpy as np
import pytest
from test_decoding_support import backends, oracle_for, tiny_drafter, tiny_verifier

from export.tiny import random_sources, tiny_spm
from pyfastdec.decoding import gad, greedy
from pyfastdec.decoding.policies import AdaptiveDraftLength


def feed(policy, rows, verifier_seconds, drafter_seconds, accept_rate, iterations=30, seed=0):
    """Run the policy's loop against a synthetic machine: verifier_seconds(x) and
    drafter_seconds(x) for x token rows; each drafted token kept with accept_rate."""
    rng = np.random.default_rng(seed)
    for _ in range(iterations):
        drafter_tokens = rows * (1 + 8 + policy.k_max)
        k = policy.choose(rows, drafter_tokens)
        if k:
            policy.drafted(drafter_tokens, drafter_seconds(drafter_tokens))
        keep = rng.random((rows, max(k, 1))) < accept_rate
        accepted = np.cumprod(keep, axis=1).sum(axis=1) if k else np.zeros(rows, dtype=np.int64)
        policy.verified(k + 1, accepted, np.full(rows, k), verifier_seconds(rows * (k + 1)))
    return policy.chosen[AdaptiveDraftLength.EXPLORE:]


def test_overhead_bound_calls_verify_the_whole_draft():
    # batch-1-like: a call costs 1 ms whatever it computes; drafts mostly right
    policy = AdaptiveDraftLength(8)
    chosen = feed(policy, 1, lambda x: 1e-3 + 1e-7 * x, lambda x: 1e-3 + 1e-7 * x, 0.9)
    assert set(chosen) == {8}


def test_compute_bound_calls_with_poor_drafts_fall_back_to_greedy_steps():
    # large-batch-like: time grows with every token row; drafts mostly wrong
    policy = AdaptiveDraftLength(8)
    chosen = feed(policy, 32, lambda x: 1e-4 + 3e-5 * x, lambda x: 1e-4 + 3e-5 * x, 0.3)
    assert set(chosen) == {0}


def test_in_between_a_shorter_verification_wins():
    # verifier compute-bound, drafter cheap, acceptance falling with position
    policy = AdaptiveDraftLength(8)
    chosen = feed(policy, 16, lambda x: 1e-3 + 1e-5 * x, lambda x: 1e-4 + 1e-7 * x, 0.6)
    assert set(chosen) and all(0 < k < 8 for k in chosen)


def test_acceptance_estimate_follows_observations():
    policy = AdaptiveDraftLength(4)
    assert policy.expected_tokens(0) == 1.0
    for _ in range(50):  # every row keeps exactly 2 of 4 drafted tokens
        policy.verified(5, np.array([2, 2]), np.array([4, 4]), 1e-3)
    assert policy.expected_tokens(2) == pytest.approx(3.0, abs=0.05)
    assert policy.expected_tokens(4) == pytest.approx(3.0, abs=0.05)


def test_rejects_a_policy_for_another_block_size():
    sources = random_sources(2, seed=1)

    class _Drafter:
        arch, block_size = "nat-drafter", 4

    with pytest.raises(ValueError, match="blocks of 6"):
        gad(object(), _Drafter(), sources, policy=AdaptiveDraftLength(6))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    spm = tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")
    verifier = backends(tiny_verifier(), spm, tmp_path_factory.mktemp("v"))[1]
    drafter = backends(tiny_drafter(), spm, tmp_path_factory.mktemp("d"))[1]
    return verifier, drafter


class FixedCosts(AdaptiveDraftLength):
    """Decides on fixed costs (a drafter call 10 us; a verifier call 1 ms + 1 us per token
    row, overhead-bound) instead of the wall clock, so what it chooses, and so what a test
    covers, is the same on every machine: here drafting pays, whatever the load."""

    def drafted(self, tokens, seconds):
        super().drafted(tokens, 1e-5)

    def verified(self, width, accepted, lengths, seconds):
        super().verified(width, accepted, lengths, 1e-3 + 1e-6 * len(accepted) * width)


def gad_in_batches(verifier, drafter, sources, batch, policy):
    outs, accepted, drafted = [], 0, 0
    for i in range(0, len(sources), batch):
        got, stats = gad(verifier, drafter, sources[i:i + batch], policy=policy)
        outs, accepted, drafted = outs + got, accepted + stats.accepted, drafted + stats.drafted
    return outs, accepted, drafted


@pytest.mark.parametrize("batch", [1, 5, 16])
def test_gad_with_the_policy_is_greedy(pair, batch):
    verifier, drafter = pair
    sources = random_sources(16, seed=7)
    expected = greedy(verifier, sources)[0]
    assert len({tuple(o) for o in expected}) >= 12  # outputs differ from source to source
    policy = AdaptiveDraftLength(drafter.block_size)
    assert gad_in_batches(verifier, drafter, sources, batch, policy)[0] == expected
    assert 0 in policy.chosen and drafter.block_size in policy.chosen  # explored both ends
    # The wall clock may find drafting too dear for the tiny models after exploring; on
    # fixed costs it keeps drafting, and the tiny drafter is partly right, partly wrong.
    policy = FixedCosts(drafter.block_size)
    outs, accepted, drafted = gad_in_batches(verifier, drafter, sources, batch, policy)
    assert outs == expected and 0 < accepted < drafted
    assert policy.chosen[policy.EXPLORE:].count(drafter.block_size) > len(policy.chosen) // 2
    oracle = oracle_for(verifier, sources, block_size=drafter.block_size, noise=True)
    assert gad(verifier, oracle, sources, policy=FixedCosts(drafter.block_size))[0] == expected
