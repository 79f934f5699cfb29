"""The AMX int8 GEMM (csrc/kernels/amx_gemm.h) against the numpy model of the kernel, bit
for bit, at the shapes where a tile kernel goes wrong: every row count from 1 to 17 and
past the 32-row pass, K and N that fill no whole tile, K a multiple of the 64-byte step.

Three tables run the same code: "amx-emulated" (the tile instructions emulated, any CPU,
so these tests run everywhere), "amx" (the instructions; VNNI's kernel below
amx_min_rows rows) and "amx-tiles" (the instructions at every row count). The last two
need a CPU with AMX-INT8 and the OS's permission, and skip elsewhere with the reason.
The generic int8 tests (test_gemm_i8*.py, test_shortlist_union.py) run these tables too.
"""
import numpy as np
import pytest

import pyfastdec
from pyfastdec import _engine
from kernel_reference import AMX_EMULATED, gemm_i8_reference

DETECTED = pyfastdec.cpu_info()["detected"]
NO_AMX = (f"this CPU has no AMX-INT8 usable by this process (detected: {DETECTED}; "
          "features: " + ", ".join(f"{k}={v}" for k, v in pyfastdec.cpu_info()["features"].items()
                                   if k.startswith(("amx", "os_amx"))) + ")")
AMX_TABLES = [AMX_EMULATED] + [pytest.param(isa, marks=pytest.mark.skipif(DETECTED != "amx", reason=NO_AMX))
                               for isa in ("amx", "amx-tiles")]
ODD_KN = [(1, 1), (3, 15), (63, 17), (65, 33), (127, 1), (200, 47)]  # K, N: partial tiles both ways


def random_case(rng, M, K, N):
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.integers(-127, 128, (N, K)).astype(np.int8)
    scales = (rng.random(N) * 0.02 + 1e-3).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    return a, w, scales, bias


def check(isa, M, K, N, seed, relu=False):
    a, w, scales, bias = random_case(np.random.default_rng(seed), M, K, N)
    W = _engine.Int8Matrix(w, scales, isa=isa)
    assert W.isa == isa
    got = _engine.gemm_i8(a, W, bias=bias, relu=relu)
    np.testing.assert_array_equal(got, gemm_i8_reference(a, w, scales, bias, relu=relu),
                                  err_msg=f"{isa} M={M} K={K} N={N}")


@pytest.mark.parametrize("isa", AMX_TABLES)
@pytest.mark.parametrize("M", list(range(1, 18)) + [31, 32, 33, 47])
def test_every_row_count_with_odd_k_and_n(isa, M):
    for K, N in ODD_KN:
        check(isa, M, K, N, seed=M * 1000 + K + N, relu=M % 2 == 1)


@pytest.mark.parametrize("isa", AMX_TABLES)
@pytest.mark.parametrize("M,K,N", [(1, 512, 2048), (16, 256, 768), (64, 512, 512), (100, 1024, 256),
                                   (5, 64, 16), (33, 128, 32)])
def test_model_shapes_and_whole_tiles(isa, M, K, N):
    """The shipped models' layer shapes, and shapes made of whole tiles only (K a
    multiple of 64, N of 16), where no padding hides an off-by-one step."""
    check(isa, M, K, N, seed=M + K + N)


@pytest.mark.parametrize("isa", AMX_TABLES)
def test_random_shapes(isa):
    rng = np.random.default_rng(11)
    for case in range(12):
        M, K, N = int(rng.integers(1, 70)), int(rng.integers(1, 400)), int(rng.integers(1, 120))
        check(isa, M, K, N, seed=case)


@pytest.mark.parametrize("isa", AMX_TABLES)
def test_largest_sums_do_not_saturate(isa):
    """The shifted activations (up to 254) times -127 over K = 2048: sums near 2^26, the
    shift correction taken off in int32, exact."""
    w = np.full((17, 2048), -127, np.int8)
    w[::2] = 127
    a = np.full((3, 2048), 3.0, np.float32)
    a[1] = -3.0
    W = _engine.Int8Matrix(w, np.ones(17, np.float32), isa=isa)
    np.testing.assert_array_equal(_engine.gemm_i8(a, W), gemm_i8_reference(a, w, np.ones(17, np.float32)))


@pytest.mark.parametrize("isa", AMX_TABLES)
def test_threads_split_rows_and_columns_alike(isa):
    """The pool splits rows (few blocks) or blocks (many): each thread configures its own
    tiles, and the result is the scalar reference's (which one thread's is too)."""
    pool = _engine.ThreadPool(2)
    for M, K, N in [(40, 96, 20), (3, 70, 300)]:
        a, w, scales, bias = random_case(np.random.default_rng(M), M, K, N)
        W = _engine.Int8Matrix(w, scales, isa=isa)
        np.testing.assert_array_equal(_engine.gemm_i8(a, W, bias=bias, pool=pool), gemm_i8_reference(a, w, scales, bias))


def test_amx_tables_are_named_and_refused_where_they_cannot_run():
    w, s = np.ones((4, 8), np.int8), np.ones(4, np.float32)
    assert _engine.Int8Matrix(w, s, isa=AMX_EMULATED).isa == AMX_EMULATED
    if DETECTED == "amx":
        if pyfastdec.cpu_info()["isa"] == "amx":  # not lowered by FASTDEC_ISA
            assert pyfastdec.cpu_info()["kernels"]["int8_gemm"].startswith("amx (tiles from ")
        assert _engine.Int8Matrix(w, s, isa="amx-tiles").isa == "amx-tiles"
        return
    for isa in ("amx", "amx-tiles"):
        with pytest.raises(ValueError, match=rf"ISA 'amx' is not supported by this CPU \(highest: {DETECTED}\)"):
            _engine.Int8Matrix(w, s, isa=isa)
