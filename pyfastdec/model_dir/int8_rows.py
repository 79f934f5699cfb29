"""The per-row int8 rule of the tied embedding (export/FORMAT.md, quantization.embedding).

The engine quantises a float32 `embed.weight` of an int8 model at load by this rule
(csrc/layers/linear.cc quantize_rows); the writer stores an int8 embedding by it; readers
that need floats (the torch reference, the CTranslate2 and ONNX exports) dequantise by
it. Each step is one correctly rounded float32 operation in numpy and in C++, so q and
scale here equal the engine's bit for bit.
"""
from __future__ import annotations

import numpy as np


def quantize_rows(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[V, d] float32 -> (q int8 [V, d], scale float32 [V]): scale = max|row| / 127 (1 for
    an all-zero row), q = round-half-even(row / scale) clamped to +-127."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    amax = np.abs(w).max(axis=1)
    scale = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def dequantize_rows(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """float32 q * scale[row]: the rows the engine looks tokens up in."""
    return q.astype(np.float32) * np.asarray(scale, dtype=np.float32)[:, None]


def int8_embedding_rows(w: np.ndarray) -> np.ndarray:
    """What an int8 engine reads for a float32 embedding: its rows quantised and back."""
    return dequantize_rows(*quantize_rows(w))
