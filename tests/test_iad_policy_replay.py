"""SourceDraftLength's decisions are unchanged by the work that made its Python cheaper
(issue 29 item 3): the policy as it stood before (the classes below, copied from
policies/base.py and source_draft_length.py at 6d3386d, docstrings dropped) and the
current one replay the same recorded-style sequence of IAD and blockwise iterations,
clock readings included, and must give the same caps, the same plain-step runs and the
same expected-token tables, float for float. The sequence is drawn from a seeded RNG
with noisy timings, batch sizes 1 to 32, rows finishing, and text that changes from
copyable to rewritten, so the probes, the revisits, the plain runs and the fits per
batch size all take part. A second test runs both inside IAD's own loop under one clock."""
from __future__ import annotations

import random
from collections import deque
from typing import Callable, Optional

import numpy as np
import pytest

from pyfastdec.decoding.policies import SourceDraftLength
from pyfastdec.decoding.policies import source_draft_length


class FakeTime:
    """time.perf_counter for a policy: the replay's clock, advanced by hand."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


time = FakeTime()  # the old classes below read `time.perf_counter()`, as the policy did


# ---- The policy before issue 29 item 3 (reference only; not used by pyfastdec)

def draft_candidates(k_max: int) -> list[int]:
    return sorted({min(2 ** i, k_max) for i in range(k_max.bit_length() + 1)} | {k_max})


def check_k_max(k_max: int) -> int:
    if k_max < 1:
        raise ValueError(f'k_max must be >= 1, got {k_max}')
    return k_max


class OldDraftPolicy:
    KEEP_CHOSEN = 10000

    def __init__(self):
        self.chosen: list = []

    def remember(self, choice) -> None:
        self.chosen.append(choice)
        if len(self.chosen) > 2 * self.KEEP_CHOSEN:
            del self.chosen[:self.KEEP_CHOSEN]

    def iteration_started(self) -> None:
        pass

    def call_ended(self) -> None:
        pass

    def plain_steps(self, rows: int) -> int:
        return 0

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        pass

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float, extra_work: bool=False) -> None:
        pass


class OldLengthPolicy(OldDraftPolicy):

    def __init__(self, k_max: int, candidates: list[int], costs: OldCostTable, acceptance: OldAcceptance):
        super().__init__()
        self.k_max, self.candidates = (check_k_max(k_max), candidates)
        self.costs, self.acceptance = (costs, acceptance)
        self.calls = 0

    @property
    def reached(self) -> np.ndarray:
        return self.acceptance.reached

    @property
    def kept(self) -> np.ndarray:
        return self.acceptance.kept

    def expected_tokens(self, k: int) -> float:
        return self.acceptance.expected_tokens(k)


class OldLinearCost:

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
        self.sloped = var > 1e-09 * max(self.sxx, 1e-30)
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


class OldCostsByRows:

    def __init__(self, window: int, sloped: bool, trust: int=3, per_batch: bool=True):
        self.window, self.sloped, self.trust, self.per_batch = (window, sloped, trust, per_batch)
        self.fits: dict[int, OldLinearCost] = {}
        self.all = OldLinearCost(window)

    def add(self, rows: int, token_rows: int, seconds: float) -> None:
        if self.per_batch:
            fit = self.fits.get(rows)
            if fit is None:
                fit = self.fits[rows] = OldLinearCost(self.window)
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
        fit = self.fits.get(rows)
        if fit is not None and len(fit.points) >= self.trust and (fit.sloped or not self.sloped):
            return (fit.a, fit.b)
        return (self.all.a, self.all.b)


class OldCostTable:

    def __init__(self, kinds: dict[str, bool], window: int, per_batch: bool):
        self.kinds = {kind: OldCostsByRows(window, sloped, per_batch=per_batch) for kind, sloped in kinds.items()}

    def __getitem__(self, kind: str) -> OldCostsByRows:
        return self.kinds[kind]

    def add(self, kind: str, rows: int, token_rows: int, seconds: float) -> None:
        self.kinds[kind].add(rows, token_rows, seconds)

    def predict(self, kind: str, rows: int, token_rows: int) -> float:
        return self.kinds[kind].predict(rows, token_rows)

    def measured(self, kind: str) -> int:
        return len(self.kinds[kind].all.points)


class OldAcceptance:

    def __init__(self, k_max: int, prior: float, prior_rows: float, decay: float=1.0):
        self.k_max, self.prior, self.prior_rows, self.decay = (k_max, prior, prior_rows, decay)
        self._reached = np.zeros(k_max)
        self._kept = np.zeros(k_max)
        self._scale = 1.0
        self._expected: list[float] | None = None

    @property
    def reached(self) -> np.ndarray:
        return self._reached * self._scale

    @property
    def kept(self) -> np.ndarray:
        return self._kept * self._scale

    def expected_tokens(self, k: int) -> float:
        return self.table()[k]

    def table(self) -> list[float]:
        if self._expected is None:
            p = (self._kept * self._scale + self.prior * self.prior_rows) / (self._reached * self._scale + self.prior_rows)
            self._expected = np.cumsum(np.concatenate(([1.0], np.cumprod(p)))).tolist()
        return self._expected

    def fade(self, factor: float) -> None:
        self._scale *= factor
        if self._scale < 1e-200:
            self._reached *= self._scale
            self._kept *= self._scale
            self._scale = 1.0
        self._expected = None

    def count(self, accepted: np.ndarray, lengths: np.ndarray) -> None:
        self.fade(self.decay)
        weight = 1.0 / self._scale
        if len(accepted) == 1:
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
    histogram = np.bincount(counts, minlength=size + 1)[:size + 1]
    return (len(counts) - np.cumsum(histogram))[:size]


class OldSourceDraftLength(OldLengthPolicy):
    PROBES = (0, 1, 2)
    PLAIN_STEPS_PER_FADE = 16
    PLAIN_MEASURE, MIN_PLAIN_POINTS = (2, 3)
    PRIOR, PRIOR_ROWS = (0.8, 2.0)
    MAX_PROBE_GAP = 16

    def __init__(self, k_max: int, window: int=64, decay: float=0.98, revisit: int=16, cost_model: Optional[Callable[[int, bool], float]]=None, probe_every: int=128):
        check_k_max(k_max)
        if not 0.0 < decay <= 1.0:
            raise ValueError(f'decay must be in (0, 1], got {decay}')
        super().__init__(k_max, draft_candidates(k_max), OldCostTable({'plain': False, 'verify': True}, window, per_batch=True), OldAcceptance(k_max, self.PRIOR, self.PRIOR_ROWS, decay))
        self.plain_costs, self.verify_costs = (self.costs['plain'], self.costs['verify'])
        self.decay, self.revisit, self.cost_model, self.probe_every = (decay, revisit, cost_model, probe_every)
        self._iteration: Optional[tuple[float, int, int, bool]] = None
        self._plain_in_a_row = 0
        self._probe_due = 0
        self._plain_since_probe = 0
        self._drafted_since_plain = 0
        self._probing = False
        self._probe_gap = probe_every
        self._probe_judged = True

    def iteration_started(self) -> None:
        now = time.perf_counter()
        if self._iteration is not None:
            start, rows, width, drafted = self._iteration
            seconds = self.cost_model(rows * width, drafted) if self.cost_model else now - start
            (self.verify_costs if drafted else self.plain_costs).add(rows, rows * width, seconds)
        self._iteration = (now, 0, 1, False)

    def call_ended(self) -> None:
        self._iteration = None

    def _plain_seconds(self, rows: int) -> float:
        costs = self.plain_costs if self.plain_costs.fits else self.verify_costs
        return max(costs.predict(rows, rows), 1e-12)

    def _verify_seconds(self, rows: int, width: int) -> float:
        return max(self.verify_costs.predict(rows, rows * width), 1e-12)

    def choose_lengths(self, lengths: list[int]) -> int:
        longest = max(lengths)
        if self.calls < len(self.PROBES):
            k = self.PROBES[self.calls]
        elif self._probing:
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
        rows, expected = (len(lengths), self.acceptance.table())
        drafting = [n for n in lengths if n]
        plain = rows - len(drafting)
        best_k, best_rate = (0, rows / self._plain_seconds(rows))
        a, b = self.verify_costs.line(rows)
        for k in self.candidates:
            width_k = min(k, longest)
            if len(drafting) == 1:
                gain = plain + expected[min(drafting[0], width_k)]
            else:
                gain = plain + sum((expected[min(n, width_k)] for n in drafting))
            rate = gain / max(a + b * rows * (1 + width_k), 1e-12)
            if rate > best_rate:
                best_k, best_rate = (k, rate)
            if k >= longest:
                break
        return best_k

    def plain_steps(self, rows: int) -> int:
        if self.calls < len(self.PROBES):
            return 0
        if self.plain_costs.points(rows) < self.MIN_PLAIN_POINTS:
            return self.PLAIN_MEASURE
        if not self.verify_costs.has(rows):
            return 0
        if self._probe_due:
            self._probe_due -= 1
            return 0
        if self._plain_since_probe >= self._probe_gap:
            self._plain_since_probe, self._probe_due, self._probing, self._probe_judged = (0, 1, True, False)
            return 0
        plain = rows / self._plain_seconds(rows)
        expected = self.acceptance.table()
        pays = any((rows * expected[k] / self._verify_seconds(rows, 1 + k) > plain for k in self.candidates))
        if not self._probe_judged:
            self._probe_gap = self.probe_every if pays else min(2 * self._probe_gap, self.MAX_PROBE_GAP * self.probe_every)
            self._probe_judged = True
        if pays:
            self._drafted_since_plain += 1
            if self._drafted_since_plain < self.probe_every:
                return 0
            self._drafted_since_plain = 0
            return self.PLAIN_MEASURE
        return self._probe_gap - self._plain_since_probe

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        self._plain_since_probe += steps
        if steps:
            self.acceptance.fade(self.decay ** (steps / self.PLAIN_STEPS_PER_FADE))
            self.plain_costs.add(rows, rows, self.cost_model(rows, False) if self.cost_model else seconds / steps)
        self._iteration = None

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float, extra_work: bool=False) -> None:
        if self._iteration is not None:
            self._iteration = (self._iteration[0], len(accepted), width, width > 1 or extra_work)
        if width == 1:
            return
        self.acceptance.count(accepted, lengths)


# ---- The replay

def _cost(token_rows: int, drafted: bool, rng: random.Random, extra: float) -> float:
    """A noisy step cost in seconds: batch-1-like overhead plus work per token row, and
    `extra` for a verification (acceptance, roll-back)."""
    return (150e-6 + 4e-6 * token_rows + (extra if drafted else 0.0)) * rng.uniform(0.7, 1.6)


def replay(policy, clock: FakeTime, seed: int, blockwise: bool, extra: float, calls: int = 40) -> list:
    """Drives `policy` as iad.py / blockwise.py do and returns what it decided, with its
    expected-token table at every decision."""
    rng = random.Random(seed)
    k_max = policy.k_max
    trace = []
    for call in range(calls):
        rows = rng.choice([1, 1, 1, 2, 5, 32])
        copyable = rng.random() < 0.6  # text the model copies, or rewrites
        for _ in range(80):
            if rows == 0:
                break
            if blockwise:
                steps = policy.plain_steps(rows)
                trace.append(("plain_steps", rows, steps))
                if steps:
                    seconds = sum(_cost(rows, False, rng, extra) for _ in range(steps))
                    clock.now += seconds
                    policy.plain_ran(rows, steps, seconds)
                    rows -= rng.random() < 0.1
                    continue
            policy.iteration_started()
            if blockwise:
                lengths = [k_max] * rows
            else:
                lengths = [0 if rng.random() < 0.2 else rng.randint(1, k_max) for _ in range(rows)]
            k = 0
            if any(lengths):
                k = policy.choose_lengths(lengths)
                # the table as the decision left it (made up to its drafts' lengths), then whole
                trace += [("cap", rows, k), ("expected", list(policy.acceptance.table()))]
            capped = [min(n, k) for n in lengths]
            width = 1 + max(capped)
            accepted = [n if copyable and rng.random() < 0.7 else rng.randint(0, n) for n in capped]
            seconds = _cost(rows * width, width > 1, rng, extra)
            clock.now += seconds + rng.uniform(0, 40e-6)  # the loop's Python beside the step
            policy.verified(width, np.array(accepted, dtype=np.int64), np.array(capped, dtype=np.int64), seconds,
                            blockwise)
            if rng.random() < 0.05:
                copyable = not copyable
            rows -= sum(rng.random() < 0.08 for _ in range(rows))
        policy.call_ended()
    trace.append(("chosen", list(policy.chosen)))
    return trace


@pytest.mark.parametrize("blockwise", [False, True])
@pytest.mark.parametrize("seed,k_max,extra", [(1, 40, 30e-6), (2, 7, 30e-6), (3, 120, 30e-6), (4, 40, 400e-6)])
def test_decisions_equal_the_old_policys(monkeypatch, seed, k_max, extra, blockwise):
    clock = FakeTime()
    monkeypatch.setattr(source_draft_length, "time", clock)
    new = replay(SourceDraftLength(k_max, probe_every=16), clock, seed, blockwise, extra)
    globals()["time"].now = clock.now = 1000.0
    monkeypatch.setitem(globals(), "time", clock)
    old = replay(OldSourceDraftLength(k_max, probe_every=16), clock, seed, blockwise, extra)
    assert len(new) == len(old)
    caps = [entry for entry in old if entry[0] == "cap"]
    assert len({k for _, _, k in caps}) >= 3, "the replay should see several caps"
    for i, (a, b) in enumerate(zip(new, old)):
        assert a == b, f"entry {i}: {a} != {b}"


@pytest.mark.parametrize("batch", [1, 8])
def test_iad_makes_the_old_policys_decisions(monkeypatch, batch):
    """Through IAD's own loop (the drafts' lengths as propose gives them), on a model that
    copies most of its input and rewrites some, the current policy and the old one decide
    alike under the same clock, and IAD returns greedy's outputs either way."""
    from test_decoding_support import EOS, V, Charged, RuleCorrector, corrected

    from pyfastdec.decoding import iad

    rng = np.random.default_rng(3)
    sources = [[int(t) for t in rng.integers(5, V, size=int(rng.integers(8, 40)))] + [EOS] for _ in range(48)]
    chosen = []
    for cls in (SourceDraftLength, OldSourceDraftLength):
        clock = FakeTime()
        monkeypatch.setattr(source_draft_length, "time", clock)
        monkeypatch.setitem(globals(), "time", clock)
        rng_cost = random.Random(7)  # a noisy cost per step, advancing the policy's clock as the machine would

        def advance(token_rows, drafted, rng_cost=rng_cost):
            seconds = _cost(token_rows, drafted, rng_cost, 60e-6)
            clock.now += seconds
            return seconds

        backend, policy = Charged(RuleCorrector(), advance), cls(max(len(s) for s in sources))
        outs = [o for i in range(0, len(sources), batch) for o in iad(backend, sources[i:i + batch], policy=policy)[0]]
        assert outs == [corrected(s) for s in sources]
        chosen.append(policy.chosen)
    assert chosen[0] == chosen[1]
    assert len(set(chosen[0])) >= 3, "the run should see several caps"
