"""The attention softmax and the fused residual + layer norm kernels, on every ISA,
against numpy (float64) and against the unfused engine kernels."""
import numpy as np
import pytest

from pyfastdec import _engine
from kernel_reference import available_isas

ISAS = available_isas()


def numpy_softmax(x: np.ndarray, visible: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape, np.float64)
    for r, v in enumerate(visible):
        row = x[r, :v].astype(np.float64)
        e = np.exp(row - row.max())
        out[r, :v] = e / e.sum()
    return out


def numpy_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 2, 7, 16, 17, 31, 64, 65, 130])
def test_softmax_rows_matches_numpy(isa, n):
    rng = np.random.default_rng(n)
    # Attention-sized scores, a causal mask (row r sees r + 1 keys, cut at n) and a
    # row that sees everything.
    rows = min(n, 9) + 1
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    visible = np.array([min(r + 1, n) for r in range(rows - 1)] + [n], np.int64)
    got = _engine.softmax_rows(x, visible, isa=isa)
    want = numpy_softmax(x, visible)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-8)
    for r, v in enumerate(visible):
        assert np.all(got[r, v:] == 0.0)
        assert abs(got[r, :v].astype(np.float64).sum() - 1.0) < 1e-5


@pytest.mark.parametrize("isa", ISAS)
def test_softmax_rows_masked_scores_do_not_leak(isa):
    # Scores past `visible` are huge: they must neither win the max nor enter the sum.
    x = np.array([[0.0, 1.0, 1e30, np.inf], [2.0, 2.0, 2.0, -np.inf]], np.float32)
    got = _engine.softmax_rows(x, np.array([2, 3]), isa=isa)
    np.testing.assert_allclose(got[0], numpy_softmax(x[:1], np.array([2]))[0], rtol=2e-6)
    np.testing.assert_allclose(got[1, :3], np.full(3, 1 / 3), rtol=2e-6)
    assert got[1, 3] == 0.0


def test_softmax_rows_rejects_bad_visible():
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match=r"visible\[1\] = 5, outside \[1, 4\]"):
        _engine.softmax_rows(x, np.array([1, 5]))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("d", [1, 15, 16, 33, 256])
def test_add_layer_norm_equals_add_then_layer_norm(isa, d):
    rng = np.random.default_rng(d)
    x = rng.standard_normal((5, d)).astype(np.float32)
    y = rng.standard_normal((5, d)).astype(np.float32)
    gamma = rng.standard_normal(d).astype(np.float32)
    beta = rng.standard_normal(d).astype(np.float32)
    summed, normed = _engine.add_layer_norm(x, y, gamma, beta, isa=isa)
    # Bit-identical to the unfused kernels: the engine's outputs must not change.
    np.testing.assert_array_equal(summed, x + y)
    np.testing.assert_array_equal(normed, _engine.layer_norm(x + y, gamma, beta, isa=isa))
    np.testing.assert_allclose(normed, numpy_layer_norm(x + y, gamma, beta), rtol=1e-4, atol=1e-4)
