"""The beam search pyfastdec shipped before it was vectorised (decoding/beam.py at
b76176a, unchanged below this note): one Python object per sentence, candidates scanned
one by one. Kept only as the reference the vectorised beam_search must equal, outputs
and scores bit for bit (tests/test_beam_vectorised.py).

Beam search with length normalisation, batched, n-best.

Same search as export/decode.py's reference (so pyfastdec and the training-side
evaluation rank hypotheses alike):
- Each step every live hypothesis is extended; per sentence the best 2*beam candidates
  by summed log-prob are scanned in order: an EOS candidate finishes a hypothesis if it
  ranks within the first `beam` (so beam 1 is exactly greedy), the others fill the next
  beam (up to `beam` of them).
- A finished hypothesis scores sum(log p) / (len + 1)^alpha, len + 1 counting its EOS
  (alpha = 1.0 by default: plain per-token average).
- A sentence stops when it has `beam` finished hypotheses, or when its best finished
  score beats the best any live hypothesis could still reach (log-probs only fall, and
  length is bounded by max_len), or at max_len, where its live hypotheses are returned
  as unfinished (scored as if EOS followed, Hypothesis.finished = False).
Hypotheses are backend rows: `select` with repeated rows copies a parent's state into
each of its children, and finished sentences' rows simply are not selected.
"""
from __future__ import annotations

import math

import numpy as np

from pyfastdec.backends.base import Backend, Want

from pyfastdec.decoding.limits import row_limits
from pyfastdec.decoding.result import DecodeStats, Hypothesis


class _Sentence:
    """The search of one input: its live hypotheses (token lists and summed log-probs)
    and the finished ones."""

    def __init__(self, limit: int):
        self.limit = limit
        self.live: list[tuple[list[int], float]] = [([], 0.0)]
        self.finished: list[Hypothesis] = []

    def advance(self, ids: np.ndarray, logp: np.ndarray, beam: int, eos: int, alpha: float
                ) -> list[tuple[int, int]]:
        """One step from each live hypothesis's top candidates ids/logp [live, K].
        Returns (parent, token) for the new live hypotheses ([] when the sentence ends)."""
        total = np.array([score for _, score in self.live])[:, None] + logp.astype(np.float64)
        flat = total.reshape(-1)
        order = np.argsort(-flat, kind="stable")[:2 * beam]
        children: list[tuple[int, int]] = []
        new_live: list[tuple[list[int], float]] = []
        for rank, f in enumerate(order):
            score = float(flat[f])
            if score == -math.inf or len(new_live) == beam:
                break
            parent, col = divmod(int(f), logp.shape[1])
            token, seq = int(ids[parent, col]), self.live[parent][0]
            if token == eos:
                if rank < beam:
                    self.finished.append(Hypothesis(seq, self._normalised(score, seq, alpha)))
                continue
            children.append((parent, token))
            new_live.append((seq + [token], score))
        self.live = new_live
        if not new_live:
            return []
        if len(new_live[0][0]) >= self.limit:  # out of length: live ones count as finished
            self.finished += [Hypothesis(seq, self._normalised(s, seq, alpha), finished=False)
                              for seq, s in new_live]
            return []
        best_done = max((h.score for h in self.finished), default=-math.inf)
        best_live = new_live[0][1]  # candidates were scanned best first
        reachable = best_live / (self.limit + 1) ** alpha if best_live < 0 else best_live
        if len(self.finished) >= beam or best_done >= reachable:
            return []
        return children

    @staticmethod
    def _normalised(score: float, seq: list[int], alpha: float) -> float:
        return score / (len(seq) + 1) ** alpha


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
    with stats.total():
        sentences = [_Sentence(limit) for limit in row_limits(src_ids, max_len)]
        bos, eos = backend.tokens["bos"], backend.tokens["eos"]
        k = min(2 * beam, backend.vocab_size)
        with stats.timing("encoder"):
            memory = backend.encode(src_ids)
        with stats.timing("verifier"):
            state = backend.start(memory)
        owner = np.arange(len(src_ids))  # input index of each state row (contiguous per input)
        tokens = np.full((len(src_ids), 1), bos, dtype=np.int64)
        while owner.size:
            with stats.timing("verifier"):
                out = backend.step(state, tokens, Want(argmax=False, topk=k))
            stats.iterations += 1
            stats.row_steps += owner.size
            ids, logp = out.topk_ids[:, 0], out.topk_logprobs[:, 0]
            rows, next_tokens, next_owner = [], [], []
            first = 0
            while first < owner.size:
                s = int(owner[first])
                count = len(sentences[s].live)
                for parent, token in sentences[s].advance(ids[first:first + count], logp[first:first + count],
                                                          beam, eos, alpha):
                    rows.append(first + parent)
                    next_tokens.append(token)
                    next_owner.append(s)
                first += count
            owner = np.asarray(next_owner, dtype=np.int64)
            if rows:
                with stats.timing("verifier"):
                    state = backend.select(state, np.asarray(rows, dtype=np.int64))
                tokens = np.asarray(next_tokens, dtype=np.int64).reshape(-1, 1)
    results = []
    for i, sentence in enumerate(sentences):
        ranked = sorted(sentence.finished, key=lambda h: -h.score)[:nbest]
        results.append(ranked)
        if ranked:
            stats.generated += len(ranked[0].tokens) + int(ranked[0].finished)
            if not ranked[0].finished:
                stats.hit_max_len.append(i)
    return results, stats
