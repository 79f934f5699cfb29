"""numpy references for the native kernels: the behaviour each kernel must reproduce.

The int8 reference follows the documented quantisation exactly (scale 127/max|row|,
multiply, clamp to ±127, round half to even, int32 accumulation, then
acc * (1/scale * w_scale) + bias in float32), so the native result must equal it bit
for bit; separately, tests bound its distance to the float product by the
quantisation step.
"""
from __future__ import annotations

import numpy as np

from pyfastdec import _engine

KERNEL_ISAS = ["scalar", "avx2", "avx512", "vnni", "amx"]
# The AMX table's int8 GEMM on emulated tiles (csrc/kernels/isa_amx_emulated.cc): any CPU
# runs it, so the tile kernel is checked everywhere, not only where AMX exists. Only the
# kernels' isa= takes it (no FASTDEC_ISA value picks it).
AMX_EMULATED = "amx-emulated"


def available_isas() -> list[str]:
    """Kernel families this CPU can run."""
    have = set(_engine.cpu_info()["available"])
    return [isa for isa in KERNEL_ISAS if isa in have]


def int8_isas() -> list[str]:
    """Every int8 GEMM path this CPU can run, the emulated AMX one included."""
    return available_isas() + [AMX_EMULATED]


def activation_scales(a: np.ndarray, act_scale: float | None) -> np.ndarray:
    if act_scale is not None:
        return np.full(a.shape[0], act_scale, np.float32)
    max_abs = np.abs(a).max(axis=1)
    ok = (max_abs > 0) & np.isfinite(max_abs)
    return np.where(ok, np.float32(127) / np.where(ok, max_abs, 1), np.float32(1)).astype(np.float32)


def quantize_activations(a: np.ndarray, act_scale: float | None = None):
    scale = activation_scales(a, act_scale)
    v = np.clip(a * scale[:, None], np.float32(-127), np.float32(127))
    return np.rint(v).astype(np.int64), (np.float32(1) / scale).astype(np.float32)


def gemm_i8_reference(a, w_int8, w_scale, bias=None, relu=False, act_scale=None):
    q, a_dequant = quantize_activations(a, act_scale)
    acc = q @ w_int8.astype(np.int64).T
    w_scale = np.broadcast_to(np.asarray(w_scale, np.float32), (w_int8.shape[0],))
    out = acc.astype(np.float32) * (a_dequant[:, None] * w_scale[None, :])
    if bias is not None:
        out = out + bias
    return np.maximum(out, np.float32(0)) if relu else out


def quantize_weights(w: np.ndarray):
    """Per-output-channel symmetric int8, as export writes them."""
    max_abs = np.abs(w).max(axis=1)
    scale = np.where(max_abs > 0, max_abs / 127, 1).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def topk_reference(x: np.ndarray, k: int) -> np.ndarray:
    """Value descending, index ascending on ties, NaN last (by index)."""
    order = np.argsort(-x, axis=-1, kind="stable")
    return order[..., :k]
