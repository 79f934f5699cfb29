"""Want.proposals, checked once for every backend that has proposal heads.

A step asked for proposals finds, per row, j = the number of leading draft tokens that
equal the argmax of the position before them (pyfastdec.decoding.draft_verify's
accept_argmax, within the row's draft length) and runs the heads at position j only
(pyfastdec/backends/base.py; the heads: export/FORMAT.md, *Proposal heads*).
"""
from __future__ import annotations

import numpy as np


def check_proposals(want, tokens: np.ndarray, heads: int, model: object) -> np.ndarray:
    """want.proposals as int64 [rows], or a one-line ValueError: the model (named by
    `model`, e.g. its directory) has no heads, argmax is not asked for, or a draft length
    is not in [0, n - 1] (tokens[:, 0] is the pending token, tokens[:, 1:] the drafts)."""
    if heads == 0:
        raise ValueError(f"step: Want.proposals asked for, but {model} has no proposal heads "
                         f"(config.json has no \"heads\" field; export/FORMAT.md)")
    if not want.argmax:
        raise ValueError("step: Want.proposals needs argmax=True (the accepted position is found from the argmax)")
    if not isinstance(want.heads, (int, np.integer)) or not 0 <= want.heads <= heads:
        raise ValueError(f"step: Want.heads = {want.heads!r}, outside [0, {heads}] "
                         f"(0: all {heads} proposal heads of {model})")
    lengths = np.asarray(want.proposals)
    rows, n = tokens.shape
    if lengths.shape != (rows,) or lengths.dtype.kind not in "iu":
        raise ValueError(f"step: Want.proposals must be integers [rows={rows}] (draft tokens per row), "
                         f"got {lengths.dtype} {list(lengths.shape)}")
    # min/max of the list: at batch 1 numpy comparisons cost more than the rest of this check
    values = lengths.tolist()
    if values and (min(values) < 0 or max(values) > n - 1):
        b = next(i for i, v in enumerate(values) if not 0 <= v <= n - 1)
        raise ValueError(f"step: Want.proposals[{b}] = {int(lengths[b])} draft tokens, outside [0, {n - 1}] "
                         f"(tokens[:, 1:] hold the drafts)")
    return np.ascontiguousarray(lengths, dtype=np.int64)


def accepted_prefix(argmax: np.ndarray, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """j [rows]: leading draft tokens tokens[b, 1 + i] == argmax[b, i], for i < lengths[b]."""
    agree = tokens[:, 1:] == argmax[:, :-1]
    inside = np.arange(agree.shape[1])[None, :] < lengths[:, None]
    return np.cumprod(agree & inside, axis=1).sum(axis=1).astype(np.int64)
