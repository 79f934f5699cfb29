"""Text <-> ids for the API and CLI: the model directory's sentencepiece model, the
cleaning of control characters, and the splitting of every input line into sentences.

The models are trained on single sentences, so a line is decoded sentence by sentence:
given several sentences at once a model translates the first and drops the rest. Each
sentence becomes one decoding unit; only a sentence longer than max_source_len on its own
is cut, between words (between pieces as a last resort). Every id of the line lands in
exactly one unit, in order, so nothing is ever dropped, and the outputs of a line's
units are rejoined in order with single spaces.

Sentence boundaries (split_sentences) are a small rule set, not a trained splitter:
a sentence ends at . ! ? … (optionally followed by closing quotes or brackets) before
whitespace, or at the CJK full stops 。！？, which need no space after them. A single
"." followed by whitespace does not end a sentence when the word before it is
  - a title or abbreviation of _ABBREVIATIONS ("Mr.", "Dr.", "vs.", "вул."),
  - an initial: one upper-case letter other than "I" ("J. R. R. Tolkien", "Т. Шевченко"),
  - letters joined by dots ("e.g.", "i.e.", "U.S.", "z.B.", "т.д."),
  - one of _BEFORE_NUMBERS and the next word starts with a digit ("No. 5", "p. 12").
A "." inside a number ("3.5", "1.000") has no whitespace after it and never splits.
There is deliberately no "the next word must be capitalised" rule: learner text (what a
correction model reads) often lacks the capital, and a missed boundary can lose a
sentence, while an extra one only costs the model a little context.

Punctuation with no whitespace after it ("A dog runs.A cat sleeps.") ends a sentence
only where that is safe (_glued_boundary): the next character is an upper-case letter,
the one before the punctuation a letter of a word of two or more letters that is no
abbreviation ("U.S.A.", "e.g.", "Mr.Smith" stay whole), and the text around it, up to
whitespace, is no address or file name: no "@", "/", "\\" or "://", no "www.", no
further "." before a letter after it ("www.Example.com", "Foo.Bar.baz"), and not an
extension of capitals ("README.TXT"). Either way every character of the line stays in
exactly one sentence, in order.
"""
from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

import sentencepiece

# A candidate boundary: terminal punctuation (group 1), closing quotes or brackets, then
# whitespace (group 2) or, glued, a letter; or a CJK full stop with optional whitespace.
_CANDIDATE = re.compile(r"([.!?…]+)[\"'”’»)\]]*(\s+|(?=[^\W\d_]))|[。！？]\s*")
# Words that a single "." after them does not end (case-sensitive, as written).
_ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Dr Prof Sr Jr St Mt Capt Col Gen Lt Sgt Rev Hon vs cf ca approx incl esp "
    "проф акад доц вул просп ім напр див".split())
# Words that "." after them does not end when a number follows ("No. 5", "Fig. 3").
_BEFORE_NUMBERS = frozenset("No Nr no nr Art art Fig fig Vol vol pp Ch ch Sec sec арт рис стор".split())
_DOTTED_LETTERS = re.compile(r"[^\W\d_](\.[^\W\d_])+")  # e.g / U.S / т.д (final "." excluded)
_OPENING = "\"'“‘«([{¿¡"
WORD_START = "\u2581"  # sentencepiece's word-boundary marker "▁"


def clean_text(text: str) -> str:
    """`text` with every control character (Unicode category Cc: C0, DEL, C1; tabs and
    line breaks included) replaced by a space.

    Sentencepiece would turn NUL or a C1 control into <unk> (which the model renders as
    invented words) and silently delete ESC or DEL, gluing the words on either side
    together ("a<ESC>b" -> "ab"); a space does neither, and the tokenizer collapses extra
    spaces. A line of nothing but control characters and whitespace becomes blank."""
    if text.isprintable():  # the common case: no control character at all
        return text
    return "".join(" " if unicodedata.category(c) == "Cc" else c for c in text)


