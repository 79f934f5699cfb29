"""Copy-through detokenization of correction output: text the model copied comes back as
the user wrote it; only the model's own edits are decoded.

Why: sentencepiece normalises text before cutting it (NFKC, whitespace collapsed, and
characters outside the vocabulary become one unk id), so decoding the output ids, even of
a sentence the model copied whole, rewrites the user's text: "№4" -> "No4", "км³" ->
"км3", "…" -> "...", "„" -> " ⁇ ", double spaces -> one. On the UA-GEC test set that
round trip alone changes 115 of the 2,696 sentences (36 at word level: 46 false-positive
edits). A correction tool must leave the text it does not correct exactly as it was.

How (CopyThrough.text):
1. The source sentence is encoded once more, as a serialized SentencePieceText, for the
   place of every piece in the original text: [begin, end) in UTF-8 bytes (measured; the
   out_type="immutable_proto" of sentencepiece 0.1.99-0.2.0 gives characters instead,
   converted by its Python wrapper). The spans are contiguous and cover the sentence but for leading and
   trailing whitespace (and characters the normaliser deletes there, e.g. a final
   U+FEFF); the whitespace before a word belongs to its "▁" piece (" слово", "  слово",
   "\\xa0слово"). The first piece, if it starts with "▁", has no whitespace in its span.
   Checked on all 37,698 UA-GEC source and target sentences: the spans joined give the
   sentence back but for that leading and trailing text (SourcePieces.head and .tail).
2. Output ids are aligned with source ids by difflib.SequenceMatcher(autojunk=False):
   the longest common block first, then recursively left and right of it. For
   correction output, the source with a few local edits, that is nearly an LCS: on the
   uk-gec UA-GEC test outputs it aligns 68,213 tokens where an LCS aligns 68,249, at
   about a third of the time of a Python LCS table that only counts (O(n*m) steps).
   Any monotone alignment of equal ids is safe: an aligned output piece is the same
   piece as its source piece, so its original text normalises to what decoding would
   write; the alignment only picks which occurrence of a repeated piece lends its
   original characters and the whitespace before them. autojunk=False: with its
   heuristic on, pieces in over 1 % of a long sequence (",", "▁і") never anchor a block.
3. Copies are kept to whole units of the original text. When the normaliser expands one
   character into several pieces ("⅔" -> "▁2" "⁄" "3", "℃" -> "°" "C"), only the last
   piece's span holds the character and the others hold nothing of it, so copying part
   of such a group would lose or duplicate the character. A piece is *faithful* when its
   span, NFKC-normalised, is the piece's own text (up to the "▁"); consecutive
   unfaithful pieces form one group, and a copied run may neither start nor end inside
   a group (its edge pieces are decoded instead).
4. The output text: a copied run of source pieces [i, k) is the original text of their
   spans (after the head when i is the first piece; before the tail when k is the last
   piece and the run ends the output); the other pieces are decoded by sentencepiece in context
   (after a plain anchor piece, so that a "▁" piece gives its space as it would inside
   a sentence). As sentencepiece does, whitespace before the first visible text is
   dropped: a copied run starting the output loses its leading whitespace, and a source's
   first word copied after other text gets the space its "▁" stands for.
So a sentence the model copies whole comes back character for character, and for a
source that sentencepiece round-trips unchanged the result equals Tokenizer.decode of the
same ids (tests/test_copy_through.py checks both). The latter is why source_of hands
such sentences (most of the UA-GEC test set) to plain decoding: the spans cost far more
than the check, one decode (sentencepiece's proto output is read in Python). The
measured costs are in bench/README.md, "Small costs outside the decoder".

Source pieces of a sentence that had to be cut into chunks are sliced per chunk
(SourcePieces.slice); the chunks' outputs are joined with single spaces as before.
"""
from __future__ import annotations

import difflib
import unicodedata
from dataclasses import dataclass

import sentencepiece

WORD_START = "\u2581"


