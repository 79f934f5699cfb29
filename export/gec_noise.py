"""Synthetic Ukrainian grammatical errors for GEC pretraining (issue 16).

    python -m export.gec_noise [--out DIR] [--copies 8]      # default DIR: gec_synth_dir()
    python -m export.gec_noise --recipe uk-gec-base-synth     # 12 copies, ~/.cache/pyfastdec/uk-gec-base-synth
    python -m export.train --recipe uk-gec-synth --out /work/runs/uk-gec-synth --minutes 150

Clean text: the corrected sides of UA-GEC train (export.uagec; the val and test
documents are never read). Each clean sentence is noised `--copies` times with a
different generator state into (noisy source, clean target) pairs; val is the UA-GEC val
split unchanged, so training selects on real errors. The error mix follows what
Ukrainian learner text gets wrong most (UA-GEC's annotation: punctuation first, then
spelling and agreement):

- punctuation (0.35): a comma deleted (the commonest real error), a comma inserted
  before a conjunction, a dash turned into a hyphen, final punctuation dropped, a space
  put before a comma or full stop;
- inflection (0.25): a word replaced by another form of its lemma with pymorphy3's
  Ukrainian dictionary (case, number, gender, person: agreement errors);
- spelling (0.20): a letter deleted, doubled, swapped with its neighbour, or replaced
  by a letter learners confuse (и/і, е/є, і/ї, г/ґ), the apostrophe dropped;
- function words (0.10): a preposition or conjunction deleted, or inserted;
- euphony (0.05): the alternants в/у, з/із/зі, і/й swapped;
- word order (0.05): two neighbouring words swapped.

Per sentence the number of errors is 0 with probability P_CLEAN (the model must learn
to copy; about half of UA-GEC needs no edit), else 1 + a geometric count (mean about 1.6).
"""
from __future__ import annotations

import argparse
import functools
import gzip
import io
import os
import random
import re
from pathlib import Path

P_CLEAN = 0.25
P_MORE = 0.4  # each further error after the first
ERRORS = (("punctuation", 0.35), ("inflection", 0.25), ("spelling", 0.20), ("function_word", 0.10),
          ("euphony", 0.05), ("order", 0.05))
CONFUSED = {"и": "і", "і": "и", "е": "є", "є": "е", "ї": "і", "ґ": "г", "г": "ґ", "щ": "ш", "ь": ""}
FUNCTION_WORDS = ("і", "й", "та", "в", "у", "з", "із", "на", "до", "що", "як", "не", "по", "за")
CONJUNCTIONS = ("що", "але", "який", "яка", "яке", "які", "коли", "бо", "щоб", "якщо", "а")
EUPHONY = {"в": "у", "у": "в", "з": "із", "із": "з", "зі": "з", "і": "й", "й": "і"}
TOKEN = re.compile(r"\w+(?:['’ʼ\-]\w+)*|\s+|[^\w\s]")


def gec_synth_dir(name: str = "uk-gec-synth") -> Path:
    """Where a synthetic corpus goes by default: $FASTDEC_GEC_SYNTH, else
    $XDG_CACHE_HOME (default ~/.cache)/pyfastdec/<name> (the recipe of that name reads it
    from there: uk-gec-synth, uk-gec-base-synth)."""
    env = os.environ.get("FASTDEC_GEC_SYNTH")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pyfastdec" / name


@functools.lru_cache(maxsize=1)
def _morph():
    try:
        import pymorphy3
    except ImportError as err:
        raise ImportError("export.gec_noise needs pymorphy3 and its Ukrainian dictionary: "
                          "pip install 'pyfastdec[export]' (or pymorphy3 pymorphy3-dicts-uk)") from err
    return pymorphy3.MorphAnalyzer(lang="uk")


@functools.lru_cache(maxsize=200_000)
def _other_forms(word: str) -> tuple[str, ...]:
    """Other spellings of the same lemma and part of speech (lowercase), most likely parse."""
    parses = _morph().parse(word.lower())
    if not parses or parses[0].tag.POS is None or parses[0].score < 0.3:
        return ()
    forms = {f.word for f in parses[0].lexeme if f.tag.POS == parses[0].tag.POS}
    forms.discard(word.lower())
    return tuple(sorted(forms))


def _match_case(form: str, like: str) -> str:
    return form.capitalize() if like[:1].isupper() else form


def _words(tokens: list[str]) -> list[int]:
    return [i for i, t in enumerate(tokens) if t[0].isalnum()]


def _punctuation(tokens: list[str], rng: random.Random) -> bool:
    commas = [i for i, t in enumerate(tokens) if t == ","]
    choice = rng.random()
    if commas and choice < 0.45:
        i = rng.choice(commas)
        del tokens[i]
        return True
    if choice < 0.65:
        spots = [i for i in range(1, len(tokens)) if tokens[i].lower() in CONJUNCTIONS and tokens[i - 1].isspace()
                 and tokens[i - 2:i - 1] != [","]]
        if spots:
            tokens.insert(rng.choice(spots) - 1, ",")
            return True
    if choice < 0.75:
        dashes = [i for i, t in enumerate(tokens) if t in ("—", "–")]
        if dashes:
            tokens[rng.choice(dashes)] = "-"
            return True
    if choice < 0.9 and tokens and tokens[-1] in ".!?":
        tokens.pop()
        return True
    marks = [i for i, t in enumerate(tokens) if t in (",", ".") and i > 0 and not tokens[i - 1].isspace()]
    if marks:
        tokens.insert(rng.choice(marks), " ")
        return True
    return False


