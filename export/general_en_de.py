"""Build the general-domain En->De training set of issue 32 from public sources.

    python -m export.general_en_de --mirrors /work/.mirror --out DIR     # git mirrors (fetch)
    python -m export.general_en_de --from-dir DOWNLOADS --out DIR         # DOWNLOADS/<owner>/<name>/<path>

The sources, their files and licences are in export/general_sources.py; Multi30k train
and its test sets come from the team's data folder (--multi30k, default export/data.py's).
DIR receives train.{en,de}.gz, val.{en,de}.gz, the test sets export.train scores
(<name>.{en,de}.gz, as published), and manifest.json: per source the pairs read, kept,
and removed by each filter, by test-set overlap and by deduplication, with its licence.
DIR defaults to general_dir(), which the teacher-en-de-general recipe reads.

Steps, per pair: NFC, whitespace runs to one space (line and paragraph separators
included), Moses detokenization of tokenized sources (sacremoses); drop pairs with an
empty side, a side over MAX_CHARS characters, or a character-length ratio over MAX_RATIO;
drop pairs whose English or German side matches a sentence of any test set or of val
(matched case- and punctuation-insensitively, both languages pooled: a name or number
line matching across languages is dropped too, erring towards a clean test); drop
repeats of an earlier pair under the same matching (earlier sources win, in
TRAIN_SOURCES order). Val is the first VAL_SIZE cleaned pairs of newstest2018; the rest of
newstest2018 joins train after the other sources.

Rerunning with the same inputs finds manifest.json's fingerprint unchanged and writes
nothing; files are written under temporary names and renamed, the manifest last, so an
interrupted run leaves no half-written set that looks finished. gzip headers carry no
timestamp, so the bytes are reproducible.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import unicodedata
from pathlib import Path

from .data import DataError, cache_root, corpus_path, write_lines
from .general_sources import (TEST_SETS, TRAIN_SOURCES, VAL_SOURCE, WRITTEN_TEST_SETS, Files, Source,
                              read_source)

BUILDER_VERSION = 1
MAX_CHARS = 400    # a side longer than this is a paragraph or a misjoined line, not a sentence
MAX_RATIO = 2.5    # (longer + 5) / (shorter + 5) in characters; +5 spares short pairs ("Hi." / "Hallo!")
VAL_SIZE = 1000    # a greedy BLEU pass over val runs after every epoch, so val stays small
_SPACE = re.compile(r"\s+")


def general_dir() -> Path:
    """Where the built set lives: $FASTDEC_GENERAL_EN_DE, else
    $XDG_CACHE_HOME (default ~/.cache)/pyfastdec/general-en-de."""
    env = os.environ.get("FASTDEC_GENERAL_EN_DE")
    if env:
        return Path(env)
    return cache_root() / "general-en-de"


def normalise(text: str) -> str:
    """NFC; every whitespace run (tabs, U+2028, NBSP ...) one space; no edge spaces."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def match_key(text: str) -> str:
    """What two sentences must share to count as the same: letters and digits, casefolded."""
    return "".join(ch for ch in unicodedata.normalize("NFC", text).casefold() if ch.isalnum())


def reject_reason(en: str, de: str) -> str | None:
    """Why a normalised pair is dropped, or None to keep it."""
    if not en or not de:
        return "empty"
    if len(en) > MAX_CHARS or len(de) > MAX_CHARS:
        return "overlong"
    longer, shorter = max(len(en), len(de)), min(len(en), len(de))
    if (longer + 5) / (shorter + 5) > MAX_RATIO:
        return "length_ratio"
    return None


class Detokenizer:
    """Moses detokenization (sacremoses), loaded only when a tokenized source is read."""

    def __init__(self):
        try:
            from sacremoses import MosesDetokenizer
        except ImportError:
            raise DataError("sacremoses is needed to detokenize the tokenized sources "
                            "(pip install sacremoses, or the `export` extra)") from None
        self.en, self.de = MosesDetokenizer("en"), MosesDetokenizer("de")

    def __call__(self, en: str, de: str) -> tuple[str, str]:
        return self.en.detokenize(en.split()), self.de.detokenize(de.split())


def clean_source(source: Source, pairs, held_out: set[str], seen: set[tuple[str, str]],
                 detok: Detokenizer | None) -> tuple[list[tuple[str, str]], dict]:
    """Normalise, filter, drop test overlaps and repeats (updating `seen`); the kept pairs
    and the counts for the manifest."""
    stats = {"read": len(pairs), "removed_filter": {"empty": 0, "overlong": 0, "length_ratio": 0},
             "removed_test_overlap": 0, "removed_dedup": 0}
    kept = []
    for en, de in pairs:
        if source.tokenized:
            en, de = detok(en, de)
        en, de = normalise(en), normalise(de)
        reason = reject_reason(en, de)
        if reason:
            stats["removed_filter"][reason] += 1
            continue
        ken, kde = match_key(en), match_key(de)
        if ken in held_out or kde in held_out:
            stats["removed_test_overlap"] += 1
            continue
        if (ken, kde) in seen:
            stats["removed_dedup"] += 1
            continue
        seen.add((ken, kde))
        kept.append((en, de))
    stats["kept"] = len(kept)
    return kept, stats


def test_keys(pairs) -> set[str]:
    keys = {match_key(s) for pair in pairs for s in pair}
    keys.discard("")  # a test line of punctuation alone would match every such line
    return keys


def _entry(source: Source, files: Files) -> dict:
    return {"name": source.name, "repo": source.repo, "files": list(source.files), "licence": source.licence,
            "revision": files.revision(source)}


