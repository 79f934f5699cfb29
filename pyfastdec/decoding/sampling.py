"""Random sampling, greedy-style: one token per row per step, drawn from the model's
distribution (CTranslate2's sampling_topk / sampling_temperature / sampling_topp).

Each step draws from softmax(log p / temperature) restricted to the `topk` most likely
tokens (topk 0: the whole vocabulary, or the shortlist), then, with topp < 1, to its
nucleus: the most likely of those tokens, best first, while the probability of the ones
before them (under that tempered, top-k distribution) is below topp, as CTranslate2's
TopPMask keeps them; the top token is always kept. topk = 1 takes the top token
without drawing: greedy's output exactly, whatever the temperature (and topp, which
CTranslate2 then ignores too). Every row draws from
its own generator (`seeds[i]`), so a row's sample does not depend on which rows share
its batch or in which order they were sorted.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .greedy import token_by_token
from .result import DecodeStats


def check_sampling(topk: int, temperature: float, vocab_size: int, topp: float = 1.0) -> None:
    if isinstance(topp, bool) or not isinstance(topp, (int, float, np.floating)) or not 0 < topp <= 1:
        raise ValueError(f"sampling_topp must be a number in (0, 1] (1: off), got {topp!r}")
    if isinstance(topk, bool) or not isinstance(topk, (int, np.integer)) or not 0 <= topk <= vocab_size:
        raise ValueError(f"sampling_topk must be an int in [0, vocab_size={vocab_size}] (0: the whole "
                         f"vocabulary, 1: greedy), got {topk!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"sampling_temperature must be a number > 0, got {temperature!r}")


def draw(rng: np.random.Generator, ids: np.ndarray, logp: np.ndarray, temperature: float,
         topp: float = 1.0) -> int:
    """One of `ids` (in any order) drawn from softmax(logp / temperature) cut to its
    top-p nucleus; logp may be log-probs or logits (the softmax is the same)."""
    scaled = logp.astype(np.float64) / temperature
    finite = np.isfinite(scaled)
    if not finite.any():  # nothing reachable (cannot happen with a real model): the top one
        return int(ids[0])
    p = np.where(finite, np.exp(scaled - scaled[finite].max()), 0.0)
    p /= p.sum()
    if topp < 1.0:
        reachable = np.flatnonzero(p)  # zeros (outside the shortlist) would sort last and stay 0
        order = reachable[np.argsort(-p[reachable], kind="stable")]
        before = np.cumsum(p[order]) - p[order]  # mass of the tokens ranked above each one
        p[order[before >= topp]] = 0.0
        p /= p.sum()
    return int(ids[rng.choice(len(p), p=p)])


def sample(backend: Backend, src_ids: list[list[int]], seeds: Sequence, topk: int = 0,
           temperature: float = 1.0, max_len: int | Sequence[int] | None = None, topp: float = 1.0
           ) -> tuple[list[list[int]], DecodeStats]:
    """Sampled outputs (ids without BOS/EOS, input order) and statistics.

    seeds: one per row, anything np.random.default_rng takes (an int, a list of ints).
    topk, temperature, topp: as in the module docstring. max_len as in greedy.
    """
    check_sampling(topk, temperature, backend.vocab_size, topp)
    if len(seeds) != len(src_ids):
        raise ValueError(f"sample: {len(seeds)} seeds for {len(src_ids)} rows")
    rngs = [np.random.default_rng(s) for s in seeds]
    if topk == 1:
        return token_by_token(backend, src_ids, max_len, Want(argmax=True), lambda out, live: out.argmax[:, 0])
    if topk == 0:
        vocab = np.arange(backend.vocab_size)
        return token_by_token(backend, src_ids, max_len, Want(argmax=False, logprobs=True), lambda out, live: [
            draw(rngs[i], vocab, out.logprobs[r, 0], temperature, topp) for r, i in enumerate(live.tolist())])
    return token_by_token(backend, src_ids, max_len, Want(argmax=False, topk=int(topk)), lambda out, live: [
        draw(rngs[i], out.topk_ids[r, 0], out.topk_logprobs[r, 0], temperature, topp) for r, i in enumerate(live.tolist())])