# ----------------------------------------------------------------------------- source pieces
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _skip(data: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(data, pos)[1]
    if wire == 2:
        size, pos = _varint(data, pos)
        return pos + size
    if wire == 5:
        return pos + 4
    if wire == 1:
        return pos + 8
    raise ValueError(f"copy_through: unexpected protobuf wire type {wire} in a SentencePieceText")


_FIELDS = {0x10: 0, 0x20: 1, 0x28: 2}  # SentencePiece's tags (field << 3 | varint) of id, begin, end


def parse_pieces(serialized: bytes) -> list[tuple[int, int, int]]:
    """(id, begin, end) of every piece of a serialized sentencepiece.SentencePieceText.

    Read here rather than with protobuf, which sentencepiece does not depend on (its
    out_type="proto" needs it, and "immutable_proto", which does not, is refused by
    sentencepiece 0.2.3); "serialized_proto" is there in 0.1.99 (our floor), 0.2.0 and
    0.2.3 (the tricky sentences of tests/test_copy_through.py copy back with each).
    The message: field 2 repeated SentencePiece {1 piece, 2 id, 3 surface, 4 begin,
    5 end}; proto3 leaves out fields that are 0."""
    pieces, pos, n = [], 0, len(serialized)
    while pos < n:
        tag, pos = _varint(serialized, pos)
        if tag != 0x12:  # not a piece (the text, the score)
            pos = _skip(serialized, pos, tag & 7)
            continue
        size, pos = _varint(serialized, pos)
        stop, fields = pos + size, [0, 0, 0]  # id, begin, end
        while pos < stop:
            tag, pos = _varint(serialized, pos)
            if tag in _FIELDS:
                fields[_FIELDS[tag]], pos = _varint(serialized, pos)
            else:
                pos = _skip(serialized, pos, tag & 7)
        pieces.append(tuple(fields))
    return pieces


@dataclass(frozen=True)
class SourcePieces:
    """The pieces of one source sentence (or a chunk of it) and their original text.

    raw: the sentence as UTF-8 bytes; ids[k] is piece k, whose original text is
    raw[begins[k]:ends[k]]; head / tail: the original text before the first / after the
    last piece (whitespace and characters the normaliser drops; empty for a chunk that
    does not start / end the sentence); group_start[k]: whether a copy may start at
    piece k and end before it (point 3 of the module docstring)."""

    raw: bytes
    ids: list[int]
    begins: list[int]
    ends: list[int]
    group_start: list[bool]
    head: str
    tail: str

    def slice(self, start: int, stop: int) -> "SourcePieces":
        """The pieces [start, stop) of the sentence: a chunk of a sentence cut in parts."""
        n = len(self.ids)
        return SourcePieces(self.raw, self.ids[start:stop], self.begins[start:stop], self.ends[start:stop],
                            self.group_start[start:stop] + [True], self.head if start == 0 else "",
                            self.tail if stop == n else "")

    def text(self, start: int, stop: int) -> str:
        """The original text of pieces [start, stop), stop > start."""
        return self.raw[self.begins[start]:self.ends[stop - 1]].decode("utf-8")


def _faithful(piece: str, surface: bytes) -> bool:
    """Whether a piece's original text alone normalises to the piece (point 3)."""
    if not surface:
        return False
    text = surface.decode("utf-8")
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return text.lstrip() == piece.lstrip(WORD_START)


class PieceSource:
    """Encodes source sentences with their piece spans for one sentencepiece model."""

    def __init__(self, sp: sentencepiece.SentencePieceProcessor):
        self.sp = sp
        self.piece_text = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
        self.unk = sp.unk_id()

    def pieces(self, text: str) -> SourcePieces:
        """The pieces of `text` (as sentencepiece encodes it: the ids are EncodeAsIds')."""
        raw = text.encode("utf-8")
        found = parse_pieces(self.sp.Encode(text, out_type="serialized_proto"))
        ids = [p[0] for p in found]
        begins = [p[1] for p in found]
        ends = [p[2] for p in found]
        # an unk piece stands for exactly its original text
        faithful = [b < e if t == self.unk else _faithful(self.piece_text[t], raw[b:e]) for t, b, e in found]
        # a group boundary before k unless pieces k-1 and k are both unfaithful; and after the last piece
        group_start = [k == 0 or faithful[k - 1] or faithful[k] for k in range(len(ids))] + [True]
        head = raw[:begins[0]].decode("utf-8") if found else ""
        tail = raw[ends[-1]:].decode("utf-8") if found else ""
        return SourcePieces(raw, ids, begins, ends, group_start, head, tail)


# ----------------------------------------------------------------------------- alignment
def copied_blocks(src: list[int], out: list[int]) -> list[tuple[int, int, int]]:
    """(source start, output start, length) of the runs of output ids copied from the
    source, in order, none empty (point 2 of the module docstring)."""
    if src == out:
        return [(0, 0, len(src))] if src else []
    matcher = difflib.SequenceMatcher(None, src, out, autojunk=False)
    return [(i, j, n) for i, j, n in matcher.get_matching_blocks() if n]


def _whole_groups(source: SourcePieces, i: int, j: int, n: int) -> tuple[int, int, int]:
    """A copied block shrunk to start and end at group boundaries (n may become 0)."""
    stop = i + n
    while i < stop and not source.group_start[i]:
        i, j = i + 1, j + 1
    while stop > i and not source.group_start[stop]:
        stop -= 1
    return i, j, stop - i


# ----------------------------------------------------------------------------- output text
class CopyThrough:
    """Output ids -> text, copying the original text of the pieces copied from the source."""

    def __init__(self, sp: sentencepiece.SentencePieceProcessor):
        self.sp = sp
        self.source = PieceSource(sp)
        self._anchor, self._anchor_text = self._find_anchor()

    def source_of(self, text: str, ids: list[int]) -> SourcePieces | None:
        """The source pieces of sentence `text` (encoded as `ids`), or None when decoding
        writes it back unchanged: then copy-through and decoding write the same text
        for any output (module docstring), and text() decodes."""
        if self.sp.DecodeIds(ids) == text:
            return None
        return self.source.pieces(text)

    def _find_anchor(self) -> tuple[int, str]:
        """A plain piece (not "▁"-initial, not special) that decodes to itself: decoded
        before an edit, it puts the edit in the middle of a sentence."""
        for t, piece in enumerate(self.source.piece_text):
            if self.sp.IsControl(t) or self.sp.IsUnknown(t) or self.sp.IsUnused(t) or self.sp.IsByte(t):
                continue
            if piece.isalnum() and self.sp.DecodeIds([t]) == piece:
                return t, piece
        raise ValueError("copy_through: the sentencepiece model has no plain alphanumeric piece")

    def _decoded(self, ids: list[int], at_start: bool) -> str:
        if at_start:
            return self.sp.DecodeIds(ids)
        text = self.sp.DecodeIds([self._anchor] + ids)
        return text[len(self._anchor_text):]

    def text(self, source: SourcePieces | None, out: list[int]) -> str:
        """The text of output ids `out` of a unit whose source is `source` (None: decoded)."""
        out = [int(t) for t in out]
        if source is None:
            return self.sp.DecodeIds(out)
        parts: list[str] = []
        written = False  # any visible text yet: sentencepiece drops whitespace before it
        j = 0
        for i, j_copy, n in copied_blocks(source.ids, out):
            i, j_copy, n = _whole_groups(source, i, j_copy, n)
            if not n:
                continue
            if j_copy > j:
                edit = self._decoded(out[j:j_copy], not written)
                parts.append(edit)
                written = written or bool(edit.strip())
            copy = source.text(i, i + n)
            if not written:
                copy = copy.lstrip()
            if i == 0:  # the sentence's start: its head, and the space its first "▁" stands for
                copy = source.head + copy
                if written and not copy[:1].isspace() and self.source.piece_text[source.ids[0]].startswith(WORD_START):
                    copy = " " + copy
            if i + n == len(source.ids) and j_copy + n == len(out):
                copy += source.tail
            parts.append(copy)
            written = written or bool(copy.strip())
            j = j_copy + n
        if j < len(out):
            parts.append(self._decoded(out[j:], not written))
        return "".join(parts)
