"""Where the general-domain En-De data comes from (issue 32) and how each file becomes
(English, German) pairs. export/general_en_de.py cleans, deduplicates and writes them.

Every source is a public GitHub repository read at one revision, either from a git mirror
(`git --git-dir=<root>/<owner>+<name>/repo show HEAD:<path>`, the layout the `fetch`
tool leaves) or from a folder of downloaded files laid out as <root>/<owner>/<name>/<path>
(what raw.githubusercontent.com/<owner>/<name>/HEAD/<path> gives). Multi30k is read from
the team's data folder instead (export/data.py), where it already is.

A missing file raises DataError naming the source, the repository path and where it was
looked for, so a partial download says which file to fetch.
"""
from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .data import DataError

TESTSETS = "Helsinki-NLP/OPUS-MT-testsets"
MULTI30K = "multi30k/dataset"
WMT_TERMS = "WMT news test sets: free for research use (statmt.org)"


@dataclass(frozen=True)
class Source:
    """One corpus: `files` in `repo`, turned into pairs by the parser named `kind`:
    aligned: files are (en, de, en, de, ...) line-aligned text (gzip or plain);
    tatoeba: one tab-separated file, English then German (the Anki export of Tatoeba);
    bcontrast: WMT20 chat JSON, agent turns written En->De, customer turns De->En;
    mlqe: MLQE-PE tar.gz archives, English source (*.src) and German post-edit (*.pe).
    `tokenized`: Moses-tokenized text, detokenized by the builder."""
    name: str
    repo: str
    files: tuple[str, ...]
    licence: str
    kind: str = "aligned"
    tokenized: bool = False


def _news(*names: str) -> tuple[str, ...]:
    return tuple(f"testsets/eng-deu/{n}.{lang}" for n in names for lang in ("eng", "deu"))


# Training sources, in the order the builder deduplicates them (earlier ones keep a pair).
TRAIN_SOURCES: tuple[Source, ...] = (
    Source("newstest2008-2017", TESTSETS,
           _news("news-test2008", "newssyscomb2009", *(f"newstest{y}" for y in range(2009, 2018))), WMT_TERMS),
    Source("multi30k-train", MULTI30K, ("data/task1/raw/train.en.gz", "data/task1/raw/train.de.gz"),
           "research and education use (Flickr30k captions)"),
    Source("tatoeba-anki", "DarrenCarvalho/Language-Translation", ("data/deu.txt",),
           "CC BY 2.0 FR (Tatoeba, via manythings.org/anki)", kind="tatoeba"),
    Source("bcontrast", "Unbabel/BConTrasT", ("train.json", "dev.json"), "CC BY-SA 4.0", kind="bcontrast"),
    Source("mlqe-pe", "sheffieldnlp/mlqe-pe",
           tuple(f"data/post-editing/{s}/en-de-{s}.tar.gz" for s in ("train", "dev", "test")), "CC0 1.0",
           kind="mlqe", tokenized=True),
    Source("opennmt-wmt", "OpenNMT/OpenNMT-py",
           ("data/src-train.txt", "data/tgt-train.txt", "data/src-val.txt", "data/tgt-val.txt"),
           "MIT (repository); text from WMT training data, research use", tokenized=True),
    Source("stsb-multi-mt", "PhilipMay/stsb-multi-mt",
           ("data-raw/stsb-en-1.txt", "data-raw/stsb-de-1.txt", "data-raw/stsb-en-2.txt", "data-raw/stsb-de-2.txt"),
           "STSbenchmark's terms (German: DeepL machine translation)"),
)

# Validation: a held-out slice of this set; the rest of it goes to train.
VAL_SOURCE = Source("newstest2018", TESTSETS, _news("newstest2018"), WMT_TERMS)

