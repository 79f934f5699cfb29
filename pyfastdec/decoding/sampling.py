"""Random sampling, greedy-style: one token per row per step, drawn from the model's
distribution (CTranslate2's sampling_topk / sampling_temperature).

Each step draws from softmax(log p / temperature) restricted to the `topk` most likely
tokens (topk 0: the whole vocabulary, or the shortlist). topk = 1 takes the top token
without drawing: greedy's output exactly, whatever the temperature. Every row draws from
its own generator (`seeds[i]`), so a row's sample does not depend on which rows share
its batch or in which order they were sorted.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .limits import row_limits
from .result import DecodeStats


def check_sampling(topk: int, temperature: float, vocab_size: int) -> None:
    if isinstance(topk, bool) or not isinstance(topk, (int, np.integer)) or not 0 <= topk <= vocab_size:
        raise ValueError(f"sampling_topk must be an int in [0, vocab_size={vocab_size}] (0: the whole "
                         f"vocabulary, 1: greedy), got {topk!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"sampling_temperature must be a number > 0, got {temperature!r}")


def _draw(rng: np.random.Generator, ids: np.ndarray, logp: np.ndarray, temperature: float) -> int:
    scaled = logp.astype(np.float64) / temperature
    finite = np.isfinite(scaled)
    if not finite.any():  # nothing reachable (cannot happen with a real model): the top one
        return int(ids[0])
    p = np.where(finite, np.exp(scaled - scaled[finite].max()), 0.0)
    return int(ids[rng.choice(len(p), p=p / p.sum())])


def sample(backend: Backend, src_ids: list[list[int]], seeds: Sequence, topk: int = 0,
           temperature: float = 1.0, max_len: int | Sequence[int] | None = None
           ) -> tuple[list[list[int]], DecodeStats]:
    """Sampled outputs (ids without BOS/EOS, input order) and statistics.

    seeds: one per row, anything np.random.default_rng takes (an int, a list of ints).
    topk, temperature: as in the module docstring. max_len as in greedy.
    """
    check_sampling(topk, temperature, backend.vocab_size)
    if len(seeds) != len(src_ids):
        raise ValueError(f"sample: {len(seeds)} seeds for {len(src_ids)} rows")
    stats = DecodeStats(sentences=len(src_ids))
    outs: list[list[int]] = [[] for _ in src_ids]
    if not src_ids:
        return outs, stats
    rngs = [np.random.default_rng(s) for s in seeds]
    want = Want(argmax=True) if topk == 1 else Want(argmax=False, logprobs=True) if topk == 0 \
        else Want(argmax=False, topk=int(topk))
    with stats.total():
        limits = row_limits(src_ids, max_len)
        bos, eos = backend.tokens["bos"], backend.tokens["eos"]
        with stats.timing("encoder"):
            memory = backend.encode(src_ids)
        with stats.timing("verifier"):
            state = backend.start(memory)
        live = np.arange(len(src_ids))
        tokens = np.full((len(live), 1), bos, dtype=np.int64)
        vocab = np.arange(backend.vocab_size)
        while live.size:
            with stats.timing("verifier"):
                out = backend.step(state, tokens, want)
            if topk == 1:
                nxt = out.argmax[:, 0].tolist()
            elif topk == 0:
                nxt = [_draw(rngs[i], vocab, out.logprobs[r, 0], temperature) for r, i in enumerate(live)]
            else:
                nxt = [_draw(rngs[i], out.topk_ids[r, 0], out.topk_logprobs[r, 0], temperature)
                       for r, i in enumerate(live)]
            stats.iterations += 1
            stats.row_steps += live.size
            stats.generated += live.size
            keep = []
            for r, (i, token) in enumerate(zip(live.tolist(), nxt)):
                if token == eos:
                    continue
                outs[i].append(token)
                if len(outs[i]) >= limits[i]:
                    stats.hit_max_len.append(i)
                else:
                    keep.append(r)
            if len(keep) < live.size:
                live = live[keep]
                if live.size:
                    with stats.timing("verifier"):
                        state = backend.select(state, np.asarray(keep, dtype=np.int64))
            tokens = np.asarray(nxt, dtype=np.int64)[keep].reshape(-1, 1)
    stats.hit_max_len.sort()
    return outs, stats
