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

with k = 0 meaning "no drafter call, a plain greedy step". Both times are linear models,
t = a + b * (token rows computed), fitted by least squares on the last `window` calls of
each model; acceptance is the per-position rate at which a draft token is kept given
that all before it were (counted over every verified row). The first calls explore
(full length, then none, then half) so both fits see more than one load; the estimates
persist for the policy's lifetime, so a Translator learns them once. Outputs never
depend on the choice: GAD accepts only what greedy would produce.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol

import numpy as np


def draft_candidates(k_max: int) -> list[int]:
    """The draft lengths a policy weighs besides 0: 1, 2, 4, ... up to k_max, and k_max."""
    return sorted({min(2 ** i, k_max) for i in range(k_max.bit_length() + 1)} | {k_max})


def remember(chosen: list[int], k: int, keep: int) -> None:
    """Append a decision to a policy's log, keeping at least `keep` of the latest and at
    most twice that (a Translator's policy lives for whole batch jobs)."""
    chosen.append(k)
    if len(chosen) > 2 * keep:
        del chosen[:keep]


class DraftLengthPolicy(Protocol):
    """What GAD asks of a draft-length policy (gad.py): k_max, the drafter's block;
    choose() before every iteration; drafted() and verified() report what happened."""

    k_max: int

    def choose(self, rows: int, drafter_tokens: int) -> int: ...

    def drafted(self, tokens: int, seconds: float) -> None: ...

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float) -> None: ...


class _LinearCost:
    """t = a + b * x by least squares over a sliding window, with a, b >= 0. Points at
    one x only give b = 0 and a = their mean, right at that x (where the drafter, whose x
    changes slowly, is asked); the verifier's fit sees several widths by exploration.
    Running sums keep an update and a prediction O(1): the policy runs every iteration,
    and at batch 1 an iteration is a few hundred microseconds."""

    def __init__(self, window: int):
        self.points: deque[tuple[float, float]] = deque()
        self.window = window
        self.n = self.sx = self.st = self.sxx = self.sxt = 0.0
        self.a = self.b = 0.0
        self.sloped = False

    def add(self, x: float, seconds: float) -> None:
        self._accumulate(float(x), float(seconds), 1.0)
        self.points.append((float(x), float(seconds)))
        if len(self.points) > self.window:
            self._accumulate(*self.points.popleft(), -1.0)
        var = self.sxx - self.sx * self.sx / self.n
        cov = self.sxt - self.sx * self.st / self.n
        # relative threshold: sums of squares of equal x differ from 0 by rounding only
        self.sloped = var > 1e-9 * max(self.sxx, 1e-30)  # points at two x or more: b is measured
        self.b = max(cov / var, 0.0) if self.sloped else 0.0
        self.a = max((self.st - self.b * self.sx) / self.n, 0.0)

    def _accumulate(self, x: float, t: float, sign: float) -> None:
        self.n += sign
        self.sx += sign * x
        self.st += sign * t
        self.sxx += sign * x * x
        self.sxt += sign * x * t

    def predict(self, x: float) -> float:
        return self.a + self.b * x


