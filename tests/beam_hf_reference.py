"""transformers' `_beam_search` (5.x, early_stopping=False) transcribed one sentence at a
time in plain Python, over a pyfastdec backend: the reference rule="hf" of
pyfastdec.decoding.beam must equal (tests/test_beam_hf_rule.py).

Written from HF's loop, not from beam.py: running beams, a pool of `beam` finished
hypotheses that new ones must beat, a sticky "improvement still possible" flag, and
max_length as a stopping criterion that every candidate of the last step hits. Where HF
leaves the order open (torch.topk among equal scores) it takes beam.py's: candidates by
parent then top-k rank, the pool's older entries before newer equal ones, and at the
last step EOS ones before the unfinished ones. HF's dummy
beams (score -1e9 at the first step) are left out: they only matter when a parent has
fewer than 2 * beam finite candidates, and the scan stops at -inf instead.
"""
from __future__ import annotations

import numpy as np

from pyfastdec.backends.base import Want
from pyfastdec.decoding.limits import row_limits
from pyfastdec.decoding.result import Hypothesis


def _one(backend, src: list[int], limit: int, beam: int, alpha: float) -> list[Hypothesis]:
    eos = backend.tokens["eos"]
    state = backend.start(backend.encode([src]))
    running: list[tuple[list[int], np.float32]] = [([], np.float32(0.0))]
    pool: list[Hypothesis] = []  # best first, at most `beam`
    improvable = True
    tokens = np.array([[backend.tokens["bos"]]], dtype=np.int64)
    cur = 0  # tokens every running beam holds (HF: cur_len - decoder_prompt_len)
    while True:
        out = backend.step(state, tokens, Want(argmax=False, topk=min(2 * beam, backend.vocab_size)))
        cands = []  # (summed log-prob, parent, token), in the grid's order
        for parent, (seq, total) in enumerate(running):
            for token, logp in zip(out.topk_ids[parent, 0], out.topk_logprobs[parent, 0]):
                cands.append((np.float32(total + np.float32(logp)), parent, int(token)))
        order = sorted(range(len(cands)), key=lambda i: -cands[i][0])[:2 * beam]  # stable
        top = [cands[i] for i in order if cands[i][0] != -np.inf]
        last = cur + 1 >= limit  # every candidate of this step hits max_length
        hits = [last or token == eos for _, _, token in top]
        # _get_running_beams_for_next_iteration: the best `beam` that hit nothing
        nxt = [c for c, hit in zip(top, hits) if not hit][:beam]
        # _update_finished_beams: hits within the first `beam` ranks, if still improvable
        if improvable:
            new = [Hypothesis(running[parent][0] + ([] if token == eos else [token]),
                              np.float32(total) / (cur + 1) ** alpha, finished=token == eos)
                   for (total, parent, token), hit in zip(top[:beam], hits) if hit]
            new = [h for h in new if h.finished] + [h for h in new if not h.finished]
            pool = sorted(pool + new, key=lambda h: -h.score)[:beam]
        cur += 1
        if not nxt or last:
            break
        running = [(running[parent][0] + [token], total) for total, parent, token in nxt]
        # _check_early_stop_heuristic: sticky once false
        full = len(pool) == beam
        improvable = improvable and (not full or running[0][1] / cur ** alpha > pool[-1].score)
        if not improvable:
            break
        state = backend.select(state, np.array([parent for _, parent, _ in nxt], dtype=np.int64))
        tokens = np.array([[token] for _, _, token in nxt], dtype=np.int64)
    return [Hypothesis(h.tokens, float(h.score), h.finished) for h in pool]


def beam_search_hf(backend, src_ids: list[list[int]], beam_size: int, alpha: float = 1.0,
                   max_len: int | None = None) -> list[list[Hypothesis]]:
    limits = row_limits(src_ids, max_len)
    return [_one(backend, src, int(limit), beam_size, alpha) for src, limit in zip(src_ids, limits)]
