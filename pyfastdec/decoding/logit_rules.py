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
A disabled token gets -inf (CTranslate2: the lowest float), then the token is picked
from the result: its argmax (greedy), or a draw (sampling.draw: top-k, temperature,
top-p). A row with every token disabled ends (EOS), which CTranslate2 never meets on
real vocabularies either.

These rules change which token greedy picks, so no drafting strategy can return
greedy's own output with them: Translator runs greedy (or sampling) with the rules in
their place (decode_with_rules), one step per token.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pyfastdec.backends.base import Backend, Want

from .greedy import token_by_token
from .result import DecodeStats


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
        if self.repetition_penalty != 1.0 and len(seq):
            seen = np.unique(np.asarray(seq, dtype=np.int64))
            v = x[seen]
            x[seen] = np.where(v < 0, v * np.float32(self.repetition_penalty), v / np.float32(self.repetition_penalty))
        n = self.no_repeat_ngram_size
        if n and len(seq) >= n:
            seq = list(seq)
            tail = seq[len(seq) - n + 1:]  # the n - 1 last tokens: an n-gram's first part
            banned = {seq[i + n - 1] for i in range(len(seq) - n + 1) if seq[i:i + n - 1] == tail}
            x[list(banned)] = -np.inf
        if len(seq) < self.min_length:
            x[eos] = -np.inf
        return x


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


def greedy_pick(logits: np.ndarray, eos: int) -> int:
    """The argmax of ruled logits; EOS when every token is disabled."""
    best = int(np.argmax(logits))
    return best if np.isfinite(logits[best]) else eos


def decode_with_rules(backend: Backend, src_ids: list, rules: LogitRules,
                      max_len: int | Sequence[int] | None,
                      pick: Callable[[int, np.ndarray], int] | None = None) -> tuple[list[list[int]], DecodeStats]:
    """Greedy (or, with `pick(row, logits)`, sampled) outputs under `rules`, one token per
    step per row: ids without BOS/EOS and statistics, as greedy returns them. Rows may
    carry a target prefix (decoding/prefix.py: a PrefixSource on a PrefixedBackend); the
    rules see it before the row's output."""
    eos = backend.tokens["eos"]
    prefixes = [list(getattr(s, "target_prefix", ())) for s in src_ids]
    pick = pick or (lambda row, logits: greedy_pick(logits, eos))
    outputs: list[list[list[int]]] = []  # token_by_token's outputs so far, seen through want

    def want(live: np.ndarray, outs: list[list[int]]) -> Want:
        if not outputs:
            outputs.append(outs)
        return Want(argmax=False, logits=True)

    def choose(out, live: np.ndarray) -> list[int]:
        outs = outputs[0]
        return [pick(i, rules.apply(out.logits[r, 0], prefixes[i] + outs[i], eos)) for r, i in enumerate(live.tolist())]

    return token_by_token(backend, src_ids, max_len, want, choose)


def check_rules_algo(algo: str, edit_margin) -> None:
    """ValueError unless a call with active rules can run them: greedy and sampling do,
    and the lossless strategies run greedy with them in their place (their output is
    greedy's, so with the rules it must be greedy's with the rules: Translator routes
    every such call to decode_with_rules). Beam search and the lossy strategies refuse."""
    if algo in ("beam", "gad++", "bild-lossy"):
        raise ValueError(f"repetition_penalty, no_repeat_ngram_size and min_decoding_length apply to greedy "
                         f"decoding, sampling and the lossless strategies (which then run greedy), got algo "
                         f"{algo!r}" + (" (beam_size > 1)" if algo == "beam" else ""))
    if edit_margin:
        raise ValueError(f"edit_margin={edit_margin} with repetition_penalty, no_repeat_ngram_size or "
                         f"min_decoding_length: the edit-margin rule does not combine with them; give one or the other")
