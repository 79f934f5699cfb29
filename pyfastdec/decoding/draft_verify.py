"""The draft-then-verify loop shared by IAD, GAD/GAD++ and blockwise (only the drafts differ).

Every iteration, each live row holds its accepted output y1..ym, of which the verifier
state already holds BOS y1..y(m-1); ym (BOS at the start) is "pending". A draft source
proposes d1..dk per row; the verifier scores [pending, d1..dk] in ONE `step` (rows with
shorter drafts are padded, and the padding positions are rolled back like any rejected
token); an acceptance rule keeps d1..dj and adds the verifier's own token after dj (the
correction at the first rejected position, or the bonus token when all k pass); the
state is truncated to BOS y1..ym d1..dj. Rows leave the batch (verifier state and draft
source together) at EOS or at their length limit; outputs stay in input order.

A source that drafts from the verifier's own proposal heads (blockwise.py) asks the loop
for `proposals`: every step then also returns the heads' block at each row's accepted
position (Want.proposals, backends/base.py), which the source receives with the step's
output in `verified` and proposes next; one verifier call per iteration.
"""
from __future__ import annotations

import time
from itertools import chain
from typing import Callable

import numpy as np

from pyfastdec.backends.base import Backend, StepOut, Want

from .limits import append_winners, row_limits
from .result import DecodeStats


class DraftSource:
    """Where drafts come from (the source sentence for IAD, a drafter model for GAD,
    the verifier's proposal heads for blockwise, BiLD's little model). A source
    implements propose and keep; every other hook has a no-op default here, and the loop
    calls each one unconditionally, so a source overrides only the hooks it uses."""

    def propose(self, prefixes: list[list[int]]) -> list[list[int]]:
        """The draft of every live row, given its accepted output so far (no BOS).
        May be empty (the verifier then decodes one token) or too long (the loop cuts it
        after its first EOS and to the row's length budget)."""
        raise NotImplementedError

    def keep(self, rows: np.ndarray) -> None:
        """Only these live rows (indices into the current live rows, in order) remain."""
        raise NotImplementedError

    def verified(self, width: int, accepted: np.ndarray, lengths: np.ndarray, seconds: float,
                 out: StepOut) -> None:
        """What the last verification did: tokens per row, draft tokens kept and drafted
        per row, its wall time (for sources that adapt their drafts to costs), and the
        step's output (rows in the order of the live rows before `keep`; its `proposals`
        are the next drafts of a source that drafts from the verifier's heads)."""

    def verifier_encoded(self, verifier: Backend, memory) -> None:
        """Called once, right after the verifier encodes all rows: for a source whose
        model reads the verifier's encoder output (a shared-encoder drafter, BiLD's
        little model)."""

    def keep_ids(self, prefixes: list[list[int]], drafts: list[list[int]], width: int) -> np.ndarray:
        """For a loop asked for the edit-margin rule (want.edit_margin > 0; IAD): int64
        [rows, width], the kept token at every position of the step (source_ngrams.py),
        -1 where none. Only a source drafting from the source sentence can say."""
        raise ValueError(f"draft_and_verify: the edit-margin rule is for source drafts (IAD), not "
                         f"{type(self).__name__}")

    def plain_steps(self) -> int:
        """0 (draft this iteration), or how many plain greedy steps to run now: for a
        source whose drafts cost work even when none is verified (blockwise's heads) or
        that may not pay (BiLD's little model). The run makes no drafts and no verified()
        calls (rows that finish leave through keep() as usual); a source returning > 0
        must drop the drafts it holds, which the run makes stale."""
        return 0

    def plain_ran(self, rows: int, steps: int, seconds: float) -> None:
        """What a run of plain steps took (rows at its start)."""

    def proposal_count(self) -> int:
        """For a source drafting from the verifier's heads (proposals=True): how many
        heads the next step should run (Want.heads; 0: all K). Each costs work, and the
        next iteration verifies no more."""
        return 0


# An acceptance rule: (step output [rows, w], drafts [rows, w-1] padded, draft lengths [rows])
# -> (number of accepted draft tokens j [rows], the verifier's token after them [rows]).
AcceptRule = Callable[[StepOut, np.ndarray, np.ndarray], "tuple[np.ndarray, np.ndarray]"]


