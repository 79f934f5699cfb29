"""Greedy decoding: the reference every lossless strategy must equal token for token.

Batched: every live row advances by one token per `step`; a row leaves the batch (via
`backend.select`) as soon as it emits EOS or reaches its length limit.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pyfastdec.backends.base import Backend, StepOut, Want

from .limits import append_winners, row_limits
from .result import DecodeStats
from .source_ngrams import SourceNgrams


def greedy(backend: Backend, src_ids: list[list[int]], max_len: int | Sequence[int] | None = None,
           edit_margin: float = 0.0) -> tuple[list[list[int]], DecodeStats]:
    """Greedy outputs (ids without BOS/EOS), in input order, and statistics.

    max_len: output tokens per row (EOS not counted); default floor(2.5 * len(source)) + 10
    per row (limits.default_max_len). Iterations = the longest row's number of steps, where a
    row that ends at EOS after L tokens takes L + 1 steps and one cut at max_len takes L.
    edit_margin > 0: a correction model's edit-margin rule (source_ngrams.py): the source
    token copying would write next is kept unless the top-1 beats it by this many nats.
    """
    pick = lambda out, live: out.argmax[:, 0]  # noqa: E731
    if not edit_margin:
        return token_by_token(backend, src_ids, max_len, Want(argmax=True), pick)
    eos = backend.tokens["eos"]
    rows = [SourceNgrams(s, eos) for s in src_ids]
    margin = float(edit_margin)

    def want(live: np.ndarray, outs: list[list[int]]) -> Want:
        keep = np.array([[rows[i].kept(outs[i])] for i in live.tolist()], dtype=np.int64)
        return Want(argmax=True, keep_ids=keep, edit_margin=margin)

    return token_by_token(backend, src_ids, max_len, want, pick)


def token_by_token(backend: Backend, src_ids: list[list[int]], max_len: int | Sequence[int] | None,
                   want: Want | Callable[[np.ndarray, list[list[int]]], Want],
                   pick: Callable[[StepOut, np.ndarray], np.ndarray]) -> tuple[list[list[int]], DecodeStats]:
    """The one-token-per-step loop of greedy (and of sampling, which picks otherwise):
    `pick(step_out, live)` gives the next token of every live row (`live`: their input
    indices) from what `want` asked the step for; `want` may be a function of the live
    rows and the outputs so far (the edit-margin rule's kept tokens)."""
    stats = DecodeStats(sentences=len(src_ids))
    outs: list[list[int]] = [[] for _ in src_ids]
    if not src_ids:
        return outs, stats
    with stats.total():
        limits = row_limits(src_ids, max_len)
        bos, eos = backend.tokens["bos"], backend.tokens["eos"]
        with stats.timing("encoder"):
            memory = backend.encode(src_ids)
        with stats.timing("verifier"):
            state = backend.start(memory)
        live = np.arange(len(src_ids))  # input index of each row of `state`
        tokens = np.full((len(live), 1), bos, dtype=np.int64)
        while live.size:
            asked = want if isinstance(want, Want) else want(live, outs)
            with stats.timing("verifier"):
                out = backend.step(state, tokens, asked)
            nxt = np.asarray(pick(out, live), dtype=np.int64)
            keep = append_winners(outs, live.tolist(), nxt.tolist(), eos, limits, stats)
            if len(keep) < live.size:
                live = live[keep]
                if live.size:
                    with stats.timing("verifier"):
                        state = backend.select(state, np.asarray(keep, dtype=np.int64))
            tokens = nxt[keep].reshape(-1, 1)
    stats.hit_max_len.sort()
    return outs, stats
