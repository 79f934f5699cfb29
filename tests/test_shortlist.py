"""Lexical shortlist: IBM Model 1 builder, shortlist.bin format, per-row candidates.

Expectations come from independent sources: a plain-Python IBM Model 1, synthetic
corpora whose true word alignment is known, Counter-based frequencies, and a header
parsed with struct at the offsets written in export/SHORTLIST_FORMAT.md.
"""
import gzip
import math
import struct
import zlib
from collections import Counter, defaultdict

import numpy as np
import pytest

from export.shortlist import build_shortlist, main, read_parallel, train_ibm1
from pyfastdec.model_dir.shortlist import Shortlist

FIRST_WORD = 5          # ids 0..4 are pad, unk, bos, eos, mask
SPECIALS = {1, 2, 3}    # unk, bos, eos: always candidates


# ---------------------------------------------------------------- independent helpers
def reference_ibm1(src, tgt, vocab_size, iterations):
    """Textbook IBM Model 1 with NULL (= vocab_size), dicts and loops only."""
    null = vocab_size
    t = defaultdict(lambda: 1.0 / vocab_size)
    history = []
    for _ in range(iterations):
        count, total, ll = defaultdict(float), defaultdict(float), 0.0
        for f_sent, e_sent in zip(src, tgt):
            fs = [null] + list(f_sent)
            for e in e_sent:
                z = sum(t[(f, e)] for f in fs)
                ll += math.log(z / len(fs))
                for f in fs:
                    count[(f, e)] += t[(f, e)] / z
                    total[f] += t[(f, e)] / z
        history.append(ll)
        t = defaultdict(float, {(f, e): c / total[f] for (f, e), c in count.items()})
    return dict(t), history


def synthetic_corpus(n_sent, vocab_size, seed, noise=0.0):
    """Each source word f translates to g(f); targets are shuffled translations.

    Every sentence contains the "article" FIRST_WORD and otherwise Zipfian words, so
    g(FIRST_WORD) co-occurs with every source word as often as its true translation
    does: co-occurrence counting cannot tell them apart, only EM explains it away.
    With noise, a target word is replaced by a random one with that probability.
    """
    rng = np.random.default_rng(seed)
    words = np.arange(FIRST_WORD, vocab_size)
    g = dict(zip(words.tolist(), rng.permutation(words).tolist()))
    zipf = 1.0 / np.arange(1, words.size)
    zipf /= zipf.sum()
    src, tgt = [], []
    for _ in range(n_sent):
        f = [FIRST_WORD] + rng.choice(words[1:], size=int(rng.integers(3, 11)), p=zipf).tolist()
        e = [g[w] for w in f]
        rng.shuffle(e)
        e = [int(rng.choice(words)) if rng.random() < noise else w for w in e]
        src.append(f)
        tgt.append(e)
    return src, tgt, g


@pytest.fixture(scope="module")
def corpus():
    return synthetic_corpus(n_sent=1500, vocab_size=120, seed=1, noise=0.05)


@pytest.fixture(scope="module")
def built(corpus):
    src, tgt, _ = corpus
    return build_shortlist(src, tgt, vocab_size=120, frequent=10, best=6, iterations=5)


# ---------------------------------------------------------------- IBM Model 1
def test_em_matches_textbook_model1():
    src = [[5, 6, 7], [5, 8], [6, 7, 9], [], [9, 5, 5]]
    tgt = [[10, 11, 12], [10, 13], [11, 12, 14, 14], [12], [14, 10]]
    table = train_ibm1(src, tgt, vocab_size=15, iterations=4)
    expected, history = reference_ibm1(src, tgt, 15, 4)
    got = {(int(f), int(e)): p for f, e, p in zip(table.pair_src, table.pair_tgt, table.prob)}
    assert got.keys() == expected.keys()
    for pair, p in expected.items():
        assert got[pair] == pytest.approx(p, rel=1e-12), pair
    assert table.log_likelihood == pytest.approx(history, rel=1e-12)


def test_em_likelihood_never_decreases(corpus):
    src, tgt, _ = corpus
    ll = train_ibm1(src, tgt, 120, iterations=6).log_likelihood
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(ll, ll[1:]))
    assert ll[-1] > ll[0]


def test_best_translation_is_the_true_alignment(corpus, built):
    src, tgt, g = corpus
    seen = sorted({f for s in src for f in s})
    assert len(seen) > 100
    assert all(built.translations(f)[0][0] == g[f] for f in seen)
    # The test is discriminating: co-occurrence counts do not single out g(f).
    cooc = defaultdict(Counter)
    for f_sent, e_sent in zip(src, tgt):
        for f in set(f_sent):
            cooc[f].update(set(e_sent))
    unique_best = sum(cooc[f][g[f]] > max(n for e, n in cooc[f].items() if e != g[f])
                      for f in seen)
    assert unique_best < len(seen) / 2