# Test sets: no training pair may share a sentence with any of them. `write` ones are also
# written next to train/val (for export.train's test_sets), named by `name`.
TEST_SETS: tuple[Source, ...] = (
    Source("newstest2019", TESTSETS, _news("newstest2019"), WMT_TERMS),
    Source("flores200_devtest", TESTSETS,
           ("testsets/flores200_dataset/devtest/eng.devtest", "testsets/flores200_dataset/devtest/deu.devtest"),
           "CC BY-SA 4.0"),
    Source("tatoeba_test", TESTSETS,
           ("testsets/deu-eng/tatoeba-test-v2021-08-07.eng", "testsets/deu-eng/tatoeba-test-v2021-08-07.deu"),
           "CC BY 2.0 FR"),
    Source("newstest2020", TESTSETS, _news("newstest2020", "newstestB2020"), WMT_TERMS),
    Source("newstest2019-2020.de-en", TESTSETS,
           tuple(f"testsets/deu-eng/newstest{y}.{lang}" for y in (2019, 2020) for lang in ("eng", "deu")), WMT_TERMS),
    Source("newstest2021", TESTSETS,
           tuple(f"datasets/statmt/wmt21-news-systems/txt/{p}" for p in (
               "sources/newstest2021.en-de.src.en", "references/newstest2021.en-de.ref.A.de",
               "references/newstest2021.de-en.ref.A.en", "sources/newstest2021.de-en.src.de")), WMT_TERMS),
    Source("generaltest2022", TESTSETS,
           tuple(f"datasets/statmt/wmt22-news-systems/txt/{p}" for p in (
               "sources/generaltest2022.en-de.src.en", "references/generaltest2022.en-de.ref.A.de",
               "references/generaltest2022.de-en.ref.A.en", "sources/generaltest2022.de-en.src.de")), WMT_TERMS),
    Source("multi30k-test", MULTI30K,
           tuple(f"data/task1/raw/{s}.{lang}.gz" for s in ("val", "test_2016_flickr", "test_2017_flickr")
                 for lang in ("en", "de")), "research and education use (Flickr30k captions)"),
    Source("multi30k-test-extra", TESTSETS,
           _news("multi30k_test_2017_mscoco", "multi30k_test_2018_flickr"),
           "research and education use (Flickr30k / COCO captions)"),
)
WRITTEN_TEST_SETS = ("newstest2019", "flores200_devtest", "tatoeba_test")


class Files:
    """Reads repository files from git mirrors (`mirrors`) or a download folder (`folder`);
    Multi30k files by their base name from `multi30k` (the team's data folder)."""

    def __init__(self, mirrors: Path | None = None, folder: Path | None = None, multi30k: Path | None = None):
        if (mirrors is None) == (folder is None):
            raise ValueError("Files: give exactly one of mirrors= and folder=")
        self.mirrors, self.folder, self.multi30k = mirrors, folder, multi30k

    def _git_dir(self, repo: str) -> Path:
        return self.mirrors / repo.replace("/", "+") / "repo"

    def read(self, source: Source, path: str) -> bytes:
        if source.repo == MULTI30K:
            where = (self.multi30k or Path("<no multi30k folder>")) / Path(path).name
            if not where.is_file():
                raise DataError(f"source {source.name}: {source.repo}:{path} not found (looked for {where})")
            return where.read_bytes()
        if self.folder is not None:
            where = self.folder / source.repo / path
            if not where.is_file():
                raise DataError(f"source {source.name}: {source.repo}:{path} not found (looked for {where})")
            return where.read_bytes()
        git_dir = self._git_dir(source.repo)
        if not git_dir.is_dir():
            raise DataError(f"source {source.name}: no mirror of {source.repo} (looked for {git_dir}; "
                            f"fetch github:{source.repo})")
        done = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{path}"], capture_output=True)
        if done.returncode != 0:
            raise DataError(f"source {source.name}: {source.repo}:{path} not found at HEAD of {git_dir}")
        return done.stdout

    def revision(self, source: Source) -> str:
        """The mirror's commit, or where the files came from."""
        if source.repo == MULTI30K:
            return f"folder {self.multi30k}"
        if self.folder is not None:
            return f"folder {self.folder / source.repo}"
        done = subprocess.run(["git", f"--git-dir={self._git_dir(source.repo)}", "rev-parse", "HEAD"],
                              capture_output=True, text=True)
        return done.stdout.strip()


