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

rule="hf" keeps the same candidates and live hypotheses each step but stops as
transformers' `_beam_search` does with early_stopping=False (5.x generation/utils.py:
_update_finished_beams, _check_early_stop_heuristic), so converted Hugging Face models
give `generate(num_beams=beam, length_penalty=alpha)`'s n-best (num_return_sequences):
- Each sentence keeps a pool of its `beam` best finished scores. An EOS candidate within
  the first `beam` ranks scores sum / (len + 1)^alpha as above and enters the pool if it
  beats the pool's worst (or the pool is not full).
- A sentence stops once its pool is full and its best live hypothesis, normalised by the
  tokens it holds now (sum / len^alpha, not the best it could reach), does not beat the
  pool's worst; it never resumes (HF's flag is sticky).
- At max_len the candidates within the first `beam` ranks that are not EOS count as
  finished, unfinished, scored sum / len^alpha with len counting their last token (no
  EOS is imagined after it); the other non-EOS candidates are dropped.
- Log-probs are summed and scores kept in float32, as HF does (this matters only for
  exact ties); at most `beam` hypotheses are returned per input.
With beam 1 both rules are greedy search (HF's generate(num_beams=1) is greedy too).
Equal scores may order differently from HF's (torch.topk does not promise an order).

Hypotheses are backend rows: `select` with repeated rows gives each child its parent's
state (the native engine shares the positions and copies them only when a child is
stepped), and finished sentences' rows simply are not selected.

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

RULES = ("pyfastdec", "hf")  # beam_search's stopping rules


class _Hypotheses:
    """What the search keeps besides the backend state: each step's back-pointers (the
    parent row and the token of every row it kept), so no step copies token lists, and
    the finished hypotheses in the order they finished."""

    def __init__(self):
        self.history: list[tuple[np.ndarray, np.ndarray]] = []  # [t - 1]: rows holding t tokens
        self.blocks: list[tuple[np.ndarray, ...]] = []

    def keep(self, parents: np.ndarray, tokens: np.ndarray):
        self.history.append((parents, tokens))

    def finish(self, sentences: np.ndarray, scores: np.ndarray, held: int, rows: np.ndarray,
               last: np.ndarray | None):
        """Rows (holding `held` tokens) finished with these scores; `last`: one more token
        each (a child cut at max_len, unfinished), None: they ended with EOS."""
        extra = np.full(rows.size, -1, dtype=np.int64) if last is None else last
        self.blocks.append((sentences, scores, np.full(rows.size, held), rows, extra))

    def tokens(self, held: int, row: int, last: int) -> list[int]:
        out = [] if last < 0 else [last]
        for parents, tokens in reversed(self.history[:held]):
            out.append(int(tokens[row]))
            row = parents[row]
        return out[::-1]

    def ranked(self, sentences: int, nbest: int) -> list[list[Hypothesis]]:
        """Per sentence its hypotheses by score, best first, equal scores in finishing
        order (a stable sort, as the reference's sorted()); the first nbest of each."""
        results: list[list[Hypothesis]] = [[] for _ in range(sentences)]
        if not self.blocks:
            return results
        owner, scores, held, rows, extra = (np.concatenate(column) for column in zip(*self.blocks))
        order = np.lexsort((-scores, owner))  # stable: equal scores keep finishing order
        bounds = np.searchsorted(owner[order], np.arange(sentences + 1))
        for s in range(sentences):
            for j in order[bounds[s]:bounds[s + 1]][:nbest]:
                results[s].append(Hypothesis(self.tokens(int(held[j]), int(rows[j]), int(extra[j])),
                                             float(scores[j]), finished=bool(extra[j] < 0)))
        return results


def _merge_pool(pool: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The hf rule's pool [sentences, beam] (best first, -inf where empty) after these
    new finished scores [sentences, any] (-inf: none): the best `beam` of both."""
    merged = np.concatenate((pool, scores.astype(pool.dtype, copy=False)), axis=1)
    return -np.sort(-merged, axis=1)[:, :pool.shape[1]]


def _one_sentence(total: np.ndarray, ids: np.ndarray, hyps: _Hypotheses, act: np.ndarray,
                  act_limit: np.ndarray, act_norm: np.ndarray, act_best: np.ndarray, act_done: np.ndarray,
                  act_pool: np.ndarray | None, beam: int, eos: int, alpha: float, length: int, any_done: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One step of beam_search's scan for a single active sentence (its rows total/ids
    [rows, k]), on Python scalars: at batch 1 the masks' dozen numpy calls per step cost
    more than the scan itself. Exactly the same decisions, in the same order, with the
    same arithmetic (float64, or float32 for the hf rule: act_pool not None); updates
    act_best/act_done/act_pool in place and records in hyps.
    Returns the kept (parent rows, tokens, summed log-probs), None when the sentence ends."""
    hf = act_pool is not None
    flat = total.reshape(-1)
    width = total.shape[1]
    order = np.argsort(-flat, kind="stable")[:2 * beam]
    cands, tokens, parents = flat.take(order).tolist(), ids.reshape(-1).take(order).tolist(), (order // width).tolist()
    rows: list[int] = []
    kept_tokens: list[int] = []
    sums: list[float] = []
    first_ranks = 0  # children within the first `beam` ranks (the hf rule cuts those at max_len)
    ended: list[float] = []
    ended_rows: list[int] = []
    for rank, cand in enumerate(cands):
        if cand == -np.inf or len(rows) == beam:
            break
        if tokens[rank] == eos:
            if rank < beam:
                # hf: float32 sum / Python float, as torch divides a float32 tensor
                ended.append((np.float32(cand) if hf else cand) / (length + 1) ** alpha)
                ended_rows.append(parents[rank])
            continue
        rows.append(parents[rank])
        kept_tokens.append(tokens[rank])
        sums.append(cand)
        first_ranks += rank < beam
    sentence = act[0]
    if ended:
        scores = np.array(ended)
        hyps.finish(np.full(len(ended), sentence), scores, length, np.array(ended_rows, dtype=np.int64), None)
        act_best[0] = max(act_best[0], max(ended))
        act_done[0] += len(ended)
        any_done = True
        if hf:
            act_pool[:] = _merge_pool(act_pool, scores[None, :])
    if not rows:
        return None
    length += 1
    if length >= act_limit[0]:  # out of length: the live ones count as finished, unfinished
        if hf:  # HF finalises the first `beam` ranks, normalised by the tokens they hold
            cut = slice(0, first_ranks)
            scores = np.array(sums[cut], dtype=np.float32) / length ** alpha
        else:
            cut = slice(0, len(rows))
            scores = np.array(sums) / (length + 1) ** alpha
        hyps.finish(np.full(len(scores), sentence), scores, length - 1,
                    np.array(rows[cut], dtype=np.int64), np.array(kept_tokens[cut], dtype=np.int64))
        return None
    if hf:  # the pool is full and the best live one, normalised at its length, does not beat its worst
        worst = act_pool[0, beam - 1]
        if worst > -np.inf and not np.float32(sums[0]) / length ** alpha > worst:
            return None
    elif any_done:  # the early stop (sums[0] is the best live: scanned best first)
        reach = sums[0] / act_norm[0] if sums[0] < 0 else sums[0]
        if act_done[0] >= beam or act_best[0] >= reach:
            return None
    rows_at = np.array(rows, dtype=np.int64)
    kept = np.array(kept_tokens, dtype=np.int64)
    hyps.keep(rows_at, kept)
    return rows_at, kept, np.array(sums, dtype=total.dtype)


def beam_search(backend: Backend, src_ids: list[list[int]], beam_size: int = 5,
                nbest: int | None = None, alpha: float = 1.0, max_len: int | None = None,
                rule: str = "pyfastdec") -> tuple[list[list[Hypothesis]], DecodeStats]:
    """Per input (in input order) its n-best hypotheses, best first, and statistics.

    nbest: how many to return per input (default beam_size; fewer when the search stopped
    early; the hf rule returns at most beam_size). alpha: length-normalisation exponent.
    max_len as in greedy. rule: when a sentence stops and how hypotheses cut at max_len
    score, "pyfastdec" or "hf" (RULES; the module docstring says what each does).
    Stats: iterations = `step` calls; row_steps counts hypotheses (rows) per call;
    generated = the tokens of each input's best hypothesis (+ its EOS); hit_max_len = the
    inputs whose best hypothesis is unfinished.
    """
    if int(beam_size) < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    hf = rule == "hf"
    beam = int(beam_size)
    nbest = beam if nbest is None else int(nbest)
    if hf:  # HF returns from its pool of `beam` finished hypotheses
        nbest = min(nbest, beam)
    stats = DecodeStats(sentences=len(src_ids))
    if not src_ids:
        return [], stats
    n = len(src_ids)
    hyps = _Hypotheses()
    with stats.total():
        # Per active sentence (ascending; their rows contiguous in this order): its input
        # index, output limit, (limit + 1)^alpha (Python's pow, as the reference: same
        # bits), best finished score and how many finished.
        act = np.arange(n)
        act_limit = np.asarray(row_limits(src_ids, max_len), dtype=np.int64)
        act_norm = np.array([(int(limit) + 1) ** alpha for limit in act_limit], dtype=np.float64)
        act_best = np.full(n, -np.inf)
        act_done = np.zeros(n, dtype=np.int64)
        # hf rule: per active sentence its pool, the best `beam` finished scores (best
        # first, -inf where empty), in float32 as HF keeps them.
        act_pool = np.full((n, beam), -np.inf, dtype=np.float32) if hf else None
        # Live rows: summed log-probs (float32 for the hf rule, as HF sums); `per` rows for
        # every sentence (slot order = rank order), or per = 0 and `cell` = each row's
        # place in a [sentences * beam] grid.
        summed = np.zeros(n, dtype=np.float32 if hf else np.float64)
        per, cell = 1, None
        bos, eos = backend.tokens["bos"], backend.tokens["eos"]
        k = min(2 * beam, backend.vocab_size)
        with stats.timing("encoder"):
            memory = backend.encode(src_ids)
        with stats.timing("verifier"):
            state = backend.start(memory)
        tokens = np.full((n, 1), bos, dtype=np.int64)
        length = 0  # tokens every live row holds
        first_limit = int(act_limit.min())
        any_done = False
        offsets_for = None  # (count, row width): each sentence's first index in the flat grid
        while act.size:
            with stats.timing("verifier"):
                out = backend.step(state, tokens, Want(argmax=False, topk=k))
            stats.iterations += 1
            stats.row_steps += summed.size
            ids, logp = out.topk_ids[:, 0], out.topk_logprobs[:, 0]
            count, width = act.size, ids.shape[1]
            total = summed[:, None] + logp  # float64, as the reference's sums
            if hf:
                total = total.astype(np.float32, copy=False)
            if count == 1:  # batch 1, or the last sentence left: the scan in plain Python
                kept = _one_sentence(total, ids, hyps, act, act_limit, act_norm, act_best, act_done,
                                     act_pool, beam, eos, alpha, length, any_done)
                if kept is None:
                    break
                length += 1
                any_done = any_done or act_done[0] > 0
                rows, tokens, summed = kept
                per = summed.size
                with stats.timing("verifier"):
                    state = backend.select(state, rows)
                tokens = tokens.reshape(-1, 1)
                continue
            if per:
                slots = per
            else:  # pad every sentence to `beam` rows of -inf: they rank last and stop the scan
                slots = beam
                padded = np.full((count * beam, width), -np.inf, dtype=total.dtype)
                padded[cell] = total
                total = padded
                padded = np.zeros((count * beam, width), dtype=np.int64)
                padded[cell] = ids
                ids = padded
                row_of = np.zeros(count * beam, dtype=np.int64)
                row_of[cell] = np.arange(summed.size)
            # Best first; equal sums by position in the grid: parent slot, then top-k rank.
            order = np.argsort(-total.reshape(count, slots * width), axis=1, kind="stable")[:, :2 * beam]
            if offsets_for != (count, slots * width):
                offsets_for = (count, slots * width)
                offsets = np.arange(count)[:, None] * (slots * width)
            at = order + offsets  # flat index into total / ids: (sentence * slots + slot) * width + rank
            cand, token = total.take(at), ids.take(at)
            parent = at // width if per else row_of.take(at // width)
            # The reference's scan as masks: it stops at the first -inf and once `beam`
            # children are taken; EOS finishes a hypothesis within the first `beam` ranks.
            is_eos = token == eos
            not_eos = ~is_eos
            before = not_eos.cumsum(axis=1) - not_eos
            scanned = np.logical_and.accumulate(cand != -np.inf, axis=1) & (before < beam)
            child = scanned & not_eos
            ended = (scanned & is_eos)[:, :beam]
            if np.count_nonzero(ended):  # (count_nonzero: the cheapest test on small arrays)
                ended_scores = np.where(ended, cand[:, :beam] / (length + 1) ** alpha, -np.inf)
                g, r = np.nonzero(ended)  # sentence-major, rank order: the reference's order
                hyps.finish(act[g], ended_scores[g, r], length, parent[g, r], None)
                act_best = np.maximum(act_best, ended_scores.max(axis=1))
                act_done = act_done + ended.sum(axis=1)
                any_done = True
                if hf:
                    act_pool = _merge_pool(act_pool, ended_scores)
            length += 1
            children = child.sum(axis=1)
            go = children > 0
            if length >= first_limit:  # out of length: the live ones count as finished, unfinished
                at_limit = go & (length >= act_limit)
                if np.count_nonzero(at_limit):
                    cut = child & at_limit[:, None]
                    if hf:  # HF finalises the first `beam` ranks, normalised by the tokens they hold
                        cut[:, beam:] = False
                    g, r = np.nonzero(cut)
                    norm = length ** alpha if hf else (length + 1) ** alpha
                    hyps.finish(act[g], cand[g, r] / norm, length - 1, parent[g, r], token[g, r])
                    go &= ~at_limit
            if hf:  # stop once the pool is full and the best live one does not beat its worst
                worst = act_pool[:, beam - 1]
                if np.count_nonzero(worst > -np.inf):
                    best_live = np.where(child, cand, -np.inf).max(axis=1)
                    go &= ~((worst > -np.inf) & ~(best_live / length ** alpha > worst))
            elif any_done:  # the early stop: `beam` finished, or the best finished out of reach
                best_live = np.where(child, cand, -np.inf).max(axis=1)
                reach = best_live / np.where(best_live < 0, act_norm, 1.0)
                go &= (act_done < beam) & ~(act_best >= reach)

            stopped = np.count_nonzero(go) < count
            keep = child & go[:, None] if stopped else child
            kept = np.flatnonzero(keep)
            rows, tokens, summed = parent.take(kept), token.take(kept), cand.take(kept)
            hyps.keep(rows, tokens)
            if not kept.size:
                break
            if stopped:
                act, act_limit, act_norm, act_best, act_done, children, keep = (
                    a[go] for a in (act, act_limit, act_norm, act_best, act_done, children, keep))
                if hf:
                    act_pool = act_pool[go]
                first_limit = int(act_limit.min())
            if kept.size == act.size * beam:
                per, cell = beam, None
            elif (children == children[0]).all():
                per, cell = int(children[0]), None
            else:
                per = 0
                cell = (np.arange(act.size)[:, None] * beam + keep.cumsum(axis=1) - 1)[keep]
            with stats.timing("verifier"):
                state = backend.select(state, rows)
            tokens = tokens.reshape(-1, 1)
    results = hyps.ranked(n, nbest)
    for i, ranked in enumerate(results):
        if ranked:
            stats.generated += len(ranked[0].tokens) + int(ranked[0].finished)
            if not ranked[0].finished:
                stats.hit_max_len.append(i)
    return results, stats
