"""The units an API call decodes: every input is cleaned and split into sentences (text),
or taken as one sequence (pieces, ids); a sentence longer than the model reads is cut
between words (LongInputWarning). A unit is one sequence to decode; the units of all
inputs are batched together by length. `t` is the Translator: its tokenizers, limits and
the hooks a Corrector overrides (_source_text, _kept_as_is, _copy_sources).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyfastdec.copy_through import SourcePieces
from pyfastdec.text import clean_text, cut_ids, sentences_with_ids
from pyfastdec.token_input import TEXT, check_text, input_kind, token_ids


class LongInputWarning(UserWarning):
    """A sentence of input `index` longer than the model's max_source_len was cut between
    words: n_ids is the longest such sentence's length (EOS included), chunks the number
    of parts that input's over-long sentences were cut into."""

    def __init__(self, message: str, index: int, n_ids: int, chunks: int, limit: int):
        super().__init__(message)
        self.index, self.n_ids, self.chunks, self.limit = index, n_ids, chunks, limit


@dataclass
class Unit:
    """One sequence to decode: its input's index, source ids + EOS, the target prefix ids
    it continues (the first unit of an input only) and its key in the sampling seed."""

    input: int
    src: list[int]
    prefix: list[int]
    seed: tuple[int, int]
    keep: str | None = None  # returned as it is instead of decoded (Corrector: text it cannot read)
    source: SourcePieces | None = None  # Corrector: the source's original text, for copy-through


def prefix_ids(t, items: list, prefixes) -> list[list[int]]:
    """The target prefix ids of every input ([] without one); errors name the input."""
    if prefixes is None:
        return [[] for _ in items]
    if isinstance(prefixes, (str, bytes)) or not isinstance(prefixes, Sequence):
        raise TypeError(f"translate: target_prefix is {type(prefixes).__name__}, expected a list with one "
                        f"prefix (None, text, pieces or ids) per input")
    if len(prefixes) != len(items):
        raise ValueError(f"translate: {len(prefixes)} target prefixes for {len(items)} inputs (expected one "
                         f"per input; None for no prefix)")
    ids = []
    for i, p in enumerate(prefixes):
        if p is None:
            ids.append([])
            continue
        kind = input_kind(i, p, "target_prefix")
        if kind == TEXT:
            check_text(i, p, "target_prefix")
            ids.append(t._target_tokenizer().encode(clean_text(p)))
        else:
            ids.append(token_ids(i, p, kind, t._target_tokenizer(), t.verifier.vocab_size, "target_prefix"))
    return ids


def units(t, items: list, prefixes: list[list[int]], offset: int = 0
          ) -> tuple[list[Unit], list[str], list[LongInputWarning]]:
    """Every unit to decode (in input then sentence order), the kind of every input,
    and a warning per input with a sentence that had to be cut (indices shifted by
    `offset`, the position of items[0] in a stream). Empty inputs give no unit, unless
    they have a target prefix: then one with an empty source."""
    out, kinds, cuts = [], [], []
    for i, item in enumerate(items):
        kind = input_kind(i + offset, item)
        kinds.append(kind)
        keeps: list[str | None] = []
        sources: list[SourcePieces | None] = []  # per chunk
        if kind == TEXT:
            check_text(i + offset, item)
            found = sentences_with_ids(t._source_text(clean_text(item)), t.tokenizer,
                                       t.max_source_len - 1)
            sentences = [chunks for _, chunks in found]
            keeps = [t._kept_as_is(sentence, chunks) for sentence, chunks in found]
            sources = [source for (sentence, chunks), keep in zip(found, keeps)
                       for source in t._copy_sources(sentence, chunks, keep)]
        else:
            ids = token_ids(i + offset, item, kind, t.tokenizer, t.verifier.vocab_size)
            sentences = [cut_ids(ids, t.max_source_len - 1, t.tokenizer.starts_word)] if ids else []
        keeps = keeps or [None] * len(sentences)
        cut = [chunks for chunks, keep in zip(sentences, keeps) if len(chunks) > 1 and keep is None]
        if cut:
            n_ids = max(sum(len(c) for c in chunks) for chunks in cut) + 1
            parts = sum(len(chunks) for chunks in cut)
            cuts.append(LongInputWarning(
                f"input {i + offset}: a sentence of {n_ids} source tokens exceeds the model's max_source_len "
                f"{t.max_source_len}; cut between words into {parts} parts, translated separately "
                f"and joined with a space", index=i + offset, n_ids=n_ids, chunks=parts,
                limit=t.max_source_len))
        chunks = [c for s in sentences for c in s]
        # a kept sentence cut into chunks comes back once, with its first chunk
        kept = [keep if j == 0 or keep is None else "" for s, keep in zip(sentences, keeps) for j in range(len(s))]
        sources = sources or [None] * len(chunks)
        if not chunks and prefixes[i]:
            chunks, kept, sources = [[]], [None], [None]
        out += [Unit(i, c + [t.eos], prefixes[i] if k == 0 else [], (i + offset, k), keep, source)
                  for k, (c, keep, source) in enumerate(zip(chunks, kept, sources))]
    return out, kinds, cuts
