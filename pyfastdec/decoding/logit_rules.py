"""CTranslate2's logits processors for greedy decoding and sampling: repetition_penalty,
no_repeat_ngram_size and min_decoding_length.

What CTranslate2 4.x (decoding.cc, decoding_utils.cc) does to a step's raw logits
before it picks a token, and what this module does the same way:
- min_decoding_length m: EOS is disabled while the output holds fewer than m tokens,
  the target prefix's included (translate_batch returns the prefix; both lengths then
  count it, in CTranslate2 as here).
- repetition_penalty r: every distinct token already in the sequence (target prefix and
  output so far, not BOS) has its logit divided by r when positive, multiplied by r when
  negative; r > 1 penalises repeats. It edits logits, not log-probs: the sign of a logit
  is lost by the log-softmax, so the backend returns raw logits (Want.logits).
- no_repeat_ngram_size n: a token that would complete an n-gram already in the sequence
  (prefix included) is disabled; n = 1 disables every token already there.
A disabled token gets -inf (CTranslate2: the lowest float); the log-softmax of the
result is what greedy picks the argmax of, beam search ranks by, sampling draws from
and scores sum (RuledBackend). A row with every token disabled ends (EOS), which
CTranslate2 never meets on real vocabularies either.

These rules change which token greedy picks, so no drafting strategy can return
greedy's own output with them: Translator runs greedy with the rules in their place.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pyfastdec.backends.base import Backend, StepOut, Want

from .prefix import target_prefix


@dataclass(frozen=True)
class LogitRules:
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_length: int = 0  # min_decoding_length, the target prefix included

    @property
    def active(self) -> bool:
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0 or self.min_length > 0

    def apply(self, logits: np.ndarray, seq: Sequence[int], eos: int) -> np.ndarray:
        """A copy of one position's logits [V] with the rules applied after `seq` (the
        target prefix then the output so far)."""
        x = np.array(logits, dtype=np.float32, copy=True)  # CTranslate2 edits float32 logits
        self.apply_in_place(x, seq, eos)
        return x

    def apply_in_place(self, x: np.ndarray, seq: Sequence[int], eos: int) -> None:
        if self.repetition_penalty != 1.0 and len(seq):
            seen = np.asarray(seq, dtype=np.int64)  # a repeated id gets the same value written again
            v = x[seen]
            x[seen] = np.where(v < 0, v * np.float32(self.repetition_penalty), v / np.float32(self.repetition_penalty))
        n = self.no_repeat_ngram_size
        if n and len(seq) >= n:
            tail = seq[len(seq) - n + 1:]  # the n - 1 last tokens: an n-gram's first part
            banned = {seq[i + n - 1] for i in range(len(seq) - n + 1) if seq[i:i + n - 1] == tail}
            x[list(banned)] = -np.inf
        if len(seq) < self.min_length:
            x[eos] = -np.inf


def check_rules(repetition_penalty, no_repeat_ngram_size, min_decoding_length,
                max_decoding_length: int | None) -> LogitRules:
    """The checked rules of a call; ValueError naming the bad option."""
    if isinstance(repetition_penalty, bool) or not isinstance(repetition_penalty, (int, float, np.floating)) \
            or not (math.isfinite(repetition_penalty) and repetition_penalty > 0):
        raise ValueError(f"repetition_penalty must be a finite number > 0 (1: off, > 1 penalises tokens already "
                         f"generated), got {repetition_penalty!r}")
    for name, value in (("no_repeat_ngram_size", no_repeat_ngram_size), ("min_decoding_length", min_decoding_length)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be an int >= 0 (0: off), got {value!r}")
    if max_decoding_length is not None and min_decoding_length > max_decoding_length:
        raise ValueError(f"min_decoding_length={min_decoding_length} exceeds max_decoding_length="
                         f"{max_decoding_length}")
    return LogitRules(float(repetition_penalty), int(no_repeat_ngram_size), int(min_decoding_length))


class _Memory:
    def __init__(self, inner, prefixes: list[list[int]]):
        self.inner, self.prefixes = inner, prefixes


class _State:
    def __init__(self, inner, seqs: list[list[int]], fresh: np.ndarray):
        # seqs: each row's tokens so far (target prefix, then what was fed after BOS);
        # fresh: the row has not stepped yet (the token it is fed first is BOS, not output)
        self.inner, self.seqs, self.fresh = inner, seqs, fresh


class RuledBackend:
    """`backend` whose every step's distribution has the rules applied: the log-probs,
    top-k and argmax it returns are those of the ruled logits, as CTranslate2 ranks and
    samples from them. Greedy, beam search, sampling and teacher-forced scoring run on it
    unchanged: it follows each row's tokens through step and select (a row's sequence
    starts with its target prefix, decoding/prefix.py's PrefixSource). Strategies that
    roll back (truncate) or draft do not run on it: Translator runs greedy in their place."""

    def __init__(self, backend: Backend, rules: LogitRules):
        self.backend, self.rules = backend, rules

    def __getattr__(self, name):  # everything not overridden here is the backend's
        return getattr(self.backend, name)

    def encode(self, src_ids: list) -> _Memory:
        return _Memory(self.backend.encode(src_ids), [target_prefix(s) for s in src_ids])

    def start(self, memory: _Memory) -> _State:
        rows = len(memory.prefixes)
        return _State(self.backend.start(memory.inner), [list(p) for p in memory.prefixes], np.ones(rows, dtype=bool))

    def select(self, state_or_memory, rows: np.ndarray):
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if isinstance(state_or_memory, _State):
            s = state_or_memory
            return _State(self.backend.select(s.inner, rows), [list(s.seqs[r]) for r in rows], s.fresh[rows])
        m = state_or_memory
        return _Memory(self.backend.select(m.inner, rows), [m.prefixes[r] for r in rows])

    def truncate(self, state, lengths):
        raise ValueError("repetition_penalty, no_repeat_ngram_size, min_decoding_length: strategies that roll "
                         "back positions do not run with them (Translator runs greedy in their place)")

    def step(self, state: _State, tokens: np.ndarray, want: Want = Want()) -> StepOut:
        if want.proposals is not None or want.keep_ids is not None:
            raise ValueError("repetition_penalty, no_repeat_ngram_size, min_decoding_length: drafting and the "
                             "edit-margin rule do not run with them")
        tokens = np.asarray(tokens, dtype=np.int64)
        x = self.backend.step(state.inner, tokens, Want(argmax=False, logits=True)).logits  # ruled in place
        rows, n = tokens.shape
        eos = self.tokens["eos"]
        for r in range(rows):
            # The row's list grows in place (start and select give each state its own lists):
            # position j has seen fed[:j + 1 - skip], so it is extended up to that before j.
            seq = state.seqs[r]
            fed = tokens[r, 1:].tolist() if state.fresh[r] else tokens[r].tolist()
            skip = 1 if state.fresh[r] else 0
            for j in range(n):
                seq.extend(fed[max(j - skip, 0):j + 1 - skip])
                self.rules.apply_in_place(x[r, j], seq, eos)
            seq.extend(fed[max(n - skip, 0):])
        state.fresh[:] = False
        # Only the columns some row can reach (the union of the shortlists) are worked on.
        cols = np.union1d(np.flatnonzero(np.isfinite(x).any(axis=(0, 1))), [eos])
        sub = x[..., cols]
        top = sub.max(axis=-1, keepdims=True)
        dead = np.isneginf(top[..., 0])  # every token disabled: the row ends
        if dead.any():
            sub[dead, np.searchsorted(cols, eos)], top[dead] = 0.0, 0.0
        sub -= top
        logp = sub - np.log(np.exp(sub).sum(axis=-1, keepdims=True))
        out = StepOut()
        if want.argmax:
            out.argmax = cols[logp.argmax(axis=-1)].astype(np.int64)
        if want.topk:
            k = min(want.topk, logp.shape[-1])
            best = np.argpartition(-logp, k - 1, axis=-1)[..., :k]  # the k best, then best first
            best = np.take_along_axis(best, np.argsort(-np.take_along_axis(logp, best, axis=-1), axis=-1,
                                                       kind="stable"), axis=-1)
            out.topk_ids, out.topk_logprobs = cols[best].astype(np.int64), np.take_along_axis(logp, best, axis=-1)
            if k < want.topk:  # fewer columns than asked: id -1 and -inf after them, as the engine pads
                pad = (rows, n, want.topk - k)
                out.topk_ids = np.concatenate([out.topk_ids, np.full(pad, -1, dtype=np.int64)], axis=-1)
                out.topk_logprobs = np.concatenate([out.topk_logprobs, np.full(pad, -np.inf, dtype=logp.dtype)], axis=-1)
        if want.ids is not None or want.logprobs:
            full = np.full(x.shape, -np.inf, dtype=np.float32)
            full[..., cols] = logp
            if want.ids is not None:
                ids = np.asarray(want.ids, dtype=np.int64)[..., None]
                out.id_logprobs = np.take_along_axis(full, ids, axis=-1)[..., 0]
            if want.logprobs:
                out.logprobs = full
        return out


def check_rules_algo(algo: str, edit_margin, lossy: bool) -> None:
    """ValueError unless a call with active rules can run them: greedy, beam search and
    sampling do, and the lossless strategies run greedy with them in their place (their
    output is greedy's, so with the rules it must be greedy's with the rules). The lossy
    strategies (lossy: the strategy registry's RULES_REFUSED) refuse."""
    if lossy:
        raise ValueError(f"repetition_penalty, no_repeat_ngram_size and min_decoding_length apply to greedy "
                         f"decoding, beam search, sampling and the lossless strategies (which then run greedy), "
                         f"got algo {algo!r}")
    if edit_margin:
        raise ValueError(f"edit_margin={edit_margin} with repetition_penalty, no_repeat_ngram_size or "
                         f"min_decoding_length: the edit-margin rule does not combine with them; give one or the other")
