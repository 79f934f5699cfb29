"""Output length limits shared by every strategy.

Each row gets its own limit from its own source length (never the batch's longest), so
an output never depends on which sentences share its batch. A row that reaches its
limit ends there and is returned as it is (flagged in DecodeStats.hit_max_len and, for
beam search, Hypothesis.finished=False); nothing is dropped.

The limit of a sentence is relative to its source, as Marian's --max-length-factor:
floor(factor * len(source)) + MAX_LENGTH_CONSTANT output tokens (EOS not counted; the
target prefix counted), len(source) counting its EOS. An explicit absolute limit
(max_decoding_length) given alone replaces the relative one, as CTranslate2's
max_decoding_length is the only limit there; with a factor given too, the smaller wins. The default factor is the smallest that cuts no natural
output, reference or greedy, of the shipped models' test sets (bench/README.md,
"Output length limit"; python -m bench.studies.length_factor): a runaway (looping)
output stops early, a natural one never meets its limit.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DEFAULT_MAX_LENGTH_FACTOR = 2.5
MAX_LENGTH_CONSTANT = 10  # room for the short sentences, whose outputs vary most in length


def default_max_len(src_len: int, factor: float = DEFAULT_MAX_LENGTH_FACTOR) -> int:
    """floor(factor * len(source)) + MAX_LENGTH_CONSTANT output tokens (EOS not counted),
    where len(source) counts the source's trailing EOS; per sentence, from its own source
    (never the padded batch's), so an output does not depend on its batch. export/decode.py
    takes it too, so the references and pyfastdec agree."""
    return math.floor(factor * src_len) + MAX_LENGTH_CONSTANT


def sentence_limit(src_len: int, max_len: int | None, factor: float | None) -> int:
    """The output-token limit of one sentence (its target prefix included): the smaller
    of the absolute max_len and the relative limit of `factor`, whichever are given (one
    at least: translate_options.check_length_factor sees to it)."""
    bounds = ([] if max_len is None else [max_len]) + ([] if factor is None else [default_max_len(src_len, factor)])
    return min(bounds)


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


def append_winners(outs: list[list[int]], live: Sequence[int], winners: Sequence[int], eos: int,
                   limits: Sequence[int], stats) -> list[int]:
    """One plain step's bookkeeping, shared by greedy and the drafting loops' plain steps:
    row r (input live[r]) takes winners[r] unless it is EOS; a row that reaches its limit
    is recorded in stats.hit_max_len. Returns the rows that go on."""
    stats.iterations += 1
    stats.row_steps += len(live)
    stats.generated += len(live)
    keep = []
    for r, (i, token) in enumerate(zip(live, winners)):
        if token == eos:
            continue
        outs[i].append(token)
        if len(outs[i]) >= limits[i]:
            stats.hit_max_len.append(i)
        else:
            keep.append(r)
    return keep
