"""The parts of report.md that issue 15 asks for: models without an encoder of their own,
which read another model's encoder output.

- GAD with a shared-encoder drafter (`gad-shared`) beside GAD with the drafter that
  encodes the sources again (`gad`) and greedy of the same verifier: batch-1 latency,
  batch-32 throughput, the ratio to greedy, encoder and drafter milliseconds per
  sentence (the shared drafter's encoder time is the verifier's alone), tokens per
  iteration, drafted tokens accepted per iteration, and the check against greedy.
- BiLD: greedy of the big model, lossless BiLD (rollback 0) and the little model's lossy
  default at batch 1 and 32; the (fallback, rollback) sweep at batch 1 with BLEU, the
  speed ratio to big greedy, the points within BLEU_WITHIN of big greedy's BLEU, and the
  Pareto front of BLEU against batch-1 ms p50 (big greedy included: a point it dominates
  is not on the front). bild_pareto.png draws the same (bench/plots.py).
"""
from __future__ import annotations

from bench.plan import LATENCY_BATCH
from bench.plots import pareto_front
from bench.quality import identical_share
from bench.results import speed

BLEU_WITHIN = 0.3  # a sweep point "keeps quality" within this much BLEU of big greedy
BILD_STRATEGIES = ("bild", "bild-lossy")
GAD_ORDER = ("greedy", "gad", "gad-shared")


def _f(x, fmt="{:.2f}"):
    return "" if x is None else fmt.format(x)


def _x(x):
    return _f(x, "{:.2f}x")


def _per_sentence_ms(r: dict, seconds: str) -> float | None:
    return None if r.get(seconds) is None else 1e3 * r[seconds] / r["sentences"]


def _mean_ms(r: dict) -> float:
    return 1e3 / r["sentences_per_s"]


def _share(r: dict) -> str:
    share = r.get("identical_to_big_greedy")
    return "" if share is None else f"{100 * share:.1f}%"


def _check(r: dict) -> str:
    if r["strategy"] == "greedy":
        return "reference"
    return {True: "yes", False: "NO", None: "not checked"}[r.get("lossless_equal")]


def _policy_words(results: dict, strategy: str) -> str:
    if not results.get("plan", {}).get("draft_policy", True):
        return ("Drafting every iteration (--no-draft-policy): the raw drafting figures, not what Translator "
                "runs.")
    if strategy == "gad":
        return ("Both drafters run under the draft-length policy Translator uses (one per measured "
                "configuration): it verifies no draft, and skips the drafter, where drafting does not pay.")
    return ("One draft-or-plain policy per measured configuration, as Translator keeps one: it runs plain "
            "big-model steps where drafting does not pay, so a point may draft rarely.")


