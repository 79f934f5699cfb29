"""Greedy throughput with and without the lexical shortlist, per thread count and batch
size, split into end to end (encode + candidates + decoder loop) and the decoder loop
alone (issue 12 items 2 and 4: the shortlisted output layer at batch > 1).

    python -m bench.studies.shortlist_batch [--model models/en-de-attn] [--limit 320]
        [--threads 1,2] [--batch 1,32] [--repeats 2]

Every configuration runs in this process, one after the other, on the first --limit
sentences of Multi30k test_2016_flickr (sorted by length into batches, as Translator
does). Prints one line per configuration: sentences/s end to end, decoder-loop
sentences/s (the `verifier` time of greedy's statistics), encoder ms per sentence.
Run it under /work/measure.sh on the shared machine.
"""
from __future__ import annotations

import argparse
import time

from bench.data import multi30k_test
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.greedy import greedy
from pyfastdec.text import Tokenizer


def batches(ids: list[list[int]], size: int) -> list[list[list[int]]]:
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    return [[ids[i] for i in order[s:s + size]] for s in range(0, len(order), size)]


def run(backend: NativeBackend, groups: list[list[list[int]]], repeats: int) -> tuple[float, float, float]:
    best = None
    for _ in range(repeats):
        total = loop = enc = 0.0
        for group in groups:
            t0 = time.perf_counter()
            _, stats = greedy(backend, group)
            total += time.perf_counter() - t0
            loop += stats.verifier_s
            enc += stats.encoder_s
        if best is None or total < best[0]:
            best = (total, loop, enc)
    return best


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="models/en-de-attn")
    p.add_argument("--limit", type=int, default=320)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", default="1,32")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--shortlist-gemm", default=None, help="auto | union | per-row (engines that have the choice)")
    args = p.parse_args(argv)
    tok = Tokenizer(f"{args.model}/spm.model")
    sources = multi30k_test(args.limit).sources
    eos = NativeBackend(args.model, threads=1, shortlist=False).tokens["eos"]
    ids = [tok.encode(s) + [eos] for s in sources]
    n = len(ids)
    print(f"{args.model}: {n} sentences, best of {args.repeats}")
    print("threads batch shortlist | sent/s end-to-end | sent/s decoder loop | encoder ms/sent")
    for threads in map(int, args.threads.split(",")):
        for shortlist in (False, True):
            backend = NativeBackend(args.model, threads=threads, shortlist=shortlist)
            if args.shortlist_gemm:
                backend._model.shortlist_gemm = args.shortlist_gemm
            for batch in map(int, args.batch.split(",")):
                groups = batches(ids, batch)
                run(backend, groups[:2], 1)  # warm the scratch and the pool
                total, loop, enc = run(backend, groups, args.repeats)
                print(f"{threads:7d} {batch:5d} {'on ' if shortlist else 'off'}       | "
                      f"{n / total:17.1f} | {n / loop:19.1f} | {1000 * enc / n:.3f}")


if __name__ == "__main__":
    main()
