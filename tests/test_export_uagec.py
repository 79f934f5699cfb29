"""export.uagec: UA-GEC sentence pairs, strict validation naming file:line, fixed splits.

A tiny corpus in the ua-gec package layout is built per test; one test reads a real
document from the installed package (its data is local, no network) when it is present.
"""
from __future__ import annotations

import gzip

import pytest

from export.data import DataError, corpus_path, load_pairs
from export.recipes import get_recipe
from export.uagec import Doc, corpus_dir, document_pairs, ensure_corpus, extract, unchanged_share, write_corpus

HEADER = "id,author_id,is_native,region,gender,occupation,submission_type,source_language,annotator_id,partition,is_sensitive\n"


def make_corpus(root, docs):
    """docs: {doc_id: (partition, [source lines], {annotator: [target lines]})}, written as
    the package lays it out; rows are written in reverse to show that doc_id orders them."""
    rows = []
    for doc_id, (part, src, targets) in docs.items():
        rows.append(f"{doc_id},x,1,r,g,o,text_donation,,{' '.join(map(str, targets))},{part},0\n")
        base = root / "gec-only" / part
        (base / "source-sentences").mkdir(parents=True, exist_ok=True)
        (base / "target-sentences").mkdir(parents=True, exist_ok=True)
        (base / "source-sentences" / f"{doc_id}.src.txt").write_text("\n".join(src) + "\n", encoding="utf-8")
        for a, tgt in targets.items():
            (base / "target-sentences" / f"{doc_id}.a{a}.txt").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    (root / "metadata.csv").write_text(HEADER + "".join(reversed(rows)), encoding="utf-8")
    return root


DOCS = {
    "0001": ("train", ["а б", "в г"], {1: ["а, б", "в г"], 2: ["А б", "в г."]}),
    "0002": ("train", ["д е"], {1: ["д е"]}),
    "0003": ("train", ["є ж", "з и"], {1: ["є ж", "з, и"]}),
    "0004": ("train", ["і ї"], {2: ["і й ї"], 3: ["і ї"]}),
    "0005": ("test", ["к л", "м н"], {1: ["к, л", "м н"], 2: ["к л", "м н!"]}),
}


def test_splits_pairs_by_document_order_and_annotator(tmp_path):
    out = extract(make_corpus(tmp_path, DOCS), val_min_pairs=2)
    # val: whole documents from the end of train until >= 2 pairs (0004 has 1, 0003 adds 2),
    # first annotator only; 0004's annotator 3 is not leaked into train.
    assert out["val"] == [("є ж", "є ж"), ("з и", "з, и"), ("і ї", "і й ї")]
    assert out["train"] == [("а б", "а, б"), ("в г", "в г"), ("а б", "А б"), ("в г", "в г."), ("д е", "д е")]
    assert out["test"] == [("к л", "к, л"), ("м н", "м н")]
    assert out["test2"] == ["к л", "м н!"]


def test_val_needs_enough_train_documents(tmp_path):
    with pytest.raises(DataError, match="too few to hold out 100"):
        extract(make_corpus(tmp_path, DOCS), val_min_pairs=100)


def test_unchanged_share():
    assert unchanged_share([("a", "a"), ("b", "c"), ("d", "d"), ("e", "f")]) == 0.5


def _one_doc(tmp_path, src_bytes: bytes, tgt_bytes: bytes):
    base = tmp_path / "gec-only" / "train"
    (base / "source-sentences").mkdir(parents=True)
    (base / "target-sentences").mkdir(parents=True)
    (base / "source-sentences" / "0007.src.txt").write_bytes(src_bytes)
    (base / "target-sentences" / "0007.a1.txt").write_bytes(tgt_bytes)
    return lambda: document_pairs(tmp_path, "gec-only", Doc("0007", "train", (1,)), 1)


