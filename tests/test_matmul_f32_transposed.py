"""matmul_f32 with transpose_b transposes B in the kernel, then runs the same NN kernel:
its results must equal, bit for bit, the NN path fed the transposed B (cross attention
relies on it: a verified draft sees the very numbers greedy steps see). Shapes cover
blocks of 16 and their tails in both N and K. The AVX2 kernel computes the transposed
case as one dot product per output instead (a different summation order, never promised
equal), so it is held to the float64 reference only."""
import numpy as np
import pytest

from pyfastdec import _engine
from kernel_reference import available_isas

ISAS = available_isas()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("B,M,K,N", [(1, 1, 1, 1), (2, 1, 64, 15), (2, 3, 64, 16), (3, 5, 64, 17),
                                     (1, 4, 64, 45), (2, 7, 17, 33), (1, 2, 31, 64), (1, 9, 128, 100)])
def test_transposed_b_equals_nn_on_transposed_copy(isa, B, M, K, N):
    rng = np.random.default_rng(B * 1000 + M * 100 + K + N)
    a = rng.standard_normal((B, M, K)).astype(np.float32)
    b = rng.standard_normal((B, N, K)).astype(np.float32)
    got = _engine.matmul_f32(a, b, transpose_b=True, alpha=0.125, isa=isa)
    want = _engine.matmul_f32(a, np.ascontiguousarray(np.swapaxes(b, 1, 2)), alpha=0.125, isa=isa)
    if isa != "avx2":
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, 0.125 * np.einsum("bmk,bnk->bmn", a.astype(np.float64), b), rtol=1e-4, atol=1e-4)
