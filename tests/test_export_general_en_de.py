"""export.general_en_de: the general En-De set built from a fake download folder.

Every source file of export/general_sources.py is written small into tmp_path in the
<owner>/<name>/<path> layout (Multi30k in its own folder); each test changes what it
needs and checks the written files and manifest against pairs spelled out by hand.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from export import general_en_de as g
from export.data import DataError, load_pairs
from export.general_sources import MULTI30K, TEST_SETS, TRAIN_SOURCES, VAL_SOURCE, WRITTEN_TEST_SETS, Files
from export.recipes import get_recipe

REPO = Path(__file__).resolve().parents[1]

BY_NAME = {s.name: s for s in (*TRAIN_SOURCES, VAL_SOURCE, *TEST_SETS)}


def aligned(name, pairs_per_file):
    """{path: bytes} for an aligned source: one list of pairs per (en, de) file couple."""
    src = BY_NAME[name]
    out = {}
    for (en_path, de_path), pairs in zip(zip(src.files[::2], src.files[1::2]), pairs_per_file):
        out[en_path] = "".join(f"{en}\n" for en, _ in pairs).encode()
        out[de_path] = "".join(f"{de}\n" for _, de in pairs).encode()
    return out


def one_each(name, prefix):
    """Every file couple of a source gets one distinct pair."""
    n = len(BY_NAME[name].files) // 2
    return aligned(name, [[(f"{prefix} english {i}.", f"{prefix} deutsch {i}.")] for i in range(n)])


def mlqe_tar(split, pairs):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for suffix, side in (("src", 0), ("pe", 1)):
            data = "".join(p[side] + "\n" for p in pairs).encode()
            info = tarfile.TarInfo(f"en-de-{split}/{split}.{suffix}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def bcontrast_json(turns):
    return json.dumps({"dlg-1": [{"utteranceID": i, "speaker": s, "source": a, "target": b}
                                 for i, (s, a, b) in enumerate(turns)]}).encode()


def default_files():
    """{source name: {path: bytes}}: a valid small set, no overlaps between sources."""
    files = {name: one_each(name, name) for name, s in BY_NAME.items() if s.kind == "aligned"}
    files["newstest2018"] = aligned("newstest2018", [[(f"Val sentence {i}.", f"Valsatz {i}.") for i in range(4)]])
    files["tatoeba-anki"] = {"data/deu.txt": b"1\t2\r\nGo.\tGeh.\r\nHi.\tHallo!\r\n"}
    files["bcontrast"] = {"train.json": bcontrast_json([("agent", "How can I help?", "Wie kann ich helfen?")]),
                          "dev.json": bcontrast_json([])}
    files["mlqe-pe"] = {f"data/post-editing/{s}/en-de-{s}.tar.gz": mlqe_tar(s, [(f"Wiki {s} .", f"Wiki {s} .")])
                        for s in ("train", "dev", "test")}
    return files


def write_tree(root, files):
    for name, blobs in files.items():
        src = BY_NAME[name]
        for path, data in blobs.items():
            where = (root / "multi30k" / path.rsplit("/", 1)[1] if src.repo == MULTI30K
                     else root / "dl" / src.repo / path)
            where.parent.mkdir(parents=True, exist_ok=True)
            if where.suffix == ".gz" and src.kind == "aligned":
                data = gzip.compress(data, mtime=0)  # the same bytes on every write: the rerun test fingerprints them
            where.write_bytes(data)
    return Files(folder=root / "dl", multi30k=root / "multi30k")


def build(tmp_path, files, **kw):
    manifest = g.build(write_tree(tmp_path, files), tmp_path / "out", **kw)
    return manifest, {s["name"]: s for s in manifest["sources"]}


def train_source_stats(sources):
    return [sources[s.name] for s in TRAIN_SOURCES]


def train(tmp_path):
    return load_pairs("train", "en", "de", tmp_path / "out")


def test_bcontrast_customer_turns_become_en_de(tmp_path):
    files = default_files()
    files["bcontrast"]["train.json"] = bcontrast_json([
        ("agent", "Which size would you like?", "Welche Größe möchten Sie?"),
        ("customer", "Eine große Pizza, bitte.", "A large pizza, please."),
    ])
    build(tmp_path, files)
    pairs = train(tmp_path)
    assert ("Which size would you like?", "Welche Größe möchten Sie?") in pairs
    assert ("A large pizza, please.", "Eine große Pizza, bitte.") in pairs
    assert ("Eine große Pizza, bitte.", "A large pizza, please.") not in pairs


def test_pairs_sharing_a_sentence_with_any_test_set_are_removed(tmp_path):
    files = default_files()
    files["newstest2019"] = aligned("newstest2019", [[("The talks failed on Monday.", "Die Gespräche scheiterten.")]])
    files["flores200_devtest"] = aligned("flores200_devtest", [[("A flores line.", "Eine Flores-Zeile.")]])
    files["multi30k-test"] = aligned("multi30k-test", [[("val en.", "val de.")], [("t16 en.", "t16 de.")],
                                                       [("A dog runs.", "Ein Hund rennt.")]])
    files["stsb-multi-mt"] = aligned("stsb-multi-mt", [
        [("the talks failed on monday", "Etwas anderes."),      # newstest2019 en, case and punctuation aside
         ("Other words.", "Eine Flores-Zeile."),                # FLORES devtest de
         ("A dog runs!", "Der Hund läuft.")],                   # Multi30k test_2017 en
        [("A clean pair.", "Ein sauberes Paar.")]])
    _, sources = build(tmp_path, files)
    assert [p for p in train(tmp_path) if p[0] in {"A clean pair.", "A dog runs!", "Other words."}] == [
        ("A clean pair.", "Ein sauberes Paar.")]
    assert sources["stsb-multi-mt"]["removed_test_overlap"] == 3
    assert sources["stsb-multi-mt"]["kept"] == 1
    # the test sets export.train scores are written as published
    assert load_pairs("newstest2019", "en", "de", tmp_path / "out") == [
        ("The talks failed on Monday.", "Die Gespräche scheiterten.")]


def test_filters_dedup_and_manifest_counts(tmp_path):
    long = "word " * 100
    files = default_files()
    files["stsb-multi-mt"] = aligned("stsb-multi-mt", [
        [("Fine.", "Gut."),
         ("  Spaced\tout\u2028text. ", "Weit  gesetzter Text."),   # whitespace: normalised, kept
         ("Cafe\u0301 open.", "Cafe\u0301 offen."),                  # decomposed e + accent -> NFC
         (long, long),                                               # overlong
         ("Yes.", "Das ist eine viel zu lange Antwort auf so wenig."),  # length ratio
         (" ", "Leer.")],                                           # empty after normalising
        [("FINE!", "gut"), ("Fine.", "Gut.")]])                     # repeats of the first pair
    files["tatoeba-anki"] = {"data/deu.txt": b"1\t2\nGo.\tGeh.\nfine\tGut!\n"}  # repeat across sources
    _, sources = build(tmp_path, files)
    stsb = sources["stsb-multi-mt"]
    assert stsb["read"] == 8
    assert stsb["removed_filter"] == {"empty": 1, "overlong": 1, "length_ratio": 1}
    # tatoeba comes before stsb, so its "fine" wins over all three of stsb's spellings
    assert stsb["removed_dedup"] == 3 and stsb["kept"] == 2
    pairs = train(tmp_path)
    assert ("Spaced out text.", "Weit gesetzter Text.") in pairs
    assert ("Caf\u00e9 open.", "Caf\u00e9 offen.") in pairs
    assert ("fine", "Gut!") in pairs and ("Fine.", "Gut.") not in pairs
    assert sum(s["kept"] for s in train_source_stats(sources)) + sources["newstest2018"]["kept_train"] == len(pairs)


def test_tokenized_sources_are_detokenized(tmp_path):
    files = default_files()
    files["opennmt-wmt"] = aligned("opennmt-wmt", [
        [("It &apos;s &quot; fine &quot; , he said .", "Es ist &quot; gut &quot; , sagte er .")],
        [("Two , three .", "Zwei , drei .")]])
    build(tmp_path, files)
    pairs = train(tmp_path)
    assert ("It's \"fine\", he said.", "Es ist \"gut\", sagte er.") in pairs
    assert ("Two, three.", "Zwei, drei.") in pairs


def test_val_is_held_out_of_train(tmp_path):
    files = default_files()
    files["newstest2018"] = aligned("newstest2018", [[("Val one.", "Val eins."), ("Val two.", "Val zwei."),
                                                      ("Rest one.", "Rest eins.")]])
    files["tatoeba-anki"] = {"data/deu.txt": b"Val two.\tAnders.\nKept.\tBehalten.\n"}
    _, sources = build(tmp_path, files, val_size=2)
    assert load_pairs("val", "en", "de", tmp_path / "out") == [("Val one.", "Val eins."), ("Val two.", "Val zwei.")]
    pairs = train(tmp_path)
    assert ("Rest one.", "Rest eins.") in pairs and ("Kept.", "Behalten.") in pairs
    assert not any(p[0].startswith("Val ") for p in pairs)
    assert sources["tatoeba-anki"]["removed_test_overlap"] == 1
    assert (sources["newstest2018"]["kept_val"], sources["newstest2018"]["kept_train"]) == (2, 1)


def test_missing_source_file_is_named(tmp_path, capsys):
    files = default_files()
    del files["stsb-multi-mt"]["data-raw/stsb-de-2.txt"]
    with pytest.raises(DataError, match=r"stsb-multi-mt: PhilipMay/stsb-multi-mt:data-raw/stsb-de-2.txt not found"):
        build(tmp_path, files)
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="stsb-de-2.txt not found"):
        g.main(["--from-dir", str(tmp_path / "dl"), "--multi30k", str(tmp_path / "multi30k"),
                "--out", str(tmp_path / "out")])


def test_rerun_is_idempotent_and_a_changed_input_rebuilds(tmp_path):
    files = default_files()
    first, _ = build(tmp_path, files)
    out = tmp_path / "out"
    stamps = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()}
    again, _ = build(tmp_path, files)
    assert again == first
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()} == stamps
    files["tatoeba-anki"] = {"data/deu.txt": b"New.\tNeu.\n"}
    changed, _ = build(tmp_path, files)
    assert changed["fingerprint"] != first["fingerprint"]
    assert ("New.", "Neu.") in train(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(first["files"] + ["manifest.json"])


def test_reads_git_mirrors(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").mkdir()
    (work / "data" / "deu.txt").write_bytes(b"Hi.\tHallo!\n")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    mirrors = tmp_path / "mirrors"
    (mirrors / "DarrenCarvalho+Language-Translation").mkdir(parents=True)
    (work / ".git").rename(mirrors / "DarrenCarvalho+Language-Translation" / "repo")
    files = Files(mirrors=mirrors)
    assert files.read(BY_NAME["tatoeba-anki"], "data/deu.txt") == b"Hi.\tHallo!\n"
    with pytest.raises(DataError, match=r"tatoeba-anki: DarrenCarvalho/Language-Translation:data/other.txt not found"):
        files.read(BY_NAME["tatoeba-anki"], "data/other.txt")
    with pytest.raises(DataError, match=r"no mirror of Unbabel/BConTrasT .*fetch github:Unbabel/BConTrasT"):
        files.read(BY_NAME["bcontrast"], "train.json")


def test_general_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTDEC_GENERAL_EN_DE", str(tmp_path / "g"))
    assert g.general_dir() == tmp_path / "g"
    monkeypatch.delenv("FASTDEC_GENERAL_EN_DE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert g.general_dir() == tmp_path / "cache" / "pyfastdec" / "general-en-de"


def test_general_recipes_read_the_built_set_named_by_the_environment(tmp_path):
    # recipes are read at import, as for uk-gec: the variable must be set before Python starts
    code = ("from export.recipes import get_recipe; "
            "print(get_recipe('teacher-en-de-general')['corpus']); print(get_recipe('student-en-de-general')['corpus'])")
    env = dict(os.environ, FASTDEC_GENERAL_EN_DE=str(tmp_path / "set"), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(tmp_path / "set")] * 2


def test_general_teacher_comes_back_from_a_device_call():
    """A device call returns 64 MiB in files of 16 MiB: the script splits the float32
    averaged checkpoint into 15 MiB parts, and 6 files are left for them."""
    from export.train import build_model

    recipe = get_recipe("teacher-en-de-general")
    params = sum(p.numel() for p in build_model(recipe, recipe["vocab_size"]).parameters())
    assert params * 4 <= 3 * 15 * 2**20
    assert set(recipe["test_sets"]) <= set(WRITTEN_TEST_SETS)


def test_device_script_names_missing_data(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), DATA=str(tmp_path / "none"))
    done = subprocess.run(["bash", str(REPO / "tools" / "device" / "train_general_en_de.sh")], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert f"{tmp_path / 'none'}/train.en.gz missing" in done.stdout
