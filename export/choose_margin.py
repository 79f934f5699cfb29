"""Choose a correction model's edit margin on validation data, and write it into its config.

    python -m export.choose_margin models/uk-gec [--margins 0 0.5 1 1.5 2 2.5 3] [--split val]
        [--threads 1] [--dry-run]

The edit-margin rule (pyfastdec/decoding/source_ngrams.py) keeps the source token unless
the model's top-1 beats it by the margin (nats). Every candidate decodes the UA-GEC
validation sources (greedy with the margin, batch 32; IAD returns the same), and is
scored as GEC is scored (export.gec_score: word-level edits against the reference,
precision, recall, F0.5); the margin with the highest F0.5 wins (ties: higher precision),
and is written as config.json "decoding": {"edit_margin": m}, which `fastdec correct`
and Corrector use by default. BLEU against the reference and the copy baseline are
printed beside it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import sacrebleu

from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import greedy
from pyfastdec.text import Tokenizer

from . import gec_score
from .data import read_lines
from .rehash import rehash
from .uagec import ensure_corpus

BATCH = 32


def sweep(model_dir: Path, sources: list[str], refs: list[str], margins: list[float], threads: int) -> dict:
    """{margin: scores} for greedy decoding with each margin."""
    backend = NativeBackend(model_dir, threads=threads)
    tok = Tokenizer(model_dir / "spm.model")
    src = [tok.encode(s) + [backend.tokens["eos"]] for s in sources]
    out = {}
    for margin in margins:
        ids = []
        for start in range(0, len(src), BATCH):
            ids += greedy(backend, src[start:start + BATCH], edit_margin=margin)[0]
        hyps = [tok.decode(o) for o in ids]
        edits = gec_score.score(sources, hyps, [refs])
        out[margin] = dict(edits["annotator 1"], changed=edits["sentences changed %"],
                           bleu=sacrebleu.corpus_bleu(hyps, [refs]).score)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--margins", type=float, nargs="+", default=[0, 0.5, 1, 1.5, 2, 2.5, 3])
    ap.add_argument("--split", default="val")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true", help="report only; leave config.json unchanged")
    args = ap.parse_args(argv)
    data = ensure_corpus()
    sources, refs = read_lines(data / f"{args.split}.src.gz"), read_lines(data / f"{args.split}.tgt.gz")
    result = sweep(args.model_dir, sources, refs, args.margins, args.threads)
    copy_bleu = sacrebleu.corpus_bleu(sources, [refs]).score
    print(f"{len(sources)} UA-GEC {args.split} sentences; copying the source: BLEU {copy_bleu:.2f}")
    for margin, row in result.items():
        print(f"  margin {margin:4.2f}: P {row['precision']:.3f} R {row['recall']:.3f} F0.5 {row['f0.5']:.3f} "
              f"BLEU {row['bleu']:.2f}, {row['changed']:.1f}% of sentences changed")
    chosen = max(result, key=lambda m: (result[m]["f0.5"], result[m]["precision"]))
    print(f"chosen edit margin: {chosen}")
    if not args.dry_run:
        config_path = args.model_dir / "config.json"
        config = json.loads(config_path.read_text())
        config["decoding"] = dict(config.get("decoding", {}), edit_margin=chosen)
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        rehash(args.model_dir)  # the config's checksum must cover the new field
        print(f"{config_path}: decoding.edit_margin = {chosen}")


if __name__ == "__main__":
    main()
