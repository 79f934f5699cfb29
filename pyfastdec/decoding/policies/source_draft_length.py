"""How much of a free-to-propose draft to verify per iteration, chosen from measured
costs (lossless either way): IAD's source draft, and blockwise's proposal heads.

IAD's draft is the source after the re-entry point: free to make, but as long as the
rest of the sentence. On text the model copies, verifying it whole is what makes IAD
fast; on text the model rewrites, nearly every draft fails at once, and verifying a long
draft to commit one token costs far more than a greedy step (quadratic in the line
length). So, as for GAD (draft_length.py; both on base.py's cost table and acceptance
estimator), the verified length is a cost decision: per iteration the cap k on every
row's draft maximises

    sum over rows of expected tokens (min(k, row's draft length)) / verifier time(rows * width)

where width = 1 + the longest capped draft (shorter drafts are padded, and padding costs
as much as a real position), and k = 0 is a plain greedy step. What differs from GAD, and
why:
- acceptance depends on the text, not only on the model, so the counts decay (each
  verification weighs old counts by `decay`) and follow the text being corrected, and
  start from an optimistic PRIOR (correction models mostly copy);
- a policy that has settled on k = 0 learns nothing new about acceptance, so after
  `revisit` plain steps in a row it verifies one drafted token, which costs little and
  lets it find its way back when the text becomes copyable again;
- no drafter call is timed alone, so costs are whole iterations (from one proposal to
  the next: the step, acceptance, roll-back and the loop's Python), fitted per live
  batch size, and separately for plain steps and for verifications, because a
  verification pays a fixed roll-back and acceptance overhead that a plain step does
  not; at batch 1 that overhead is what decides whether a one-token draft pays.
`cost_model` replaces the measured times with a function (token rows, drafted?) ->
seconds, for tests and simulations that must not depend on the machine.

Blockwise (decoding/blockwise.py) uses the same policy with k_max = its K heads, plus
plain_steps(): the heads cost work on every step they run on, so where no verification
beats a plain step the policy asks for runs of plain greedy steps (heads off), probes
after `probe_every` plain steps with a full block, and, while drafting, re-measures plain
steps every `probe_every` steps, so that one bad measurement cannot settle the choice.
Each probe that finds the heads still not paying doubles the gap to the next (up to
MAX_PROBE_GAP times probe_every): a probe runs all K heads and then verifies a full
block, several plain steps' worth of work, which at a fixed gap keeps heads that never
pay measurably slower than greedy; the first probe after drafting paid is again at
probe_every. Acceptance counts also fade during plain runs (PLAIN_STEPS_PER_FADE).
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np

from .base import Acceptance, CostTable, LengthPolicy, check_k_max, draft_candidates


class SourceDraftLength(LengthPolicy):
    """Draft-length policy for drafts that cost nothing to propose (IAD's source; the
    blockwise heads' block). k_max: the longest draft worth considering (IAD: the model's
    max_source_len; blockwise: K). The same candidates and per-position acceptance as
    GAD's AdaptiveDraftLength, with decayed counts and cost fits per batch size."""

    # The first decisions measure a plain step and two short verifications (cheap even
    # where verifying costs the most); then the fits decide. Until acceptance is seen, a
    # position counts as kept with probability PRIOR (with the weight of PRIOR_ROWS
    # observations): IAD is run on correction models, which mostly copy, so drafts start
    # long where verifying is cheap, and a model that rewrites its input shows it within
    # a few iterations.
    PROBES = (0, 1, 2)
    # Acceptance counts fade by `decay` per verification and per this many plain steps:
    # slower while the heads are off, so a few probes that failed keep them off, but within
    # a few hundred steps, so they come back when the text changes.
    PLAIN_STEPS_PER_FADE = 16
    # Plain-step cost: measured in runs of PLAIN_MEASURE steps, at least MIN_PLAIN_POINTS
    # runs per batch size before it is trusted.
    PLAIN_MEASURE, MIN_PLAIN_POINTS = 2, 3
    PRIOR, PRIOR_ROWS = 0.8, 2.0
    MAX_PROBE_GAP = 16  # the gap between probes grows to at most this many times probe_every

    def __init__(self, k_max: int, window: int = 64, decay: float = 0.98, revisit: int = 16,
                 cost_model: Optional[Callable[[int, bool], float]] = None, probe_every: int = 128):
        check_k_max(k_max)
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        # Lines per batch size, for plain iterations and for iterations that made or
        # verified drafts (see the module docstring).
        super().__init__(k_max, draft_candidates(k_max),
                         CostTable({"plain": False, "verify": True}, window, per_batch=True),
                         Acceptance(k_max, self.PRIOR, self.PRIOR_ROWS, decay))
        self.plain_costs, self.verify_costs = self.costs["plain"], self.costs["verify"]
        self.decay, self.revisit, self.cost_model, self.probe_every = decay, revisit, cost_model, probe_every
        self._iteration: Optional[tuple[float, int, int, bool]] = None  # (start, rows, width, drafted)
        self._plain_in_a_row = 0
        self._probe_due = 0  # plain_steps: steps with drafts still due (a probe)
        self._plain_since_probe = 0
        self._drafted_since_plain = 0
        self._probing = False  # the next choice verifies a full block (a probe after plain steps)
        self._probe_gap = probe_every  # plain steps before the next probe (grows while probes fail)
        self._probe_judged = True  # the last probe's outcome has been weighed

    # ---- iteration timing
    def iteration_started(self) -> None:
        """A new iteration begins: the previous one (if any, of this call) is timed."""
        now = time.perf_counter()
        if self._iteration is not None:
            start, rows, width, drafted = self._iteration
            seconds = self.cost_model(rows * width, drafted) if self.cost_model else now - start
            (self.verify_costs if drafted else self.plain_costs).add(rows, rows * width, seconds)
        self._iteration = (now, 0, 1, False)

    def call_ended(self) -> None:
        """The decoding call is over: its last iteration is not timed (nothing follows it
        in the same loop), and the next call starts afresh."""
        self._iteration = None

    def _plain_seconds(self, rows: int) -> float:
        costs = self.plain_costs if self.plain_costs.fits else self.verify_costs
        return max(costs.predict(rows, rows), 1e-12)

    def _verify_seconds(self, rows: int, width: int) -> float:
        return max(self.verify_costs.predict(rows, rows * width), 1e-12)

    # ---- decisions
    def choose_lengths(self, lengths: list[int]) -> int:
        """The cap on this iteration's drafts, given each live row's draft length
        (0: no draft). Only called when some row has a draft."""
        longest = max(lengths)
        if self.calls < len(self.PROBES):
            k = self.PROBES[self.calls]
        elif self._probing:  # after a run of plain steps: every drafted token, to learn them all
            k = self.k_max
        elif self._plain_in_a_row >= self.revisit:
            k = 1
        else:
            k = self._best(lengths, longest)
        self._plain_in_a_row = self._plain_in_a_row + 1 if k == 0 else 0
        self._probing = False
        self.calls += 1
        self.remember(k)
        return k

    def _best(self, lengths: list[int], longest: int) -> int:
        rows, expected = len(lengths), self.acceptance.table(longest)
        drafting = [n for n in lengths if n]
        plain = rows - len(drafting)  # rows without a draft gain their one token anyway
        best_k, best_rate = 0, rows / self._plain_seconds(rows)
        a, b = self.verify_costs.line(rows)  # the fitted verification cost, seconds = a + b * token rows
        per_width = b * rows
        one = drafting[0] if len(drafting) == 1 else None  # batch 1: one draft, no sum
        for k in self.candidates:  # ascending; the same float expressions as a + b * rows * (1 + width)
            width_k = k if k < longest else longest
            if one is not None:
                gain = plain + expected[one if one < width_k else width_k]
            else:
                gain = plain + sum([expected[n if n < width_k else width_k] for n in drafting])
            seconds = a + per_width * (1 + width_k)
            rate = gain / (seconds if seconds > 1e-12 else 1e-12)
            if rate > best_rate:
                best_k, best_rate = k, rate
            if k >= longest:
                break  # larger caps verify the same drafts
        return best_k

    def plain_steps(self, rows: int) -> int:
        """For drafts that cost work even when none is verified (blockwise's heads): 0 to
        make and verify drafts on the next step, else how many plain greedy steps to run
        (without drafts) before asking again. Drafts are made while probing and while the
        best verification rate beats a plain step's (both fitted on whole iterations);
        every `probe_every` plain steps, for two steps (one makes drafts, the next
        verifies them), so acceptance keeps being measured; and every `probe_every`
        steps with drafts, a short run of plain steps, so their cost does too (one bad
        measurement must not settle the choice for good)."""
        if self.calls < len(self.PROBES):
            return 0
        if self.plain_costs.points(rows) < self.MIN_PLAIN_POINTS:
            return self.PLAIN_MEASURE  # measure plain steps at this batch size
        if not self.verify_costs.has(rows):
            return 0  # ... and one with drafts
        if self._probe_due:
            self._probe_due -= 1
            return 0
        if self._plain_since_probe >= self._probe_gap:
            self._plain_since_probe, self._probe_due, self._probing, self._probe_judged = 0, 1, True, False
            return 0
        plain = rows / self._plain_seconds(rows)
        expected = self.acceptance.table()
        pays = any(rows * expected[k] / self._verify_seconds(rows, 1 + k) > plain for k in self.candidates)
        if not self._probe_judged:  # the probe just ran: back to the base gap, or twice the last
            self._probe_gap = self.probe_every if pays else min(2 * self._probe_gap,
                                                                self.MAX_PROBE_GAP * self.probe_every)
            self._probe_judged = True
        if pays:
            self._drafted_since_plain += 1
            if self._drafted_since_plain < self.probe_every:
                return 0
            self._drafted_since_plain = 0
            return self.PLAIN_MEASURE
        return self._probe_gap - self._plain_since_probe

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        """A run of plain steps (plain_steps) took `seconds` for `steps` steps of (at first)
        `rows` rows; the iteration being timed, if any, is dropped (the run interrupted it)."""
        self._plain_since_probe += steps
        if steps:  # acceptance memory fades with steps, drafted or not (it follows the text)
            self.acceptance.fade(self.decay ** (steps / self.PLAIN_STEPS_PER_FADE))
            self.plain_costs.add(rows, rows, self.cost_model(rows, False) if self.cost_model else seconds / steps)
        self._iteration = None

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float,
                 extra_work: bool = False) -> None:
        """Counts acceptance (base.Acceptance, decayed by `decay`). `seconds` (the step
        alone) is not used: iterations are timed whole (iteration_started); an iteration
        that made drafts (extra_work) is costed with the verifications, even at width 1."""
        if self._iteration is not None:  # extra_work: drafts were made (costed) though none was verified
            self._iteration = (self._iteration[0], len(accepted), width, width > 1 or extra_work)
        if width == 1:
            return
        self.acceptance.count(accepted, lengths)


def resolve_policy(policy, k_max: int, strategy: str):
    """A strategy's `policy` argument: "auto" gives a new SourceDraftLength(k_max) for
    this call; None or a policy object are used as given; another string is refused."""
    if not isinstance(policy, str):
        return policy
    if policy != "auto":
        raise ValueError(f"{strategy}: policy must be 'auto', None or a SourceDraftLength, got {policy!r}")
    return SourceDraftLength(k_max)
