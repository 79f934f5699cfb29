"""fp32 GEMM and the small batched GEMMs of attention, against float64 numpy."""
import numpy as np
import pytest

from pyfastdec import _engine
from kernel_reference import available_isas

ISAS = available_isas()


def assert_close_to_float64(got, a, b_t, bias=None, relu=False):
    """float32 accumulation error grows with K: bound it by K * eps * sum|a||b|."""
    exact = a.astype(np.float64) @ b_t.astype(np.float64)
    if bias is not None:
        exact = exact + bias
    if relu:
        exact = np.maximum(exact, 0)
    K = a.shape[-1]
    magnitude = np.abs(a).astype(np.float64) @ np.abs(b_t).astype(np.float64)
    bound = (K + 2) * np.finfo(np.float32).eps * (magnitude + (np.abs(bias) if bias is not None else 0))
    assert np.all(np.abs(got - exact) <= bound + 1e-30)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (1, 7, 65), (7, 63, 1000), (65, 65, 7), (9, 1000, 63),
                                   (64, 256, 130)])
def test_gemm_f32(isa, M, K, N):
    rng = np.random.default_rng(M + K + N)
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    W = _engine.Float32Matrix(w, isa=isa)
    assert W.isa == isa
    assert_close_to_float64(_engine.gemm_f32(a, W, bias=bias), a, w.T, bias)
    assert_close_to_float64(_engine.gemm_f32(a, W, relu=True), a, w.T, relu=True)
    pool = _engine.ThreadPool(2)
    np.testing.assert_array_equal(_engine.gemm_f32(a, W, bias=bias, pool=pool),
                                  _engine.gemm_f32(a, W, bias=bias))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("B,M,K,N", [(1, 1, 1, 1), (8, 1, 64, 23), (4, 19, 64, 19), (2, 7, 65, 33)])
def test_matmul_f32(isa, transpose_b, B, M, K, N):
    rng = np.random.default_rng(B * M + K + N)
    a = rng.standard_normal((B, M, K)).astype(np.float32)
    b = rng.standard_normal((B, N, K) if transpose_b else (B, K, N)).astype(np.float32)
    got = _engine.matmul_f32(a, b, transpose_b=transpose_b, alpha=0.125, isa=isa)
    b_t = np.swapaxes(b, 1, 2) if transpose_b else b
    for i in range(B):
        assert_close_to_float64(got[i] / 0.125, a[i], b_t[i])


def test_f32_bad_input():
    W = _engine.Float32Matrix(np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match=r"gemm_f32: argument 'a' has shape \(2, 4\)"):
        _engine.gemm_f32(np.ones((2, 4), np.float32), W)
    with pytest.raises(ValueError, match=r"matmul_f32: argument 'b' has shape \(2, 4, 3\): dimension 1 must be 5"):
        _engine.matmul_f32(np.ones((2, 3, 5), np.float32), np.ones((2, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"not supported by this CPU|unknown ISA"):
        _engine.Float32Matrix(np.ones((3, 5), np.float32), isa="avx9000")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("d", [1, 7, 16, 65, 256, 1000])
def test_layer_norm(isa, d):
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((5, d)) * 3 + 1).astype(np.float32)
    gamma = rng.standard_normal(d).astype(np.float32)
    beta = rng.standard_normal(d).astype(np.float32)
    x64 = x.astype(np.float64)
    mean = x64.mean(1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(_engine.layer_norm(x, gamma, beta, isa=isa), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"layer_norm: argument 'gamma' has shape"):
        _engine.layer_norm(x, gamma[:-1] if d > 1 else np.zeros(2, np.float32), beta, isa=isa)
