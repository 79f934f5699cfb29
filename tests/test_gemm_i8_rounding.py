"""int8 activations that land exactly on .5 after scaling: every ISA must round them
half to even, as the numpy model does, or "bit-identical on every family" breaks.
Random activations almost never hit a tie, so the other GEMM tests cannot tell
half-to-even from half-away-from-zero; these values are built to hit one in every lane.

The ties are exact in float32: a row whose max|a| is 127 (or 63.5) gets the dynamic
scale 127/127 = 1 (or 2) exactly, a calibrated scale of 4 is a power of two, and the
values are (k + 1/2) / scale for k = -127..126, even and odd k, both signs."""
import numpy as np
import pytest

from pyfastdec import _engine
from kernel_reference import int8_isas, gemm_i8_reference, quantize_activations

ISAS = int8_isas()


def tie_rows(scale: float, rng) -> np.ndarray:
    """Rows of (k + 0.5) / scale, shuffled, each with one ±127/scale so that the dynamic
    scale is exactly `scale`. K = 257 covers full SIMD blocks and a tail."""
    ties = (np.arange(-127, 127) + 0.5) / scale
    rows = []
    for sign in (1, -1):
        row = np.concatenate([[sign * 127 / scale], ties, ties[:2]])
        rows.append(rng.permutation(row))
    return np.array(rows, np.float32)


def round_half_away(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def cases():
    rng = np.random.default_rng(7)
    for scale, act_scale in ((1.0, None), (2.0, None), (4.0, 4.0)):
        a = tie_rows(scale, rng)
        yield a, act_scale


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", range(3), ids=["dynamic-scale-1", "dynamic-scale-2", "calibrated-scale-4"])
def test_ties_round_half_to_even_on_every_isa(isa, case):
    a, act_scale = list(cases())[case]
    rng = np.random.default_rng(case)
    N = 37
    w = rng.integers(-127, 128, (N, a.shape[1])).astype(np.int8)
    w[w == 0] = 1  # every lane counts: a rounding difference must show in the sum
    scales = (rng.random(N) * 0.02 + 1e-3).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)

    # The case really is all ties, and half-away-from-zero would give another product.
    scale = 1.0 / quantize_activations(a, act_scale)[1]
    scaled = a.astype(np.float64) * scale[:, None]
    body = np.abs(scaled) < 127
    assert np.all(scaled[body] % 1 == 0.5) and body.sum() == a.size - 2
    q_even = quantize_activations(a, act_scale)[0]
    assert not np.array_equal(q_even, round_half_away(np.clip(scaled, -127, 127)))

    W = _engine.Int8Matrix(w, scales, isa=isa, columns=True)
    want = gemm_i8_reference(a, w, scales, bias, act_scale=act_scale)
    np.testing.assert_array_equal(_engine.gemm_i8(a, W, bias=bias, act_scale=act_scale), want)
    # The shortlisted output layer quantises through the same path.
    cols = np.tile(np.arange(N, dtype=np.int32), len(a))
    offsets = np.arange(len(a) + 1, dtype=np.int64) * N
    got = _engine.gemm_i8_columns(a, W, cols, offsets, bias=bias, act_scale=act_scale)
    np.testing.assert_array_equal(got.reshape(len(a), N), want)
