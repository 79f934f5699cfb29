"""Reading the parallel corpora, strictly: the evaluation sets shipped in <repo>/data/,
the full corpora (training) from the team's shared data folder or $FASTDEC_DATA.

Every line of a source file must pair with the same line of its target file, so any
defect that could shift lines (a missing file, different line counts, an empty line,
bytes that are not UTF-8) raises DataError naming the file and the 1-based line number
instead of being skipped or repaired.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """$XDG_CACHE_HOME (an empty one counts as unset), default ~/.cache, then pyfastdec/:
    where built corpora and models that do not belong in the repository go."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pyfastdec"



def write_lines(path: Path, lines: list[str]) -> None:
    """One line per item, gzip with a fixed header (mtime 0, no name): a rebuild from the
    same lines writes the same bytes. Written to a temporary name and moved into place,
    so a killed build never leaves a half file under the final name."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))
    os.replace(tmp, path)

class DataError(ValueError):
    """A data file that cannot be used as is; the message names file and line."""


def data_roots() -> list[Path]:
    """Where corpora are looked up, in order: $FASTDEC_DATA alone if set; else the
    repository's data/ (the small evaluation sets, shipped: data/README.md) and then the
    team's shared folder <repo>/../shared/data (the training corpora, not in a clone)."""
    env = os.environ.get("FASTDEC_DATA")
    if env:
        return [Path(env)]
    return [REPO_ROOT / "data", REPO_ROOT.parent / "shared" / "data"]


def corpus_path(split: str, lang: str, corpus: str = "multi30k", root: Path | None = None) -> Path:
    """Path of e.g. multi30k/train.en.gz: under `root` if given, else in the first of
    data_roots() that has it (the last one if none has, so the error names it)."""
    name = Path(corpus) / f"{split}.{lang}.gz"
    if root is not None:
        return Path(root) / name
    roots = data_roots()
    return next((r / name for r in roots if (r / name).is_file()), roots[-1] / name)


def read_lines(path: str | Path) -> list[str]:
    """All lines of a (gzip or plain) UTF-8 text file, without line ends.

    Raises DataError for a missing file, invalid UTF-8 or an empty (whitespace-only) line.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    opener = gzip.open if path.suffix == ".gz" else open
    lines: list[str] = []
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise DataError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte {err.start})") from None
                text = text.rstrip("\r\n")
                if not text.strip():
                    raise DataError(f"{path}:{number}: empty line")
                lines.append(text)
    except (OSError, EOFError) as err:  # corrupt or truncated gzip stream
        raise DataError(f"{path}: cannot read ({err})") from None
    return lines


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """Sentence pairs from two line-aligned files; their line counts must match."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        short, n = (src_path, len(src)) if len(src) < len(tgt) else (tgt_path, len(tgt))
        raise DataError(
            f"{short}:{n + 1}: line missing — {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return list(zip(src, tgt))


def load_pairs(split: str, src_lang: str, tgt_lang: str, corpus: str = "multi30k",
               root: Path | None = None) -> list[tuple[str, str]]:
    """Sentence pairs of one split, e.g. load_pairs("train", "en", "de")."""
    return read_parallel(corpus_path(split, src_lang, corpus, root), corpus_path(split, tgt_lang, corpus, root))
