"""Target prefixes: every strategy continues from given target tokens, unchanged.

A strategy starts each row with BOS "pending" (backends/base.py) and decodes what
follows it. PrefixedBackend wraps the backend a strategy runs on so that, for a row
whose source carries a target prefix p1..pm (a PrefixSource), the state `start` returns
already holds BOS p1..p(m-1) (run in one teacher-forced step, whose log-probs of p1..pm
are kept as the prefix's score) and the row's first `step` feeds pm where the strategy
feeds BOS. The strategy's positions are then the real ones shifted by m, which
`truncate` adds back; its outputs are the tokens after the prefix. Drafters (GAD) are
wrapped too: `draft` sees the prefix before the row's accepted tokens. No strategy
knows about prefixes, so greedy, beam, IAD, GAD and blockwise all get them for free,
and their outputs after the prefix are what greedy (or beam) would choose with the
prefix teacher-forced.

Rows without a prefix run as before (their pre-step positions are rolled back to 0).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pyfastdec.backends.base import Backend, Want


class PrefixSource(list):
    """Source ids (ending in EOS) that carry a target prefix (ids, no BOS). Strategies pass
    their sources to `encode` as given, so the prefix travels with its row, also through
    GAD's drafter, which encodes only the rows still live."""

    def __init__(self, ids: Sequence[int], target_prefix: Sequence[int] = ()):
        super().__init__(int(t) for t in ids)
        self.target_prefix = [int(t) for t in target_prefix]
        self.prefix_logprob = 0.0  # summed log-probs of the prefix tokens, set by start()


class _Memory:
    def __init__(self, inner, sources: list):
        self.inner, self.sources = inner, sources


class _State:
    def __init__(self, inner, offset: np.ndarray, fresh: np.ndarray, last: np.ndarray):
        # offset: prefix tokens held per row beyond what the strategy counts (m);
        # fresh: the row has not stepped yet (its pending BOS becomes `last`, pm)
        self.inner, self.offset, self.fresh, self.last = inner, offset, fresh, last


def target_prefix(source) -> list[int]:
    """A source row's target prefix: a PrefixSource's, else none (a plain id list)."""
    return list(source.target_prefix) if isinstance(source, PrefixSource) else []


class PrefixedBackend:
    """`backend` with the target prefixes of PrefixSource rows applied (module docstring).
    Everything else (tokens, vocab_size, proposal_heads, ...) is the backend's own."""

    def __init__(self, backend: Backend):
        self.backend = backend

    def __getattr__(self, name):  # attributes not overridden here are the backend's
        return getattr(self.backend, name)

    def encode(self, src_ids: list[list[int]]) -> _Memory:
        return _Memory(self.backend.encode(src_ids), list(src_ids))

    def attach(self, host_memory: _Memory) -> _Memory:
        """A shared-encoder model's memory (a drafter's or BiLD's little model's) keeps the
        host rows' sources, so its own start applies the same prefixes."""
        return _Memory(self.backend.attach(host_memory.inner), host_memory.sources)

    def start(self, memory: _Memory) -> _State:
        state = self.backend.start(memory.inner)
        prefixes = [target_prefix(s) for s in memory.sources]
        m = np.array([len(p) for p in prefixes], dtype=np.int64)
        last = np.array([p[-1] if p else self.tokens["bos"] for p in prefixes], dtype=np.int64)
        if m.max(initial=0) > 0:
            bos, pad = self.tokens["bos"], self.tokens["pad"]
            width = int(m.max())
            tokens = np.full((len(prefixes), width), pad, dtype=np.int64)
            targets = np.full((len(prefixes), width), pad, dtype=np.int64)
            for r, p in enumerate(prefixes):
                tokens[r, :len(p)] = [bos] + p[:-1]
                targets[r, :len(p)] = p
            logp = self.backend.step(state, tokens, Want(argmax=False, ids=targets)).id_logprobs
            for r, source in enumerate(memory.sources):
                if isinstance(source, PrefixSource):
                    source.prefix_logprob = float(np.sum(logp[r, :m[r]], dtype=np.float64))
            # Keep BOS p1..p(m-1): m positions; rows without a prefix go back to none.
            state = self.backend.truncate(state, m)
        return _State(state, m, np.ones(len(prefixes), dtype=bool), last)

    def step(self, state: _State, tokens: np.ndarray, want: Want = Want()):
        if state.fresh.any():
            swap = state.fresh & (state.offset > 0)
            if swap.any():
                tokens = np.array(tokens, dtype=np.int64, copy=True)
                tokens[swap, 0] = state.last[swap]
            state.fresh[:] = False
        return self.backend.step(state.inner, tokens, want)

    def truncate(self, state: _State, lengths: np.ndarray) -> _State:
        state.inner = self.backend.truncate(state.inner, np.asarray(lengths, dtype=np.int64) + state.offset)
        return state

    def select(self, state_or_memory, rows: np.ndarray):
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if isinstance(state_or_memory, _State):
            s = state_or_memory
            return _State(self.backend.select(s.inner, rows), s.offset[rows], s.fresh[rows], s.last[rows])
        if isinstance(state_or_memory, _Memory):
            m = state_or_memory
            return _Memory(self.backend.select(m.inner, rows), [m.sources[r] for r in rows])
        return self.backend.select(state_or_memory, rows)

    def draft(self, memory: _Memory, prefix: list[list[int]], k: int | None = None):
        # The drafter drafts after the whole output so far: the target prefix, then the
        # tokens the strategy accepted after it.
        return self.backend.draft(memory.inner, [target_prefix(s) + list(p) for s, p in zip(memory.sources, prefix)], k)
