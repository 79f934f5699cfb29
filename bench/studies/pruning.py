"""A model before and after compression (issue 14), side by side in one run.

    python -m bench.studies.pruning --pair en-de OLD_DIR NEW_DIR [--pair ...] [--threads 1]
        [--repeats 3] [--latency-n 500] [--out bench/results/pruning]

For each pair, on test_2016_flickr (UA-GEC test for a correction model, the model's
config decides nothing: --gec marks it), int8 with the directory's shortlist when it
has one, greedy decoding:
- directory size (bytes of every file),
- batch 1 over the first --latency-n sentences: encoder ms per sentence (the `encode`
  calls, DecodeStats.encoder_s) and end-to-end ms per sentence,
- batch 32 over the whole set: sentences per second,
- BLEU and chrF of the batch-32 outputs (and of copying the input, for --gec pairs).
The two models run alternately in the same process (old, new, new, old, ...), each
figure is the median over --repeats passes, and the ratios are taken per repeat before
the median, so slow phases of the machine hit both sides alike.
A GAD drafter pair is measured as GAD with its verifier (--drafter-pair VERIFIER_OLD
VERIFIER_NEW NAME OLD NEW): end-to-end batch-1 ms and tokens per iteration.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench import data
from bench.quality import bleu_chrf
from bench.timing import batches_of

REPO_ROOT = Path(__file__).resolve().parents[2]


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())


def backend(path: Path, threads: int):
    from pyfastdec.backends.native import NativeBackend

    return NativeBackend(path, threads=threads)


def one_pass(run, batches) -> tuple[float, float, list]:
    """(total seconds, encoder seconds, outputs) of one pass over the batches."""
    total = encoder = 0.0
    outputs = []
    for batch in batches:
        start = time.perf_counter()
        out, stats = run(batch)
        total += time.perf_counter() - start
        encoder += stats.encoder_s
        outputs += out
    return total, encoder, outputs


def measure_pair(name: str, old: Path, new: Path, threads: int, repeats: int, latency_n: int,
                 gec: bool) -> dict:
    from pyfastdec.decoding import greedy

    test = data.uagec_test() if gec else data.multi30k_test()
    sides = {"before": Path(old), "after": Path(new)}
    runs = {side: backend(path, threads) for side, path in sides.items()}
    sources = {side: data.tokenize(test.sources, path / "spm.model") for side, path in sides.items()}
    figures = {side: {"b1_ms": [], "enc_ms": [], "b32_sps": []} for side in sides}
    ratios = {"b1": [], "enc": [], "b32": []}
    outputs = {}
    for r in range(repeats):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        got = {}
        for side in order:
            run = lambda batch, b=runs[side]: greedy(b, batch)  # noqa: E731
            run(sources[side][:1])  # warm-up
            total, enc, _ = one_pass(run, batches_of(sources[side][:latency_n], 1))
            t32, _, outs = one_pass(run, batches_of(sources[side], 32))
            got[side] = (1000 * total / latency_n, 1000 * enc / latency_n, len(outs) / t32)
            outputs[side] = outs
        for side in sides:
            for key, value in zip(("b1_ms", "enc_ms", "b32_sps"), got[side]):
                figures[side][key].append(value)
        ratios["b1"].append(got["before"][0] / got["after"][0])
        ratios["enc"].append(got["before"][1] / got["after"][1])
        ratios["b32"].append(got["after"][2] / got["before"][2])
    out = {"name": name, "threads": threads, "repeats": repeats, "latency_n": latency_n, "n": len(test.sources)}
    for side, path in sides.items():
        hyps = data.detokenize(outputs[side], path / "spm.model")
        out[side] = {"dir": str(path), "bytes": dir_bytes(path),
                     **{k: statistics.median(v) for k, v in figures[side].items()},
                     **bleu_chrf(hyps, test.references)}
    if gec:
        out["copy"] = bleu_chrf(test.sources, test.references)
    out["speedup"] = {k: statistics.median(v) for k, v in ratios.items()}
    return out


def measure_drafter(name: str, verifiers: tuple[Path, Path], drafters: tuple[Path, Path], threads: int,
                    repeats: int, latency_n: int) -> dict:
    from pyfastdec.decoding import gad

    test = data.multi30k_test()
    out = {"name": name, "threads": threads, "repeats": repeats, "latency_n": latency_n}
    ms = {"before": [], "after": []}
    tokens = {}
    pairs = {"before": (verifiers[0], drafters[0]), "after": (verifiers[1], drafters[1])}
    made = {side: (backend(v, threads), backend(d, threads)) for side, (v, d) in pairs.items()}
    sources = {side: data.tokenize(test.sources[:latency_n], v / "spm.model") for side, (v, _) in pairs.items()}
    for r in range(repeats):
        for side in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
            verifier, drafter = made[side]
            srcs = sources[side]
            start, generated, iterations = time.perf_counter(), 0, 0
            for s in srcs:
                _, stats = gad(verifier, drafter, [s])
                generated, iterations = generated + stats.generated, iterations + stats.row_steps
            ms[side].append(1000 * (time.perf_counter() - start) / len(srcs))
            tokens[side] = generated / max(iterations, 1)
    for side, (v, d) in pairs.items():
        out[side] = {"drafter": str(d), "verifier": str(v), "bytes": dir_bytes(d),
                     "gad_b1_ms": statistics.median(ms[side]), "tokens_per_iteration": tokens[side]}
    return out


def markdown(results: list[dict]) -> str:
    lines = ["| model | size before -> after | encoder ms/sent b1 | e2e ms/sent b1 | sent/s b32 | BLEU | chrF |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        b, a = r["before"], r["after"]
        if "gad_b1_ms" in b:
            lines.append(f"| {r['name']} (GAD with its verifier) | {b['bytes'] / 1e6:.2f} -> {a['bytes'] / 1e6:.2f} MB "
                         f"| | {b['gad_b1_ms']:.2f} -> {a['gad_b1_ms']:.2f} (tokens/iter {b['tokens_per_iteration']:.2f}"
                         f" -> {a['tokens_per_iteration']:.2f}) | | | |")
            continue
        s = r["speedup"]
        lines.append(
            f"| {r['name']} | {b['bytes'] / 1e6:.2f} -> {a['bytes'] / 1e6:.2f} MB "
            f"| {b['enc_ms']:.3f} -> {a['enc_ms']:.3f} ({100 * (1 / s['enc'] - 1):+.0f} %) "
            f"| {b['b1_ms']:.2f} -> {a['b1_ms']:.2f} ({100 * (1 / s['b1'] - 1):+.0f} %) "
            f"| {b['b32_sps']:.0f} -> {a['b32_sps']:.0f} ({100 * (s['b32'] - 1):+.0f} %) "
            f"| {b['bleu']:.2f} -> {a['bleu']:.2f} | {b['chrf']:.2f} -> {a['chrf']:.2f} |")
        if "copy" in r:
            lines.append(f"| (copying the input) | | | | | {r['copy']['bleu']:.2f} | {r['copy']['chrf']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", nargs=3, action="append", default=[], metavar=("NAME", "OLD", "NEW"))
    ap.add_argument("--gec-pair", nargs=3, action="append", default=[], metavar=("NAME", "OLD", "NEW"))
    ap.add_argument("--drafter-pair", nargs=5, action="append", default=[],
                    metavar=("NAME", "VERIFIER_OLD", "VERIFIER_NEW", "OLD", "NEW"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--latency-n", type=int, default=500)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "pruning")
    args = ap.parse_args(argv)
    results = []
    for name, old, new in args.pair:
        results.append(measure_pair(name, Path(old), Path(new), args.threads, args.repeats, args.latency_n, False))
        print(markdown(results[-1:]), flush=True)
    for name, old, new in args.gec_pair:
        results.append(measure_pair(name, Path(old), Path(new), args.threads, args.repeats, args.latency_n, True))
        print(markdown(results[-1:]), flush=True)
    for name, v_old, v_new, old, new in args.drafter_pair:
        results.append(measure_drafter(name, (Path(v_old), Path(v_new)), (Path(old), Path(new)), args.threads,
                                       args.repeats, args.latency_n))
        print(markdown(results[-1:]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "report.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
