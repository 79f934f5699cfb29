"""What every draft policy shares: the decisions log, the hooks the loops call, and ONE
cost table and acceptance estimator.

A draft policy decides, per iteration of a draft-then-verify loop (draft_verify.py), how
much drafting pays: how many drafted tokens to verify (GAD, IAD, blockwise) or whether to
draft at all (BiLD). Under a lossless acceptance rule outputs never depend on the
decision (the loop accepts only what the verifier would produce); under a lossy one
(GAD++, lossy BiLD) they may, so they follow the timings unless the policy is fixed
(FixedDraftLength). A policy decides from two estimates, both learnt while it runs
(a Translator keeps one policy per strategy, so it learns them once):
- CostTable: what a call or a whole iteration costs, in seconds, as a line
  t = a + b * token rows computed, fitted by least squares per kind of work ("plain"
  steps, "verify", "draft") and, where the batch size changes the line (per_batch), per
  live batch size;
- Acceptance: per draft position, how often a drafted token is kept given that every
  token before it was; from it, the tokens a row gains from verifying k drafted tokens.
LengthPolicy holds both for the policies that choose a verified draft length; they
differ only where their drafts differ (each module says why): GAD's drafter costs
a call per draft (a "draft" line); IAD's and blockwise's drafts cost nothing to
propose but depend on the text (decayed acceptance, per-batch lines, whole iterations
timed); BiLD's little model drafts a length its own confidence decides (draft_or_plain.py
compares the two modes per output token instead).
"""
from __future__ import annotations

from collections import deque

import numpy as np


def draft_candidates(k_max: int) -> list[int]:
    """The draft lengths a policy weighs besides 0: 1, 2, 4, ... up to k_max, and k_max."""
    return sorted({min(2 ** i, k_max) for i in range(k_max.bit_length() + 1)} | {k_max})


def check_k_max(k_max: int) -> int:
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    return k_max


class DraftPolicy:
    """The base of every draft policy: a log of recent decisions, and every hook a
    strategy calls, as no-ops, so a subclass overrides only what it uses.

    Source-draft hooks (iad.py, blockwise.py): iteration_started() before an iteration's
    drafts are capped, choose_lengths(lengths) -> cap, plain_steps(rows) -> 0 or a run of
    plain steps, plain_ran(rows, steps, seconds), verified(width, accepted, lengths,
    seconds, extra_work), call_ended(). GAD's decisions and drafter timings
    (draft_length.DraftLengthPolicy) and BiLD's (draft_or_plain.DraftOrPlain) are
    declared by those subclasses."""

    KEEP_CHOSEN = 10_000  # decisions kept in `chosen` (at least this many, at most twice)

    def __init__(self):
        self.chosen: list = []  # recent decisions, for statistics and tests

    def remember(self, choice) -> None:
        """Log a decision, keeping at least KEEP_CHOSEN of the latest and at most twice that
        (a Translator's policy lives for whole batch jobs)."""
        self.chosen.append(choice)
        if len(self.chosen) > 2 * self.KEEP_CHOSEN:
            del self.chosen[:self.KEEP_CHOSEN]

    def iteration_started(self) -> None:
        pass

    def call_ended(self) -> None:
        pass

    def plain_steps(self, rows: int) -> int:
        return 0  # draft every iteration

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        pass

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float,
                 extra_work: bool = False) -> None:
        pass


class LengthPolicy(DraftPolicy):
    """A policy that chooses how many drafted tokens to verify, k in {0} + candidates
    (k_max at most), from the shared estimators: `costs`, a CostTable, and `acceptance`,
    an Acceptance over k_max positions. `calls` counts its decisions."""

    def __init__(self, k_max: int, candidates: list[int], costs: CostTable, acceptance: Acceptance):
        super().__init__()
        self.k_max, self.candidates = check_k_max(k_max), candidates
        self.costs, self.acceptance = costs, acceptance
        self.calls = 0

    @property
    def reached(self) -> np.ndarray:
        """(Decayed) counts of rows whose draft position i was checked."""
        return self.acceptance.reached

    @property
    def kept(self) -> np.ndarray:
        """(Decayed) counts of rows whose drafted token i was accepted."""
        return self.acceptance.kept

    def expected_tokens(self, k: int) -> float:
        """Tokens a row gains from verifying a k-token draft: the accepted draft plus the
        verifier's own token."""
        return self.acceptance.expected_tokens(k)


