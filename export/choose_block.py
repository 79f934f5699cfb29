"""Choose a GAD drafter's block size on validation data, and write it into its config.

    python -m export.choose_block --verifier models/en-de --drafter models/en-de-drafter \
        [--sizes 4 6 8 10] [--split val] [--limit 500] [--threads 1] [--dry-run]

For each candidate k, GAD (lossless) decodes the validation sources one sentence at a
time (batch 1, the latency setting GAD is for) with the native engine; the k with the
lowest total time wins (mean accepted tokens per iteration is reported beside it). The
drafter must have been trained on these block sizes (recipe "block_sizes"). Passes over
the candidates are interleaved and repeated, and each k keeps its fastest pass, so a
burst of load on the machine does not decide the choice.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.strategies import batch_runner
from pyfastdec.text import Tokenizer

from .data import load_pairs
from .rehash import rehash


def timed(fn, src_ids: list[list[int]]) -> tuple[float, list[list[int]], list]:
    start, outs, stats = time.perf_counter(), [], []
    for ids in src_ids:
        out, st = fn([ids])
        outs += out
        stats.append(st)
    return time.perf_counter() - start, outs, stats


def measure(verifier: Path, drafter: Path, sources: list[str], sizes: list[int], threads: int,
            repeats: int = 2) -> dict:
    ver, dra = NativeBackend(verifier, threads=threads), NativeBackend(drafter, threads=threads)
    tok = Tokenizer(verifier / "spm.model")
    src = [tok.encode(s) + [ver.tokens["eos"]] for s in sources]
    best: dict = {}
    for _ in range(repeats):
        seconds, reference, _ = timed(batch_runner("greedy", ver), src)
        best["greedy"] = min(best.get("greedy", float("inf")), seconds)
        for k in sizes:
            # policy=False: every iteration verifies the whole block k, the size being chosen
            seconds, outs, stats = timed(batch_runner("gad", ver, dra, policy=False, block=k), src)
            if outs != reference:
                raise AssertionError(f"GAD with k={k} differs from greedy: the engine broke losslessness")
            iterations = sum(s.iterations for s in stats)
            accepted = sum(s.accepted for s in stats)
            generated = sum(s.generated for s in stats)
            row = best.setdefault(k, {"seconds": float("inf")})
            row.update(seconds=min(row["seconds"], seconds), iterations=iterations,
                       accepted_per_iteration=accepted / max(iterations, 1),
                       tokens_per_iteration=generated / max(iterations, 1))
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verifier", type=Path, required=True)
    ap.add_argument("--drafter", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 8, 10])
    ap.add_argument("--split", default="val")
    ap.add_argument("--limit", type=int, default=500, help="validation sentences used (0 = all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true", help="report only; leave config.json unchanged")
    args = ap.parse_args(argv)
    pairs = load_pairs(args.split, "en", "de", "multi30k")
    pairs = pairs[: args.limit] if args.limit else pairs
    result = measure(args.verifier, args.drafter, [s for s, _ in pairs], args.sizes, args.threads)
    greedy_s = result.pop("greedy")
    print(f"{len(pairs)} {args.split} sentences, batch 1, {args.threads} thread(s); greedy {greedy_s:.2f} s")
    for k, row in sorted(result.items()):
        print(f"  k={k:2d}: {row['seconds']:.2f} s ({greedy_s / row['seconds']:.2f}x greedy), "
              f"{row['accepted_per_iteration']:.2f} drafted tokens accepted and "
              f"{row['tokens_per_iteration']:.2f} tokens produced per iteration")
    chosen = min(result, key=lambda k: result[k]["seconds"])
    print(f"chosen block size: {chosen}")
    if not args.dry_run:
        config_path = args.drafter / "config.json"
        config = json.loads(config_path.read_text())
        config["block_size"] = chosen
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        rehash(args.drafter)  # the config's checksum must cover the new block_size
        print(f"{config_path}: block_size = {chosen}")


if __name__ == "__main__":
    main()
