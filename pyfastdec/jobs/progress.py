"""What a job shows on stderr while it runs (a progress bar) and after (--stats)."""
from __future__ import annotations

import sys
import time
from typing import Optional

from pyfastdec.decoding import DecodeStats
from pyfastdec.jobs.errors import PROG


class Progress:
    """`\\r1234/5000 lines 45.1 lines/s` on stderr, at most ten times a second; `1234 lines`
    when the total is not known (stdin). Nothing before `delay` seconds: a job that ends
    sooner (`echo ... | fastdec translate`) needs no progress line after its output."""

    def __init__(self, total: Optional[int], enabled: bool, delay: float = 0.0):
        self.total, self.enabled, self.delay = total, enabled, delay
        self.done, self.start, self.shown = 0, time.perf_counter(), 0.0
        self.width, self.shown_done = 0, 0

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self.enabled and now - self.start >= self.delay and (now - self.shown >= 0.1 or self.done == self.total):
            self._draw(now)

    def _draw(self, now: float) -> None:
        self.shown, self.shown_done = now, self.done
        rate = self.done / max(now - self.start, 1e-9)
        done = self.done if self.total is None else f"{self.done}/{self.total}"
        text = f"\r{done} lines {rate:.1f} lines/s"
        self.width = max(self.width, len(text))
        sys.stderr.write(text)
        sys.stderr.flush()

    def clear(self) -> None:
        if self.enabled and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")

    def finish(self) -> None:
        if self.enabled and self.width:
            if self.shown_done != self.done:  # a total that was not known: the last count may not be shown
                self._draw(time.perf_counter())
            sys.stderr.write("\n")
            sys.stderr.flush()


def print_stats(stats: DecodeStats, lines: int, seconds: float) -> None:
    """Counts input lines (each may hold several sentences, decoded one by one); the lines
    cut at the length limit and those that loop (DecodeStats.hit_max_len, .looping): a
    runaway translation shows there."""
    seconds = max(seconds, 1e-9)
    print(f"{PROG}: {lines} lines in {seconds:.2f} s: {lines / seconds:.1f} lines/s, "
          f"{stats.generated / seconds:.1f} tokens/s ({stats.generated} output tokens, EOS included); "
          f"mean accepted tokens per iteration {stats.mean_accepted:.2f} "
          f"(output tokens per iteration {stats.mean_tokens:.2f}, {stats.iterations} iterations); "
          f"lines with an output cut at the length limit: {len(stats.hit_max_len)}, with a looping output (a "
          f"1-3-gram 4+ times in a row): {len(stats.looping)}"
          + (f"; looping corrections dropped: {stats.loops_reverted} (those sentences, or parts of sentences "
             f"too long for the model, kept as they were)" if stats.loops_reverted else ""),
          file=sys.stderr, flush=True)