class LinearCost:
    """t = a + b * x by least squares over a sliding window, with a, b >= 0. Points at
    one x only give b = 0 and a = their mean, right at that x (where the drafter, whose x
    changes slowly, is asked); the verifier's fit sees several widths by exploration.
    Running sums keep an update and a prediction O(1): the policy runs every iteration,
    and at batch 1 an iteration costs little more than the step itself."""

    def __init__(self, window: int):
        self.points: deque[tuple[float, float]] = deque()
        self.window = window
        self.n = self.sx = self.st = self.sxx = self.sxt = 0.0
        self._fit: tuple[float, float, bool] | None = (0.0, 0.0, False)  # (a, b, sloped); None: refit

    def add(self, x: float, seconds: float) -> None:
        # The sums are updated inline and the line refitted only when read: a policy adds
        # to two fits per iteration (its batch size's and the whole) and reads one.
        x, t = float(x), float(seconds)
        self.n += 1.0
        self.sx += x
        self.st += t
        self.sxx += x * x
        self.sxt += x * t
        points = self.points
        points.append((x, t))
        if len(points) > self.window:
            x, t = points.popleft()
            self.n -= 1.0
            self.sx -= x
            self.st -= t
            self.sxx -= x * x
            self.sxt -= x * t
        self._fit = None

    def line(self) -> tuple[float, float, bool]:
        """(a, b, sloped): sloped when the points lie at two x or more (b is measured)."""
        fit = self._fit
        if fit is None:
            var = self.sxx - self.sx * self.sx / self.n
            cov = self.sxt - self.sx * self.st / self.n
            # relative threshold: sums of squares of equal x differ from 0 by rounding only
            sloped = var > 1e-9 * max(self.sxx, 1e-30)
            b = max(cov / var, 0.0) if sloped else 0.0
            fit = self._fit = (max((self.st - b * self.sx) / self.n, 0.0), b, sloped)
        return fit

    @property
    def a(self) -> float:
        return self.line()[0]

    @property
    def b(self) -> float:
        return self.line()[1]

    def predict(self, x: float) -> float:
        a, b, _ = self.line()
        return a + b * x


class CostsByRows:
    """Cost fits t = a + b * token rows for one kind of work, one per live batch size
    (with per_batch): across batch sizes a step's time is far from linear in token rows
    (at batch 1 a call's fixed overhead dominates, at 32 the work per row), and a policy
    lives across batches and through batches whose rows finish one by one. A batch size
    is trusted once it has `trust` points (and, with `sloped`, points at two widths or
    more, so its slope is measured); until then, and always without per_batch,
    predictions come from one fit over every batch size, as a whole."""

    def __init__(self, window: int, sloped: bool, trust: int = 3, per_batch: bool = True):
        self.window, self.sloped, self.trust, self.per_batch = window, sloped, trust, per_batch
        self.fits: dict[int, LinearCost] = {}
        self.all = LinearCost(window)

    def add(self, rows: int, token_rows: int, seconds: float) -> None:
        if self.per_batch:
            fit = self.fits.get(rows)
            if fit is None:
                fit = self.fits[rows] = LinearCost(self.window)
            fit.add(token_rows, seconds)
        self.all.add(token_rows, seconds)

    def has(self, rows: int) -> bool:
        return rows in self.fits

    def points(self, rows: int) -> int:
        fit = self.fits.get(rows)
        return 0 if fit is None else len(fit.points)

    def predict(self, rows: int, token_rows: int) -> float:
        a, b = self.line(rows)
        return a + b * token_rows

    def line(self, rows: int) -> tuple[float, float]:
        """(a, b) of the fit that predicts for this batch size: t = a + b * token rows."""
        fit = self.fits.get(rows)
        if fit is not None and len(fit.points) >= self.trust:
            a, b, sloped = fit.line()
            if sloped or not self.sloped:
                return a, b
        a, b, _ = self.all.line()
        return a, b


class CostTable:
    """The cost table every policy keeps: one CostsByRows per kind of work.
    kinds: {kind: sloped} (see CostsByRows; a kind whose width never changes, such as a
    plain step, is trusted without a measured slope)."""

    def __init__(self, kinds: dict[str, bool], window: int, per_batch: bool):
        self.kinds = {kind: CostsByRows(window, sloped, per_batch=per_batch) for kind, sloped in kinds.items()}

    def __getitem__(self, kind: str) -> CostsByRows:
        return self.kinds[kind]

    def add(self, kind: str, rows: int, token_rows: int, seconds: float) -> None:
        self.kinds[kind].add(rows, token_rows, seconds)

    def predict(self, kind: str, rows: int, token_rows: int) -> float:
        return self.kinds[kind].predict(rows, token_rows)

    def measured(self, kind: str) -> int:
        """Points kept over every batch size for this kind."""
        return len(self.kinds[kind].all.points)


