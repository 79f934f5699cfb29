"""int8 GEMM on every ISA this machine has, against the numpy model of the kernel."""
import numpy as np
import pytest

from pyfastdec import _engine
from kernel_reference import int8_isas, gemm_i8_reference, quantize_activations

ISAS = int8_isas()
SIZES = [1, 7, 63, 65, 1000]
SHAPES = [(1, 1, 1), (1, 7, 65), (1, 1000, 63), (7, 63, 1000), (65, 65, 7), (17, 1000, 65),
          (64, 256, 130), (3, 2048, 33)]


def random_case(rng, M, K, N, per_channel=True):
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.integers(-127, 128, (N, K)).astype(np.int8)
    scales = (rng.random(N if per_channel else 1) * 0.02 + 1e-3).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    return a, w, scales, bias


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("M,K,N", SHAPES)
def test_matches_reference_exactly(isa, M, K, N):
    rng = np.random.default_rng(M * 10007 + K * 101 + N)
    a, w, scales, bias = random_case(rng, M, K, N)
    W = _engine.Int8Matrix(w, scales, isa=isa)
    assert W.shape == (N, K) and W.isa == isa
    np.testing.assert_array_equal(_engine.gemm_i8(a, W, bias=bias), gemm_i8_reference(a, w, scales, bias))
    np.testing.assert_array_equal(_engine.gemm_i8(a, W, relu=True),
                                  gemm_i8_reference(a, w, scales, relu=True))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("K", SIZES)
@pytest.mark.parametrize("N", SIZES)
def test_every_odd_size_with_one_row(isa, K, N):
    rng = np.random.default_rng(K * 7 + N)
    a, w, scales, bias = random_case(rng, 1, K, N)
    out = _engine.gemm_i8(a, _engine.Int8Matrix(w, scales, isa=isa), bias=bias)
    np.testing.assert_array_equal(out, gemm_i8_reference(a, w, scales, bias))


@pytest.mark.parametrize("isa", ISAS)
def test_error_is_within_half_an_activation_step(isa):
    """Weights are exactly int8 * scale, so the only error is rounding each activation
    to its grid: |C - A W^T| <= (step / 2) * sum_k |w_k| per output, step = 1/scale."""
    rng = np.random.default_rng(1)
    M, K, N = 33, 517, 129
    a, w, scales, bias = random_case(rng, M, K, N)
    exact = a.astype(np.float64) @ (w.astype(np.float64) * scales[:, None]).T + bias
    got = _engine.gemm_i8(a, _engine.Int8Matrix(w, scales, isa=isa), bias=bias)
    step = 1.0 / (127.0 / np.abs(a).max(axis=1))
    bound = (step[:, None] / 2) * (np.abs(w).astype(np.float64) * scales[:, None]).sum(axis=1)[None, :]
    float_slack = 1e-5 * (np.abs(exact) + 1)
    assert np.all(np.abs(got - exact) <= bound + float_slack)
    # ...and the bound is not vacuous: the typical error is far below it.
    assert np.median(np.abs(got - exact) / bound) < 0.2


@pytest.mark.parametrize("isa", ISAS)
def test_per_tensor_scale_and_calibrated_activation_scale(isa):
    rng = np.random.default_rng(2)
    a, w, _, bias = random_case(rng, 5, 70, 40)
    scale = np.array([0.01], np.float32)
    W = _engine.Int8Matrix(w, scale, isa=isa)
    np.testing.assert_array_equal(_engine.gemm_i8(a, W, bias=bias, act_scale=20.0),
                                  gemm_i8_reference(a, w, scale, bias, act_scale=20.0))
    # A calibrated scale smaller than the data needs clamps instead of overflowing.
    q, _ = quantize_activations(a * 100, act_scale=20.0)
    assert q.max() == 127 and q.min() == -127
    np.testing.assert_array_equal(_engine.gemm_i8(a * 100, W, act_scale=20.0),
                                  gemm_i8_reference(a * 100, w, scale, act_scale=20.0))


@pytest.mark.parametrize("isa", ISAS)
def test_zeros_and_large_magnitudes(isa):
    rng = np.random.default_rng(3)
    _, w, scales, bias = random_case(rng, 4, 96, 50)
    W = _engine.Int8Matrix(w, scales, isa=isa)
    zeros = np.zeros((4, 96), np.float32)
    np.testing.assert_array_equal(_engine.gemm_i8(zeros, W, bias=bias), np.tile(bias, (4, 1)))
    huge = (rng.standard_normal((4, 96)) * 1e30).astype(np.float32)
    out = _engine.gemm_i8(huge, W)
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(out, gemm_i8_reference(huge, w, scales))
    # Largest products in every lane: 127 * 127 * 96 accumulates with no saturation.
    extreme = np.full((2, 96), 127, np.int8)
    extreme[1] = -127
    Wx = _engine.Int8Matrix(extreme, np.ones(2, np.float32), isa=isa)
    threes = np.full((1, 96), 3.0, np.float32)  # quantises to 127 with step 3/127
    np.testing.assert_allclose(_engine.gemm_i8(threes, Wx), [[127 * 96 * 3.0, -127 * 96 * 3.0]], rtol=1e-6)


