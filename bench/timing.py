"""Timing a decode function over batches of sentences, shared by bench.engine and bench.run.

One timed pass = every batch once, in input order, after one untimed warm-up batch
(first-call allocations, lazy initialisation). Percentiles are nearest-rank on the
sorted per-batch times, so p90 is a time that was actually measured.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of values (any order)."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def batches_of(items: Sequence, batch_size: int) -> list:
    return [items[i:i + batch_size] for i in range(0, len(items), batch_size)]


def timed_pass(run: Callable, batches: Sequence) -> tuple[list[float], list]:
    """(seconds per batch, what run returned per batch), without warm-up."""
    seconds, results = [], []
    for batch in batches:
        start = time.perf_counter()
        results.append(run(batch))
        seconds.append(time.perf_counter() - start)
    return seconds, results


def pass_figures(seconds: Sequence[float], sentences: int, batch_size: int) -> dict:
    """Throughput of one pass, plus ms/sentence p50/p90 at batch 1."""
    total = sum(seconds)
    out = {"seconds": total, "sentences_per_s": sentences / total if total else float("inf")}
    if batch_size == 1:
        ms = [1e3 * s for s in seconds]
        out.update(ms_p50=statistics.median(ms), ms_p90=percentile(ms, 0.9))
    return out