def test_rows_are_the_top_m_of_the_model():
    src, tgt, _ = synthetic_corpus(n_sent=60, vocab_size=30, seed=2, noise=0.3)
    best = 4
    sl = build_shortlist(src, tgt, 30, frequent=3, best=best, iterations=3)
    t, _ = reference_ibm1(src, tgt, 30, 3)
    for f in range(30):
        model = sorted((p for (ff, _), p in t.items() if ff == f), reverse=True)
        targets, probs = sl.translations(f)
        # The row holds the M largest probabilities of the model, each its own t(e|f);
        # which of two exactly tied ids comes first may differ by rounding, so compare
        # values rather than the id order.
        assert len(targets) == min(best, len(model)), f
        np.testing.assert_allclose(probs, model[:best], rtol=1e-6)
        np.testing.assert_allclose(probs, [t[(f, int(e))] for e in targets], rtol=1e-6)
        assert len(set(targets.tolist())) == len(targets)


def test_frequent_ids_are_the_most_frequent_targets_plus_specials(corpus, built):
    _, tgt, _ = corpus
    counts = Counter(e for s in tgt for e in s)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    assert built.frequent.tolist() == sorted({e for e, _ in top} | SPECIALS)


def test_frequent_ids_break_ties_by_id_and_skip_unseen_ids():
    sl = build_shortlist([[5], [5]], [[8, 7], [9]], vocab_size=12, frequent=1)
    assert sl.frequent.tolist() == [1, 2, 3, 7]          # 7, 8, 9 tie: lowest id wins
    sl = build_shortlist([[5], [5]], [[8, 7], [9]], vocab_size=12, frequent=50)
    assert sl.frequent.tolist() == [1, 2, 3, 7, 8, 9]    # never-seen ids are not frequent


def test_builder_rejects_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match="target sentence 2: id 9"):
        build_shortlist([[5], [5]], [[6], [9]], vocab_size=9)
    with pytest.raises(ValueError, match="2 source sentences but 1 target"):
        build_shortlist([[5], [5]], [[6]], vocab_size=9)


# ---------------------------------------------------------------- candidates
def expected_candidates(sl, src_ids):
    chosen = set(sl.frequent.tolist())
    for f in src_ids:
        chosen |= set(sl.translations(f)[0].tolist())
    fill = FIRST_WORD
    while len(chosen) % 8:
        while fill in chosen:
            fill += 1
        chosen.add(fill)
    return sorted(chosen)


def test_candidates_are_the_padded_union_for_this_sentence(corpus, built):
    src, _, g = corpus
    for sentence in src[:50]:
        got = built.candidates(sentence)
        assert got.dtype == np.int32
        assert got.tolist() == expected_candidates(built, sentence)
        assert set(built.frequent.tolist()) <= set(got.tolist())
        assert {g[f] for f in sentence} <= set(got.tolist())
        assert np.all(np.diff(got) > 0) and got.size % 8 == 0
        assert not {0, 4} & set(got.tolist()) - set(built.frequent.tolist())


def test_candidates_of_empty_source_are_the_padded_frequent_ids(built):
    got = built.candidates([])
    assert got.tolist() == expected_candidates(built, [])
    assert got.size % 8 == 0 and set(built.frequent.tolist()) <= set(got.tolist())


def test_candidates_reject_ids_outside_the_vocabulary(built):
    with pytest.raises(ValueError, match="source id 120"):
        built.candidates([5, 120])
    with pytest.raises(ValueError, match="source id -1"):
        built.candidates([-1])


def test_padding_stops_when_the_vocabulary_is_exhausted():
    sl = Shortlist(10, [1, 2, 3, 5, 6, 7, 8], np.zeros(11), [], best=0, first_fill_id=5)
    assert sl.candidates([]).tolist() == [1, 2, 3, 5, 6, 7, 8, 9]
    sl = Shortlist(10, [1, 2, 3, 5, 6, 7, 8, 9], np.zeros(11), [], best=0, first_fill_id=5)
    assert sl.candidates([0]).size == 8
    sl = Shortlist(10, [2, 5, 6, 7, 8, 9], np.zeros(11), [], best=0, first_fill_id=5)
    assert sl.candidates([]).tolist() == [2, 5, 6, 7, 8, 9]   # 0..4 are never padding


