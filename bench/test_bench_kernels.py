"""pytest-benchmark suite of the kernels, so regressions show in numbers:
    pytest bench/ --benchmark-only --benchmark-group-by=param:M,param:KN
(the printed table with GOP/s and ratios comes from `python -m bench.kernels`)."""
import numpy as np
import pytest

from bench.kernel_cases import ARGMAX_LENGTHS, GEMM_ENGINES, KN_VALUES, M_VALUES, make_inputs, \
    single_thread_everywhere

single_thread_everywhere()


@pytest.mark.parametrize("engine", list(GEMM_ENGINES))
@pytest.mark.parametrize("KN", KN_VALUES, ids=lambda kn: f"K{kn[0]}xN{kn[1]}")
@pytest.mark.parametrize("M", M_VALUES)
def test_gemm(benchmark, engine, KN, M):
    K, N = KN
    a, w = make_inputs(M, K, N)
    benchmark.extra_info["gops_per_call"] = 2 * M * K * N / 1e9
    benchmark(GEMM_ENGINES[engine](a, w))


@pytest.mark.parametrize("n", ARGMAX_LENGTHS)
@pytest.mark.parametrize("engine", ["fastdec", "numpy"])
def test_argmax(benchmark, engine, n):
    from pyfastdec import kernels

    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    benchmark(kernels.argmax if engine == "fastdec" else np.argmax, x)
