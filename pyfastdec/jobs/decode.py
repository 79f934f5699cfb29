"""A block of input lines decoded as `fastdec translate` decodes it: one output line per
input line (up to n with n-best; a newline inside an output becomes a space), and the
warnings about sentences cut for being too long named by their line number."""
from __future__ import annotations

import warnings
from typing import Optional

from pyfastdec.api import LongInputWarning, Translator
from pyfastdec.decoding import DecodeStats
from pyfastdec.jobs.lines import Line
from pyfastdec.jobs.options import DecodeOptions
from pyfastdec.nbest import nbest_line


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def long_input_note(m: LongInputWarning, lines: list[Line]) -> str:
    """The warning for a sentence cut for being too long, named by its line in the input
    (m.index counts the inputs of the call: `lines`)."""
    return (f"line {lines[m.index].number}: a sentence of {m.n_ids} source tokens exceeds the model's max_source_len "
            f"{m.limit}; cut between words into {m.chunks} parts, translated separately and joined with a space")


def decode_rows(translator: Translator, lines: list[Line], options: DecodeOptions
                ) -> tuple[list[list[str]], DecodeStats, list[tuple[Optional[int], str]]]:
    """The output lines (with their newlines) of each input line of a block, the block's
    statistics, and its warnings: (index in the block, or None, message), a line with a
    sentence that had to be cut named by its line number."""
    texts = [line.text for line in lines]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LongInputWarning)
        if options.n_best > 1:
            kw = {k: v for k, v in options.kwargs().items() if k != "return_scores"}
            outputs, stats = translator.translate_scored(texts, **kw)
        else:
            outputs, stats = translator.translate(texts, **options.kwargs())
    notes = []
    for w in caught:
        if isinstance(w.message, LongInputWarning):
            notes.append((w.message.index, long_input_note(w.message, lines)))
        else:
            notes.append((None, str(w.message)))
    rows = []
    for line, result in zip(lines, outputs):
        if options.n_best > 1:
            rows.append([nbest_line(line.number - 1, _one_line(h.output), h.logprob, h.score) + "\n"
                         for h in result])
        else:
            rows.append([_one_line(result) + "\n"])
    return rows, stats, notes


def translate_block(translator: Translator, lines: list[Line], options: DecodeOptions
                    ) -> tuple[list[str], DecodeStats, list[str]]:
    """decode_rows, flattened: the block's output lines, statistics and warnings."""
    rows, stats, notes = decode_rows(translator, lines, options)
    return [text for row in rows for text in row], stats, [note for _, note in notes]
