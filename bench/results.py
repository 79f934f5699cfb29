"""From measuring processes' results to report rows: medians and noise over repeats,
quality (BLEU, chrF), the share of outputs identical to pyfastdec greedy, the check that
every lossless row equals greedy of the same model, speed ratios end to end and of the
decoder loop alone (encoder excluded), and tokens committed per iteration. Every figure is computed from what bench/child.py measured; a ratio whose
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
                   "decode_stats": w["decode_stats"], "decode_stats_passes": w.get("decode_stats_passes", []),
                   "load_s": result["load_s"],
                   "peak_rss_mb": result["peak_rss_mb"], "engine": dict(result["info"], **(ct2_log or {})),
                   "_outputs": w["outputs"], **job.fields}
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


# Equal to greedy by construction (bild: BiLD with rollback 0, = greedy of the big model).
LOSSLESS = ("greedy", "gad", "gad-shared", "iad", "blockwise", "blockwise-all", "bild")


def add_lossless_check(rows: list[dict]) -> None:
    """Every pyfastdec row of a lossless drafting strategy against pyfastdec greedy of the
    same model, precision and shortlist on the same sentences in this run (any thread
    count and batch size: pyfastdec's output depends on neither): `lossless_equal` True
    when every output is token-identical, False otherwise, None when no such greedy ran;
    `lossless_reference` names it. (`identical_to_greedy` compares with greedy without
    shortlist, which a shortlist row need not equal.)"""
    for r in rows:
        r["lossless_equal"] = r["lossless_reference"] = None
        if r["system"] != "pyfastdec" or r["strategy"] not in LOSSLESS or r["strategy"] == "greedy":
            continue
        refs = [c for c in rows if c["system"] == "pyfastdec" and c["strategy"] == "greedy"
                and c["model"] == r["model"] and c["precision"] == r["precision"]
                and c["shortlist"] == r["shortlist"] and c["dataset"] == r["dataset"]
                and c["sentences"] == r["sentences"]]
        if refs:
            ref = min(refs, key=lambda c: (c["batch_size"] != r["batch_size"], c["threads"]))
            r["lossless_equal"] = r["_outputs"] == ref["_outputs"]
            r["lossless_reference"] = f"{ref['job']} {ref['workload']}"


def _stat_median(r: dict, figure) -> float | None:
    passes = [p for p in r.get("decode_stats_passes") or [] if p.get("total_s")]
    return statistics.median(figure(p) for p in passes) if passes else None


def add_decoder_loop(rows: list[dict]) -> None:
    """For rows whose strategy reports its statistics (pyfastdec, onnx, torch): per pass,
    the encoder's seconds and the decoder loop's (the rest of the call: steps, drafting,
    the loop's Python), medians over the passes; `tokens_per_iteration` (output tokens
    per row per verifier call, EOS included: 1 for greedy); and `decoder_vs_greedy`, how
    many times faster the decoder loop is than greedy's of the same system, model,
    precision and shortlist on the same workload (the end-to-end ratio is `vs_greedy`).
    Also `iterations_per_sentence` (verifier calls each sentence takes part in: row_steps
    over sentences; greedy's is its output length + 1), `verifier_calls` (calls of the
    batched step over the pass, iterations), `accepted_share` (drafted tokens kept),
    `accepted_per_iteration` (drafted tokens kept per row per verifier call) and
    `drafter_s` (the draft model's seconds: drafting, and attaching to the verifier's
    memory for a shared-encoder model; a drafter's own encoder counts as encoder)."""
    for r in rows:
        r["encoder_s"] = _stat_median(r, lambda p: p["encoder_s"])
        r["drafter_s"] = _stat_median(r, lambda p: p.get("drafter_s", 0.0))
        r["accepted_per_iteration"] = _stat_median(r, lambda p: p["accepted"] / p["row_steps"]
                                                   if p.get("row_steps") else 0.0)
        r["decoder_s"] = _stat_median(r, lambda p: p["total_s"] - p["encoder_s"])
        r["tokens_per_iteration"] = _stat_median(r, lambda p: p["generated"] / p["row_steps"]
                                                 if p.get("row_steps") else 0.0)
        r["iterations_per_sentence"] = _stat_median(r, lambda p: p["row_steps"] / p["sentences"]
                                                    if p.get("sentences") else 0.0)
        r["verifier_calls"] = _stat_median(r, lambda p: p["iterations"])
        r["accepted_share"] = _stat_median(r, lambda p: p["accepted"] / p["drafted"] if p.get("drafted") else 0.0)
        r["encoder_share"] = _stat_median(r, lambda p: p["encoder_s"] / p["total_s"])
    for r in rows:
        greedy = _greedy_of(rows, r)
        r["decoder_vs_greedy"] = greedy["decoder_s"] / r["decoder_s"] \
            if greedy and greedy["decoder_s"] and r["decoder_s"] else None


def _greedy_of(rows: list[dict], r: dict) -> dict | None:
    """Greedy of r's system, model, precision and shortlist on r's workload: at r's own
    setting when one ran (an inter_threads row against greedy with inter_threads), else
    the first."""
    same = dict(system=r["system"], model=r["model"], precision=r["precision"], shortlist=r["shortlist"],
                strategy="greedy", workload=r["workload"])
    return _find(rows, **same, setting=r["setting"]) or _find(rows, **same)


def speed(r: dict) -> float:
    """Higher is faster: 1 / ms p50 at batch 1, sentences/s otherwise."""
    return 1.0 / r["ms_p50"] if r["batch_size"] == LATENCY_BATCH else r["sentences_per_s"]


CT2_STUDENT_MODEL = "en-de-attn"  # the weights CTranslate2 runs for the translation students


def add_ratios(rows: list[dict]) -> None:
    """vs_ct2: how many times faster than CTranslate2 int8 greedy (its best setting) on
    the same workload, on the same model's weights where CTranslate2 ran them (BiLD's big
    model, uk-gec), else on en-de-attn's (the SSRU student and the heads models, which it
    cannot run; vs_ct2_model names the one); vs_greedy: than greedy of the same system,
    model, precision and shortlist on the same workload (the speed-up of a strategy)."""
    for r in rows:
        ct2_of = dict(system="ct2", precision="int8", strategy="greedy", shortlist=False, workload=r["workload"])
        ct2 = _find(rows, **ct2_of, model=r["model"]) or _find(rows, **ct2_of, model=CT2_STUDENT_MODEL)
        r["vs_ct2_int8_greedy"] = speed(r) / speed(ct2) if ct2 else None
        r["vs_ct2_model"] = ct2["model"] if ct2 else None
        greedy = _greedy_of(rows, r)
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
