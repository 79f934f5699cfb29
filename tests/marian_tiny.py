"""Tiny Marian-trained models and Marian's own greedy outputs, the test data of the
Marian .npz reader (tests/test_convert_marian_npz_in.py).

`python -m tests.marian_tiny [OUT_DIR]` (needs pymarian, the 'bench-marian' extra; ~1 min
on 2 cores) regenerates tests/data/marian_tiny/:
- vocab.spm: sentencepiece with Marian's own id conventions (eos 0, unk 1, no bos;
  marian-dev sentencepiece_vocab.cpp), 500 pieces, identity normalisation (keeps the file
  at ~7 KB), trained on the first 4,000 Multi30k en+de training pairs;
- post.npz: `marian --type transformer --transformer-decoder-autoreg rnn --dec-cell ssru
  --tied-embeddings-all`, post-norm (dan), relu: the Bergamot students' layout;
- pre.npz: the same with pre-norm (n / da / top n) and swish (Marian's default activation);
  both d=16, 4 heads, FFN 32, 2+2 layers, 300 updates;
- sources.txt: the first N_SENTENCES of Multi30k test_2016_flickr.en;
- {post,pre}.greedy.txt: pymarian.Translator greedy (beam 1, default options) on them;
- lex.s2t.gz: a lexical shortlist in Marian's text format ("target source prob"),
  p(t | s) = co-occurrence count / count(s) over the training pairs' pieces, the
  LEX_KEEP best per source; post.greedy.shortlist.txt: Marian greedy with
  `--shortlist lex.s2t.gz SHORTLIST_FIRST SHORTLIST_BEST` at batch 1 (Marian unions the
  shortlist over a batch, pyfastdec per sentence: equal at batch 1).
"""
from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("FASTDEC_DATA", ROOT.parent / "shared" / "data"))
OUT = ROOT / "tests" / "data" / "marian_tiny"
N_TRAIN, N_SENTENCES, VOCAB = 4000, 60, 500
LEX_KEEP, SHORTLIST_FIRST, SHORTLIST_BEST = 12, 20, 8
MODELS = {
    "post": "--transformer-ffn-activation relu --transformer-postprocess dan",
    "pre": "--transformer-ffn-activation swish --transformer-preprocess n --transformer-postprocess da "
           "--transformer-postprocess-top n",
}


def _lines(name: str, n: int) -> list[str]:
    with gzip.open(DATA / "multi30k" / name, "rt", encoding="utf-8") as f:
        return [next(f).strip() for _ in range(n)]


def train_vocab(work: Path) -> Path:
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        input=f"{work / 'train.en'},{work / 'train.de'}", model_prefix=str(work / "vocab"), vocab_size=VOCAB,
        bos_id=-1, eos_id=0, unk_id=1, normalization_rule_name="identity", character_coverage=1.0,
        model_type="unigram", shuffle_input_sentence=False, minloglevel=2)
    (work / "vocab.model").rename(work / "vocab.spm")
    return work / "vocab.spm"


def train_model(work: Path, name: str) -> Path:
    import pymarian

    cli = (f"--type transformer --dim-emb 16 --enc-depth 2 --dec-depth 2 --transformer-heads 4 "
           f"--transformer-dim-ffn 32 --transformer-decoder-autoreg rnn --dec-cell ssru --tied-embeddings-all "
           f"--train-sets {work}/train.en {work}/train.de --vocabs {work}/vocab.spm {work}/vocab.spm "
           f"--dim-vocabs {VOCAB} {VOCAB} --model {work}/{name}.npz --after-batches 300 --mini-batch 32 "
           f"--maxi-batch 10 --learn-rate 0.003 --disp-freq 100 --save-freq 1000 --valid-freq 100000 "
           f"--cpu-threads 1 --devices 0 --seed 1 --max-length 60 --overwrite --no-restore-corpus "
           f"--quiet {MODELS[name]}")
    if pymarian.Trainer(cli).train() != 0:
        raise RuntimeError(f"marian training of {name} failed")
    return work / f"{name}.npz"


def marian_greedy(npz: Path, vocab: Path, lines: list[str], shortlist: Path | None = None) -> list[str]:
    import pymarian

    cli = f"-m {npz} -v {vocab} {vocab} --beam-size 1 --cpu-threads 1 --mini-batch 1 --maxi-batch 1 --quiet"
    if shortlist is not None:
        cli += f" --shortlist {shortlist} {SHORTLIST_FIRST} {SHORTLIST_BEST}"
    return pymarian.Translator(cli).translate(lines)


def write_lex(vocab: Path, src_lines: list[str], tgt_lines: list[str], out: Path) -> Path:
    import collections
    import gzip as gz

    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(vocab))
    pair, single = collections.Counter(), collections.Counter()
    for s_line, t_line in zip(src_lines, tgt_lines):
        s_set, t_set = set(sp.encode(s_line, out_type=str)), set(sp.encode(t_line, out_type=str))
        single.update(s_set)
        pair.update((s, t) for s in s_set for t in t_set)
    rows = collections.defaultdict(list)
    for (s, t), c in pair.items():
        rows[s].append((c / single[s], t))
    with gz.open(out, "wt", encoding="utf-8") as f:
        for s in sorted(rows):
            for p, t in sorted(rows[s], reverse=True)[:LEX_KEEP]:
                f.write(f"{t} {s} {p:.6f}\n")
    return out


def add_shortlist(out: Path) -> None:
    """lex.s2t.gz and post.greedy.shortlist.txt beside the stored models."""
    lex = write_lex(out / "vocab.spm", _lines("train.en.gz", N_TRAIN), _lines("train.de.gz", N_TRAIN),
                    out / "lex.s2t.gz")
    sources = (out / "sources.txt").read_text(encoding="utf-8").splitlines()
    outputs = marian_greedy(out / "post.npz", out / "vocab.spm", sources, shortlist=lex)
    (out / "post.greedy.shortlist.txt").write_text("\n".join(outputs) + "\n", encoding="utf-8")


def generate(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    try:
        (work / "train.en").write_text("\n".join(_lines("train.en.gz", N_TRAIN)) + "\n", encoding="utf-8")
        (work / "train.de").write_text("\n".join(_lines("train.de.gz", N_TRAIN)) + "\n", encoding="utf-8")
        shutil.copyfile(train_vocab(work), out / "vocab.spm")
        sources = _lines("test_2016_flickr.en.gz", N_SENTENCES)
        (out / "sources.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
        for name in MODELS:
            shutil.copyfile(train_model(work, name), out / f"{name}.npz")
            outputs = marian_greedy(out / f"{name}.npz", out / "vocab.spm", sources)
            (out / f"{name}.greedy.txt").write_text("\n".join(outputs) + "\n", encoding="utf-8")
        add_shortlist(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--shortlist-only"]:  # keep the stored models, redo the shortlist data
        add_shortlist(OUT)
    else:
        print(generate(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
