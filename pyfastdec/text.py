"""Text <-> ids for the API and CLI: the model directory's sentencepiece model, and the
splitting of sources longer than a model's max_source_len into chunks that fit.

A model is trained on sources of at most max_source_len ids (EOS included); feeding it
more would either be refused or silently cut by a lesser engine. Instead a long source
is split where a human would split it — between sentences — and only a single sentence
that alone is too long is cut between words (between pieces as a last resort). Every id
of the source lands in exactly one chunk, in order, so nothing is ever dropped.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import sentencepiece

# A sentence ends at . ! ? … (optionally followed by closing quotes or brackets) before
# whitespace, or at the CJK full stops, which need no space after them.
_SENTENCE_END = re.compile(r"(?<=[.!?…][\"'”’»)\]])\s+|(?<=[.!?…])\s+|(?<=[。！？])")
WORD_START = "\u2581"  # sentencepiece's word-boundary marker "▁"


def split_sentences(text: str) -> list[str]:
    """The sentences of one line of text (no empty ones); joining them with single
    spaces gives the text back up to whitespace."""
    return [s for s in (part.strip() for part in _SENTENCE_END.split(text)) if s]


class Tokenizer:
    """One sentencepiece model: text -> ids (without EOS) and ids -> text."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.sp = sentencepiece.SentencePieceProcessor()
        self.sp.Load(str(self.path))

    def encode(self, text: str) -> list[int]:
        return list(self.sp.EncodeAsIds(text))

    def decode(self, ids: list[int]) -> str:
        return self.sp.DecodeIds([int(i) for i in ids])

    def pieces(self) -> list[str]:
        return [self.sp.IdToPiece(i) for i in range(self.sp.GetPieceSize())]

    def starts_word(self, token: int) -> bool:
        return self.sp.IdToPiece(int(token)).startswith(WORD_START)


def cut_ids(ids: list[int], limit: int, starts_word) -> list[list[int]]:
    """Cut ids into consecutive pieces of at most `limit` ids, each cut placed before the
    last word start that keeps the piece within the limit (a hard cut only when a single
    word is longer than the limit). starts_word(id) says whether a piece begins a word."""
    if limit < 1:
        raise ValueError(f"cut_ids: limit must be >= 1, got {limit}")
    chunks, start = [], 0
    while len(ids) - start > limit:
        cut = start + limit
        # Walk back to a word start inside (start, start + limit]; position `cut` itself
        # may start a word, which makes the full piece a whole number of words.
        while cut > start and not starts_word(ids[cut]):
            cut -= 1
        if cut == start:  # one word longer than the limit: cut between its pieces
            cut = start + limit
        chunks.append(ids[start:cut])
        start = cut
    chunks.append(ids[start:])
    return chunks


def split_to_fit(text: str, tokenizer: Tokenizer, max_ids: int) -> list[list[int]]:
    """The source ids (without EOS) of `text` in chunks of at most `max_ids` ids each.

    One chunk (the plain encoding) when it fits. Otherwise consecutive sentences are
    packed into chunks greedily, and a sentence too long on its own is cut between words.
    """
    ids = tokenizer.encode(text)
    if len(ids) <= max_ids:
        return [ids]
    chunks: list[list[int]] = []
    current: list[int] = []
    for sentence in split_sentences(text):
        sentence_ids = tokenizer.encode(sentence)
        if current and len(current) + len(sentence_ids) <= max_ids:
            current += sentence_ids
            continue
        if current:
            chunks.append(current)
        pieces = cut_ids(sentence_ids, max_ids, tokenizer.starts_word)
        chunks += pieces[:-1]
        current = pieces[-1]
    if current:
        chunks.append(current)
    return chunks
