"""Inputs and target prefixes given as tokens: what Translator.translate accepts beside
raw text, as CTranslate2 users pass them (lists of sentencepiece pieces), or as ids.

An input is one of
  str                 raw text (cleaned, split into sentences, encoded by Translator)
  list of str         sentencepiece pieces, e.g. ["▁A", "▁man"]: one unit, no EOS
  list of int         vocabulary ids: one unit, no EOS
and the output of an input has its kind: text for text, pieces for pieces, ids for ids.
A target prefix is None or any of the three kinds (text is encoded without EOS).
Errors are one line naming the input (and the piece or id) and what was expected.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pyfastdec.text import Tokenizer

TEXT, PIECES, IDS = "text", "pieces", "ids"


def input_kind(index: int, item, what: str = "input") -> str:
    """TEXT, PIECES or IDS for one input (or target prefix: what="target_prefix"); a
    TypeError naming it for anything else. An empty list counts as ids."""
    if isinstance(item, str):
        return TEXT
    if isinstance(item, (bytes, bytearray, memoryview)) or not isinstance(item, (list, tuple)):
        raise TypeError(f"translate: {what} {index} is {type(item).__name__}, expected str (text), or a list "
                        f"of sentencepiece pieces (str) or of token ids (int)")
    if all(isinstance(t, str) for t in item) and item:
        return PIECES
    if all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in item):
        return IDS
    bad = next(t for t in item if not isinstance(t, type(item[0])) or isinstance(t, bool))
    raise TypeError(f"translate: {what} {index}: token {item.index(bad)} is {type(bad).__name__} "
                    f"{bad!r}; a token list holds only pieces (str) or only ids (int)")


def token_ids(index: int, item: Sequence, kind: str, tokenizer: Tokenizer, vocab_size: int,
              what: str = "input") -> list[int]:
    """The ids of a PIECES or IDS item; a ValueError naming the unknown piece or the id
    outside the vocabulary."""
    if kind == IDS:
        ids = [int(t) for t in item]
        for position, t in enumerate(ids):
            if not 0 <= t < vocab_size:
                raise ValueError(f"translate: {what} {index}: id {t} at position {position} is outside the "
                                 f"vocabulary [0, {vocab_size})")
        return ids
    ids = []
    for position, piece in enumerate(item):
        t = tokenizer.piece_id(piece)
        if t is None:
            raise ValueError(f"translate: {what} {index}: piece {piece!r} at position {position} is not in "
                             f"the vocabulary ({tokenizer.path.name})")
        ids.append(t)
    return ids


def as_kind(ids: list[int], kind: str, tokenizer: Tokenizer):
    """An output in its input's kind (TEXT is done by the caller, which joins units)."""
    if kind == IDS:
        return [int(t) for t in ids]
    return [tokenizer.piece(t) for t in ids]


def check_text(index: int, text, what: str = "input") -> None:
    """A TypeError or ValueError naming input `index` unless it is text that sentencepiece
    can take: a str encodable as UTF-8 (a lone surrogate, e.g. from decoding with
    errors="surrogateescape", is not; the CLI refuses such lines as invalid UTF-8 too)."""
    if not isinstance(text, str):
        raise TypeError(f"translate: {what} {index} is {type(text).__name__}, expected str")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"translate: {what} {index}: lone surrogate {text[err.start]!r} at character {err.start} "
                         f"(expected text encodable as UTF-8)") from None
