"""shortlist.bin format version 2 (export/SHORTLIST_FORMAT.md): u16 ids and u32 index
offsets, probabilities optional. The reference is a version 1 file with probabilities
written from the arrays of models/en-de/shortlist.bin, whichever form that file is shipped
in (version 1 with probabilities, or version 2 with or without them): its version 2
rewrite gives the same candidates for every source id and for real sentences, the engine
decodes the same with it, and its bad variants are refused with one line naming the file
and the field. The Marian export of a shortlist without probabilities ranks every row as
ours does, checked against Marian's own ranking rule (marian-dev src/data/shortlist.cpp,
LexicalShortlistGenerator::prune: by (probability, target id) descending, keep > 0)."""
from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from export.shortlist import main as shortlist_main
from export.shortlist import rewrite
from pyfastdec.model_dir.shortlist import Shortlist

MODELS = Path(__file__).resolve().parents[1] / "models"
SHIPPED = MODELS / "en-de" / "shortlist.bin"
pytestmark = pytest.mark.skipif(not SHIPPED.is_file(), reason="needs models/en-de/shortlist.bin")


def rank_probs(indptr: np.ndarray) -> np.ndarray:
    """Stand-in probabilities for a shipped file without them: 2^-(rank + 1) for the entry
    at `rank` (0 = best) of its row. Strictly decreasing within a row (the order the format
    requires), exact in float32 for rows of up to 148 entries, and from rank 29 on below
    marian_npz_export's MARIAN_FLOOR (1e-9), so the Marian export floors them into ties
    and steps those apart, as it does for the real probabilities (746 ties and 13 values
    under the floor in the version 1 file shipped before issue 14)."""
    lengths = np.diff(indptr.astype(np.int64))
    assert lengths.max(initial=0) <= 148, "2^-(rank + 1) would underflow float32"
    rank = np.arange(int(lengths.sum())) - np.repeat(indptr[:-1].astype(np.int64), lengths)
    return np.ldexp(np.float32(1), -(rank + 1).astype(np.int32)).astype(np.float32)


@pytest.fixture(scope="module")
def shipped():
    return Shortlist.load(SHIPPED)


@pytest.fixture(scope="module")
def reference(shipped, tmp_path_factory):
    """A version 1 file with probabilities holding the shipped file's arrays (the shipped
    probabilities, or rank_probs where it has none)."""
    probs = shipped.probs if shipped.probs is not None else rank_probs(shipped.indptr)
    path = tmp_path_factory.mktemp("v1") / "shortlist.bin"
    Shortlist(shipped.vocab_size, shipped.frequent, shipped.indptr, shipped.targets, probs,
              best=shipped.best, first_fill_id=shipped.first_fill_id).save(path, version=1)
    return path


@pytest.fixture(scope="module")
def v1(reference):
    return Shortlist.load(reference)


@pytest.fixture(scope="module")
def v2_files(reference, tmp_path_factory):
    """The reference rewritten as version 2, with and without probabilities."""
    d = tmp_path_factory.mktemp("v2")
    rewrite(reference, d / "probs.bin")
    rewrite(reference, d / "noprobs.bin", drop_probs=True)
    return {"probs": d / "probs.bin", "noprobs": d / "noprobs.bin"}


@pytest.fixture(scope="module")
def sentences():
    from export.data import load_pairs
    from pyfastdec.text import Tokenizer

    tok = Tokenizer(MODELS / "en-de" / "spm.model")
    return [tok.encode(s) + [3] for s, _ in load_pairs("test_2016_flickr", "en", "de")[:200]]


def header(path: Path) -> dict:
    data = path.read_bytes()
    names = ("version", "header_bytes", "vocab_size", "num_frequent", "best", "first_fill_id",
             "flags", "payload_crc32")
    out = dict(zip(names, struct.unpack_from("<8I", data, 8)))
    out["file_bytes"] = struct.unpack_from("<Q", data, 40)[0]
    sections = struct.unpack_from("<8Q", data, 48)
    for i, name in enumerate(("frequent", "index", "targets", "probs")):
        out[name] = sections[2 * i], sections[2 * i + 1]
    out["id_bytes"], out["offset_bytes"], out["reserved"] = struct.unpack_from("<3I", data, 112)
    return out