def _prefix_length(agree: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row, how many leading positions (within its draft length) all agree."""
    inside = np.arange(agree.shape[1])[None, :] < lengths[:, None]
    return np.cumprod(agree & inside, axis=1).sum(axis=1).astype(np.int64)


def accept_argmax(out: StepOut, drafts: np.ndarray, lengths: np.ndarray):
    """Lossless: keep draft tokens while each equals the verifier's argmax there.
    Position i of the step scores the token after input i, so d(i+1) is checked against
    argmax[:, i]; the token after the accepted prefix is argmax[:, j]."""
    argmax = out.argmax
    if len(lengths) == 1:  # batch 1: plain Python beats five numpy calls on [1, w] arrays
        row, draft, n = argmax[0].tolist(), drafts[0].tolist(), int(lengths[0])
        j = 0
        while j < n and draft[j] == row[j]:
            j += 1
        return np.array([j], dtype=np.int64), np.array([row[j]], dtype=np.int64)
    j = _prefix_length(drafts == argmax[:, :-1], lengths)
    return j, argmax[np.arange(len(j)), j]


def accept_topk(tau: float) -> AcceptRule:
    """GAD++: keep a draft token while it is among the verifier's top-beta (beta = the
    `topk` the step was asked for) and its log-prob is within tau of the top-1's.
    beta = 1, tau = 0 is exactly accept_argmax. The token after the accepted prefix is
    the verifier's top-1 there."""

    def accept(out: StepOut, drafts: np.ndarray, lengths: np.ndarray):
        ids, logp = out.topk_ids[:, :-1, :], out.topk_logprobs[:, :-1, :]
        hit = ids == drafts[:, :, None]
        draft_logp = np.where(hit, logp, -np.inf).max(axis=2)
        agree = hit.any(axis=2) & (logp[:, :, 0] - draft_logp <= tau)
        j = _prefix_length(agree, lengths)
        return j, out.topk_ids[np.arange(len(j)), j, 0]

    return accept


def draft_and_verify(verifier: Backend, src_ids: list[list[int]], source: DraftSource,
                     accept: AcceptRule, want: Want, max_len: int | None,
                     stats: DecodeStats, proposals: bool = False) -> list[list[int]]:
    """Outputs (ids without BOS/EOS, input order); counters and times go into `stats`.
    The caller has already encoded with the draft source's model, if any, and times the
    whole call (stats.total). proposals: ask the steps for the verifier's heads' block at
    the accepted position (needs accept_argmax: the backend accepts by argmax); every step,
    except during the runs of plain steps the source's plain_steps() asks for."""
    outs: list[list[int]] = [[] for _ in src_ids]
    if not src_ids:
        return outs
    limits = row_limits(src_ids, max_len)
    bos, eos, pad = (verifier.tokens[t] for t in ("bos", "eos", "pad"))
    with stats.timing("encoder"):
        memory = verifier.encode(src_ids)
    source.verifier_encoded(verifier, memory)
    with stats.timing("verifier"):
        state = verifier.start(memory)
    live = np.arange(len(src_ids))  # input index of each live row, in state order
    live_ids = live.tolist()  # the same as Python ints: per-row loops index lists, not numpy
    pending = np.full(len(live), bos, dtype=np.int64)
    # positions in the state per row, BOS included: Python ints, made an array only for truncate
    held = [0] * len(live)
    keep_ids = source.keep_ids if want.edit_margin else None
    if keep_ids is not None and proposals:
        raise ValueError("draft_and_verify: the edit-margin rule is for source drafts (IAD), not proposal heads")
    while live_ids:
        # A source may ask for runs of plain greedy steps where drafting does not pay
        # (blockwise.py: its heads cost every step they run on); they run in a tight loop.
        steps = source.plain_steps()
        if steps:
            if keep_ids is not None:  # plain steps would drop the rule: greedy(edit_margin) differs
                raise ValueError("draft_and_verify: the edit-margin rule is for source drafts (IAD), not plain runs")
            started, rows, before = time.perf_counter(), len(live_ids), stats.iterations
            state, live, pending, held = _plain_steps(verifier, state, steps, live, pending, held, outs, limits,
                                                      eos, want, stats, source)
            live_ids = live.tolist()
            source.plain_ran(rows, stats.iterations - before, time.perf_counter() - started)
            continue
        drafts, longest = [], 0
        for i, d in zip(live_ids, source.propose([outs[i] for i in live_ids])):
            if len(d):
                d = _cut(d, eos, limits[i] - len(outs[i]) - 1)
                longest = max(longest, len(d))
            drafts.append(d)
        width = 1 + longest
        lens = [len(d) for d in drafts]
        lengths = np.array(lens, dtype=np.int64)
        if width == 1:  # nothing drafted (e.g. the policy chose a plain step): greedy's step
            tokens = pending.reshape(-1, 1)
        elif len(drafts) == 1:  # batch 1: one list, no padding
            tokens = np.array([[int(pending[0])] + drafts[0]], dtype=np.int64)
        else:
            tokens = np.full((len(live_ids), width), pad, dtype=np.int64)
            tokens[:, 0] = pending
            # every draft in one assignment (row-major, as the mask is read), not one numpy
            # call per row (bench/README, "IAD's Python per iteration")
            tokens[:, 1:][np.arange(width - 1) < lengths[:, None]] = list(chain.from_iterable(drafts))
        # Per-iteration Python is what a batch-1 iteration pays beside the step: the Want
        # is built directly and the step timed by hand (dataclasses.replace and a context
        # manager each cost a measurable share of that).
        if proposals:
            asked = Want(argmax=want.argmax, topk=want.topk, ids=want.ids, logprobs=want.logprobs, proposals=lengths,
                         heads=source.proposal_count())
        elif keep_ids is not None:
            asked = Want(argmax=True, keep_ids=keep_ids([outs[i] for i in live_ids], drafts, width),
                         edit_margin=want.edit_margin)
        else:
            asked = want
        started = time.perf_counter()
        out = verifier.step(state, tokens, asked)
        step_seconds = time.perf_counter() - started
        stats.verifier_s += step_seconds
        stats.iterations += 1
        stats.row_steps += len(live_ids)
        if width == 1:
            nxt = (out.argmax if out.argmax is not None else out.topk_ids[:, :, 0])[:, 0]
            kept = [0] * len(live_ids)
            j = lengths
        else:
            j, nxt = accept(out, tokens[:, 1:], lengths)
            kept = j.tolist()
            stats.drafted += sum(lens)
            stats.accepted += sum(kept)
        # the accepted draft (the rest is rolled back below) and the pending token
        held = [h + n + 1 for h, n in zip(held, kept)]
        # The backend found j itself to place the heads; both must mean the same position.
        assert out.accepted is None or out.accepted.tolist() == kept, (out.accepted, j)
        source.verified(width, j, lengths, step_seconds, out)

        keep = []
        # Python ints once per step: indexing numpy arrays per row costs more at batch 32
        for r, (i, n_kept, token) in enumerate(zip(live_ids, kept, nxt.tolist())):
            new = drafts[r][:n_kept] + [token] if n_kept else [token]
            if eos in new:  # the row is done; whatever followed EOS is discarded
                new = new[:new.index(eos)]
                outs[i].extend(new)
                stats.generated += len(new) + 1
                continue
            outs[i].extend(new)
            stats.generated += len(new)
            if len(outs[i]) >= limits[i]:
                stats.hit_max_len.append(i)
            else:
                keep.append(r)
        pending = nxt
        if len(keep) < len(live_ids):
            if not keep:
                break
            state, live, held, pending = _keep_rows(verifier, state, source, stats, keep, live, held, pending)
            live_ids = live.tolist()
        if width > 1:
            started = time.perf_counter()
            state = verifier.truncate(state, np.array(held, dtype=np.int64))
            stats.verifier_s += time.perf_counter() - started
    stats.hit_max_len.sort()
    return outs


