"""How much of IAD's source draft to verify per iteration, chosen from measured costs
(lossless either way).

IAD's draft is the source after the re-entry point: free to make, but as long as the
rest of the sentence. On text the model copies, verifying it whole is what makes IAD
fast; on text the model rewrites, nearly every draft fails at once and verifying 100
positions to commit one token made IAD ten times slower than greedy (quadratic in the
line length). So, as for GAD (draft_length.py, whose cost fits and acceptance counts this
reuses), the verified length is a cost decision: per iteration the cap k on every row's
draft maximises

    sum over rows of expected tokens (min(k, row's draft length)) / verifier time(rows * width)

where width = 1 + the longest capped draft (shorter drafts are padded, and padding costs
as much as a real position), and k = 0 is a plain greedy step. Two differences from GAD:
- acceptance depends on the text, not only on the model, so the counts decay (each
  verification weighs old counts by `decay`) and follow the text being corrected;
- a policy that has settled on k = 0 learns nothing new about acceptance, so after
  `revisit` plain steps in a row it verifies one drafted token, which costs little and
  lets it find its way back when the text becomes copyable again.
Costs are whole iterations (from one proposal to the next: the step, acceptance, roll-back
and the loop's Python), fitted separately for plain steps and for verifications, because
a verification pays a fixed roll-back and acceptance overhead that a plain step does not;
at batch 1 that overhead is what decides whether a one-token draft pays. `cost_model`
replaces the measured times with a function (token rows, drafted?) -> seconds, for tests
and simulations that must not depend on the machine.
"""
from __future__ import annotations

import numpy as np

import time
from typing import Callable, Optional

from .draft_length import AdaptiveDraftLength, _LinearCost


class SourceDraftLength(AdaptiveDraftLength):
    """Draft-length policy for drafts that cost nothing to make (IAD). k_max: the
    longest draft worth considering (the model's max_source_len)."""

    # The first decisions measure a plain step and two short verifications (cheap even
    # where verifying costs the most); then the fits decide. Until acceptance is seen, a
    # position counts as kept with probability PRIOR (with the weight of PRIOR_ROWS
    # observations): IAD is run on correction models, which mostly copy, so drafts start
    # long where verifying is cheap, and a model that rewrites its input shows it within
    # a few iterations.
    PROBES = (0, 1, 2)
    PRIOR, PRIOR_ROWS = 0.8, 2.0

    def __init__(self, k_max: int, window: int = 64, decay: float = 0.98, revisit: int = 16,
                 cost_model: Optional[Callable[[int, bool], float]] = None):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        super().__init__(k_max, window=window)
        self.decay, self.revisit, self.cost_model = decay, revisit, cost_model
        self.plain_cost = _LinearCost(window)  # iterations without a draft
        self._iteration: Optional[tuple[float, int, bool]] = None  # (start, token rows, drafted)
        self.reached = self.reached.astype(np.float64)  # decayed counts
        self.kept = self.kept.astype(np.float64)
        self._plain_in_a_row = 0
        self._tabulate()

    # ---- iteration timing
    def iteration_started(self) -> None:
        """A new iteration begins: the previous one (if any, of this call) is timed."""
        now = time.perf_counter()
        if self._iteration is not None:
            start, token_rows, drafted = self._iteration
            seconds = self.cost_model(token_rows, drafted) if self.cost_model else now - start
            (self.verifier_cost if drafted else self.plain_cost).add(token_rows, seconds)
        self._iteration = (now, 0, False)

    def call_ended(self) -> None:
        """The decoding call is over: its last iteration is not timed (nothing follows it
        in the same loop), and the next call starts afresh."""
        self._iteration = None

    def _plain_seconds(self, rows: int) -> float:
        fit = self.plain_cost if self.plain_cost.points else self.verifier_cost
        return max(fit.predict(rows), 1e-12)

    # ---- decisions
    def choose_lengths(self, lengths: list[int]) -> int:
        """The cap on this iteration's drafts, given each live row's draft length
        (0: no draft). Only called when some row has a draft."""
        longest = max(lengths)
        if self.calls < len(self.PROBES):
            k = self.PROBES[self.calls]
        elif self._plain_in_a_row >= self.revisit:
            k = 1
        else:
            k = self._best(lengths, longest)
        self._plain_in_a_row = self._plain_in_a_row + 1 if k == 0 else 0
        self.calls += 1
        self.chosen.append(k)
        if len(self.chosen) > 2 * self.KEEP_CHOSEN:
            del self.chosen[:self.KEEP_CHOSEN]
        return k

    def _best(self, lengths: list[int], longest: int) -> int:
        rows, expected, drafting = len(lengths), self._expected, [n for n in lengths if n]
        plain = rows - len(drafting)  # rows without a draft gain their one token anyway
        best_k, best_rate = 0, rows / self._plain_seconds(rows)
        for k in self.candidates:
            width_k = min(k, longest)
            gain = plain + sum(expected[min(n, width_k)] for n in drafting)
            rate = gain / max(self.verifier_cost.predict(rows * (1 + width_k)), 1e-12)
            if rate > best_rate:
                best_k, best_rate = k, rate
            if k >= longest:
                break  # larger caps verify the same drafts
        return best_k

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float) -> None:
        """The acceptance counts of AdaptiveDraftLength.verified, decayed, and without a
        Python loop over positions (IAD drafts are long: a loop of 100 positions per
        iteration would cost more than the step at batch 1). `seconds` (the step alone)
        is not used: iterations are timed whole (iteration_started)."""
        if self._iteration is not None:
            self._iteration = (self._iteration[0], len(accepted) * width, width > 1)
        if width == 1:
            return
        accepted = np.asarray(accepted, dtype=np.int64)
        lengths = np.minimum(np.asarray(lengths, dtype=np.int64), self.k_max)
        accepted = np.minimum(accepted, lengths)
        # Position i of a row was checked when i < its length and every earlier one was
        # kept (i <= accepted); it was kept when i < accepted.
        examined = np.minimum(lengths, accepted + 1)
        self.reached *= self.decay
        self.kept *= self.decay
        self.reached += _rows_beyond(examined, self.k_max)
        self.kept += _rows_beyond(accepted, self.k_max)
        self._tabulate()

    def _tabulate(self) -> None:
        p = (self.kept + self.PRIOR * self.PRIOR_ROWS) / (self.reached + self.PRIOR_ROWS)
        self._expected = [1.0] + (1.0 + np.cumsum(np.cumprod(p))).tolist()


def _rows_beyond(counts: np.ndarray, size: int) -> np.ndarray:
    """[number of rows whose count exceeds i for i in range(size)]."""
    histogram = np.bincount(counts, minlength=size + 1)[:size + 1]
    return (len(counts) - np.cumsum(histogram))[:size]
