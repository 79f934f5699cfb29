"""The shortlisted output layer when consecutive rows share one column list, as the n
positions a verification step appends to a row all use that row's shortlist. The VNNI
kernel then runs them together (16 columns at a time, one transposing reduction): every
output must still equal the numpy model of the kernel and the same row computed alone,
bit for bit, on every ISA, for list lengths around the 16-column chunk."""
import numpy as np
import pytest

from pyfastdec import _engine
from kernel_reference import int8_isas, gemm_i8_reference

ISAS = int8_isas()


def grouped_case(rng, K, N, groups):
    """groups: (rows, list length) per group; each group's rows share one sorted list."""
    lists = []
    for rows, length in groups:
        cols = np.sort(rng.choice(N, size=length, replace=False)).astype(np.int32)
        lists += [cols] * rows
    a = rng.standard_normal((len(lists), K)).astype(np.float32)
    w = rng.integers(-127, 128, (N, K)).astype(np.int8)
    scales = (rng.random(N) * 0.02 + 1e-3).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in lists])]).astype(np.int64)
    cols = np.concatenate(lists).astype(np.int32) if lists else np.zeros(0, np.int32)
    return a, w, scales, bias, lists, cols, offsets


GROUPS = [(6, 328), (1, 17), (4, 16), (3, 15), (2, 0), (7, 33), (1, 1), (5, 48), (2, 31)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("K", [64, 256, 301])
@pytest.mark.parametrize("act_scale", [None, 30.0])
def test_rows_sharing_a_list_match_the_reference(isa, K, act_scale):
    rng = np.random.default_rng(K)
    a, w, scales, bias, lists, cols, offsets = grouped_case(rng, K, 1000, GROUPS)
    W = _engine.Int8Matrix(w, scales, columns=True, isa=isa)
    got = _engine.gemm_i8_columns(a, W, cols, offsets, bias=bias, act_scale=act_scale)
    full = gemm_i8_reference(a, w, scales, bias, act_scale=act_scale)
    want = np.concatenate([full[m, lists[m]] for m in range(len(lists))])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ISAS)
def test_a_row_gives_the_same_bits_alone_as_in_its_group(isa):
    # What the engine promises for verification: a position's logits do not depend on
    # how many positions of its row share the call.
    rng = np.random.default_rng(7)
    a, w, scales, bias, lists, cols, offsets = grouped_case(rng, 256, 4000, GROUPS)
    W = _engine.Int8Matrix(w, scales, columns=True, isa=isa)
    together = _engine.gemm_i8_columns(a, W, cols, offsets, bias=bias)
    pool = _engine.ThreadPool(2)  # the split between threads may cut a group in two
    np.testing.assert_array_equal(_engine.gemm_i8_columns(a, W, cols, offsets, bias=bias, pool=pool), together)
    for m, row_cols in enumerate(lists):
        alone = _engine.gemm_i8_columns(a[m:m + 1], W, row_cols, np.array([0, len(row_cols)], np.int64),
                                        bias=bias)
        np.testing.assert_array_equal(alone, together[offsets[m]:offsets[m + 1]])


@pytest.mark.parametrize("isa", ISAS)
def test_equal_lengths_with_different_columns_are_not_grouped(isa):
    # Same length, one column differs: grouping must compare the lists, not the lengths.
    rng = np.random.default_rng(8)
    base = np.sort(rng.choice(500, size=40, replace=False)).astype(np.int32)
    other = base.copy()
    other[21] = max(c for c in range(500) if c not in set(base))  # first columns stay equal
    other.sort()
    assert other[0] == base[0] and not np.array_equal(other, base)
    lists = [base, base, other, base]
    a = rng.standard_normal((4, 96)).astype(np.float32)
    w = rng.integers(-127, 128, (500, 96)).astype(np.int8)
    scales = np.full(500, 0.01, np.float32)
    W = _engine.Int8Matrix(w, scales, columns=True, isa=isa)
    offsets = np.arange(5, dtype=np.int64) * 40
    got = _engine.gemm_i8_columns(a, W, np.concatenate(lists), offsets)
    full = gemm_i8_reference(a, w, scales)
    np.testing.assert_array_equal(got, np.concatenate([full[m, lists[m]] for m in range(4)]))
