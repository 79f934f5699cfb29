"""Every decoding strategy at batch 1 with its default policy on the shipped models, on
the kernels this process runs (FASTDEC_ISA), 1 thread (issue 31: do the drafting
strategies draft, and beat greedy, once verification is cheap on AMX?).

    python -m bench.amx_strategies [--sentences 100] [--out FILE.json]
    FASTDEC_ISA=vnni python -m bench.amx_strategies ...    # the same on the VNNI kernels

Runs (model, algorithms): models/en-de with its heads and its drafter (greedy, the
default strategy = blockwise, gad), models/uk-gec on UA-GEC test (greedy, iad; skipped
with a note when the corpus is missing), models/en-de-big with en-de-little (greedy,
bild). Each algorithm decodes every sentence alone (batch 1) after one warm-up
sentence; the figure is milliseconds per sentence over the set. Every output is checked
equal to greedy's (these strategies are lossless), and each run reports the drafts'
mean accepted tokens per iteration (0: the policy did not draft).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def runs(sentences: int):
    """(label, Translator factory, algorithms, sources); the first algorithm is greedy."""
    from bench.data import DataMissing, multi30k_test, uagec_test
    from pyfastdec import Corrector, Translator

    en = multi30k_test(sentences).sources
    yield "en-de", lambda: Translator(threads=1), ["greedy", None, "gad"], en
    try:
        uk = uagec_test(sentences).sources
        yield "uk-gec", lambda: Corrector(threads=1), ["greedy", "iad"], uk
    except (DataMissing, ImportError) as err:  # no corpus, or no sacrebleu to extract it
        print(f"uk-gec skipped: {err}")
    big, little = ROOT / "models" / "en-de-big", ROOT / "models" / "en-de-little"
    if big.is_dir() and little.is_dir():
        yield "en-de-big", lambda: Translator(big, drafter=little, threads=1), ["greedy", "bild"], en


def time_algo(translator, algo, sources):
    translator.translate(sources[:1], algo=algo, batch_size=1)  # warm-up: buffers, pages
    outputs, accepted, seconds = [], [], 0.0
    for text in sources:
        start = time.perf_counter()
        out, stats = translator.translate([text], algo=algo, batch_size=1, return_stats=True)
        seconds += time.perf_counter() - start
        outputs += out
        accepted.append(stats.mean_accepted)
    return outputs, 1e3 * seconds / len(sources), sum(accepted) / len(accepted)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import pyfastdec

    info = pyfastdec.cpu_info()
    print(f"CPU: {info['brand']}; kernels: {info['isa']} (int8: {info['kernels']['int8_gemm']}); 1 thread, batch 1")
    print("| model | algo | ms / sentence | x greedy | = greedy | accepted / iteration |")
    print("|---|---|---:|---:|---|---:|")
    report = {"cpu": info, "sentences": args.sentences, "rows": []}
    same_everywhere = True
    for label, make, algos, sources in runs(args.sentences):
        translator = make()
        greedy_out, greedy_ms = None, None
        for algo in algos:
            outputs, ms, accepted = time_algo(translator, algo, sources)
            name = algo or translator.strategy.algo
            if greedy_out is None:
                greedy_out, greedy_ms = outputs, ms
            same = outputs == greedy_out
            same_everywhere &= same
            print(f"| {label} | {name} | {ms:.2f} | {greedy_ms / ms:.2f} | {'yes' if same else 'NO'} | {accepted:.2f} |",
                  flush=True)
            report["rows"].append({"model": label, "algo": name, "ms": ms, "speedup": greedy_ms / ms,
                                   "same_as_greedy": same, "mean_accepted": accepted})
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    if not same_everywhere:
        raise SystemExit("bench.amx_strategies: a lossless strategy's output differs from greedy's")
    return report


if __name__ == "__main__":
    main()
