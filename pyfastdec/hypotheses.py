"""Output hypotheses of the API and what is computed over them: one input's n-best list
joined from its units' (sentences'), the score an output is ranked by, teacher-forced
scores for strategies that do not score as they go, and statistics summed over batches.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple, Sequence

import numpy as np

from pyfastdec.backends.base import Backend, Want
from pyfastdec.decoding import DecodeStats


@dataclass
class Hyp:
    """One output hypothesis: the output ids of each unit of the input (sentence, or part
    of a cut sentence), summed log-prob (EOS included) and the number of scored
    positions, so the scores of units add up to a per-token average."""

    chunks: list[list[int] | str]  # a str: a unit returned as it is (sentence_units.Unit.keep)
    logprob: float = 0.0
    positions: int = 0


class ScoredOutput(NamedTuple):
    """One hypothesis of Translator.translate_scored: the output (its input's kind), the
    summed log-prob of its tokens (EOS included when it ended there), how many tokens
    that sum covers, and the score it is ranked by: logprob / tokens^length_penalty."""

    output: object
    logprob: float
    tokens: int
    score: float


def score(hyp: Hyp, length_penalty: float) -> float:
    """What hypotheses are ranked by: logprob / positions^length_penalty."""
    return hyp.logprob / hyp.positions ** length_penalty if hyp.positions else 0.0


def join_units(units: list[list[Hyp]]) -> list[Hyp]:
    """The n-best list of one input from those of its units: the k-th hypotheses of
    every unit joined (as many as the shortest unit list has); an input without
    units (empty) gives one empty hypothesis."""
    if not units:
        return [Hyp([[]])]
    if len(units) == 1:
        return units[0]
    joined = []
    for k in range(min(len(u) for u in units)):
        parts = [u[k] for u in units]
        joined.append(Hyp([c for p in parts for c in p.chunks], sum(p.logprob for p in parts),
                          sum(p.positions for p in parts)))
    return joined


def from_beam(results: list, prefixes: list, prefix_logps: list[float], length_penalty: float,
              beam_rule: str) -> list[list[Hyp]]:
    """Beam search's n-best Hypothesis lists (decoding/beam.py) as Hyp lists, each output
    after its row's prefix. Beam scores are logprob / positions^length_penalty, so the sum
    comes back exactly; positions count EOS, or (default rule) the EOS a hypothesis cut at
    max_len is scored as if it had."""
    cut_extra = 0 if beam_rule == "hf" else 1

    def positions(h):
        return len(h.tokens) + (1 if h.finished else cut_extra)
    return [[Hyp([p + h.tokens], h.score * positions(h) ** length_penalty + lp, len(p) + positions(h))
             for h in r] or [Hyp([list(p)])] for r, p, lp in zip(results, prefixes, prefix_logps)]


def merge_stats(total: DecodeStats, part: DecodeStats, inputs: Sequence[int]) -> None:
    """Add one batch's counters and times to `total`; part.hit_max_len and part.looping
    hold batch row indices, mapped here to input indices (`inputs[row]`)."""
    for f in fields(DecodeStats):
        if f.name in ("hit_max_len", "looping"):
            rows = {int(inputs[r]) for r in getattr(part, f.name)}
            setattr(total, f.name, sorted(set(getattr(total, f.name)) | rows))
        elif f.name != "sentences":
            setattr(total, f.name, getattr(total, f.name) + getattr(part, f.name))


def forced_scores(backend: Backend, src_ids: list[list[int]], outs: list[list[int]],
                  unfinished: Sequence[int] = ()) -> list[float]:
    """Summed log-prob of each output followed by EOS under `backend` (teacher-forced in
    one step per batch): the scores of strategies that do not score as they go. Rows in
    `unfinished` (stopped at max_len) sum their tokens only, as beam search does."""
    bos, eos, pad = backend.tokens["bos"], backend.tokens["eos"], backend.tokens["pad"]
    width = 1 + max(len(o) for o in outs)
    tokens = np.full((len(outs), width), pad, dtype=np.int64)
    targets = np.full((len(outs), width), eos, dtype=np.int64)
    for r, out in enumerate(outs):
        tokens[r, :1 + len(out)] = [bos] + list(out)
        targets[r, :len(out)] = out
    state = backend.start(backend.encode(src_ids))
    logp = backend.step(state, tokens, Want(argmax=False, ids=targets)).id_logprobs
    cut = set(int(r) for r in unfinished)
    return [float(np.sum(logp[r, :len(out) + (r not in cut)], dtype=np.float64)) for r, out in enumerate(outs)]
