"""export.choose_margin: its vectorised F0.5 equals export.gec_score's, and the chosen
margin is the smallest one the best does not beat in the paired bootstrap (synthetic
per-sentence counts)."""
from __future__ import annotations

import numpy as np

from export import gec_score
from export.choose_margin import CONFIDENCE, choose, f05, win_rates


def test_f05_matches_gec_score_counts():
    rng = np.random.default_rng(1)
    for _ in range(200):
        tp, fp, fn = (int(x) for x in rng.integers(0, 5, size=3))
        expected = gec_score.Counts(tp, fp, fn).scores()["f0.5"]
        assert abs(float(f05(np.array([tp, fp, fn]))) - expected) < 1e-12


def result(counts: dict) -> dict:
    return {m: {"f0.5": float(f05(c.sum(axis=0))), "precision": 0.0, "counts": c} for m, c in counts.items()}


def test_the_smallest_margin_within_the_noise_of_the_best_is_chosen():
    rng = np.random.default_rng(2)
    n = 1000
    base = np.stack([rng.integers(0, 2, n), rng.integers(0, 2, n), rng.integers(0, 3, n)], axis=1)
    better = base.copy()
    better[:300, 1] = 0  # 300 sentences lose their false positives: a clear gain
    noisy = base.copy()  # five sentences lose a false positive, four gain one: a gain inside the noise
    with_fp, without_fp = np.flatnonzero(base[:, 1] == 1), np.flatnonzero(base[:, 1] == 0)
    noisy[with_fp[:5], 1] = 0
    noisy[without_fp[:4], 1] = 1
    nearly = better.copy()  # the clear gain, give or take a little: three false positives back, two fewer
    nearly[with_fp[with_fp < 300][:3], 1] = 1
    nearly[with_fp[with_fp >= 300][:2], 1] = 0
    res = result({0.0: base, 1.0: better})
    assert win_rates(res, 1.0)[0.0] >= CONFIDENCE and choose(res) == 1.0  # 0 is significantly worse
    res = result({0.0: base, 0.5: noisy})
    assert res[0.5]["f0.5"] > res[0.0]["f0.5"]  # better by its point estimate ...
    assert win_rates(res, 0.5)[0.0] < CONFIDENCE and choose(res) == 0.0  # ... but not significantly
    res = result({0.0: base, 0.5: nearly, 1.0: better})
    assert res[1.0]["f0.5"] > res[0.5]["f0.5"] and choose(res) == 0.5  # within the noise of the best, smaller
