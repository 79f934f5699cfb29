"""Choose a BiLD little model's thresholds on validation data and write them into its
config.json "decoding" (the defaults of `fastdec translate --algo bild / bild-lossy`).

    python -m export.choose_bild models/en-de-big models/en-de-little [--limit 500]
        [--fallbacks 0.3 0.5 0.7 0.9] [--rollbacks 0.5 1 2 3] [--threads 1] [--dry-run]

Every candidate decodes the first --limit Multi30k val sources at batch 1 (the latency
setting BiLD is for), one thread. Timing: --repeats rounds, each timing one pass of every
candidate and of the big model's greedy decoding in turn; each keeps its fastest pass,
so a burst of load on the machine does not decide the choice (measured here: single
passes of the same candidate differed by up to 1.5x).
- fallback (lossless BiLD, rollback 0): the fastest; the output is the big model's
  greedy output whatever it is (checked here).
- lossy_fallback, rollback (bild-lossy): the fastest pair whose val BLEU is within
  --bleu-drop (0.3) of the big model's greedy BLEU; if none is, the lossless choice with
  rollback 0.
"""
from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import sacrebleu

from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.strategies import batch_runner
from pyfastdec.model_dir import ModelDir, check_shared_encoder
from pyfastdec.text import Tokenizer

from .choose_block import timed
from .data import load_pairs
from .rehash import rehash


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("big", type=Path)
    ap.add_argument("little", type=Path)
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--fallbacks", type=float, nargs="+", default=[0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
                    help="lossless BiLD's candidates")
    ap.add_argument("--lossy-fallbacks", type=float, nargs="+", default=[0.3, 0.5, 0.7, 0.9])
    ap.add_argument("--rollbacks", type=float, nargs="+", default=[0.5, 1.0, 1.5, 2.0, 3.0])
    ap.add_argument("--bleu-drop", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true", help="print the choice, do not write it")
    args = ap.parse_args(argv)
    check_shared_encoder(ModelDir.load(args.big), ModelDir.load(args.little), "little model")
    big = NativeBackend(args.big, threads=args.threads)
    little = NativeBackend(args.little, threads=args.threads)
    tok = Tokenizer(args.big / "spm.model")
    pairs = load_pairs("val", "en", "de")[:args.limit]
    sources = [tok.encode(s) + [big.tokens["eos"]] for s, _ in pairs]
    refs = [[t for _, t in pairs]]

    def bleu(outs) -> float:
        return sacrebleu.corpus_bleu([tok.decode(o) for o in outs], refs).score

    # policy=False: the thresholds alone decide when the little model drafts
    runs = {"greedy": batch_runner("greedy", big)}
    runs.update({("lossless", f): batch_runner("bild", big, little, policy=False, fallback=f) for f in args.fallbacks})
    runs.update({("lossy", f, r): batch_runner("bild-lossy", big, little, policy=False, fallback=f, rollback=r)
                 for f, r in itertools.product(args.lossy_fallbacks, args.rollbacks)})
    outputs, fastest = {}, {}
    for round_ in range(args.repeats):
        for name, fn in runs.items():
            seconds, outs, _ = timed(fn, sources)  # batch 1
            outputs.setdefault(name, outs)
            fastest[name] = min(fastest.get(name, seconds), seconds)
        print(f"round {round_ + 1}/{args.repeats} done", flush=True)
    reference, greedy_s = outputs["greedy"], fastest["greedy"]
    greedy_bleu = bleu(reference)
    print(f"big greedy: BLEU {greedy_bleu:.2f}, {1000 * greedy_s / len(sources):.3f} ms/sentence", flush=True)
    lossless = {}
    for f in args.fallbacks:
        if outputs[("lossless", f)] != reference:
            raise SystemExit(f"lossless BiLD at fallback {f} differs from greedy: a bug, not a threshold")
        lossless[f] = seconds = fastest[("lossless", f)]
        print(f"bild fallback {f}: {1000 * seconds / len(sources):.3f} ms/sentence ({greedy_s / seconds:.2f}x greedy)",
              flush=True)
    best_fallback = min(lossless, key=lossless.get)
    lossy = {}
    for f, r in itertools.product(args.lossy_fallbacks, args.rollbacks):
        seconds = fastest[("lossy", f, r)]
        lossy[(f, r)] = (bleu(outputs[("lossy", f, r)]), seconds)
        print(f"bild-lossy fallback {f} rollback {r}: BLEU {lossy[(f, r)][0]:.2f}, "
              f"{1000 * seconds / len(sources):.3f} ms/sentence ({greedy_s / seconds:.2f}x greedy)", flush=True)
    within = {k: v for k, v in lossy.items() if v[0] >= greedy_bleu - args.bleu_drop}
    lossy_choice = min(within, key=lambda k: within[k][1]) if within else (best_fallback, 0.0)
    decoding = {"fallback": best_fallback, "lossy_fallback": lossy_choice[0], "rollback": lossy_choice[1]}
    report = {"greedy": {"bleu": greedy_bleu, "seconds": greedy_s},
              "lossless": {str(f): s for f, s in lossless.items()},
              "lossy": {f"{f},{r}": v for (f, r), v in lossy.items()}, "chosen": decoding,
              "sentences": len(sources), "threads": args.threads}
    print("chosen:", json.dumps(decoding))
    if not args.dry_run:
        config_path = args.little / "config.json"
        config = json.loads(config_path.read_text())
        config["decoding"] = decoding
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        rehash(args.little)
    return report


if __name__ == "__main__":
    main()