# ----------------------------------------------------------------------------- GAD
def gad_shared_section(results: dict) -> list[str]:
    rows = [r for r in results["rows"] if r["system"] == "pyfastdec"]
    shared = [r for r in rows if r["strategy"] == "gad-shared"]
    if not shared:
        return []
    drafters = results.get("drafters", {})
    lines = ["## GAD with a shared-encoder drafter (issue 15)", "",
             f"GAD with a drafter that reads the verifier's encoder output (`gad-shared`: "
             f"{drafters.get('gad-shared', shared[0].get('drafter'))}) beside GAD with the drafter that encodes the "
             f"sources itself (`gad`: {drafters.get('gad', '--drafter')}) and greedy of the same verifier, precision "
             f"and shortlist, in one run; {_policy_words(results, 'gad')} "
             "ms/sent: the pass's mean per sentence (its p50 beside it). Encoder ms/sent: encoder time per "
             "sentence (the separate drafter's own encoding counts here; the shared drafter has no encoder, and "
             "attaching it to the verifier's memory counts as drafter time); 'x greedy's': that over greedy's. "
             "Tokens/iter: output tokens per row per verifier call (EOS included; 1 for greedy); accepted/iter: "
             "drafted tokens kept per row per verifier call. '= greedy': outputs token-identical to greedy "
             "(the lossless check).", "",
             "| model | precision | shortlist | strategy | drafter | threads | batch | ms p50 | ms/sent | sent/s | "
             "x greedy | encoder ms/sent | x greedy's encoder | drafter ms/sent | tokens/iter | accepted/iter | "
             "= greedy |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    summary = []
    for s in sorted(shared, key=lambda r: (r["model"], r["threads"], r["batch_size"])):
        same = {k: s[k] for k in ("model", "precision", "shortlist", "workload")}
        group = {r["strategy"]: r for r in rows if r["strategy"] in GAD_ORDER
                 and all(r[k] == v for k, v in same.items())}
        greedy = group.get("greedy")
        greedy_encoder = _per_sentence_ms(greedy, "encoder_s") if greedy else None
        for name in GAD_ORDER:
            r = group.get(name)
            if r is None:
                continue
            encoder = _per_sentence_ms(r, "encoder_s")
            drafter = {"greedy": "", "gad": "own encoder", "gad-shared": "verifier's encoder"}[name]
            lines.append(
                f"| {r['model']} | {r['precision']} | {'yes' if r['shortlist'] else 'no'} | {name} | {drafter} | "
                f"{r['threads']} | {r['batch_size']} | {_f(r.get('ms_p50'))} | {_mean_ms(r):.2f} | "
                f"{r['sentences_per_s']:.1f} | {_x(r.get('vs_greedy'))} | {_f(encoder, '{:.3f}')} | "
                f"{_x(encoder / greedy_encoder if encoder is not None and greedy_encoder else None)} | "
                f"{_f(_per_sentence_ms(r, 'drafter_s'), '{:.3f}') if name != 'greedy' else ''} | "
                f"{_f(r.get('tokens_per_iteration'))} | "
                f"{_f(r.get('accepted_per_iteration')) if name != 'greedy' else ''} | {_check(r)} |")
        gad = group.get("gad")
        figure = "ms p50" if s["batch_size"] == LATENCY_BATCH else "sentences/s"
        line = (f"- {s['model']} batch {s['batch_size']}, {s['threads']} thread(s) ({figure}): gad-shared "
                f"{_x(s.get('vs_greedy'))} greedy")
        if gad is not None:
            line += f", {_x(speed(s) / speed(gad))} gad"
            line += (f"; encoder {_f(_per_sentence_ms(s, 'encoder_s'), '{:.3f}')} ms/sent against gad's "
                     f"{_f(_per_sentence_ms(gad, 'encoder_s'), '{:.3f}')} and greedy's {_f(greedy_encoder, '{:.3f}')}")
        summary.append(line + f"; outputs = greedy: {_check(s)}.")
    return lines + [""] + summary + [""]


# ----------------------------------------------------------------------------- BiLD
def add_bild_identical(rows: list[dict]) -> None:
    """`identical_to_big_greedy` of every BiLD row: the share of its outputs token-
    identical to greedy of the same model, precision and shortlist on the same sentences
    (1.0 for a lossless row; how close a lossy one stays). Needs the rows' outputs."""
    for r in rows:
        if r["strategy"] not in BILD_STRATEGIES:
            continue
        ref = _big_greedy(rows, r, any_batch=True)
        r["identical_to_big_greedy"] = None if ref is None else identical_share(r["_outputs"], ref["_outputs"])


def _big_greedy(rows: list[dict], r: dict, any_batch: bool = False) -> dict | None:
    """Greedy of r's model, precision and shortlist on the same sentences, on the same
    workload (any_batch: any batch size and thread count; outputs do not depend on them)."""
    refs = [c for c in rows if c["system"] == "pyfastdec" and c["strategy"] == "greedy"
            and all(c[k] == r[k] for k in ("model", "precision", "shortlist", "dataset", "sentences"))
            and (any_batch or c["workload"] == r["workload"])]
    return min(refs, key=lambda c: (c["batch_size"] != r["batch_size"], c["threads"]), default=None)


def bild_sweep_points(rows: list[dict]) -> dict | None:
    """The BiLD rows at batch 1 at the sweep's (fewest) thread count, sweep and defaults:
    {"points": rows by ms p50, "greedy": big greedy there (or None), "front": the Pareto
    front of points and greedy by ms p50, "threads"}; None without BiLD rows."""
    bild = [r for r in rows if r["system"] == "pyfastdec" and r["strategy"] in BILD_STRATEGIES
            and r["batch_size"] == LATENCY_BATCH]
    if not bild:
        return None
    threads = min(r["threads"] for r in bild)
    points = sorted((r for r in bild if r["threads"] == threads), key=lambda r: r["ms_p50"])
    greedy = _big_greedy(rows, points[0])
    candidates = points + ([greedy] if greedy else [])
    front = [candidates[i] for i in pareto_front([(r["ms_p50"], r["bleu"]) for r in candidates])]
    return {"points": points, "greedy": greedy, "front": front, "threads": threads}


def _within(r: dict, greedy: dict | None) -> bool | None:
    return None if greedy is None else r["bleu"] >= greedy["bleu"] - BLEU_WITHIN


def _point(r: dict) -> str:
    return "big greedy" if r["strategy"] == "greedy" else f"fallback {r['fallback']:g}, rollback {r['rollback']:g}"


def bild_section(results: dict) -> list[str]:
    rows = results["rows"]
    sweep = results.get("bild_sweep", [])
    points = bild_sweep_points(rows + sweep)
    if points is None:
        return []
    model = points["points"][0]["model"]
    info = results.get("models", {}).get(model, {})
    defaults = info.get("bild") or {}
    big = [r for r in rows if r["system"] == "pyfastdec" and r["model"] == model]
    lines = ["## BiLD: a little model over the big model's encoder (issue 15)", "",
             f"Big model {info.get('path', model)} ({big[0]['precision']}"
             f"{', its shortlist' if big[0]['shortlist'] else ''}), little model {info.get('little')} (no encoder: "
             f"it reads the big model's encoder output). Thresholds: lossless fallback "
             f"{_f(defaults.get('lossless'), '{:g}')}, lossy (fallback, rollback) = "
             f"{tuple(defaults['lossy']) if defaults.get('lossy') else ''}, from {defaults.get('source', '?')}. "
             f"{_policy_words(results, 'bild')} 'x big greedy': "
             "times faster than greedy of the big model on the same workload (ms p50 at batch 1, sentences/s at "
             "batch 32); '= big greedy': share of outputs token-identical to it; lossless check: every output "
             "identical (rollback 0 only). Tokens/iter: output tokens per row per big-model call; accepted/iter: "
             "little tokens kept per row per big-model call.", "",
             "| strategy | fallback | rollback | threads | batch | ms p50 | ms/sent | sent/s | x big greedy | BLEU | "
             "tokens/iter | accepted/iter | drafter ms/sent | = big greedy | lossless check |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    order = {"greedy": 0, "bild": 1, "bild-lossy": 2}
    for r in sorted((r for r in big if r["strategy"] in order),
                    key=lambda r: (r["threads"], r["batch_size"], order[r["strategy"]])):
        drafting = r["strategy"] != "greedy"
        lines.append(
            f"| {r['strategy']} | {_f(r.get('fallback'), '{:g}')} | {_f(r.get('rollback'), '{:g}')} | "
            f"{r['threads']} | {r['batch_size']} | {_f(r.get('ms_p50'))} | {_mean_ms(r):.2f} | "
            f"{r['sentences_per_s']:.1f} | {_x(r.get('vs_greedy'))} | {_f(r.get('bleu'))} | "
            f"{_f(r.get('tokens_per_iteration'))} | {_f(r.get('accepted_per_iteration')) if drafting else ''} | "
            f"{_f(_per_sentence_ms(r, 'drafter_s'), '{:.3f}') if drafting else ''} | {_share(r)} | "
            f"{'' if r['strategy'] == 'bild-lossy' else _check(r)} |")
    greedy, front = points["greedy"], points["front"]
    on_front = {id(r) for r in front}
    n = points["points"][0]["sentences"]
    lines += ["", f"### Sweep at batch 1 ({points['threads']} thread(s), first {n} sentences)", "",
              f"Every (fallback, rollback) point of the grid (bench/plan.py BILD_GRID; BILD_GRID_QUICK under "
              f"--quick) and the two defaults. Within {BLEU_WITHIN}: BLEU at least big greedy's - {BLEU_WITHIN}. "
              "Pareto: on the front of BLEU against ms p50 (no point, big greedy included, is both at least as "
              "fast and at least as good, and better in one). bild_pareto.png draws it.", "",
              "| point | ms p50 | ms/sent | x big greedy | BLEU | BLEU - big greedy | within "
              f"{BLEU_WITHIN} | Pareto | tokens/iter | accepted/iter | = big greedy | lossless check |",
              "|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for r in ([greedy] if greedy else []) + points["points"]:
        is_greedy = r["strategy"] == "greedy"
        default = f" (default {r['bild_default']})" if r.get("bild_default") else ""
        delta = None if greedy is None else r["bleu"] - greedy["bleu"]
        within = _within(r, greedy)
        lines.append(
            f"| {_point(r)}{default} | {r['ms_p50']:.2f} | {_mean_ms(r):.2f} | {_x(r.get('vs_greedy'))} | "
            f"{r['bleu']:.2f} | {_f(delta, '{:+.2f}')} | {'' if within is None else 'yes' if within else 'no'} | "
            f"{'*' if id(r) in on_front else ''} | {_f(r.get('tokens_per_iteration'))} | "
            f"{'' if is_greedy else _f(r.get('accepted_per_iteration'))} | {_share(r)} | "
            f"{_check(r) if r['strategy'] != 'bild-lossy' else ''} |")
    lines += ["", "Pareto front, fastest first: " + "; ".join(
        f"{_point(r)}: {r['ms_p50']:.2f} ms, BLEU {r['bleu']:.2f}"
        + (f", {_x(r.get('vs_greedy'))} big greedy" if r["strategy"] != "greedy" else "") for r in front) + "."]
    if greedy is not None:
        keep = [r for r in points["points"] if _within(r, greedy)]
        if keep:
            best = min(keep, key=lambda r: r["ms_p50"])
            lines.append(f"Fastest point within {BLEU_WITHIN} BLEU of big greedy ({greedy['bleu']:.2f}): "
                         f"{_point(best)}, {best['ms_p50']:.2f} ms p50, BLEU {best['bleu']:.2f}, "
                         f"{_x(best.get('vs_greedy'))} big greedy ({greedy['ms_p50']:.2f} ms).")
        else:
            lines.append(f"No point stays within {BLEU_WITHIN} BLEU of big greedy ({greedy['bleu']:.2f}).")
    else:
        lines.append("Big greedy did not run at this workload: no ratios, no BLEU reference.")
    return lines + [""]
