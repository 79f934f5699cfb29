"""The parts of report.md that issue 11 asks for: the blockwise rows of the models with
proposal heads (tokens per iteration, the decoder loop's speed-up over greedy of the same
model beside the end-to-end one), the check of every lossless row against greedy, and
the issue's targets, each met or missed with its figures.

Targets (issue 11), judged on the heads models' shortlist rows when they have a
shortlist (the fastest setting), else on their full-vocabulary rows:
- tokens committed per iteration verifying all K proposals (blockwise-all; over the
  batch-32 workload, the whole test set): >= 2.0 with frozen heads, >= 3.0 for `joint`;
- decoder loop >= 2x greedy: the better of blockwise and blockwise-all, every workload;
- end to end at batch 1 >= 1.5x greedy (ms p50), and at batch 32 >= 1.1x greedy
  (sentences/s) and never below greedy: the default policy (what users get);
- best lossless batch-1 latency >= 4x CTranslate2 int8 greedy at its best setting, with
  BLEU >= CTranslate2's - 0.1; and the same against CTranslate2 with its vocabulary map.
"""
from __future__ import annotations

from bench.plan import LATENCY_BATCH, THROUGHPUT_BATCH
from bench.results import LOSSLESS, speed

TOKENS_TARGET = {"frozen": 2.0, "joint": 3.0}
DECODER_TARGET, E2E_B1_TARGET, E2E_B32_TARGET, CT2_TARGET, BLEU_SLACK = 2.0, 1.5, 1.1, 4.0, 0.1


def _f(x, fmt="{:.2f}"):
    return "" if x is None else fmt.format(x)


def _x(x):
    return _f(x, "{:.2f}x")


def heads_models(results: dict) -> dict[str, int]:
    """role -> K for the models run with proposal heads."""
    return {role: m["heads"] for role, m in results.get("models", {}).items() if m.get("heads")}


def _heads_rows(results: dict) -> list[dict]:
    models = heads_models(results)
    return [r for r in results["rows"] if r["system"] == "pyfastdec" and r["model"] in models]


def _order(r):
    order = ("greedy", "blockwise", "blockwise-all")
    return (r["model"], not r["shortlist"], r["batch_size"], r["threads"], order.index(r["strategy"]))


