"""What verifying n positions costs against one step, t(n) / t(1), across model sizes
(issue 29, item 1): the shipped students and random-weight int8 models of the base and
big shapes (bench/model_shapes.py).

    nice python -m bench.verify_cost_shapes [--batches 1,8,32] [--threads 1,2]
        [--rounds 60] [--models LABEL,...] [--out FILE.json] [--plot FILE.png]
    python -m bench.verify_cost_shapes --from A.json B.json [--plot FILE.png]

The timed call is bench.verify_cost's (Case: NativeBackend.step of n tokens per row,
argmax, after PAST positions over Multi30k sources, then truncated back), and so is the
order: per thread count and batch size, every configuration and every n interleaved in
each round, n in a fresh random order, medians over the rounds. Rounds: --rounds at
batch 1, a quarter at batch 8, an eighth at batch 32 (at least 5). The big shape runs
n in BIG_NS only (a batch-32 call of 16 positions takes about a second on 1 core).

Where the time goes: after the timed rounds, PROFILE_CALLS calls at n = 1 and at n = 8
(alternating) per configuration with the engine's per-op timer on
(pyfastdec.kernels.op_profile); the figures are each op's median ms per call (the
timer's own cost is in them, the ratios above are not), with the GEMMs' multiply-adds
per second (step_macs).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from bench.verify_cost import CONFIGS as SHIPPED_CONFIGS, ROOT, Case

NS = list(range(1, 17))
BIG_NS = [1, 2, 4, 6, 8, 12, 16]
PROFILE_NS = (1, 8)
PROFILE_CALLS = 21
# (label, model directory or a bench.model_shapes shape name, shortlist, n values)
SHIPPED = [(label, path, sl, NS) for label, path, sl in SHIPPED_CONFIGS] + [
    ("en-de-big", "models/en-de-big", True, NS), ("en-de-big", "models/en-de-big", False, NS)]
SHAPED = [("base-32k", "base-32k", True, NS), ("base-32k", "base-32k", False, NS),
          ("base-58k", "base-58k", True, NS), ("base-58k", "base-58k", False, NS),
          ("big-32k", "big-32k", False, BIG_NS)]


def shortlist_candidates(case: Case, sources: list[str]) -> float | None:
    """Mean candidates per sentence of the case's shortlist over `sources` (None: off)."""
    shortlist = case.backend.shortlist  # the one the backend loaded (NativeBackend's own rule)
    if shortlist is None:
        return None
    from pyfastdec.text import load_tokenizer

    tokenizer = load_tokenizer(case.backend.model_dir)
    eos = case.backend.tokens["eos"]
    return float(np.mean([len(shortlist.candidates(tokenizer.encode(s) + [eos])) for s in sources]))


def measure(cases: list[Case], ns: list[list[int]], rounds: int, seed: int = 1) -> dict:
    """Median seconds per (case, n), n from that case's list; all interleaved per round."""
    rng = np.random.default_rng(seed)
    times = {(i, n): [] for i in range(len(cases)) for n in ns[i]}
    for i, case in enumerate(cases):  # warm-up: scratch growth, position table
        for n in ns[i]:
            case.call(n)
    for _ in range(rounds):
        for i in rng.permutation(len(cases)):
            for n in rng.permutation(ns[i]):
                times[(int(i), int(n))].append(cases[i].call(int(n)))
    return {key: float(np.median(v)) for key, v in times.items()}


def profile(case: Case, ns=PROFILE_NS, calls: int = PROFILE_CALLS) -> dict[int, dict[str, float]]:
    """n -> ms per call of each engine op at n positions per row (the per-op timer on):
    the n values alternate call by call, and each op's figure is its median over the
    calls, so that a call the shared machine preempted does not move it."""
    from pyfastdec import kernels

    per_call = {n: [] for n in ns}
    kernels.op_profile(True)
    try:
        for _ in range(calls):
            for n in ns:
                kernels.op_profile_totals(reset=True)
                case.call(n)
                per_call[n].append(kernels.op_profile_totals(reset=True))
    finally:
        kernels.op_profile(False)
    return {n: {op: float(np.median([c.get(op, (0.0, 0))[0] for c in calls_n])) * 1e3
                for op in calls_n[0] if any(c.get(op, (0.0, 0))[0] > 0 for c in calls_n)}
            for n, calls_n in per_call.items()}


