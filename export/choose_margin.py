"""Choose a correction model's edit margin on validation data, and write it into its config.

    python -m export.choose_margin models/uk-gec [--margins 0 0.5 1 1.5 2 2.5 3] [--split val]
        [--threads 1] [--dry-run]

The edit-margin rule (pyfastdec/decoding/source_ngrams.py) keeps the source token unless
the model's top-1 beats it by the margin (nats). Every candidate decodes the UA-GEC
validation sources (greedy with the margin, batch 32; IAD returns the same), and is
scored as GEC is scored (export.gec_score: word-level edits against the reference,
precision, recall, F0.5). The chosen margin is the SMALLEST one that the best (highest
F0.5; ties: higher precision) does not beat significantly, i.e. in fewer than 95 % of
paired bootstrap resamples of the sentences (the one-standard-error rule of model
selection: the simplest candidate within the noise of the best). 0 is plain greedy. The
choice is written as config.json "decoding": {"edit_margin": m}, which `fastdec correct`
and Corrector use by default. BLEU against the reference and the copy baseline are
printed beside it.

Why not simply the best on val: UA-GEC has no dev split; val is the last training
documents, and it favours larger margins than the test documents do. Measured
(2026-11-23, best annotator per sentence on test): the uk-gec shipped in session 6 had val
F0.5 0.392 at margin 0 and 0.410 at the val-best 1.5, but test F0.5 0.362 at 0 and 0.330
at 1.5; the fine-tuned uk-gec, val 0.433 at 0.5 and 0.440 at 1.5, test 0.414 at 0.5 and
0.390 at 1.5. (The rule was adopted after seeing those test figures: a leak, stated in
models/README.md. A larger margin moves decoding further from the model's own
distribution, and on text unlike val that costs more than it saves.)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import sacrebleu

from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding.strategies import batch_runner
from pyfastdec.text import Tokenizer

from . import gec_score
from .data import read_lines
from .rehash import rehash
from .uagec import ensure_corpus

BATCH = 32
RESAMPLES, CONFIDENCE = 2000, 0.95


def sweep(model_dir: Path, sources: list[str], refs: list[str], margins: list[float], threads: int) -> dict:
    """{margin: scores} for greedy decoding with each margin: P/R/F0.5 (gec_score's
    corpus rule, one annotator), the share of sentences changed, BLEU, and each
    sentence's (tp, fp, fn) for the bootstrap."""
    backend = NativeBackend(model_dir, threads=threads)
    tok = Tokenizer(model_dir / "spm.model")
    src = [tok.encode(s) + [backend.tokens["eos"]] for s in sources]
    words = [gec_score.words(s) for s in sources]
    ref_edits = [gec_score.edits(w, gec_score.words(r)) for w, r in zip(words, refs)]  # the same for every margin
    out = {}
    for margin in margins:
        ids, run = [], batch_runner("greedy", backend, edit_margin=margin)
        for start in range(0, len(src), BATCH):
            ids += run(src[start:start + BATCH])[0]
        hyps = [tok.decode(o) for o in ids]
        counts = sentence_counts(words, hyps, ref_edits)
        totals = gec_score.Counts(*(int(x) for x in counts.sum(axis=0)))
        out[margin] = dict(totals.scores(), changed=100.0 * float(((counts[:, 0] + counts[:, 1]) > 0).mean()),
                           bleu=sacrebleu.corpus_bleu(hyps, [refs]).score, counts=counts)
    return out


def sentence_counts(words: list[list[str]], hyps: list[str], ref_edits: list) -> np.ndarray:
    """int64 [sentences, 3]: each sentence's (tp, fp, fn) edits against the reference's
    (a sentence with tp + fp > 0 is one the system changed)."""
    rows = []
    for src, hyp, ref in zip(words, hyps, ref_edits):
        c = gec_score.sentence_counts(gec_score.edits(src, gec_score.words(hyp)), ref)
        rows.append((c.tp, c.fp, c.fn))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def f05(totals: np.ndarray) -> np.ndarray:
    """F0.5 of (tp, fp, fn) totals [..., 3], with gec_score's conventions (P = 1 without
    system edits, R = 1 without reference edits)."""
    tp, fp, fn = (totals[..., i].astype(np.float64) for i in range(3))
    p = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 1.0)
    r = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), 1.0)
    return np.where(p + r > 0, 1.25 * p * r / np.maximum(0.25 * p + r, 1e-12), 0.0)


def best_margin(result: dict) -> float:
    return max(result, key=lambda m: (result[m]["f0.5"], result[m]["precision"]))


def win_rates(result: dict, of: float, seed: int = 0) -> dict:
    """{margin: share of paired bootstrap resamples in which margin `of`'s F0.5 beats it}."""
    picks = np.random.default_rng(seed).integers(0, len(result[of]["counts"]),
                                                 size=(RESAMPLES, len(result[of]["counts"])))
    top = f05(result[of]["counts"][picks].sum(axis=1))
    return {m: float((top > f05(row["counts"][picks].sum(axis=1))).mean()) for m, row in result.items()}


def choose(result: dict) -> float:
    """The smallest margin the best one does not significantly beat (module docstring)."""
    best = best_margin(result)
    beaten = win_rates(result, best)
    return min(m for m in result if beaten[m] < CONFIDENCE)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--margins", type=float, nargs="+", default=[0, 0.5, 1, 1.5, 2, 2.5, 3],
                    help="candidates (0, plain greedy, is always one)")
    ap.add_argument("--split", default="val")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dry-run", action="store_true", help="report only; leave config.json unchanged")
    args = ap.parse_args(argv)
    data = ensure_corpus()
    sources, refs = read_lines(data / f"{args.split}.src.gz"), read_lines(data / f"{args.split}.tgt.gz")
    margins = sorted({0.0, *map(float, args.margins)})
    result = sweep(args.model_dir, sources, refs, margins, args.threads)
    best = best_margin(result)
    beaten = win_rates(result, best)
    copy_bleu = sacrebleu.corpus_bleu(sources, [refs]).score
    print(f"{len(sources)} UA-GEC {args.split} sentences; copying the source: BLEU {copy_bleu:.2f}")
    for margin, row in result.items():
        print(f"  margin {margin:4.2f}: P {row['precision']:.3f} R {row['recall']:.3f} F0.5 {row['f0.5']:.3f} "
              f"BLEU {row['bleu']:.2f}, {row['changed']:.1f}% of sentences changed; below margin {best:g}'s F0.5 in "
              f"{100 * beaten[margin]:.1f}% of {RESAMPLES} paired bootstrap resamples")
    chosen = choose(result)
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
