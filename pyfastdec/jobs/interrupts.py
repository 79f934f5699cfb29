"""Ctrl-C and SIGTERM end a job between whole output lines: SIGTERM is raised as Ctrl-C
is (Terminated), and both are held back while a block is written or workers start."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM (`timeout`, `kill`, a job scheduler), raised as Ctrl-C is so that it ends the
    command the same way: between whole output lines, workers stopped, one line on stderr."""


def raise_terminated(signum, frame) -> None:
    raise Terminated


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back while a block of lines is written (or workers start),
    so an interrupt lands between whole lines (it is delivered as soon as the block is
    out). Also while a write to a pipe waits for a slow reader: whole lines are what
    --help promises, and SIGKILL still stops the process at once."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = mask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, old)
