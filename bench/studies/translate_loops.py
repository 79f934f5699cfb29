"""Would a loop guard like the Corrector's help a Translator? BLEU/chrF and looping
outputs on a translation test set, greedy under the default length limit, then:

- revert: the Corrector's repetition guard as it is (repetition_guard.LoopCheck.loops:
  an n-gram 3+ times in a row, more than the source repeats it): the output becomes its
  source, untranslated;
- cut: the same loops, but the output is cut before the loop's third copy;
- no-repeat-4 / penalty-1.2: CTranslate2's decoding rules (no_repeat_ngram_size=4,
  repetition_penalty=1.2), which change every output, looping or not.

    python -m bench.studies.translate_loops [--model models/en-de] [--limit N]

Looping: an output that repeats a 1-3-gram 4+ times in a row (DecodeStats.looping).
"""
from __future__ import annotations

import argparse

from bench.data import multi30k_test
from bench.quality import bleu_chrf
from pyfastdec.api import Translator
from pyfastdec.repetition_guard import LOOP_COPIES, MAX_N


def cut_loop(out: list[int]) -> list[int]:
    """out cut before the third copy of its first n-gram (n <= MAX_N) repeated LOOP_COPIES
    times in a row: one copy of the loop kept, as the sentence meant it, plus one."""
    for i in range(len(out)):
        for n in range(1, MAX_N + 1):
            copies = [out[i + k * n:i + (k + 1) * n] for k in range(LOOP_COPIES)]
            if len(copies[-1]) == n and all(c == copies[0] for c in copies):
                return out[:i + 2 * n]
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/en-de")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    test = multi30k_test(args.limit)
    t = Translator(args.model, threads=1)
    tok = t._target_tokenizer()
    src = [t.tokenizer.encode(s) for s in test.sources]
    check = t._loops()

    def row(name, outs, changed):
        q = bleu_chrf([tok.decode(o) for o in outs], test.references)
        looping = sum(check.repeats(o) for o in outs)
        print(f"{name:12s} BLEU {q['bleu']:.2f} chrF {q['chrf']:.2f}  looping outputs {looping}  "
              f"outputs changed from greedy {changed}", flush=True)

    greedy, stats = t.translate(src, algo="greedy", return_stats=True)
    print(f"{args.model} on {test.name}, {len(src)} sentences; greedy cut at the length limit: "
          f"{len(stats.hit_max_len)}")
    row("greedy", greedy, 0)
    loops = [check.loops(s, o) for s, o in zip(src, greedy)]
    row("revert", [s if loop else o for s, o, loop in zip(src, greedy, loops)], sum(loops))
    cut = [cut_loop(o) if loop else o for o, loop in zip(greedy, loops)]
    row("cut", cut, sum(a != b for a, b in zip(cut, greedy)))
    for name, options in (("no-repeat-4", {"no_repeat_ngram_size": 4}), ("penalty-1.2", {"repetition_penalty": 1.2})):
        outs = t.translate(src, algo="greedy", **options)
        row(name, outs, sum(a != b for a, b in zip(outs, greedy)))


if __name__ == "__main__":
    main()
