"""Translator.score_batch: the log-probability of given target texts (CTranslate2's
Translator.score_batch), for filtering and reranking.

Each (source, target) pair is scored teacher-forced in one step per batch: the decoder
reads BOS + target and the log-prob of every target token, then of EOS, is read off
the model's full output layer. The shortlist is not used: a target token outside a
row's shortlist still gets its log-prob (translate's scores give such tokens -inf).
Sources and targets are text (encoded whole, never split into sentences: a pair is
scored as given), sentencepiece pieces, or ids (token_input.py). Inputs longer than the
model reads are refused, not cut (CTranslate2 cuts them at max_input_length).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from pyfastdec.backends.base import Want
from pyfastdec.size_limits import MAX_BATCH_SIZE, check_size
from pyfastdec.text import clean_text
from pyfastdec.token_input import IDS, PIECES, TEXT, as_kind, check_text, input_kind, token_ids

MAX_TARGET_TOKENS = 1024  # CTranslate2's default max_input_length; a bound on one row's memory


class ScoringResult(NamedTuple):
    """One pair's score: the target tokens then EOS (pieces, or ids for an ids target) and
    the log-prob of each (natural log); log_prob is their sum."""

    tokens: list
    log_probs: list[float]

    @property
    def log_prob(self) -> float:
        return float(np.sum(self.log_probs, dtype=np.float64))


def _ids(translator, index: int, item, what: str, tokenizer) -> tuple[list[int], str]:
    try:
        kind = input_kind(index, item, what)
        if kind == TEXT:
            check_text(index, item, what)
            return tokenizer.encode(clean_text(item)), kind
        return token_ids(index, item, kind, tokenizer, translator.verifier.vocab_size, what), kind
    except (TypeError, ValueError) as err:  # their messages name translate; this is score_batch
        raise type(err)(str(err).replace("translate:", "score_batch:", 1)) from None


def score_batch(translator, source: Sequence, target: Sequence, batch_size: int = 32) -> list[ScoringResult]:
    if isinstance(source, (str, bytes)) or isinstance(target, (str, bytes)):
        raise TypeError("score_batch: source and target must be lists (one entry per pair), got a "
                        f"{type(source if isinstance(source, (str, bytes)) else target).__name__}")
    source, target = list(source), list(target)
    if len(source) != len(target):
        raise ValueError(f"score_batch: {len(source)} sources for {len(target)} targets (expected one target "
                         f"per source)")
    check_size("batch_size", batch_size, MAX_BATCH_SIZE)
    backend = translator.verifier
    bos, eos, pad = backend.tokens["bos"], backend.tokens["eos"], backend.tokens["pad"]
    srcs, tgts, kinds = [], [], []
    for i, (s, t) in enumerate(zip(source, target)):
        src, _ = _ids(translator, i, s, "source", translator.tokenizer)
        if len(src) + 1 > translator.max_source_len:
            raise ValueError(f"score_batch: source {i} has {len(src)} tokens (+ EOS), more than the model's "
                             f"max_source_len {translator.max_source_len}")
        tgt, kind = _ids(translator, i, t, "target", translator._target_tokenizer())
        if len(tgt) + 1 > MAX_TARGET_TOKENS:
            raise ValueError(f"score_batch: target {i} has {len(tgt)} tokens (+ EOS), more than "
                             f"{MAX_TARGET_TOKENS}")
        srcs.append(src + [eos])
        tgts.append(tgt)
        kinds.append(kind)
    results: list[ScoringResult | None] = [None] * len(srcs)
    order = sorted(range(len(srcs)), key=lambda r: -(len(srcs[r]) + len(tgts[r])))  # similar lengths batched
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = 1 + max(len(tgts[r]) for r in rows)
        tokens = np.full((len(rows), width), pad, dtype=np.int64)
        targets = np.full((len(rows), width), pad, dtype=np.int64)
        for b, r in enumerate(rows):
            tokens[b, :1 + len(tgts[r])] = [bos] + tgts[r]
            targets[b, :1 + len(tgts[r])] = tgts[r] + [eos]
        state = backend.start(backend.encode_full_vocabulary([srcs[r] for r in rows]))
        logp = backend.step(state, tokens, Want(argmax=False, ids=targets)).id_logprobs
        for b, r in enumerate(rows):
            out = as_kind(tgts[r] + [eos], IDS if kinds[r] == IDS else PIECES, translator._target_tokenizer())
            results[r] = ScoringResult(out, [float(v) for v in logp[b, :len(tgts[r]) + 1]])
    return results
