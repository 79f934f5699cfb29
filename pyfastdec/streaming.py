"""Translating streams: Translator.translate_iterable and Translator.translate_file.

The stream is read in chunks of read_ahead * batch_size inputs; each chunk is
translated as one translate call (sorted by length into batches inside it) and its
results yielded in input order before the next chunk is read, so at most one chunk of
inputs and outputs is held at a time, whatever the stream's length. Sentences are
numbered across the whole stream (warnings name the stream's input index, and sampling
seeds are per stream position, so a seeded stream samples as one translate call would).
"""
from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from pyfastdec.nbest import nbest_line
from pyfastdec.size_limits import MAX_BATCH_SIZE, check_size

MAX_READ_AHEAD = 64  # batches read ahead; more holds more memory for little better sorting
_END = object()


def _chunks(inputs: Iterable, prefixes: Iterable | None, size: int) -> Iterator[tuple[list, list | None]]:
    """(inputs, prefixes) chunks of `size`; a ValueError when the prefixes run out before
    the inputs or outlast them."""
    inputs = iter(inputs)
    prefixes = None if prefixes is None else iter(prefixes)
    seen = 0
    while True:
        chunk = list(itertools.islice(inputs, size))
        if prefixes is None:
            if not chunk:
                return
            yield chunk, None
            seen += len(chunk)
            continue
        got = list(itertools.islice(prefixes, len(chunk)))
        if len(got) < len(chunk):
            raise ValueError(f"translate_iterable: target_prefix ended after {seen + len(got)} prefixes, but there "
                             f"are more inputs (expected one prefix per input)")
        if not chunk:
            if next(prefixes, _END) is not _END:
                raise ValueError(f"translate_iterable: target_prefix has more prefixes than the {seen} inputs "
                                 f"(expected one prefix per input)")
            return
        yield chunk, got
        seen += len(chunk)


def translate_iterable(translator, inputs: Iterable, prefixes: Iterable | None, batch_size: int,
                       read_ahead: int, options: dict) -> Iterator:
    """The results of Translator.translate for every input, lazily (module docstring)."""
    if isinstance(inputs, (str, bytes)):
        raise TypeError(f"translate_iterable: inputs is {type(inputs).__name__}, expected an iterable of inputs "
                        f"(e.g. a list of str, or an open text file)")
    check_size("batch_size", batch_size, MAX_BATCH_SIZE)
    check_size("read_ahead", read_ahead, MAX_READ_AHEAD)
    if "return_stats" in options:
        raise TypeError("translate_iterable: return_stats is not taken (the stream has no end to sum to)")
    scores = options.pop("return_scores", False)
    opts = translator._options(**options, batch_size=batch_size, return_scores=scores,  # checked before reading
                               target_prefix=prefixes)

    def results():
        offset = 0
        for chunk, got in _chunks(inputs, prefixes, batch_size * read_ahead):
            hyps, kinds, _, splits = translator._run(chunk, got, opts, offset)
            for warning in splits:
                warnings.warn(warning, stacklevel=3)
            yield from (translator._format(h, kind, opts) for h, kind in zip(hyps, kinds))
            offset += len(chunk)

    return results()


def _lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 file without their line ends, read lazily; a ValueError naming
    the file and line for invalid UTF-8."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            raw = raw[:-1] if raw.endswith(b"\n") else raw
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}: line {number}: invalid UTF-8 at byte {err.start + 1} of the line") from None
            yield text[1:] if number == 1 and text.startswith("\ufeff") else text


def translate_file(translator, input_path: str | os.PathLike, output_path: str | os.PathLike,
                   prefix_path: str | os.PathLike | None, batch_size: int, read_ahead: int, options: dict) -> int:
    """Translator.translate_file: one output line per input line, or n-best lines in
    Marian's format (nbest.py) with n_best > 1 or return_scores. The output is written to
    output_path + ".tmp" and renamed at the end, so a failed run leaves no half file."""
    source, out = Path(input_path), Path(output_path)
    for p in (source, prefix_path):
        if p is not None and not Path(p).is_file():
            raise FileNotFoundError(f"{p}: (file): missing or not a regular file (expected a UTF-8 text file, "
                                    f"one sentence per line)")
    nbest_format = (options.get("num_hypotheses") or options.get("n_best", 1)) > 1 or options.get("return_scores")
    if "return_stats" in options:
        raise TypeError("translate_file: return_stats is not taken")
    check_size("batch_size", batch_size, MAX_BATCH_SIZE)
    check_size("read_ahead", read_ahead, MAX_READ_AHEAD)
    opts = translator._options(**{**options, "return_scores": bool(nbest_format)}, batch_size=batch_size,
                               target_prefix=prefix_path)
    lines = _lines(source)
    prefixes = None if prefix_path is None else (p or None for p in _lines(Path(prefix_path)))
    tmp = out.with_name(out.name + ".tmp")
    count = 0
    try:
        try:
            f = open(tmp, "w", encoding="utf-8", newline="\n")
        except OSError as err:  # named as the caller wrote it, not by the temporary name
            raise OSError(err.errno, err.strerror, str(output_path)) from None
        with f:
            for chunk, got in _chunks(lines, prefixes, batch_size * read_ahead):
                hyps, kinds, _, splits = translator._run(chunk, got, opts, count)
                for warning in splits:
                    warnings.warn(warning, stacklevel=3)
                for i, hs in enumerate(hyps):
                    if nbest_format:
                        f.writelines(nbest_line(count + i, _one_line(translator._output(h, "text")), h.logprob,
                                                translator._score(h, opts)) + "\n" for h in hs[:opts.n_best])
                    else:
                        f.write(_one_line(translator._output(hs[0], "text")) + "\n")
                count += len(chunk)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return count


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")