class AdaptiveDraftLength:
    """Draft length per iteration for GAD; see the module docstring.

    k_max: the longest draft (the drafter's block size); candidates: the lengths tried
    besides 0 (default: 1, 2, 4, ... up to k_max, and k_max).
    """

    EXPLORE = 3  # calls of each kind before the fits are trusted
    KEEP_CHOSEN = 10_000  # decisions kept in `chosen` (at least this many, at most twice)

    def __init__(self, k_max: int, candidates: list[int] | None = None, window: int = 64):
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        if candidates is None:
            candidates = draft_candidates(k_max)
        self.k_max, self.candidates = k_max, [k for k in candidates if 1 <= k <= k_max]
        self.drafter_cost, self.verifier_cost = _LinearCost(window), _LinearCost(window)
        self.reached = np.zeros(k_max, dtype=np.int64)   # rows whose position i was checked
        self.kept = np.zeros(k_max, dtype=np.int64)      # ... and whose token i was accepted
        self._tabulate()
        self.calls = 0
        self.chosen: list[int] = []  # recent decisions, for statistics and tests

    # ---- decisions
    def choose(self, rows: int, drafter_tokens: int) -> int:
        """Draft tokens to verify this iteration (0: no drafter call). drafter_tokens:
        what a drafter call would compute, summed over rows."""
        if self.calls < self.EXPLORE or not self.drafter_cost.points:
            k = (self.k_max, 0, max(1, self.k_max // 2))[self.calls % 3]
        else:
            k = max([0] + self.candidates, key=lambda k: self.rate(k, rows, drafter_tokens))
        self.calls += 1
        remember(self.chosen, k, self.KEEP_CHOSEN)
        return k

    def expected_tokens(self, k: int) -> float:
        """Tokens a row gains from verifying a k-token draft: the accepted draft plus the
        verifier's own token (tabulated after every observation)."""
        return self._expected[k]

    def rate(self, k: int, rows: int, drafter_tokens: int) -> float:
        """Expected output tokens per second when verifying k drafted tokens."""
        seconds = self.verifier_cost.predict(rows * (k + 1))
        if k > 0:
            seconds += self.drafter_cost.predict(drafter_tokens)
        return rows * self.expected_tokens(k) / max(seconds, 1e-9)

    # ---- observations
    def drafted(self, tokens: int, seconds: float) -> None:
        self.drafter_cost.add(tokens, seconds)

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float) -> None:
        """width: tokens per row of the verifier step; accepted/lengths: per row, draft
        tokens kept and drafted (rows whose draft was cut short count up to their length)."""
        rows = len(accepted)
        self.verifier_cost.add(rows * width, seconds)
        if width == 1:
            return  # nothing was drafted: no acceptance to count
        for i in range(min(int(lengths.max(initial=0)), self.k_max)):
            examined = (lengths > i) & (accepted >= i)  # position i+1 was checked
            self.reached[i] += int(examined.sum())
            self.kept[i] += int((examined & (accepted > i)).sum())
        self._tabulate()

    def _tabulate(self) -> None:
        """expected_tokens(k) for every k, from the acceptance counts."""
        p = ((self.kept + 1.0) / (self.reached + 2.0)).tolist()  # Laplace: unseen positions count 1/2
        expected, survive = [1.0], 1.0
        for q in p:
            survive *= q
            expected.append(expected[-1] + survive)
        self._expected = expected


class FixedDraftLength:
    """Verifies the given draft lengths in turn, cycling, whatever the timings: a run
    that takes the same path on every machine (tests, and comparisons of draft lengths).
    lengths: each in [0, k_max]; 0 is a plain greedy step without a drafter call."""

    def __init__(self, k_max: int, lengths: Sequence[int]):
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        if not lengths or any(not 0 <= int(k) <= k_max for k in lengths):
            raise ValueError(f"lengths must be a non-empty list of draft lengths in [0, {k_max}], got {list(lengths)}")
        self.k_max, self.lengths = k_max, [int(k) for k in lengths]
        self.chosen: list[int] = []  # every decision, for tests

    def choose(self, rows: int, drafter_tokens: int) -> int:
        k = self.lengths[len(self.chosen) % len(self.lengths)]
        self.chosen.append(k)
        return k

    # The interface of SourceDraftLength, for strategies whose drafts cost nothing (blockwise)
    def choose_lengths(self, lengths: list[int]) -> int:
        return self.choose(len(lengths), 0)

    def iteration_started(self) -> None:
        pass

    def call_ended(self) -> None:
        pass

    def plain_steps(self, rows: int) -> int:
        return 0  # a fixed path: drafts are always made

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        pass

    def drafted(self, tokens: int, seconds: float) -> None:
        pass

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float,
                 extra_work: bool = False) -> None:
        pass
