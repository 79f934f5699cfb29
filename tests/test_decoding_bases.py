"""The base classes behind the protocols (issue 28): a DraftSource that only proposes and
keeps runs through draft_and_verify on its no-op hooks; a backend that implements only
the Backend calls runs every strategy it can through BackendBase's defaults; the draft
policies share one cost table and acceptance estimator, and a DraftPolicy subclass that
only decides runs on the base's no-op hooks."""
from __future__ import annotations

import numpy as np
import pytest
from test_decoding_support import EOS, HeadsCorrector, RuleCorrector, corrected

from export.tiny import random_sources
from pyfastdec.backends.base import BackendBase, Want
from pyfastdec.decoding import blockwise, greedy, iad
from pyfastdec.decoding.bild import bild
from pyfastdec.decoding.draft_verify import DraftSource, accept_argmax, draft_and_verify
from pyfastdec.decoding.policies import AdaptiveDraftLength, DraftOrPlain, DraftPolicy, SourceDraftLength
from pyfastdec.decoding.policies.base import Acceptance, CostTable, LengthPolicy
from pyfastdec.decoding.result import DecodeStats

SOURCES = random_sources(6, seed=28)


class Minimal(BackendBase):
    """Only the calls every strategy makes (RuleCorrector's model): no arch, heads,
    shared encoder, drafting, scratch or model directory of its own."""

    def __init__(self):
        self._rule = RuleCorrector()
        self.tokens, self.vocab_size = self._rule.tokens, self._rule.vocab_size

    def encode(self, src_ids):
        return self._rule.encode(src_ids)

    def start(self, memory):
        return self._rule.start(memory)

    def step(self, state, tokens, want=Want()):
        return self._rule.step(state, tokens, want)

    def truncate(self, state, lengths):
        return self._rule.truncate(state, lengths)

    def select(self, state_or_memory, rows):
        return self._rule.select(state_or_memory, rows)


class SharedLittle(Minimal):
    """Minimal as BiLD's little model: it reads the big model's memory (attach), and has
    no engine drafting loop (draft_greedy stays None)."""

    shares_encoder = True

    def attach(self, host_memory):
        return host_memory


class OracleSource(DraftSource):
    """Only propose and keep: the next three tokens of each row's known output."""

    def __init__(self, targets: list[list[int]]):
        self.targets = targets

    def propose(self, prefixes):
        return [t[len(p):len(p) + 3] for t, p in zip(self.targets, prefixes)]

    def keep(self, rows):
        self.targets = [self.targets[r] for r in rows]


def test_a_draft_source_without_hooks_runs_on_the_defaults():
    expected, _ = greedy(Minimal(), SOURCES)
    stats = DecodeStats(sentences=len(SOURCES))
    source = OracleSource([corrected(s) + [EOS] for s in SOURCES])
    outs = draft_and_verify(Minimal(), SOURCES, source, accept_argmax, Want(argmax=True), None, stats)
    assert outs == expected and stats.accepted == stats.drafted > 0


def test_a_draft_source_without_keep_ids_refuses_the_edit_margin_rule_in_one_line():
    source = OracleSource([corrected(s) + [EOS] for s in SOURCES])
    with pytest.raises(ValueError, match="^draft_and_verify: the edit-margin rule is for source drafts "
                                         r"\(IAD\), not OracleSource$"):
        draft_and_verify(Minimal(), SOURCES, source, accept_argmax, Want(argmax=True, edit_margin=1.0), None,
                         DecodeStats(sentences=len(SOURCES)))


def test_a_backend_without_optional_capabilities_works_through_the_defaults():
    backend = Minimal()
    assert (backend.arch, backend.block_size, backend.proposal_heads) == ("transformer", None, 0)
    assert backend.shares_encoder is False and backend.draft_greedy is None and backend.model_dir is None
    assert backend.release_scratch() == 0 and backend.scratch_bytes() == 0
    assert backend.encode_full_vocabulary(SOURCES) == backend.encode(SOURCES)  # no shortlist: the same memory
    with pytest.raises(ValueError, match="^attach: Minimal has its own encoder"):
        backend.attach(backend.encode(SOURCES))
    with pytest.raises(ValueError, match="^draft: Minimal is not a drafter"):
        backend.draft(None, [[]], 4)
    expected, _ = greedy(backend, SOURCES)
    assert iad(backend, SOURCES)[0] == expected
    with pytest.raises(ValueError, match="^blockwise: Minimal has no proposal heads"):
        blockwise(backend, SOURCES)


