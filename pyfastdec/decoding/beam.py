"""Beam search with length normalisation, batched, n-best.

Same search as export/decode.py's reference (so pyfastdec and the training-side
evaluation rank hypotheses alike):
- Each step every live hypothesis is extended; per sentence the best 2*beam candidates
  by summed log-prob are scanned in order: an EOS candidate finishes a hypothesis if it
  ranks within the first `beam` (so beam 1 is exactly greedy), the others fill the next
  beam (up to `beam` of them). Equal sums rank by parent (best parent first), then by
  the parent's top-k position; the scan stops at the first -inf candidate.
- A finished hypothesis scores sum(log p) / (len + 1)^alpha, len + 1 counting its EOS
  (alpha = 1.0 by default: plain per-token average).
- A sentence stops when it has `beam` finished hypotheses, or when its best finished
  score beats the best any live hypothesis could still reach (log-probs only fall, and
  length is bounded by max_len), or at max_len, where its live hypotheses are returned
  as unfinished (scored as if EOS followed, Hypothesis.finished = False).
- The n-best list is the finished hypotheses by score, best first; equal scores keep
  the order they finished in (by step; within a step EOS ones by rank, then the
  unfinished ones cut at max_len).
Hypotheses are backend rows: `select` with repeated rows copies a parent's state into
each of its children, and finished sentences' rows simply are not selected.

Every step is a handful of numpy operations over all sentences at once (no Python per
hypothesis or per sentence): each sentence's candidates sit in one row of a
[sentences, beam * k] grid (missing parents padded with -inf, which rank last and stop
the scan as a real -inf does), so the per-sentence scan becomes cumulative masks. The
per-sentence implementation it replaced is kept in tests/beam_reference.py, and the
tests require the same outputs and scores, bit for bit.
"""
from __future__ import annotations

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .limits import row_limits
from .result import DecodeStats, Hypothesis


class _Finished:
    """Finished hypotheses of all sentences, in the order they finished: blocks of
    (sentence ids, scores, token rows, finished flag), one or two per step."""

    def __init__(self):
        self.blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool]] = []

    def add(self, owners: np.ndarray, scores: np.ndarray, tokens: np.ndarray, finished: bool):
        if owners.size:
            self.blocks.append((owners, scores, tokens, finished))

    def ranked(self, sentences: int, nbest: int) -> list[list[Hypothesis]]:
        """Per sentence its hypotheses by score, best first, ties in finishing order
        (a stable sort, as the reference's sorted()); the first nbest of each."""
        results: list[list[Hypothesis]] = [[] for _ in range(sentences)]
        if not self.blocks:
            return results
        owners = np.concatenate([b[0] for b in self.blocks])
        scores = np.concatenate([b[1] for b in self.blocks])
        block = np.concatenate([np.full(b[0].size, i) for i, b in enumerate(self.blocks)])
        row = np.concatenate([np.arange(b[0].size) for b in self.blocks])
        order = np.lexsort((-scores, owners))  # stable: equal scores keep finishing order
        bounds = np.searchsorted(owners[order], np.arange(sentences + 1))
        for s in range(sentences):
            for j in order[bounds[s]:bounds[s + 1]][:nbest]:
                _, _, tokens, finished = self.blocks[block[j]]
                results[s].append(Hypothesis(tokens[row[j]].tolist(), float(scores[j]), finished=finished))
        return results


