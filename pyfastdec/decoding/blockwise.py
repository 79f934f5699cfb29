"""Blockwise parallel decoding (Stern, Shazeer, Uszkoreit 2018) on the verifier's own
proposal heads.

The verifier carries K heads that read the decoder's final state at a position and
propose the K tokens after that position's argmax (backends/base.py, "Proposal heads").
So a step that verifies [pending, d1..dk] also returns, at the accepted position j, the
next block: the verifier's token after d1..dj (the correction, or the bonus token) and
the K tokens the heads expect after it. One iteration is one verifier call:
  iteration 1: step([[BOS]], proposals=0)            -> y1, and the heads' block p1..pK
  iteration t: step([[y, p1..pk]], proposals=k)      -> keeps p1..pj and the verifier's
               token after them, and the heads' block after that token
The loop (draft_verify.py) keeps a proposal only where it equals the verifier's argmax,
so the output is greedy's, token for token, whatever the heads propose.

How many of the K proposals to verify is a cost decision per iteration, as for IAD
(policies/source_draft_length.py): all K where verifying a block costs little more than one
position, fewer where every computed position costs. Unlike IAD's drafts the heads are
not free: each adds its two linears and an output-layer row per row to the step it runs
on (a large share of a step at batch 1; bench/README.md), so a step runs only as
many heads as the policy will verify next (Want.heads). Where the best verification rate
does not beat a plain step's, the policy switches them off: the loop runs plain greedy
steps in a tight loop (draft_verify._plain_steps), probing with a full block after
`probe_every` steps (ever less often while probes keep failing) so that acceptance keeps
being measured. Heads that do not pay cost ~greedy's time.
"""
from __future__ import annotations

import numpy as np

from pyfastdec.backends.base import Backend, StepOut, Want

from .draft_verify import DraftSource, accept_argmax, draft_and_verify
from .result import DecodeStats
from .policies import SourceDraftLength, resolve_policy


class _HeadDrafts(DraftSource):
    """Each live row's draft is the heads' block from the row's last step, capped by the
    policy (None: whole). The step that verifies a block capped at k runs only k heads
    (at least one), so the next block has the k proposals the policy wants verified: a
    head costs its two linears and an output-layer row per row whether or not its
    proposal is verified. The cap is chosen as if every block held all K proposals, so
    that it can grow again after a short one (a block of k limits only this iteration)."""

    def __init__(self, rows: int, policy, k: int):
        self.blocks: list[list[int]] = [[] for _ in range(rows)]  # none before the first step
        self.policy, self.k = policy, k
        self.heads = 0  # Want.heads of the next step (0: all K)

    def plain_steps(self) -> int:
        """How many plain greedy steps the loop should run now (0: a step that verifies
        this iteration's drafts and runs the heads). Heads cost every step they run on
        (their linears and an output-layer row per row each), so where drafting does not pay the policy switches
        them off for a run of plain steps; without a policy they always run."""
        steps = self.policy.plain_steps(len(self.blocks)) if self.policy is not None else 0
        if steps:
            self.blocks = [[] for _ in self.blocks]  # the heads' last blocks are stale after the run
        return steps

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        if self.policy is not None:
            self.policy.plain_ran(rows, steps, seconds)

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        if self.policy is None:
            return self.blocks
        self.policy.iteration_started()
        if any(self.blocks):
            cap = self.policy.choose_lengths([self.k if b else 0 for b in self.blocks])
            self.heads = max(cap, 1)
            return [b[:cap] for b in self.blocks]
        self.heads = 0  # no block to verify (the first step, or after plain steps): a whole one next
        return self.blocks

    def proposal_count(self) -> int:
        return self.heads

    def keep(self, rows: np.ndarray) -> None:
        self.blocks = [self.blocks[r] for r in rows]

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float,
                 out: StepOut) -> None:
        if out.proposals is None:
            raise ValueError("blockwise: the backend's step returned no proposals for Want.proposals")
        self.blocks = out.proposals.tolist()
        if self.policy is not None:
            self.policy.verified(width, accepted, lengths, seconds, extra_work=True)


def proposal_heads(backend: Backend) -> int:
    """K, the backend's number of proposal heads; ValueError if it has none."""
    k = int(backend.proposal_heads or 0)
    if k < 1:
        raise ValueError(f"blockwise: {backend.describe()} has no proposal heads (config.json field 'heads'; "
                         f"train them with fastdec train-heads)")
    return k


def blockwise(backend: Backend, src_ids: list[list[int]], max_len: int | None = None,
              policy: SourceDraftLength | None | str = "auto") -> tuple[list[list[int]], DecodeStats]:
    """Blockwise outputs (ids without BOS/EOS, input order; equal to greedy's) and
    statistics (stats.mean_tokens: committed tokens per row per iteration). max_len as in
    greedy. policy: how many of the K proposals to verify per iteration; "auto" (default)
    learns it within this call (keep one SourceDraftLength(K) across calls so it learns
    the costs once); None verifies all K every iteration; a policies.DraftPolicy with
    choose_lengths (e.g. policies.FixedDraftLength) fixes the path."""
    k = proposal_heads(backend)
    stats = DecodeStats(sentences=len(src_ids))
    policy = resolve_policy(policy, k, "blockwise")
    if policy is not None and policy.k_max != k:
        raise ValueError(f"blockwise: the draft-length policy is for blocks of {policy.k_max}, the model has {k} heads")
    if not src_ids:
        return [], stats
    with stats.total():
        source = _HeadDrafts(len(src_ids), policy, k)
        try:
            outs = draft_and_verify(backend, src_ids, source, accept_argmax, Want(argmax=True), max_len, stats,
                                    proposals=True)
        finally:
            if policy is not None:
                policy.call_ended()
    return outs, stats
