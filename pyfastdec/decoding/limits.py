"""Output length limits shared by every strategy.

Each row gets its own limit from its own source length (never the batch's longest), so
an output never depends on which sentences share its batch. A row that reaches its
limit ends there and is returned as it is (flagged in DecodeStats.hit_max_len and, for
beam search, Hypothesis.finished=False); nothing is dropped.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def default_max_len(src_len: int) -> int:
    """2 * len(source) + 10 output tokens (EOS not counted), where len(source) counts
    the source's trailing EOS: room for long outputs, a bound on runaway repetition.
    The same rule as export/decode.py, so the references and pyfastdec agree."""
    return 2 * src_len + 10


def row_limits(src_ids: Sequence[Sequence[int]], max_len: int | Sequence[int] | None) -> list[int]:
    """The output-token limit of every row: `max_len` if given (one int for every row, or
    one per row: Translator gives rows with a target prefix what the prefix leaves of
    theirs), else default_max_len."""
    if max_len is not None and not isinstance(max_len, (int, np.integer)):
        limits = [int(n) for n in max_len]
        if len(limits) != len(src_ids) or min(limits, default=1) < 1:
            raise ValueError(f"max_len: expected one limit >= 1 per row ({len(src_ids)} rows), got {limits}")
        return limits
    if max_len is not None:
        if int(max_len) < 1:
            raise ValueError(f"max_len must be >= 1 (output tokens, EOS not counted), got {max_len}")
        return [int(max_len)] * len(src_ids)
    return [default_max_len(len(s)) for s in src_ids]