@pytest.mark.parametrize("src, tgt, message", [
    ("один\nдва\nтри\n", "один\nдва\n", r"0007\.a1\.txt:3: line missing"),
    ("один\nдва\n", "один\nдва\nтри\n", r"0007\.src\.txt:3: line missing"),
    ("один\n \nтри\n", "один\nдва\nтри\n", r"0007\.src\.txt:2: empty line"),
    ("один\nдва\n", "один\nд\rва\n", r"0007\.a1\.txt:2: embedded line break U\+000D"),
    ("один\nдва\u2028два\n", "один\nдва\n", r"0007\.src\.txt:2: embedded line break U\+2028"),
])
def test_defects_name_file_and_line(tmp_path, src, tgt, message):
    read = _one_doc(tmp_path, src.encode(), tgt.encode())
    with pytest.raises(DataError, match=message):
        read()


def test_invalid_utf8_and_missing_file_are_named(tmp_path):
    read = _one_doc(tmp_path, "один\n".encode() + b"\xff\n", "один\nдва\n".encode())
    with pytest.raises(DataError, match=r"0007\.src\.txt:2: invalid UTF-8"):
        read()
    (tmp_path / "gec-only" / "train" / "source-sentences" / "0007.src.txt").write_text("один\n", encoding="utf-8")
    (tmp_path / "gec-only" / "train" / "target-sentences" / "0007.a1.txt").unlink()
    with pytest.raises(DataError, match=r"0007\.a1\.txt: file not found"):
        document_pairs(tmp_path, "gec-only", Doc("0007", "train", (1,)), 1)


def test_written_corpus_is_reproducible_and_read_by_training_loader(tmp_path):
    splits = extract(make_corpus(tmp_path / "pkg", DOCS), val_min_pairs=2)
    stats = write_corpus(splits, tmp_path / "a", "gec-only")
    write_corpus(extract(tmp_path / "pkg", val_min_pairs=2), tmp_path / "b", "gec-only")
    for name in ["train.src.gz", "train.tgt.gz", "val.src.gz", "val.tgt.gz", "test.src.gz", "test.tgt.gz",
                 "test.tgt2.gz"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert stats["train"] == {"pairs": 5, "unchanged": 0.4}
    assert stats["val"]["pairs"] == 3 and stats["test"]["pairs"] == 2
    # An absolute corpus directory goes through export.data unchanged, as the recipe relies on.
    corpus = str(tmp_path / "a")
    assert corpus_path("val", "tgt", corpus) == tmp_path / "a" / "val.tgt.gz"
    assert load_pairs("val", "src", "tgt", corpus) == splits["val"]
    assert gzip.decompress((tmp_path / "a" / "test.tgt2.gz").read_bytes()).decode() == "к л\nм н!\n"


def test_recipe_reads_the_extracted_corpus(monkeypatch, tmp_path):
    r = get_recipe("uk-gec")
    assert corpus_path("train", r["src"], r["corpus"]) == corpus_dir() / "train.src.gz"
    assert r["model"]["dec_layers"] < r["model"]["enc_layers"] and r["test_sets"] == ["test"]
    monkeypatch.setenv("FASTDEC_UAGEC", str(tmp_path))
    assert corpus_dir() == tmp_path


def test_ensure_corpus_extracts_once_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("FASTDEC_UAGEC", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert corpus_dir().parent == tmp_path / "cache" / "pyfastdec" and corpus_dir().name.startswith("ua-gec-")
    pkg = make_corpus(tmp_path / "pkg", DOCS)
    out = ensure_corpus(root=pkg, val_min_pairs=2)
    assert out == corpus_dir() and load_pairs("test", "src", "tgt", str(out)) == [("к л", "к, л"), ("м н", "м н")]
    (pkg / "metadata.csv").unlink()  # a complete corpus is not extracted again
    assert ensure_corpus(root=pkg, val_min_pairs=2) == out
    (out / "stats.json").write_text('{"layer": "gec-fluency"}')
    with pytest.raises(DataError, match=r"stats.json: layer 'gec-fluency', expected 'gec-only'"):
        ensure_corpus(root=pkg)


def test_real_document_from_the_installed_package():
    pytest.importorskip("ua_gec")
    from export.uagec import package_data_root

    pairs = document_pairs(package_data_root(), "gec-only", Doc("0000", "train", (1, 2)), 1)
    assert pairs[2] == ("Сьогодні розповім про те як і навіщо мене занесло у Instagram.",
                        "Сьогодні розповім про те, як і навіщо мене занесло в Instagram.")