def _keeps_going(text: str, dot: int, after: int) -> bool:
    """Whether the single "." at text[dot], followed by whitespace up to text[after],
    belongs to an abbreviation rather than ending a sentence."""
    start = dot
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:dot].lstrip(_OPENING)
    if word in _ABBREVIATIONS or _DOTTED_LETTERS.fullmatch(word):
        return True
    if len(word) == 1 and word.isalpha() and word.isupper() and word != "I":
        return True  # an initial
    return word in _BEFORE_NUMBERS and after < len(text) and text[after].isdigit()


def _glued_boundary(text: str, punct: int, after: int) -> bool:
    """Whether punctuation at text[punct:] with the upper-case letter at text[after] and no
    whitespace between them ends a sentence (the module docstring's rules)."""
    if not text[after].isupper() or not text[punct - 1:punct].isalpha():
        return False
    start = punct
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    end = after
    while end < len(text) and not text[end].isspace():
        end += 1
    token, word = text[start:end], text[start:punct].lstrip(_OPENING)
    if any(mark in token for mark in ("@", "/", "\\")) or token.lower().startswith("www."):
        return False
    rest = text[after:end].rstrip(".,;:!?…\"'”’»)]")
    if re.search(r"\.[^\W\d_]", rest) or (len(rest) > 1 and rest.isupper() and rest.isalnum()):
        return False  # "Example.com", "TXT": the dot is part of a name
    letters = re.search(r"[^\W\d_]+$", word)  # "U" of "U.S.A.", "runs" of "runs.A"
    return len(letters.group()) > 1 and word not in _ABBREVIATIONS and not _DOTTED_LETTERS.fullmatch(word)


def split_sentences(text: str) -> list[str]:
    """The sentences of one line of text (no empty ones; see the module docstring for the
    rules); joining them gives the text back up to whitespace: no character is lost."""
    sentences, start = [], 0
    for m in _CANDIDATE.finditer(text):
        if m.group(2) == "":  # glued to the next word
            if not _glued_boundary(text, m.start(1), m.end()):
                continue
        elif m.group(1) == "." and _keeps_going(text, m.start(1), m.end()):
            continue
        sentences.append(text[start:m.end()].strip())
        start = m.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


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

    def piece_id(self, piece: str) -> int | None:
        """The model id of a piece; None for a piece not in the vocabulary."""
        t = self.sp.PieceToId(piece)
        return int(t) if self.sp.IdToPiece(t) == piece else None

    def piece(self, token: int) -> str:
        return self.sp.IdToPiece(int(token))

    def starts_word(self, token: int) -> bool:
        return self.sp.IdToPiece(int(token)).startswith(WORD_START)


class MarianTokenizer:
    """Marian's vocabulary (as transformers.MarianTokenizer): the source sentencepiece
    model cuts text into pieces, vocab.json maps pieces to model ids (unknown -> unk);
    ids map back to pieces, which the target sentencepiece model joins into text.
    A leading language code ">>xx<<" (multilingual-target models) is one piece of its own."""

    def __init__(self, source_spm: str | os.PathLike, target_spm: str | os.PathLike, vocab: dict[str, int],
                 unk: int, eos: int):
        self.path = Path(source_spm)
        self.source = sentencepiece.SentencePieceProcessor(model_file=str(source_spm))
        self.target = sentencepiece.SentencePieceProcessor(model_file=str(target_spm))
        self.vocab = dict(vocab)
        self.id_to_piece = [""] * len(self.vocab)
        for piece, tid in self.vocab.items():
            self.id_to_piece[tid] = piece
        self.unk = unk
        # Special pieces (</s>, <unk>, <pad>, language codes) never reach sentencepiece
        # decoding, where they would turn into " ⁇ ".
        self.special = {eos, unk} | {tid for piece, tid in self.vocab.items()
                                     if piece.startswith("<") and piece.endswith(">")}

    def encode(self, text: str) -> list[int]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[:end + 2]], text[end + 2:]
        pieces = code + self.source.encode(text, out_type=str)
        return [self.vocab.get(piece, self.unk) for piece in pieces]

    def encode_target(self, text: str) -> list[int]:
        """Target-side text -> ids (MarianTokenizer's target mode: the target model cuts)."""
        return [self.vocab.get(piece, self.unk) for piece in self.target.encode(text, out_type=str)]

    def decode(self, ids: list[int]) -> str:
        pieces = [self.id_to_piece[int(i)] for i in ids if int(i) not in self.special]
        # A piece the target model lacks (the joint vocabulary holds source pieces too)
        # comes back verbatim, "▁" included; MarianTokenizer turns those into spaces.
        return self.target.decode_pieces(pieces).replace(WORD_START, " ").strip()

    def pieces(self) -> list[str]:
        return list(self.id_to_piece)

    def piece_id(self, piece: str) -> int | None:
        return self.vocab.get(piece)

    def piece(self, token: int) -> str:
        return self.id_to_piece[int(token)]

    def starts_word(self, token: int) -> bool:
        return self.id_to_piece[int(token)].startswith(WORD_START)


