"""IAD's draft-length policy (source_draft_length.py): the decision on synthetic costs,
and IAD's cost against greedy's on a fake machine whose step costs are known, for text
the model copies and text it rewrites (where verifying whole drafts made IAD quadratic).

Costs here are a function of the token rows a step computes, charged by a backend
wrapper and given to the policy as its cost model, so every decision and every assertion
is deterministic; bench/studies/iad_bound.py measures the same on the real model and clock."""
from __future__ import annotations

import numpy as np
import pytest
from test_decoding_support import EOS, V, Charged, RuleCorrector, corrected

from pyfastdec.decoding import greedy, iad
from pyfastdec.decoding.policies import SourceDraftLength


def batch1_cost(token_rows: int, drafted: bool) -> float:
    """Batch-1-like: a call costs mostly its fixed overhead; a verification pays a little
    more (acceptance, roll-back) than a plain step."""
    return 1.0 + 0.05 * token_rows + (0.05 if drafted else 0.0)


def compute_bound_cost(token_rows: int, drafted: bool) -> float:
    """Large-batch-like: every token row computed costs."""
    return 0.2 + 0.1 * token_rows + (0.05 if drafted else 0.0)


class Rewriter(RuleCorrector):
    """A corrector that keeps every other source token and replaces the rest: after each
    kept token (a unique source n-gram) IAD re-enters with the rest of the source, whose
    first token is always wrong. The worst case for verifying whole drafts."""

    @staticmethod
    def next_token(src, prefix):
        body = [t for t in src if t != EOS]
        target = [t if i % 2 == 0 else 5 + (t * 7) % (V - 5) for i, t in enumerate(body)] + [EOS]
        if len(prefix) < len(target) and prefix == target[:len(prefix)]:
            return target[len(prefix)]
        return EOS


def distinct_sources(n: int, length: int, seed: int) -> list[list[int]]:
    """Sources of distinct ids (every n-gram unique, so every kept token re-enters)."""
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.permutation(np.arange(5, V))[:length]] + [EOS] for _ in range(n)]


def run_both(backend_cls, sources, cost, batch):
    """(greedy outputs, greedy cost, IAD outputs, IAD cost) over batches of `batch`."""
    g_backend, i_backend = Charged(backend_cls(), cost), Charged(backend_cls(), cost)
    policy = SourceDraftLength(max(len(s) for s in sources), cost_model=cost)
    g_out, i_out = [], []
    for start in range(0, len(sources), batch):
        part = sources[start:start + batch]
        g_out += greedy(g_backend, part)[0]
        i_out += iad(i_backend, part, policy=policy)[0]
    return g_out, g_backend.spent, i_out, i_backend.spent


# ----------------------------------------------------------------------------- IAD vs greedy on a known machine
@pytest.mark.parametrize("cost", [batch1_cost, compute_bound_cost])
@pytest.mark.parametrize("batch", [1, 8])
def test_on_text_the_model_rewrites_iad_costs_at_most_10_percent_more_than_greedy(cost, batch):
    sources = distinct_sources(40, 30, seed=1)
    g_out, g_cost, i_out, i_cost = run_both(Rewriter, sources, cost, batch)
    assert i_out == g_out
    assert i_cost <= 1.10 * g_cost
    # The input is the adversarial one: verifying every draft whole costs far more.
    unbounded = Charged(Rewriter(), cost)
    for start in range(0, len(sources), batch):
        assert iad(unbounded, sources[start:start + batch], policy=None)[0] == g_out[start:start + batch]
    assert unbounded.spent > 1.5 * g_cost


def copyable_sources(n: int, seed: int) -> list[list[int]]:
    """Sentences of 20-40 tokens that RuleCorrector copies but for one or two edits."""
    rng = np.random.default_rng(seed)
    kept = [t for t in range(5, V) if t % 7 and t % 11 and t % 13]  # ids corrected() copies
    edits = [14, 22, 26]  # deleted, doubled, replaced
    out = []
    for _ in range(n):
        body = [int(t) for t in rng.choice(kept, size=int(rng.integers(20, 41)))]
        for _ in range(int(rng.integers(1, 3))):
            body[int(rng.integers(len(body)))] = int(rng.choice(edits))
        out.append(body + [EOS])
    return out


