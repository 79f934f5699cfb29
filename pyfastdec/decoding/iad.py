"""Input-guided aggressive decoding (IAD; Sun et al. 2021, Ge et al.) for correction
tasks, where the output mostly copies the input.

The draft is the source itself: at the start, the whole source (its tokens, then EOS);
the verifier checks the whole draft in one step and keeps it up to its first mismatch,
plus the verifier's own token there (draft_verify.py). After a mismatch the output goes
on one verified token per step until its last 3, 2 or 1 tokens (longest first) match an
n-gram that occurs exactly once in the source; the source after that n-gram, then EOS,
is the next draft. Every kept token is the verifier's argmax after a verified prefix, so
the output is greedy's, token for token.

How much of a draft is verified is a cost decision (policies/source_draft_length.py): the whole
draft where the model copies, nothing (plain greedy steps) where it rewrites the text, so
IAD costs about what greedy costs on text its model does not fit.
"""
from __future__ import annotations

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .draft_verify import DraftSource, accept_argmax, draft_and_verify
from .result import DecodeStats
from .policies import SourceDraftLength, resolve_policy
from .source_ngrams import SourceNgrams


class _SourceDrafts(DraftSource):
    """The source after each row's re-entry point, capped by the policy (None: whole)."""

    def __init__(self, src_ids: list[list[int]], eos: int, policy: SourceDraftLength | None):
        self.rows = [SourceNgrams(s, eos) for s in src_ids]
        self.starts: list[int | None] = []  # where each live row's last draft starts in its source
        self.policy = policy

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        self.starts = starts = [row.reentry_start(p) for row, p in zip(self.rows, prefixes)]
        policy = self.policy
        if policy is None:
            return [[] if start is None else row.draft_tokens[start:] for row, start in zip(self.rows, starts)]
        policy.iteration_started()
        # The policy sees the lengths only: each draft is sliced once, already capped.
        lengths = [0 if start is None else len(row.draft_tokens) - start for row, start in zip(self.rows, starts)]
        if not any(lengths):
            return [[] for _ in lengths]
        cap = policy.choose_lengths(lengths)
        return [[] if start is None else row.draft_tokens[start:start + cap] for row, start in zip(self.rows, starts)]

    def keep_ids(self, prefixes: list[list[int]], drafts: list[list[int]], width: int) -> np.ndarray:
        """The edit-margin rule's kept token at every position of the step [pending,
        drafts...] of width `width` (source_ngrams.py); -1 past a row's draft."""
        keep = np.full((len(drafts), width), -1, dtype=np.int64)
        for r, (row, prefix, draft, start) in enumerate(zip(self.rows, prefixes, drafts, self.starts)):
            if draft:  # drafts are the source from `start` on (cut by the policy and the loop)
                keep[r, :len(draft) + 1] = row.kept_along_source(prefix, start, len(draft))
            else:
                keep[r, 0] = row.kept(prefix)
        return keep

    def keep(self, rows: np.ndarray) -> None:
        self.rows = [self.rows[r] for r in rows]
        self.starts = [self.starts[r] for r in rows]

    def verified(self, width, accepted, lengths, seconds, out) -> None:
        if self.policy is not None:
            self.policy.verified(width, accepted, lengths, seconds)


def iad(backend: Backend, src_ids: list[list[int]], max_len: int | None = None,
        policy: SourceDraftLength | None | str = "auto", edit_margin: float = 0.0
        ) -> tuple[list[list[int]], DecodeStats]:
    """IAD outputs (ids without BOS/EOS, input order; equal to greedy's) and statistics.
    max_len as in greedy (default limits.default_max_len per row). policy: how much of each
    draft to verify; "auto" (default) learns it within this call (keep one
    SourceDraftLength across calls, as Translator does, so it learns the costs once);
    None verifies every draft whole (tests that count verifier calls). edit_margin: the
    edit-margin rule (source_ngrams.py); the output then equals greedy(..., edit_margin)."""
    stats = DecodeStats(sentences=len(src_ids))
    # "auto": drafts up to the longest source (EOS included)
    policy = resolve_policy(policy, max([len(s) for s in src_ids] + [1]), "IAD")
    with stats.total():
        source = _SourceDrafts(src_ids, backend.tokens["eos"], policy)
        try:
            want = Want(argmax=True, edit_margin=float(edit_margin))
            outs = draft_and_verify(backend, src_ids, source, accept_argmax, want, max_len, stats)
        finally:
            if policy is not None:
                policy.call_ended()
    return outs, stats