def _plain_steps(verifier, state, steps, live, pending, held, outs, limits, eos, want, stats, source):
    """Up to `steps` greedy steps of every live row (greedy.py's loop: no drafts, no
    acceptance, no roll-back); rows leave at EOS or their limit as in the main loop.
    Returns the new (state, live, pending, held)."""
    for _ in range(steps):
        with stats.timing("verifier"):
            out = verifier.step(state, pending.reshape(-1, 1), want)
        nxt = (out.argmax if out.argmax is not None else out.topk_ids[:, :, 0])[:, 0]
        keep = append_winners(outs, live.tolist(), nxt.tolist(), eos, limits, stats)
        held = [h + 1 for h in held]
        pending = nxt
        if len(keep) < len(live):
            if not keep:
                return state, live[:0], pending[:0], []
            state, live, held, pending = _keep_rows(verifier, state, source, stats, keep, live, held, pending)
    return state, live, pending, held


def _keep_rows(verifier, state, source, stats, keep, live, held, pending):
    """The verifier state, the draft source and the per-row arrays cut to the rows in
    `keep` (indices into the live rows, in order): returns (state, live, held, pending)."""
    rows = np.asarray(keep, dtype=np.int64)
    with stats.timing("verifier"):
        state = verifier.select(state, rows)
    source.keep(rows)
    return state, live[rows], [held[r] for r in keep], pending[rows]


def _cut(draft, eos: int, budget: int) -> list[int]:
    """The draft up to and including its first EOS, and at most `budget` tokens (the
    accepted draft plus the verifier's token must fit the row's length limit), as a list
    of Python ints (IAD's drafts already are: they are not copied again)."""
    if len(draft) > budget:  # (a list within its budget is not copied)
        draft = draft[:max(budget, 0)]
    if not isinstance(draft, list):
        draft = [int(t) for t in draft]
    if eos in draft:
        draft = draft[:draft.index(eos) + 1]
    return draft