def layout_bytes(sl: Shortlist, id_bytes: int, offset_bytes: int, probs: bool) -> int:
    """File size by export/SHORTLIST_FORMAT.md: the 128-byte header, then each section
    padded to a multiple of 64."""
    pad = lambda n: -(-n // 64) * 64  # noqa: E731
    N, V, T = sl.frequent.size, sl.vocab_size, sl.targets.size
    return 128 + pad(id_bytes * N) + pad(offset_bytes * (V + 1)) + pad(id_bytes * T) + (pad(4 * T) if probs else 0)


# ---------------------------------------------------------------- same content as version 1
def test_shipped_file_is_a_known_form_of_the_en_de_shortlist(shipped):
    """Shipped as version 1 with probabilities until issue 14, then as version 2 (written by
    `export.shortlist rewrite --drop-probs`, so without them; with them is allowed too).
    Either way it is en-de's: its vocabulary, the special ids always kept, and a
    plausible number of entries (312 114 when this was written; 100 per row at most)."""
    h = header(SHIPPED)
    assert (h["version"], shipped.probs is not None) in {(1, True), (2, True), (2, False)}
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(MODELS / "en-de" / "spm.model"))
    vocab_size = json.loads((MODELS / "en-de" / "config.json").read_text())["vocab_size"]
    assert shipped.vocab_size == vocab_size == sp.get_piece_size()
    assert {1, 2, 3} <= set(shipped.frequent.tolist()) and 0 < shipped.best <= 148
    rows = np.count_nonzero(np.diff(shipped.indptr.astype(np.int64)))
    # Source ids never seen in training have no row; most of en-de's do (3959 of 8000).
    assert rows >= shipped.vocab_size // 3, rows
    assert 10 * rows <= shipped.targets.size <= shipped.best * rows, (shipped.targets.size, rows)


@pytest.mark.parametrize("kind", ["probs", "noprobs"])
def test_version_2_bytes_follow_the_documented_layout(v1, v2_files, kind):
    path = v2_files[kind]
    data, h = path.read_bytes(), header(path)
    N, T, V = v1.frequent.size, v1.targets.size, v1.vocab_size
    assert (h["version"], h["id_bytes"], h["offset_bytes"], h["reserved"]) == (2, 2, 4, 0)
    assert h["flags"] == (kind == "probs") and h["file_bytes"] == len(data) and len(data) % 64 == 0
    assert struct.unpack_from("<I", data, 124)[0] == zlib.crc32(data[:124])
    assert h["payload_crc32"] == zlib.crc32(data[128:])
    assert (h["frequent"][1], h["index"][1], h["targets"][1]) == (2 * N, 4 * (V + 1), 2 * T)
    assert h["probs"] == ((0, 0) if kind == "noprobs" else (h["probs"][0], 4 * T))
    offsets = [h[s][0] for s in ("frequent", "index", "targets")] + ([h["probs"][0]] if kind == "probs" else [])
    assert all(o % 64 == 0 for o in offsets) and offsets == sorted(offsets) and offsets[0] == 128
    # Read with plain numpy at the documented offsets and widths, not with the reader.
    assert np.frombuffer(data, "<u2", N, h["frequent"][0]).tolist() == v1.frequent.tolist()
    assert np.frombuffer(data, "<u4", V + 1, h["index"][0]).tolist() == v1.indptr.tolist()
    assert np.frombuffer(data, "<u2", T, h["targets"][0]).tolist() == v1.targets.tolist()
    if kind == "probs":
        assert np.frombuffer(data, "<f4", T, h["probs"][0]).tobytes() == v1.probs.tobytes()
    assert len(data) == layout_bytes(v1, 2, 4, kind == "probs")  # en-de's: 1905216 / 656704


@pytest.mark.parametrize("kind", ["probs", "noprobs"])
def test_version_2_gives_version_1_candidates(v1, v2_files, sentences, kind):
    v2 = Shortlist.load(v2_files[kind])
    # The engine and candidates() see the widths they always did.
    assert (v2.frequent.dtype, v2.indptr.dtype, v2.targets.dtype) == (np.uint32, np.uint64, np.uint32)
    assert (v2.vocab_size, v2.best, v2.first_fill_id) == (v1.vocab_size, v1.best, v1.first_fill_id)
    for f in range(v1.vocab_size):
        np.testing.assert_array_equal(v2.candidates([f]), v1.candidates([f]), err_msg=f"source id {f}")
        np.testing.assert_array_equal(v2.translations(f)[0], v1.translations(f)[0])
    for src in sentences:
        np.testing.assert_array_equal(v2.candidates(src), v1.candidates(src))
    assert (v2.probs is None) == (kind == "noprobs")
    if kind == "probs":
        assert v2.probs.tobytes() == v1.probs.tobytes()