def weights_mb(path: Path) -> float:
    from pyfastdec.model_dir import WEIGHTS_FILE

    return (path / WEIGHTS_FILE).stat().st_size / 1e6


def step_macs(config, candidates: float | None) -> int:
    """Multiply-adds of the GEMMs of one decoder position: every decoder layer's linears
    (cross-attention k / v read the encoder output once, at start, so not theirs) and the
    output layer over the vocabulary or the shortlist's candidates. With n = 1 each weight
    byte is read once per position, so this is also the int8 bytes one greedy step streams."""
    d, hd = config.d_model, config.head_dim
    total = 0
    for layer in config.decoder_layers:
        inner = layer.heads * hd
        total += (2 * d * d if config.decoder_self == "ssru" else 4 * d * inner)  # self: q k v o or w wf
        total += 2 * d * inner + 2 * d * layer.ffn  # cross q, o; fc1, fc2
    return int(total + d * (config.vocab_size if candidates is None else candidates))


def run(configs: list[tuple], batches: list[int], threads: list[int], rounds: int, cache: Path | None = None,
        shapes: dict | None = None, log=print) -> dict:
    """The report: one row per (threads, batch, configuration) with ms per n, the
    shortlist's candidates, the model's weight MB, and the n = 1 / n = 8 op profiles."""
    import pyfastdec
    from bench import model_shapes
    from bench.data import multi30k_test, uagec_test

    shapes = model_shapes.SHAPES if shapes is None else shapes
    sources = {"multi30k": multi30k_test(64).sources}
    if any(label.startswith("uk-gec") for label, *_ in configs):  # extracted from the ua-gec package on first use
        sources["ua-gec"] = uagec_test(64).sources
    paths = {}
    for label, where, _, _ in configs:
        paths[label] = (model_shapes.cached(shapes[where], cache or model_shapes.CACHE) if where in shapes
                        else ROOT / where)
    info = pyfastdec.cpu_info()
    report = {"cpu": info["brand"], "isa": info["isa"], "load": os.getloadavg(), "rows": []}
    log(f"CPU: {report['cpu']}, kernels: {report['isa']}, load {report['load'][0]:.2f}; t(n) / t(1), medians of "
        f"interleaved rounds")
    for thread_count in threads:
        for rows in batches:
            cases = [Case(label, paths[label], sl, rows, sources["ua-gec" if label.startswith("uk-gec")
                                                                  else "multi30k"], threads=thread_count)
                     for label, _, sl, _ in configs]
            case_ns = [ns for *_, ns in configs]
            count = rounds if rows == 1 else max(5, rounds // (4 if rows <= 8 else 8))
            medians = measure(cases, case_ns, count)
            block = []
            candidates = [shortlist_candidates(case, sources["ua-gec" if case.label.startswith("uk-gec")
                                                              else "multi30k"][:rows]) for case in cases]
            for i, case in enumerate(cases):
                block.append({"model": case.label, "shortlist": bool(case.shortlist), "batch": rows,
                              "threads": thread_count, "rounds": count, "weights_mb": weights_mb(paths[case.label]),
                              "candidates": candidates[i],
                              "macs_per_position": step_macs(case.backend.config, candidates[i]),
                              "ms": {n: medians[(i, n)] * 1e3 for n in case_ns[i]},
                              "profile": profile(case)})
            report["rows"] += block
            log(f"\n{thread_count} thread(s), batch {rows}, {count} rounds, load {os.getloadavg()[0]:.2f}:")
            log(ratio_table(block), flush=True)
    return report


def ratio_table(rows: list[dict], ns: list[int] = NS) -> str:
    head = "| model | shortlist | batch | threads | t(1) ms | " + " | ".join(str(n) for n in ns[1:]) + " |"
    lines = [head, "|---|---|---:|---:|---:|" + "---:|" * (len(ns) - 1)]
    for r in rows:
        ms = {int(n): v for n, v in r["ms"].items()}
        cells = " | ".join(f"{ms[n] / ms[1]:.2f}" if n in ms else "" for n in ns[1:])
        lines.append(f"| {r['model']} | {'on' if r['shortlist'] else 'off'} | {r['batch']} | {r['threads']} "
                     f"| {ms[1]:.3f} | {cells} |")
    return "\n".join(lines)


def profile_table(rows: list[dict], n: int = 8) -> str:
    """Per configuration: ms per call at 1 and n positions, and each op's share at n."""
    ops = sorted({op for r in rows for op in r["profile"][n]}, key=lambda op: -max(
        r["profile"][n].get(op, 0) / sum(r["profile"][n].values()) for r in rows))
    ops = [op for op in ops if any(r["profile"][n].get(op, 0) / sum(r["profile"][n].values()) >= 0.01
                                   for r in rows)]
    lines = [f"| model | shortlist | batch | threads | ms at 1 | ms at {n} | gemm at {n} / at 1 | GMAC/s at 1 "
             f"| GMAC/s at {n} | " + " | ".join(f"{op} %" for op in ops) + " |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(ops)]
    for r in rows:
        one, at = r["profile"][1], r["profile"][n]
        total = sum(at.values())
        shares = " | ".join(f"{100 * at.get(op, 0) / total:.0f}" for op in ops)
        # the GEMMs' multiply-adds per second (ms -> GMAC/s: / 1e6)
        rate = {k: r["macs_per_position"] * r["batch"] * k / max(p.get("gemm", 0), 1e-12) / 1e6
                for k, p in ((1, one), (n, at))}
        lines.append(f"| {r['model']} | {'on' if r['shortlist'] else 'off'} | {r['batch']} | {r['threads']} | "
                     f"{sum(one.values()):.3f} | {total:.3f} | {at.get('gemm', 0) / max(one.get('gemm', 0), 1e-12):.2f} "
                     f"| {rate[1]:.1f} | {rate[n]:.1f} | {shares} |")
    return "\n".join(lines)


def smallest_within(rows: list[dict], limit: float = 1.5, n: int = 8) -> dict | None:
    """The smallest model (weight bytes) whose t(n)/t(1) <= limit at batch 1, 1 thread."""
    fits = [r for r in rows if r["batch"] == 1 and r["threads"] == 1 and n in r["ms"]
            and r["ms"][n] / r["ms"][1] <= limit]
    return min(fits, key=lambda r: r["weights_mb"], default=None)


def load_rows(paths: list[Path]) -> list[dict]:
    """The rows of reports written with --out (JSON keys back to ints). A row of a later
    report replaces one of an earlier report with the same model, shortlist, batch and
    threads (a rerun of part of a run when the machine was quieter)."""
    rows = {}
    for path in paths:
        for r in json.loads(Path(path).read_text())["rows"]:
            r["ms"] = {int(n): v for n, v in r["ms"].items()}
            r["profile"] = {int(n): ops for n, ops in r["profile"].items()}
            rows[(r["threads"], r["batch"], r["model"], r["shortlist"])] = r
    return list(rows.values())


def summary(rows: list[dict]) -> str:
    """The ratio tables, where the time goes at n = 8, and the smallest model within 1.5."""
    blocks = []
    for key in dict.fromkeys((r["threads"], r["batch"]) for r in rows):
        blocks.append(ratio_table([r for r in rows if (r["threads"], r["batch"]) == key]))
    best = smallest_within(rows)
    blocks.append(f"where the time goes at n = 8 (per-op timer, medians of {PROFILE_CALLS} calls):\n"
                  + profile_table(rows))
    blocks.append("smallest model with t(8)/t(1) <= 1.5 at batch 1, 1 thread: " + (
        "none measured" if best is None else f"{best['model']} (shortlist {'on' if best['shortlist'] else 'off'}, "
                                             f"{best['weights_mb']:.0f} MB of weights)"))
    return "\n\n".join(blocks)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.verify_cost_shapes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=60, help="timed rounds at batch 1 (fewer at 8 and 32)")
    parser.add_argument("--models", help="comma-separated labels to keep (default: all)")
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    parser.add_argument("--plot", type=Path, help="write the t(n)/t(1) plot here (PNG)")
    parser.add_argument("--from", dest="reports", type=Path, nargs="+", metavar="JSON",
                        help="measure nothing: summarise and plot these --out reports together")
    args = parser.parse_args(argv)
    if args.reports:
        rows = load_rows(args.reports)
    else:
        keep = None if not args.models else set(args.models.split(","))
        configs = [c for c in SHIPPED + SHAPED if keep is None or c[0] in keep]
        report = run(configs, [int(b) for b in args.batches.split(",")],
                     [int(t) for t in args.threads.split(",")], args.rounds)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
        rows = report["rows"]
    print("\n" + summary(rows))
    if args.plot:
        from bench.plots import verify_cost_by_shape
        print(f"plot: {verify_cost_by_shape(rows, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
