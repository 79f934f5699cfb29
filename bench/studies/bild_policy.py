"""BiLD against greedy in ONE process, candidates interleaved: what the draft-or-plain
policy (pyfastdec/decoding/policies/draft_or_plain.py) makes of drafting, next to drafting every
iteration and to the big model's greedy decoding.

    python -m bench.studies.bild_policy [--big models/en-de-big] [--little models/en-de-little]
        [--latency-n 500] [--n 1000] [--rounds 3] [--threads 1]

bench.run measures every row in its own process, and on a shared machine a process's
batch-1 greedy time can move by tens of percent from one to the next; here each round
times greedy, forced BiLD and BiLD with the policy in turn on the same sentences
(test_2016_flickr, sorted by length, batch 1 over the first --latency-n, batch 32 over
--n), and each keeps its fastest round. One policy per batch size lives across rounds,
as a Translator keeps one. Prints ms/sentence, the ratio to greedy, and the policy's
measured costs per batch-size bucket (us per row-token, drafting / plain).
"""
from __future__ import annotations

import argparse
import time

from export.data import load_pairs
from pyfastdec.decoding import greedy
from pyfastdec.decoding.bild import bild
from pyfastdec.decoding.policies import DraftOrPlain

from . import bild_pair


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bild_pair.add_arguments(ap)
    ap.add_argument("--latency-n", type=int, default=500)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    big, little, fallback, tok = bild_pair.load(args)
    sources = sorted((tok.encode(s) + [big.tokens["eos"]] for s, _ in load_pairs("test_2016_flickr", "en", "de")),
                     key=len)
    results = {}
    for batch, n in ((1, args.latency_n), (32, args.n)):
        src, policy = sources[:n], DraftOrPlain()
        runs = {"greedy": lambda b: greedy(big, b),
                "bild, drafting every iteration": lambda b: bild(big, little, b, fallback=fallback),
                "bild, draft-or-plain policy": lambda b: bild(big, little, b, fallback=fallback, policy=policy)}
        fastest: dict[str, float] = {}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                started = time.perf_counter()
                for i in range(0, len(src), batch):
                    fn(src[i:i + batch])
                fastest[name] = min(fastest.get(name, float("inf")), time.perf_counter() - started)
        results[batch] = {name: 1000 * t / len(src) for name, t in fastest.items()}
        print(f"batch {batch}, {len(src)} sentences, {args.threads} thread(s), fallback {fallback}:")
        for name, t in fastest.items():
            print(f"  {name}: {1000 * t / len(src):.3f} ms/sentence, {fastest['greedy'] / t:.2f}x greedy")
        costs = {rows: f"{1e6 * policy.cost(b, 'draft'):.1f} / {1e6 * policy.cost(b, 'plain'):.1f} us"
                 for rows, b in sorted(policy.buckets.items())}
        print(f"  policy: {policy.chosen.count('draft')} drafting and {policy.chosen.count('plain')} plain decisions; "
              f"cost per row-token by bucket (rows' bit length), drafting / plain: {costs}")
    return results


if __name__ == "__main__":
    main()
