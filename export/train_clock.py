"""The wall-clock budget of a training run, not charged for time the process was stopped.

Training budgets are minutes of wall time (resumable across runs). A run paused with
SIGSTOP while something else is measured on the same cores, or a suspended machine,
would otherwise spend its budget doing nothing. A stop cannot be observed directly
(SIGSTOP cannot be caught), so a step that took far longer than the steps before it is
charged what a typical recent step took instead.
"""
from __future__ import annotations

import time
from collections import deque
from statistics import median

# A step is a stall when it took more than STALL_FACTOR times the median of the last
# WINDOW steps and more than STALL_SECONDS: a slow batch (long sentences, a busy core) is
# a few times the median, a pause is minutes.
STALL_FACTOR = 10.0
STALL_SECONDS = 20.0
WINDOW = 50


class TrainingClock:
    """Seconds spent training: `spent` after each `tick()`; `add` charges work timed apart
    (an evaluation)."""

    def __init__(self, spent: float = 0.0, now=time.time):
        self.spent = spent
        self._now = now
        self._last = now()
        self._recent: deque[float] = deque(maxlen=WINDOW)
        self.stalled_seconds = 0.0  # left uncharged, for the log

    def tick(self) -> float:
        """End of a step: charge the time since the previous tick (or since `restart`)."""
        t = self._now()
        dt, self._last = t - self._last, t
        if self._recent and dt > STALL_SECONDS and dt > STALL_FACTOR * median(self._recent):
            typical = median(self._recent)
            self.stalled_seconds += dt - typical
            dt = typical
        else:
            self._recent.append(dt)
        self.spent += dt
        return self.spent

    def restart(self) -> None:
        """Forget the time since the last tick (it was charged some other way, or is not
        training: an evaluation timed by `add`, a checkpoint write)."""
        self._last = self._now()

    def add(self, seconds: float) -> float:
        self.spent += seconds
        self.restart()
        return self.spent
