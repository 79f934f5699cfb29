"""What verifying n positions costs against one greedy step: t_step(n) / t_step(1).

    python -m bench.verify_cost [--rounds R] [--batches 1,32] [--max-n 16] [--out FILE.json]
        [--uk-gec-shortlist FILE]

Every lossless strategy (GAD, IAD, blockwise) pays one decoder call that appends n
positions per row; it only wins if that call costs little more than a greedy step.
Workload: the shipped int8 models (models/en-de: SSRU decoder; models/en-de-attn and
models/uk-gec: attention decoder), with and without their shortlist.bin, 1 thread;
--uk-gec-shortlist adds uk-gec with that shortlist file (it ships none). Each row holds
PAST positions (BOS + random tokens) over a source (test_2016_flickr; UA-GEC test for
uk-gec, whose pieces and shortlist are made for it), then one timed call = NativeBackend.step of n new tokens per row (argmax, as greedy and the
verifiers ask) followed by truncate back to PAST, so every round sees the same state.
The machine is shared, so every configuration and every n are interleaved in each round
(n in a fresh random order) and the figure is the median over the rounds; ratios are
taken within one run.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PAST = 10  # positions held before the timed call (BOS + 9 tokens)
# (label, model directory, shortlist: on / off / a file): the shipped int8 models; uk-gec
# has no shortlist (--uk-gec-shortlist adds a row with one).
CONFIGS = [("en-de ssru", "models/en-de", True), ("en-de ssru", "models/en-de", False),
           ("en-de-attn", "models/en-de-attn", True), ("en-de-attn", "models/en-de-attn", False),
           ("uk-gec attn", "models/uk-gec", False)]


class Case:
    """One model, shortlist setting and batch size, with its state at PAST positions."""

    def __init__(self, label: str, path: Path, shortlist: bool, rows: int, sources: list[str], seed: int = 0,
                 threads: int = 1):
        from pyfastdec.backends.base import Want
        from pyfastdec.backends.native import NativeBackend
        from pyfastdec.text import load_tokenizer

        self.label, self.shortlist, self.rows = label, shortlist, rows
        self.backend = NativeBackend(path, threads=threads, shortlist=shortlist)  # a path: that file
        tokenizer = load_tokenizer(self.backend.model_dir)  # spm.model, or a Marian directory's files
        eos, bos = self.backend.tokens["eos"], self.backend.tokens["bos"]
        ids = [tokenizer.encode(s)[:126] + [eos] for s in sources[:rows]]
        self.state = self.backend.start(self.backend.encode(ids))
        rng = np.random.default_rng(seed)
        vocab = self.backend.vocab_size
        prefix = np.concatenate([np.full((rows, 1), bos), rng.integers(5, vocab, (rows, PAST - 1))], 1)
        self.backend.step(self.state, prefix, Want())
        self.tokens = {}  # n -> [rows, n]
        self.rng = rng
        self.held = np.full(rows, PAST)
        self.want = Want(argmax=True)

    def call(self, n: int) -> float:
        """Seconds of one step of n positions per row (then rolled back)."""
        tokens = self.tokens.get(n)
        if tokens is None:
            tokens = self.tokens[n] = self.rng.integers(5, self.backend.vocab_size, (self.rows, n))
        start = time.perf_counter()
        self.backend.step(self.state, tokens, self.want)
        seconds = time.perf_counter() - start
        self.backend.truncate(self.state, self.held)
        return seconds


def measure(cases: list[Case], ns: list[int], rounds: int, seed: int = 1) -> dict:
    """Median seconds per (case, n), every case and n interleaved within each round."""
    rng = np.random.default_rng(seed)
    times = {(i, n): [] for i in range(len(cases)) for n in ns}
    for case in cases:  # warm-up: scratch growth, position table
        for n in ns:
            case.call(n)
    for _ in range(rounds):
        for i, case in enumerate(cases):
            for n in rng.permutation(ns):
                times[(i, int(n))].append(case.call(int(n)))
    return {key: float(np.median(v)) for key, v in times.items()}


def table(cases: list[Case], ns: list[int], medians: dict) -> str:
    head = "| model | shortlist | batch | t(1) ms | " + " | ".join(f"{n}" for n in ns[1:]) + " |"
    lines = [head, "|---|---|---:|---:|" + "---:|" * (len(ns) - 1)]
    for i, c in enumerate(cases):
        one = medians[(i, 1)]
        ratios = " | ".join(f"{medians[(i, n)] / one:.2f}" for n in ns[1:])
        lines.append(f"| {c.label} | {'on' if c.shortlist else 'off'} | {c.rows} | {one * 1e3:.3f} | {ratios} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200, help="timed rounds at batch 1 (batch 32: rounds / 10)")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--max-n", type=int, default=16)
    parser.add_argument("--models", help="comma-separated labels to keep (default: all)")
    parser.add_argument("--out", help="write the medians as JSON here")
    parser.add_argument("--uk-gec-shortlist", type=Path, metavar="FILE",
                        help="add a 'uk-gec attn' row with this shortlist.bin (models/uk-gec ships none)")
    args = parser.parse_args(argv)
    import pyfastdec
    from bench.data import multi30k_test
    from bench.data import uagec_test
    ns = list(range(1, args.max_n + 1))
    keep = None if not args.models else set(args.models.split(","))
    configs = CONFIGS + ([("uk-gec attn", "models/uk-gec", args.uk_gec_shortlist.resolve())]
                         if args.uk_gec_shortlist else [])
    configs = [c for c in configs if keep is None or c[0] in keep]
    # UA-GEC only when a uk-gec row is kept: --models en-de-attn runs without the corpus.
    sources = {"multi30k": multi30k_test(64).sources}
    if any(label.startswith("uk-gec") for label, _, _ in configs):
        sources["ua-gec"] = uagec_test(64).sources
    report = {"cpu": pyfastdec.cpu_info()["brand"], "isa": pyfastdec.cpu_info()["isa"], "past": PAST, "rows": []}
    print(f"CPU: {report['cpu']}, kernels: {report['isa']}, 1 thread; t(n) / t(1), medians of interleaved rounds")
    for rows in (int(b) for b in args.batches.split(",")):
        cases = [Case(label, ROOT / path, sl, rows, sources["ua-gec" if label.startswith("uk-gec") else "multi30k"])
                 for label, path, sl in configs]
        rounds = args.rounds if rows == 1 else max(10, args.rounds // 10)
        medians = measure(cases, ns, rounds)
        print(f"\nbatch {rows}, {rounds} rounds:")
        print(table(cases, ns, medians), flush=True)
        for i, c in enumerate(cases):
            report["rows"].append({"model": c.label, "shortlist": c.shortlist if isinstance(c.shortlist, bool)
                                   else str(c.shortlist), "batch": rows, "rounds": rounds,
                                   "ms": {n: medians[(i, n)] * 1e3 for n in ns}})
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