class Acceptance:
    """Per draft position i < k_max: decayed counts of rows whose drafted token i was
    checked (every earlier one kept) and of those where it was kept. A position is kept
    with probability (kept + prior * prior_rows) / (reached + prior_rows): prior is what
    an unseen position counts as, with the weight of prior_rows rows. Each count() first
    weighs the old counts by `decay` (1: never forget). The counts are stored divided by
    a running scale, so a decay multiplies one number, not 2 x k_max."""

    def __init__(self, k_max: int, prior: float, prior_rows: float, decay: float = 1.0):
        self.k_max, self.prior, self.prior_rows, self.decay = k_max, prior, prior_rows, decay
        self._reached = np.zeros(k_max)
        self._kept = np.zeros(k_max)
        self._scale = 1.0
        self._expected: list[float] | None = None  # expected tokens by draft length, made when needed
        self._product = 1.0  # P(every position of _expected kept), to extend it

    @property
    def reached(self) -> np.ndarray:
        """Decayed counts of rows whose draft position i was checked."""
        return self._reached * self._scale

    @property
    def kept(self) -> np.ndarray:
        """Decayed counts of rows whose draft token i was accepted."""
        return self._kept * self._scale

    def expected_tokens(self, k: int) -> float:
        """Tokens a row gains from verifying a k-token draft: the accepted draft plus the
        verifier's own token."""
        return self.table(k)[k]

    def table(self, upto: int | None = None) -> list[float]:
        """expected_tokens(k) for k = 0 .. k_max; with `upto`, a list that holds at least
        k = 0 .. upto (a policy that asks only for its drafts' lengths pays for those:
        the table changes with every count, and IAD's k_max is the longest source)."""
        size = self.k_max if upto is None else min(upto, self.k_max)
        table = self._expected
        if table is None:
            table = self._expected = [1.0]
            self._product = 1.0
        done = len(table) - 1
        if done < size:
            # expected(k) = expected(k - 1) + P(the first k drafted tokens are all kept), in
            # plain floats, in order (numpy's cumprod/cumsum gave the same, and on the few
            # positions asked cost more than this loop)
            scale, prior, rows = self._scale, self.prior * self.prior_rows, self.prior_rows
            product, expected = self._product, table[-1]
            for kept, reached in zip(self._kept[done:size].tolist(), self._reached[done:size].tolist()):
                product *= (kept * scale + prior) / (reached * scale + rows)
                expected += product
                table.append(expected)
            self._product = product
        return table

    def fade(self, factor: float) -> None:
        self._scale *= factor
        if self._scale < 1e-200:  # fold the scale in before it underflows
            self._reached *= self._scale
            self._kept *= self._scale
            self._scale = 1.0
        self._expected = None

    def count(self, accepted: np.ndarray, lengths: np.ndarray) -> None:
        """One verification: per row, draft tokens kept and drafted (rows whose draft was
        cut short count up to their length), without a Python loop over positions (IAD
        drafts are long: a loop over their positions every iteration would cost more than
        the step at batch 1)."""
        self.fade(self.decay)
        weight = 1.0 / self._scale
        # Position i of a row was checked when i < its length and every earlier one was
        # kept (i <= accepted); it was kept when i < accepted.
        if len(accepted) == 1:  # batch 1: two slices instead of two histograms
            length = min(int(lengths[0]), self.k_max)
            kept = min(int(accepted[0]), length)
            self._reached[:min(length, kept + 1)] += weight
            self._kept[:kept] += weight
            return
        accepted = np.asarray(accepted, dtype=np.int64)
        lengths = np.minimum(np.asarray(lengths, dtype=np.int64), self.k_max)
        accepted = np.minimum(accepted, lengths)
        examined = np.minimum(lengths, accepted + 1)
        self._reached += weight * _rows_beyond(examined, self.k_max)
        self._kept += weight * _rows_beyond(accepted, self.k_max)


def _rows_beyond(counts: np.ndarray, size: int) -> np.ndarray:
    """[number of rows whose count exceeds i for i in range(size)]."""
    histogram = np.bincount(counts, minlength=size + 1)[:size + 1]
    return (len(counts) - np.cumsum(histogram))[:size]
