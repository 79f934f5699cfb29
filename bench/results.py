"""From measuring processes' results to report rows: medians and noise over repeats,
quality (BLEU, chrF), the share of outputs identical to pyfastdec greedy, and speed
ratios. Every figure is computed from what bench/child.py measured; a ratio whose
reference row did not run stays None.
"""
from __future__ import annotations

import statistics

from bench.plan import LATENCY_BATCH
from bench.quality import bleu_chrf, identical_share


def summarise(passes: list[dict], batch_size: int) -> dict:
    """Median over the timed passes, and min / max as the machine's noise."""
    sps = [p["sentences_per_s"] for p in passes]
    out = {"sentences_per_s": statistics.median(sps), "sentences_per_s_min": min(sps),
           "sentences_per_s_max": max(sps)}
    if batch_size == LATENCY_BATCH:
        p50 = [p["ms_p50"] for p in passes]
        out.update(ms_p50=statistics.median(p50), ms_p50_min=min(p50), ms_p50_max=max(p50),
                   ms_p90=statistics.median(p["ms_p90"] for p in passes))
    return out


def job_rows(job, result: dict, ct2_log: dict | None = None) -> list[dict]:
    """One row per workload id the job serves; outputs kept under '_outputs' (not saved
    in results.json)."""
    rows = []
    for name, ids in job.serves.items():
        w = result["workloads"][name]
        for wid in ids:
            dataset, batch, threads = wid.rsplit("-b", 1)[0], w["batch_size"], int(wid.rsplit("-t", 1)[1])
            setting = job.setting
            if ct2_log and ct2_log.get("selected_isa"):  # what CTranslate2 said it used
                setting += f" ({ct2_log['selected_isa']})"
            row = {"system": job.system, "model": job.model, "precision": job.precision,
                   "strategy": job.strategy, "shortlist": job.shortlist, "setting": setting,
                   "workload": wid, "dataset": dataset, "batch_size": batch, "threads": threads,
                   "job": job.id, "sentences": w["sentences"], "repeats": w["repeats"],
                   **summarise(w["repeats"], batch),
                   "output_tokens": w["output_tokens"], "reproducible": w["reproducible"],
                   "decode_stats": w["decode_stats"], "load_s": result["load_s"],
                   "peak_rss_mb": result["peak_rss_mb"], "engine": dict(result["info"], **(ct2_log or {})),
                   "_outputs": w["outputs"]}
            row["target_tokens_per_s"] = row["output_tokens"] * row["sentences_per_s"] / row["sentences"]
            if "sentence_ms" in w:
                row["sentence_ms"] = w["sentence_ms"]
            rows.append(row)
    return rows


def _find(rows, **want):
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            return r
    return None


def add_quality(rows: list[dict], references: dict[str, list[str]], detokenize) -> None:
    """BLEU / chrF of every row against its dataset's references (the first `sentences`
    of them). detokenize(model, outputs) -> strings. Identical outputs are scored once."""
    cache = {}
    for r in rows:
        key = (r["model"], r["dataset"], tuple(map(tuple, r["_outputs"])))
        if key not in cache:
            hyps = detokenize(r["model"], r["_outputs"])
            cache[key] = bleu_chrf(hyps, references[r["dataset"]][:len(hyps)])
        r.update(cache[key])


def greedy_reference(rows: list[dict], r: dict) -> dict | None:
    """pyfastdec greedy on the same model and precision, full vocabulary, same dataset and
    batch size, at the fewest threads measured (pyfastdec's output does not depend on the
    thread count or the batch, so any would do). The peers run en-de-attn."""
    candidates = [c for c in rows if c["system"] == "pyfastdec" and c["strategy"] == "greedy"
                  and not c["shortlist"] and c["model"] == r["model"] and c["precision"] == r["precision"]
                  and c["dataset"] == r["dataset"] and c["batch_size"] == r["batch_size"]
                  and c["sentences"] == r["sentences"]]
    return min(candidates, key=lambda c: c["threads"], default=None)


def add_identical(rows: list[dict]) -> None:
    for r in rows:
        ref = greedy_reference(rows, r)
        r["identical_to_greedy"] = None if ref is None else identical_share(r["_outputs"], ref["_outputs"])
        r["identical_reference"] = None if ref is None else ref["job"]


def speed(r: dict) -> float:
    """Higher is faster: 1 / ms p50 at batch 1, sentences/s otherwise."""
    return 1.0 / r["ms_p50"] if r["batch_size"] == LATENCY_BATCH else r["sentences_per_s"]


def add_ratios(rows: list[dict]) -> None:
    """vs_ct2: how many times faster than CTranslate2 int8 greedy (its best setting) on
    the same workload; vs_greedy: than greedy of the same system, model, precision and
    shortlist on the same workload (the speed-up of a strategy)."""
    for r in rows:
        ct2 = _find(rows, system="ct2", precision="int8", strategy="greedy", workload=r["workload"])
        r["vs_ct2_int8_greedy"] = speed(r) / speed(ct2) if ct2 else None
        greedy = _find(rows, system=r["system"], model=r["model"], precision=r["precision"],
                       shortlist=r["shortlist"], strategy="greedy", workload=r["workload"])
        r["vs_greedy"] = speed(r) / speed(greedy) if greedy else None


def noise(rows: list[dict]) -> dict:
    """Spread of the repeats: (max - min) / median of each row's main figure."""
    spreads = []
    for r in rows:
        if len(r["repeats"]) < 2:
            continue
        if r["batch_size"] == LATENCY_BATCH:
            spreads.append((r["ms_p50_max"] - r["ms_p50_min"]) / r["ms_p50"])
        else:
            spreads.append((r["sentences_per_s_max"] - r["sentences_per_s_min"]) / r["sentences_per_s"])
    if not spreads:
        return {"rows": 0}
    return {"rows": len(spreads), "median_spread": statistics.median(spreads), "max_spread": max(spreads)}