def test_engine_decodes_the_same_with_version_2(reference, v2_files, sentences):
    from pyfastdec.backends.native import NativeBackend
    from pyfastdec.decoding import greedy

    sources = sentences[:40]
    old = NativeBackend(MODELS / "en-de", threads=1, shortlist=reference)
    new = NativeBackend(MODELS / "en-de", threads=1, shortlist=v2_files["noprobs"])
    expected = [out for i in range(len(sources)) for out in greedy(old, sources[i:i + 1])[0]]
    for batch in (1, 16):
        got = [out for i in range(0, len(sources), batch) for out in greedy(new, sources[i:i + batch])[0]]
        assert got == expected, f"batch {batch}"
    # The shortlist matters for these sentences: the full vocabulary changes some outputs.
    full = NativeBackend(MODELS / "en-de", threads=1, shortlist=False)
    assert greedy(full, sources)[0] != expected


def test_version_1_is_still_written_on_request(shipped, reference, v1, tmp_path):
    data, h = reference.read_bytes(), header(reference)
    N, T, V = v1.frequent.size, v1.targets.size, v1.vocab_size
    assert (h["version"], h["flags"], h["id_bytes"], h["offset_bytes"], h["reserved"]) == (1, 1, 0, 0, 0)
    assert len(data) == h["file_bytes"] == layout_bytes(v1, 4, 8, True)  # en-de's: 2561664
    # Version 1's fixed widths (u32 ids, u64 offsets), read with plain numpy at the header's offsets.
    assert np.frombuffer(data, "<u4", N, h["frequent"][0]).tolist() == shipped.frequent.tolist()
    assert np.frombuffer(data, "<u8", V + 1, h["index"][0]).tolist() == shipped.indptr.tolist()
    assert np.frombuffer(data, "<u4", T, h["targets"][0]).tolist() == shipped.targets.tolist()
    if header(SHIPPED)["version"] == 1:  # written by export.shortlist before version 2 existed
        assert data == SHIPPED.read_bytes()
    v1.save(tmp_path / "old.bin", version=1)
    assert (tmp_path / "old.bin").read_bytes() == data
    with pytest.raises(ValueError, match=r"^version: 3 cannot be written"):
        v1.save(tmp_path / "new.bin", version=3)


# ---------------------------------------------------------------- bad version 2 files
@pytest.fixture
def small_v2(tmp_path):
    """A small valid version 2 file with probabilities (V = 120, a few targets per id)."""
    rng = np.random.default_rng(0)
    V = 120
    rows = [np.sort(rng.choice(np.arange(5, V), size=int(rng.integers(0, 5)), replace=False)) for _ in range(V)]
    indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])])
    probs = np.concatenate([np.sort(rng.random(r.size))[::-1] for r in rows]).astype(np.float32)
    path = tmp_path / "small.bin"
    Shortlist(V, [1, 2, 3, 9], indptr, np.concatenate(rows), probs, best=4, first_fill_id=5).save(path)
    assert header(path)["version"] == 2
    return path


def reseal(data: bytearray) -> bytes:
    """Recompute both checksums, so the field's own validation must catch the change."""
    struct.pack_into("<I", data, 36, zlib.crc32(bytes(data[128:])))
    struct.pack_into("<I", data, 124, zlib.crc32(bytes(data[:124])))
    return bytes(data)


