"""UA-GEC (Ukrainian grammatical error correction) as a line-aligned training corpus.

    python -m export.uagec                      # writes corpus_dir() (below)
    python -m export.uagec --out DIR --layer gec-only

Tests and benchmarks call ensure_corpus(), which extracts the gec-only corpus the first
time it is needed into $FASTDEC_UAGEC, else a per-user cache folder named for the
installed ua-gec version (~/.cache/pyfastdec/ua-gec-<version>), so a fresh clone needs
nothing but the package.

The `ua-gec` PyPI package ships its data inside the package (data/metadata.csv and
data/<layer>/<partition>/{source,target}-sentences/). One metadata row is a document with
one or more annotators; the sentence files are already split, one sentence per line, and
the source file of a document lines up with each annotator's target file line by line.
We read those files directly (not through ua_gec.Corpus) so that every defect can be
reported as file:line, and so that tests can build a tiny tree in the same layout.

Splits (the package has only train and test partitions, so dev is carved from train):
- documents in doc_id order; within a document, sentences in file order;
- val = the last train documents (by doc_id) whose first-annotator pairs add up to at least
  VAL_MIN_PAIRS; whole documents, so no document is split across train and val, and the
  other annotators' versions of a val document are dropped rather than left in train;
- train = every annotator's version of the remaining train documents (43 train documents
  have two annotators: two targets for the same source is legitimate GEC variation);
- test = the first annotator's version as the reference; every test document has a second
  annotator, whose targets go to test.tgt2.gz (aligned with test.src.gz) for 2-reference
  scoring.

Output files are gzip-compressed UTF-8 text, one sentence per line, named
<split>.{src,tgt}.gz because export.data.corpus_path (and so export.train) reads
<corpus>/<split>.<lang>.gz; gzip headers carry no timestamp, so the bytes are reproducible.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

import sacrebleu

from .data import DataError, cache_root, read_parallel, write_lines
from .vocab import train_vocab

VAL_MIN_PAIRS = 1000
# str.splitlines() splits on these as well as on \n; a sentence holding one would become
# two lines in some reader, so it is rejected like an embedded newline.
_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def corpus_dir() -> Path:
    """Where the extracted corpus lives: $FASTDEC_UAGEC, else
    $XDG_CACHE_HOME (default ~/.cache)/pyfastdec/ua-gec-<installed ua-gec version>."""
    env = os.environ.get("FASTDEC_UAGEC")
    if env:
        return Path(env)
    from importlib import metadata

    try:
        version = metadata.version("ua-gec")
    except metadata.PackageNotFoundError:
        version = "missing"  # ensure_corpus says what to install
    return cache_root() / f"ua-gec-{version}"


def ensure_corpus(out: Path | None = None, root: Path | None = None, val_min_pairs: int = VAL_MIN_PAIRS) -> Path:
    """The gec-only corpus folder (default corpus_dir()), extracted first from `root`
    (default: the installed ua-gec package's data) if it is not there yet (about 4 s).
    stats.json is written last, so a folder holding it is complete."""
    out = Path(out or corpus_dir())
    if (out / "stats.json").is_file():
        layer = json.loads((out / "stats.json").read_text(encoding="utf-8")).get("layer")
        if layer != "gec-only":
            raise DataError(f"{out}/stats.json: layer {layer!r}, expected 'gec-only' (the evaluated layer)")
        return out
    if root is None:
        try:
            root = package_data_root()
        except ImportError:
            raise DataError(f"{out}: no UA-GEC corpus, and the ua-gec package to build it from is not "
                            "installed (pip install ua-gec)") from None
    write_corpus(extract(root, "gec-only", val_min_pairs), out, "gec-only")
    return out


def package_data_root() -> Path:
    """The data folder inside the installed ua-gec package (metadata.csv is there)."""
    import ua_gec  # imported here: only extraction needs the package, not training or tests

    return Path(ua_gec.__file__).parent / "data"


@dataclass(frozen=True)
class Doc:
    doc_id: str
    partition: str
    annotators: tuple[int, ...]


def read_metadata(root: Path) -> list[Doc]:
    """Documents of metadata.csv in doc_id order."""
    path = root / "metadata.csv"
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    docs = []
    with path.open(encoding="utf-8", newline="") as f:
        for number, row in enumerate(csv.DictReader(f), start=2):  # line 1 is the header
            try:
                annotators = tuple(sorted(int(a) for a in row["annotator_id"].split()))
                doc = Doc(row["id"], row["partition"], annotators)
            except (KeyError, ValueError, TypeError) as err:
                raise DataError(f"{path}:{number}: bad metadata row ({err})") from None
            if not annotators or doc.partition not in ("train", "test"):
                raise DataError(f"{path}:{number}: bad metadata row (annotators {annotators}, "
                                f"partition {doc.partition!r})")
            docs.append(doc)
    return sorted(docs, key=lambda d: d.doc_id)


def read_sentences(path: Path) -> list[str]:
    """Lines of a sentence file; DataError naming file:line for anything that could misalign."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    raw = path.read_bytes()
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    lines = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte {err.start})") from None
        if not text.strip():
            raise DataError(f"{path}:{number}: empty line")
        bad = next((c for c in text if c in _LINE_BREAKS), None)
        if bad is not None:
            raise DataError(f"{path}:{number}: embedded line break U+{ord(bad):04X}")
        lines.append(text)
    return lines


