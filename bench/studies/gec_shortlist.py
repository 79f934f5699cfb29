"""Greedy and IAD on the correction model with and without a lexical shortlist (1 thread).

    python -m bench.studies.gec_shortlist --shortlist FILE [--model models/uk-gec] [--sentences 500]
        [--repeats 3] [--edit-margin M] [--out FILE.json]

IAD verifies a whole draft (the source) per decoder call, so the output layer runs at
every verified position: without a shortlist it is uk-gec's largest per-position cost
(bench.verify_cost). This measures what a shortlist (export.shortlist --identity) changes
end to end, on the first `--sentences` UA-GEC test sources that fit max_source_len:
- batch 1 (one call per sentence): ms per sentence; batch 32: sentences per second;
- IAD's per-sentence iterations (verifier calls) and output tokens per iteration, and
  per-sentence encoder and verifier time (DecodeStats), and the rest of the call (the
  decoding loop's Python);
- whether IAD's output equals greedy's in each configuration (it must).
Each configuration keeps one SourceDraftLength(max_source_len) for IAD across all its
calls, as Translator does, warmed on 64 UA-GEC val sources at both batch sizes first.
Repeats interleave every configuration, strategy and batch size; the figures are medians.
The edit margin defaults to the model's config.json decoding.edit_margin, as Corrector's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BATCHES = (1, 32)
WARM = 64


def fitting(sources: list[str], tokenize, limit: int, n: int) -> list[list[int]]:
    """The first n sources whose ids (EOS included) fit the model's max_source_len."""
    out = []
    for ids in tokenize(sources):
        if len(ids) <= limit:
            out.append(ids)
        if len(out) == n:
            break
    return out


class Config:
    def __init__(self, label: str, model: Path, shortlist, max_source_len: int):
        from pyfastdec.backends.native import NativeBackend
        from pyfastdec.decoding.policies import SourceDraftLength

        self.label = label
        self.backend = NativeBackend(model, threads=1, shortlist=shortlist)
        self.policy = SourceDraftLength(max_source_len)  # one per configuration, as Translator keeps

    def run(self, algo: str, src: list[list[int]], batch: int, margin: float):
        """(outputs, summed DecodeStats fields, seconds) of decoding src in batches."""
        from pyfastdec.decoding import greedy, iad

        outs, sums = [], dict(iterations=0, row_steps=0, generated=0, encoder_s=0.0, verifier_s=0.0, total_s=0.0)
        start = time.perf_counter()
        for i in range(0, len(src), batch):
            part = src[i:i + batch]
            if algo == "greedy":
                o, stats = greedy(self.backend, part, edit_margin=margin)
            else:
                o, stats = iad(self.backend, part, policy=self.policy, edit_margin=margin)
            outs += o
            for key in sums:
                sums[key] += getattr(stats, key)
        return outs, sums, time.perf_counter() - start


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "uk-gec")
    ap.add_argument("--shortlist", type=Path, required=True, help="shortlist.bin to compare with the full vocabulary")
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--edit-margin", type=float, help="default: the model's decoding.edit_margin (else 0)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)

    from pyfastdec.model_dir.shortlist import Shortlist

    from bench.data import tokenize, uagec_test, uagec_val

    config = json.loads((args.model / "config.json").read_text())
    margin = args.edit_margin if args.edit_margin is not None else config.get("decoding", {}).get("edit_margin", 0.0)
    limit = config["max_source_len"]
    tok = lambda lines: tokenize(lines, args.model / "spm.model")  # noqa: E731
    src = fitting(uagec_test().sources, tok, limit, args.sentences)
    warm = fitting([s for s, _ in uagec_val()], tok, limit, WARM)
    union = float(np.mean([Shortlist.load(args.shortlist).candidates(s).size for s in src]))
    print(f"{len(src)} UA-GEC test sources ({sum(map(len, src)) / len(src):.1f} ids each), edit margin {margin}, "
          f"1 thread; shortlist {args.shortlist}: {union:.1f} candidate ids per sentence", flush=True)

    configs = [Config("full vocabulary", args.model, False, limit), Config("shortlist", args.model, args.shortlist, limit)]
    for c in configs:
        for batch in BATCHES:
            for algo in ("greedy", "iad"):
                c.run(algo, warm, batch, margin)
    seconds: dict = {}
    stats: dict = {}
    outputs: dict = {}
    for _ in range(args.repeats):
        for c in configs:
            for batch in BATCHES:
                for algo in ("greedy", "iad"):
                    outs, sums, took = c.run(algo, src, batch, margin)
                    key = (c.label, algo, batch)
                    seconds.setdefault(key, []).append(took)
                    stats.setdefault(key, []).append(sums)
                    outputs[key] = outs

    report = {"sentences": len(src), "edit_margin": margin, "shortlist": str(args.shortlist),
              "union_per_sentence": union, "rows": []}
    print("\n| vocabulary | algo | batch | ms/sentence | sentences/s | speed-up over greedy | iterations/sentence "
          "| tokens/iteration | encoder ms/sent | verifier ms/sent | rest ms/sent | = greedy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for c in configs:
        for batch in BATCHES:
            for algo in ("greedy", "iad"):
                key = (c.label, algo, batch)
                med = statistics.median(seconds[key])
                mid = stats[key][sorted(range(args.repeats), key=lambda r: seconds[key][r])[args.repeats // 2]]
                n = len(src)
                speedup = statistics.median(seconds[(c.label, "greedy", batch)]) / med
                same = outputs[key] == outputs[(c.label, "greedy", batch)]
                row = {"vocabulary": c.label, "algo": algo, "batch": batch, "seconds": seconds[key],
                       "ms_per_sentence": med / n * 1e3, "sentences_per_s": n / med, "speedup_over_greedy": speedup,
                       "iterations_per_sentence": mid["row_steps"] / n,
                       "tokens_per_iteration": mid["generated"] / max(mid["row_steps"], 1),
                       "encoder_ms": mid["encoder_s"] / n * 1e3, "verifier_ms": mid["verifier_s"] / n * 1e3,
                       "rest_ms": (mid["total_s"] - mid["encoder_s"] - mid["verifier_s"]) / n * 1e3,
                       "equals_greedy": same}
                report["rows"].append(row)
                print(f"| {c.label} | {algo} | {batch} | {row['ms_per_sentence']:.3f} | {row['sentences_per_s']:.0f} | "
                      f"{speedup:.2f}x | {row['iterations_per_sentence']:.1f} | {row['tokens_per_iteration']:.2f} | "
                      f"{row['encoder_ms']:.3f} | {row['verifier_ms']:.3f} | {row['rest_ms']:.3f} | {'yes' if same else 'NO'} |")
    differ = float(np.mean([a != b for a, b in zip(outputs[("full vocabulary", "greedy", 1)],
                                                     outputs[("shortlist", "greedy", 1)])]))
    report["greedy_outputs_differ"] = differ
    print(f"\ngreedy outputs that differ with the shortlist: {100 * differ:.1f}% of {len(src)}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
