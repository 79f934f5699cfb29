"""DraftOrPlain (decoding/policies/draft_or_plain.py), the draft-or-plain cost policy of BiLD, on
hand-made measurements: it explores drafting then a plain run, keeps the cheaper mode,
probes the other after probe_every decisions (a drafting probe lasting PROBE_DRAFTS
decisions; twice as late after a probe that changed nothing), keeps costs per batch-size
bucket, and compares costs as ratios of averaged
seconds and tokens (one drafting iteration rejected at its first token must not make
drafting look twice as dear as it runs). A one-sentence call is decided whole, from the
costs of whole calls; a call of several rows runs plain whole once plain steps won in
every bucket it passes through, but for one call in probe_every (BiLD on trained models
under these decisions: test_shared_encoder.py)."""
from __future__ import annotations

import pytest

from pyfastdec.decoding.policies import DraftOrPlain


def decide(policy: DraftOrPlain, rows: int = 1) -> str:
    return "plain" if policy.plain_steps(rows) else "draft"


def explore(policy: DraftOrPlain, rows: int, tokens: int, seconds: float) -> None:
    """A bucket's first drafting measurement (a warm-up, left out), then EXPLORE_DRAFTS."""
    for _ in range(1 + DraftOrPlain.EXPLORE_DRAFTS):
        policy.drafted(rows, tokens, seconds)


def test_explores_then_keeps_the_cheaper_mode_and_probes_the_other():
    policy = DraftOrPlain(run=8, probe_every=4)
    assert [decide(policy) for _ in range(2)] == ["draft", "draft"]  # nothing measured yet
    policy.drafted(1, 4, 4000e-6)  # the warm-up: one-time costs, left out
    assert decide(policy) == "draft" and DraftOrPlain.cost(policy._bucket(1), "draft") == 0.0
    explore(policy, 1, 4, 400e-6)  # drafting: 100 us per token
    assert decide(policy) == "plain"  # one plain run to measure it
    policy.plain_ran(1, 8, 8 * 50e-6)  # plain: 50 us per token
    choices = [decide(policy) for _ in range(16)]
    # plain is cheaper; the 4th decision probes drafting, for PROBE_DRAFTS (3) decisions; that
    # probe changed nothing, so the next comes twice as late (8 decisions)
    assert DraftOrPlain.PROBE_DRAFTS == 3
    assert choices == ["plain"] * 3 + ["draft"] * 3 + ["plain"] * 7 + ["draft"] * 3
    policy.drafted(1, 8, 8 * 20e-6)
    for _ in range(20):
        policy.drafted(1, 5, 5 * 20e-6)  # drafting became cheap: it takes over
    assert [decide(policy) for _ in range(3)] == ["draft"] * 3


def test_costs_are_ratios_of_averages_not_averages_of_ratios():
    policy = DraftOrPlain(smoothing=0.5)
    bucket = policy._bucket(1)
    policy.drafted(1, 1, 1.0)  # the warm-up, left out
    # Alternating iterations: 6 tokens in 240 us, then 1 token (first draft rejected) in 120 us:
    # 360 us per 7 tokens = 51 us per token; the mean of the ratios would be 80 us.
    for _ in range(10):
        policy.drafted(1, 6, 240e-6)
        policy.drafted(1, 1, 120e-6)
    assert DraftOrPlain.cost(bucket, "draft") == pytest.approx(360e-6 / 7, rel=0.25)
    assert DraftOrPlain.cost(bucket, "draft") < 60e-6


def test_batch_sizes_keep_their_own_costs():
    policy = DraftOrPlain()
    for rows, draft_us, plain_us in ((1, 30e-6, 50e-6), (32, 40e-6, 10e-6)):
        explore(policy, rows, rows * 4, rows * 4 * draft_us)
        policy.plain_ran(rows, 8, rows * 8 * plain_us)
    assert decide(policy, rows=1) == "draft"  # batch 1: drafting pays
    assert decide(policy, rows=32) == "plain"  # batch 32: it does not
    assert decide(policy, rows=20) == "draft"  # 16-31 rows: a bucket not measured yet explores


def call(policy: DraftOrPlain, tokens: int, per_token: dict[str, float], iterations: int = 3) -> str:
    """One one-sentence call: the mode every iteration ran in; the call then reports
    tokens * per_token[mode] seconds."""
    policy.begin_call(1)
    modes = {decide(policy) for _ in range(iterations)}
    assert len(modes) == 1, modes  # decided whole
    mode = modes.pop()
    policy.plain_ran(1, 8, 1.0)  # measurements inside a whole call are not per-iteration costs
    policy.drafted(1, 4, 1.0)
    policy.end_call(tokens, tokens * per_token[mode])
    return mode


