"""One batch of rows (a dict of columns) decoded as `fastdec translate` decodes a block of
lines (jobs.decode.decode_rows: sentence splitting, over-long sentences cut between words,
control characters): what each actor of pyfastdec.ray runs, free of Ray, so that the
resumable job (pyfastdec.resumable_job) is tested with a local executor too.
"""
from __future__ import annotations

from pyfastdec.jobs.decode import decode_rows
from pyfastdec.jobs.lines import Line
from pyfastdec.jobs.options import DecodeOptions

NOTES_COLUMN = "fastdec_notes"  # warnings (over-long sentences), on the row they concern
LINE_COLUMN = "fastdec_line"  # 1-based input line numbers, when the caller (the CLI) has them


def decode_batch(translator, batch: dict, options: DecodeOptions, column: str, output_column: str,
                 cli_lines: bool) -> dict:
    """`batch` with `output_column` and NOTES_COLUMN added. cli_lines: the output is the
    CLI's whole lines (newline included; with n-best, up to n lines per row), else the text."""
    texts = [str(t) for t in batch[column]]
    # Line numbers only label warnings (and n-best lines): the CLI passes them in LINE_COLUMN.
    numbers = list(batch[LINE_COLUMN]) if LINE_COLUMN in batch else list(range(1, len(texts) + 1))
    lines = [Line(int(n), t) for n, t in zip(numbers, texts)]
    rows, _, notes = decode_rows(translator, lines, options)
    row_notes = [[] for _ in lines]
    for index, note in notes:
        row_notes[0 if index is None else index].append(note)
    result = dict(batch)
    result[output_column] = ["".join(r) for r in rows] if cli_lines else [r[0][:-1] for r in rows]
    result[NOTES_COLUMN] = ["\n".join(n) for n in row_notes]
    return result
