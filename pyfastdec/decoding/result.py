"""What a decoding strategy returns besides its outputs: per-hypothesis results (beam
search) and the statistics every strategy reports (DecodeStats)."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Hypothesis:
    """One output sentence: token ids without BOS/EOS.

    score: the strategy's score (beam search: sum of log-probs / length^alpha), None when
    the strategy does not score. finished: False when the hypothesis stopped because it
    reached max_len rather than at EOS (it is still returned, never dropped).
    """

    tokens: list[int]
    score: float | None = None
    finished: bool = True


COMPONENTS = ("encoder", "drafter", "verifier")


@dataclass
class DecodeStats:
    """Counters and wall times of one strategy call over a batch.

    iterations: model calls (`step`) of the verifier (the only autoregressive model), each
        advancing every live row at once.
    row_steps: sum over those calls of the number of live rows, i.e. per-sentence
        iterations; the per-iteration means below divide by it, so they do not grow with
        the batch size.
    drafted: draft tokens given to the verifier to check (rows summed; after cutting a
        draft at its first EOS and at the row's length budget).
    accepted: drafted tokens the verifier kept.
    generated: output tokens produced, EOS included when a row ended with it.
    hit_max_len: input indices of the rows that stopped at max_len instead of EOS.
    looping: Translator: input indices of the rows whose output repeats a 1-3-gram 4+
        times in a row (repetition_guard.LoopCheck.repeats; the best hypothesis).
    encoder_s: wall time in every `encode` (verifier's and drafter's).
    drafter_s: wall time in the drafter's `draft` and `select`.
    verifier_s: wall time in the verifier's `start`, `step`, `truncate`, `select`.
    total_s: wall time of the whole call; python_s is what the backends did not spend.
        Summed over batches: with Translator(inter_threads=N) the times are lane-seconds,
        up to N times the call's wall time.
    loops_reverted: Corrector: outputs that looped and came back as their sources
        (pyfastdec/repetition_guard.py).
    """

    sentences: int = 0
    iterations: int = 0
    row_steps: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    hit_max_len: list[int] = field(default_factory=list)
    looping: list[int] = field(default_factory=list)
    encoder_s: float = 0.0
    drafter_s: float = 0.0
    verifier_s: float = 0.0
    total_s: float = 0.0
    loops_reverted: int = 0

    @property
    def python_s(self) -> float:
        return max(0.0, self.total_s - self.encoder_s - self.drafter_s - self.verifier_s)

    @property
    def mean_accepted(self) -> float:
        """Accepted draft tokens per sentence per iteration (0 for strategies without drafts)."""
        return self.accepted / self.row_steps if self.row_steps else 0.0

    @property
    def mean_tokens(self) -> float:
        """Output tokens per sentence per iteration: mean_accepted plus the verifier's own
        token (1 for greedy); the speed-up over greedy in model calls."""
        return self.generated / self.row_steps if self.row_steps else 0.0

    @contextmanager
    def timing(self, component: str) -> Iterator[None]:
        """Add the wall time of the enclosed backend call to `<component>_s`."""
        if component not in COMPONENTS:
            raise ValueError(f"timing: unknown component {component!r}; expected one of {COMPONENTS}")
        start = time.perf_counter()
        try:
            yield
        finally:
            name = component + "_s"
            setattr(self, name, getattr(self, name) + time.perf_counter() - start)

    @contextmanager
    def total(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.total_s += time.perf_counter() - start