@pytest.mark.parametrize("batch", [1, 8])
def test_on_text_the_model_copies_iad_keeps_its_speed(batch):
    sources = copyable_sources(60, seed=5)
    g_out, g_cost, i_out, i_cost = run_both(RuleCorrector, sources, batch1_cost, batch)
    assert i_out == g_out == [corrected(s) for s in sources]
    unbounded = Charged(RuleCorrector(), batch1_cost)
    for start in range(0, len(sources), batch):
        iad(unbounded, sources[start:start + batch], policy=None)
    assert i_cost < 0.6 * g_cost
    assert i_cost <= 1.15 * unbounded.spent  # close to verifying whole drafts, where that pays


# ----------------------------------------------------------------------------- the decision
def feed(policy, accept_rate, draft_len, iterations, rows=1, seed=0):
    """Drive the policy as IAD does: every row has a draft of draft_len tokens, each kept
    with accept_rate while all before it were. Returns the caps chosen."""
    rng = np.random.default_rng(seed)
    chosen = []
    for _ in range(iterations):
        policy.iteration_started()
        k = min(policy.choose_lengths([draft_len] * rows), draft_len)
        chosen.append(k)
        keep = rng.random((rows, max(k, 1))) < accept_rate
        accepted = np.cumprod(keep, axis=1).sum(axis=1) if k else np.zeros(rows, dtype=np.int64)
        policy.verified(k + 1, accepted, np.full(rows, k), 0.0)
    return chosen


def test_good_drafts_are_verified_whole():
    policy = SourceDraftLength(32, cost_model=batch1_cost)
    chosen = feed(policy, 0.97, 20, 60)
    assert np.mean([k >= 16 for k in chosen[-30:]]) > 0.9


def test_failing_drafts_give_plain_steps_with_rare_one_token_probes():
    policy = SourceDraftLength(32, cost_model=batch1_cost, revisit=16)
    chosen = feed(policy, 0.02, 20, 300)[60:]  # after learning the text
    assert chosen.count(0) >= 0.85 * len(chosen) and np.mean(chosen) <= 0.15
    assert chosen.count(1) > 0  # it keeps probing


def test_the_policy_follows_the_text_back_to_long_drafts():
    policy = SourceDraftLength(32, cost_model=batch1_cost)
    feed(policy, 0.02, 20, 200, seed=1)          # text the model rewrites ...
    chosen = feed(policy, 0.97, 20, 300, seed=2)  # ... then text it copies
    assert np.mean([k >= 16 for k in chosen[-100:]]) > 0.9


def test_acceptance_counts_match_a_per_position_count():
    policy = SourceDraftLength(8, decay=1.0)
    accepted, lengths = np.array([0, 2, 5, 8, 3]), np.array([4, 2, 8, 8, 6])
    policy.verified(9, accepted, lengths, 0.0)
    reached = [sum(1 for a, n in zip(accepted, lengths) if i < n and i <= a) for i in range(8)]
    kept = [sum(1 for a, n in zip(accepted, lengths) if i < n and i < a) for i in range(8)]
    assert policy.reached.tolist() == reached and policy.kept.tolist() == kept
    prior, weight = SourceDraftLength.PRIOR, SourceDraftLength.PRIOR_ROWS
    p = [(k + prior * weight) / (r + weight) for k, r in zip(kept, reached)]
    assert policy.expected_tokens(3) == pytest.approx(1 + p[0] + p[0] * p[1] + p[0] * p[1] * p[2])


def test_bad_arguments():
    with pytest.raises(ValueError, match="decay"):
        SourceDraftLength(8, decay=0.0)
    with pytest.raises(ValueError, match="policy"):
        iad(RuleCorrector(), [[5, EOS]], policy="whole")


def test_old_acceptance_fades():
    """Acceptance belongs to the text being corrected: 50 fully accepted drafts after
    500 rejected ones must already count for more than the rejections."""
    policy = SourceDraftLength(8)
    for _ in range(500):
        policy.verified(9, np.array([0]), np.array([8]), 0.0)
    for _ in range(50):
        policy.verified(9, np.array([8]), np.array([8]), 0.0)
    assert policy.expected_tokens(1) > 1.5
