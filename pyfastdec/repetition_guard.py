"""A correction that loops comes back as its input (Corrector's repetition guard).

A small correction model sometimes falls into a loop: "після назву після назву після
назву", "він він він він". Such an output is never a correction, and it is where most
of the shipped uk-gec's false positives came from (a sample of 40 false positives in
session 7: 14 were loops or mangled words). A correction tool must not make text worse,
so a unit (a sentence, or a part of one too long for the model) whose output repeats
some n-gram (n <= MAX_N) LOOP_COPIES or more times in a row, and more times in a row than
its source repeats that n-gram, comes back unchanged: its output becomes its source ids,
which copy-through then writes as the user wrote them.

Three views of the ids are checked, each against the same view of the source:
- words (the pieces from one word-start piece "▁..." to the next) without punctuation:
  "ні ні ні" corrected to "ні, ні, ні," repeats no more than its source does;
- pieces without punctuation: a word mangled into a loop ("рецензентішшогоогоого");
- n-grams of punctuation pieces only ("::::::::", ". . . . .").
A source that itself repeats ("дуже дуже дуже") allows its output as many copies of that
n-gram. Measured on UA-GEC val and test (models/README.md, uk-gec): the word rule was
fixed and checked on val first, the piece rule added after both.

The same views count looping translations in the statistics (LoopCheck.repeats: an
n-gram REPORT_COPIES or more times in a row, whatever the source): a translation's
source is in another language, so it cannot say what repeats naturally.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

MAX_N = 3  # n-grams of up to 3 words, or of up to 3 pieces, are checked for loops
LOOP_COPIES = 3  # copies in a row that make a loop ("a a a", "a b a b a b")
REPORT_COPIES = 4  # copies in a row counted as a looping output in the statistics (issue 32)


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


def _loops_in(source: Sequence, output: Sequence, only=None, least: int = LOOP_COPIES) -> bool:
    """only: a test an n-gram must pass to count (None: every n-gram); least: copies in a row."""
    allowed = runs(source)
    return any(copies >= least and copies > allowed.get(gram, 1) and (only is None or only(gram))
               for gram, copies in runs(output).items())


class LoopCheck:
    """loops(source, output) over ids of one tokenizer's vocabulary (pyfastdec.text:
    Tokenizer or MarianTokenizer, or anything with piece(id) and starts_word(id))."""

    def __init__(self, tokenizer):
        self.piece, self.starts_word = tokenizer.piece, tokenizer.starts_word
        self._punctuation: dict[int, bool] = {}

    def punctuation(self, token: int) -> bool:
        """A piece with no letter or digit in it (word-start mark aside)."""
        known = self._punctuation.get(token)
        if known is None:
            known = self._punctuation[token] = not any(c.isalnum() for c in self.piece(token))
        return known

    def loops(self, source: Sequence[int], output: Sequence[int], least: int = LOOP_COPIES) -> bool:
        """Whether output repeats some n-gram `least`+ times in a row, more times in a
        row than source repeats it, in one of the three views (module docstring)."""
        def plain(ids):  # punctuation left out
            return [t for t in ids if not self.punctuation(t)]

        src, out = plain(source), plain(output)
        if _loops_in(words(src, self.starts_word), words(out, self.starts_word), least=least) \
                or _loops_in(src, out, least=least):
            return True
        return _loops_in(source, output, lambda gram: all(self.punctuation(t) for t in gram), least)

    def repeats(self, output: Sequence[int], least: int = REPORT_COPIES) -> bool:
        """Whether output repeats some n-gram `least`+ times in a row in one of the three
        views, whatever its source: a looping translation (DecodeStats.looping)."""
        # Every piece of such a loop occurs `least` times: most outputs, which repeat no piece
        # that often, are answered without building the views (the check runs on every output).
        if len(output) < least or max(Counter(output).values()) < least:
            return False
        return self.loops((), output, least)