def load_error(path: Path) -> str:
    with pytest.raises(ValueError) as err:
        Shortlist.load(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message[len(str(path)) + 2:]


@pytest.mark.parametrize("keep", [0, 100, 127, 128, 300, -1])
def test_truncated_version_2_is_refused(small_v2, keep):
    data = small_v2.read_bytes()
    small_v2.write_bytes(data[:keep] if keep >= 0 else data[:-1])
    assert load_error(small_v2).startswith("header: file is truncated" if keep < 128 and keep >= 0 else
                                           "file_bytes: header says")


def test_wrong_crcs_are_refused(small_v2):
    data = bytearray(small_v2.read_bytes())
    data[-70] ^= 1
    small_v2.write_bytes(bytes(data))
    assert load_error(small_v2).startswith("payload_crc32: checksum mismatch")
    data[-70] ^= 1
    data[112] ^= 1                              # id_bytes
    small_v2.write_bytes(bytes(data))
    assert load_error(small_v2).startswith("header_crc32: checksum mismatch")


def test_every_single_byte_corruption_is_detected(small_v2):
    data = small_v2.read_bytes()
    for i in range(len(data)):
        corrupt = bytearray(data)
        corrupt[i] ^= 0xFF
        small_v2.write_bytes(bytes(corrupt))
        with pytest.raises(ValueError):
            Shortlist.load(small_v2)


@pytest.mark.parametrize("section", ["targets", "frequent"])
def test_id_not_below_vocab_size_is_refused(small_v2, section):
    data = bytearray(small_v2.read_bytes())
    offset, nbytes = header(small_v2)[section]
    last = offset + nbytes - 2                 # a u16 that holds 120 although V = 120
    struct.pack_into("<H", data, last, 120)
    small_v2.write_bytes(reseal(data))
    message = load_error(small_v2)
    assert message.startswith(f"{section}: id 120") and "is not < vocab_size 120" in message


@pytest.mark.parametrize("at, value, expected", [
    (112, 3, "id_bytes: 3, expected 2 or 4"),
    (112, 0, "id_bytes: 0, expected 2 or 4"),
    (116, 2, "offset_bytes: 2, expected 4 or 8"),
    (120, 7, "reserved: header bytes 120..123 must be zero"),
    (8, 3, "version: 3 is not supported (this reader knows versions 1, 2)"),
    (8, 0, "version: 0 is not supported"),
])
def test_bad_header_field_is_refused(small_v2, at, value, expected):
    data = bytearray(small_v2.read_bytes())
    struct.pack_into("<I", data, at, value)
    small_v2.write_bytes(reseal(data))
    assert load_error(small_v2).startswith(expected)


def test_width_that_cannot_hold_the_vocabulary_is_refused(small_v2):
    data = bytearray(small_v2.read_bytes())
    struct.pack_into("<I", data, 16, 70000)     # vocab_size > 65536 with id_bytes 2
    small_v2.write_bytes(reseal(data))
    assert load_error(small_v2).startswith("id_bytes: 2 cannot hold the ids of vocab_size 70000")


def test_wide_vocabulary_is_written_with_u32_ids(tmp_path):
    V = 70000
    indptr = np.concatenate([[0], np.full(V, 2)])     # source id 0 owns both targets
    sl = Shortlist(V, [1, 69999], indptr, [69998, 65536], best=2, first_fill_id=5)
    sl.save(tmp_path / "wide.bin")
    h = header(tmp_path / "wide.bin")
    assert (h["version"], h["id_bytes"], h["offset_bytes"]) == (2, 4, 4)
    back = Shortlist.load(tmp_path / "wide.bin")
    assert back.translations(0)[0].tolist() == [69998, 65536]
    assert back.candidates([0])[:4].tolist() == [1, 5, 6, 7] and 65536 in back.candidates([0])


# ---------------------------------------------------------------- command lines
def test_rewrite_command(reference, v1, tmp_path, capsys):
    out = tmp_path / "s.bin"
    assert shortlist_main(["rewrite", str(reference), str(out), "--drop-probs"]) == 0
    sizes = f"{reference.stat().st_size} -> {layout_bytes(v1, 2, 4, False)} bytes"  # en-de's: 2561664 -> 656704
    assert sizes in capsys.readouterr().err
    assert Shortlist.load(out).probs is None
    assert shortlist_main(["rewrite", str(out), str(out), "--version", "1"]) == 0  # in place
    h = header(out)
    assert (h["version"], h["flags"], h["file_bytes"]) == (1, 0, layout_bytes(v1, 4, 8, False))  # 1313152
    assert shortlist_main(["rewrite", str(tmp_path / "missing.bin"), str(out)]) == 1
    assert "missing.bin" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.bin"]  # no temporary files left


def test_builder_writes_version_2_without_probabilities_by_default(tmp_path):
    import sentencepiece as spm

    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(30)]
    src = [" ".join(rng.choice(words, 4)) for _ in range(200)]
    tgt = [s.upper() for s in src]
    (tmp_path / "src.txt").write_text("\n".join(src) + "\n")
    (tmp_path / "tgt.txt").write_text("\n".join(tgt) + "\n")
    (tmp_path / "both.txt").write_text("\n".join(src + tgt) + "\n")
    spm.SentencePieceTrainer.train(input=str(tmp_path / "both.txt"), model_prefix=str(tmp_path / "spm"),
                                   vocab_size=70, model_type="word", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                   hard_vocab_limit=False, minloglevel=2)
    common = ["--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt"),
              "--spm", str(tmp_path / "spm.model"), "--best", "3"]
    assert shortlist_main(common + ["--out", str(tmp_path / "a.bin")]) == 0
    assert shortlist_main(common + ["--out", str(tmp_path / "b.bin"), "--probs"]) == 0
    assert shortlist_main(common + ["--out", str(tmp_path / "c.bin"), "--no-probs", "--version", "1"]) == 0
    a, b, c = (Shortlist.load(tmp_path / n) for n in ("a.bin", "b.bin", "c.bin"))
    assert [header(tmp_path / n)["version"] for n in ("a.bin", "b.bin", "c.bin")] == [2, 2, 1]
    assert a.probs is None and b.probs is not None and c.probs is None
    for sl in (b, c):
        np.testing.assert_array_equal(a.targets, sl.targets)
        np.testing.assert_array_equal(a.indptr, sl.indptr)


