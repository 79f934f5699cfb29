"""translate_iterable (input order, bounded read-ahead), translate_file (lines, n-best
file, prefix file), Marian's n-best format field by field (numbers as C's printf %g
writes them), and the one-line errors for bad input to the new options."""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

pytest.importorskip("torch", reason="the tiny models need the 'test' extra (torch)")

from test_api_ctranslate2_options import sources, tiny  # noqa: E402,F401  (fixture)
from pyfastdec.nbest import cpp_float, nbest_line  # noqa: E402


class Recording:
    """An iterator over `items` that records how many were taken."""

    def __init__(self, items):
        self.items, self.taken = list(items), 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.taken == len(self.items):
            raise StopIteration
        self.taken += 1
        return self.items[self.taken - 1]


def test_translate_iterable_keeps_order_and_reads_ahead_at_most_read_ahead_batches(tiny):
    t = tiny["translator"]
    srcs = sources(50, seed=101)
    want = t.translate(srcs, algo="greedy")
    stream = Recording(srcs)
    results = t.translate_iterable(stream, batch_size=4, read_ahead=2, algo="greedy")
    assert stream.taken == 0  # lazy: nothing read before the first result is asked for
    got = []
    for out in results:
        got.append(out)
        assert stream.taken <= len(got) - 1 + 8  # one chunk of 2 batches of 4 ahead at most
    assert got == want and stream.taken == 50


def test_translate_iterable_with_prefixes_scores_and_sampling_equals_translate(tiny):
    t = tiny["translator"]
    srcs = sources(30, seed=102)
    prefixes = [s[:2] if i % 3 else None for i, s in enumerate(srcs)]
    kw = dict(algo="greedy", return_scores=True)
    assert list(t.translate_iterable(iter(srcs), iter(prefixes), batch_size=3, read_ahead=1, **kw)) == \
        t.translate(srcs, target_prefix=prefixes, **kw)
    # sampling seeds follow stream positions: chunking does not change the samples
    assert list(t.translate_iterable(srcs, batch_size=2, read_ahead=1, sampling_topk=0, sampling_seed=5)) == \
        t.translate(srcs, sampling_topk=0, sampling_seed=5)


def test_translate_iterable_prefix_count_mismatch_is_an_error(tiny):
    t = tiny["translator"]
    srcs = sources(10, seed=103)
    with pytest.raises(ValueError, match="target_prefix ended after 9 prefixes, but there are more inputs"):
        list(t.translate_iterable(srcs, [None] * 9, batch_size=2, read_ahead=1))
    with pytest.raises(ValueError, match="target_prefix has more prefixes than the 10 inputs"):
        list(t.translate_iterable(srcs, [None] * 11, batch_size=2, read_ahead=1))
    with pytest.raises(TypeError, match="inputs is str, expected an iterable of inputs"):
        t.translate_iterable("a man .")


def test_translate_file_writes_one_line_per_input_and_prefix_lines(tiny, tmp_path):
    t = tiny["translator"]
    texts = ["a man rides a bike .", "", "the dog runs . two women sit .", "a cat ."]
    src = tmp_path / "in.txt"
    src.write_text("".join(x + "\n" for x in texts), encoding="utf-8")
    out = tmp_path / "out.txt"
    assert t.translate_file(src, out, batch_size=2, read_ahead=1, algo="greedy") == 4
    assert out.read_text(encoding="utf-8").split("\n") == t.translate(texts, algo="greedy") + [""]
    prefixes = ["the", "", "a woman", ""]
    pre = tmp_path / "prefix.txt"
    pre.write_text("".join(x + "\n" for x in prefixes), encoding="utf-8")
    t.translate_file(src, out, target_prefix_path=pre, algo="greedy")
    assert out.read_text(encoding="utf-8").splitlines() == \
        t.translate(texts, algo="greedy", target_prefix=[p or None for p in prefixes])
    assert not (tmp_path / "out.txt.tmp").exists()


def test_translate_file_nbest_is_marian_format_field_by_field(tiny, tmp_path):
    t = tiny["translator"]
    texts = ["a man rides a bike .", "", "the dog runs ."]
    src = tmp_path / "in.txt"
    src.write_text("".join(x + "\n" for x in texts), encoding="utf-8")
    out = tmp_path / "nbest.txt"
    t.translate_file(src, out, algo="beam", beam_size=3, n_best=3, length_penalty=0.5)
    scored = t.translate_scored(texts, algo="beam", beam_size=3, n_best=3, length_penalty=0.5)
    want = [(i, h) for i, hs in enumerate(scored) for h in hs]
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(want)
    for line, (i, h) in zip(lines, want):
        fields = line.split(" ||| ")
        assert len(fields) == 4
        index, text, features, score = fields
        assert int(index) == i and text == h.output
        name, value = features.split(" ")
        assert name == "F0=" and float(value) == pytest.approx(h.logprob, rel=1e-5, abs=1e-6)
        assert float(score) == pytest.approx(h.logprob / h.tokens ** 0.5 if h.tokens else 0.0, rel=1e-5, abs=1e-6)
        assert float(score) == pytest.approx(h.score, rel=1e-5, abs=1e-6)