def load_tokenizer(model_dir) -> "Tokenizer | MarianTokenizer":
    """The tokenizer of a loaded pyfastdec.model_dir.ModelDir (config.json "tokenizer")."""
    from pyfastdec.model_dir import SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE, read_vocab_json

    config = model_dir.config
    if config.tokenizer == "spm":
        return Tokenizer(model_dir.spm_path)
    files = model_dir.tokenizer_files
    vocab = read_vocab_json(files[VOCAB_FILE], config.vocab_size)
    return MarianTokenizer(files[SOURCE_SPM_FILE], files[TARGET_SPM_FILE], vocab,
                           config.tokens["unk"], config.tokens["eos"])


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


def sentence_units(text: str, tokenizer: Tokenizer, max_ids: int) -> list[list[list[int]]]:
    """The source ids (without EOS) of every sentence of `text`, in order, each as a list
    of chunks of at most `max_ids` ids: one chunk for a sentence that fits, several cut
    between words (cut_ids) for one that alone is too long."""
    return [chunks for _, chunks in sentences_with_ids(text, tokenizer, max_ids)]


INVISIBLE = frozenset(("Cf", "Co", "Cn"))  # format, private use, unassigned/noncharacters
# Invisible, but word separators in the scripts that use them (Thai, Khmer; Persian's
# half-space), as sentencepiece's normalisation also reads them: left to the tokenizer.
WORD_SEPARATORS = frozenset("\u200b\u200c")


def drop_invisible(text: str, has_piece) -> str:
    """`text` without its invisible characters (Unicode categories Cf, Co, Cn: ZWJ, soft
    hyphens, word joiners, bidi marks, BOM, private use, U+FFFE/FFFF) other than word
    separators, unless `has_piece(char)`: the tokenizer has a piece of its own for it (a
    vocabulary with ZWJ in emoji or Indic conjuncts). A reader does not see them, and
    sentencepiece reads them as <unk> (which the model renders as invented words: "Ein
    Hund rennt mit einem schleudert." for "A dog runs." + ZWJ) or, for LRM, RLM and BOM,
    as a space that splits the word they sit in."""
    if text.isascii():
        return text
    return "".join(c for c in text
                   if unicodedata.category(c) not in INVISIBLE or c in WORD_SEPARATORS or has_piece(c))


def visible(text: str) -> bool:
    """Whether `text` shows anything: a letter, digit, punctuation mark or symbol. Text of
    only format characters (ZWJ, ZWNJ, U+2060-2064, soft hyphens, bidi marks, BOM), private
    use, noncharacters (U+FFFE/FFFF), unassigned code points and bare combining marks
    does not: sentencepiece makes <unk> or a lone piece of it, which the models render as
    invented words."""
    return any(unicodedata.category(c)[0] in "LNPS" for c in text)


def sentences_with_ids(text: str, tokenizer: Tokenizer, max_ids: int) -> list[tuple[str, list[list[int]]]]:
    """(sentence text, its chunks as in sentence_units) of every sentence of `text` that
    is visible and has any ids: a line of only invisible characters gives no unit, so an
    empty output, as a line of control characters does."""
    units = []
    for sentence in split_sentences(text):
        if not visible(sentence):
            continue
        ids = tokenizer.encode(sentence)
        if ids:
            units.append((sentence, cut_ids(ids, max_ids, tokenizer.starts_word) if len(ids) > max_ids else [ids]))
    return units