def build(files: Files, out: Path, val_size: int = VAL_SIZE, force: bool = False) -> dict:
    """Read every source, clean, write `out`; returns the manifest. Raises DataError for a
    missing or malformed source file before anything is written."""
    fingerprint = hashlib.sha256(json.dumps([BUILDER_VERSION, MAX_CHARS, MAX_RATIO, val_size]).encode())
    raw = {}
    for source in (*TEST_SETS, VAL_SOURCE, *TRAIN_SOURCES):  # every read first: a missing file fails fast
        pairs, blobs = read_source(source, files)
        raw[source.name] = pairs
        for path in source.files:
            fingerprint.update(f"{source.name}:{path}:".encode() + hashlib.sha256(blobs[path]).digest())
    fingerprint = fingerprint.hexdigest()
    manifest_path = out / "manifest.json"
    if not force and manifest_path.is_file():
        old = json.loads(manifest_path.read_text(encoding="utf-8"))
        if old.get("fingerprint") == fingerprint and all((out / f).is_file() for f in old.get("files", [])):
            return old

    held_out = set()
    tests = {}
    for source in TEST_SETS:
        pairs = [(en.strip(), de.strip()) for en, de in raw[source.name]]
        for number, (en, de) in enumerate(pairs, start=1):
            if not en or not de:
                raise DataError(f"test set {source.name} ({source.repo}: {', '.join(source.files)}): pair {number} "
                                f"has an empty side (expected a sentence on both the English and the German line)")
        held_out |= test_keys(pairs)
        tests[source.name] = dict(_entry(source, files), lines=len(pairs))
    needs_detok = any(s.tokenized for s in (VAL_SOURCE, *TRAIN_SOURCES))
    detok = Detokenizer() if needs_detok else None

    seen: set[tuple[str, str]] = set()
    val_clean, val_stats = clean_source(VAL_SOURCE, raw[VAL_SOURCE.name], held_out, seen, detok)
    val, val_rest = val_clean[:val_size], val_clean[val_size:]
    held_out |= test_keys(val)
    seen = {(match_key(en), match_key(de)) for en, de in val_rest}  # val itself is held out, not seen
    sources, train = [], []
    for source in TRAIN_SOURCES:
        kept, stats = clean_source(source, raw[source.name], held_out, seen, detok)
        train += kept
        sources.append(dict(_entry(source, files), role="train", **stats))
    # val's rest is cleaned against the final held-out set too: val's own sentences can repeat in it
    rest = [p for p in val_rest if match_key(p[0]) not in held_out and match_key(p[1]) not in held_out]
    val_stats.update(kept_val=len(val), kept_train=len(rest), removed_test_overlap=val_stats["removed_test_overlap"]
                     + len(val_rest) - len(rest), kept=len(val) + len(rest))
    sources.insert(0, dict(_entry(VAL_SOURCE, files), role="val (first pairs) + train (the rest)", **val_stats))
    train += rest

    out.mkdir(parents=True, exist_ok=True)
    written = []
    splits = {"train": train, "val": val}
    splits.update({n: [(en.strip(), de.strip()) for en, de in raw[n]] for n in WRITTEN_TEST_SETS})
    for split, pairs in splits.items():
        for lang, side in (("en", 0), ("de", 1)):
            write_lines(out / f"{split}.{lang}.gz", [p[side] for p in pairs])
            written.append(f"{split}.{lang}.gz")
    manifest = {"builder_version": BUILDER_VERSION, "fingerprint": fingerprint, "files": written,
                "train_pairs": len(train), "val_pairs": len(val),
                "filters": {"max_chars": MAX_CHARS, "max_ratio": MAX_RATIO, "val_size": val_size},
                "sources": sources, "test_sets": tests}
    tmp = manifest_path.with_name("manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, manifest_path)
    return manifest


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--mirrors", type=Path, help="folder of git mirrors, <owner>+<name>/repo (the fetch tool's)")
    where.add_argument("--from-dir", type=Path, help="folder of downloaded files, <owner>/<name>/<path>")
    ap.add_argument("--multi30k", type=Path, default=corpus_path("train", "en").parent,
                    help="folder with Multi30k's {train,val,test_2016_flickr,test_2017_flickr}.{en,de}.gz")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: $FASTDEC_GENERAL_EN_DE "
                    "or ~/.cache/pyfastdec/general-en-de)")
    ap.add_argument("--val-size", type=int, default=VAL_SIZE)
    ap.add_argument("--force", action="store_true", help="rewrite even if manifest.json is up to date")
    args = ap.parse_args(argv)
    if args.val_size < 1:
        ap.error(f"--val-size: {args.val_size} is not a positive number of pairs")
    out = args.out or general_dir()
    files = Files(mirrors=args.mirrors, folder=args.from_dir, multi30k=args.multi30k)
    try:
        manifest = build(files, out, args.val_size, args.force)
    except DataError as err:
        raise SystemExit(f"error: {err}") from None
    for s in manifest["sources"]:
        f = s["removed_filter"]
        print(f"{s['name']:<20} read {s['read']:>7,}  kept {s['kept']:>7,}  filter {sum(f.values()):>6,}  "
              f"test overlap {s['removed_test_overlap']:>6,}  dedup {s['removed_dedup']:>6,}")
    print(f"train {manifest['train_pairs']:,} pairs, val {manifest['val_pairs']:,} -> {out}")


if __name__ == "__main__":
    main()
