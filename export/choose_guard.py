"""The repetition guard of a correction model, checked on validation data.

    python -m export.choose_guard MODEL_DIR [--split val] [--threads 1]

The guard (pyfastdec/repetition_guard.py) returns a correction that loops as its source;
Corrector applies it by default. This decodes the UA-GEC split with
`Corrector(MODEL_DIR).correct(lines)` (the model's edit margin, copy-through) with the
guard on and off, scores both as GEC is scored (export.gec_score, one annotator) and
says which is better on F0.5. config.json has no field for the guard, so the choice is a
report: a model for which "off" wins needs a Corrector default of its own before it ships.
"""
from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

from . import gec_score
from .data import read_lines
from .uagec import ensure_corpus


def guard_scores(model_dir: Path, sources: list[str], refs: list[str], threads: int = 1) -> dict:
    """{"on": scores, "off": scores}; scores: gec_score.score's dict plus 'reverted' (sentences the guard restored)."""
    from pyfastdec import Corrector

    corrector = Corrector(model_dir, threads=threads)
    with warnings.catch_warnings():  # a long sentence is cut into parts, and warned about, the same for both
        warnings.simplefilter("ignore")
        outs = {name: corrector.correct(sources, repetition_guard=on) for name, on in (("on", True), ("off", False))}
    result = {}
    for name, hyps in outs.items():
        scored = gec_score.score(sources, hyps, [refs])
        result[name] = dict(scored["annotator 1"], changed=scored["sentences changed %"])
    result["on"]["reverted"] = sum(a != b and a == s for a, b, s in zip(outs["on"], outs["off"], sources))
    return result


def choose(result: dict) -> bool:
    """Guard on unless switching it off scores a higher F0.5 (ties keep it on)."""
    return not result["off"]["f0.5"] > result["on"]["f0.5"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--split", default="val")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report", type=Path, help="also write the scores and the choice as JSON here")
    args = ap.parse_args(argv)
    data = ensure_corpus()
    sources, refs = read_lines(data / f"{args.split}.src.gz"), read_lines(data / f"{args.split}.tgt.gz")
    result = guard_scores(args.model_dir, sources, refs, args.threads)
    for name in ("on", "off"):
        r = result[name]
        print(f"repetition guard {name:3}: P {r['precision']:.3f} R {r['recall']:.3f} F0.5 {r['f0.5']:.3f}"
              + (f" ({r['reverted']} sentences reverted)" if name == "on" else ""))
    on = choose(result)
    print(f"repetition guard on {args.split}: {'on (the Corrector default)' if on else 'OFF wins: the default (on) costs F0.5'}")
    if args.report:
        args.report.write_text(json.dumps({"split": args.split, "guard": on, **result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
