"""Generalized aggressive decoding (GAD; Xia et al. 2022) and GAD++.

A non-autoregressive drafter (arch "nat-drafter") reads the source and the accepted
prefix and proposes the next k tokens at once; the autoregressive verifier checks them
in one step (draft_verify.py).
- gad: keep drafted tokens while each equals the verifier's argmax; lossless (= greedy).
- gad_plus (GAD++): keep a drafted token while it is within the verifier's top-beta and
  its log-prob is within tau of the top-1's. Not lossless unless beta = 1 and tau = 0.
  The paper's settings: beta = 3, tau = 1.0 (quality), beta = 5, tau = 3.0 (speed).
Either way the verifier's own token follows the kept draft (the correction at the first
rejected position, or a bonus token when all k pass).
"""
from __future__ import annotations

import time

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .policies import DraftLengthPolicy
from .draft_verify import AcceptRule, DraftSource, accept_argmax, accept_topk, draft_and_verify
from .result import DecodeStats


class _DrafterDrafts(DraftSource):
    """Drafts from a drafter backend; its memory follows the verifier's live rows. With
    a draft-length policy, each iteration verifies only as many drafted tokens as pay
    for themselves (none: no drafter call), and the drafter makes its memory only when
    the policy first asks for a draft, so a batch it never drafts for costs what greedy
    costs. A drafter with its own encoder encodes the sources (encoder time); one that
    shares the verifier's (drafter.shares_encoder) projects its cross-attention K/V from
    the verifier's memory (drafter time: no second encoder runs)."""

    def __init__(self, drafter: Backend, src_ids: list[list[int]], k: int, stats: DecodeStats,
                 policy: DraftLengthPolicy | None):
        self.drafter, self.k, self.stats, self.policy = drafter, k, stats, policy
        self.src_ids, self.live = src_ids, np.arange(len(src_ids))  # live: input index per row
        self.memory = None
        self.host = None  # (verifier, its memory of all rows) for a shared-encoder drafter
        self.shared = drafter.shares_encoder
        if policy is None and not self.shared:
            self._encode()

    def verifier_encoded(self, verifier: Backend, memory) -> None:
        if self.shared:
            self.host = (verifier, memory)
            if self.policy is None:
                self._encode()

    def _encode(self) -> None:
        if self.shared:
            verifier, memory = self.host
            with self.stats.timing("drafter"):
                if len(self.live) < len(self.src_ids):
                    memory = verifier.select(memory, self.live)
                self.memory = self.drafter.attach(memory)
            return
        with self.stats.timing("encoder"):
            self.memory = self.drafter.encode([self.src_ids[i] for i in self.live])

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        use = self.k
        if self.policy is not None:
            drafter_tokens = sum(1 + len(p) + self.k for p in prefixes)  # BOS, prefix, k masks
            use = self.policy.choose(len(prefixes), drafter_tokens)
            if use == 0:
                return [[] for _ in prefixes]
            if self.memory is None:
                self._encode()
        with self.stats.timing("drafter"):
            started = time.perf_counter()
            ids = self.drafter.draft(self.memory, prefixes, self.k).ids
            if self.policy is not None:
                self.policy.drafted(drafter_tokens, time.perf_counter() - started)
        return [row[:use].tolist() for row in np.asarray(ids)]

    def keep(self, rows: np.ndarray) -> None:
        self.live = self.live[rows]
        if self.memory is not None:
            with self.stats.timing("drafter"):
                self.memory = self.drafter.select(self.memory, rows)

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float, out) -> None:
        if self.policy is not None:
            self.policy.verified(width, accepted, lengths, seconds)


def _block_size(drafter: Backend, k: int | None) -> int:
    if drafter.arch != "nat-drafter":
        raise ValueError(f"GAD: the drafter must be a 'nat-drafter' model, got arch {drafter.arch!r}")
    k = k if k is not None else drafter.block_size
    if k is None or int(k) < 1:
        raise ValueError(f"GAD: draft length k must be >= 1 (default: the drafter's block_size), got {k}")
    return int(k)


def _run(verifier, drafter, src_ids, k, accept: AcceptRule, want: Want, max_len, policy):
    stats = DecodeStats(sentences=len(src_ids))
    k = _block_size(drafter, k)
    if policy is not None and policy.k_max != k:
        raise ValueError(f"GAD: the draft-length policy is for blocks of {policy.k_max}, the drafter drafts {k}")
    if not src_ids:
        return [], stats
    with stats.total():
        source = _DrafterDrafts(drafter, src_ids, k, stats, policy)
        outs = draft_and_verify(verifier, src_ids, source, accept, want, max_len, stats)
    return outs, stats


def gad(verifier: Backend, drafter: Backend, src_ids: list[list[int]], k: int | None = None,
        max_len: int | None = None, policy: DraftLengthPolicy | None = None
        ) -> tuple[list[list[int]], DecodeStats]:
    """Vanilla GAD: outputs (ids without BOS/EOS, input order; equal to greedy's) and
    statistics. k: drafted tokens per iteration (default: the drafter's block_size);
    max_len as in greedy; policy: verify only as many drafted tokens per iteration as
    measured costs favour (policies/draft_length.py; keep one policy across calls so it learns)."""
    return _run(verifier, drafter, src_ids, k, accept_argmax, Want(argmax=True), max_len, policy)


def gad_plus(verifier: Backend, drafter: Backend, src_ids: list[list[int]], beta: int = 3,
             tau: float = 1.0, k: int | None = None, max_len: int | None = None,
             policy: DraftLengthPolicy | None = None) -> tuple[list[list[int]], DecodeStats]:
    """GAD++ with top-beta / tau acceptance (defaults: the paper's quality setting);
    beta = 1, tau = 0 gives vanilla GAD's outputs. Other arguments as in gad."""
    if int(beta) < 1 or int(beta) > verifier.vocab_size:
        raise ValueError(f"GAD++: beta must be in [1, vocab_size={verifier.vocab_size}], got {beta}")
    if not tau >= 0:
        raise ValueError(f"GAD++: tau must be >= 0, got {tau}")
    return _run(verifier, drafter, src_ids, k, accept_topk(float(tau)),
                Want(argmax=False, topk=int(beta)), max_len, policy)