def blockwise_section(results: dict) -> list[str]:
    rows = _heads_rows(results)
    if not rows:
        return []
    k = heads_models(results)
    lines = ["## Blockwise with proposal heads (issue 11)", "",
             "Greedy, `blockwise` (the cost policy `Translator` runs: it verifies as many of the K proposals as "
             "pay, down to plain greedy steps) and `blockwise-all` (all K verified every iteration) on each model "
             "with heads, against greedy of the same directory. Tokens/iter: output tokens per row per decoder call "
             "(EOS included; 1 for greedy). Encoder: its share of greedy's time. Decoder loop: the strategy's call "
             "minus its encoder time, medians over the passes; 'x greedy' columns: times faster than greedy of the "
             "same model, shortlist and workload. '= greedy': token-identical to that greedy (shortlist rows "
             "against greedy with the shortlist).", "",
             "| model | K | shortlist | strategy | batch | threads | ms p50 / sent/s | tokens/iter | encoder | "
             "decoder loop s | x greedy decoder loop | x greedy end to end | BLEU | = greedy |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=_order):
        figure = _f(r["ms_p50"]) + " ms" if r["batch_size"] == LATENCY_BATCH else \
            _f(r["sentences_per_s"], "{:.1f}") + " sent/s"
        same = "reference" if r["strategy"] == "greedy" else \
            {True: "yes", False: "NO", None: "not checked"}[r.get("lossless_equal")]
        encoder = _f(None if r.get("encoder_share") is None else 100 * r["encoder_share"], "{:.0f}%") \
            if r["strategy"] == "greedy" else ""
        lines.append(f"| {r['model']} | {k[r['model']]} | {'yes' if r['shortlist'] else 'no'} | {r['strategy']} | "
                     f"{r['batch_size']} | {r['threads']} | {figure} | {_f(r.get('tokens_per_iteration'))} | "
                     f"{encoder} | {_f(r.get('decoder_s'), '{:.3f}')} | {_x(r.get('decoder_vs_greedy'))} | "
                     f"{_x(r.get('vs_greedy'))} | {_f(r.get('bleu'))} | {same} |")
    return lines + [""]


def lossless_section(rows: list[dict]) -> list[str]:
    checked = [r for r in rows if r.get("lossless_equal") is not None]
    unchecked = [r for r in rows if r["system"] == "pyfastdec" and r["strategy"] in LOSSLESS
                 and r["strategy"] != "greedy" and r.get("lossless_equal") is None]
    if not checked and not unchecked:
        return []
    wrong = [r for r in checked if not r["lossless_equal"]]
    lines = ["## Lossless check", "",
             f"Outputs of every lossless drafting row ({', '.join(s for s in LOSSLESS if s != 'greedy')}) compared "
             "token for token with pyfastdec greedy of the same model, precision and shortlist on the same "
             f"sentences in this run: {len(checked) - len(wrong)} of {len(checked)} rows identical."]
    lines += [f"- DIFFERENT: {r['job']} {r['workload']} (reference {r['lossless_reference']})" for r in wrong]
    lines += [f"- not checked (no greedy of the same model, precision and shortlist ran): {r['job']} {r['workload']}"
              for r in unchecked]
    return lines + [""]


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _headline(rows: list[dict], model: str) -> list[dict]:
    mine = [r for r in rows if r["model"] == model]
    shortlist = any(r["shortlist"] for r in mine)
    return [r for r in mine if r["shortlist"] == shortlist]


def _wid(r):
    return f"b{r['batch_size']}-t{r['threads']}"


def _model_targets(rows: list[dict], model: str, k: int) -> list[str]:
    mine = _headline(rows, model)
    if not mine:
        return []
    setting = f"{model} (K={k}{', shortlist' if mine[0]['shortlist'] else ''})"
    kind = "joint" if model == "joint" else "frozen"
    lines = []
    every = [r for r in mine if r["strategy"] == "blockwise-all" and r.get("tokens_per_iteration") is not None]
    default = [r for r in mine if r["strategy"] == "blockwise"]
    if every:
        ref = min(every, key=lambda r: (r["batch_size"] != THROUGHPUT_BATCH, -r["sentences"], r["threads"]))
        dflt = next((r for r in default if r["workload"] == ref["workload"]), None)
        target = TOKENS_TARGET[kind]
        lines.append(f"- Tokens per iteration, {setting}: {ref['tokens_per_iteration']:.2f} verifying all K "
                     f"(batch {ref['batch_size']}, {ref['sentences']} sentences"
                     + (f"; the default policy commits {dflt['tokens_per_iteration']:.2f}" if dflt and
                        dflt.get("tokens_per_iteration") is not None else "")
                     + f"); target >= {target:g} ({kind} heads): {_met(ref['tokens_per_iteration'] >= target)}.")
    best = {}
    for r in mine:
        if r["strategy"].startswith("blockwise") and r.get("decoder_vs_greedy") is not None:
            if r["workload"] not in best or r["decoder_vs_greedy"] > best[r["workload"]]["decoder_vs_greedy"]:
                best[r["workload"]] = r
    if best:
        figures = ", ".join(f"{_wid(r)} {r['decoder_vs_greedy']:.2f}x ({r['strategy']})"
                            for r in sorted(best.values(), key=lambda r: (r["batch_size"], r["threads"])))
        ok = min(r["decoder_vs_greedy"] for r in best.values()) >= DECODER_TARGET
        lines.append(f"- Decoder loop vs greedy, {setting}, the better blockwise row per workload: {figures}; "
                     f"target >= {DECODER_TARGET:g}x: {_met(ok)}.")
    for batch, target in ((LATENCY_BATCH, E2E_B1_TARGET), (THROUGHPUT_BATCH, E2E_B32_TARGET)):
        part = sorted((r for r in default if r["batch_size"] == batch and r.get("vs_greedy") is not None),
                      key=lambda r: r["threads"])
        if not part:
            continue
        alls = {r["workload"]: r for r in mine if r["strategy"] == "blockwise-all"}
        figures = ", ".join(f"{_wid(r)} {r['vs_greedy']:.2f}x" + (f" (all K: {alls[r['workload']]['vs_greedy']:.2f}x)"
                                                                  if r["workload"] in alls else "") for r in part)
        what = "ms p50" if batch == LATENCY_BATCH else "sentences/s"
        lines.append(f"- End to end at batch {batch} ({what}, encoder included), {setting}, default policy: "
                     f"{figures}; target >= {target:g}x: {_met(min(r['vs_greedy'] for r in part) >= target)}.")
    measured = [r for r in rows if r["model"] == model and r["strategy"] == "blockwise" and r.get("vs_greedy")]
    if measured:
        worst = min(measured, key=lambda r: r["vs_greedy"])
        lines.append(f"- Never below greedy, {model}, every default-policy row ({len(measured)}, with and without "
                     f"shortlist): worst {worst['vs_greedy']:.2f}x ({_wid(worst)}"
                     f"{', shortlist' if worst['shortlist'] else ''}): {_met(worst['vs_greedy'] >= 1.0)}.")
    return lines


def _ct2_targets(rows: list[dict]) -> list[str]:
    lines = []
    for wid in sorted({r["workload"] for r in rows if r["dataset"] == "multi30k" and r["batch_size"] == LATENCY_BATCH}):
        ours = [r for r in rows if r["workload"] == wid and r["system"] == "pyfastdec" and r["strategy"] in LOSSLESS
                and r.get("lossless_equal") is not False]
        for vmap in (False, True):
            peer = next((r for r in rows if r["workload"] == wid and r["system"] == "ct2" and r["precision"] == "int8"
                         and r["strategy"] == "greedy" and r["shortlist"] == vmap), None)
            name = "CTranslate2 int8 greedy" + (" with vmap" if vmap else "")
            if peer is None or not ours:
                lines.append(f"- {wid} vs {name}: not measured")
                continue
            good = [r for r in ours if r["bleu"] >= peer["bleu"] - BLEU_SLACK]
            if not good:
                lines.append(f"- {wid} vs {name} ({peer['setting']}, {peer['ms_p50']:.2f} ms, BLEU {peer['bleu']:.2f}): "
                             f"no lossless pyfastdec row within {BLEU_SLACK} BLEU: MISSED.")
                continue
            best = max(good, key=speed)
            ratio = speed(best) / speed(peer)
            lines.append(f"- {wid}: best lossless {best['system']} {best['model']} {best['precision']} "
                         f"{best['strategy']}{' +shortlist' if best['shortlist'] else ''} {best['ms_p50']:.2f} ms p50 "
                         f"(BLEU {best['bleu']:.2f}) is {ratio:.2f}x {name} ({peer['setting']}, "
                         f"{peer['ms_p50']:.2f} ms, BLEU {peer['bleu']:.2f}); target >= {CT2_TARGET:g}x with BLEU >= "
                         f"{peer['bleu'] - BLEU_SLACK:.2f}: {_met(ratio >= CT2_TARGET)}.")
    return lines


def targets_issue11(results: dict) -> list[str]:
    rows = results["rows"]
    models = heads_models(results)
    lines = []
    for model, k in models.items():
        lines += _model_targets([r for r in rows if r["system"] == "pyfastdec"], model, k)
    if not models:
        lines.append("- Tokens per iteration, decoder loop, end to end: no model with proposal heads ran "
                     "(see Not run).")
    if not any(r["model"] == "joint" for r in rows):
        lines.append("- Jointly trained heads (target >= 3.0 tokens per iteration): not measured (no --joint model).")
    lines += _ct2_targets(rows)
    return ["## Targets (issue 11)", "", "One run, same weights, Multi30k test_2016_flickr "
            "(bench/blockwise_report.py says how each is judged).", ""] + lines + [""]
