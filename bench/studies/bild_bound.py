"""The most lossless BiLD can gain over the big model's greedy decoding on this machine.

    python -m bench.studies.bild_bound [--big models/en-de-big] [--little models/en-de-little]
        [--sentences 300] [--rounds 5] [--threads 1]

BiLD's speed-up is bounded by what it cannot remove: the big model's encoder (it runs
once per sentence, as in greedy decoding), one big-model step per iteration, whose cost
grows with the positions it verifies, the little model's steps and the loop's Python.
This measures, at batch 1 on test_2016_flickr (input order), in one process with the
runs interleaved (each figure the median over --rounds):
- greedy of the big model;
- lossless BiLD with the little model at its own fallback, drafting every iteration
  (no draft-or-plain policy);
- an oracle drafter that proposes exactly the big model's greedy continuation (every
  drafted token accepted), at max_draft 10 (BiLD's default) and 64 (the whole sentence
  in one iteration): the big model's side of a perfect little model.
The bound adds to each oracle run what a little model of this cost would spend
drafting its tokens: the real little model's seconds per little position (its drafter
time over drafted tokens plus one confidence check per iteration) times the oracle's
drafted tokens plus iterations. Every run's output must equal greedy's.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from pyfastdec.backends.base import Want
from pyfastdec.decoding import greedy
from pyfastdec.decoding.bild import bild
from pyfastdec.decoding.draft_verify import DraftSource, accept_argmax, draft_and_verify
from pyfastdec.decoding.result import DecodeStats

from . import bild_pair
from bench.data import multi30k_test


class OracleDrafts(DraftSource):
    """Drafts the next max_draft tokens of a known output (a DraftSource): a little model
    that always agrees with the big one, at no cost."""

    def __init__(self, targets: list[list[int]], max_draft: int):
        self.targets, self.max_draft = targets, max_draft
        self.live = list(range(len(targets)))

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        return [self.targets[i][len(p):len(p) + self.max_draft] for i, p in zip(self.live, prefixes)]

    def keep(self, rows: np.ndarray) -> None:
        self.live = [self.live[r] for r in rows.tolist()]


def oracle(big, src: list[int], target: list[int], max_draft: int):
    """One sentence decoded with OracleDrafts over the big model's greedy output + EOS."""
    stats = DecodeStats(sentences=1)
    with stats.total():
        outs = draft_and_verify(big, [src], OracleDrafts([target + [big.tokens["eos"]]], max_draft),
                                accept_argmax, Want(argmax=True), None, stats)
    return outs, stats


def summed(per_sentence: list[DecodeStats]) -> dict:
    keys = ("total_s", "encoder_s", "drafter_s", "verifier_s", "iterations", "generated", "drafted", "accepted")
    return {k: sum(getattr(s, k) for s in per_sentence) for k in keys}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bild_pair.add_arguments(ap)
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    big, little, fallback, tok = bild_pair.load(args)
    sources = [tok.encode(s) + [big.tokens["eos"]] for s in multi30k_test(args.sentences).sources]
    reference = [greedy(big, [s])[0][0] for s in sources]
    runs = {"greedy": lambda i: greedy(big, [sources[i]]),
            f"bild, fallback {fallback}": lambda i: bild(big, little, [sources[i]], fallback=fallback),
            "oracle, max_draft 10": lambda i: oracle(big, sources[i], reference[i], 10),
            "oracle, max_draft 64": lambda i: oracle(big, sources[i], reference[i], 64)}
    rounds: dict[str, list[dict]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            outs, stats = zip(*(fn(i) for i in range(len(sources))))
            if [o[0] for o in outs] != reference:
                raise SystemExit(f"{name}: output differs from greedy")
            rounds[name].append(summed(stats))
    n = len(sources)
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in rounds.items()}
    real = medians[f"bild, fallback {fallback}"]
    little_position_s = real["drafter_s"] / (real["drafted"] + real["iterations"])
    greedy_s = medians["greedy"]["total_s"]
    print(f"{args.big.name} + {args.little.name}, batch 1, {args.threads} thread(s), {n} sentences, "
          f"medians of {args.rounds} rounds; us per sentence")
    print(f"{'run':<24} {'total':>7} {'encoder':>8} {'little':>7} {'big steps':>9} {'python':>7} "
          f"{'tokens/it':>9} {'x greedy':>8}")
    report = {}
    for name, m in medians.items():
        python_s = m["total_s"] - m["encoder_s"] - m["drafter_s"] - m["verifier_s"]
        little_s = m["drafter_s"]
        if name.startswith("oracle"):  # what drafting its tokens would cost the real little model
            little_s = little_position_s * (m["drafted"] + m["iterations"])
        total = m["total_s"] - m["drafter_s"] + little_s
        row = {"total_us": 1e6 * total / n, "encoder_us": 1e6 * m["encoder_s"] / n, "little_us": 1e6 * little_s / n,
               "big_steps_us": 1e6 * m["verifier_s"] / n, "python_us": 1e6 * python_s / n,
               "tokens_per_iteration": m["generated"] / m["iterations"], "x_greedy": greedy_s / total}
        report[name] = row
        print(f"{name:<24} {row['total_us']:>7.0f} {row['encoder_us']:>8.0f} {row['little_us']:>7.0f} "
              f"{row['big_steps_us']:>9.0f} {row['python_us']:>7.0f} {row['tokens_per_iteration']:>9.2f} "
              f"{row['x_greedy']:>7.2f}x")
    print(f"little model: {1e6 * little_position_s:.1f} us per position (drafting, catch-up and attach included)")
    return report


if __name__ == "__main__":
    main()
