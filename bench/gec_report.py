"""The part of report.md that issue 16 asks for: IAD on the correction model against
greedy of the same model and CTranslate2 int8 greedy on its weights, at batch 1 and 32,
with iterations per sentence and tokens per iteration, and the issue's speed targets.

Targets (issue 16), judged on the uk-gec int8 rows (with the shortlist when the model
has one: what Corrector runs), per thread count:
- batch 1: IAD >= 3x greedy of the same model (ms p50) and >= 6x CTranslate2 int8
  greedy on the same weights (its best probed setting);
- batch 32: IAD >= 1.5x greedy's sentences/s;
- IAD's outputs token-identical to greedy's at batch 1 and 32 (the lossless check).
"""
from __future__ import annotations

from bench.plan import LATENCY_BATCH, THROUGHPUT_BATCH

MODEL = "uk-gec"
VS_GREEDY = {LATENCY_BATCH: 3.0, THROUGHPUT_BATCH: 1.5}
VS_CT2_B1 = 6.0


def _f(x, fmt="{:.2f}"):
    return "" if x is None else fmt.format(x)


def _x(x):
    return _f(x, "{:.2f}x")


def _gec_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["model"] == MODEL and r["dataset"] == "uagec"]


def _order(r):
    return (r["precision"] != "int8", r["shortlist"], r["batch_size"], r["threads"], r["system"] != "pyfastdec",
            r["strategy"] != "greedy")


def gec_section(rows: list[dict]) -> list[str]:
    mine = _gec_rows(rows)
    if not mine:
        return []
    lines = ["## Correction with IAD (issue 16)", "",
             "IAD and greedy on the correction model, and CTranslate2 int8 greedy on the same weights (converted "
             "with pyfastdec.convert, at its best probed setting). Iter/sent: verifier calls each sentence takes "
             "part in (greedy: output tokens + 1). Calls: batched verifier steps over the pass (at batch 32 one "
             "call serves every live row). Tokens/iter: output tokens per row per call, EOS included. Kept: share "
             "of drafted tokens the verifier accepted. Encoder: share of the call's time. Decoder loop: the call "
             "minus its encoder time, against greedy's. '= greedy': IAD's outputs token-identical to greedy of "
             "the same model, precision and shortlist.", "",
             "| system | precision | strategy | shortlist | batch | threads | ms p50 / sent/s | x greedy | "
             "x CT2 int8 greedy | iter/sent | calls | tokens/iter | kept | encoder | x greedy decoder loop | "
             "= greedy |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(mine, key=_order):
        figure = _f(r["ms_p50"]) + " ms" if r["batch_size"] == LATENCY_BATCH else \
            _f(r["sentences_per_s"], "{:.1f}") + " sent/s"
        ours = r["system"] == "pyfastdec"
        same = "" if not ours else "reference" if r["strategy"] == "greedy" else \
            {True: "yes", False: "NO", None: "not checked"}[r.get("lossless_equal")]
        drafts = ours and r["strategy"] != "greedy"
        share = r.get("encoder_share")
        lines.append(
            f"| {r['system']} | {r['precision']} | {r['strategy']} | {'yes' if r['shortlist'] else 'no'} | "
            f"{r['batch_size']} | {r['threads']} | {figure} | {_x(r.get('vs_greedy'))} | "
            f"{_x(r.get('vs_ct2_int8_greedy'))} | {_f(r.get('iterations_per_sentence'), '{:.1f}')} | "
            f"{_f(r.get('verifier_calls'), '{:.0f}')} | {_f(r.get('tokens_per_iteration'))} | "
            f"{_f(100 * r['accepted_share'], '{:.0f}%') if drafts and r.get('accepted_share') is not None else ''} | "
            f"{_f(None if share is None else 100 * share, '{:.0f}%')} | "
            f"{_x(r.get('decoder_vs_greedy')) if drafts else ''} | {same} |")
    return lines + [""]


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def targets_issue16(rows: list[dict]) -> list[str]:
    mine = [r for r in _gec_rows(rows) if r["precision"] == "int8"]
    ours = [r for r in mine if r["system"] == "pyfastdec"]
    if not ours:
        return []
    shortlist = any(r["shortlist"] for r in ours)
    lines = ["## Targets (issue 16)", ""]
    for batch, target in VS_GREEDY.items():
        for threads in sorted({r["threads"] for r in ours if r["batch_size"] == batch}):
            iad = next((r for r in ours if r["strategy"] == "iad" and r["shortlist"] == shortlist
                        and r["batch_size"] == batch and r["threads"] == threads), None)
            wid = f"uagec-b{batch}-t{threads}"
            if iad is None or iad.get("vs_greedy") is None:
                lines.append(f"- {wid}: IAD or greedy of {MODEL} int8 not measured")
                continue
            what = "ms p50" if batch == LATENCY_BATCH else "sentences/s"
            lines.append(f"- {wid}: IAD is {iad['vs_greedy']:.2f}x greedy ({what}); target {target:g}x: "
                         f"{_met(iad['vs_greedy'] >= target)}.")
            if batch == LATENCY_BATCH:
                ct2 = iad.get("vs_ct2_int8_greedy")
                lines.append(f"- {wid}: IAD is " + (f"{ct2:.2f}x CTranslate2 int8 greedy on the same weights; target "
                                                    f"{VS_CT2_B1:g}x: {_met(ct2 >= VS_CT2_B1)}." if ct2 is not None
                                                    else "not compared: CTranslate2 int8 greedy did not run."))
            equal = iad.get("lossless_equal")
            lines.append(f"- {wid}: IAD outputs identical to greedy: "
                         + {True: "yes", False: "NO", None: "not checked"}[equal] + ".")
    return lines + [""]
