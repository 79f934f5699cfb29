"""The benchmark's test sets, read with the project's strict readers, and their
tokenisation into the id lists every backend takes (sentencepiece ids + EOS)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MULTI30K = ("test_2016_flickr", "en", "de")


@dataclass
class TestSet:
    name: str
    sources: list[str]
    references: list[str]


class DataMissing(RuntimeError):
    """A test set that is not on this machine; the message says how to get it."""


def multi30k_test(limit: int | None = None) -> TestSet:
    """Multi30k test_2016_flickr En->De (shipped in data/multi30k), its first `limit` pairs."""
    from export.data import load_pairs

    split, src, tgt = MULTI30K
    pairs = load_pairs(split, src, tgt)[:limit]
    return TestSet(f"multi30k {split} {src}-{tgt}", [s for s, _ in pairs], [t for _, t in pairs])


def multi30k_val() -> list[tuple[str, str]]:
    """Calibration pairs for int8 En->De models written by the benchmark."""
    from export.data import load_pairs

    return load_pairs("val", MULTI30K[1], MULTI30K[2])


def uagec_dir() -> Path:
    """The UA-GEC gec-only corpus, extracted from the ua-gec package on first use
    ($FASTDEC_UAGEC, else a per-user cache: export/uagec.py)."""
    env = os.environ.get("FASTDEC_UAGEC")
    if env and (Path(env) / "stats.json").is_file():
        # Extracted already (stats.json is written last): export.uagec, which needs
        # sacrebleu, is not imported, so a machine without it (the device) reads the pairs.
        return Path(env)
    from export.data import DataError
    from export.uagec import ensure_corpus

    try:
        return ensure_corpus()
    except DataError as err:  # the ua-gec package is not installed
        raise DataMissing(str(err)) from None


def _uagec_pairs(split: str) -> list[tuple[str, str]]:
    from export.data import read_parallel

    root = uagec_dir()
    return read_parallel(root / f"{split}.src.gz", root / f"{split}.tgt.gz")


def uagec_test(limit: int | None = None) -> TestSet:
    """UA-GEC gec-only test (first annotator's corrections as references)."""
    pairs = _uagec_pairs("test")[:limit]
    return TestSet("ua-gec test (gec-only)", [s for s, _ in pairs], [t for _, t in pairs])


def uagec_val() -> list[tuple[str, str]]:
    return _uagec_pairs("val")


def tokenize(lines: list[str], spm_path: str | Path) -> list[list[int]]:
    """Source lines -> sentencepiece ids + EOS (what Backend.encode takes)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    return [sp.encode(line) + [sp.eos_id()] for line in lines]


def detokenize(outputs: list[list[int]], spm_path: str | Path) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    return [sp.decode(list(o)) for o in outputs]
