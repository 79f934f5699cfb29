"""A correction that loops comes back as its input (Corrector's repetition guard).

A small correction model sometimes falls into a loop: "після назву після назву після
назву", "він він він він". Such an output is never a correction, and it is where most
of the shipped uk-gec's false positives came from (a sample of 40 false positives in
session 7: 14 were loops or mangled words). A correction tool must not make text worse,
so a unit whose output repeats some n-gram (n <= MAX_N) of words or of pieces
LOOP_COPIES or more times in a row, and more times in a row than its source repeats
that n-gram, comes back unchanged: its output becomes its source ids, which copy-through
then writes as the user wrote them.

Words are the sentencepiece pieces from one word-start piece ("▁...") to the next, so
punctuation glued to a word is part of it ("він," "він," "він,"); pieces catch a word
mangled into a loop ("рецензентішшогоогоого"). A source that itself repeats ("дуже
дуже дуже") allows its output as many copies of that n-gram. Measured on UA-GEC val and
test (models/README.md, uk-gec): the word rule was fixed and checked on val first, the
piece rule added after both.
"""
from __future__ import annotations

from typing import Callable, Sequence

MAX_N = 3  # word n-grams checked for loops: 1, 2 and 3 words
LOOP_COPIES = 3  # copies in a row that make a loop ("a a a", "a b a b a b")


def words(ids: Sequence[int], starts_word: Callable[[int], bool]) -> list[tuple[int, ...]]:
    """ids grouped into words: a new word at each piece that starts one."""
    out: list[tuple[int, ...]] = []
    current: list[int] = []
    for t in ids:
        if current and starts_word(t):
            out.append(tuple(current))
            current = []
        current.append(t)
    if current:
        out.append(tuple(current))
    return out


def runs(seq: Sequence, max_n: int = MAX_N) -> dict[tuple, int]:
    """Per n-gram (n <= max_n) that repeats right after itself in seq, the most copies
    of it in a row."""
    found: dict[tuple, int] = {}
    for n in range(1, max_n + 1):
        for start in range(n):  # runs of n-grams aligned at start, start + n, ...
            copies = 1
            for i in range(start + n, len(seq) - n + 1, n):
                if seq[i:i + n] == seq[i - n:i]:
                    copies += 1
                    gram = tuple(seq[i:i + n])
                    found[gram] = max(found.get(gram, 0), copies)
                else:
                    copies = 1
    return found


def _loops_in(source: Sequence, output: Sequence) -> bool:
    allowed = runs(source)
    return any(copies >= LOOP_COPIES and copies > allowed.get(gram, 1) for gram, copies in runs(output).items())


def loops(source: Sequence[int], output: Sequence[int], starts_word: Callable[[int], bool]) -> bool:
    """Whether output repeats some n-gram LOOP_COPIES+ times in a row, and more times in
    a row than source repeats that n-gram: n-grams of words, or of pieces (a word mangled
    into a loop: "рецензентішшогоогоого")."""
    return _loops_in(words(source, starts_word), words(output, starts_word)) or _loops_in(source, output)