# ---------------------------------------------------------------- file format
def test_round_trip_is_identical(built, tmp_path):
    path = tmp_path / "shortlist.bin"
    built.save(path)
    loaded = Shortlist.load(path)
    for name in ("frequent", "indptr", "targets", "probs"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(built, name))
    assert (loaded.vocab_size, loaded.best, loaded.first_fill_id) == (120, 6, 5)
    assert loaded.candidates([5, 6, 7]).tolist() == built.candidates([5, 6, 7]).tolist()
    first = path.read_bytes()
    loaded.save(path)          # overwriting the file it is mapped from must be safe
    assert path.read_bytes() == first
    assert loaded.candidates([5, 6, 7]).tolist() == built.candidates([5, 6, 7]).tolist()


def test_round_trip_without_probabilities(corpus, tmp_path):
    src, tgt, _ = corpus
    sl = build_shortlist(src[:200], tgt[:200], 120, frequent=5, best=3, keep_probs=False)
    sl.save(tmp_path / "s.bin")
    loaded = Shortlist.load(tmp_path / "s.bin")
    assert loaded.probs is None
    np.testing.assert_array_equal(loaded.targets, sl.targets)


def test_bytes_follow_the_documented_layout(built, tmp_path):
    path = tmp_path / "shortlist.bin"
    built.save(path, version=1)        # version 2's layout: tests/test_shortlist_v2.py
    data = path.read_bytes()
    assert data[:8] == b"FDSHORT\0"
    version, header_bytes, vocab, n_freq, best, fill, flags, payload_crc = \
        struct.unpack_from("<8I", data, 8)
    assert (version, header_bytes, vocab, n_freq, best, fill, flags) == \
        (1, 128, 120, built.frequent.size, 6, 5, 1)
    (file_bytes,) = struct.unpack_from("<Q", data, 40)
    sections = struct.unpack_from("<8Q", data, 48)
    assert file_bytes == len(data) and file_bytes % 64 == 0
    assert struct.unpack_from("<3I", data, 112) == (0, 0, 0)
    assert struct.unpack_from("<I", data, 124)[0] == zlib.crc32(data[:124])
    assert payload_crc == zlib.crc32(data[128:])
    (fo, fb), (io, ib), (to, tb), (po, pb) = zip(sections[0::2], sections[1::2])
    assert all(o % 64 == 0 for o in (fo, io, to, po)) and 128 <= fo < io < to < po
    assert (fb, ib, tb, pb) == (4 * n_freq, 8 * 121, 4 * built.targets.size,
                                4 * built.targets.size)
    assert np.frombuffer(data, "<u4", n_freq, fo).tolist() == built.frequent.tolist()
    indptr = np.frombuffer(data, "<u8", 121, io)
    targets = np.frombuffer(data, "<u4", tb // 4, to)
    probs = np.frombuffer(data, "<f4", pb // 4, po)
    f = 7
    assert targets[indptr[f]:indptr[f + 1]].tolist() == built.translations(f)[0].tolist()
    assert np.all(np.diff(probs[indptr[f]:indptr[f + 1]]) <= 0)


@pytest.fixture
def small_file(tmp_path):
    src, tgt, _ = synthetic_corpus(n_sent=40, vocab_size=20, seed=3)
    path = tmp_path / "small.bin"
    build_shortlist(src, tgt, 20, frequent=4, best=3).save(path)
    return path


def rewrite_header(path, fmt, offset, value):
    """Change one header field and re-seal the header checksum, so that the field's
    own validation is what must catch it."""
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    struct.pack_into("<I", data, 124, zlib.crc32(bytes(data[:124])))
    path.write_bytes(bytes(data))


def load_error(path):
    with pytest.raises(ValueError) as err:
        Shortlist.load(path)
    assert str(path) in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("keep", [0, 7, 127, 128, 200, -1])
def test_truncated_file_is_refused(small_file, keep):
    data = small_file.read_bytes()
    small_file.write_bytes(data[:keep] if keep >= 0 else data[:-1])
    field = "header" if 0 <= keep < 128 else "file_bytes"
    assert f": {field}:" in load_error(small_file)


def test_bad_magic_is_refused(small_file):
    small_file.write_bytes(b"NOTSHORT" + small_file.read_bytes()[8:])
    assert ": magic:" in load_error(small_file)


def test_unknown_version_is_refused(small_file):
    rewrite_header(small_file, "<I", 8, 3)
    assert ": version: 3 is not supported" in load_error(small_file)


def test_corrupt_payload_is_refused(small_file):
    data = bytearray(small_file.read_bytes())
    data[-70] ^= 0x01
    small_file.write_bytes(bytes(data))
    assert ": payload_crc32:" in load_error(small_file)


def test_corrupt_header_is_refused(small_file):
    data = bytearray(small_file.read_bytes())
    data[24] ^= 0x01                              # best
    small_file.write_bytes(bytes(data))
    assert ": header_crc32:" in load_error(small_file)


@pytest.mark.parametrize("fmt, offset, value, field", [
    ("<I", 12, 64, "header_bytes"),
    ("<I", 32, 2, "flags"),
    ("<I", 120, 1, "reserved"),                   # reserved in versions 1 and 2
    ("<Q", 48, 130, "frequent_offset"),           # misaligned
    ("<Q", 64, 128, "index_offset"),              # overlaps the frequent ids
    ("<Q", 56, 12, "frequent_bytes"),             # disagrees with num_frequent
    ("<I", 16, 21, "index_bytes"),                # vocab_size disagrees with the index
    ("<I", 24, 1, "best"),                        # rows are longer than best
])
def test_inconsistent_header_field_is_refused(small_file, fmt, offset, value, field):
    rewrite_header(small_file, fmt, offset, value)
    message = load_error(small_file)
    assert f": {field}" in message or (field == "best" and "more than best" in message)


def test_every_single_byte_corruption_is_detected(small_file):
    data = small_file.read_bytes()
    for i in range(len(data)):
        corrupt = bytearray(data)
        corrupt[i] ^= 0xFF
        small_file.write_bytes(bytes(corrupt))
        with pytest.raises(ValueError):
            Shortlist.load(small_file)


def test_constructor_rejects_unsorted_frequent_ids():
    with pytest.raises(ValueError, match="frequent: ids are not strictly increasing"):
        Shortlist(10, [3, 2], np.zeros(11), [], best=0, first_fill_id=5)


# ---------------------------------------------------------------- corpus files and CLI
def test_files_of_different_length_are_refused(tmp_path):
    (tmp_path / "a").write_text("x\ny\nz\n")
    (tmp_path / "b").write_text("x\ny\n")
    with pytest.raises(ValueError, match=r"b ends after 2 lines but .*a has line 3"):
        read_parallel(tmp_path / "a", tmp_path / "b")


def test_invalid_utf8_names_file_and_line(tmp_path):
    (tmp_path / "a").write_text("x\ny\nz\n")
    with gzip.open(tmp_path / "b.gz", "wb") as out:
        out.write(b"x\ny\n\xff\xfez\n")
    with pytest.raises(ValueError, match=r"b\.gz:3: invalid UTF-8"):
        read_parallel(tmp_path / "a", tmp_path / "b.gz")


def test_command_line_builds_a_loadable_shortlist(tmp_path, capsys):
    spm = pytest.importorskip("sentencepiece")
    rng = np.random.default_rng(4)
    lex = {"haus": "house", "katze": "cat", "hund": "dog", "baum": "tree", "blau": "blue",
           "rot": "red", "gross": "big", "klein": "small", "alt": "old", "neu": "new"}
    src_words = list(lex)
    src_lines, tgt_lines = [], []
    for _ in range(300):
        words = rng.choice(src_words, size=int(rng.integers(2, 6))).tolist()
        src_lines.append(" ".join(words))
        tgt_lines.append(" ".join(lex[w] for w in rng.permutation(words)))
    (tmp_path / "train.de").write_text("\n".join(src_lines) + "\n")
    with gzip.open(tmp_path / "train.en.gz", "wt") as out:
        out.write("\n".join(tgt_lines) + "\n")
    (tmp_path / "both.txt").write_text("\n".join(src_lines + tgt_lines) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "both.txt"), model_prefix=str(tmp_path / "spm"),
        vocab_size=40, model_type="word", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        user_defined_symbols=["<mask>"], hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    out = tmp_path / "shortlist.bin"
    assert main(["--src", str(tmp_path / "train.de"), "--tgt", str(tmp_path / "train.en.gz"),
                 "--spm", str(tmp_path / "spm.model"), "--out", str(out),
                 "--frequent", "3", "--best", "2", "--iterations", "5"]) == 0
    sl = Shortlist.load(out)
    assert sl.vocab_size == sp.get_piece_size() and sl.first_fill_id == 5
    assert SPECIALS <= set(sl.frequent.tolist())
    for de, en in lex.items():
        (f,), (e,) = sp.encode(de), sp.encode(en)
        assert sl.translations(f)[0][0] == e, de
    (tmp_path / "short.en").write_text("house\n")
    assert main(["--src", str(tmp_path / "train.de"), "--tgt", str(tmp_path / "short.en"),
                 "--spm", str(tmp_path / "spm.model"), "--out", str(out)]) == 1
    assert "short.en ends after 1 lines" in capsys.readouterr().err
