"""Greedy against IAD through the API as users run it: `Corrector.correct` (IAD, the
model's edit margin, copy-through, sentence splitting, batches sorted by length) against
`Corrector.translate(algo="greedy")` with the same margin, on UA-GEC test lines.

    python -m bench.studies.corrector_speed [--model models/uk-gec] [--lines 1000] [--latency-lines 300]
        [--threads 1,2] [--repeats 3]

Batch 32 over --lines lines (sentences per second) and batch 1 over the first
--latency-lines (ms per line); each figure is the best of --repeats passes, greedy and
IAD interleaved. bench.run's batch-32 rows batch in input order instead, which leaves
long tails of a few live rows; this is the order the Corrector itself uses. The outputs
of both must be identical (IAD with a margin equals greedy with it), or this stops.
"""
from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

from export.data import read_lines
from export.uagec import ensure_corpus
from pyfastdec import Corrector

ROOT = Path(__file__).resolve().parents[2]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "uk-gec")
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--latency-lines", type=int, default=300)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # long lines are cut into chunks, with a warning each
    lines = read_lines(ensure_corpus() / "test.src.gz")[:args.lines]
    short = lines[:args.latency_lines]
    for threads in (int(t) for t in args.threads.split(",")):
        c = Corrector(args.model, threads=threads)
        c.correct(lines[:200])  # warm-up: the IAD policy learns its costs, buffers grow
        c.translate(lines[:200], algo="greedy")
        runs = {"greedy b32": lambda: c.translate(lines, algo="greedy", batch_size=32),
                "iad b32": lambda: c.correct(lines, batch_size=32),
                "greedy b1": lambda: [c.translate([x], algo="greedy", batch_size=1)[0] for x in short],
                "iad b1": lambda: [c.correct([x], batch_size=1)[0] for x in short]}
        best, outs = {}, {}
        for _ in range(args.repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                outs[name] = run()
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
        for b in ("b32", "b1"):
            if outs[f"greedy {b}"] != outs[f"iad {b}"]:
                raise SystemExit(f"IAD differs from greedy at {b}: the lossless rule broke")
        print(f"{args.model.name}, {threads} thread(s): batch 32: greedy {len(lines) / best['greedy b32']:.0f} sent/s, "
              f"IAD {len(lines) / best['iad b32']:.0f} sent/s ({best['greedy b32'] / best['iad b32']:.2f}x); batch 1: "
              f"greedy {1000 * best['greedy b1'] / len(short):.2f} ms, IAD {1000 * best['iad b1'] / len(short):.2f} ms "
              f"({best['greedy b1'] / best['iad b1']:.2f}x); outputs identical", flush=True)


if __name__ == "__main__":
    main()
