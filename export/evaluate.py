"""BLEU / chrF of a model directory with the PyTorch reference decoder.

    python -m export.evaluate --model models/teacher-en-de --src en --tgt de --split test_2016_flickr
    python -m export.evaluate --model models/teacher-en-de-int8 ... --simulate-int8

--simulate-int8 rounds every quantized linear's input to its calibrated int8 grid (the
weights of an int8 directory are int8 already), so the score shows what int8 costs
before any engine is involved. sacreBLEU defaults (13a, cased) against the raw reference.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import sacrebleu
import torch

from .data import load_pairs
from .decode import beam_search, greedy
from .vocab import load_vocab
from .writer import read_model_dir


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--src", required=True)
    ap.add_argument("--tgt", required=True)
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--corpus", default="multi30k")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--simulate-int8", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hyps", type=Path, help="also write the translations here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, spm_file = read_model_dir(args.model, simulate_int8=args.simulate_int8)
    sp = load_vocab(spm_file)
    pairs = load_pairs(args.split, args.src, args.tgt, args.corpus)
    ids = [sp.encode(s) + [model.eos] for s, _ in pairs]
    t0 = time.time()
    out = greedy(model, ids) if args.beam == 1 else beam_search(model, ids, beam=args.beam)
    hyps = [sp.decode(h) for h in out]
    refs = [t for _, t in pairs]
    result = {"model": str(args.model), "split": args.split, "beam": args.beam, "simulate_int8": args.simulate_int8,
              "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
              "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2), "seconds": round(time.time() - t0, 1)}
    if args.hyps:
        args.hyps.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