def _text(data: bytes, what: str) -> list[str]:
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{what}: invalid UTF-8 at byte {err.start}") from None
    # split("\n") keeps U+2028 and friends inside their line (str.splitlines would split there)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _aligned(src: Source, blobs: dict[str, bytes]) -> list[tuple[str, str]]:
    pairs = []
    for en_path, de_path in zip(src.files[::2], src.files[1::2]):
        en, de = _text(blobs[en_path], f"{src.repo}:{en_path}"), _text(blobs[de_path], f"{src.repo}:{de_path}")
        if len(en) != len(de):
            raise DataError(f"source {src.name}: {src.repo}:{en_path} has {len(en)} lines, {de_path} has {len(de)}")
        pairs += zip(en, de)
    return pairs


def _tatoeba(src: Source, blobs: dict[str, bytes]) -> list[tuple[str, str]]:
    pairs = []
    path = src.files[0]
    for number, line in enumerate(_text(blobs[path], f"{src.repo}:{path}"), start=1):
        cols = line.split("\t")
        if number == 1 and cols[:2] == ["1", "2"]:  # this copy's header row
            continue
        if len(cols) < 2:
            raise DataError(f"source {src.name}: {src.repo}:{path}:{number}: expected English<TAB>German")
        pairs.append((cols[0], cols[1]))
    return pairs


def _bcontrast(src: Source, blobs: dict[str, bytes]) -> list[tuple[str, str]]:
    pairs = []
    for path in src.files:
        try:
            dialogues = json.loads(blobs[path].decode("utf-8"))
            for turns in dialogues.values():
                for turn in turns:
                    speaker, source, target = turn["speaker"], turn["source"], turn["target"]
                    if speaker == "agent":
                        pairs.append((source, target))
                    elif speaker == "customer":  # the customer writes German; its English is the original
                        pairs.append((target, source))
                    else:
                        raise DataError(f"source {src.name}: {src.repo}:{path}: speaker {speaker!r}, "
                                        "expected 'agent' or 'customer'")
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            if isinstance(err, DataError):
                raise
            raise DataError(f"source {src.name}: {src.repo}:{path}: not BConTrasT JSON ({err!r})") from None
    return pairs


def _mlqe(src: Source, blobs: dict[str, bytes]) -> list[tuple[str, str]]:
    pairs = []
    for path in src.files:
        with tarfile.open(fileobj=io.BytesIO(blobs[path]), mode="r:gz") as tar:
            members = {Path(m.name).suffix: m for m in tar.getmembers() if m.isfile()}
            if ".src" not in members or ".pe" not in members:
                raise DataError(f"source {src.name}: {src.repo}:{path}: no *.src and *.pe members")
            en = _text(tar.extractfile(members[".src"]).read(), f"{path}:{members['.src'].name}")
            de = _text(tar.extractfile(members[".pe"]).read(), f"{path}:{members['.pe'].name}")
        if len(en) != len(de):
            raise DataError(f"source {src.name}: {src.repo}:{path}: {len(en)} sources, {len(de)} post-edits")
        pairs += zip(en, de)
    return pairs


PARSERS = {"aligned": _aligned, "tatoeba": _tatoeba, "bcontrast": _bcontrast, "mlqe": _mlqe}


def read_source(source: Source, files: Files) -> tuple[list[tuple[str, str]], dict[str, bytes]]:
    """The raw (en, de) pairs of a source, and the bytes they came from (for fingerprints)."""
    blobs = {path: files.read(source, path) for path in source.files}
    return PARSERS[source.kind](source, blobs), blobs
