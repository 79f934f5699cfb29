"""How long natural outputs are against their sources: the data behind the default
relative length limit (pyfastdec/decoding/limits.py, DEFAULT_MAX_LENGTH_FACTOR).

    python -m bench.studies.length_factor [--models en-de,en-de-attn,en-de-big,uk-gec] [--limit N]

For each shipped model on its test set (Multi30k test_2016_flickr En->De for the en-de
models, UA-GEC test for uk-gec), S = source ids + EOS (what the limit is computed from)
and T = target ids without EOS (what the limit counts), for the references (the target
tokenizer's ids) and for greedy outputs decoded under an absolute cap only (CAP tokens,
no relative limit). An output that reaches the cap never ended, and one that repeats a
1-3-gram 4+ times in a row (DecodeStats.looping) is a loop even if it ends: neither is a
natural output. Printed per set: the largest T/S of each, for every candidate rule
floor(F * S) + C how many references and natural greedy outputs it would cut (those
longer than it), and the natural outputs longer than the default rule, to read.
"""
from __future__ import annotations

import argparse
import math

from pyfastdec.decoding.limits import default_max_len

CAP = 400  # absolute output limit of the study: far above any natural output here
RULES = [(f, c) for f in (1.0, 1.5, 2.0, 2.5, 3.0) for c in (0, 5, 10)]
SETS = {"en-de": "multi30k", "en-de-attn": "multi30k", "en-de-big": "multi30k", "uk-gec": "uagec"}


def lengths(model: str, limit: int | None):
    """(S, reference T, greedy T, greedy loops (cut at CAP or repeating), greedy text)
    per sentence of the model's test set."""
    from bench.data import multi30k_test, uagec_test
    from pyfastdec.api import Corrector, Translator

    test = (multi30k_test if SETS[model] == "multi30k" else uagec_test)(limit)
    t = (Corrector if model == "uk-gec" else Translator)(f"models/{model}", threads=1)
    src = [t.tokenizer.encode(s)[:t.max_source_len - 1] for s in test.sources]
    refs = [t._target_tokenizer().encode(r) for r in test.references]
    outs, stats = t.translate(src, algo="greedy", return_stats=True, max_decoding_length=CAP,
                              max_length_factor=None, repetition_guard=False if model == "uk-gec" else None)
    loops = set(stats.hit_max_len) | set(stats.looping)
    text = [t._target_tokenizer().decode(o) for o in outs]
    return [len(s) + 1 for s in src], [len(r) for r in refs], [len(o) for o in outs], loops, text, len(stats.hit_max_len)


def report(model: str, limit: int | None) -> None:
    S, ref, out, loops, text, capped = lengths(model, limit)
    natural = [i for i in range(len(S)) if i not in loops]
    print(f"{model}: {len(S)} sentences, source ids + EOS mean {sum(S) / len(S):.1f} max {max(S)}; "
          f"greedy outputs reaching the {CAP}-token cap: {capped}, looping (capped or repeating): {len(loops)}")
    for name, T, rows in (("references", ref, range(len(S))), ("greedy (natural)", out, natural)):
        ratio = max(rows, key=lambda i: T[i] / S[i])
        print(f"  {name}: max T/S {T[ratio] / S[ratio]:.2f} (S={S[ratio]}, T={T[ratio]}); "
              f"max T - 2S {max(T[i] - 2 * S[i] for i in rows)}")
    print("  rule floor(F*S)+C: references cut / natural greedy outputs cut")
    print("  " + "  ".join(f"{f:g}S+{c}: {sum(ref[i] > math.floor(f * S[i]) + c for i in range(len(S)))}/"
                           f"{sum(out[i] > math.floor(f * S[i]) + c for i in natural)}" for f, c in RULES),
          flush=True)
    for i in natural:
        if out[i] > default_max_len(S[i]):
            print(f"  natural greedy output over the default limit: S={S[i]} T={out[i]}: {text[i][:160]}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(SETS))
    parser.add_argument("--limit", type=int, default=None, help="first N sentences of each set")
    args = parser.parse_args(argv)
    for model in args.models.split(","):
        report(model, args.limit)


if __name__ == "__main__":
    main()
