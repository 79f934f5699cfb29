"""Issue 32's targets for a general En->De model, met or missed, in one command.

    python -m export.general_report MODEL_DIR [--caption-model models/en-de] [--threads 2]
        [--limit N] [--json FILE]

MODEL_DIR translates, as `fastdec translate` would (Translator, its default strategy: a
lossless one gives greedy's output), the sources of newstest2019 and flores200_devtest
(data/general-en-de) and Multi30k test_2016_flickr; per set it prints sacreBLEU BLEU and
chrF (13a, cased, detokenized output against the raw references: bench/quality.py), the
outputs that loop (a 1-3-gram 4+ times in a row: Translator's stats.looping, from
pyfastdec/repetition_guard.py), those cut at the length limit (stats.hit_max_len) and
those longer than it (each sentence's output ids against decoding/limits.py's limit of
its source ids: score_set). Then each
target of the issue with met or missed. --caption-model (the caption student) is
translated on test_2016_flickr too, for the "within 3 BLEU of it" target; without it that
target is not judged. --limit N scores the first N sentences of each set (dry runs).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.quality import bleu_chrf
from pyfastdec.api import Translator
from pyfastdec.decoding.limits import DEFAULT_MAX_LENGTH_FACTOR, sentence_limit
from pyfastdec.sentence_units import units as text_units

from .data import load_pairs

# (corpus, split) of each scored set, as export.data finds it (the repository's data/).
TEST_SETS = {"newstest2019": ("general-en-de", "newstest2019"),
             "flores200_devtest": ("general-en-de", "flores200_devtest"),
             "test_2016_flickr": ("multi30k", "test_2016_flickr")}
# Issue 32, "Targets": the least BLEU / chrF per set, and the sets that must not loop.
MIN_BLEU = {"newstest2019": 15.0, "flores200_devtest": 12.0}
MIN_CHRF = {"newstest2019": 45.0}
NO_LOOPS = ("newstest2019", "test_2016_flickr")
CAPTION_MARGIN = 3.0  # test_2016_flickr: within this many BLEU of the caption student


def score_set(translator: Translator, pairs: list[tuple[str, str]]) -> dict:
    """Figures of one test set. Each source is split into the units Translator decodes a
    text as (pyfastdec.sentence_units.units: cleaned, split into sentences, a long one cut
    between words), translated as ids and joined again as Translator joins them, so the outputs are
    `translate(sources)`'s and every unit's output length can be held against its own
    limit (decoding/limits.py), outside the decoder that enforces it."""
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    tok = translator.tokenizer
    units, _, _ = text_units(translator, sources, [[] for _ in sources])  # Translator's own units: src ends in EOS
    outs, stats = translator.translate([u.src[:-1] for u in units], return_stats=True)
    parts: list[list[str]] = [[] for _ in sources]
    for u, out in zip(units, outs):
        parts[u.input].append(tok.decode(out))
    outputs = [" ".join(p) for p in parts]
    over = {u.input for u, out in zip(units, outs)
            if len(out) > sentence_limit(len(u.src), None, DEFAULT_MAX_LENGTH_FACTOR)}
    return dict(bleu_chrf(outputs, refs), sentences=len(pairs), looping=len({units[r].input for r in stats.looping}),
                at_limit=len({units[r].input for r in stats.hit_max_len}), over_limit=len(over), outputs=outputs)


def targets(scores: dict, caption_bleu: float | None) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) per issue 32 target; met None: not judged."""
    rows = []
    for name, least in MIN_BLEU.items():
        rows.append((f"{name} BLEU >= {least:g}", f"{scores[name]['bleu']:.2f}", scores[name]["bleu"] >= least))
    for name, least in MIN_CHRF.items():
        rows.append((f"{name} chrF >= {least:g}", f"{scores[name]['chrf']:.2f}", scores[name]["chrf"] >= least))
    flickr = scores["test_2016_flickr"]["bleu"]
    if caption_bleu is None:
        rows.append((f"test_2016_flickr BLEU within {CAPTION_MARGIN:g} of the caption student", f"{flickr:.2f}",
                     None))
    else:
        rows.append((f"test_2016_flickr BLEU >= caption student's {caption_bleu:.2f} - {CAPTION_MARGIN:g}",
                     f"{flickr:.2f}", flickr >= caption_bleu - CAPTION_MARGIN))
    for name in NO_LOOPS:
        rows.append((f"{name} looping outputs = 0", str(scores[name]["looping"]), scores[name]["looping"] == 0))
    over = sum(s["over_limit"] for s in scores.values())
    rows.append(("outputs longer than the length limit = 0 (all sets)", str(over), over == 0))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path, metavar="MODEL_DIR")
    ap.add_argument("--caption-model", type=Path, help="the caption student (models/en-de) for the Multi30k target")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="first N sentences of each set (0: all)")
    ap.add_argument("--json", type=Path, help="also write the figures and outputs here")
    args = ap.parse_args(argv)
    if args.limit < 0:
        ap.error(f"--limit: {args.limit} is negative (expected 0 for every sentence, or a count)")
    translator = Translator(args.model, threads=args.threads)
    scores = {}
    print(f"{args.model} (default strategy {translator.strategy.algo}; length factor {DEFAULT_MAX_LENGTH_FACTOR})")
    print("| set | sentences | BLEU | chrF | looping | at the length limit | over it |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    sets = {name: load_pairs(split, "en", "de", corpus)[:args.limit or None]
            for name, (corpus, split) in TEST_SETS.items()}
    for name, pairs in sets.items():
        s = scores[name] = score_set(translator, pairs)
        print(f"| {name} | {s['sentences']} | {s['bleu']:.2f} | {s['chrf']:.2f} | {s['looping']} | "
              f"{s['at_limit']} | {s['over_limit']} |", flush=True)
    caption = None
    if args.caption_model is not None:
        caption = score_set(Translator(args.caption_model, threads=args.threads), sets["test_2016_flickr"])
        print(f"caption student {args.caption_model} on test_2016_flickr: BLEU {caption['bleu']:.2f}, "
              f"chrF {caption['chrf']:.2f}, looping {caption['looping']}")
    rows = targets(scores, None if caption is None else caption["bleu"])
    print("\n| issue 32 target | measured | |\n| --- | ---: | --- |")
    for target, measured, met in rows:
        print(f"| {target} | {measured} | {'not judged' if met is None else 'met' if met else 'MISSED'} |")
    if args.json:
        args.json.write_text(json.dumps({"model": str(args.model), "sets": scores, "caption": caption,
                                         "targets": rows}, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
