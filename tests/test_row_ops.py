"""argmax and the fused row statistics, against numpy, on every ISA."""
import numpy as np
import pytest

from pyfastdec import _engine
from kernel_reference import available_isas, topk_reference

ISAS = available_isas()
LENGTHS = [1, 7, 63, 65, 127, 128, 129, 255, 256, 257, 1000, 8000, 32000]
NAN, INF = np.float32(np.nan), np.float32(np.inf)


def numpy_argmax(x):
    """Ties -> lowest index; NaN ignored unless the row is all NaN (-> 0)."""
    candidates = np.flatnonzero(~np.isnan(x))
    if candidates.size == 0:
        return 0
    return int(candidates[np.argmax(x[candidates])])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", LENGTHS)
def test_argmax_random_rows(isa, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((4, n)).astype(np.float32)
    np.testing.assert_array_equal(_engine.argmax(x, isa=isa), x.argmax(axis=1))
    assert _engine.argmax(x[0], isa=isa) == x[0].argmax()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [7, 65, 129, 257, 1000])
def test_argmax_max_at_every_position(isa, n):
    """The maximum placed at each index, with a tie after it: the first one wins."""
    x = np.tile(np.linspace(-1, 0, n, dtype=np.float32), (n, 1))
    idx = np.arange(n)
    x[idx, idx] = 5.0
    x[idx[:-1], idx[:-1] + 1] = 5.0
    np.testing.assert_array_equal(_engine.argmax(x, isa=isa), idx)


@pytest.mark.parametrize("isa", ISAS)
def test_argmax_ties_nan_and_infinities(isa):
    cases = [
        np.zeros(300, np.float32),                          # all tied -> 0
        np.array([1, 3, 3, 2], np.float32),
        np.array([NAN, 1, 2, NAN], np.float32),             # NaN never wins
        np.array([1] * 200 + [NAN] + [2] * 10, np.float32),  # NaN inside a SIMD block
        np.full(77, NAN, np.float32),                       # all NaN -> 0
        np.full(130, -INF, np.float32),                     # all -inf -> 0
        np.array([NAN] * 140 + [-INF] + [NAN] * 3, np.float32),  # first -inf
        np.array([-INF, INF, 3, INF], np.float32),
        np.array([-3e38, -1e38, -2e38], np.float32),
    ]
    for x in cases:
        assert _engine.argmax(x, isa=isa) == numpy_argmax(x), x


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 7, 65, 1000, 32000])
@pytest.mark.parametrize("k", [0, 1, 5])
def test_row_stats_random(isa, n, k):
    k = min(k, n)
    rng = np.random.default_rng(n + k)
    x = (rng.standard_normal((3, n)) * 4).astype(np.float32)
    ids = rng.integers(0, n, (3, 6)).astype(np.int64)
    s = _engine.row_stats(x, k=k, ids=ids, isa=isa)
    x64 = x.astype(np.float64)
    lse = np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1)) + x64.max(1)
    np.testing.assert_array_equal(s["max"], x.max(axis=1))
    np.testing.assert_allclose(s["log_sum_exp"], lse, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(s["top_ids"], topk_reference(x, k))
    top_vals = np.take_along_axis(x64, topk_reference(x, k), 1)
    np.testing.assert_allclose(s["top_logprobs"], top_vals - lse[:, None], rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(s["id_logprobs"], np.take_along_axis(x64, ids, 1) - lse[:, None],
                               rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("isa", ISAS)
def test_row_stats_ties_nan_and_infinities(isa):
    x = np.array([2, 5, NAN, 5, -INF, 1, 5, -INF, NAN], np.float32)
    s = _engine.row_stats(x, k=9, isa=isa)
    # value desc / index asc; -inf after finite values; NaN last.
    np.testing.assert_array_equal(s["top_ids"], [1, 3, 6, 0, 5, 4, 7, 2, 8])
    finite = np.array([2, 5, 5, 1, 5], np.float64)
    lse = np.log(np.exp(finite).sum())
    assert s["max"] == 5 and s["log_sum_exp"] == pytest.approx(lse, rel=1e-6)
    np.testing.assert_allclose(s["top_logprobs"][:5], np.array([5, 5, 5, 2, 1]) - lse, rtol=1e-6)
    assert np.all(np.isneginf(s["top_logprobs"][5:7])) and np.all(np.isnan(s["top_logprobs"][7:]))
    only_inf = _engine.row_stats(np.full(40, -INF, np.float32), k=2, isa=isa)
    assert only_inf["max"] == -INF and list(only_inf["top_ids"]) == [0, 1]


@pytest.mark.parametrize("isa", ISAS)
def test_row_ops_with_threads(isa):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((33, 4000)).astype(np.float32)
    pool = _engine.ThreadPool(2)
    np.testing.assert_array_equal(_engine.argmax(x, isa=isa, pool=pool), x.argmax(1))
    a = _engine.row_stats(x, k=4, isa=isa, pool=pool)
    b = _engine.row_stats(x, k=4, isa=isa)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_row_ops_bad_input():
    x = np.zeros((2, 10), np.float32)
    with pytest.raises(ValueError, match=r"row_stats: argument 'k' must be in \[0, 10\]"):
        _engine.row_stats(x, k=11)
    with pytest.raises(ValueError, match=r"argument 'ids' has id 10, outside \[0, 10\)"):
        _engine.row_stats(x, ids=np.array([[0], [10]], np.int64))
    with pytest.raises(ValueError, match=r"argmax: argument 'x' has empty rows"):
        _engine.argmax(np.zeros((2, 0), np.float32))
    with pytest.raises(TypeError, match=r"argmax: argument 'x' must have dtype float32"):
        _engine.argmax(np.zeros(3, np.float16))


def test_argmax_timer_runs_both_implementations():
    x = np.random.default_rng(0).standard_normal(8000).astype(np.float32)
    assert _engine.time_argmax_ns(x, repeats=3) > 0
    assert _engine.time_argmax_ns(x, repeats=3, impl="std_max_element") > 0
    with pytest.raises(ValueError, match="impl must be"):
        _engine.time_argmax_ns(x, impl="other")
