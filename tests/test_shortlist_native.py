"""Shortlist candidates computed by the engine (_engine.ShortlistIndex, used by
NativeBackend.encode) against the Python reader's reference, Shortlist.candidates
(export/SHORTLIST_FORMAT.md): the same ids on the shipped shortlists for real sentences
and random id lists, on small hand-built files (duplicates, empty sources, padding that
runs out of ids), and the same decoding results; bad input is refused clearly."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pyfastdec import _engine
from pyfastdec.backends.base import Want
from pyfastdec.backends.native import NativeBackend
from pyfastdec.model_dir.shortlist import Shortlist

MODELS = Path(__file__).resolve().parents[1] / "models"
SHIPPED = [m for m in ("en-de", "en-de-attn", "en-de-drafter", "en-de-drafter-separate")
           if (MODELS / m / "shortlist.bin").is_file()]


def native(sl: Shortlist):
    return _engine.ShortlistIndex(sl.vocab_size, sl.frequent, sl.indptr, sl.targets, sl.first_fill_id)


@pytest.mark.parametrize("model", SHIPPED)
def test_shipped_shortlists_give_the_reference_candidates(model):
    from export.data import load_pairs
    from pyfastdec.text import Tokenizer

    sl = Shortlist.load(MODELS / model / "shortlist.bin")
    index = native(sl)
    tok = Tokenizer(MODELS / model / "spm.model")
    sources = [tok.encode(s) + [3] for s, _ in load_pairs("test_2016_flickr", "en", "de")[:200]]
    rng = np.random.default_rng(0)
    sources += [rng.integers(0, sl.vocab_size, n).tolist() for n in (0, 1, 2, 50, 300, 3000)]
    for src in sources:
        want = sl.candidates(src)
        got = index.candidates(src)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)


def small(vocab_size, frequent, rows, first_fill_id):
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.uint64)
    targets = np.concatenate([np.asarray(r, np.uint32) for r in rows]) if indptr[-1] else np.zeros(0, np.uint32)
    return Shortlist(vocab_size, frequent, indptr, targets, best=max(map(len, rows)), first_fill_id=first_fill_id)


@pytest.mark.parametrize("first_fill_id", [0, 5, 60, 70])
def test_small_shortlists_padding_and_duplicates(first_fill_id):
    rng = np.random.default_rng(first_fill_id)
    V = 70  # the union of a few rows nearly fills the vocabulary: padding runs out
    rows = [sorted(rng.choice(V, size=int(rng.integers(0, 9)), replace=False).tolist(), reverse=True)
            for _ in range(V)]
    sl = small(V, [0, 3, 64, 69], rows, first_fill_id)
    index = native(sl)
    for n in (0, 1, 3, 10, 40, 200):
        src = rng.integers(0, V, n).tolist()  # repeats included
        np.testing.assert_array_equal(index.candidates(src), sl.candidates(src))


def test_native_candidates_decode_like_python_lists():
    if not SHIPPED:
        pytest.skip("no shipped model with a shortlist")
    backend = NativeBackend(MODELS / SHIPPED[0], threads=1)
    rng = np.random.default_rng(1)
    sources = [rng.integers(4, backend.vocab_size, int(rng.integers(1, 20))).tolist() + [3] for _ in range(5)]
    lists = [backend.shortlist.candidates(s).tolist() for s in sources]

    def logprobs(memory):
        state = backend.start(memory)
        r = backend.step(state, np.full((5, 1), backend.tokens["bos"], np.int64), Want(logprobs=True))
        return r.logprobs

    np.testing.assert_array_equal(logprobs(backend.encode(sources)), logprobs(backend._model.encode(sources, lists)))


def test_bad_input_is_refused():
    sl = small(10, [1], [[2]] * 10, 5)
    with pytest.raises(ValueError, match=r"indptr has 10 offsets, expected vocab_size \+ 1 = 11"):
        _engine.ShortlistIndex(10, sl.frequent, sl.indptr[:-1], sl.targets, 5)
    with pytest.raises(ValueError, match="target id 12 is outside the vocabulary"):
        _engine.ShortlistIndex(10, sl.frequent, sl.indptr, np.full(10, 12, np.uint32), 5)
    with pytest.raises(ValueError, match=r"first_fill_id 11 is not in \[0, 10\]"):
        _engine.ShortlistIndex(10, sl.frequent, sl.indptr, sl.targets, 11)
    index = native(sl)
    with pytest.raises(ValueError, match=r"source id 10 outside vocabulary \[0, 10\)"):
        index.candidates([1, 10])
    if SHIPPED:
        backend = NativeBackend(MODELS / SHIPPED[0], threads=1)
        with pytest.raises(ValueError, match="shortlist's vocab_size 10 differs from the model's"):
            backend._model.encode([[5, 3]], index)
