"""Input-guided aggressive decoding (IAD; Sun et al. 2021, Ge et al.) for correction
tasks, where the output mostly copies the input.

The draft is the source itself: at the start, the whole source (its tokens, then EOS);
the verifier checks the whole draft in one step and keeps it up to its first mismatch,
plus the verifier's own token there (draft_verify.py). After a mismatch the output goes
on one verified token per step until its last 3, 2 or 1 tokens (longest first) match an
n-gram that occurs exactly once in the source; the source after that n-gram, then EOS,
is the next draft. Every kept token is the verifier's argmax after a verified prefix, so
the output is greedy's, token for token.

How much of a draft is verified is a cost decision (source_draft_length.py): the whole
draft where the model copies, nothing (plain greedy steps) where it rewrites the text, so
IAD costs about what greedy costs on text its model does not fit.
"""
from __future__ import annotations

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .draft_verify import accept_argmax, draft_and_verify
from .result import DecodeStats
from .source_draft_length import SourceDraftLength, resolve_policy

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
    """The source after each row's re-entry point, capped by the policy (None: whole)."""

    def __init__(self, src_ids: list[list[int]], eos: int, policy: SourceDraftLength | None):
        self.rows = [SourceNgrams(s, eos) for s in src_ids]
        self.policy = policy

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        drafts = [row.reentry(p) for row, p in zip(self.rows, prefixes)]
        if self.policy is None:
            return drafts
        self.policy.iteration_started()
        if any(drafts):
            cap = self.policy.choose_lengths([len(d) for d in drafts])
            drafts = [d[:cap] for d in drafts]
        return drafts

    def keep(self, rows: np.ndarray) -> None:
        self.rows = [self.rows[r] for r in rows]

    def verified(self, width, accepted, lengths, seconds, out) -> None:
        if self.policy is not None:
            self.policy.verified(width, accepted, lengths, seconds)


def iad(backend: Backend, src_ids: list[list[int]], max_len: int | None = None,
        policy: SourceDraftLength | None | str = "auto") -> tuple[list[list[int]], DecodeStats]:
    """IAD outputs (ids without BOS/EOS, input order; equal to greedy's) and statistics.
    max_len as in greedy (default 2 * len(source) + 10 per row). policy: how much of each
    draft to verify; "auto" (default) learns it within this call (keep one
    SourceDraftLength across calls, as Translator does, so it learns the costs once);
    None verifies every draft whole (tests that count verifier calls)."""
    stats = DecodeStats(sentences=len(src_ids))
    # "auto": drafts up to the longest source (EOS included)
    policy = resolve_policy(policy, max([len(s) for s in src_ids] + [1]), "IAD")
    with stats.total():
        source = _SourceDrafts(src_ids, backend.tokens["eos"], policy)
        try:
            outs = draft_and_verify(backend, src_ids, source, accept_argmax, Want(argmax=True), max_len, stats)
        finally:
            if policy is not None:
                policy.call_ended()
    return outs, stats
