"""Edit-level scoring of grammatical error correction, as GEC is measured (M2 / ERRANT
style): precision, recall and F0.5 of a system's word-level edits against each
annotator's edits, and against the better annotator per sentence.

    python -m export.gec_score --source test.src.gz --hyp out.txt --ref test.tgt.gz --ref test.tgt2.gz

- Words: a word is a run of letters/digits, with inner apostrophes (м'ясо, п’ять, мʼята)
  and hyphens (будь-який) kept inside it; every other non-space character is a word of its
  own, so punctuation edits count like any other. Ukrainian needs no more: ERRANT's
  English rules (spaCy lemmas, POS-based merging) do not apply, and no maintained scorer
  with Ukrainian support exists on the registry.
- Edits: a minimum-cost word alignment of source to corrected text (Levenshtein:
  substitution, insertion and deletion cost 1), and every maximal run of non-matching
  alignment steps is one edit `(start, end, replacement words)` over source positions
  [start, end). A system edit is a true positive when an annotator made exactly the same
  edit (span and words). The system's and the annotators' edits are extracted by the same
  rule from the same source, so they agree on granularity.
- Scores: P = TP / (TP + FP), R = TP / (TP + FN), F0.5 = 1.25 P R / (0.25 P + R) over the
  corpus totals; with no system edit P = 1, with no reference edit R = 1 (ERRANT's
  convention), so copying the input scores P = 1, R = 0, F0.5 = 0.
- Several annotators: per sentence, the annotator whose counts added to the running
  totals give the highest F0.5 (ties: more TP, then fewer FP, then fewer FN, then the
  earlier annotator): the M2 scorer's and ERRANT's rule.
"""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

WORD = re.compile(r"\w+(?:['’ʼ\-]\w+)*|[^\w\s]")

Edit = tuple[int, int, tuple[str, ...]]  # source span [start, end), replacement words


def words(text: str) -> list[str]:
    return WORD.findall(text)


def _alignment(src: list[str], tgt: list[str]) -> list[tuple[str, int, int]]:
    """Minimum-cost alignment as steps (op, i, j): op 'M' match src[i] = tgt[j], 'S'
    substitute, 'D' delete src[i], 'I' insert tgt[j]. Ties prefer the match, then the
    substitution, then the deletion, so equal-cost alignments come out the same way."""
    n, m = len(src), len(tgt)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        cost[i][0] = i
    for j in range(m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        row, prev, s = cost[i], cost[i - 1], src[i - 1]
        for j in range(1, m + 1):
            diag = prev[j - 1] + (0 if s == tgt[j - 1] else 1)
            row[j] = min(diag, prev[j] + 1, row[j - 1] + 1)
    steps = []
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (0 if src[i - 1] == tgt[j - 1] else 1):
            steps.append(("M" if src[i - 1] == tgt[j - 1] else "S", i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            steps.append(("D", i - 1, j))
            i -= 1
        else:
            steps.append(("I", i, j - 1))
            j -= 1
    return steps[::-1]


def edits(src: list[str], tgt: list[str]) -> list[Edit]:
    """The edits turning src into tgt: maximal runs of non-matching alignment steps."""
    head = 0  # common prefix and suffix need no alignment (most of a GEC sentence)
    while head < min(len(src), len(tgt)) and src[head] == tgt[head]:
        head += 1
    tail = 0
    while tail < min(len(src), len(tgt)) - head and src[-1 - tail] == tgt[-1 - tail]:
        tail += 1
    mid_src, mid_tgt = src[head:len(src) - tail], tgt[head:len(tgt) - tail]
    out: list[Edit] = []
    run: list[tuple[str, int, int]] = []

    def close() -> None:
        if run:
            start = next((i for op, i, _ in run if op != "I"), None)
            if start is None:  # pure insertion: an empty span where it goes
                start = end = run[0][1]
            else:
                end = max(i for op, i, _ in run if op != "I") + 1
            repl = tuple(mid_tgt[j] for op, _, j in run if op != "D")
            out.append((head + start, head + end, repl))
            run.clear()

    for step in _alignment(mid_src, mid_tgt):
        if step[0] == "M":
            close()
        else:
            run.append(step)
    close()
    return out


def apply_edits(src: list[str], found: list[Edit]) -> list[str]:
    """src with the edits applied (they do not overlap): the inverse of `edits`."""
    out, at = [], 0
    for start, end, repl in sorted(found, key=lambda e: (e[0], e[1])):
        out += src[at:start] + list(repl)
        at = end
    return out + src[at:]


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn)

    def scores(self, beta: float = 0.5) -> dict:
        p = self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0
        r = self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0
        b2 = beta * beta
        f = (1 + b2) * p * r / (b2 * p + r) if p + r else 0.0
        return {"precision": p, "recall": r, f"f{beta:g}": f, "tp": self.tp, "fp": self.fp, "fn": self.fn}


def sentence_counts(hyp: list[Edit], ref: list[Edit]) -> Counts:
    h, r = set(hyp), set(ref)
    return Counts(len(h & r), len(h - r), len(r - h))


def _f05(c: Counts) -> float:
    return c.scores()["f0.5"]


def score(sources: list[str], hyps: list[str], refs: list[list[str]]) -> dict:
    """Corpus scores of hyps (one per source) against each annotator in refs (each a list
    aligned with sources) and against the better annotator per sentence; plus the share
    of sentences the system changed (at word level)."""
    for k, ref in enumerate(refs):
        if len(ref) != len(sources):
            raise ValueError(f"reference {k + 1} has {len(ref)} lines, the source has {len(sources)}")
    if len(hyps) != len(sources):
        raise ValueError(f"the system output has {len(hyps)} lines, the source has {len(sources)}")
    per_ref = [Counts() for _ in refs]
    best = Counts()
    changed = 0
    for i, source in enumerate(sources):
        src = words(source)
        hyp_edits = edits(src, words(hyps[i]))
        changed += bool(hyp_edits)
        options = []
        for k, ref in enumerate(refs):
            c = sentence_counts(hyp_edits, edits(src, words(ref[i])))
            per_ref[k] = per_ref[k] + c
            options.append(c)
        if options:  # M2 / ERRANT: the annotator that best raises the running F0.5
            pick = max(range(len(options)), key=lambda k: (_f05(best + options[k]), options[k].tp, -options[k].fp,
                                                           -options[k].fn, -k))
            best = best + options[pick]
    out = {f"annotator {k + 1}": c.scores() for k, c in enumerate(per_ref)}
    if len(refs) > 1:
        out["best annotator per sentence"] = best.scores()
    out["sentences changed %"] = 100.0 * changed / max(len(sources), 1)
    return out


def read_text(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, required=True)
    ap.add_argument("--hyp", type=Path, required=True)
    ap.add_argument("--ref", type=Path, action="append", required=True, help="once per annotator")
    args = ap.parse_args(argv)
    try:
        result = score(read_text(args.source), read_text(args.hyp), [read_text(r) for r in args.ref])
    except ValueError as err:
        raise SystemExit(f"gec_score: {err}") from None
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
