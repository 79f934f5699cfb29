"""Input-guided aggressive decoding (IAD; Sun et al. 2021, Ge et al.) for correction
tasks, where the output mostly copies the input.

The draft is the source itself: at the start, the whole source (its tokens, then EOS);
the verifier checks the whole draft in one step and keeps it up to its first mismatch,
plus the verifier's own token there (draft_verify.py). After a mismatch the output goes
on one verified token per step until its last 3, 2 or 1 tokens (longest first) match an
n-gram that occurs exactly once in the source; the source after that n-gram, then EOS,
is the next draft. Every kept token is the verifier's argmax after a verified prefix, so
the output is greedy's, token for token.
"""
from __future__ import annotations

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .draft_verify import accept_argmax, draft_and_verify
from .result import DecodeStats

MAX_NGRAM = 3


class SourceNgrams:
    """One source sentence (without its EOS) and where its unique n-grams end."""

    def __init__(self, src: list[int], eos: int, max_n: int = MAX_NGRAM):
        body = [int(t) for t in src]
        if body and body[-1] == eos:
            body = body[:-1]
        self.draft_tokens = body + [eos]
        self.max_n = max_n
        seen: dict[tuple[int, ...], int] = {}  # n-gram -> index after it, -1 if repeated
        for n in range(1, max_n + 1):
            for start in range(len(body) - n + 1):
                gram = tuple(body[start:start + n])
                seen[gram] = -1 if gram in seen else start + n
        self.unique_end = {g: end for g, end in seen.items() if end >= 0}

    def reentry(self, output: list[int]) -> list[int]:
        """The next draft for an output so far: the whole source at the start; else the
        source after the longest of the output's last 3/2/1 tokens that is a unique source
        n-gram; else nothing (decode one token). (A repeated n-gram's suffixes repeat
        too, so trying shorter ones only helps when the longer one is absent.)"""
        if not output:
            return self.draft_tokens
        for n in range(min(self.max_n, len(output)), 0, -1):
            end = self.unique_end.get(tuple(output[-n:]))
            if end is not None:
                return self.draft_tokens[end:]
        return []


class _SourceDrafts:
    def __init__(self, src_ids: list[list[int]], eos: int):
        self.rows = [SourceNgrams(s, eos) for s in src_ids]

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        return [row.reentry(p) for row, p in zip(self.rows, prefixes)]

    def keep(self, rows: np.ndarray) -> None:
        self.rows = [self.rows[r] for r in rows]

    def verified(self, width, accepted, lengths, seconds) -> None:
        """Source drafts cost nothing to make, so IAD always verifies all of them."""


def iad(backend: Backend, src_ids: list[list[int]], max_len: int | None = None
        ) -> tuple[list[list[int]], DecodeStats]:
    """IAD outputs (ids without BOS/EOS, input order; equal to greedy's) and statistics.
    max_len as in greedy (default 2 * len(source) + 10 per row)."""
    stats = DecodeStats(sentences=len(src_ids))
    with stats.total():
        source = _SourceDrafts(src_ids, backend.tokens["eos"])
        outs = draft_and_verify(backend, src_ids, source, accept_argmax, Want(argmax=True), max_len, stats)
    return outs, stats