# ---------------------------------------------------------------- Marian export
def marian_ranking(lines: list[str], ids: dict[str, int], best: int) -> dict[int, list[int]]:
    """What Marian keeps per source id, in its ranking: LexicalShortlistGenerator::load reads
    "trg src prob" into a float, prune sorts (prob, target id) descending and keeps up to
    `best` entries with prob > 0 (its default threshold)."""
    table: dict[int, dict[int, np.float32]] = {}
    for line in lines:
        trg, src, prob = line.split()
        table.setdefault(ids[src], {})[ids[trg]] = np.float32(prob)
    ranking = {}
    for f, row in table.items():
        ranked = sorted(((p, t) for t, p in row.items()), reverse=True)
        ranking[f] = [t for p, t in ranked if p > 0][:best]
    return ranking


@pytest.fixture(scope="module")
def pieces():
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(MODELS / "en-de" / "spm.model"))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


@pytest.mark.parametrize("kind", ["noprobs", "probs"])
def test_marian_ranks_every_row_in_our_order(v2_files, pieces, kind):
    from pyfastdec.convert.marian_npz_export import lexical_shortlist_lines, shortlist_best

    sl = Shortlist.load(v2_files[kind])
    eos = 3
    lines = lexical_shortlist_lines(sl, pieces, eos)
    ids = {p: i for i, p in enumerate(pieces)}
    best = shortlist_best(sl, eos)
    for keep in (best, 7):  # Marian's BEST as exported, and a shorter one: a prefix of our rows
        marian = marian_ranking(lines, ids, keep)
        for f in range(sl.vocab_size):
            ours = sl.translations(f)[0].tolist()
            if f == eos:
                assert marian[f][:len(ours[:keep])] == ours[:keep]
                if keep == best:
                    assert set(marian[f]) == set(ours) | set(sl.frequent.tolist())
            else:
                assert marian.get(f, []) == ours[:keep], f"source id {f} ({kind})"


def test_marian_export_of_a_probability_less_shortlist(tmp_path):
    """The whole export path (a version 2 file without probabilities in a model directory)."""
    torch = pytest.importorskip("torch")
    import sentencepiece

    from export.modeling import LayerSpec, Seq2Seq
    from export.tiny import tiny_config, tiny_spm
    from export.writer import write_model_dir
    from pyfastdec.convert.marian_npz_export import to_marian_npz

    spm_path = tiny_spm(tmp_path / "spm.model")
    cfg = tiny_config(decoder_self="ssru")
    cfg.encoder_layers = [LayerSpec(4, 24)]
    cfg.decoder_layers = [LayerSpec(4, 32)]
    torch.manual_seed(0)
    model_dir = write_model_dir(Seq2Seq(cfg).eval(), spm_path, tmp_path / "fastdec")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_path))
    V = sp.get_piece_size()
    rng = np.random.default_rng(2)
    # Rows in our order (not sorted by id), so a by-id or by-text order would show.
    rows = [rng.choice(np.arange(5, V), size=int(rng.integers(0, 12)), replace=False) for _ in range(V)]
    indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])])
    Shortlist(V, [1, 2, 3, 8], indptr, np.concatenate(rows), best=11, first_fill_id=5).save(
        Path(model_dir) / "shortlist.bin")
    out = to_marian_npz(model_dir, tmp_path / "marian")
    lines = (out / "lex.s2t").read_text(encoding="utf-8").splitlines(keepends=True)
    name, first, best = (out / "shortlist.args").read_text().split()
    assert (name, first) == ("lex.s2t", "0")
    pieces = [sp.id_to_piece(i) for i in range(V)]
    marian = marian_ranking(lines, {p: i for i, p in enumerate(pieces)}, int(best))
    for f in range(V):
        if f != 3:
            assert marian.get(f, []) == rows[f].tolist(), f"source id {f}"
    assert set(marian[3]) == set(rows[3].tolist()) | {1, 2, 3, 8}
    shutil.rmtree(out)