def beam_search(backend: Backend, src_ids: list[list[int]], beam_size: int = 5,
                nbest: int | None = None, alpha: float = 1.0, max_len: int | None = None
                ) -> tuple[list[list[Hypothesis]], DecodeStats]:
    """Per input (in input order) its n-best hypotheses, best first, and statistics.

    nbest: how many to return per input (default beam_size; fewer when the search stopped
    early). alpha: length-normalisation exponent. max_len as in greedy.
    Stats: iterations = `step` calls; row_steps counts hypotheses (rows) per call;
    generated = the tokens of each input's best hypothesis (+ its EOS); hit_max_len = the
    inputs whose best hypothesis is unfinished.
    """
    if int(beam_size) < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    beam = int(beam_size)
    nbest = beam if nbest is None else int(nbest)
    stats = DecodeStats(sentences=len(src_ids))
    if not src_ids:
        return [], stats
    done = _Finished()
    with stats.total():
        limits = np.asarray(row_limits(src_ids, max_len), dtype=np.int64)
        # (limit + 1)^alpha with Python's pow, as the reference computed it: same bits.
        reach_norm = np.array([(int(limit) + 1) ** alpha for limit in limits], dtype=np.float64)
        bos, eos = backend.tokens["bos"], backend.tokens["eos"]
        k = min(2 * beam, backend.vocab_size)
        with stats.timing("encoder"):
            memory = backend.encode(src_ids)
        with stats.timing("verifier"):
            state = backend.start(memory)
        n = len(src_ids)
        best_done = np.full(n, -np.inf)
        done_count = np.zeros(n, dtype=np.int64)
        # One entry per live hypothesis = state row; rows are grouped by sentence
        # (ascending) and best first within it (slot = rank among its sentence's live ones).
        owner = np.arange(n)
        slot = np.zeros(n, dtype=np.int64)
        summed = np.zeros(n, dtype=np.float64)
        seqs = np.zeros((n, 0), dtype=np.int64)
        tokens = np.full((n, 1), bos, dtype=np.int64)
        length = 0  # every live hypothesis holds this many tokens
        while owner.size:
            with stats.timing("verifier"):
                out = backend.step(state, tokens, Want(argmax=False, topk=k))
            stats.iterations += 1
            stats.row_steps += owner.size
            ids, logp = out.topk_ids[:, 0], out.topk_logprobs[:, 0]
            rows_n, width = ids.shape
            new_sentence = np.empty(rows_n, dtype=bool)
            new_sentence[0], new_sentence[1:] = True, owner[1:] != owner[:-1]
            group = np.cumsum(new_sentence) - 1  # index of each row's sentence among the active ones
            active = owner[new_sentence]
            count = active.size
            grid = np.full((count, beam, width), -np.inf)
            grid[group, slot] = summed[:, None] + logp.astype(np.float64)
            row_of = np.zeros((count, beam), dtype=np.int64)
            row_of[group, slot] = np.arange(rows_n)
            flat = grid.reshape(count, beam * width)
            order = np.argsort(-flat, axis=1, kind="stable")[:, :2 * beam]
            cand = np.take_along_axis(flat, order, axis=1)  # [count, C] best first
            parent_slot, column = np.divmod(order, width)
            parent = np.take_along_axis(row_of, parent_slot, axis=1)
            token = ids[parent, column]
            is_eos = token == eos
            not_eos = ~is_eos
            before = np.cumsum(not_eos, axis=1) - not_eos  # children ranked above each candidate
            scanned = np.logical_and.accumulate(cand != -np.inf, axis=1) & (before < beam)
            child = scanned & not_eos
            ended = scanned & is_eos
            ended[:, beam:] = False  # EOS counts only within the first `beam` ranks

            g, r = np.nonzero(ended)  # sentence-major, rank order: the reference's order
            if g.size:
                normalised = cand[g, r] / (length + 1) ** alpha
                done.add(active[g], normalised, seqs[parent[g, r]], True)
                step_best = np.full(count, -np.inf)
                np.maximum.at(step_best, g, normalised)
                best_done[active] = np.maximum(best_done[active], step_best)
                done_count[active] += np.bincount(g, minlength=count)

            length += 1
            g, r = np.nonzero(child)
            child_score = cand[g, r]
            child_seqs = np.concatenate([seqs[parent[g, r]], token[g, r][:, None]], axis=1)
            has_child = child.any(axis=1)
            at_limit = has_child & (length >= limits[active])
            if at_limit.any():  # out of length: the live ones count as finished, unfinished
                cut = at_limit[g]
                done.add(active[g[cut]], child_score[cut] / (length + 1) ** alpha, child_seqs[cut], False)
            best_live = cand[np.arange(count), np.argmax(child, axis=1)]  # first child = best
            reach = np.where(best_live < 0, best_live / reach_norm[active], best_live)
            go_on = has_child & ~at_limit & (done_count[active] < beam) & ~(best_done[active] >= reach)

            keep = go_on[g]
            owner = active[g[keep]]
            slot = (np.cumsum(child, axis=1) - 1)[g[keep], r[keep]]
            summed = child_score[keep]
            seqs = child_seqs[keep]
            if owner.size:
                with stats.timing("verifier"):
                    state = backend.select(state, parent[g[keep], r[keep]])
                tokens = token[g[keep], r[keep]].reshape(-1, 1)
    results = done.ranked(n, nbest)
    for i, ranked in enumerate(results):
        if ranked:
            stats.generated += len(ranked[0].tokens) + int(ranked[0].finished)
            if not ranked[0].finished:
                stats.hit_max_len.append(i)
    return results, stats
