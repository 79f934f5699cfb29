"""How a job reports a problem: one line on stderr naming the program, and an exit status
(the codes `fastdec --help` lists)."""
from __future__ import annotations

import sys

PROG = "fastdec"
EXIT_ERROR, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 130, 143  # 128 + SIGINT, SIGTERM


class CliError(Exception):
    """A problem reported as one line on stderr; `code` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code

    def __reduce__(self):  # from a worker process with its exit status, not EXIT_ERROR
        return type(self), (str(self), self.code)


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)
