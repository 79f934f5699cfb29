"""IAD against greedy on text its model copies and on text it does not fit.

IAD (input-guided aggressive decoding) drafts the source; where the model rewrites the
text, drafts fail and verifying them is wasted work. The draft-length policy
(pyfastdec/decoding/policies/source_draft_length.py) must keep IAD within 1.1x of greedy's time on
any input while keeping its speed-up on the text it is meant for. This measures both, on
the shipped correction model:

    python -m bench.studies.iad_bound [--model DIR] [--threads 1] [--repeats 5] [--sentences 200]

Inputs: UA-GEC test sources (what the model is for), the same sentences with their words
shuffled, English captions (a language the model never saw), one 1,000-word line, and
random sentencepiece pieces. Each row: batch size, greedy and IAD seconds (medians of
alternating runs, each with a Corrector that has already decoded the input once, as in a
batch job), the ratio, IAD's verifier calls and accepted draft tokens, and whether the
outputs are identical (they must be).
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
import warnings

from pyfastdec import Corrector

from bench.data import multi30k_test


def ua_gec_sources(n: int) -> list[str]:
    from export.uagec import extract, package_data_root
    return [src for src, _ in extract(package_data_root())["test"][:n]]


def english_captions(n: int) -> list[str]:
    return multi30k_test(n).sources


def shuffled_words(texts: list[str], seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for t in texts:
        words = t.split()
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


def random_pieces(corrector: Corrector, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    size = corrector.tokenizer.sp.GetPieceSize()
    return [corrector.tokenizer.decode([rng.randrange(5, size) for _ in range(rng.randint(5, 40))])
            for _ in range(n)]


def inputs(corrector: Corrector, n: int) -> dict[str, list[str]]:
    ua = ua_gec_sources(n)
    en = english_captions(max(n, 80))
    return {
        "ua-gec test": ua,
        "ua-gec words shuffled": shuffled_words(ua),
        "english captions": en[:n],
        "one 1,000-word line": [" ".join(" ".join(en).split()[:1000])],
        "random pieces": random_pieces(corrector, n),
    }


def measure(corrector: Corrector, texts: list[str], batch_size: int, repeats: int) -> dict:
    times: dict[str, list[float]] = {"greedy": [], "iad": []}
    outs, stats = {}, None
    for algo in times:  # warm-up: first-call allocations; the IAD policy learns the costs
        outs[algo] = corrector.translate(texts, algo=algo, batch_size=batch_size)
    for _ in range(repeats):
        for algo in times:
            start = time.perf_counter()
            result = corrector.translate(texts, algo=algo, batch_size=batch_size, return_stats=True)
            times[algo].append(time.perf_counter() - start)
            if algo == "iad":
                stats = result[1]
    greedy_s, iad_s = statistics.median(times["greedy"]), statistics.median(times["iad"])
    return {"greedy_s": greedy_s, "iad_s": iad_s, "ratio": iad_s / greedy_s,
            "iterations": stats.iterations, "accepted": stats.accepted, "drafted": stats.drafted,
            "identical": outs["greedy"] == outs["iad"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.iad_bound", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="correction model directory (default: the packaged uk-gec)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # random pieces may hold a "sentence" too long for the model: cut, warned
    print(f"| input | batch | greedy s | IAD s | IAD / greedy | IAD calls | accepted / drafted | identical |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    worst = 0.0
    for name, texts in inputs(Corrector(args.model, threads=args.threads), args.sentences).items():
        for batch in args.batch_sizes:
            corrector = Corrector(args.model, threads=args.threads)  # a fresh policy per input
            r = measure(corrector, texts, batch, args.repeats)
            worst = max(worst, r["ratio"])
            print(f"| {name} ({len(texts)} lines) | {batch} | {r['greedy_s']:.3f} | {r['iad_s']:.3f} | "
                  f"{r['ratio']:.2f} | {r['iterations']} | {r['accepted']} / {r['drafted']} | "
                  f"{'yes' if r['identical'] else 'NO'} |", flush=True)
    print(f"\nworst IAD / greedy: {worst:.2f} (target <= 1.10); threads {args.threads}, "
          f"median of {args.repeats} alternating runs")


if __name__ == "__main__":
    main()
