"""The edit-margin rule on the argmax (Want.keep_ids / Want.edit_margin), in numpy: what
the native engine does in its output layer (csrc/model/output_layer.cc, output_stats), for the
backends that compute log-probs in Python (torch reference, onnxruntime).

At every position with a kept token k (>= 0; -1: none), the argmax becomes k unless the
top-1 t beats it by the margin: logp(t) - logp(k) >= margin (a difference of log-probs
equals the difference of logits). margin 0 leaves the argmax as it is."""
from __future__ import annotations

import numpy as np


def check_keep_ids(keep_ids, margin: float, shape: tuple[int, int], vocab_size: int) -> np.ndarray:
    """keep_ids as int64 [rows, n], or a one-line ValueError naming what is wrong."""
    if not (np.isfinite(margin) and margin >= 0):
        raise ValueError(f"step: edit_margin must be a finite number >= 0, got {margin!r}")
    keep = np.asarray(keep_ids, dtype=np.int64)
    if keep.shape != tuple(shape):
        raise ValueError(f"step: keep_ids must be [rows, n] = {tuple(shape)}, got {keep.shape}")
    if keep.size and (keep.min() < -1 or keep.max() >= vocab_size):
        raise ValueError(f"step: keep_ids has id {int(keep.min() if keep.min() < -1 else keep.max())}, "
                         f"outside the vocabulary (-1: no kept token)")
    return keep


def kept_argmax(argmax: np.ndarray, logp: np.ndarray, keep: np.ndarray, margin: float) -> np.ndarray:
    """argmax [rows, n] with the rule applied; logp [rows, n, V]."""
    rows, cols = np.nonzero((keep >= 0) & (keep != argmax))
    if not len(rows):
        return argmax
    k = keep[rows, cols]
    gap = logp[rows, cols, argmax[rows, cols]] - logp[rows, cols, k]
    out = argmax.copy()
    win = gap < margin
    out[rows[win], cols[win]] = k[win]
    return out