@pytest.mark.parametrize("isa", ISAS)
def test_column_subset_equals_the_full_product(isa):
    rng = np.random.default_rng(4)
    M, K, N = 6, 301, 1000
    a, w, scales, bias = random_case(rng, M, K, N)
    W = _engine.Int8Matrix(w, scales, columns=True, isa=isa)
    full = _engine.gemm_i8(a, W, bias=bias)
    rows = [np.sort(rng.choice(N, size=int(rng.integers(0, 40)), replace=False)) for _ in range(M)]
    cols = np.concatenate(rows).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    got = _engine.gemm_i8_columns(a, W, cols, offsets, bias=bias)
    want = np.concatenate([full[m, rows[m]] for m in range(M)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ISAS)
def test_two_threads_give_identical_results(isa):
    rng = np.random.default_rng(5)
    pool = _engine.ThreadPool(2)
    for M, K, N in [(1, 512, 2048), (64, 256, 100), (3, 40, 7)]:
        a, w, scales, bias = random_case(rng, M, K, N)
        W = _engine.Int8Matrix(w, scales, isa=isa)
        np.testing.assert_array_equal(_engine.gemm_i8(a, W, bias=bias, pool=pool),
                                      _engine.gemm_i8(a, W, bias=bias))


def test_output_buffer_is_filled_in_place():
    rng = np.random.default_rng(6)
    a, w, scales, bias = random_case(rng, 3, 20, 9)
    out = np.full((3, 9), np.nan, np.float32)
    result = _engine.gemm_i8(a, _engine.Int8Matrix(w, scales), bias=bias, out=out)
    assert result is out or np.shares_memory(result, out)
    np.testing.assert_array_equal(out, gemm_i8_reference(a, w, scales, bias))


class TestBadInput:
    W = _engine.Int8Matrix(np.ones((4, 8), np.int8), np.ones(4, np.float32), columns=True)

    def test_wrong_dtype_names_the_argument(self):
        with pytest.raises(TypeError, match=r"gemm_i8: argument 'a' must have dtype float32, got float64"):
            _engine.gemm_i8(np.ones((2, 8)), self.W)
        with pytest.raises(TypeError, match=r"argument 'weights' must have dtype int8"):
            _engine.Int8Matrix(np.ones((4, 8), np.float32), np.ones(4, np.float32))
        with pytest.raises(TypeError, match=r"argument 'a' must be a numpy array"):
            _engine.gemm_i8([[1.0] * 8], self.W)

    def test_wrong_shape(self):
        with pytest.raises(ValueError, match=r"argument 'a' has shape \(2, 9\): dimension 1 must be 8"):
            _engine.gemm_i8(np.ones((2, 9), np.float32), self.W)
        with pytest.raises(ValueError, match=r"argument 'a' must have 2 dimensions"):
            _engine.gemm_i8(np.ones(8, np.float32), self.W)
        with pytest.raises(ValueError, match=r"argument 'bias' has shape \(3,\)"):
            _engine.gemm_i8(np.ones((2, 8), np.float32), self.W, bias=np.ones(3, np.float32))
        with pytest.raises(ValueError, match=r"'scales' must have N = 4 values"):
            _engine.Int8Matrix(np.ones((4, 8), np.int8), np.ones(3, np.float32))

    def test_non_contiguous_and_misaligned(self):
        with pytest.raises(ValueError, match=r"argument 'a' must be C-contiguous"):
            _engine.gemm_i8(np.ones((8, 2), np.float32).T, self.W)
        raw = np.zeros(2 * 8 * 4 + 1, np.uint8)
        misaligned = raw[1:].view(np.float32).reshape(2, 8)
        with pytest.raises(ValueError, match=r"argument 'a' is not aligned"):
            _engine.gemm_i8(misaligned, self.W)

    def test_bad_scales_and_columns(self):
        a = np.ones((1, 8), np.float32)
        with pytest.raises(ValueError, match=r"act_scale' must be finite and > 0"):
            _engine.gemm_i8(a, self.W, act_scale=0.0)
        with pytest.raises(ValueError, match=r"'scales' must be finite"):
            _engine.Int8Matrix(np.ones((4, 8), np.int8), np.array([1, np.nan, 1, 1], np.float32))
        with pytest.raises(ValueError, match=r"'cols' has id 4 at index 1, outside \[0, 4\)"):
            _engine.gemm_i8_columns(a, self.W, np.array([0, 4], np.int32), np.array([0, 2], np.int64))
        with pytest.raises(ValueError, match=r"'offsets' must start at 0 and end at len\(cols\)"):
            _engine.gemm_i8_columns(a, self.W, np.array([0, 1], np.int32), np.array([0, 1], np.int64))
        plain = _engine.Int8Matrix(np.ones((4, 8), np.int8), np.ones(4, np.float32))
        with pytest.raises(ValueError, match=r"built without columns=True"):
            _engine.gemm_i8_columns(a, plain, np.array([0], np.int32), np.array([0, 1], np.int64))

    def test_read_only_output(self):
        out = np.zeros((1, 4), np.float32)
        out.flags.writeable = False
        with pytest.raises(ValueError, match=r"'out' is read-only"):
            _engine.gemm_i8(np.ones((1, 8), np.float32), self.W, out=out)
