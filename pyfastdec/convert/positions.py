"""The sinusoidal position tables of export/FORMAT.md ("positions": interleaved, halves,
marian), computed as the engine and export.modeling compute them: the CTranslate2 writer
stores the table, the activation calibration adds it, the Hugging Face import checks a
stored one against it."""
from __future__ import annotations

import math

import numpy as np


def sinusoidal_table(rows: int, d_model: int, layout: str = "interleaved") -> np.ndarray:
    """Our interleaved positions: row p, column 2i = sin(p / 10000^(2i/d)), 2i+1 = cos.

    Computed in float32 step by step like export.modeling.sinusoidal_positions (the
    float32 rounding of p * inv dominates the error at large p, so it is reproduced).
    layout "halves" / "marian": config.json "positions" (export/FORMAT.md), computed as
    the engine computes them (float64 / float32)."""
    if layout != "interleaved":
        half = d_model // 2
        p = np.arange(rows)[:, None]
        if layout == "halves":
            angle = p / np.power(10000.0, 2.0 * np.arange(half) / d_model)
        else:
            increment = np.float32(math.log(10000.0)) / np.float32(half - 1)
            angle = p.astype(np.float32) * np.exp(np.arange(half, dtype=np.float32) * -increment)
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)
    i = np.arange(0, d_model, 2, dtype=np.float32)
    inv = np.exp(np.float32(-math.log(10000.0)) * i / np.float32(d_model))
    angle = np.arange(rows, dtype=np.float32)[:, None] * inv[None, :]
    table = np.empty((rows, d_model), dtype=np.float32)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table