def document_pairs(root: Path, layer: str, doc: Doc, annotator: int) -> list[tuple[str, str]]:
    """(source, corrected) sentence pairs of one document as corrected by one annotator."""
    part = root / layer / doc.partition
    src_path = part / "source-sentences" / f"{doc.doc_id}.src.txt"
    tgt_path = part / "target-sentences" / f"{doc.doc_id}.a{annotator}.txt"
    src, tgt = read_sentences(src_path), read_sentences(tgt_path)
    if len(src) != len(tgt):
        short, n = (src_path, len(src)) if len(src) < len(tgt) else (tgt_path, len(tgt))
        raise DataError(f"{short}:{n + 1}: line missing — {src_path} has {len(src)} lines, "
                        f"{tgt_path} has {len(tgt)}")
    return list(zip(src, tgt))


def extract(root: Path, layer: str = "gec-only", val_min_pairs: int = VAL_MIN_PAIRS) -> dict[str, list]:
    """{"train", "val", "test": [(src, tgt)], "test2": [tgt of the second test annotator]}."""
    docs = read_metadata(root)
    train_docs = [d for d in docs if d.partition == "train"]
    test_docs = [d for d in docs if d.partition == "test"]
    first = {d.doc_id: document_pairs(root, layer, d, d.annotators[0]) for d in train_docs}
    n_val, cut = 0, len(train_docs)
    while cut > 0 and n_val < val_min_pairs:
        cut -= 1
        n_val += len(first[train_docs[cut].doc_id])
    if cut == 0 and train_docs:
        raise DataError(f"{root}: only {n_val} train pairs, too few to hold out {val_min_pairs} for val")
    out: dict[str, list] = {"train": [], "val": [], "test": [], "test2": []}
    for d in train_docs[:cut]:
        out["train"] += first[d.doc_id]
        for a in d.annotators[1:]:
            out["train"] += document_pairs(root, layer, d, a)
    for d in train_docs[cut:]:
        out["val"] += first[d.doc_id]
    for d in test_docs:
        pairs = document_pairs(root, layer, d, d.annotators[0])
        out["test"] += pairs
        # Second reference: the last annotator's version, or the first again for a document
        # with one annotator, so test2 stays aligned with test.
        out["test2"] += [t for _, t in document_pairs(root, layer, d, d.annotators[-1])]
    return out


def unchanged_share(pairs: list[tuple[str, str]]) -> float:
    """Share of pairs whose correction is identical to the source (nothing to correct)."""
    return sum(s == t for s, t in pairs) / max(len(pairs), 1)


def write_corpus(splits: dict[str, list], out: Path, layer: str) -> dict:
    """Write <split>.src.gz / .tgt.gz (+ test.tgt2.gz), read them back strictly, write stats.json."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test"):
        write_lines(out / f"{split}.src.gz", [s for s, _ in splits[split]])
        write_lines(out / f"{split}.tgt.gz", [t for _, t in splits[split]])
        # Read back through the same strict reader training uses: a pair that would shift
        # lines fails here, at extraction time, not hours into a run.
        if read_parallel(out / f"{split}.src.gz", out / f"{split}.tgt.gz") != splits[split]:
            raise DataError(f"{out}/{split}.*.gz: read back differs from what was written")
    write_lines(out / "test.tgt2.gz", splits["test2"])
    read_parallel(out / "test.src.gz", out / "test.tgt2.gz")
    stats = {"layer": layer, "val_rule": f"last train documents by doc_id, >= {VAL_MIN_PAIRS} pairs"}
    for split in ("train", "val", "test"):
        stats[split] = {"pairs": len(splits[split]), "unchanged": round(unchanged_share(splits[split]), 4)}
    # The bar a correction model has to clear: BLEU of copying the input unchanged
    # (sacreBLEU 13a; test also against both annotators).
    for split in ("val", "test"):
        srcs, refs = [s for s, _ in splits[split]], [[t for _, t in splits[split]]]
        stats[split]["copy_bleu"] = round(sacrebleu.corpus_bleu(srcs, refs).score, 2)
    stats["test"]["copy_bleu_2ref"] = round(
        sacrebleu.corpus_bleu([s for s, _ in splits["test"]], [[t for _, t in splits["test"]], splits["test2"]]).score, 2)
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    return stats


def train_corpus_vocab(corpus: Path, out_path: Path, vocab_size: int = 8000) -> None:
    """The vocabulary export.train would build for this corpus (train sources then targets),
    for building it ahead of a run: export.train reuses an existing <out>/spm.model."""
    pairs = read_parallel(corpus / "train.src.gz", corpus / "train.tgt.gz")
    train_vocab([s for s, _ in pairs] + [t for _, t in pairs], out_path, vocab_size)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None,
                    help="default: $FASTDEC_UAGEC or ~/.cache/pyfastdec/ua-gec-<version>")
    ap.add_argument("--layer", default="gec-only", choices=["gec-only", "gec-fluency"])
    ap.add_argument("--root", type=Path, default=None, help="ua-gec data folder (default: the installed package's)")
    ap.add_argument("--vocab", type=Path, default=None, help="also train the 8k spm model to this path")
    args = ap.parse_args(argv)
    out = args.out or corpus_dir()
    stats = write_corpus(extract(args.root or package_data_root(), args.layer), out, args.layer)
    print(json.dumps(stats, indent=2))
    if args.vocab:
        args.vocab.parent.mkdir(parents=True, exist_ok=True)
        train_corpus_vocab(out, args.vocab)
        print(f"vocabulary -> {args.vocab}")


if __name__ == "__main__":
    main()
