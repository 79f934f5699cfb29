"""pytest-benchmark of what verifying n positions costs against a greedy step (n = 1),
on the shipped int8 models, 1 thread (bench/verify_cost.py has the workload and the
interleaved ratio table):
    pytest bench/test_bench_verify.py --benchmark-only --benchmark-group-by=param:model,param:shortlist,param:rows

One timed call = NativeBackend.step of n new tokens per row (argmax) after PAST positions,
then truncate back, so every round sees the same state. Plain `pytest` runs each call
once, as a test (bench/conftest.py).
"""
from __future__ import annotations

import pytest

from bench.verify_cost import CONFIGS, ROOT, Case

MODELS = {label: path for label, path, _ in CONFIGS}
# Only the (model, shortlist) pairs that exist: uk-gec ships no shortlist.bin.
PAIRS = [(label, shortlist) for label, _, shortlist in CONFIGS]


@pytest.fixture(scope="module")
def cases():
    from bench.data import multi30k_test

    sources = multi30k_test(32).sources
    made = {}

    def get(model, shortlist, rows):
        key = (model, shortlist, rows)
        if key not in made:
            made[key] = Case(model, ROOT / MODELS[model], shortlist, rows, sources)
        return made[key]
    return get


@pytest.mark.parametrize("n", [1, 2, 4, 6, 8, 12, 16])
@pytest.mark.parametrize("rows", [1, 32])
@pytest.mark.parametrize("model, shortlist", PAIRS,
                         ids=[f"{m}-{'shortlist' if s else 'full-vocab'}" for m, s in PAIRS])
def test_verify_step(benchmark, cases, model, shortlist, rows, n):
    case = cases(model, shortlist, rows)
    benchmark.extra_info["positions_per_call"] = rows * n
    benchmark(case.call, n)