def test_translate_file_errors_name_the_file_and_line(tiny, tmp_path):
    t = tiny["translator"]
    src = tmp_path / "bad.txt"
    src.write_bytes(b"a man .\nthe \xff dog .\n")
    out = tmp_path / "out.txt"
    with pytest.raises(ValueError, match=r"bad.txt: line 2: invalid UTF-8 at byte 5 of the line"):
        t.translate_file(src, out, algo="greedy")
    assert not out.exists() and not (tmp_path / "out.txt.tmp").exists()
    with pytest.raises(FileNotFoundError, match="missing.txt: \\(file\\): missing"):
        t.translate_file(tmp_path / "missing.txt", out)
    # The output is written to OUT.tmp first: an error opening it names OUT, what the caller passed.
    src.write_bytes(b"a man .\n")
    with pytest.raises(FileNotFoundError) as info:
        t.translate_file(src, tmp_path / "no-such-folder" / "out.txt", algo="greedy")
    assert info.value.filename == str(tmp_path / "no-such-folder" / "out.txt"), str(info.value)


def _printf_g(x: float) -> str:
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    buf = ctypes.create_string_buffer(64)
    libc.snprintf(buf, 64, b"%g", ctypes.c_double(x))
    return buf.value.decode()


@pytest.mark.parametrize("x", [0.0, -1.2852706909179688, -0.10710589090983073, -123456.789, -1e-7, -3.0,
                               float(np.float32(-0.0622587)), -1234567.0])
def test_nbest_numbers_are_written_as_c_printf_g(x):
    assert cpp_float(x) == _printf_g(x)
    assert nbest_line(7, "Ein Mann .", x, x / 2) == f"7 ||| Ein Mann . ||| F0= {_printf_g(x)} ||| {_printf_g(x / 2)}"


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, error, message", [
    (dict(target_prefix=[None]), ValueError, r"1 target prefixes for 2 inputs \(expected one per input"),
    (dict(target_prefix="the"), TypeError, "target_prefix is str, expected a list with one prefix"),
    (dict(target_prefix=[None, 3.5]), TypeError, "target_prefix 1 is float, expected str"),
    (dict(target_prefix=[None, [5, "x"]]), TypeError, "target_prefix 1: token 1 is str 'x'; a token list holds"),
    (dict(target_prefix=[None, [5, 99]]), ValueError, r"target_prefix 1: id 99 at position 1 is outside the "
                                                       r"vocabulary \[0, 40\)"),
    (dict(target_prefix=[None, ["▁nope"]]), ValueError, "target_prefix 1: piece '▁nope' at position 0 is not in "),
    (dict(max_decoding_length=0), ValueError, "max_decoding_length must be an int >= 1"),
    (dict(length_penalty=float("nan")), ValueError, "length_penalty must be a finite number"),
    (dict(sampling_topk=-1), ValueError, r"sampling_topk must be an int in \[0, vocab_size=40\]"),
    (dict(sampling_topk=5, sampling_temperature=0), ValueError, "sampling_temperature must be a number > 0"),
    (dict(sampling_topk=5, algo="beam", beam_size=2), ValueError, "random sampling is greedy-style"),
    (dict(sampling_topk=5, beam_size=2, algo="greedy"), ValueError, "sampling draws one token per step"),
    (dict(sampling_topk=5, sampling_seed=-3), ValueError, "sampling_seed must be an int >= 0 or None"),
    (dict(n_best=2, num_hypotheses=3, beam_size=4), ValueError, "two names for the same option"),
])
def test_bad_options_are_one_line_errors_naming_them(tiny, kw, error, message):
    with pytest.raises(error, match=message) as caught:
        tiny["translator"].translate(["a man .", "the dog ."], **kw)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("inputs, error, message", [
    ([[5, 6], ["PIECE"], [True]], TypeError, r"input 2: token 0 is bool True; a token list holds"),
    ([[5, 600]], ValueError, r"input 0: id 600 at position 1 is outside the vocabulary \[0, 40\)"),
    ([["PIECE", "zzz"]], ValueError, "input 0: piece 'zzz' at position 1 is not in the vocabulary"),
    ([("a", 5)], TypeError, "input 0: token 1 is int 5; a token list holds only pieces"),
])
def test_bad_token_input_is_a_one_line_error_naming_the_input(tiny, inputs, error, message):
    piece = tiny["translator"].tokenizer.sp.IdToPiece(10)  # a real piece of the tiny vocabulary
    inputs = [[piece if t == "PIECE" else t for t in x] for x in inputs]
    with pytest.raises(error, match=message):
        tiny["translator"].translate(inputs, algo="greedy")
