"""The wall-clock budget of a training run, not charged for time the process was stopped.

Training budgets are minutes of wall time (resumable across runs). A run paused with
SIGSTOP while something else is measured on the same cores, or a suspended machine,
would otherwise spend its budget doing nothing. A stop cannot be observed directly
(SIGSTOP cannot be caught), so a step that took far longer than the steps before it is
charged what a typical recent step took instead. Several such steps in a row are a
machine that got slower, not a stop: from the MAX_STALLS + 1-th on they are charged whole
and become the new typical step. Time is the monotonic clock (a wall-clock jump is not
training time).
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
MAX_STALLS = 3


class TrainingClock:
    """Seconds spent training: `spent` after each `tick()`."""

    def __init__(self, spent: float = 0.0, now=time.monotonic):
        self.spent = spent
        self._now = now
        self._last = now()
        self._recent: deque[float] = deque(maxlen=WINDOW)
        self._stalls = 0  # stalls in a row
        self.stalled_seconds = 0.0  # left uncharged, for the log

    def tick(self) -> float:
        """End of a step: charge the time since the previous tick (or construction, or `add`)."""
        t = self._now()
        dt, self._last = t - self._last, t
        if self._recent and dt > STALL_SECONDS and dt > STALL_FACTOR * median(self._recent) \
                and self._stalls < MAX_STALLS:
            self._stalls += 1
            typical = median(self._recent)
            self.stalled_seconds += dt - typical
            dt = typical
        else:
            if self._stalls >= MAX_STALLS:  # not a stop: the steps got slower; the old typical is history
                self._recent.clear()
            self._stalls = 0
            self._recent.append(dt)
        self.spent += dt
        return self.spent

    def add(self, seconds: float) -> float:
        """Charge work timed apart (an evaluation) and forget the time since the last tick,
        which that work was."""
        self.spent += seconds
        self._last = self._now()
        return self.spent