def test_a_one_sentence_call_is_decided_whole_from_whole_calls_costs():
    policy = DraftOrPlain(probe_every=4)
    # warm-ups (one-time costs, left out), then EXPLORE_CALLS of each mode, alternating
    assert [call(policy, 10, {"draft": 1.0, "plain": 1.0}) for _ in range(2)] == ["draft", "plain"]
    assert policy.calls.drafts == policy.calls.plains == 0
    cheap_drafts = {"draft": 60e-6, "plain": 80e-6}
    explored = [call(policy, 10 + i, cheap_drafts) for i in range(2 * DraftOrPlain.EXPLORE_CALLS)]
    assert explored == ["draft", "plain"] * DraftOrPlain.EXPLORE_CALLS
    # drafting is cheaper per token: it runs, and plain steps are probed on the 4th call,
    # then on the 8th after it, since that probe changed nothing
    later = [call(policy, 12, cheap_drafts) for _ in range(12)]
    assert later == ["draft"] * 3 + ["plain"] + ["draft"] * 7 + ["plain"]
    assert policy._bucket(1).drafts == policy._bucket(1).plains == 0  # no per-iteration cost was kept
    # drafting grows dear: the probes of plain steps see it, and plain steps take over
    dear_drafts = {"draft": 200e-6, "plain": 80e-6}
    for _ in range(40):
        call(policy, 12, dear_drafts)
    assert [call(policy, 12, dear_drafts) for _ in range(3)] == ["plain"] * 3


def test_calls_of_several_rows_are_decided_per_iteration():
    policy = DraftOrPlain()
    policy.begin_call(32)
    explore(policy, 32, 32 * 4, 32 * 4 * 40e-6)
    assert decide(policy, rows=32) == "plain"  # the per-iteration exploration's plain run
    policy.plain_ran(32, 8, 32 * 8 * 10e-6)
    assert decide(policy, rows=32) == "plain" and decide(policy, rows=1) == "draft"  # per bucket
    policy.end_call(500, 1.0)
    assert policy.calls.drafts == policy.calls.plains == 0


def measured(policy: DraftOrPlain, rows: int, draft_us: float, plain_us: float) -> None:
    explore(policy, rows, rows * 4, rows * 4 * draft_us * 1e-6)
    policy.plain_ran(rows, 8, rows * 8 * plain_us * 1e-6)


def test_a_call_of_several_rows_runs_plain_whole_once_plain_wins_in_every_bucket_it_passes():
    policy = DraftOrPlain(probe_every=4)
    for rows in (1, 2, 4, 8, 16):  # buckets 1..5: plain cheaper
        measured(policy, rows, draft_us=90, plain_us=60)
    policy.begin_call(32)
    assert policy.call_mode is None  # the 32-63 rows bucket is not measured yet: per iteration
    policy.end_call(100, 1.0)
    measured(policy, 32, draft_us=90, plain_us=40)
    modes = []
    for _ in range(8):
        policy.begin_call(32)
        modes.append(policy.call_mode)
        if policy.call_mode == "plain":
            assert policy.plain_steps(32) == policy.plain_steps(3) == DraftOrPlain.WHOLE_CALL
        policy.end_call(100, 1.0)
    assert modes == ["plain"] * 3 + [None] + ["plain"] * 3 + [None]  # a per-iteration call in every 4
    policy.begin_call(7)  # buckets 1..3 only
    assert policy.call_mode == "plain"
    policy.end_call(10, 1.0)
    assert policy.calls.drafts == policy.calls.plains == 0  # calls of several rows are not one-row costs
    # drafting cheaper where calls end (2-3 rows): calls are decided per iteration again
    for _ in range(30):
        policy.drafted(2, 2 * 4, 2 * 4 * 20e-6)
    policy.begin_call(32)
    assert policy.call_mode is None
    # the same when only the last row left (the 1-row bucket) drafts cheaper
    alone = DraftOrPlain()
    for rows in (2, 4, 8, 16, 32):
        measured(alone, rows, draft_us=90, plain_us=60)
    measured(alone, 1, draft_us=40, plain_us=60)
    alone.begin_call(32)
    assert alone.call_mode is None


def test_rejects_bad_settings():
    for kw in ({"run": 0}, {"probe_every": 0}, {"smoothing": 0.0}, {"smoothing": 1.5}):
        with pytest.raises(ValueError, match="DraftOrPlain"):
            DraftOrPlain(**kw)
