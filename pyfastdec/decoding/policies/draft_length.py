"""How many drafted tokens GAD verifies per iteration, chosen from measured costs
(lossless either way).

A longer draft pays when a model call costs mostly a fixed overhead (batch 1: weights
streamed once per call, Python, per-call work), and loses when the work grows with the
tokens computed (a large batch, where the GEMMs are compute-bound): then every rejected
draft token, and every drafter position, is work greedy decoding never does. So the
draft length is a cost decision, not a constant. The drafter always drafts its full
block (k_max tokens, the length it was trained and chosen for); per iteration the policy
picks how many of them to verify, k from {0} + candidates, maximising

    expected tokens per row (k) * rows / (drafter time + verifier time(k + 1))

with k = 0 meaning "no drafter call, a plain greedy step". Both times are lines of the
shared cost table (base.py), t = a + b * (token rows computed), fitted on the last
`window` calls of each model over every batch size (the drafter and the verifier are
separate calls, each timed alone); acceptance is base.Acceptance with Laplace's prior
and no decay (GAD's acceptance is the drafter's, not the text's). The first calls
explore (full length, then none, then half) so both fits see more than one load; the
estimates persist for the policy's lifetime, so a Translator learns them once.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Acceptance, CostTable, DraftPolicy, LengthPolicy, check_k_max, draft_candidates


class DraftLengthPolicy(DraftPolicy):
    """What GAD asks of a draft-length policy (gad.py): k_max, the drafter's block;
    choose() before every iteration; drafted() and verified() report what happened."""

    k_max: int

    def choose(self, rows: int, drafter_tokens: int) -> int:
        """Draft tokens to verify this iteration (0: no drafter call). drafter_tokens:
        what a drafter call would compute, summed over rows."""
        raise NotImplementedError

    def drafted(self, tokens: int, seconds: float) -> None:
        """A drafter call computed `tokens` token rows in `seconds`."""


class AdaptiveDraftLength(LengthPolicy, DraftLengthPolicy):
    """Draft length per iteration for GAD; see the module docstring.

    k_max: the longest draft (the drafter's block size); candidates: the lengths tried
    besides 0 (default: 1, 2, 4, ... up to k_max, and k_max).
    """

    EXPLORE = 3  # calls of each kind before the fits are trusted
    PRIOR, PRIOR_ROWS = 0.5, 2.0  # Laplace: an unseen position counts as kept 1 in 2

    def __init__(self, k_max: int, candidates: list[int] | None = None, window: int = 64):
        check_k_max(k_max)
        if candidates is None:
            candidates = draft_candidates(k_max)
        # One line per model over every batch size: GAD's calls are timed alone, and the
        # exploration gives the verifier's line several widths.
        super().__init__(k_max, [k for k in candidates if 1 <= k <= k_max],
                         CostTable({"draft": False, "verify": True}, window, per_batch=False),
                         Acceptance(k_max, self.PRIOR, self.PRIOR_ROWS))

    # ---- decisions
    def choose(self, rows: int, drafter_tokens: int) -> int:
        if self.calls < self.EXPLORE or not self.costs.measured("draft"):
            k = (self.k_max, 0, max(1, self.k_max // 2))[self.calls % 3]
        else:
            k = max([0] + self.candidates, key=lambda k: self.rate(k, rows, drafter_tokens))
        self.calls += 1
        self.remember(k)
        return k

    def rate(self, k: int, rows: int, drafter_tokens: int) -> float:
        """Expected output tokens per second when verifying k drafted tokens."""
        seconds = self.costs.predict("verify", rows, rows * (k + 1))
        if k > 0:
            seconds += self.costs.predict("draft", rows, drafter_tokens)
        return rows * self.expected_tokens(k) / max(seconds, 1e-9)

    # ---- observations
    def drafted(self, tokens: int, seconds: float) -> None:
        self.costs.add("draft", 0, tokens, seconds)

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float,
                 extra_work: bool = False) -> None:
        """width: tokens per row of the verifier step; accepted/lengths: per row, draft
        tokens kept and drafted (rows whose draft was cut short count up to their length)."""
        rows = len(accepted)
        self.costs.add("verify", rows, rows * width, seconds)
        if width > 1:  # width 1: nothing was drafted, no acceptance to count
            self.acceptance.count(accepted, lengths)


class FixedDraftLength(DraftLengthPolicy):
    """Verifies the given draft lengths in turn, cycling, whatever the timings: a run
    that takes the same path on every machine (tests, and comparisons of draft lengths).
    lengths: each in [0, k_max]; 0 is a plain greedy step without a drafter call. It also
    serves the strategies whose drafts cost nothing to propose (choose_lengths, as
    SourceDraftLength; its other hooks are base.DraftPolicy's no-ops)."""

    def __init__(self, k_max: int, lengths: Sequence[int]):
        super().__init__()
        check_k_max(k_max)
        if not lengths or any(not 0 <= int(k) <= k_max for k in lengths):
            raise ValueError(f"lengths must be a non-empty list of draft lengths in [0, {k_max}], got {list(lengths)}")
        self.k_max, self.lengths = k_max, [int(k) for k in lengths]

    def choose(self, rows: int, drafter_tokens: int) -> int:
        k = self.lengths[len(self.chosen) % len(self.lengths)]
        self.chosen.append(k)  # every decision (the cycle's position), not only the recent ones
        return k

    def choose_lengths(self, lengths: list[int]) -> int:
        return self.choose(len(lengths), 0)
