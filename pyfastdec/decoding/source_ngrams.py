"""Where a correction model's output stands in its source: the unique source n-grams that
IAD re-enters the source at (its drafts) and that the edit-margin rule keeps a source
token by.

The edit-margin rule (greedy(..., edit_margin=m), iad(..., edit_margin=m)): after an
output prefix y, the KEPT token is the source token that copying would write next,
  - the source token after y, while y is a prefix of the source (EOS included);
  - else the source token after the last 3, else the last 2 tokens of y, where those form
    an n-gram that occurs exactly once in the source;
  - else none.
The next token is the kept one unless the model's top-1 beats its log-prob by at least m
nats (an edit must win by m; m = 0 is plain greedy). The kept token is a function of the
prefix alone, so IAD, which checks a whole draft in one step, can give every drafted
position the kept token greedy would give it, and IAD with a margin returns exactly
greedy with the same margin.

Single tokens are not anchors for the rule, unlike IAD's re-entry: after an edit, a piece
that happens to occur once in the source (a word ending) is weak evidence of where the
output stands, and a wrong kept token under a margin pulls the output off course. (On
UA-GEC val with session 6's model the two variants scored alike, F0.5 within 0.002 at
margins 1 to 4, and both derailed at margins of 3 and more: the derailments came from
forcing copies against the model, not from the anchors.) Drafts may re-enter on one
token: a wrong draft only costs a step.
"""
from __future__ import annotations

import numpy as np

MAX_NGRAM = 3
MIN_KEEP_NGRAM = 2


class SourceNgrams:
    """One source sentence (without its EOS) and where its unique n-grams end."""

    def __init__(self, src: list[int], eos: int, max_n: int = MAX_NGRAM):
        body = [int(t) for t in src]
        if body and body[-1] == eos:
            body = body[:-1]
        self.draft_tokens = body + [eos]
        self.max_n = max_n
        # Both made on first use: a sentence IAD copies whole in its first step never needs
        # the index, and only the edit-margin rule reads the tables.
        self._unique_end: dict[tuple[int, ...], int] | None = None
        self._run_tables: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def unique_end(self) -> dict[tuple[int, ...], int]:
        """Every n-gram (n <= max_n) that occurs once in the source -> the index after it."""
        if self._unique_end is None:
            body = self.draft_tokens[:-1]
            seen: dict[tuple[int, ...], int] = {}  # n-gram -> index after it, -1 if repeated
            for n in range(1, self.max_n + 1):  # the n-grams as zipped shifted copies: no slice per n-gram
                for end, gram in enumerate(zip(*[body[i:] for i in range(n)]), n):
                    seen[gram] = -1 if gram in seen else end
            self._unique_end = {g: end for g, end in seen.items() if end >= 0}
        return self._unique_end

    def run_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """(source, anchored) as int64 [len(source + EOS) + 1], -1 at the end (after EOS).
        anchored[p]: the kept token at source position p when the output's last tokens are
        the source right before p (a copied run, as inside an IAD draft): source[p] where
        the 3- or 2-gram ending at p - 1 is unique, else -1."""
        if self._run_tables is None:
            source = self.draft_tokens
            anchored = [-1] * (len(source) + 1)
            for p in range(MIN_KEEP_NGRAM, len(source)):
                if any(self.unique_end.get(tuple(source[p - n:p])) == p for n in range(MIN_KEEP_NGRAM, self.max_n + 1)
                       if p >= n):
                    anchored[p] = source[p]
            self._run_tables = (np.array(source + [-1], dtype=np.int64), np.array(anchored, dtype=np.int64))
        return self._run_tables

    def reentry_start(self, output: list[int]) -> int | None:
        """Where the next IAD draft starts in the source (+ EOS) for an output so far: 0 at
        the start; else after the longest of the output's last 3/2/1 tokens that is a
        unique source n-gram; else None (no draft: decode one token). (A repeated
        n-gram's suffixes repeat too, so trying shorter ones only helps when the longer
        one is absent.)"""
        if not output:
            return 0
        unique = self.unique_end  # once per call: it is a property
        for n in range(min(self.max_n, len(output)), 0, -1):
            end = unique.get(tuple(output[-n:]))
            if end is not None:
                return end
        return None

    def reentry(self, output: list[int]) -> list[int]:
        """The next IAD draft for an output so far: the source from reentry_start on."""
        start = self.reentry_start(output)
        return [] if start is None else self.draft_tokens[start:]

    def kept(self, output: list[int]) -> int:
        """The edit-margin rule's kept token after `output` (module docstring); -1: none."""
        return self.kept_along(output, ())[0]

    def kept_along(self, output: list[int], draft) -> list[int]:
        """The kept token after output + draft[:i], for i = 0 .. len(draft): one per
        position of an IAD step that appends [pending, draft...] to `output`."""
        return self._kept_along(output, draft, self._is_prefix(output))

    def _is_prefix(self, output: list[int]) -> bool:
        """Whether the output so far is a prefix of the source (EOS included)."""
        return len(output) < len(self.draft_tokens) and self.draft_tokens[:len(output)] == output

    def _kept_along(self, output: list[int], draft, on_source: bool) -> list[int]:
        source = self.draft_tokens
        done = len(output)
        tail = list(output[-self.max_n:])
        kept = []
        for i in range(len(draft) + 1):
            if i:
                token = draft[i - 1]
                on_source = on_source and source[done + i - 1] == token and done + i < len(source)
                tail.append(token)
                if len(tail) > self.max_n:
                    del tail[0]
            if on_source:
                kept.append(source[done + i])
                continue
            token = -1
            for n in range(min(self.max_n, len(tail)), MIN_KEEP_NGRAM - 1, -1):
                end = self.unique_end.get(tuple(tail[-n:]))
                if end is not None:
                    token = source[end]
                    break
            kept.append(token)
        return kept

    def kept_along_source(self, output: list[int], start: int, k: int) -> np.ndarray:
        """kept_along(output, draft) for a draft that is the source from `start` on
        (k tokens: an IAD draft), as int64 [k + 1]. The first 3 positions look at output
        tokens; from the 4th on, the last 3 tokens are the draft's own, so the kept token
        is the precomputed one of a copied run, or, while the output is still the
        source's prefix and the draft continues it, simply the next source token."""
        head = min(k, self.max_n - 1)
        prefix = self._is_prefix(output)
        kept = np.empty(k + 1, dtype=np.int64)
        kept[:head + 1] = self._kept_along(output, self.draft_tokens[start:start + head], prefix)
        if k > head:
            continues = prefix and start == len(output)
            source, anchored = self.run_tables()
            kept[head + 1:] = (source if continues else anchored)[start + head + 1:start + k + 1]
        return kept