def _inflection(tokens: list[str], rng: random.Random) -> bool:
    spots = [i for i in _words(tokens) if len(tokens[i]) > 2 and tokens[i].isalpha()]
    rng.shuffle(spots)
    for i in spots[:4]:
        forms = _other_forms(tokens[i])
        if forms:
            tokens[i] = _match_case(rng.choice(forms), tokens[i])
            return True
    return False


def _spelling(tokens: list[str], rng: random.Random) -> bool:
    spots = [i for i in _words(tokens) if len(tokens[i]) > 3]
    if not spots:
        return False
    i = rng.choice(spots)
    w = tokens[i]
    if "'" in w or "’" in w or "ʼ" in w:
        tokens[i] = re.sub(r"['’ʼ]", "", w, count=1)
        return True
    j = rng.randrange(1, len(w))  # keep the first letter: its case carries sentence starts
    op = rng.random()
    if op < 0.35 and w[j].lower() in CONFUSED:
        tokens[i] = w[:j] + _match_case(CONFUSED[w[j].lower()], w[j]) + w[j + 1:]
    elif op < 0.55:
        tokens[i] = w[:j] + w[j + 1:]
    elif op < 0.75:
        tokens[i] = w[:j] + w[j] + w[j:]
    elif j + 1 < len(w):
        tokens[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    else:
        tokens[i] = w[:j] + w[j] + w[j:]
    return tokens[i] != w


def _function_word(tokens: list[str], rng: random.Random) -> bool:
    spots = [i for i in _words(tokens) if tokens[i].lower() in FUNCTION_WORDS and i + 1 < len(tokens)]
    if spots and rng.random() < 0.6:
        i = rng.choice(spots)
        del tokens[i:i + 2]  # the word and the space after it
        return True
    words = _words(tokens)
    if not words:
        return False
    i = rng.choice(words)
    tokens[i:i] = [rng.choice(FUNCTION_WORDS), " "]
    return True


def _euphony(tokens: list[str], rng: random.Random) -> bool:
    spots = [i for i in _words(tokens) if tokens[i].lower() in EUPHONY]
    if not spots:
        return False
    i = rng.choice(spots)
    tokens[i] = _match_case(EUPHONY[tokens[i].lower()], tokens[i])
    return True


def _order(tokens: list[str], rng: random.Random) -> bool:
    words = _words(tokens)
    pairs = [(a, b) for a, b in zip(words, words[1:]) if b == a + 2 and tokens[a + 1] == " "]
    if not pairs:
        return False
    a, b = rng.choice(pairs)
    x, y = tokens[a], tokens[b]
    if a == words[0] and x[:1].isupper() and not x.isupper():  # the capital stays first
        x, y = x[:1].lower() + x[1:], y[:1].upper() + y[1:]
    tokens[a], tokens[b] = y, x
    return x != y


KINDS = {"punctuation": _punctuation, "inflection": _inflection, "spelling": _spelling,
         "function_word": _function_word, "euphony": _euphony, "order": _order}


def noise(sentence: str, rng: random.Random) -> str:
    """One noisy version of a clean sentence (possibly the sentence itself)."""
    if rng.random() < P_CLEAN:
        return sentence
    tokens = TOKEN.findall(sentence)
    n = 1
    while rng.random() < P_MORE and n < 6:
        n += 1
    kinds, weights = zip(*ERRORS)
    made = tries = 0
    while made < n and tries < 4 * n:
        tries += 1
        made += KINDS[rng.choices(kinds, weights)[0]](tokens, rng)
    noisy = "".join(tokens).strip()
    return noisy or sentence  # a sentence that was only a mark or a word stays as it was


def _gzip_text(path: Path) -> io.TextIOWrapper:
    """gzip with no timestamp in the header, so the same seed writes the same bytes."""
    return io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding="utf-8")


def write_corpus(clean: list[str], out: Path, copies: int, seed: int) -> int:
    """(noisy, clean) pairs, `copies` per clean sentence, to out/train.{src,tgt}.gz."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pairs = 0
    tmp_src, tmp_tgt = out / "train.src.gz.tmp", out / "train.tgt.gz.tmp"
    with _gzip_text(tmp_src) as fs, _gzip_text(tmp_tgt) as ft:
        for _ in range(copies):
            for sentence in clean:
                fs.write(noise(sentence, rng) + "\n")
                ft.write(sentence + "\n")
                pairs += 1
    tmp_src.rename(out / "train.src.gz")
    tmp_tgt.rename(out / "train.tgt.gz")
    return pairs


def main(argv=None) -> None:
    from .uagec import ensure_corpus

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="default: the --recipe's corpus folder")
    ap.add_argument("--copies", type=int, default=None, help="noisy copies per clean sentence (default: the "
                    "recipe's synth_copies, else 8)")
    ap.add_argument("--recipe", default="uk-gec-synth", help="the export.recipes recipe that trains on the corpus")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    from .recipes import get_recipe

    recipe = get_recipe(args.recipe)
    args.out = args.out or Path(recipe["corpus"])
    args.copies = args.copies or recipe.get("synth_copies", 8)
    corpus = ensure_corpus()
    with gzip.open(corpus / "train.tgt.gz", "rt", encoding="utf-8") as f:
        clean = sorted(set(f.read().splitlines()))  # two annotators' equal targets once
    pairs = write_corpus(clean, args.out, args.copies, args.seed)
    for split in ("val", "test"):  # real errors for selection and the final figure
        for side in ("src", "tgt"):
            target = args.out / f"{split}.{side}.gz"
            if not target.exists():
                target.write_bytes((corpus / f"{split}.{side}.gz").read_bytes())
    print(f"wrote {pairs} pairs from {len(clean)} clean sentences to {args.out}")


if __name__ == "__main__":
    main()
