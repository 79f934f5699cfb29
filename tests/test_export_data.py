"""export.data refuses defective parallel data, naming the file and 1-based line."""
import gzip

import pytest

from export.data import REPO_ROOT, DataError, corpus_path, load_pairs, read_lines, read_parallel


def write_gz(path, data: bytes):
    with gzip.open(path, "wb") as f:
        f.write(data)
    return path


def test_reads_gzip_and_plain(tmp_path):
    g = write_gz(tmp_path / "a.gz", "Grüße\nzwei\n".encode())
    p = tmp_path / "b.txt"
    p.write_text("one\ntwo\n", encoding="utf-8")
    assert read_lines(g) == ["Grüße", "zwei"]
    assert read_parallel(g, p) == [("Grüße", "one"), ("zwei", "two")]


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match=r"nope\.en\.gz: file not found"):
        read_lines(tmp_path / "nope.en.gz")


def test_empty_line_names_file_and_line(tmp_path):
    f = write_gz(tmp_path / "x.de.gz", b"eins\nzwei\n  \nvier\n")
    with pytest.raises(DataError, match=r"x\.de\.gz:3: empty line"):
        read_lines(f)


def test_invalid_utf8_names_file_and_line(tmp_path):
    f = write_gz(tmp_path / "x.en.gz", b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(DataError, match=r"x\.en\.gz:3: invalid UTF-8"):
        read_lines(f)


def test_line_count_mismatch_names_shorter_file_and_line(tmp_path):
    a = write_gz(tmp_path / "s.en.gz", b"1\n2\n3\n")
    b = write_gz(tmp_path / "s.de.gz", b"1\n2\n")
    with pytest.raises(DataError, match=r"s\.de\.gz:3: line missing"):
        read_parallel(a, b)


def test_corrupt_gzip_is_named(tmp_path):
    f = tmp_path / "c.en.gz"
    whole = gzip.compress("".join(f"line {i}\n" for i in range(5000)).encode())
    f.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"c\.en\.gz: cannot read"):
        read_lines(f)


def test_shipped_evaluation_sets_are_aligned_and_found_by_default(monkeypatch):
    monkeypatch.delenv("FASTDEC_DATA", raising=False)
    for split, n in (("val", 1014), ("test_2016_flickr", 1000)):
        assert corpus_path(split, "en").parent == REPO_ROOT / "data" / "multi30k"
        pairs = load_pairs(split, "en", "de")
        assert len(pairs) == n and all(s and t for s, t in pairs)
    # Training corpora are not shipped: they come from the team's shared folder.
    assert corpus_path("train", "en") == REPO_ROOT.parent / "shared" / "data" / "multi30k" / "train.en.gz"


def test_data_root_from_env(tmp_path, monkeypatch):
    (tmp_path / "multi30k").mkdir()
    write_gz(tmp_path / "multi30k" / "val.en.gz", b"hello\n")
    write_gz(tmp_path / "multi30k" / "val.de.gz", b"hallo\n")
    monkeypatch.setenv("FASTDEC_DATA", str(tmp_path))
    assert load_pairs("val", "en", "de") == [("hello", "hallo")]