def test_bild_runs_its_own_drafting_loop_where_the_little_backend_has_none():
    big, little = Minimal(), SharedLittle()
    expected, _ = greedy(big, SOURCES)
    outs, stats = bild(big, little, SOURCES, fallback=0.0, max_draft=4)
    assert outs == expected and stats.accepted > 0


def test_the_policies_share_one_cost_table_and_acceptance_estimator():
    gad, source = AdaptiveDraftLength(4), SourceDraftLength(4)
    for policy in (gad, source):
        assert isinstance(policy, LengthPolicy)
        assert isinstance(policy.costs, CostTable) and isinstance(policy.acceptance, Acceptance)
    assert isinstance(DraftOrPlain(), DraftPolicy)
    # GAD: Laplace's rule is the shared estimator with prior 1/2 and no decay
    for _ in range(3):
        gad.verified(5, np.array([2, 4]), np.array([4, 4]), 1e-3)
    reached, kept = [6, 6, 6, 3], [6, 6, 3, 3]
    assert gad.reached.tolist() == reached and gad.kept.tolist() == kept
    p = [(k + 1) / (r + 2) for k, r in zip(kept, reached)]
    assert gad.expected_tokens(2) == pytest.approx(1 + p[0] + p[0] * p[1])
    # GAD's verifier line is the shared table's, over every batch size
    for rows, width in ((1, 1), (1, 5), (4, 3)):
        gad.verified(width, np.zeros(rows, dtype=np.int64), np.full(rows, width - 1), 1e-3 + 1e-5 * rows * width)
    line = gad.costs["verify"].line(1)
    assert line == gad.costs["verify"].line(32) and line[1] > 0
    assert gad.rate(0, 2, 0) == pytest.approx(2 / (line[0] + line[1] * 2))


def test_costs_by_batch_size_are_trusted_only_with_enough_points():
    table = CostTable({"plain": False, "verify": True}, window=8, per_batch=True)
    step_seconds = {1: 1e-3, 2: 1e-3, 32: 4e-3}  # overhead-bound at 1 and 2 rows: not one line
    for n in range(3):
        for rows, seconds in step_seconds.items():
            table.add("plain", rows, rows, seconds)
        overall = table["plain"].all.predict(1)
        assert overall != pytest.approx(1e-3)
        # trusted from the third point on (CostsByRows.trust), the overall fit until then
        assert table.predict("plain", 1, 1) == pytest.approx(1e-3 if n == 2 else overall)
    assert table.predict("plain", 2, 2) == pytest.approx(1e-3) and table.predict("plain", 32, 32) == pytest.approx(4e-3)
    assert table.predict("plain", 8, 8) == pytest.approx(table["plain"].all.predict(8))  # unseen: the overall fit
    verify = table["verify"]
    for _ in range(3):
        table.add("verify", 4, 8, 3e-3)  # batch 4 at two widths: its slope is measured
        table.add("verify", 4, 16, 5e-3)
        table.add("verify", 2, 2, 2e-3)  # batch 2 at one width only: not
    assert verify.line(4) == pytest.approx((1e-3, 2.5e-4))
    assert verify.line(2) == (verify.all.a, verify.all.b) and verify.line(2) != pytest.approx((2e-3, 0.0))


class CapAtTwo(DraftPolicy):
    """Decides only: every draft capped at two tokens."""

    k_max = 2

    def choose_lengths(self, lengths):
        self.remember(2)
        return 2


def test_a_policy_that_only_decides_runs_on_the_base_hooks():
    expected, _ = greedy(RuleCorrector(), SOURCES)
    policy = CapAtTwo()
    assert iad(RuleCorrector(), SOURCES, policy=policy)[0] == expected and set(policy.chosen) == {2}
    outs, stats = blockwise(HeadsCorrector(heads=2, errors=0.0), SOURCES, policy=policy)
    assert outs == expected and 0 < stats.accepted
